//! Scale check: plan one Infra with N attachments (default 200), each with
//! three workers (Machines and VMIs), then render every child and the routing
//! table. Prints wall times; run with `--release` for meaningful numbers:
//!
//! ```sh
//! cargo run -p oooi-controller --release --example plan_scale -- 200
//! ```

#![allow(clippy::unwrap_used)] // a measurement program: a failed unwrap is its answer

use std::time::Instant;

use oooi_controller::crd::{Infra, InfraClusterAttachment};
use oooi_controller::plan::{
    self, HostedClusterKey, Observed, ObservedCluster, ObservedMachine, ObservedVmi,
    infra::observed::ObservedInterface,
};
use oooi_controller::testing::InfraBuilder;

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(200);
    let infra: Infra = InfraBuilder::new()
        .uid("u1")
        .remove("/metadata/generation")
        .cidr("10.0.0.0/16")
        .gateway("10.0.0.1")
        .upstreams(&["10.255.0.10"])
        .dhcp(serde_json::json!({"serverIP": "10.0.0.2"}))
        .dhcp_range("10.0.200.1", "10.0.250.254")
        .dns(serde_json::json!({"serverIP": "10.0.0.3"}))
        .proxy(serde_json::json!({"serverIP": "10.0.0.4"}))
        .images(Some("dhcp"), Some("dns"), Some("envoy"))
        .build();
    let mut attachments: Vec<InfraClusterAttachment> = Vec::new();
    let mut observed = Observed::default();
    for i in 0..n {
        let text = format!(
            "apiVersion: hostedcluster.densityops.com/v1alpha1\nkind: InfraClusterAttachment\nmetadata: {{name: c{i}, namespace: oooi}}\nspec:\n  infraRef: {{name: vlan}}\n  hostedClusterRef: {{name: c{i}}}\n  dns: {{clusterName: c{i}, baseDomain: example.com}}\n"
        );
        attachments.push(serde_saphyr::from_str(&text)?);
        let mut cluster = ObservedCluster::default();
        for w in 0..3 {
            let ip = format!("10.0.{}.{}", 1 + i / 80, 1 + (i % 80) * 3 + w);
            let name = format!("c{i}-w{w}");
            cluster.machines.push(ObservedMachine {
                name: name.clone(),
                addresses: vec![ip.clone()],
            });
            cluster.vmis.push(ObservedVmi {
                name,
                interfaces: vec![ObservedInterface {
                    name: Some("vlan".into()),
                    mac: Some(format!(
                        "02:00:00:{:02x}:{:02x}:{:02x}",
                        i / 256,
                        i % 256,
                        w
                    )),
                    ip_addresses: vec![ip],
                }],
            });
        }
        observed
            .clusters
            .insert(HostedClusterKey::new("clusters", format!("c{i}")), cluster);
    }

    let t = Instant::now();
    let p = plan::plan_infra(&infra, &attachments, &observed);
    let plan_time = t.elapsed();
    let d = p
        .desired
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("invalid: {:?}", p.errors))?;
    let t = Instant::now();
    let mut objects = 0;
    objects += plan::dhcp::children(d.dhcp.first().unwrap())?
        .to_values()
        .len();
    objects += plan::dns::children(d.dns.first().unwrap())?
        .to_values()
        .len();
    objects += plan::proxy::children(d.proxy.first().unwrap(), "0123456789abcdef0123")?
        .to_values()
        .len();
    let children_time = t.elapsed();
    let proxy = d.proxy.first().unwrap();
    let table = plan::proxy::table(&proxy.spec, 1);
    let json = table.to_json();
    println!(
        "attachments={n} accepted={} routes={} table_bytes={} reservations={} children={objects}",
        p.totals.accepted,
        table.routes.len(),
        json.len(),
        d.dhcp.first().unwrap().spec.config.0.reservations.len(),
    );
    println!(
        "plan_infra (incl. config validation): {:.1} ms",
        plan_time.as_secs_f64() * 1e3
    );
    println!(
        "children of the three components:   {:.1} ms",
        children_time.as_secs_f64() * 1e3
    );
    Ok(())
}
