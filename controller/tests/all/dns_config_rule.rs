//! One table of the DNS values an Infra hands its DNS server (the upstream
//! resolvers), run against the three places that judge them: the
//! controller's Infra check, `render`, and the DNS server's config loading.
//! All three must agree on every case.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::plan_support;

use oooi_controller::plan::{Observed, plan_infra};
use plan_support::{infra, render_alone};

struct Case {
    /// One entry of `spec.networkConfig.dnsServers`.
    upstream: &'static str,
    valid: bool,
}

const fn case(upstream: &'static str, valid: bool) -> Case {
    Case { upstream, valid }
}

const CASES: &[Case] = &[
    case("10.0.0.10", true),
    case("10.0.0.10:5353", true),
    case("2001:db8::1", true),
    case("[2001:db8::1]:53", true),
    // Blanks around a value are ignored everywhere.
    case(" 10.0.0.10 ", true),
    // Nothing answers on port 0.
    case("10.0.0.10:0", false),
    case("[2001:db8::1]:0", false),
    case("10.0.0.300", false),
    case("dns.example.com", false),
    case("dns.example.com:53", false),
    case("10.0.0.10:99999", false),
    case("", false),
];

const INFRA_FIELD: &str = "spec.networkConfig.dnsServers[0]";
const SERVER_FIELD: &str = "upstreams.servers[0]";

/// The DNS server's file with the case's resolver, written by hand.
fn server_yaml(c: &Case) -> String {
    format!(
        "upstreams:\n  servers: [\"{}\"]\nviews:\n  - name: vlan\n    kind: vlan\n    listen: [\"192.0.2.3:53\"]\n",
        c.upstream
    )
}

#[test]
fn controller_render_and_server_agree_on_every_case() {
    for c in CASES {
        let label = format!("upstream `{}`", c.upstream);
        let mut i = infra("oooi", "vlan");
        i.spec.network_config.dns_servers = vec![c.upstream.to_string()];

        // The controller's Infra check.
        let plan = plan_infra(&i, &[], &Observed::default());
        let errors: Vec<String> = plan.errors.iter().map(|e| e.to_string()).collect();
        if c.valid {
            assert!(
                errors.is_empty() && plan.desired.is_some(),
                "{label}: {errors:?}"
            );
        } else {
            assert!(
                errors
                    .iter()
                    .any(|e| e.starts_with(&format!("{INFRA_FIELD}: "))),
                "{label}: expected {INFRA_FIELD}: {errors:?}"
            );
        }

        // render, and the DNS config it writes loads in the server.
        let (out, summary) = render_alone(&i);
        assert_eq!(summary["valid"], c.valid, "{label}: {summary}");
        let dns_file = out.files.iter().find(|(p, _)| p.ends_with("vlan-dns.yaml"));
        if c.valid {
            let (_, text) = dns_file.expect("render writes the DNS config");
            let loaded = oooi_dns_config::Config::parse(text)
                .unwrap_or_else(|e| panic!("{label}: rendered config refused: {e}"));
            assert_eq!(loaded.upstreams.servers.len(), 1, "{label}");
        } else {
            assert!(dns_file.is_none(), "{label}: nothing rendered");
            let message = summary["degraded"]["message"].as_str().unwrap_or("");
            assert!(message.contains(INFRA_FIELD), "{label}: {message}");
        }

        // The server loading the same resolver from its own file.
        let loaded = oooi_dns_config::Config::parse(&server_yaml(c));
        if c.valid {
            assert!(loaded.is_ok(), "{label}: {loaded:?}");
        } else {
            let e = loaded.expect_err(&label).to_string();
            assert!(e.starts_with(&format!("{SERVER_FIELD}: ")), "{label}: {e}");
        }
    }
}
