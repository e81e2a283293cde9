//! The YAML of test configs: a shared network plus the fields a test
//! varies.

use std::sync::Arc;

use crate::config::Config;

/// The documentation network (RFC 5737) the unit tests and fuzz targets
/// serve: server, subnet and gateway.
pub const DOC_NET: &str = "server_ip: 192.0.2.2\nsubnet: 192.0.2.0/24\ngateway: 192.0.2.1\n";

/// A /16 with about 65 000 pool addresses, for benchmarks that lease tens
/// of thousands of clients.
pub const WIDE_NET: &str = "server_ip: 10.20.0.1\nsubnet: 10.20.0.0/16\ngateway: 10.20.0.254\n\
                            range: { start: 10.20.1.0, end: 10.20.255.254 }\n\
                            dns_servers: [10.20.0.3]\n";

/// The reservation most tests hold: `02:00:00:00:00:aa` at 192.0.2.50 (a
/// block list, so that a test may add entries before it).
pub const WORKER_0: &str =
    "reservations:\n  - { mac: \"02:00:00:00:00:aa\", ip: 192.0.2.50, hostname: worker-0 }";

/// The YAML text of `net` plus `fields`, one top-level field each.
pub fn yaml(net: &str, fields: &[&str]) -> String {
    fields.iter().fold(net.to_owned(), |mut y, f| {
        y.push_str(f);
        y.push('\n');
        y
    })
}

/// The config of [`yaml`]`(net, fields)`.
///
/// # Panics
/// When the result is not a valid config: a fixture's mistake.
pub fn config(net: &str, fields: &[&str]) -> Arc<Config> {
    let yaml = yaml(net, fields);
    match Config::from_yaml(&yaml) {
        Ok(c) => Arc::new(c),
        Err(e) => panic!("test config {yaml:?}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_added_to_the_network() {
        let c = config(
            DOC_NET,
            &["range: { start: 192.0.2.100, end: 192.0.2.109 }", WORKER_0],
        );
        let whole = "server_ip: 192.0.2.2\nsubnet: 192.0.2.0/24\ngateway: 192.0.2.1\n\
                     range: { start: 192.0.2.100, end: 192.0.2.109 }\n\
                     reservations:\n  - { mac: \"02:00:00:00:00:aa\", ip: 192.0.2.50, hostname: worker-0 }\n";
        assert_eq!(*c, Config::from_yaml(whole).unwrap());
        assert_eq!(c.reservations.len(), 1);
    }

    #[test]
    #[should_panic(expected = "test config")]
    fn a_bad_fixture_names_its_yaml() {
        config(DOC_NET, &["range: nonsense"]);
    }
}
