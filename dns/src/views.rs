//! View selection: which view answers a query, from the listener address it
//! arrived on and the client's address.

use std::net::{IpAddr, SocketAddr};

use crate::config::{Config, View};

/// Whether `view` serves a query that arrived on `local` from `client`: it
/// lists the listener, and its source subnets (if any) contain the client.
pub fn matches(view: &View, local: SocketAddr, client: IpAddr) -> bool {
    view.listen.contains(&local)
        && (view.source_subnets.is_empty()
            || view.source_subnets.iter().any(|n| n.contains(client)))
}

/// The view for a query that arrived on `local` from `client`: the first
/// that [`matches`].
pub fn select(config: &Config, local: SocketAddr, client: IpAddr) -> Option<&View> {
    config.views.iter().find(|v| matches(v, local, client))
}

/// The position in `config.views` of [`select`]'s choice.
pub fn select_index(config: &Config, local: SocketAddr, client: IpAddr) -> Option<usize> {
    config.views.iter().position(|v| matches(v, local, client))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_selection_uses_listener_then_source_subnet() {
        let text = r#"
views:
  - name: lab
    listen: ["127.0.0.2:53"]
    source_subnets: ["127.0.0.128/25"]
  - name: vlan
    listen: ["127.0.0.2:53"]
  - name: pods
    listen: ["127.0.0.3:53"]
"#;
        let c = Config::parse(text).expect("valid");
        let l2: SocketAddr = "127.0.0.2:53".parse().expect("addr");
        let l3: SocketAddr = "127.0.0.3:53".parse().expect("addr");
        let pick = |l, ip: &str| select(&c, l, ip.parse().expect("ip")).map(|v| v.name.as_str());
        assert_eq!(pick(l2, "127.0.0.200"), Some("lab"));
        assert_eq!(pick(l2, "127.0.0.1"), Some("vlan"));
        assert_eq!(pick(l3, "127.0.0.1"), Some("pods"));
        assert_eq!(
            select_index(&c, l3, "127.0.0.1".parse().expect("ip")),
            Some(2)
        );
        let other: SocketAddr = "127.0.0.9:53".parse().expect("addr");
        assert_eq!(pick(other, "127.0.0.1"), None);
        assert_eq!(c.listen_addresses(), vec![l2, l3]);
    }
}
