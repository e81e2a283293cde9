//! Changes in the cluster, as the controller sees them: MetalLB moves an
//! apps VIP, the last attachment is deleted, then the remaining cluster's
//! workers are unknown until a Machine reports its address. Each is
//! rendered again, the DNS ConfigMap swapped and the next table generation
//! pushed; DNS and routes must follow.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, anyhow, bail};
use serde_json::Value;

use super::pods;
use super::topology::Namespaces;
use super::workers::Booted;
use crate::clients::{dig, probe, wait_until};
use crate::lab::Lab;
use crate::render::{
    Rendered, Targets, attached_clusters, forget_worker_addresses, remove_internal_proxy_service,
    remove_last_attachment, rerender, set_machine_addresses, set_observed_apps_vip,
};
use crate::report::Report;

/// `dig name` from `ns` once the DNS server has reloaded: `want` within
/// 10 s, else what it answers then.
fn dig_after_reload(lab: &Lab, ns: &str, dns_ip: &str, name: &str, want: &str) -> String {
    wait_until(10, "the DNS reload", || {
        let got = dig(lab, ns, dns_ip, name);
        if got == want {
            Ok(got)
        } else {
            bail!("still {got}")
        }
    })
    .unwrap_or_else(|_| dig(lab, ns, dns_ip, name))
}

/// The manifests as changed so far and the last pushed generation.
pub struct Changes<'a> {
    pub docs: Vec<Value>,
    pub generation: u64,
    pub wasm: &'a Path,
    /// Every DNS replica's ConfigMap mount and every proxy's table API.
    pub to: Targets<'a>,
    /// The site resolver's answers, by name: what an unowned name forwards to.
    pub public: &'a BTreeMap<String, String>,
}

impl Changes<'_> {
    /// Renders the changed manifests again, swaps the DNS ConfigMap and
    /// pushes the next table generation.
    fn push_next(&mut self, lab: &Lab, report: &mut Report) -> Result<()> {
        self.generation += 1;
        let generation = self.generation;
        let got = rerender(lab, &self.docs, generation, self.wasm, &self.to)?;
        report.step(
            &format!("re-render, DNS ConfigMap swap, push generation {generation}"),
            "200",
            &got,
        );
        Ok(())
    }

    /// MetalLB moves each apps VIP: the observed state changes, render runs
    /// again, the DNS ConfigMap is updated and the new table pushed.
    pub fn move_apps_vips(
        &mut self,
        lab: &Lab,
        r: &Rendered,
        booted: &[Booted],
        report: &mut Report,
    ) -> Result<()> {
        let Rendered {
            dns_ip,
            proxy_ip,
            apps_vips,
            base,
            ..
        } = r;
        for (cluster, (old, new)) in apps_vips {
            println!(
                "\napps VIP of cluster {cluster} moves {old} -> {new} (observed state changed):"
            );
            set_observed_apps_vip(&mut self.docs, cluster, *new)?;
            self.push_next(lab, report)?;
            let Some((_, ns)) = booted.iter().find(|(c, _)| c == cluster) else {
                continue;
            };
            let console = format!("console-openshift-console.apps.{cluster}.{base}");
            let want = new.to_string();
            let got = dig_after_reload(lab, ns, dns_ip, &console, &want);
            report.step(&format!("dig {console}"), &want, &got);
            let got = probe(lab, ns, proxy_ip, 443, Some(&console));
            report.step(
                "TLS *.apps:443 through the proxy by SNI",
                &format!("vip/{new}"),
                &got,
            );
        }
        Ok(())
    }

    /// The last attachment is deleted: its routes and records go, the
    /// other clusters' stay.
    pub fn delete_last_attachment(
        &mut self,
        lab: &Lab,
        r: &Rendered,
        booted: &[Booted],
        report: &mut Report,
    ) -> Result<()> {
        let Rendered {
            dns_ip,
            proxy_ip,
            apps_vips,
            base,
            ..
        } = r;
        if let Some(gone) = remove_last_attachment(&mut self.docs) {
            println!("\nattachment of cluster {gone} deleted:");
            self.push_next(lab, report)?;
            let fqdn = format!("api.{gone}.{base}");
            for (cluster, ns) in booted {
                let own = format!("clusters-{cluster}/kube-apiserver");
                if *cluster == gone {
                    // No longer oooi's: forwarded like any unowned name.
                    let want = self.public.get(&fqdn).map_or("no answer", String::as_str);
                    let got = dig_after_reload(lab, ns, dns_ip, &fqdn, want);
                    report.step(
                        &format!("dig {fqdn} from its worker (forwarded)"),
                        want,
                        &got,
                    );
                    if apps_vips.contains_key(gone.as_str()) {
                        let console = format!("console-openshift-console.apps.{gone}.{base}");
                        let got = dig(lab, ns, dns_ip, &console);
                        report.step(&format!("dig {console}"), "no answer", &got);
                    }
                    let got = probe(lab, ns, proxy_ip, 6443, Some(&fqdn));
                    report.step(&format!("TLS {fqdn}:6443 by SNI"), "refused", &got);
                    let got = probe(lab, ns, proxy_ip, 6443, Some("kubernetes.default.svc"));
                    report.step("TLS kubernetes.default.svc:6443 (alias)", "refused", &got);
                    let got = probe(lab, ns, proxy_ip, 6443, None);
                    report.step("TLS :6443 without SNI", "refused", &got);
                } else {
                    let name = format!("api.{cluster}.{base}");
                    let got = dig(lab, ns, dns_ip, &name);
                    report.step(&format!("dig {name} (kept)"), proxy_ip, &got);
                    let got = probe(lab, ns, proxy_ip, 6443, Some(&name));
                    report.step(&format!("TLS {name}:6443 by SNI (kept)"), &own, &got);
                    let got = probe(lab, ns, proxy_ip, 6443, Some("kubernetes.default.svc"));
                    report.step("TLS kubernetes.default.svc:6443 (alias, kept)", &own, &got);
                }
            }
        }
        Ok(())
    }

    /// The attached clusters' workers are not yet known (each Machine
    /// without an address, each VMI reporting none): the VLAN view answers
    /// no alias and the proxy routes none. Then a Machine address of one
    /// cluster arrives and both appear for its worker.
    pub fn workers_become_known(
        &mut self,
        lab: &Lab,
        r: &Rendered,
        booted: &[Booted],
        report: &mut Report,
    ) -> Result<()> {
        let Rendered {
            dns_ip,
            proxy_ip,
            base,
            ..
        } = r;
        let attached = attached_clusters(&self.docs);
        let Some((cluster, ns)) = booted.iter().find(|(c, _)| attached.contains(c)) else {
            bail!("no booted worker of an attached cluster ({attached:?})");
        };
        let own = format!("clusters-{cluster}/kube-apiserver");
        let alias = "kubernetes.default.svc";

        println!(
            "\nworkers of cluster {} not yet known (Machine without address, VMI reports none):",
            attached.join(", ")
        );
        // Every attached cluster's: the alias names are shared on the VLAN.
        let mut taken = Vec::new();
        for c in &attached {
            let forgotten = forget_worker_addresses(&mut self.docs, c)?;
            if c == cluster {
                taken = forgotten;
            }
        }
        self.push_next(lab, report)?;
        let got = dig_after_reload(lab, ns, dns_ip, alias, "no answer");
        report.step(
            &format!("dig {alias} (alias, no known worker)"),
            "no answer",
            &got,
        );
        let got = probe(lab, ns, proxy_ip, 443, Some(alias));
        report.step(
            &format!("TLS {alias}:443 (alias, no known worker)"),
            "refused",
            &got,
        );
        let got = probe(lab, ns, proxy_ip, 6443, Some(alias));
        report.step(
            &format!("TLS {alias}:6443 (alias, no known worker)"),
            "refused",
            &got,
        );
        let got = probe(lab, ns, proxy_ip, 6443, None);
        report.step("TLS :6443 without SNI (no known worker)", "refused", &got);
        // The cluster's own names do not depend on its workers.
        let fqdn = format!("api.{cluster}.{base}");
        let got = dig(lab, ns, dns_ip, &fqdn);
        report.step(&format!("dig {fqdn} (no known worker)"), proxy_ip, &got);
        let got = probe(lab, ns, proxy_ip, 6443, Some(&fqdn));
        report.step(
            &format!("TLS {fqdn}:6443 by SNI (no known worker)"),
            &own,
            &got,
        );

        let (machine, addresses) = taken
            .into_iter()
            .find(|(_, a)| a.as_array().is_some_and(|a| !a.is_empty()))
            .ok_or_else(|| anyhow!("cluster {cluster} has no Machine with an address"))?;
        let shown: Vec<&str> = addresses
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        println!(
            "\nMachine {machine} of cluster {cluster} reports its address {}:",
            shown.join(", ")
        );
        set_machine_addresses(&mut self.docs, cluster, &machine, addresses)?;
        self.push_next(lab, report)?;
        let got = dig_after_reload(lab, ns, dns_ip, alias, proxy_ip);
        report.step(
            &format!("dig {alias} (alias, worker known)"),
            proxy_ip,
            &got,
        );
        let got = probe(lab, ns, proxy_ip, 443, Some(alias));
        report.step(
            &format!("TLS {alias}:443 (alias, worker known)"),
            &own,
            &got,
        );
        let got = probe(lab, ns, proxy_ip, 6443, Some(alias));
        report.step(
            &format!("TLS {alias}:6443 (alias, worker known)"),
            &own,
            &got,
        );
        let got = probe(lab, ns, proxy_ip, 6443, None);
        report.step("TLS :6443 without SNI (worker known)", &own, &got);
        Ok(())
    }

    /// The Infra no longer names an internal proxy Service: the pod view
    /// answers no control-plane name, a management pod gets the site
    /// resolver's answer for them.
    pub fn remove_internal_proxy_service(
        &mut self,
        lab: &Lab,
        r: &Rendered,
        ns: &Namespaces,
        report: &mut Report,
    ) -> Result<()> {
        println!("\ninternalProxyService removed from the Infra:");
        remove_internal_proxy_service(&mut self.docs)?;
        self.push_next(lab, report)?;
        let attached = attached_clusters(&self.docs);
        pods::pod_view(lab, (&attached, &r.base), ns, None, self.public, report);
        Ok(())
    }
}
