//! The `oooi-dns` config file: its format ([`RawConfig`], YAML or JSON, with a
//! JSON schema for the `DNSServer` CRD) and the validated model ([`Config`])
//! that the answer logic runs on. The server and the controller both check a
//! config with [`Config::from_raw`], so they agree on what is valid.
//!
//! The file is parsed once, at the edge: serde turns each field into its type
//! ([`RawConfig::parse`]: addresses, `ip:port` pairs, listeners, CIDRs as
//! [`oooi_vocabulary::Cidr`], health-check targets), then
//! [`Config::from_raw`] checks the rules across fields. The controller builds
//! the same typed [`RawConfig`] from its own typed values. Every error is a
//! [`ConfigError`] (the shared [`oooi_vocabulary::FieldError`]) naming the
//! field path (for example `views[1].listen[0]`, `file` for I/O and syntax)
//! and the bad value.
//!
//! Two ways to describe static answers, which can be mixed:
//! - `clusters`: one entry per hosted cluster. It expands, per view `kind`,
//!   into the control-plane names, the `*.apps` wildcard and the
//!   `kubernetes[.default[.svc[.cluster.local]]]` aliases ([`clusters`]).
//! - `views[].zones`: explicit zones and records, for anything else.
//!
//! ```yaml
//! upstreams:
//!   servers: ["10.0.0.10:53"]
//! clusters:
//!   - name: c1
//!     base_domain: example.com
//!     proxy: 192.0.2.4
//!     apps_vip: 192.0.2.200
//! views:
//!   - name: vlan
//!     kind: vlan
//!     listen: ["192.0.2.3:53"]
//!   - name: default
//!     kind: pod
//!     listen: ["10.128.0.5:53"]
//! ```

#[macro_use]
mod text_serde;

mod addresses;
pub mod clusters;
mod error;
mod fields;
mod file;
mod model;
mod targets;
mod validate;

pub use addresses::{Addresses, IpPort, ListenAddress, POD_IP};
pub use clusters::DEFAULT_CONTROL_PLANE_NAMES;
pub use error::{ConfigError, FieldError};
pub use file::{
    RawChaos, RawCluster, RawConfig, RawHealth, RawHealthCheck, RawRecord, RawUpstreams, RawView,
    RawZone, ViewKind,
};
pub use model::{
    Chaos, CheckTarget, Config, Health, HealthCheck, RecordSet, Upstreams, View, Zone,
};
pub use targets::{HostPort, HttpUrl};
pub use validate::{DEFAULT_HTTP_PORT, DEFAULT_TTL, MAX_CHAOS_BYTES, MAX_TTL, upstream_server};

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddr};

    const SAMPLE: &str = r#"
upstreams:
  servers: ["127.0.0.1:5399"]
clusters:
  - name: c1
    base_domain: example.com
    proxy: 192.0.2.4
    internal_proxy: 10.0.0.4
    apps_vip: 192.0.2.200
views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.2:5353"]
  - name: default
    kind: pod
    listen: ["127.0.0.3:5353"]
"#;

    #[test]
    fn sample_config_expands_clusters_per_view_kind() {
        let c = Config::parse(SAMPLE).expect("valid");
        assert_eq!(c.views.len(), 2);
        let vlan = &c.views[0];
        assert_eq!(vlan.zones.len(), 1);
        assert_eq!(vlan.zones[0].records.len(), 6);
        assert_eq!(vlan.hosts.len(), 4);
        let pod = &c.views[1];
        assert!(pod.zones.is_empty());
        assert_eq!(
            pod.hosts.values().next().expect("alias").a.first().copied(),
            Some(Ipv4Addr::new(10, 0, 0, 4))
        );
        assert_eq!(c.upstreams.servers[0].port(), 5399);
    }

    #[test]
    fn the_aliases_are_the_routing_tables_aliases() {
        let c = Config::parse(SAMPLE).expect("valid");
        let names: Vec<String> = c.views[0].hosts.keys().map(|n| n.to_string()).collect();
        for alias in oooi_vocabulary::KUBERNETES_ALIASES {
            assert!(names.contains(&format!("{alias}.")), "{alias} in {names:?}");
        }
    }

    #[test]
    fn json_is_accepted() {
        let c =
            Config::parse(r#"{"views":[{"name":"v","listen":["127.0.0.1:53"]}]}"#).expect("json");
        assert_eq!(c.views[0].name, "v");
    }

    #[test]
    fn bad_listen_address_names_the_field() {
        let text = SAMPLE.replace("127.0.0.3:5353", "nope");
        let err = Config::parse(&text).expect_err("invalid").to_string();
        assert!(err.starts_with("views[1].listen[0]"), "{err}");
        assert!(err.contains("nope"), "{err}");
    }

    /// Every kind of typed field of the file, once.
    const TYPED: &str = r#"
http: 10.1.2.3:9153
upstreams:
  servers: ["127.0.0.1:5399", "10.0.0.10"]
health:
  checks:
    - address: 192.0.2.4
      tcp: "10.128.0.7:8443"
    - address: 192.0.2.5
      http: "http://p.oooi.svc:9901/ready"
clusters:
  - name: c1
    base_domain: example.com
    proxy: [192.0.2.4, 192.0.2.5]
    internal_proxy: 10.0.0.4
    apps_vip: 192.0.2.200
views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.2:5353", "$(POD_IP):5353"]
    source_subnets: ["127.0.0.0/8"]
    zones:
      - origin: lab.test
        records:
          - { name: www, a: ["192.0.2.10"], aaaa: ["2001:db8::10"] }
"#;

    #[test]
    fn a_bad_value_in_each_typed_field_names_the_field_and_the_value() {
        assert!(RawConfig::parse(TYPED).is_ok());
        // (text in the sample, bad text, field, the bad value quoted)
        let cases = [
            (
                "http: 10.1.2.3:9153",
                "http: 10.1.2.3:port",
                "http",
                "10.1.2.3:port",
            ),
            (
                "\"10.0.0.10\"",
                "\"resolver.example\"",
                "upstreams.servers[1]",
                "resolver.example",
            ),
            (
                "\"127.0.0.2:5353\"",
                "\"127.0.0.2:99999\"",
                "views[0].listen[0]",
                "127.0.0.2:99999",
            ),
            (
                "\"$(POD_IP):5353\"",
                "\"$(POD_IP):0\"",
                "views[0].listen[1]",
                "$(POD_IP):0",
            ),
            (
                "\"127.0.0.0/8\"",
                "\"127.0.0.1/8\"",
                "views[0].source_subnets[0]",
                "127.0.0.1/8",
            ),
            (
                "\"127.0.0.0/8\"",
                "\"127.0.0.0/33\"",
                "views[0].source_subnets[0]",
                "127.0.0.0/33",
            ),
            (
                "\"127.0.0.0/8\"",
                "\"loopback\"",
                "views[0].source_subnets[0]",
                "loopback",
            ),
            (
                "proxy: [192.0.2.4, 192.0.2.5]",
                "proxy: 192.0.2.450",
                "clusters[0].proxy",
                "192.0.2.450",
            ),
            (
                "proxy: [192.0.2.4, 192.0.2.5]",
                "proxy: [192.0.2.4, \"2001:db8::g\"]",
                "clusters[0].proxy[1]",
                "2001:db8::g",
            ),
            (
                "internal_proxy: 10.0.0.4",
                "internal_proxy: 10.0.0",
                "clusters[0].internal_proxy",
                "10.0.0",
            ),
            (
                "apps_vip: 192.0.2.200",
                "apps_vip: vip",
                "clusters[0].apps_vip",
                "vip",
            ),
            (
                "a: [\"192.0.2.10\"]",
                "a: [\"2001:db8::10\"]",
                "views[0].zones[0].records[0].a[0]",
                "2001:db8::10",
            ),
            (
                "aaaa: [\"2001:db8::10\"]",
                "aaaa: [\"192.0.2.10\"]",
                "views[0].zones[0].records[0].aaaa[0]",
                "192.0.2.10",
            ),
            (
                "address: 192.0.2.5",
                "address: 192.0.2.x",
                "health.checks[1].address",
                "192.0.2.x",
            ),
            (
                "tcp: \"10.128.0.7:8443\"",
                "tcp: \"10.128.0.7:http\"",
                "health.checks[0].tcp",
                "10.128.0.7:http",
            ),
            (
                "http: \"http://p.oooi.svc:9901/ready\"",
                "http: \"ftp://p/ready\"",
                "health.checks[1].http",
                "ftp://p/ready",
            ),
        ];
        for (from, to, field, value) in cases {
            let text = TYPED.replacen(from, to, 1);
            assert_ne!(text, TYPED, "{from} is in the sample");
            let err = Config::parse(&text).expect_err(to);
            assert_eq!(err.field, field, "{to}: {err}");
            assert!(err.message.contains(&format!("`{value}`")), "{to}: {err}");
        }
    }

    #[test]
    fn typed_fields_are_written_back_as_read() {
        let raw = RawConfig::parse(TYPED).expect("valid");
        let back = RawConfig::parse(&raw.to_yaml().expect("yaml")).expect("reparsed");
        assert_eq!(back, raw);
        let json = serde_json::to_value(&raw).expect("json");
        assert_eq!(json["http"], "10.1.2.3:9153");
        assert_eq!(
            json["upstreams"]["servers"],
            serde_json::json!(["127.0.0.1:5399", "10.0.0.10"])
        );
        assert_eq!(
            json["views"][0]["listen"],
            serde_json::json!(["127.0.0.2:5353", "$(POD_IP):5353"])
        );
        assert_eq!(json["views"][0]["source_subnets"][0], "127.0.0.0/8");
        assert_eq!(
            json["health"]["checks"][1]["http"],
            "http://p.oooi.svc:9901/ready"
        );
        // The defaults apply in the validated config, not in the file.
        let c = Config::from_raw(&raw).expect("valid");
        assert_eq!(c.upstreams.servers[1].to_string(), "10.0.0.10:53");
    }

    #[test]
    fn syntax_and_read_errors_name_the_file() {
        let err = RawConfig::parse("views: [").expect_err("syntax");
        assert_eq!(err.field, "file", "{err}");
        let err =
            Config::load(std::path::Path::new("/nonexistent/oooi-dns.yaml")).expect_err("missing");
        assert_eq!(err.field, "file", "{err}");
        assert!(err.message.contains("/nonexistent/oooi-dns.yaml"), "{err}");
    }

    #[test]
    fn source_subnets_are_networks_without_host_bits() {
        let c = Config::parse(TYPED).expect("valid");
        let net = c.views[0].source_subnets[0];
        assert!(net.contains("127.9.9.9".parse().expect("ip")));
        assert!(!net.contains("10.0.0.1".parse().expect("ip")));
        let one = TYPED.replace("\"127.0.0.0/8\"", "\"127.0.0.7\"");
        let c = Config::parse(&one).expect("a bare address is that address");
        assert_eq!(c.views[0].source_subnets[0].to_string(), "127.0.0.7/32");
        let err =
            Config::parse(&TYPED.replace("127.0.0.0/8", "127.0.0.1/8")).expect_err("host bits");
        assert!(err.message.contains("host bits"), "{err}");
    }

    #[test]
    fn bad_proxy_names_the_field() {
        let text = SAMPLE.replace("192.0.2.4", "192.0.2.999");
        let err = Config::parse(&text).expect_err("invalid").to_string();
        assert!(err.starts_with("clusters[0].proxy"), "{err}");
    }

    #[test]
    fn a_proxy_list_answers_every_replica_in_order() {
        let text = SAMPLE.replace("proxy: 192.0.2.4", "proxy: [192.0.2.5, 192.0.2.4]");
        let c = Config::parse(&text).expect("valid");
        let want = [Ipv4Addr::new(192, 0, 2, 5), Ipv4Addr::new(192, 0, 2, 4)];
        let vlan = &c.views[0];
        let api = vlan.zones[0]
            .records
            .iter()
            .find(|(n, _)| n.to_string() == "api.c1.example.com.")
            .expect("api")
            .1;
        assert_eq!(api.a, want);
        for set in vlan.hosts.values() {
            assert_eq!(set.a, want, "every alias names both replicas");
        }
        // The pod view still answers with the one internal address.
        assert_eq!(c.views[1].hosts.values().next().expect("name").a.len(), 1);
    }

    #[test]
    fn one_proxy_is_written_as_a_string_and_a_list_as_a_list() {
        let one: RawCluster =
            serde_saphyr::from_str("{name: c, base_domain: example.com, proxy: 192.0.2.4}")
                .expect("one");
        let ip = |s: &str| s.parse::<std::net::IpAddr>().expect("ip");
        assert_eq!(one.proxy, Addresses(vec![ip("192.0.2.4")]));
        let json = serde_json::to_value(&one).expect("json");
        assert_eq!(json["proxy"], "192.0.2.4");
        let two = RawCluster {
            proxy: Addresses(vec![ip("192.0.2.4"), ip("192.0.2.5")]),
            ..one
        };
        let json = serde_json::to_value(&two).expect("json");
        assert_eq!(json["proxy"], serde_json::json!(["192.0.2.4", "192.0.2.5"]));
        let back: RawCluster = serde_json::from_value(json).expect("round trip");
        assert_eq!(back, two);
    }

    #[test]
    fn proxy_lists_name_the_bad_entry_and_refuse_empty() {
        let text = SAMPLE.replace("proxy: 192.0.2.4", "proxy: [192.0.2.5, nope]");
        let err = Config::parse(&text).expect_err("invalid").to_string();
        assert!(err.starts_with("clusters[0].proxy[1]"), "{err}");
        let text = SAMPLE.replace("proxy: 192.0.2.4", "proxy: []");
        let err = Config::parse(&text).expect_err("invalid").to_string();
        assert!(err.contains("at least one address"), "{err}");
        let text = SAMPLE.replace("proxy: 192.0.2.4", "proxy: 4");
        let err = Config::parse(&text).expect_err("invalid").to_string();
        assert!(
            err.contains("an IP address or a list of IP addresses"),
            "{err}"
        );
    }

    #[test]
    fn unknown_field_is_rejected() {
        let text = SAMPLE.replace("apps_vip:", "apps_vipp:");
        assert!(Config::parse(&text).is_err());
    }

    #[test]
    fn record_outside_zone_is_rejected() {
        let text = r#"
views:
  - name: v
    listen: ["127.0.0.1:53"]
    zones:
      - origin: a.test
        records:
          - { name: "x.b.test.", a: ["1.2.3.4"] }
"#;
        let err = Config::parse(text).expect_err("invalid").to_string();
        assert!(
            err.starts_with("views[0].zones[0].records[0].name"),
            "{err}"
        );
    }

    #[test]
    fn freebind_listeners_follow_the_view_that_asks_for_them() {
        let text = r#"
views:
  - name: vlan
    freebind: true
    listen: ["192.0.2.3:53", "192.0.2.13:53"]
  - name: pods
    listen: ["10.128.0.3:5353", "192.0.2.3:53"]
"#;
        let c = Config::parse(text).expect("valid");
        let a = |s: &str| s.parse::<SocketAddr>().expect("addr");
        assert_eq!(
            c.listeners(),
            vec![
                (a("192.0.2.3:53"), true),
                (a("192.0.2.13:53"), true),
                (a("10.128.0.3:5353"), false),
            ]
        );
        let off =
            Config::parse(r#"{"views":[{"name":"v","listen":["127.0.0.1:53"]}]}"#).expect("valid");
        assert_eq!(off.listeners(), vec![(a("127.0.0.1:53"), false)]);
    }

    #[test]
    fn listen_addresses_are_distinct_in_order() {
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
        assert_eq!(c.listen_addresses(), vec![l2, l3]);
        assert_eq!(c.views[0].source_subnets[0].to_string(), "127.0.0.128/25");
    }

    #[test]
    fn chaos_strings_are_optional_and_bounded() {
        let c = Config::parse(SAMPLE).expect("valid");
        assert_eq!(c.chaos, Chaos::default());
        let with = format!("chaos: {{ version: \"oooi\" }}\n{SAMPLE}");
        let c = Config::parse(&with).expect("valid");
        assert_eq!(c.chaos.version.as_deref(), Some("oooi"));
        assert_eq!(c.chaos.hostname, None);
        let long = "x".repeat(256);
        let bad = format!("chaos: {{ hostname: \"{long}\" }}\n{SAMPLE}");
        let err = Config::parse(&bad).expect_err("too long").to_string();
        assert!(err.starts_with("chaos.hostname"), "{err}");
        assert!(err.contains("256 bytes"), "{err}");
    }

    #[test]
    fn default_http_port_applies_to_a_bare_address() {
        let c = Config::parse(&format!("http: 10.1.2.3\n{SAMPLE}")).expect("valid");
        assert_eq!(c.http, Some("10.1.2.3:9153".parse().expect("addr")));
        let err = Config::parse(&format!("http: any\n{SAMPLE}")).expect_err("bad");
        assert!(err.to_string().starts_with("http: `any`"), "{err}");
    }

    #[test]
    fn resolv_conf_adds_the_system_resolvers_after_the_listed_ones() {
        let system = "# generated\nsearch svc.cluster.local\nnameserver 172.30.0.10\nnameserver 127.0.0.1\nnameserver fe80::1%eth0\noptions ndots:5\n";
        let asked = SAMPLE.replace(
            "servers: [\"127.0.0.1:5399\"]",
            "servers: [\"127.0.0.1:5399\"]\n  resolv_conf: true",
        );
        let c = Config::parse(&asked)
            .expect("valid")
            .with_resolv_conf(system);
        let got: Vec<String> = c.upstreams.servers.iter().map(|a| a.to_string()).collect();
        assert_eq!(got, ["127.0.0.1:5399", "172.30.0.10:53", "127.0.0.1:53"]);
        // Not asked: the system's resolvers stay out.
        let c = Config::parse(SAMPLE)
            .expect("valid")
            .with_resolv_conf(system);
        assert_eq!(c.upstreams.servers.len(), 1);
    }

    /// The schema the CRD embeds: closed objects, required fields, and the
    /// view kinds as an enum.
    #[test]
    fn json_schema_describes_the_file() {
        let schema = serde_json::to_value(schemars::schema_for!(RawConfig)).expect("schema");
        assert_eq!(schema["additionalProperties"], false, "{schema}");
        assert_eq!(schema["required"], serde_json::json!(["views"]));
        let defs = &schema["$defs"];
        assert_eq!(
            defs["RawView"]["required"],
            serde_json::json!(["name", "listen"])
        );
        let kind = defs["ViewKind"].to_string();
        for k in ["vlan", "pod", "custom"] {
            assert!(kind.contains(k), "{kind}");
        }
        assert!(defs["RawChaos"]["properties"]["version"].is_object());
    }

    #[test]
    fn pod_ip_listeners_bind_the_pod_address_given_at_load() {
        let text = SAMPLE.replace("127.0.0.3:5353", "$(POD_IP):5353");
        let c = Config::parse(&text).expect("valid");
        assert!(c.views[1].listen.is_empty());
        assert_eq!(c.views[1].pod_ip_ports, vec![5353]);
        let err = c
            .unbound_pod_ip()
            .expect_err("no pod address yet")
            .to_string();
        assert!(err.starts_with("views[1].listen"), "{err}");
        assert!(err.contains("POD_IP"), "{err}");
        let c = c.with_pod_ip("10.128.0.5".parse().expect("ip"));
        assert!(c.unbound_pod_ip().is_ok());
        let want: SocketAddr = "10.128.0.5:5353".parse().expect("addr");
        assert_eq!(c.views[1].listen, vec![want]);
        // The default port, and IPv6 pod addresses.
        let text = SAMPLE.replace("127.0.0.3:5353", "$(POD_IP)");
        let c = Config::parse(&text)
            .expect("valid")
            .with_pod_ip("fd00::5".parse().expect("ip"));
        assert_eq!(c.views[1].listen[0].to_string(), "[fd00::5]:53");
        for bad in [
            "$(POD_IP):0",
            "$(POD_IP):x",
            "$(POD_IP)5353",
            "$(POD_IP):70000",
        ] {
            let text = SAMPLE.replace("127.0.0.3:5353", bad);
            let err = Config::parse(&text).expect_err(bad).to_string();
            assert!(err.starts_with("views[1].listen[0]"), "{bad}: {err}");
        }
    }

    const HEALTH: &str = r#"
health:
  checks:
    - address: 192.0.2.4
      tcp: "10.128.0.7:8443"
    - address: 192.0.2.5
      http: "http://oooi-proxy-2.oooi.svc:9901/ready?x=1"
    - address: "2001:db8::4"
      http: "http://[fd00::7]/ready"
"#;

    #[test]
    fn health_checks_parse_into_targets_with_defaults() {
        let c = Config::parse(&format!("{HEALTH}{SAMPLE}")).expect("valid");
        let h = c.health.expect("health");
        assert_eq!(h.interval, std::time::Duration::from_millis(1000));
        assert_eq!(h.timeout, std::time::Duration::from_millis(500));
        assert_eq!((h.fall, h.rise), (1, 1));
        let shown: Vec<String> = h.checks.iter().map(|c| c.target.to_string()).collect();
        assert_eq!(
            shown,
            [
                "tcp://10.128.0.7:8443",
                "http://oooi-proxy-2.oooi.svc:9901/ready?x=1",
                "http://[fd00::7]:80/ready",
            ]
        );
        assert_eq!(
            h.checks[1].target,
            CheckTarget::Http {
                host: "oooi-proxy-2.oooi.svc".to_string(),
                port: 9901,
                path: "/ready?x=1".to_string()
            }
        );
        assert!(Config::parse(SAMPLE).expect("valid").health.is_none());
    }

    #[test]
    fn bad_health_checks_name_the_field_and_value() {
        let cases = [
            (
                "tcp: \"10.128.0.7:8443\"",
                "tcp: \"10.128.0.7\"",
                "health.checks[0].tcp",
                "10.128.0.7",
            ),
            (
                "tcp: \"10.128.0.7:8443\"",
                "tcp: \"bad_host!:80\"",
                "health.checks[0].tcp",
                "bad_host!",
            ),
            (
                "tcp: \"10.128.0.7:8443\"",
                "tcp: \"h:0\"",
                "health.checks[0].tcp",
                "h:0",
            ),
            (
                "http: \"http://oooi-proxy-2.oooi.svc:9901/ready?x=1\"",
                "http: \"https://p/ready\"",
                "health.checks[1].http",
                "https://p/ready",
            ),
            (
                "http: \"http://oooi-proxy-2.oooi.svc:9901/ready?x=1\"",
                "http: \"http://u:p@h/\"",
                "health.checks[1].http",
                "credentials",
            ),
            (
                "address: 192.0.2.5",
                "address: 192.0.2.4",
                "health.checks[1].address",
                "192.0.2.4",
            ),
            (
                "address: 192.0.2.5",
                "address: nope",
                "health.checks[1].address",
                "nope",
            ),
        ];
        for (from, to, field, needle) in cases {
            let text = format!("{}{SAMPLE}", HEALTH.replacen(from, to, 1));
            let err = Config::parse(&text).expect_err(to).to_string();
            assert!(err.starts_with(field), "{to}: {err}");
            assert!(err.contains(needle), "{to}: {err}");
        }
        let both = HEALTH.replacen(
            "tcp: \"10.128.0.7:8443\"",
            "tcp: \"10.128.0.7:8443\"\n      http: \"http://h/\"",
            1,
        );
        let err = Config::parse(&format!("{both}{SAMPLE}"))
            .expect_err("both")
            .to_string();
        assert!(
            err.starts_with("health.checks[0]: needs exactly one"),
            "{err}"
        );
        for (field, line) in [
            ("health.interval_ms", "  interval_ms: 50\n"),
            (
                "health.timeout_ms",
                "  interval_ms: 1000\n  timeout_ms: 1500\n",
            ),
            ("health.fall", "  fall: 0\n"),
            ("health.rise", "  rise: 11\n"),
        ] {
            let text = format!(
                "{}{SAMPLE}",
                HEALTH.replacen("health:\n", &format!("health:\n{line}"), 1)
            );
            let err = Config::parse(&text).expect_err(field).to_string();
            assert!(err.starts_with(field), "{err}");
        }
    }

    #[test]
    fn stale_answers_and_backoff_are_bounded() {
        let c = Config::parse(SAMPLE).expect("valid");
        assert_eq!(
            c.upstreams.serve_stale,
            std::time::Duration::from_secs(86_400)
        );
        let with = |line: &str| SAMPLE.replace("  servers:", &format!("  {line}\n  servers:"));
        let c = Config::parse(&with("serve_stale_s: 0")).expect("valid");
        assert!(c.upstreams.serve_stale.is_zero());
        let err = Config::parse(&with("serve_stale_s: 604801")).expect_err("long");
        assert!(
            err.to_string().starts_with("upstreams.serve_stale_s"),
            "{err}"
        );
        let err = Config::parse(&with("down_backoff_ms: 0")).expect_err("zero");
        assert!(
            err.to_string().starts_with("upstreams.down_backoff_ms"),
            "{err}"
        );
    }

    #[test]
    fn json_schema_describes_health_checks() {
        let schema = serde_json::to_value(schemars::schema_for!(RawConfig)).expect("schema");
        let defs = &schema["$defs"];
        assert_eq!(
            defs["RawHealthCheck"]["required"],
            serde_json::json!(["address"])
        );
        for f in ["tcp", "http"] {
            assert!(
                defs["RawHealthCheck"]["properties"][f].is_object(),
                "{schema}"
            );
        }
        assert!(defs["RawHealth"]["properties"]["checks"].is_object());
        assert!(defs["RawUpstreams"]["properties"]["serve_stale_s"].is_object());
    }
}
