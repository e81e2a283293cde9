//! Pure answers for owned names: given a view and a question, what to reply.
//! No sockets here, so every DNS semantic is testable directly.

use std::net::IpAddr;

use hickory_proto::rr::{LowerName, RecordType};

use crate::config::{RecordSet, View, Zone};

/// What the server should do with one question.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Authoritative answer with these addresses and TTL.
    Records {
        /// Addresses of the asked type.
        addrs: Vec<IpAddr>,
        /// TTL in seconds.
        ttl: u32,
    },
    /// The name exists but has no record of this type (NOERROR, empty, SOA).
    NoData {
        /// Owner of the SOA to put in the authority section.
        soa_owner: LowerName,
        /// Negative TTL.
        ttl: u32,
    },
    /// The name does not exist in an owned zone (NXDOMAIN with SOA).
    NxDomain {
        /// Zone apex for the SOA.
        soa_owner: LowerName,
        /// Negative TTL.
        ttl: u32,
    },
    /// Not owned by this view: ask the upstreams.
    Forward,
}

/// MNAME of the synthesized SOA of owned zones.
pub const SOA_MNAME: &str = "ns.oooi.invalid.";
/// RNAME of the synthesized SOA of owned zones.
pub const SOA_RNAME: &str = "hostmaster.oooi.invalid.";
/// SOA serial, refresh, retry and expire of owned zones (the minimum is the
/// negative TTL of the answer).
pub const SOA_TIMERS: [u32; 4] = [1, 3600, 600, 86_400];

/// Negative TTL of a zone: its smallest record TTL (30 s when empty).
pub fn negative_ttl(zone: &Zone) -> u32 {
    zone.records.values().map(|r| r.ttl).min().unwrap_or(30)
}

/// The answer of an existing name with `set` as its records.
pub fn from_set(set: &RecordSet, qtype: RecordType, owner: &LowerName) -> Answer {
    let addrs: Vec<IpAddr> = match qtype {
        RecordType::A => set.a.iter().map(|a| IpAddr::V4(*a)).collect(),
        RecordType::AAAA => set.aaaa.iter().map(|a| IpAddr::V6(*a)).collect(),
        RecordType::ANY => set
            .a
            .iter()
            .map(|a| IpAddr::V4(*a))
            .chain(set.aaaa.iter().map(|a| IpAddr::V6(*a)))
            .collect(),
        _ => Vec::new(),
    };
    if addrs.is_empty() {
        Answer::NoData {
            soa_owner: owner.clone(),
            ttl: set.ttl,
        }
    } else {
        Answer::Records {
            addrs,
            ttl: set.ttl,
        }
    }
}

/// Answers `name`/`qtype` from `view`. Matching is case-insensitive because
/// [`LowerName`] is lowercased.
pub fn answer(view: &View, name: &LowerName, qtype: RecordType) -> Answer {
    // Exact host aliases first: they own only their own name.
    if let Some(set) = view.hosts.get(name) {
        return from_set(set, qtype, name);
    }
    let Some(zone) = view.zones.iter().find(|z| z.origin.zone_of(name)) else {
        return Answer::Forward;
    };
    let neg_ttl = negative_ttl(zone);
    if let Some(set) = zone.records.get(name) {
        return from_set(set, qtype, &zone.origin);
    }
    if *name == zone.origin {
        return Answer::NoData {
            soa_owner: zone.origin.clone(),
            ttl: neg_ttl,
        };
    }
    // An empty non-terminal (e.g. `apps.<cluster>` under `*.apps`) exists.
    let is_ent = zone
        .records
        .keys()
        .any(|k| k != name && name.zone_of(k) && !k.is_wildcard() || is_wild_parent(k, name));
    // Closest enclosing wildcard, any depth below it.
    // `into_wildcard` replaces the first label, giving the wildcard at the
    // parent of `cur`.
    let mut cur = name.clone();
    while cur != zone.origin && zone.origin.zone_of(&cur) {
        if let Some(set) = zone.records.get(&cur.clone().into_wildcard()) {
            // Exact names were matched above, so they beat the wildcard.
            return from_set(set, qtype, &zone.origin);
        }
        cur = cur.base_name();
    }
    if is_ent {
        Answer::NoData {
            soa_owner: zone.origin.clone(),
            ttl: neg_ttl,
        }
    } else {
        Answer::NxDomain {
            soa_owner: zone.origin.clone(),
            ttl: neg_ttl,
        }
    }
}

/// `*.x` makes `x` itself exist (as an empty non-terminal).
fn is_wild_parent(record: &LowerName, name: &LowerName) -> bool {
    record.is_wildcard() && record.base_name() == *name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use hickory_proto::rr::Name;
    use std::str::FromStr;

    const CFG: &str = r#"
clusters:
  - name: c1
    base_domain: example.com
    proxy: 192.0.2.4
    apps_vip: 192.0.2.200
    names: [api, api-int, oauth, ignition, konnectivity, special.apps]
views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.2:5353"]
  - name: default
    kind: pod
    listen: ["127.0.0.3:5353"]
"#;

    fn q(view: &View, name: &str, t: RecordType) -> Answer {
        let mut n = Name::from_str(name).expect("name");
        n.set_fqdn(true);
        answer(view, &LowerName::new(&n), t)
    }

    fn ip(s: &str) -> Vec<IpAddr> {
        vec![s.parse().expect("ip")]
    }

    #[test]
    fn control_plane_names_answer_the_proxy_in_any_case() {
        let c = Config::parse(CFG).expect("cfg");
        for n in [
            "api.c1.example.com.",
            "API.C1.Example.COM.",
            "oauth.c1.example.com",
        ] {
            assert!(
                matches!(q(&c.views[0], n, RecordType::A), Answer::Records { addrs, .. } if addrs == ip("192.0.2.4")),
                "{n}"
            );
        }
    }

    #[test]
    fn wildcard_matches_any_depth_and_exact_beats_it() {
        let c = Config::parse(CFG).expect("cfg");
        let v = &c.views[0];
        for n in ["x.apps.c1.example.com.", "a.b.c.apps.c1.example.com."] {
            assert!(
                matches!(q(v, n, RecordType::A), Answer::Records { addrs, .. } if addrs == ip("192.0.2.200")),
                "{n}"
            );
        }
        assert!(
            matches!(q(v, "special.apps.c1.example.com.", RecordType::A), Answer::Records { addrs, .. } if addrs == ip("192.0.2.4"))
        );
    }

    #[test]
    fn nodata_for_missing_type_and_nxdomain_for_unknown_name() {
        let c = Config::parse(CFG).expect("cfg");
        let v = &c.views[0];
        assert!(matches!(
            q(v, "api.c1.example.com.", RecordType::AAAA),
            Answer::NoData { .. }
        ));
        assert!(matches!(
            q(v, "apps.c1.example.com.", RecordType::A),
            Answer::NoData { .. }
        ));
        assert!(matches!(
            q(v, "nope.c1.example.com.", RecordType::A),
            Answer::NxDomain { .. }
        ));
        assert_eq!(q(v, "example.com.", RecordType::A), Answer::Forward);
    }

    #[test]
    fn kubernetes_aliases_only_in_vlan_view() {
        let c = Config::parse(CFG).expect("cfg");
        for n in [
            "kubernetes.",
            "kubernetes.default.",
            "kubernetes.default.svc.",
            "kubernetes.default.svc.cluster.local.",
        ] {
            assert!(matches!(
                q(&c.views[0], n, RecordType::A),
                Answer::Records { .. }
            ));
            assert_eq!(q(&c.views[1], n, RecordType::A), Answer::Forward);
        }
        // Siblings of the aliases still forward.
        assert_eq!(
            q(
                &c.views[0],
                "other.default.svc.cluster.local.",
                RecordType::A
            ),
            Answer::Forward
        );
        // The pod view never sees VLAN addresses.
        assert_eq!(
            q(&c.views[1], "api.c1.example.com.", RecordType::A),
            Answer::Forward
        );
    }

    #[test]
    fn apps_reach_pods_through_the_internal_proxy_only_when_asked() {
        let with_proxy = CFG.replace("apps_vip:", "internal_proxy: 10.0.0.4\n    apps_vip:");
        let c = Config::parse(&with_proxy).expect("cfg");
        // Not asked: the pod view forwards apps names.
        assert_eq!(
            q(&c.views[1], "console.apps.c1.example.com.", RecordType::A),
            Answer::Forward
        );
        let asked = with_proxy.replace("apps_vip:", "apps_to_pods: true\n    apps_vip:");
        let c = Config::parse(&asked).expect("cfg");
        assert!(
            matches!(q(&c.views[1], "console.apps.c1.example.com.", RecordType::A), Answer::Records { addrs, .. } if addrs == ip("10.0.0.4"))
        );
        assert!(
            matches!(q(&c.views[1], "a.b.apps.c1.example.com.", RecordType::A), Answer::Records { addrs, .. } if addrs == ip("10.0.0.4"))
        );
        // The VLAN view keeps the VIP; the pod view never sees VLAN addresses.
        assert!(
            matches!(q(&c.views[0], "console.apps.c1.example.com.", RecordType::A), Answer::Records { addrs, .. } if addrs == ip("192.0.2.200"))
        );
        assert!(
            matches!(q(&c.views[1], "api.c1.example.com.", RecordType::A), Answer::Records { addrs, .. } if addrs == ip("10.0.0.4"))
        );
        // Without an internal proxy there is nothing to answer with.
        let bad = CFG.replace("apps_vip:", "apps_to_pods: true\n    apps_vip:");
        let err = Config::parse(&bad).expect_err("needs internal_proxy");
        assert!(
            err.to_string().contains("clusters[0].apps_to_pods"),
            "{err}"
        );
    }

    #[test]
    fn pod_view_answers_every_control_plane_name_with_the_internal_proxy() {
        let cfg = CFG.replace("apps_vip:", "internal_proxy: 10.0.0.4\n    apps_vip:");
        let c = Config::parse(&cfg).expect("cfg");
        let pod = &c.views[1];
        for n in [
            "api.c1.example.com.",
            "api-int.c1.example.com.",
            "oauth.c1.example.com.",
            "ignition.c1.example.com.",
            "konnectivity.c1.example.com.",
        ] {
            assert!(
                matches!(q(pod, n, RecordType::A), Answer::Records { addrs, .. } if addrs == ip("10.0.0.4")),
                "{n}"
            );
        }
        // Exact names only: the rest of the cluster's zone still forwards.
        assert_eq!(
            q(pod, "other.c1.example.com.", RecordType::A),
            Answer::Forward
        );
        assert_eq!(
            q(pod, "console.apps.c1.example.com.", RecordType::A),
            Answer::Forward
        );
    }

    #[test]
    fn pod_view_never_answers_the_kubernetes_aliases() {
        let cfg = CFG.replace("apps_vip:", "internal_proxy: 10.0.0.4\n    apps_vip:");
        let c = Config::parse(&cfg).expect("cfg");
        for n in [
            "kubernetes.",
            "kubernetes.default.",
            "kubernetes.default.svc.",
            "kubernetes.default.svc.cluster.local.",
        ] {
            assert_eq!(q(&c.views[1], n, RecordType::A), Answer::Forward, "{n}");
        }
    }

    #[test]
    fn vlan_aliases_follow_the_clusters_aliases_switch() {
        let off = CFG.replace("apps_vip:", "aliases: false\n    apps_vip:");
        let c = Config::parse(&off).expect("cfg");
        for n in [
            "kubernetes.",
            "kubernetes.default.",
            "kubernetes.default.svc.",
            "kubernetes.default.svc.cluster.local.",
        ] {
            assert_eq!(q(&c.views[0], n, RecordType::A), Answer::Forward, "{n}");
        }
        // The cluster's own names stay.
        assert!(matches!(
            q(&c.views[0], "api.c1.example.com.", RecordType::A),
            Answer::Records { .. }
        ));
    }
}
