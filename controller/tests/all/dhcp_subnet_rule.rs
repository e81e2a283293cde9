//! One table of subnet, address and pool cases, run against the three places
//! that judge them: the controller's Infra check, `render`, and the DHCP
//! server's config loading. All three must agree on every case.

use oooi_controller::plan::{Observed, plan_infra};
use oooi_controller::render::{self, RenderInput};
use oooi_controller::testing::InfraBuilder;
use serde_json::json;

/// The field a case is wrong in, as each side names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bad {
    Subnet,
    Gateway,
    ServerIp,
    RangeStart,
    RangeEnd,
}

impl Bad {
    fn infra_field(self) -> &'static str {
        match self {
            Bad::Subnet => "spec.networkConfig.cidr",
            Bad::Gateway => "spec.networkConfig.gateway",
            Bad::ServerIp => "spec.infraComponents.dhcp.serverIP",
            Bad::RangeStart => "spec.infraComponents.dhcp.rangeStart",
            Bad::RangeEnd => "spec.infraComponents.dhcp.rangeEnd",
        }
    }

    fn server_field(self) -> &'static str {
        match self {
            Bad::Subnet => "subnet",
            Bad::Gateway => "gateway",
            Bad::ServerIp => "server_ip",
            Bad::RangeStart => "range.start",
            Bad::RangeEnd => "range.end",
        }
    }
}

struct Case {
    cidr: &'static str,
    /// gateway, DHCP, DNS, proxy.
    infra: [&'static str; 4],
    range: (&'static str, &'static str),
    verdict: Option<Bad>,
}

const fn case(
    cidr: &'static str,
    infra: [&'static str; 4],
    range: (&'static str, &'static str),
    verdict: Option<Bad>,
) -> Case {
    Case {
        cidr,
        infra,
        range,
        verdict,
    }
}

const ADDRS: [&str; 4] = ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"];

const CASES: &[Case] = &[
    case("192.0.2.0/24", ADDRS, ("192.0.2.100", "192.0.2.199"), None),
    case("192.0.2.0/29", ADDRS, ("192.0.2.5", "192.0.2.6"), None),
    case(
        "10.0.0.0/8",
        ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"],
        ("10.1.0.0", "10.1.255.255"),
        None,
    ),
    // Host bits: refused, not truncated.
    case(
        "192.0.2.7/24",
        ADDRS,
        ("192.0.2.100", "192.0.2.199"),
        Some(Bad::Subnet),
    ),
    // Smaller than /29.
    case(
        "192.0.2.0/30",
        ["192.0.2.1", "192.0.2.2", "192.0.2.2", "192.0.2.2"],
        ("192.0.2.2", "192.0.2.2"),
        Some(Bad::Subnet),
    ),
    case(
        "192.0.2.0/31",
        ADDRS,
        ("192.0.2.1", "192.0.2.1"),
        Some(Bad::Subnet),
    ),
    case(
        "192.0.2.0",
        ADDRS,
        ("192.0.2.5", "192.0.2.6"),
        Some(Bad::Subnet),
    ),
    case(
        "192.0.2.0/33",
        ADDRS,
        ("192.0.2.5", "192.0.2.6"),
        Some(Bad::Subnet),
    ),
    // Addresses that are not host addresses of the subnet.
    case(
        "192.0.2.0/29",
        ADDRS,
        ("192.0.2.5", "192.0.2.7"),
        Some(Bad::RangeEnd),
    ),
    case(
        "192.0.2.0/24",
        ADDRS,
        ("192.0.2.0", "192.0.2.9"),
        Some(Bad::RangeStart),
    ),
    case(
        "192.0.2.0/24",
        ["192.0.2.1", "192.0.3.2", "192.0.2.3", "192.0.2.4"],
        ("192.0.2.100", "192.0.2.199"),
        Some(Bad::ServerIp),
    ),
    case(
        "192.0.2.0/24",
        ["192.0.2.255", "192.0.2.2", "192.0.2.3", "192.0.2.4"],
        ("192.0.2.100", "192.0.2.199"),
        Some(Bad::Gateway),
    ),
    // A reversed pool.
    case(
        "192.0.2.0/24",
        ADDRS,
        ("192.0.2.199", "192.0.2.100"),
        Some(Bad::RangeEnd),
    ),
];

/// The Infra of a case as the API server holds it (JSON), decoded as the
/// controller decodes what it reads: the subnet rule applies there (the
/// field is a `VlanNetwork`), the error naming the field.
fn infra_of(c: &Case) -> Result<oooi_controller::crd::Infra, String> {
    let [gw, dhcp, dns, proxy] = c.infra;
    let v = InfraBuilder::new()
        .cidr(c.cidr)
        .gateway(gw)
        .dhcp(json!({"serverIP": dhcp}))
        .dns(json!({"serverIP": dns}))
        .proxy(json!({"serverIP": proxy}))
        .dhcp_range(c.range.0, c.range.1)
        .json();
    oooi_controller::cache::Decoded::<oooi_controller::crd::Infra>::from_value(v)
        .expect("metadata decodes")
        .object
}

/// The standard Infra on the case's CIDR, as a manifest `render` reads.
fn infra_yaml(c: &Case) -> String {
    InfraBuilder::new().cidr(c.cidr).yaml()
}

/// The DHCP server's file for the same case, written by hand.
fn server_yaml(c: &Case) -> String {
    let [gw, dhcp, dns, proxy] = c.infra;
    format!(
        "server_ip: {dhcp}\nsubnet: {}\ngateway: {gw}\nrange: {{ start: {}, end: {} }}\nexcluded: [{dns}, {proxy}]\n",
        c.cidr, c.range.0, c.range.1
    )
}

#[test]
fn controller_render_and_server_agree_on_every_case() {
    for c in CASES {
        let label = format!("{} {:?} {:?}", c.cidr, c.infra, c.range);
        let i = match (infra_of(c), c.verdict) {
            (Ok(i), _) => i,
            // The subnet rule: the controller cannot read such an Infra
            // (and admission refuses it: `crd_admission`), and `render`
            // refuses the manifest, both naming the field.
            (Err(e), Some(Bad::Subnet)) => {
                assert!(
                    e.starts_with(&format!("{}: ", Bad::Subnet.infra_field())),
                    "{label}: {e}"
                );
                let mut input = RenderInput::default();
                let e = input
                    .add_yaml("infra.yaml", &infra_yaml(c))
                    .expect_err(&label);
                assert!(
                    format!("{e:#}").contains(&format!("{}: ", Bad::Subnet.infra_field())),
                    "{label}: {e:#}"
                );
                let e = oooi_dhcp_config::Config::from_yaml(&server_yaml(c)).expect_err(&label);
                assert_eq!(e.field, Bad::Subnet.server_field(), "{label}: {e}");
                continue;
            }
            (Err(e), verdict) => {
                panic!("{label}: expected {verdict:?}, the Infra is unreadable: {e}")
            }
        };

        // The controller's Infra check.
        let plan = plan_infra(&i, &[], &Observed::default());
        let errors: Vec<String> = plan.errors.iter().map(|e| e.to_string()).collect();
        match c.verdict {
            None => assert!(
                errors.is_empty() && plan.desired.is_some(),
                "{label}: {errors:?}"
            ),
            Some(bad) => assert!(
                errors
                    .iter()
                    .any(|e| e.starts_with(&format!("{}: ", bad.infra_field()))),
                "{label}: expected {}: {errors:?}",
                bad.infra_field()
            ),
        }

        // render, and the DHCP config it writes loads in the server.
        let input = RenderInput {
            infras: vec![i.clone()],
            ..RenderInput::default()
        };
        let out = render::render(&input, render::OFFLINE_PUSH_TOKEN).expect("render runs");
        let summary = out
            .objects
            .iter()
            .find(|o| o["kind"] == "PlanSummary")
            .expect("a plan summary");
        assert_eq!(summary["valid"], c.verdict.is_none(), "{label}: {summary}");
        let dhcp_file = out
            .files
            .iter()
            .find(|(p, _)| p.ends_with("vlan-dhcp.yaml"));
        match c.verdict {
            None => {
                let (_, text) = dhcp_file.expect("render writes the DHCP config");
                oooi_dhcp_config::Config::from_yaml(text)
                    .unwrap_or_else(|e| panic!("{label}: rendered config refused: {e}"));
            }
            Some(bad) => {
                assert!(dhcp_file.is_none(), "{label}: nothing rendered");
                let message = summary["degraded"]["message"].as_str().unwrap_or("");
                assert!(message.contains(bad.infra_field()), "{label}: {message}");
            }
        }

        // The server loading the same network from its own file.
        let loaded = oooi_dhcp_config::Config::from_yaml(&server_yaml(c));
        match c.verdict {
            None => assert!(loaded.is_ok(), "{label}: {loaded:?}"),
            Some(bad) => {
                let e = loaded.expect_err(&label);
                assert_eq!(e.field, bad.server_field(), "{label}: {e}");
            }
        }
    }
}
