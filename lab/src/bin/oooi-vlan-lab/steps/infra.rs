//! The infra of the VLAN: the simulated control planes and the MetalLB
//! stand-in, then oooi-dhcp, oooi-dns and Envoy started from the rendered
//! files, and the first table push.

use std::path::{Path, PathBuf};

use crate::launch::{Launcher, Program, RunAs, Volume};
use anyhow::{Result, anyhow, bail};

use super::topology::{Namespaces, replica_suffix};
use crate::UpArgs;
use crate::backends;
use crate::clients::{Push, wait_until};
use crate::lab::{Lab, Started, run};
use crate::render::{Rendered, backend_name, publish_config, walk};
use crate::report::Report;

/// The proxy pod's emptyDir where oooi-envoy-gate writes Envoy's listeners
/// (the controller's `LISTENERS_DIR`).
const POD_LISTENERS_DIR: &str = "/run/oooi-envoy";

/// Simulated control planes in mgmt; the MetalLB stand-in on the VLAN.
pub fn control_planes(lab: &mut Lab, r: &Rendered, ns: &Namespaces) -> Result<()> {
    let Rendered {
        plen,
        apps_vips,
        services,
        ..
    } = r;
    let mgmt = &ns.mgmt;
    let listen: Vec<String> = services
        .iter()
        .map(|(host, (ip, port))| format!("{}@{ip}:{port}", backend_name(host)))
        .collect();
    backends::start(lab, mgmt, &listen, "backends")?;
    println!("control planes in {mgmt}:");
    for (host, (ip, port)) in services {
        println!("  {:<28} {:<52} {ip}:{port}", backend_name(host), host);
    }
    // MetalLB stand-in: every apps VIP, current and next, answered on the
    // VLAN by a TLS server named after its address.
    if !apps_vips.is_empty() {
        let apps_ns = lab.add_ns("apps")?;
        lab.plug(&apps_ns, "apps", "net1", None, None)?;
        let mut listen = Vec::new();
        for (cluster, (old, new)) in apps_vips {
            for vip in [old, new] {
                run(&[
                    "ip",
                    "-n",
                    &apps_ns,
                    "addr",
                    "add",
                    &format!("{vip}/{plen}"),
                    "dev",
                    "net1",
                ])?;
                listen.push(format!("vip/{vip}@{vip}:443"));
            }
            println!("  apps ingress of {cluster:<14} {apps_ns} {old} (moves to {new})");
        }
        backends::start(lab, &apps_ns, &listen, "apps-backends")?;
    }
    Ok(())
}

/// The running replicas: what the later steps swap, kill and start again.
pub struct DataPlane {
    /// Each DNS replica's ConfigMap mount, in replica order.
    pub dns_mounts: Vec<PathBuf>,
    /// Each DNS replica: its VLAN address and the running program.
    pub dns: Vec<(String, Started)>,
    /// Each proxy replica: its VLAN address and the running program.
    pub proxies: Vec<(String, Started)>,
}

/// Starts oooi-dhcp, every oooi-dns replica and every Envoy replica in
/// their namespaces and checks the servers answer.
pub fn data_plane(
    lab: &mut Lab,
    args: &UpArgs,
    r: &Rendered,
    ns: &Namespaces,
    wasm: &Path,
    report: &mut Report,
) -> Result<DataPlane> {
    let Rendered {
        dhcp_cfg,
        envoy_src,
        dns_text,
        dhcp_ip,
        iface,
        replicas,
        ..
    } = r;
    let dhcp_ns = &ns.dhcp;
    let dir = lab.dir.clone();
    let data = dir.join("dhcp-data");
    let render_dir = dir.join("render");
    std::fs::create_dir_all(&data)?;
    let launcher = args.launcher();
    println!("data plane: {}", launcher.describe());
    launcher.check()?;
    // Every container runs with the security context render planned for
    // its pod: the lease store is the claim the pod's fsGroup owns, as the
    // kubelet hands it over.
    let mut shapes = Vec::new();
    lab.launch(
        &launcher,
        dhcp_ns,
        "oooi-dhcp",
        &Program {
            binary: "oooi-dhcp",
            entrypoint: "/usr/local/bin/oooi-dhcp".into(),
            image: "dhcp",
            security: r.security("dhcp", "dhcp")?,
            mounts: vec![
                (render_dir.clone(), Volume::Config),
                (data.clone(), Volume::Claim),
            ],
            env: Vec::new(),
            args: vec![
                "serve".into(),
                "--config".into(),
                dhcp_cfg.to_string_lossy().into_owned(),
                "--data-dir".into(),
                data.to_string_lossy().into_owned(),
                "--metrics-addr".into(),
                "127.0.0.1:9067".into(),
                // The probes' own listener, as in the pod.
                "--health-addr".into(),
                "127.0.0.1:9070".into(),
            ],
        },
    )?;
    shapes.push(("oooi-dhcp", dhcp_ns.clone(), r.security("dhcp", "dhcp")?));
    // Like each DNS pod: its ConfigMap is a kubelet mount, updated by the
    // `..data` symlink swap, which oooi-dns watches.
    let mut dns = Vec::new();
    let mut dns_mounts = Vec::new();
    for (i, (dns_ns, ip)) in ns.dns.iter().zip(&replicas.dns).enumerate() {
        let suffix = replica_suffix(i);
        let dns_mount = dir.join(format!("dns-config{suffix}"));
        let dns_mounted = publish_config(
            &dns_mount,
            "config.yaml",
            &replicas.dns_config(dns_text, i)?,
        )?;
        let started = lab.launch(
            &launcher,
            dns_ns,
            &format!("oooi-dns{suffix}"),
            &Program {
                binary: "oooi-dns",
                entrypoint: "/usr/local/bin/oooi-dns".into(),
                image: "dns",
                security: r.security("dns", "dns")?,
                mounts: vec![(dns_mount.clone(), Volume::Config)],
                env: Vec::new(),
                args: vec![
                    "serve".into(),
                    "--config".into(),
                    dns_mounted.to_string_lossy().into_owned(),
                    "--metrics-addr".into(),
                    "127.0.0.1:9153".into(),
                    // The probes' own listener, as in the pod.
                    "--health-addr".into(),
                    "127.0.0.1:9154".into(),
                    // The pod view binds the pod address only.
                    "--pod-ip".into(),
                    super::pods::dns_pod_ip(i),
                ],
            },
        )?;
        shapes.push(("oooi-dns", dns_ns.clone(), r.security("dns", "dns")?));
        dns.push((ip.clone(), started));
        dns_mounts.push(dns_mount);
    }
    // The ConfigMap and filter mounts of the proxy pods, as directories
    // (every replica mounts the same ones: its listeners bind 0.0.0.0).
    let envoy_dir = dir.join("envoy");
    let filter_dir = dir.join("filter");
    std::fs::create_dir_all(&envoy_dir)?;
    std::fs::create_dir_all(&filter_dir)?;
    for e in std::fs::read_dir(envoy_src)? {
        let e = e?;
        let text = std::fs::read_to_string(e.path())?
            .replace("/etc/oooi-envoy", envoy_dir.to_str().unwrap_or_default())
            .replace("/etc/oooi-filter", filter_dir.to_str().unwrap_or_default());
        std::fs::write(envoy_dir.join(e.file_name()), text)?;
    }
    let module_ref = walk(&envoy_dir)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .find_map(|t| {
            // The module's file name, wherever the rendered layout puts it
            // (the filter mount, or `..data` of the config mount).
            let end = t.find(".wasm\"")? + ".wasm".len();
            let start = t[..end].rfind('"')? + 1;
            Some(t[start..end].to_string())
        })
        .ok_or_else(|| anyhow!("rendered Envoy config names no filter module"))?;
    if let Some(parent) = std::path::Path::new(&module_ref).parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(wasm, &module_ref)?;
    // Each replica runs behind oooi-envoy-gate, as the controller deploys
    // it: the gate writes the listeners Envoy reads into the replica's own
    // in-memory directory (the pod's emptyDir, here one directory per
    // replica, with the bootstrap naming it), the routing listeners only
    // once the replica holds its table.
    let bootstrap = std::fs::read_to_string(envoy_dir.join("envoy.json"))?;
    if !bootstrap.contains(POD_LISTENERS_DIR) {
        bail!("the rendered Envoy bootstrap reads no listeners from {POD_LISTENERS_DIR}");
    }
    let mut proxies = Vec::new();
    for (i, (proxy_ns, ip)) in ns.proxy.iter().zip(&replicas.proxy).enumerate() {
        let run_dir = dir.join(format!("envoy-run{}", replica_suffix(i)));
        let listeners = run_dir.join("listeners");
        std::fs::create_dir_all(&listeners)?;
        let own_bootstrap = run_dir.join("envoy.json");
        std::fs::write(
            &own_bootstrap,
            bootstrap.replace(POD_LISTENERS_DIR, listeners.to_str().unwrap_or_default()),
        )?;
        let mut args: Vec<String> = vec![
            "--listeners".into(),
            envoy_dir.join("lds.json").to_string_lossy().into_owned(),
            "--out".into(),
            listeners.to_string_lossy().into_owned(),
            "--ready".into(),
            format!("http://127.0.0.1:{}/ready", r.api_port),
            "--".into(),
            "envoy".into(),
            "-c".into(),
            own_bootstrap.to_string_lossy().into_owned(),
        ];
        args.extend(
            [
                "--use-dynamic-base-id",
                "--concurrency",
                "1",
                "--log-level",
                "warn",
                "--component-log-level",
                "wasm:info",
            ]
            .map(String::from),
        );
        // The bootstrap beside the pod's emptyDir: the Secret's file.
        let envoy = Program {
            binary: "oooi-envoy-gate",
            entrypoint: r.command("proxy", "proxy")?,
            image: "proxy",
            security: r.security("proxy", "proxy")?,
            mounts: vec![
                (envoy_dir.clone(), Volume::Config),
                (filter_dir.clone(), Volume::Config),
                (run_dir.clone(), Volume::Config),
                (listeners.clone(), Volume::EmptyDir),
            ],
            env: Vec::new(),
            args,
        };
        let started = lab.launch(
            &launcher,
            proxy_ns,
            &format!("envoy{}", replica_suffix(i)),
            &envoy,
        )?;
        shapes.push(("envoy", proxy_ns.clone(), r.security("proxy", "proxy")?));
        proxies.push((ip.clone(), started));
    }
    let got = wait_until(15, "oooi-dhcp /healthz", || {
        lab.me_in(dhcp_ns, &["http", "GET", "127.0.0.1:9070", "/healthz"])
    })
    .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
    .unwrap_or_else(|e| format!("{e:#}"));
    println!("\ninfra on the VLAN:");
    // Each container is named after its namespace.
    for (program, ns, security) in &shapes {
        check_shape(&launcher, program, (ns, ns), security, report);
    }
    report.step(
        &format!("oooi-dhcp serving on {dhcp_ns}/{iface} {dhcp_ip}"),
        "200",
        &got,
    );
    for (dns_ns, (ip, _)) in ns.dns.iter().zip(&dns) {
        let got = wait_until(15, "oooi-dns /healthz", || {
            lab.me_in(dns_ns, &["http", "GET", "127.0.0.1:9154", "/healthz"])
        })
        .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
        .unwrap_or_else(|e| format!("{e:#}"));
        report.step(
            &format!("oooi-dns serving on {ip}:53 ({dns_ns})"),
            "200",
            &got,
        );
    }
    Ok(DataPlane {
        dns_mounts,
        dns,
        proxies,
    })
}

/// Reports how a container the lab started runs (its main process's
/// identity, capabilities, no_new_privs and root file system) against the
/// security context render planned for it; and the pod's sysctls in its
/// network namespace. Nothing to compare with `--from-build`.
pub fn check_shape(
    launcher: &Launcher,
    program: &str,
    (ns, container): (&str, &str),
    security: &RunAs,
    report: &mut Report,
) {
    let got = match launcher.running_status(container) {
        Ok(Some(got)) => got,
        Ok(None) => return,
        Err(e) => format!("{e:#}"),
    };
    report.step(
        &format!("{program} in {container} runs as its pod says"),
        &security.expected_status(),
        &got,
    );
    if security.sysctls.is_empty() {
        return;
    }
    let words = |v: &str| v.split_whitespace().collect::<Vec<_>>().join(" ");
    let want: Vec<String> = security
        .sysctls
        .iter()
        .map(|(name, value)| format!("{name}={}", words(value)))
        .collect();
    let got: Vec<String> = security
        .sysctls
        .iter()
        .map(|(name, _)| {
            let v = run(&["ip", "netns", "exec", ns, "sysctl", "-n", name])
                .map(|v| words(&v))
                .unwrap_or_else(|e| format!("{e:#}"));
            format!("{name}={v}")
        })
        .collect();
    report.step(
        &format!("{ns}: the pod's sysctls"),
        &want.join(", "),
        &got.join(", "),
    );
}

/// Pushes the rendered table from the management network, as the
/// controller does.
pub fn first_push(lab: &Lab, push: &Push, r: &Rendered, report: &mut Report) {
    let got = push.put(lab, &r.routes_file);
    report.step(
        &format!(
            "push rendered table (generation 1) from mgmt to {}",
            push.apis.join(", ")
        ),
        "200",
        &got,
    );
    // Each replica's gate saw it ready and opened the routing listeners
    // (on all addresses: reached here through the pod-network side).
    for api in &push.apis {
        let host = api.rsplit_once(':').map_or(api.as_str(), |(h, _)| h);
        let target = format!("{host}:6443");
        let got = wait_until(15, "the routing listener", || {
            let got = lab.me_in(&push.from, &["connect", &target])?;
            if got == "connected" {
                Ok(got)
            } else {
                Err(anyhow!("{got}"))
            }
        })
        .unwrap_or_else(|e| format!("{e:#}"));
        report.step(
            &format!("routing listener open after the push: TCP connect to {target}"),
            "connected",
            &got,
        );
    }
}
