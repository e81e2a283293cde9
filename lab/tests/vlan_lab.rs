//! The local lab end to end (root): `oooi-vlan-lab up --hold` on a simulated
//! VLAN built from `lab/two-clusters.yaml` (cluster `a` Standard, `b`
//! Strict with apps ingress), every step checked: leases, names, SNI and
//! alias routing, cross-cluster refusals, an apps VIP move, an attachment
//! deletion, the aliases absent while no worker is known then present
//! once a Machine reports its address, and the pod view of a management
//! pod with `internalProxyService` then without it (each change a
//! re-render, DNS ConfigMap swap and table push), the crash of a replica of
//! each, and node loss with floating addresses (the address agent from the
//! images beside every DNS and proxy replica, adverts on the VLAN,
//! `oooi-kube-mock` counting API requests): a frozen node, a gray failure of
//! the VLAN port and a node loss, their returns, the management API stopped
//! for 5 s and 120 s, and a drain, then losses with takeover off
//! (health-checked DNS answers). Then
//! the lab process is killed with SIGKILL (a crash) and `down` must remove
//! everything it left.
//!
//! The data plane runs from the images (`tools/dev test` builds them first
//! and sets `OOOI_IMAGE_VERSION` and podman's settings). Needs
//! `oooi-controller` and `oooi-kube-mock` built beside the lab binary
//! (`cargo test --workspace` builds them) or `OOOI_CONTROLLER_BIN` and
//! `OOOI_KUBE_MOCK_BIN`, the filter module
//! (`OOOI_FILTER_WASM`), podman, busybox and dig (`tools/dev setup`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn lab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_oooi-vlan-lab"))
}

fn namespaces(prefix: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .map(str::to_string)
        .collect()
}

#[test]
fn two_clusters_on_a_simulated_vlan_then_down_after_a_crash() {
    let prefix = format!("oooit{}", std::process::id());
    let mut child = lab()
        .args(["up", "--hold", "--prefix", &prefix])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the lab");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let held = loop {
        // The longest step that prints nothing keeps the mocked API stopped
        // for 120 s (the data plane must not notice).
        match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(l) => {
                let done = l.starts_with("holding");
                lines.push(l);
                if done {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    let text = lines.join("\n");
    println!("{text}");
    let pids =
        std::fs::read_to_string(format!("/run/oooi-vlan-lab/{prefix}/pids")).unwrap_or_default();

    // Crash: the lab gets no chance to clean up.
    let _ = child.kill();
    let _ = child.wait();
    let down = lab()
        .args(["down", "--prefix", &prefix])
        .output()
        .expect("down");
    assert!(down.status.success(), "down failed: {down:?}");
    let again = lab()
        .args(["down", "--prefix", &prefix])
        .output()
        .expect("down again");
    assert!(again.status.success(), "second down failed: {again:?}");
    assert!(
        namespaces(&prefix).is_empty(),
        "namespaces left: {:?}",
        namespaces(&prefix)
    );
    for pid in pids.lines() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z "),
            "lab process {pid} still running after down: {stat}"
        );
    }
    assert!(!std::path::Path::new(&format!("/etc/netns/{prefix}-proxy")).exists());
    let containers = Command::new("podman")
        .args(["ps", "--all", "--format", "{{.Names}}"])
        .output()
        .expect("podman ps");
    let containers = String::from_utf8_lossy(&containers.stdout).into_owned();
    assert!(
        !containers
            .lines()
            .any(|n| n.starts_with(&format!("{prefix}-"))),
        "containers left after down: {containers}"
    );

    assert!(held, "the lab never reached `holding`:\n{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("data plane: the images localhost/oooi-")),
        "the data plane did not run from the images:\n{text}"
    );
    let failed: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| l.contains("FAILED"))
        .collect();
    assert!(
        failed.is_empty(),
        "steps failed:\n{}\n\nthe whole run:\n{text}\n\nsteps failed (again, for the end of a cut log):\n{}",
        failed.join("\n"),
        failed.join("\n")
    );
    let step = |what: &str, result: &str| {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(what) && l.contains(result) && l.trim_end().ends_with("ok")),
            "no passing step `{what}` -> `{result}`:\n{text}"
        );
    };
    step("oooi-dhcp serving", "200");
    step("oooi-dns serving", "200");
    step("push rendered table", "200");
    // Cluster a's worker.
    step("lease (reservation by MAC)", "192.0.2.51");
    step("dig @192.0.2.3 api.a.example.com", "192.0.2.4");
    step(
        "TLS api.a.example.com:6443 by SNI",
        "clusters-a/kube-apiserver",
    );
    step(
        "TLS oauth.a.example.com:443 by SNI",
        "clusters-a/oauth-openshift",
    );
    // Cluster b's worker.
    step("lease (reservation by MAC)", "192.0.2.61");
    step("dig @192.0.2.3 api.b.example.com", "192.0.2.4");
    step(
        "TLS api.b.example.com:6443 by SNI",
        "clusters-b/kube-apiserver",
    );
    // The alias resolves on the VLAN to the proxy.
    step(
        "dig @192.0.2.3 kubernetes.default.svc (alias, every proxy)",
        "192.0.2.4,192.0.2.14",
    );
    // The alias and the no-SNI path go by source: each worker to its own.
    let alias: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("kubernetes.default.svc:6443 (alias, by source)"))
        .collect();
    assert_eq!(alias.len(), 2, "{text}");
    assert!(alias[0].contains("clusters-a/kube-apiserver") && alias[0].trim_end().ends_with("ok"));
    assert!(alias[1].contains("clusters-b/kube-apiserver") && alias[1].trim_end().ends_with("ok"));
    let alias443: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("kubernetes.default.svc:443 (alias, by SNI and source)"))
        .collect();
    assert_eq!(alias443.len(), 2, "{text}");
    assert!(
        alias443[0].contains("clusters-a/kube-apiserver") && alias443[0].trim_end().ends_with("ok")
    );
    assert!(
        alias443[1].contains("clusters-b/kube-apiserver") && alias443[1].trim_end().ends_with("ok")
    );
    let nosni: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("without SNI (by source)"))
        .collect();
    assert_eq!(nosni.len(), 2, "{text}");
    assert!(
        nosni[0].contains("clusters-a/kube-apiserver")
            && nosni[1].contains("clusters-b/kube-apiserver")
    );
    // A machine of no cluster: the alias and the no-SNI path are refused.
    step("lease (dynamic)", "in 192.0.2.100-192.0.2.149");
    step("alias kubernetes.default.svc from a non-worker", "refused");
    step(
        "alias kubernetes.default.svc:443 from a non-worker",
        "refused",
    );
    step("no SNI to :6443 from a non-worker", "refused");
    // Cross-cluster: b is Strict, so a's worker and a stranger are refused
    // on b's names; a is Standard, so its names stay open.
    step("cross-cluster: api.b.example.com (Strict)", "refused");
    step("cross-cluster: oauth.b.example.com (Strict)", "refused");
    step("cross-cluster: *.apps.b.example.com (Strict)", "refused");
    step(
        "cross-cluster: api.a.example.com (Standard)",
        "clusters-a/kube-apiserver",
    );
    step(
        "api.b.example.com by SNI from a non-worker (Strict)",
        "refused",
    );
    step(
        "api.a.example.com by SNI from a non-worker (Standard)",
        "clusters-a/kube-apiserver",
    );
    // ... refused by the filter for their source, not for another reason.
    step("refusals logged as reason=source_not_allowed", "4");
    step(
        "Envoy counter oooi_sni_router_refuse_source_not_allowed",
        "4",
    );
    // b's apps VIP: DNS answers it and the proxy routes `*.apps` to it.
    let after = |marker: &str| -> Vec<&String> {
        lines.iter().skip_while(|l| !l.contains(marker)).collect()
    };
    let step_after = |marker: &str, what: &str, result: &str| {
        assert!(
            after(marker)
                .iter()
                .any(|l| l.contains(what) && l.contains(result) && l.trim_end().ends_with("ok")),
            "no passing step `{what}` -> `{result}` after `{marker}`:\n{text}"
        );
    };
    let apps = "console-openshift-console.apps.b.example.com";
    step(&format!("dig {apps}"), "192.0.2.200");
    step("TLS *.apps:443 through the proxy by SNI", "vip/192.0.2.200");
    // The VIP moves: DNS and the route follow.
    let moved = "apps VIP of cluster b moves 192.0.2.200 -> 192.0.2.201";
    step_after(moved, "push generation 2", "200");
    step_after(moved, &format!("dig {apps}"), "192.0.2.201");
    step_after(
        moved,
        "TLS *.apps:443 through the proxy by SNI",
        "vip/192.0.2.201",
    );
    // b's attachment is deleted: its records and routes go, a's stay.
    let gone = "attachment of cluster b deleted";
    step_after(gone, "push generation 3", "200");
    // Its name is no longer oooi's: forwarded, the site resolver answers.
    step_after(
        gone,
        "dig api.b.example.com from its worker (forwarded)",
        "198.51.100.11",
    );
    step_after(gone, &format!("dig {apps}"), "no answer");
    step_after(gone, "TLS api.b.example.com:6443 by SNI", "refused");
    step_after(gone, "TLS kubernetes.default.svc:6443 (alias)", "refused");
    step_after(gone, "TLS :6443 without SNI", "refused");
    step_after(gone, "dig api.a.example.com (kept)", "192.0.2.4");
    step_after(
        gone,
        "TLS api.a.example.com:6443 by SNI (kept)",
        "clusters-a/kube-apiserver",
    );
    // A management pod: the pod view answers every cluster's API name with
    // the internal proxy and never the alias; without internalProxyService
    // the name is forwarded to the site resolver.
    step(
        "pod view: dig api.a.example.com from a management pod (internal proxy)",
        "10.128.0.2",
    );
    step(
        "pod view: dig api.b.example.com from a management pod (internal proxy)",
        "10.128.0.2",
    );
    step(
        "pod view: dig kubernetes.default.svc (never answered)",
        "no answer",
    );
    let unnamed = "internalProxyService removed from the Infra";
    step_after(unnamed, "push generation 6", "200");
    step_after(
        unnamed,
        "pod view: dig api.a.example.com from a management pod (forwarded)",
        "198.51.100.10",
    );
    step_after(
        unnamed,
        "pod view: dig kubernetes.default.svc (never answered)",
        "no answer",
    );
    // a's workers are not yet known: no alias answer, no alias route; its
    // own names stay. Then its Machine reports the address and both appear.
    let unknown = "workers of cluster a not yet known";
    step_after(unknown, "push generation 4", "200");
    step_after(
        unknown,
        "dig kubernetes.default.svc (alias, no known worker)",
        "no answer",
    );
    step_after(
        unknown,
        "TLS kubernetes.default.svc:443 (alias, no known worker)",
        "refused",
    );
    step_after(
        unknown,
        "TLS kubernetes.default.svc:6443 (alias, no known worker)",
        "refused",
    );
    step_after(
        unknown,
        "TLS :6443 without SNI (no known worker)",
        "refused",
    );
    step_after(
        unknown,
        "TLS api.a.example.com:6443 by SNI (no known worker)",
        "clusters-a/kube-apiserver",
    );
    let known = "Machine a-workers-1 of cluster a reports its address 192.0.2.51";
    step_after(known, "push generation 5", "200");
    step_after(
        known,
        "dig kubernetes.default.svc (alias, worker known)",
        "192.0.2.4",
    );
    step_after(
        known,
        "TLS kubernetes.default.svc:443 (alias, worker known)",
        "clusters-a/kube-apiserver",
    );
    step_after(
        known,
        "TLS kubernetes.default.svc:6443 (alias, worker known)",
        "clusters-a/kube-apiserver",
    );
    step_after(
        known,
        "TLS :6443 without SNI (worker known)",
        "clusters-a/kube-apiserver",
    );
    // Failover: the restarted proxy replica runs behind oooi-envoy-gate, so
    // before its table its routing port refuses the connect (the client
    // moves on) and accepts nothing it would reset.
    step(
        "routing listener open after the push: TCP connect to",
        "connected",
    );
    step(
        "restarted Envoy without its table: TCP connect to 192.0.2.4:6443",
        "refused",
    );
    step(
        "connections the restarted replica accepted and reset before its table",
        "0",
    );
    step("connections that failed on every address", "0");
    // Node loss with floating addresses, then takeover off.
    step("every agent holds its home address", "yes");
    for event in [
        "node frozen, neighbour answers (every process stopped, the kernel answers ARP)",
        "gray failure (the replica's VLAN port drops every frame, links up)",
        "node loss, neighbour silent (links down)",
    ] {
        step(
            &format!("{event}: long-lived connection through 192.0.2.4"),
            "reset by its first resend after the move",
        );
        step(&format!("{event}: failed lookups or connections"), "0");
        step(
            &format!("return after {event}: failed lookups or connections"),
            "0",
        );
        step(
            &format!("return after {event}: connections open at the hand-back and reset by it"),
            "<= ",
        );
        step(&format!("{event}: arping probes answered by two MACs"), "0");
        step(
            &format!("{event}: lookups started after the address moved slower than 2 s"),
            "0",
        );
    }
    // The management API stopped: the data plane does not notice.
    for outage in [
        "API stopped 5 s (oooi-kube-mock frozen)",
        "API stopped 120 s (oooi-kube-mock frozen)",
    ] {
        step(
            &format!("{outage}: samples with an address off its home replica"),
            "0",
        );
        step(&format!("{outage}: lookups slower than 1 s"), "0");
        step(&format!("{outage}: failed lookups or connections"), "0");
    }
    step(
        "drain of replica 1 (replaced after 3 s): failed lookups or connections",
        "0",
    );
    step(
        "drain of replica 1 (replaced after 3 s): connections open at the hand-back and reset by it",
        "<= ",
    );
    step(
        "drain of replica 1 (replaced after 3 s): lookups that waited the resolver's timeout",
        "0",
    );
    step(
        "drain of replica 1 (replaced after 3 s): long-lived connection through 192.0.2.4",
        "reset within 3 s",
    );
    step("each address went home after each return", "yes");
    step(
        "takeover off, node loss, neighbour answers (every IP packet dropped): lookups from 2 s after the loss answering 192.0.2.4 first",
        "0 of more than 0",
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("summary: all ") && l.contains("steps passed")),
        "{text}"
    );
}
