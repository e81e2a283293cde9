//! `oooi-controller render` over the example manifests, through the library
//! and through the binary.

use std::path::PathBuf;
use std::process::Command;

use oooi_controller::render::{self, RenderInput};
use oooi_controller::testing::InfraBuilder;
use serde_json::{Value, json};

fn examples() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[test]
fn every_example_renders_and_plans_cleanly() {
    let files = examples();
    assert!(files.len() >= 3, "examples: {files:?}");
    for f in files {
        let mut input = RenderInput::default();
        input.add_file(&f).unwrap();
        let out = render::render(&input, render::OFFLINE_PUSH_TOKEN)
            .unwrap_or_else(|e| panic!("{}: {e:#}", f.display()));
        assert!(!out.objects.is_empty(), "{}", f.display());
        for summary in out.objects.iter().filter(|o| o["kind"] == "PlanSummary") {
            assert_eq!(summary["valid"], true, "{}: {summary}", f.display());
            assert_eq!(
                summary["attachments"]["excluded"],
                0,
                "{}: {summary}",
                f.display()
            );
        }
        // Every server's pods get their NetworkPolicy, printed just before
        // their Deployment.
        for server in out.objects.iter().filter(|o| {
            ["DHCPServer", "DNSServer", "ProxyServer"].contains(&o["kind"].as_str().unwrap_or(""))
        }) {
            let name = server["metadata"]["name"].as_str().unwrap();
            let suffix = if server["kind"] == "ProxyServer" {
                "push"
            } else {
                "ingress"
            };
            let at = out
                .objects
                .iter()
                .position(|o| {
                    o["kind"] == "NetworkPolicy"
                        && o["metadata"]["name"] == format!("{name}-{suffix}").as_str()
                })
                .unwrap_or_else(|| panic!("{}: no policy for {name}", f.display()));
            let next = &out.objects[at + 1];
            assert_eq!(
                (next["kind"].as_str(), next["metadata"]["name"].as_str()),
                (Some("Deployment"), Some(name)),
                "{}",
                f.display()
            );
        }
        // The YAML round-trips: every object, then one document per
        // hosted cluster's objects.
        let yaml = render::to_yaml(&out).unwrap();
        let back: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
        assert_eq!(back.len(), out.objects.len() + out.hosted.len());
        assert_eq!(back[..out.objects.len()], out.objects[..]);
    }
}

#[test]
fn two_cluster_example_routes_workers_and_apps() {
    let f = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/two-clusters.yaml");
    let mut input = RenderInput::default();
    input.add_file(&f).unwrap();
    let out = render::render(&input, render::OFFLINE_PUSH_TOKEN).unwrap();
    assert_eq!(
        kinds(&out.objects),
        [
            "DHCPServer",
            "ServiceAccount",
            "ConfigMap",
            "PersistentVolumeClaim",
            "NetworkPolicy",
            "Deployment",
            "DNSServer",
            "ServiceAccount",
            "ConfigMap",
            "Service",
            "NetworkPolicy",
            "Deployment",
            "ProxyServer",
            "ServiceAccount",
            "Secret",
            "Service",
            "Service",
            "NetworkPolicy",
            "Deployment",
            "NetworkPolicy",
            "NetworkPolicy",
            "PlanSummary",
        ]
    );
    // Each server's pods get their policy just before their Deployment;
    // the push API and the lease inventory admit only the controller's
    // namespace; each accepted attachment opens its control-plane namespace
    // to this Infra's proxy.
    let policies: Vec<(&str, &str)> = out
        .objects
        .iter()
        .filter(|o| o["kind"] == "NetworkPolicy")
        .map(|o| {
            (
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        policies[..3],
        [
            ("oooi", "vlan200-dhcp-ingress"),
            ("oooi", "vlan200-dns-ingress"),
            ("oooi", "vlan200-proxy-push")
        ],
        "{policies:?}"
    );
    let policy = |name: &str| {
        out.objects
            .iter()
            .find(|o| o["kind"] == "NetworkPolicy" && o["metadata"]["name"] == name)
            .unwrap()
    };
    for name in ["vlan200-dhcp-ingress", "vlan200-proxy-push"] {
        let from = &policy(name)["spec"]["ingress"];
        assert!(
            from.to_string()
                .contains(render::DEFAULT_CONTROLLER_NAMESPACE),
            "{name}: {from}"
        );
    }
    // The DNS pod view from anyone (no `from`), UDP and TCP.
    let view = &policy("vlan200-dns-ingress")["spec"]["ingress"][0];
    assert!(view.get("from").is_none(), "{view}");
    assert_eq!(
        view["ports"],
        serde_json::json!([{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}])
    );
    let cp: Vec<&str> = policies[3..].iter().map(|p| p.0).collect();
    assert_eq!(cp, ["clusters-c1", "clusters-c2"], "{policies:?}");
    let routes_file = out
        .files
        .iter()
        .find(|(p, _)| p.ends_with("vlan200-proxy-routes.json"))
        .expect("routes file");
    let table = oooi_routes::RouteTable::from_json(routes_file.1.as_bytes()).unwrap();
    let sources: Vec<String> = table
        .routes
        .iter()
        .filter_map(|r| match &r.matches {
            oooi_routes::RouteMatch::Source(c) => Some(c.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(
        sources,
        [
            "198.51.100.101/32",
            "198.51.100.102/32",
            "198.51.100.121/32"
        ]
    );
    assert!(table.routes.iter().any(|r| r.port == 22623));
    assert!(table.routes.iter().any(
        |r| matches!(&r.matches, oooi_routes::RouteMatch::Sni(s) if s == "*.apps.c2.example.com")
    ));
    let dns = out
        .files
        .iter()
        .find(|(p, _)| p.ends_with("vlan200-dns.yaml"))
        .unwrap();
    let cfg = oooi_dns_config::Config::parse(&dns.1).unwrap();
    assert_eq!(cfg.views.len(), 2);
    let dhcp = out
        .files
        .iter()
        .find(|(p, _)| p.ends_with("vlan200-dhcp.yaml"))
        .unwrap();
    let cfg = oooi_dhcp_config::Config::from_yaml(&dhcp.1).unwrap();
    assert_eq!(cfg.reservations.len(), 3);
    assert_eq!(cfg.lease_seconds, 7200);
    let envoy = out
        .files
        .iter()
        .find(|(p, _)| p.ends_with("vlan200-proxy-envoy/lds.json"))
        .unwrap();
    let lds: Value = serde_json::from_str(&envoy.1).unwrap();
    let names: Vec<&str> = lds["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    // Port 80 (apps by HTTP Host) comes with the apps VIP; Prometheus
    // scrapes the `metrics` listener.
    assert_eq!(
        names,
        [
            "http_80",
            "tls_443",
            "tls_6443",
            "tls_22623",
            "table_api",
            "ready",
            "metrics"
        ]
    );
}

#[test]
fn unknown_kinds_and_bad_documents_are_named() {
    // Another kind is skipped with one line, or refused with --strict-kinds.
    let foreign = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";
    let mut input = RenderInput::default();
    input.add_yaml("x.yaml", foreign).unwrap();
    assert_eq!(input.skipped.len(), 1);
    assert!(
        input.skipped[0].contains("x.yaml: document 1 (kind `ConfigMap`)"),
        "{:?}",
        input.skipped
    );
    let mut strict = RenderInput {
        strict_kinds: true,
        ..RenderInput::default()
    };
    let e = strict.add_yaml("x.yaml", foreign).unwrap_err();
    assert!(
        format!("{e:#}").contains("x.yaml: document 1 (kind `ConfigMap`)"),
        "{e:#}"
    );
    let e = input
        .add_yaml(
            "y.yaml",
            "---\napiVersion: hostedcluster.densityops.com/v1alpha1\nkind: Infra\nmetadata: {name: a}\nspec: {}\n",
        )
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("y.yaml: document 1 (kind `Infra`)"),
        "{e:#}"
    );
}

#[test]
fn render_refuses_unknown_fields_and_skips_other_kinds_in_the_same_file() {
    let bin = env!("CARGO_BIN_EXE_oooi-controller");
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/two-clusters.yaml");
    let text = std::fs::read_to_string(&example).unwrap();
    assert!(
        text.contains("dnsServers:"),
        "the example names its upstreams"
    );
    let dir = tempfile::tempdir().unwrap();
    let run = |file: &std::path::Path, extra: &[&str]| {
        Command::new(bin)
            .env_remove("OOOI_FILTER_WASM")
            .env_remove("OOOI_PUSH_TOKEN")
            .args(["render", "-f"])
            .arg(file)
            .args(extra)
            .output()
            .unwrap()
    };
    // A misspelt field: refused with its path, nothing printed.
    let typo = dir.path().join("typo.yaml");
    std::fs::write(&typo, text.replacen("dnsServers:", "dnsServerz:", 1)).unwrap();
    let out = run(&typo, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("`spec.networkConfig.dnsServerz`"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    // The manifests a user applies, with a Namespace and a NAD beside them.
    let mixed = dir.path().join("mixed.yaml");
    std::fs::write(
        &mixed,
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: oooi}}\n---\n\
             apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
             metadata: {{name: vlan200, namespace: oooi}}\nspec: {{config: '{{}}'}}\n---\n{text}"
        ),
    )
    .unwrap();
    let out = run(&mixed, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let skipped: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("skipped: "))
        .collect();
    assert_eq!(skipped.len(), 2, "{stderr}");
    assert!(skipped[0].contains("Namespace `oooi`"), "{stderr}");
    assert!(
        skipped[1].contains("NetworkAttachmentDefinition `vlan200`"),
        "{stderr}"
    );
    assert_eq!(out.stdout, run(&example, &[]).stdout, "the same objects");
    let out = run(&mixed, &["--strict-kinds"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--strict-kinds"));
}

#[test]
fn render_refuses_typos_in_metadata_and_in_observed_documents_naming_each_path() {
    // `kubectl apply --validate=strict` refuses these; render must too, and
    // `machine:` (for `machines:`) would otherwise drop the cluster's workers.
    let bin = env!("CARGO_BIN_EXE_oooi-controller");
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/two-clusters.yaml");
    let text = std::fs::read_to_string(&example).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "metadata:\n  name: vlan200\n  namespace: oooi",
            "metadata:\n  name: vlan200\n  namespce: oooi",
            "`metadata.namespce`",
        ),
        (
            "metadata:\n  name: vlan200\n  namespace: oooi",
            "metadata:\n  name: vlan200\n  namespace: oooi\n  annotation: {a: b}",
            "`metadata.annotation`",
        ),
        (
            "kind: ObservedCluster\nhostedCluster: {namespace: clusters, name: c1}\nmachines:",
            "kind: ObservedCluster\nhostedCluster: {namespace: clusters, name: c1}\nmachine:",
            "`machine`",
        ),
    ];
    for (from, to, want) in cases {
        assert!(text.contains(from), "the example has {from:?}");
        let file = dir.path().join("typo.yaml");
        std::fs::write(&file, text.replacen(from, to, 1)).unwrap();
        let out = Command::new(bin)
            .env_remove("OOOI_FILTER_WASM")
            .env_remove("OOOI_PUSH_TOKEN")
            .args(["render", "-f"])
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{to:?}: {stderr}");
        assert!(stderr.contains(want), "{to:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{to:?}");
    }
}

#[test]
fn the_binary_prints_crds_and_writes_a_render_directory() {
    let bin = env!("CARGO_BIN_EXE_oooi-controller");
    let out = Command::new(bin).arg("crds").output().unwrap();
    assert!(out.status.success());
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    assert_eq!(docs.len(), 5);
    assert!(docs.iter().all(|d| d["kind"] == "CustomResourceDefinition"));

    let dir = tempfile::tempdir().unwrap();
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/two-clusters.yaml");
    let out = Command::new(bin)
        .env_remove("OOOI_FILTER_WASM")
        .env_remove("OOOI_PUSH_TOKEN")
        .args(["render", "-f"])
        .arg(&example)
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let routes = dir.path().join("files/oooi/vlan200-proxy-routes.json");
    let table = oooi_routes::RouteTable::from_json(&std::fs::read(&routes).unwrap()).unwrap();
    assert!(!table.routes.is_empty());
    let objects = std::fs::read_dir(dir.path().join("objects"))
        .unwrap()
        .count();
    // The 21 objects of the example (five NetworkPolicies: one per server,
    // one per control-plane namespace) and the PlanSummary.
    assert_eq!(objects, 22);

    // No module: a note says the filter ConfigMap is missing (its content
    // and `--filter-wasm` are tested in render_filter.rs).
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("vlan200-proxy-filter"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = Command::new(bin)
        .env_remove("OOOI_FILTER_WASM")
        .args(["render", "-f", "/nonexistent.yaml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.yaml"));
}

#[test]
fn rendering_twice_gives_the_same_bytes() {
    let f = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/two-clusters.yaml");
    let once = || {
        let mut input = RenderInput::default();
        input.add_file(&f).unwrap();
        render::to_yaml(&render::render(&input, render::OFFLINE_PUSH_TOKEN).unwrap()).unwrap()
    };
    assert_eq!(once(), once());
}

#[test]
fn an_infra_on_a_managed_localnet_renders_its_cluster_user_defined_network() {
    let infra = InfraBuilder::new()
        .named("oooi", "vlan100")
        .remove("/metadata/uid")
        .remove("/metadata/generation")
        .remove("/spec/networkConfig/gateway")
        .upstreams(&["10.0.0.10"])
        .cudn(json!({"name": "vlan100", "localnet": {"physicalNetworkName": "physnet", "vlanId": 100, "mtu": 1400}}))
        .images(
            Some("registry.example.com/oooi-dhcp:1"),
            Some("registry.example.com/oooi-dns:1"),
            Some("registry.example.com/envoy:1"),
        );
    let mut input = RenderInput::default();
    input.add_yaml("infra.yaml", &infra.yaml()).unwrap();
    let out = render::render(&input, render::OFFLINE_PUSH_TOKEN).unwrap();
    let cudns: Vec<&Value> = out
        .objects
        .iter()
        .filter(|o| o["kind"] == "ClusterUserDefinedNetwork")
        .collect();
    assert_eq!(cudns.len(), 1, "{:?}", kinds(&out.objects));
    let c = cudns[0];
    assert_eq!(c["apiVersion"], "k8s.ovn.org/v1");
    assert_eq!(c["metadata"]["name"], "vlan100");
    assert_eq!(
        c["spec"]["network"]["localnet"]["vlan"],
        serde_json::json!({"mode": "Access", "access": {"id": 100}})
    );
    let dns = out
        .objects
        .iter()
        .find(|o| o["kind"] == "DNSServer")
        .expect("a DNSServer");
    assert_eq!(
        dns["spec"]["vlan"]["networkAttachmentDefinition"],
        "vlan100"
    );
    assert_eq!(dns["spec"]["vlan"]["networkAttachmentNamespace"], "oooi");

    // The NAD form renders none.
    let mut input = RenderInput::default();
    input
        .add_yaml(
            "infra.yaml",
            &infra
                .remove("/spec/networkConfig/clusterUserDefinedNetwork")
                .nad("vlan100")
                .yaml(),
        )
        .unwrap();
    let out = render::render(&input, render::OFFLINE_PUSH_TOKEN).unwrap();
    assert!(
        !kinds(&out.objects).contains(&"ClusterUserDefinedNetwork".to_string()),
        "{:?}",
        kinds(&out.objects)
    );
}
