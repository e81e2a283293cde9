//! The lab's run, in order: render, the VLAN, the infra on it (two DNS and
//! two proxy replicas), the first table push, the management pod network's
//! DNS, the workers, the failover of a replica of each, then the changes.
//! Each step prints what it checked; a step added here runs after the ones
//! before it.

mod changes;
mod failover;
mod infra;
mod no_takeover;
mod node_loss;
mod pods;
mod topology;
mod workers;

use anyhow::Result;

use crate::UpArgs;
use crate::clients::Push;
use crate::lab::Lab;
use crate::render::{Rendered, Targets};
use crate::report::Report;

/// Builds the lab and runs every check; the report of the steps.
pub fn run(lab: &mut Lab, args: &UpArgs) -> Result<Report> {
    let mut report = Report::default();
    let wasm = oooi_tests::filter_wasm()?;

    // 1. Render.
    let mut rendered = Rendered::first(&lab.dir, &args.manifests, &wasm)?;

    // 2. Namespaces and the bridge.
    let ns = topology::build(lab, &rendered)?;
    pods::plug_dns_pods(&ns)?;
    let public = pods::site_resolver(lab, &rendered, &ns)?;

    // 3. Simulated control planes in mgmt.
    infra::control_planes(lab, &rendered, &ns)?;

    // 4. oooi-dhcp, the oooi-dns replicas, the Envoy replicas.
    let mut plane = infra::data_plane(lab, args, &rendered, &ns, &wasm, &mut report)?;

    // 5. Push the table from the management network to every proxy
    // replica, as the controller does.
    let push = Push {
        from: ns.mgmt.clone(),
        apis: (0..ns.proxy.len())
            .map(|i| format!("{}:{}", topology::proxy_pod_ip(i), rendered.api_port))
            .collect(),
        token: rendered.token.clone(),
    };
    infra::first_push(lab, &push, &rendered, &mut report);

    // 6. A management pod asks the DNS pod view.
    println!("\nthe management pod network:");
    pods::pod_view(
        lab,
        (&rendered.clusters, &rendered.base),
        &ns,
        rendered.internal_proxy.as_deref(),
        &public,
        &mut report,
    );

    // 7. Workers.
    let booted = workers::run_all(lab, &rendered, &ns, &mut report)?;

    // 8. Failover: while the workers resolve and connect in a loop, one
    // proxy replica and then one DNS replica is killed and started again.
    failover::run(
        lab,
        &rendered,
        &mut plane,
        (&push, &rendered.routes_file),
        &booted,
        &mut report,
    )?;

    // 8b. Node loss with floating addresses: the address agents beside
    // every DNS and proxy replica move replica 1's addresses to replica 2
    // and back.
    let agents = node_loss::run(
        lab,
        args,
        (&rendered, &ns),
        &mut plane,
        (&push, &rendered.routes_file),
        &booted,
        &mut report,
    )?;
    // 8c. The same losses with takeover off (the OVN-style mode).
    no_takeover::run(lab, &rendered, &ns, &plane, &booted, &agents, &mut report)?;

    // 9. MetalLB moves an apps VIP; 10. the last attachment is deleted;
    // 11. the remaining cluster's workers become known; 12. the Infra no
    // longer names an internal proxy Service.
    let mut changes = changes::Changes {
        docs: std::mem::take(&mut rendered.docs),
        generation: 1,
        wasm: &wasm,
        to: Targets {
            replicas: &rendered.replicas,
            dns_mounts: &plane.dns_mounts,
            push: &push,
        },
        public: &public,
    };
    changes.move_apps_vips(lab, &rendered, &booted, &mut report)?;
    changes.delete_last_attachment(lab, &rendered, &booted, &mut report)?;
    changes.workers_become_known(lab, &rendered, &booted, &mut report)?;
    if rendered.internal_proxy.is_some() {
        changes.remove_internal_proxy_service(lab, &rendered, &ns, &mut report)?;
    }
    Ok(report)
}
