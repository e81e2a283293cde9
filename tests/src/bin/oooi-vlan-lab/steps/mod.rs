//! The lab's run, in order: render, the VLAN, the infra on it, the first
//! table push, the management pod network's DNS, the workers, then the
//! changes. Each step prints what it
//! checked; a step added here runs after the ones before it.

mod changes;
mod infra;
mod pods;
mod topology;
mod workers;

use anyhow::Result;

use crate::UpArgs;
use crate::clients::Push;
use crate::lab::Lab;
use crate::render::Rendered;
use crate::report::Report;

/// Builds the lab and runs every check; the report of the steps.
pub fn run(lab: &mut Lab, args: &UpArgs) -> Result<Report> {
    let mut report = Report::default();
    let wasm = oooi_tests::filter_wasm()?;

    // 1. Render.
    let mut rendered = Rendered::first(&lab.dir, &args.manifests, &wasm)?;

    // 2. Namespaces and the bridge.
    let ns = topology::build(lab, &rendered)?;
    pods::plug_dns_pod(&ns)?;
    let public = pods::site_resolver(lab, &rendered, &ns)?;

    // 3. Simulated control planes in mgmt.
    infra::control_planes(lab, &rendered, &ns)?;

    // 4. oooi-dhcp, oooi-dns, Envoy.
    let dns_mount = infra::data_plane(lab, args, &rendered, &ns, &wasm, &mut report)?;

    // 5. Push the table from the management network, as the controller does.
    let push = Push {
        from: ns.mgmt.clone(),
        api: format!("10.128.0.2:{}", rendered.api_port),
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

    // 8. MetalLB moves an apps VIP; 9. the last attachment is deleted;
    // 10. the remaining cluster's workers become known; 11. the Infra no
    // longer names an internal proxy Service.
    let mut changes = changes::Changes {
        docs: std::mem::take(&mut rendered.docs),
        generation: 1,
        wasm: &wasm,
        dns_mount: &dns_mount,
        push: &push,
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
