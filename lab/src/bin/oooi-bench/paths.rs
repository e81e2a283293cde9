//! The measured paths and what they run on: the empty proxy-wasm filter (the
//! floor), where each path listens, the benchmark routing table and its push.

use super::*;

/// The floor: a proxy-wasm (ABI 0.2.1) network filter that does nothing.
/// Every callback returns at once (new connection and downstream data:
/// Continue; VM start and configure: success) and it calls no host
/// function. It exports only the callbacks a filter needs to see a
/// connection, as the oooi module does after `oooi-filter-finish`, so that
/// Envoy makes the same kind of VM calls per connection. The allocator is a
/// bump pointer: Envoy only allocates in a module for data the module asks
/// for, and this one asks for none.
pub(crate) const EMPTY_FILTER_WAT: &str = r#"
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param $size i32) (result i32)
    (local $ptr i32)
    (local $end i32)
    (if (i32.gt_u (local.get $size) (i32.const 0x10000000))
      (then (return (i32.const 0))))
    (local.set $ptr (global.get $heap))
    (local.set $end
      (i32.and (i32.add (i32.add (local.get $ptr) (local.get $size)) (i32.const 7))
               (i32.const -8)))
    (if (i32.gt_u (local.get $end) (i32.shl (memory.size) (i32.const 16)))
      (then
        (if (i32.eq
              (memory.grow
                (i32.shr_u
                  (i32.add (i32.sub (local.get $end) (i32.shl (memory.size) (i32.const 16)))
                           (i32.const 65535))
                  (i32.const 16)))
              (i32.const -1))
          (then (return (i32.const 0))))))
    (global.set $heap (local.get $end))
    (local.get $ptr))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_new_connection") (param i32) (result i32) (i32.const 0))
  (func (export "proxy_on_downstream_data") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_delete") (param i32))
)
"#;

/// The empty filter's VM id: a VM of its own, apart from oooi's.
pub(crate) const EMPTY_VM_ID: &str = "bench_empty";

/// A listener for the floor path: `tls_inspector`, the empty filter (inline,
/// code from `module`), `tcp_proxy` to `cluster`.
pub(crate) fn empty_wasm_listener(
    name: &str,
    addr: SocketAddr,
    module: &std::path::Path,
    cluster: &str,
) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": name,
        "address": {"socket_address": {"address": addr.ip().to_string(), "port_value": addr.port()}},
        "listener_filters": [{
            "name": "envoy.filters.listener.tls_inspector",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"},
        }],
        "listener_filters_timeout": "2s",
        "filter_chains": [{"filters": [
            {
                "name": "envoy.filters.network.wasm",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm",
                    "config": {
                        "name": EMPTY_VM_ID,
                        "root_id": EMPTY_VM_ID,
                        "vm_config": {
                            "vm_id": EMPTY_VM_ID,
                            "runtime": "envoy.wasm.runtime.v8",
                            "code": {"local": {"filename": module.display().to_string()}},
                        },
                        "configuration": {
                            "@type": "type.googleapis.com/google.protobuf.StringValue",
                            "value": "{}",
                        },
                    },
                },
            },
            {
                "name": "envoy.filters.network.tcp_proxy",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                    "stat_prefix": name,
                    "cluster": cluster,
                },
            },
        ]}],
    })
}

/// One measured path.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Path {
    Direct,
    Native,
    EmptyWasm,
    OooiWasm,
}

/// Every path, in report order.
pub(crate) const PATHS: [Path; 4] = [Path::Direct, Path::Native, Path::EmptyWasm, Path::OooiWasm];

impl Path {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Path::Direct => "direct (no proxy)",
            Path::Native => "envoy native SNI",
            Path::EmptyWasm => "envoy + empty wasm",
            Path::OooiWasm => "envoy + oooi wasm",
        }
    }

    pub(crate) fn short(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Native => "native",
            Path::EmptyWasm => "empty wasm",
            Path::OooiWasm => "oooi wasm",
        }
    }
}

/// How the oooi table names its upstreams (see `--upstreams`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Upstreams {
    Cluster,
    Address,
    SamePort,
}

/// Where each proxied path listens.
pub(crate) struct Listeners {
    pub(crate) native: SocketAddr,
    pub(crate) oooi: SocketAddr,
    /// The floor listener of each kind; its fixed cluster is the cluster of
    /// that kind's first name.
    pub(crate) empty_hello: SocketAddr,
    pub(crate) empty_tls: SocketAddr,
}

impl Listeners {
    pub(crate) fn empty(&self, kind: Kind) -> SocketAddr {
        match kind {
            Kind::Hello => self.empty_hello,
            Kind::Tls => self.empty_tls,
        }
    }
}

/// The upstream the oooi table names for a bench cluster: the cluster
/// itself, or its backend's address (see `--upstreams`).
pub(crate) struct UpstreamOf(pub(crate) HashMap<String, Upstream>);

impl UpstreamOf {
    pub(crate) fn get(&self, cluster: &str) -> Upstream {
        self.0
            .get(cluster)
            .cloned()
            .unwrap_or_else(|| Upstream::Cluster(cluster.to_owned()))
    }
}

/// The names the bench routes, (SNI, cluster), and how the oooi table
/// names each cluster's upstream.
pub(crate) struct Routing {
    pub(crate) names: Vec<(String, String)>,
    pub(crate) up: UpstreamOf,
}

pub(crate) fn cluster_route(port: u16, sni: &str, cluster: &str, up: &UpstreamOf) -> Route {
    Route {
        port,
        matches: RouteMatch::Sni(sni.to_owned()),
        upstream: up.get(cluster),
        owner: None,
    }
}

/// The benchmark names (8 SNI routes) plus two source routes, then filler
/// routes up to `total`: exact names, wildcards and /32 sources that no
/// client asks for.
pub(crate) fn bench_table(
    generation: u64,
    port: u16,
    names: &[(String, String)],
    total: usize,
    fresh: Option<(&str, &str)>,
    up: &UpstreamOf,
) -> Result<RouteTable> {
    let mut routes: Vec<Route> = names
        .iter()
        .map(|(sni, cluster)| cluster_route(port, sni, cluster, up))
        .collect();
    let first_cluster = names[0].1.clone();
    for i in 0..2u32 {
        routes.push(Route {
            port,
            matches: RouteMatch::Source(
                Cidr::new(IpAddr::from([192, 0, 2, 10 + i as u8]), 32)
                    .map_err(anyhow::Error::msg)?,
            ),
            upstream: up.get(&first_cluster),
            owner: None,
        });
    }
    if let Some((sni, cluster)) = fresh {
        routes.push(cluster_route(port, sni, cluster, up));
    }
    let mut i = 0u32;
    while routes.len() < total {
        let r = match i % 10 {
            0..=5 => cluster_route(
                port,
                &format!("svc{i}.c{}.filler.test", i % 97),
                &first_cluster,
                up,
            ),
            6..=8 => cluster_route(
                port,
                &format!("*.apps.c{i}.filler.test"),
                &first_cluster,
                up,
            ),
            _ => Route {
                port,
                matches: RouteMatch::Source(
                    Cidr::new(
                        IpAddr::from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8]),
                        32,
                    )
                    .map_err(anyhow::Error::msg)?,
                ),
                upstream: up.get(&first_cluster),
                owner: None,
            },
        };
        routes.push(r);
        i += 1;
    }
    let table = RouteTable { generation, routes };
    table.validate()?;
    Ok(table)
}

pub(crate) async fn push(envoy: &Envoy, table: &RouteTable) -> Result<()> {
    let body = table.to_json();
    let api = envoy.api;
    let (status, text) = tokio::task::spawn_blocking(move || {
        oooi_tests::http_blocking(
            api,
            "PUT",
            "/v1/routes",
            &[(
                "authorization",
                &format!("Bearer {}", oooi_tests::PUSH_TOKEN),
            )],
            &body,
        )
    })
    .await?
    .context("PUT /v1/routes")?;
    if status != 200 {
        bail!("PUT refused with {status}: {text}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oooi_wasm_host::{Action, FilterHost, SharedData};

    #[test]
    fn empty_filter_lets_every_connection_through_untouched() {
        // The harness host (built for the oooi module) insists on its HTTP
        // and tick exports; stubs for them are added here only, and are
        // never called on the network path this test drives.
        let body = EMPTY_FILTER_WAT
            .trim_end()
            .strip_suffix(')')
            .expect("the WAT ends its module");
        let wat = format!(
            r#"{body}
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_request_body") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_tick") (param i32)))"#
        );
        wat::parse_str(EMPTY_FILTER_WAT).expect("the WAT compiles");
        let module = wat::parse_str(&wat).expect("the WAT with host stubs compiles");
        let mut host = FilterHost::load(&module, SharedData::default()).expect("the module loads");
        let report = host.abi_report();
        assert_eq!(report.abi_versions, ["proxy_abi_version_0_2_1"]);
        assert!(
            report.imports.is_empty(),
            "no host calls: {:?}",
            report.imports
        );
        let root = host
            .start_plugin("{}")
            .expect("VM start and configure succeed");
        for sni in [Some("h0.bench.test"), None] {
            let outcome = host
                .new_connection(
                    root,
                    sni,
                    "127.0.1.1:40000".parse().expect("source"),
                    "127.0.0.1:443".parse().expect("local"),
                )
                .expect("the connection callbacks succeed");
            assert_eq!(outcome.action, Action::Continue);
            assert!(!outcome.closed);
            assert!(outcome.filter_state.is_empty());
        }
    }

    #[test]
    fn empty_listener_routes_to_its_fixed_cluster_through_the_empty_vm() {
        let l = empty_wasm_listener(
            "bench_empty_wasm_hello",
            "127.0.0.1:4000".parse().expect("addr"),
            std::path::Path::new("/tmp/x/empty.wasm"),
            "bench_h0",
        );
        let filters = &l["filter_chains"][0]["filters"];
        let wasm = &filters[0]["typed_config"]["config"];
        assert_eq!(wasm["vm_config"]["vm_id"], EMPTY_VM_ID);
        assert_eq!(wasm["vm_config"]["runtime"], "envoy.wasm.runtime.v8");
        assert_eq!(
            wasm["vm_config"]["code"]["local"]["filename"],
            "/tmp/x/empty.wasm"
        );
        assert_eq!(filters[1]["typed_config"]["cluster"], "bench_h0");
        assert_eq!(l["address"]["socket_address"]["port_value"], 4000);
    }
}
