//! What `oooi-dns check CONFIG` prints: per view, the answer to every name
//! the view owns, for A and AAAA, computed by the same [`answer`] function
//! the server uses, and what happens to every other name.

use std::fmt::Write as _;

use hickory_proto::rr::{LowerName, Name, RecordType};

use crate::answer::{Answer, answer};
use crate::config::{Config, View};

fn describe(a: &Answer) -> String {
    match a {
        Answer::Records { addrs, ttl } => {
            let list: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
            format!("{} ttl {ttl} (authoritative)", list.join(" "))
        }
        Answer::NoData { soa_owner, ttl } => format!("NODATA (SOA {soa_owner} ttl {ttl})"),
        Answer::NxDomain { soa_owner, ttl } => format!("NXDOMAIN (SOA {soa_owner} ttl {ttl})"),
        Answer::Forward => "forwarded".to_string(),
    }
}

fn line(out: &mut String, view: &View, shown: &str, name: &LowerName) {
    for t in [RecordType::A, RecordType::AAAA] {
        let _ = writeln!(
            out,
            "  {shown:<44} {:<5} {}",
            t.to_string(),
            describe(&answer(view, name, t))
        );
    }
}

/// The report printed by `oooi-dns check`.
pub fn report(config: &Config) -> String {
    let mut out = String::new();
    for v in &config.views {
        let listen: Vec<String> = v
            .listen
            .iter()
            .map(|a| a.to_string())
            .chain(
                v.pod_ip_ports
                    .iter()
                    .map(|p| format!("{}:{p}", crate::config::POD_IP)),
            )
            .collect();
        let clients = if v.source_subnets.is_empty() {
            "any client".to_string()
        } else {
            let s: Vec<String> = v.source_subnets.iter().map(|n| n.to_string()).collect();
            format!("clients {}", s.join(" "))
        };
        let _ = writeln!(out, "view {} on {} ({clients})", v.name, listen.join(" "));
        if v.hosts.is_empty() && v.zones.is_empty() {
            let _ = writeln!(out, "  no static names: everything is forwarded");
        }
        for name in v.hosts.keys() {
            line(&mut out, v, &name.to_string(), name);
        }
        for z in &v.zones {
            for name in z.records.keys() {
                line(&mut out, v, &name.to_string(), name);
            }
            // A sample unlisted name, to show what names not in the file get.
            if let Ok(other) = Name::from_ascii("oooi-check-unlisted")
                .and_then(|n| n.append_domain(&Name::from(&z.origin)))
            {
                let shown = format!("<other>.{}", z.origin);
                line(&mut out, v, &shown, &LowerName::new(&other));
            }
        }
    }
    let ups: Vec<String> = config
        .upstreams
        .servers
        .iter()
        .map(|a| a.to_string())
        .collect();
    let _ = writeln!(
        out,
        "every other name: forwarded to {}",
        if ups.is_empty() {
            "no upstream (SERVFAIL)".to_string()
        } else {
            ups.join(", ")
        }
    );
    for c in config.health.iter().flat_map(|h| h.checks.iter()) {
        let _ = writeln!(
            out,
            "health: {} answered while {} passes",
            c.address, c.target
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_shows_pod_address_listeners_and_health_checks() {
        let c = Config::parse(
            r#"
health:
  checks:
    - { address: 192.0.2.4, tcp: "10.128.0.7:8443" }
    - { address: 192.0.2.5, http: "http://proxy-2.oooi.svc:8080/ready" }
clusters:
  - { name: c1, base_domain: example.com, proxy: [192.0.2.4, 192.0.2.5] }
views:
  - { name: vlan, kind: vlan, listen: ["192.0.2.3:53"] }
  - { name: pod, kind: pod, listen: ["$(POD_IP):5353"] }
"#,
        )
        .expect("config");
        let r = report(&c);
        assert!(r.contains("view pod on $(POD_IP):5353 (any client)"), "{r}");
        assert!(
            r.contains("health: 192.0.2.4 answered while tcp://10.128.0.7:8443 passes"),
            "{r}"
        );
        assert!(
            r.contains(
                "health: 192.0.2.5 answered while http://proxy-2.oooi.svc:8080/ready passes"
            ),
            "{r}"
        );
    }
}
