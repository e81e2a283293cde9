//! The pre-rollout check of a filter module.
//!
//! Before a new build of the oooi filter reaches any Envoy, the controller
//! runs it here, in `wasmtime`, the way Envoy would: it compiles the module,
//! checks the proxy-wasm ABI version and the exports, starts the table API
//! and a network plugin per listener port, pushes each live routing table
//! through the table API and reads back its generation and digest, then asks
//! the module for the decision of every route in the table and of a set of
//! refusal probes, and compares each answer with what
//! [`oooi_routes::Router`] decides. The first difference fails the check and
//! names it ([`Check`]).
//!
//! [`check_module`] is a pure function of the module bytes, the tables and
//! the [`CheckLimits`]: no I/O, no clock except the deadline. It never
//! panics on what the module does (a trap, an endless loop, a memory bomb
//! fail the check instead).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use oooi_routes::{
    Cidr, DYNAMIC_CLUSTER, Decision, KUBERNETES_ALIASES, Route, RouteMatch, RouteTable, Router,
    Upstream, build_id,
};
use sha2::{Digest, Sha256};

use crate::{Action, ConnectionOutcome, FilterHost, FilterModule, HostError, Limits, SharedData};

/// The token the check configures on the table API plugin.
const CHECK_TOKEN: &str = "oooi-rollout-check-token";
/// Listener ports every proxy has (a module must serve them with no routes).
const BASE_PORTS: [u16; 2] = [443, 6443];
/// Source addresses tried, in order, for the probes from an unknown source:
/// the first one no route of the port covers is used.
const STRANGERS: [&str; 5] = [
    "203.0.113.254",
    "198.51.100.254",
    "192.0.2.254",
    "100.64.255.254",
    "fd00:6f6f:6f69::fe",
];
/// An SNI no table routes (`.invalid` is reserved, RFC 2606).
const UNKNOWN_SNI: &str = "oooi-probe-unknown.invalid";

/// One step of the check. The first step that fails is the one reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    /// The bytes are a wasm module.
    Compile,
    /// It exports `proxy_abi_version_0_2_1`.
    AbiVersion,
    /// It exports every function the host calls, with the right signatures,
    /// and imports only what the host provides.
    Exports,
    /// It instantiates (start function, memory within the limit).
    Instantiate,
    /// The table API and the network plugins accept their configuration.
    Configure,
    /// The table API: not ready before a table, a push is accepted, and
    /// generation and digest read back equal the pushed table's.
    TableApi,
    /// Every route of the table is decided as [`Router`] decides it.
    RoutingDecision,
    /// Refusal probes (unknown SNI, a Kubernetes alias or no SNI from an
    /// unknown source) are decided as [`Router`] decides them.
    Refusal,
    /// The whole check took longer than [`CheckLimits::deadline`].
    Deadline,
}

impl Check {
    /// A CamelCase name, used as a condition reason and a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Check::Compile => "Compile",
            Check::AbiVersion => "AbiVersion",
            Check::Exports => "Exports",
            Check::Instantiate => "Instantiate",
            Check::Configure => "Configure",
            Check::TableApi => "TableApi",
            Check::RoutingDecision => "RoutingDecision",
            Check::Refusal => "Refusal",
            Check::Deadline => "Deadline",
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a module failed: the check and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckFailure {
    /// The failed step.
    pub check: Check,
    /// What differed, naming the table, route or probe.
    pub detail: String,
}

impl fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.check, self.detail)
    }
}

/// Bounds of one check run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckLimits {
    /// The whole check must finish within this time; checked between
    /// probes, while fuel bounds each single call into the module.
    pub deadline: Duration,
    /// Memory and fuel of each VM.
    pub vm: Limits,
}

impl Default for CheckLimits {
    fn default() -> Self {
        CheckLimits {
            deadline: Duration::from_secs(60),
            vm: Limits {
                max_memory_bytes: 256 << 20,
                // An endless loop fails within about a second per call.
                fuel_per_call: 2_000_000_000,
            },
        }
    }
}

/// What the check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// SHA-256 (hex) of the module bytes.
    pub module_sha256: String,
    /// The build id stamped in the module, when it has one slot.
    pub build_id: Option<String>,
    /// `proxy_abi_version_*` exports found.
    pub abi_versions: Vec<String>,
    /// Tables pushed (the built-in reference table first, then the given ones).
    pub tables: usize,
    /// Route decisions compared.
    pub routes_probed: usize,
    /// Refusal probes compared.
    pub refusals_probed: usize,
    /// Wall time of the check.
    pub elapsed: Duration,
    /// The first failed check; `None` when the module passed.
    pub failure: Option<CheckFailure>,
}

impl CheckReport {
    /// True when every check passed.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }
}

/// A small table exercising every kind of match and upstream, checked
/// before the live tables so that a module is judged even where no proxy
/// has routes yet.
pub fn reference_table() -> RouteTable {
    let address = |host: &str, port| Upstream::Address {
        host: host.into(),
        port,
    };
    let source = |cidr: &str| RouteMatch::Source(cidr.parse::<Cidr>().expect("a CIDR literal"));
    let route = |port, matches, upstream| Route {
        port,
        matches,
        upstream,
        owner: Some("oooi/reference".into()),
    };
    let c1 = address("kube-apiserver.clusters-c1.svc.cluster.local", 6443);
    let c2 = address("kube-apiserver.clusters-c2.svc.cluster.local", 6443);
    RouteTable {
        generation: 1,
        routes: vec![
            route(
                6443,
                RouteMatch::Sni("api.c1.example.com".into()),
                c1.clone(),
            ),
            route(
                6443,
                RouteMatch::Sni("api.c2.example.com".into()),
                c2.clone(),
            ),
            route(6443, source("192.0.2.10/32"), c1),
            route(6443, source("192.0.2.16/28"), c2.clone()),
            route(6443, source("2001:db8::/64"), c2),
            route(
                443,
                RouteMatch::Sni("oauth.c1.example.com".into()),
                address("oauth-openshift.clusters-c1.svc.cluster.local", 6443),
            ),
            route(
                443,
                RouteMatch::Sni("*.apps.c1.example.com".into()),
                address("192.0.2.200", 443),
            ),
            route(
                443,
                RouteMatch::Sni("*.c1.example.com".into()),
                Upstream::Cluster("c1_other".into()),
            ),
            route(
                22623,
                RouteMatch::SniFrom {
                    sni: "api-int.c1.example.com".into(),
                    sources: vec![
                        "192.0.2.10/32".parse().expect("a CIDR literal"),
                        "198.51.100.0/24".parse().expect("a CIDR literal"),
                    ],
                },
                address("ignition-server.clusters-c1.svc.cluster.local", 443),
            ),
        ],
    }
}

/// Runs every check of `wasm` against the [`reference_table`] and then each
/// of `tables` (each in a fresh VM, as a fresh Envoy would hold it).
pub fn check_module(wasm: &[u8], tables: &[RouteTable], limits: &CheckLimits) -> CheckReport {
    let started = Instant::now();
    let mut report = CheckReport {
        module_sha256: hex::encode(Sha256::digest(wasm)),
        build_id: build_id::read(wasm),
        abi_versions: Vec::new(),
        tables: 0,
        routes_probed: 0,
        refusals_probed: 0,
        elapsed: Duration::ZERO,
        failure: None,
    };
    let result = run(wasm, tables, limits, started, &mut report);
    report.failure = result.err();
    report.elapsed = started.elapsed();
    report
}

fn fail<T>(check: Check, detail: impl Into<String>) -> Result<T, CheckFailure> {
    Err(CheckFailure {
        check,
        detail: detail.into(),
    })
}

/// Maps an error of the module at load to the check it fails.
fn load_failure(e: HostError) -> CheckFailure {
    let check = match &e {
        HostError::Compile(_) => Check::Compile,
        HostError::AbiVersion { .. } => Check::AbiVersion,
        HostError::MissingExports(_)
        | HostError::ExportSignature { .. }
        | HostError::UnsupportedImport { .. } => Check::Exports,
        _ => Check::Instantiate,
    };
    CheckFailure {
        check,
        detail: e.to_string(),
    }
}

fn run(
    wasm: &[u8],
    tables: &[RouteTable],
    limits: &CheckLimits,
    started: Instant,
    report: &mut CheckReport,
) -> Result<(), CheckFailure> {
    let compiled = FilterModule::compile(wasm).map_err(load_failure)?;
    report.abi_versions = compiled.abi_report().abi_versions.clone();
    let reference = reference_table();
    let all = std::iter::once(("the reference table".to_owned(), &reference)).chain(
        tables
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("table {i} (generation {})", t.generation), t)),
    );
    for (name, table) in all {
        let mut vm = Vm::start(&compiled, table, limits.vm)?;
        report.tables += 1;
        vm.table_api(table, report.build_id.as_deref())
            .map_err(|e| with_table(e, &name))?;
        let router = Router::new(table.clone());
        for (i, route) in table.routes.iter().enumerate() {
            for probe in route_probes(route) {
                deadline(started, limits)?;
                vm.compare(&router, &probe, Check::RoutingDecision)
                    .map_err(|e| with_table(e, &format!("{name}, routes[{i}]")))?;
                report.routes_probed += 1;
            }
        }
        for probe in refusal_probes(&router, &vm.ports) {
            deadline(started, limits)?;
            vm.compare(&router, &probe, Check::Refusal)
                .map_err(|e| with_table(e, &name))?;
            report.refusals_probed += 1;
        }
    }
    Ok(())
}

fn with_table(mut e: CheckFailure, table: &str) -> CheckFailure {
    e.detail = format!("{table}: {}", e.detail);
    e
}

fn deadline(started: Instant, limits: &CheckLimits) -> Result<(), CheckFailure> {
    if started.elapsed() > limits.deadline {
        return fail(
            Check::Deadline,
            format!("the check took longer than {:?}", limits.deadline),
        );
    }
    Ok(())
}

/// One connection to decide.
#[derive(Debug, Clone)]
struct Probe {
    port: u16,
    sni: Option<String>,
    source: IpAddr,
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sni {
            Some(sni) => write!(f, "port {} SNI {sni:?} from {}", self.port, self.source),
            None => write!(f, "port {} without SNI from {}", self.port, self.source),
        }
    }
}

/// The connections that exercise one route: its exact name, a name below
/// its wildcard, or (for a source route) no SNI and every Kubernetes alias
/// from the first address of its network (for an alias-source route, the
/// aliases and no SNI, which it must not carry).
fn route_probes(route: &Route) -> Vec<Probe> {
    let stranger: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7));
    match &route.matches {
        RouteMatch::Sni(name) => {
            let sni = match name.strip_prefix("*.") {
                Some(suffix) => format!("oooi-probe.{suffix}"),
                None => name.clone(),
            };
            vec![Probe {
                port: route.port,
                sni: Some(sni),
                source: stranger,
            }]
        }
        RouteMatch::SniFrom { sni, sources } => {
            // From each allowed network, and from a stranger (refused as
            // `source_not_allowed` unless it is allowed too).
            let sni = match sni.strip_prefix("*.") {
                Some(suffix) => format!("oooi-probe.{suffix}"),
                None => sni.clone(),
            };
            sources
                .iter()
                .map(|c| c.addr())
                .chain(std::iter::once(stranger))
                .map(|source| Probe {
                    port: route.port,
                    sni: Some(sni.clone()),
                    source,
                })
                .collect()
        }
        RouteMatch::Source(cidr) | RouteMatch::AliasSource(cidr) => {
            let source = cidr.addr();
            std::iter::once(None)
                .chain(KUBERNETES_ALIASES.iter().map(|a| Some((*a).to_owned())))
                .map(|sni| Probe {
                    port: route.port,
                    sni,
                    source,
                })
                .collect()
        }
    }
}

/// Per port: an unknown SNI, and a Kubernetes alias and no SNI from a source
/// no route of the port covers (the first of [`STRANGERS`] that is free).
fn refusal_probes(router: &Router, ports: &BTreeMap<u16, u32>) -> Vec<Probe> {
    let mut out = Vec::new();
    for &port in ports.keys() {
        let strangers: Vec<IpAddr> = STRANGERS.iter().filter_map(|s| s.parse().ok()).collect();
        let source = strangers
            .iter()
            .copied()
            .find(|ip| matches!(router.decide(port, None, Some(*ip)), Decision::Refuse(_)))
            .unwrap_or(strangers[0]);
        for sni in [
            Some(UNKNOWN_SNI.to_owned()),
            Some("kubernetes.default.svc".to_owned()),
            None,
        ] {
            out.push(Probe { port, sni, source });
        }
    }
    out
}

/// What Envoy would do with a connection the module decided.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// Forwarded to this upstream.
    Forward(Target),
    /// Closed without routing.
    Refuse,
    /// Anything else (e.g. routed and closed, paused without closing, or
    /// filter state Envoy would not route by).
    Odd(String),
}

/// Where Envoy sends a forwarded connection, from the filter state the
/// module set (the contract between the filter and the rendered Envoy
/// config, see `oooi-envoy`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// `envoy.tcp_proxy.cluster` names a static cluster, and the dynamic
    /// host is empty so that `sni_dynamic_forward_proxy` steps aside.
    Cluster(String),
    /// The dynamic-forward-proxy cluster with this host and port; the port
    /// is `sni_dynamic_forward_proxy`'s default, the listener's own, when
    /// `envoy.upstream.dynamic_port` is not set.
    Address { host: String, port: u16 },
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::Forward(Target::Cluster(name)) => write!(f, "forward to cluster {name:?}"),
            Seen::Forward(Target::Address { host, port }) => {
                write!(f, "forward to {host}:{port}")
            }
            Seen::Refuse => f.write_str("refuse"),
            Seen::Odd(what) => f.write_str(what),
        }
    }
}

/// What the router's decision must look like to Envoy.
fn expected(decision: &Decision<'_>, router: &Router) -> Seen {
    match decision {
        Decision::Refuse(_) => Seen::Refuse,
        Decision::Forward { upstream, .. } => match router.upstreams().get(*upstream) {
            Some(Upstream::Cluster(name)) => Seen::Forward(Target::Cluster(name.clone())),
            Some(Upstream::Address { host, port }) => Seen::Forward(Target::Address {
                host: host.clone(),
                port: *port,
            }),
            None => Seen::Odd("the router named no upstream".into()),
        },
    }
}

const CLUSTER_KEY: &str = "envoy.tcp_proxy.cluster";
const HOST_KEY: &str = "envoy.upstream.dynamic_host";
const PORT_KEY: &str = "envoy.upstream.dynamic_port";

/// Where Envoy would send a connection on `listener_port` with this filter
/// state, or why it would not route it as intended.
fn target(state: &BTreeMap<String, String>, listener_port: u16) -> Result<Target, String> {
    if let Some(k) = state
        .keys()
        .find(|k| ![CLUSTER_KEY, HOST_KEY, PORT_KEY].contains(&k.as_str()))
    {
        return Err(format!(
            "filter state {k:?}, which the Envoy config does not use"
        ));
    }
    let cluster = state
        .get(CLUSTER_KEY)
        .ok_or("no cluster named: tcp_proxy would take its unrouted placeholder")?;
    let host = state
        .get(HOST_KEY)
        .ok_or("no dynamic host: sni_dynamic_forward_proxy would resolve the SNI itself")?;
    let port = state.get(PORT_KEY);
    if cluster != DYNAMIC_CLUSTER {
        return match (host.is_empty(), port) {
            (true, None) => Ok(Target::Cluster(cluster.clone())),
            _ => Err(format!(
                "cluster {cluster:?} with a dynamic host {host:?} or port {port:?}"
            )),
        };
    }
    if host.is_empty() {
        return Err("the dynamic-forward-proxy cluster without a host".into());
    }
    let port = match port {
        None => listener_port,
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| format!("dynamic port {p:?} is not a port"))?,
    };
    Ok(Target::Address {
        host: host.clone(),
        port,
    })
}

fn seen(o: &ConnectionOutcome, listener_port: u16) -> Seen {
    match (o.action, o.closed, o.filter_state.is_empty()) {
        (Action::Continue, false, false) => match target(&o.filter_state, listener_port) {
            Ok(t) => Seen::Forward(t),
            Err(why) => Seen::Odd(why),
        },
        (Action::Pause, true, true) => Seen::Refuse,
        _ => Seen::Odd(format!(
            "action {:?}, closed {}, filter state {:?}",
            o.action, o.closed, o.filter_state
        )),
    }
}

/// One VM with the table API and a network plugin per port.
struct Vm {
    host: FilterHost,
    api: u32,
    /// Root context of the network plugin of each port.
    ports: BTreeMap<u16, u32>,
}

fn trapped(check: Check, what: &str, e: HostError) -> CheckFailure {
    CheckFailure {
        check,
        detail: format!("{what}: {e}"),
    }
}

impl Vm {
    fn start(
        compiled: &FilterModule,
        table: &RouteTable,
        limits: Limits,
    ) -> Result<Vm, CheckFailure> {
        let mut host = FilterHost::instantiate(compiled, SharedData::default(), limits)
            .map_err(load_failure)?;
        // Warnings only: the probes make the filter log every refusal.
        host.set_log_level(3);
        // The proxy's clusters are those the live table names (the check
        // is about the module, not about Envoy's cluster list).
        let clusters: std::collections::BTreeSet<&str> = table
            .routes
            .iter()
            .filter_map(|r| match &r.upstream {
                oooi_routes::Upstream::Cluster(name) => Some(name.as_str()),
                oooi_routes::Upstream::Address { .. } => None,
            })
            .collect();
        let api_config = serde_json::json!({
            "role": "api",
            "push_token": CHECK_TOKEN,
            "clusters": clusters,
        })
        .to_string();
        let api = host
            .start_plugin(&api_config)
            .map_err(|e| trapped(Check::Configure, "the table API plugin", e))?;
        let mut ports = BTreeMap::new();
        let wanted: std::collections::BTreeSet<u16> = BASE_PORTS
            .iter()
            .copied()
            .chain(table.routes.iter().map(|r| r.port))
            .collect();
        for port in wanted {
            let root = host
                .start_plugin(&format!(r#"{{"role":"network","port":{port}}}"#))
                .map_err(|e| {
                    trapped(
                        Check::Configure,
                        &format!("the network plugin on {port}"),
                        e,
                    )
                })?;
            ports.insert(port, root);
        }
        Ok(Vm { host, api, ports })
    }

    fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<(u32, serde_json::Value), CheckFailure> {
        let auth = format!("Bearer {CHECK_TOKEN}");
        let headers: &[(&str, &str)] = if method == "PUT" {
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ]
        } else {
            &[]
        };
        let what = format!("{method} {path}");
        let response = self
            .host
            .http_request(self.api, method, path, headers, body)
            .map_err(|e| trapped(Check::TableApi, &what, e))?
            .ok_or_else(|| CheckFailure {
                check: Check::TableApi,
                detail: format!("{what}: the module did not answer"),
            })?;
        let json = serde_json::from_slice(&response.body).unwrap_or(serde_json::Value::Null);
        Ok((response.status, json))
    }

    /// Not ready before a table, push accepted, generation, digest and
    /// build id read back, ready after.
    fn table_api(&mut self, table: &RouteTable, build: Option<&str>) -> Result<(), CheckFailure> {
        let (status, _) = self.request("GET", "/ready", b"")?;
        if status != 503 {
            return fail(
                Check::TableApi,
                format!("GET /ready answered {status} before any table, expected 503"),
            );
        }
        let digest = table.digest();
        let (status, body) = self.request("PUT", "/v1/routes", &table.to_json())?;
        if status != 200 {
            return fail(
                Check::TableApi,
                format!("PUT /v1/routes answered {status}: {body}"),
            );
        }
        let (status, body) = self.request("GET", "/v1/routes", b"")?;
        let generation = body["generation"].as_u64();
        let got_digest = body["digest"].as_str();
        if status != 200
            || generation != Some(table.generation)
            || got_digest != Some(digest.as_str())
        {
            return fail(
                Check::TableApi,
                format!(
                    "GET /v1/routes answered {status} {body}, expected generation {} and digest {digest}",
                    table.generation
                ),
            );
        }
        if let Some(build) = build
            && body["build"].as_str() != Some(build)
        {
            return fail(
                Check::TableApi,
                format!(
                    "GET /v1/routes reports build {}, the module carries {build:?}",
                    body["build"]
                ),
            );
        }
        let (status, _) = self.request("GET", "/ready", b"")?;
        if status != 200 {
            return fail(
                Check::TableApi,
                format!("GET /ready answered {status} with a table loaded, expected 200"),
            );
        }
        Ok(())
    }

    fn compare(
        &mut self,
        router: &Router,
        probe: &Probe,
        check: Check,
    ) -> Result<(), CheckFailure> {
        let want = expected(
            &router.decide(probe.port, probe.sni.as_deref(), Some(probe.source)),
            router,
        );
        let Some(&root) = self.ports.get(&probe.port) else {
            return fail(check, format!("{probe}: no plugin on the port"));
        };
        let local = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 4)), probe.port);
        let outcome = self
            .host
            .new_connection(
                root,
                probe.sni.as_deref(),
                SocketAddr::new(probe.source, 40000),
                local,
            )
            .map_err(|e| trapped(check, &probe.to_string(), e))?;
        let got = seen(&outcome, probe.port);
        if got != want {
            return fail(
                check,
                format!("{probe}: the module decided {got}, the router {want}"),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn address(host: &str, port: u16) -> Result<Target, String> {
        Ok(Target::Address {
            host: host.into(),
            port,
        })
    }

    #[test]
    fn an_address_takes_the_named_port_or_the_listener_port() {
        let named = state(&[
            (CLUSTER_KEY, DYNAMIC_CLUSTER),
            (HOST_KEY, "kube-apiserver.ns.svc"),
            (PORT_KEY, "6443"),
        ]);
        // A module that names the port even where the listener's is the same
        // (builds before the shortcut) means the same upstream.
        assert_eq!(target(&named, 6443), address("kube-apiserver.ns.svc", 6443));
        assert_eq!(target(&named, 443), address("kube-apiserver.ns.svc", 6443));
        let unnamed = state(&[(CLUSTER_KEY, DYNAMIC_CLUSTER), (HOST_KEY, "192.0.2.200")]);
        assert_eq!(target(&unnamed, 443), address("192.0.2.200", 443));
    }

    #[test]
    fn a_cluster_needs_an_empty_dynamic_host_and_no_port() {
        let ok = state(&[(CLUSTER_KEY, "c1_api"), (HOST_KEY, "")]);
        assert_eq!(target(&ok, 443), Ok(Target::Cluster("c1_api".into())));
        for bad in [
            state(&[(CLUSTER_KEY, "c1_api")]),
            state(&[(CLUSTER_KEY, "c1_api"), (HOST_KEY, "x.example.com")]),
            state(&[(CLUSTER_KEY, "c1_api"), (HOST_KEY, ""), (PORT_KEY, "443")]),
        ] {
            assert!(target(&bad, 443).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn filter_state_envoy_would_not_route_by_is_named() {
        let cases = [
            (state(&[(HOST_KEY, "h"), (PORT_KEY, "1")]), "no cluster"),
            (state(&[(CLUSTER_KEY, DYNAMIC_CLUSTER)]), "no dynamic host"),
            (
                state(&[(CLUSTER_KEY, DYNAMIC_CLUSTER), (HOST_KEY, "")]),
                "without a host",
            ),
            (
                state(&[
                    (CLUSTER_KEY, DYNAMIC_CLUSTER),
                    (HOST_KEY, "h"),
                    (PORT_KEY, "x"),
                ]),
                "not a port",
            ),
            (
                state(&[
                    (CLUSTER_KEY, DYNAMIC_CLUSTER),
                    (HOST_KEY, "h"),
                    ("envoy.upstream.dynamic_porx", "6443"),
                ]),
                "does not use",
            ),
        ];
        for (s, why) in cases {
            let e = target(&s, 443).expect_err(why);
            assert!(e.contains(why), "{e} should say {why}");
        }
    }
}
