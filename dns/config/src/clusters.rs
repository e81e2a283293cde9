//! Cluster expansion: each `clusters[]` entry becomes, per view `kind`, the
//! control-plane names, the `*.apps` wildcard and the `kubernetes` aliases.
//!
//! - vlan: the cluster zone (its names and `*.apps` → proxy and apps VIP;
//!   any other name in it NXDOMAIN), and the aliases → proxy while
//!   `aliases` is set.
//! - pod: with an `internal_proxy`, each control-plane name exactly (so the
//!   rest of the zone still forwards) and, with `apps_to_pods`, the apps
//!   zone → internal proxy. Never the aliases: on the management cluster
//!   those names are its own API.

use std::collections::BTreeMap;
use std::net::IpAddr;

use hickory_proto::rr::{LowerName, Name};
use oooi_vocabulary::KUBERNETES_ALIASES;

use crate::error::{ConfigError, invalid};
use crate::fields::{add_record, join, many, name, single};
use crate::file::{RawCluster, ViewKind};
use crate::model::{RecordSet, Zone};

/// Control-plane names published per cluster when `clusters[].names` is not set.
pub const DEFAULT_CONTROL_PLANE_NAMES: [&str; 5] =
    ["api", "api-int", "oauth", "ignition", "konnectivity"];

/// One `clusters[]` entry with its fields parsed, reused by every view.
pub(crate) struct Cluster {
    field: String,
    zone: Name,
    proxy: Vec<IpAddr>,
    internal_proxy: Option<IpAddr>,
    apps_vip: Option<IpAddr>,
    apps_to_pods: bool,
    aliases: bool,
    names: Vec<String>,
}

impl Cluster {
    /// Parses `clusters[index]`.
    pub(crate) fn parse(index: usize, c: &RawCluster) -> Result<Self, ConfigError> {
        let f = format!("clusters[{index}]");
        if c.name.is_empty() || c.name.contains('.') {
            return Err(invalid(
                format!("{f}.name"),
                format!("`{}` must be one non-empty label", c.name),
            ));
        }
        let base = name(&format!("{f}.base_domain"), &c.base_domain)?;
        let zone = join(&format!("{f}.name"), &c.name, &base)?;
        if c.proxy.0.is_empty() {
            return Err(invalid(format!("{f}.proxy"), "needs at least one address"));
        }
        let proxy = c.proxy.0.clone();
        let (internal_proxy, apps_vip) = (c.internal_proxy, c.apps_vip);
        let names = match &c.names {
            Some(n) => n.clone(),
            None => DEFAULT_CONTROL_PLANE_NAMES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        };
        for (j, n) in names.iter().enumerate() {
            name(&format!("{f}.names[{j}]"), n)?;
        }
        if c.apps_to_pods && (apps_vip.is_none() || internal_proxy.is_none()) {
            return Err(invalid(
                format!("{f}.apps_to_pods"),
                "needs both apps_vip and internal_proxy",
            ));
        }
        Ok(Cluster {
            field: f,
            zone,
            proxy,
            internal_proxy,
            apps_vip,
            apps_to_pods: c.apps_to_pods,
            aliases: c.aliases,
            names,
        })
    }

    /// Adds what a view of `kind` publishes for this cluster to its `zones`
    /// and exact `hosts`.
    pub(crate) fn publish(
        &self,
        kind: ViewKind,
        ttl: u32,
        zones: &mut Vec<Zone>,
        hosts: &mut BTreeMap<LowerName, RecordSet>,
    ) -> Result<(), ConfigError> {
        let f = &self.field;
        match kind {
            ViewKind::Vlan => {
                let mut records = BTreeMap::new();
                for (j, n) in self.names.iter().enumerate() {
                    let name = join(&format!("{f}.names[{j}]"), n, &self.zone)?;
                    add_record(&mut records, f, &name, many(&self.proxy, ttl))?;
                }
                if let Some(vip) = self.apps_vip {
                    let name = join(&format!("{f}.apps_vip"), "*.apps", &self.zone)?;
                    // An exact name listed in `names` under apps wins anyway.
                    add_record(&mut records, f, &name, single(vip, ttl))?;
                }
                zones.push(Zone {
                    origin: LowerName::new(&self.zone),
                    records,
                });
                if self.aliases {
                    self.aliases(&format!("{f}.proxy"), &self.proxy, ttl, hosts)?;
                }
            }
            ViewKind::Pod => {
                if let Some(ip) = self.internal_proxy {
                    // Exact names, not the zone: the cluster's other names
                    // (its public apps, say) still forward from the pods.
                    for (j, n) in self.names.iter().enumerate() {
                        let name = join(&format!("{f}.names[{j}]"), n, &self.zone)?;
                        add_record(
                            hosts,
                            &format!("{f}.internal_proxy"),
                            &name,
                            single(ip, ttl),
                        )?;
                    }
                }
                if let (true, Some(ip)) = (self.apps_to_pods, self.internal_proxy) {
                    // Only the apps zone: every other name of the cluster
                    // stays forwarded in this view.
                    let apps = join(&format!("{f}.apps_to_pods"), "apps", &self.zone)?;
                    let wild = join(&format!("{f}.apps_to_pods"), "*", &apps)?;
                    let mut records = BTreeMap::new();
                    add_record(&mut records, f, &wild, single(ip, ttl))?;
                    zones.push(Zone {
                        origin: LowerName::new(&apps),
                        records,
                    });
                }
            }
            ViewKind::Custom => {}
        }
        Ok(())
    }

    fn aliases(
        &self,
        field: &str,
        ips: &[IpAddr],
        ttl: u32,
        hosts: &mut BTreeMap<LowerName, RecordSet>,
    ) -> Result<(), ConfigError> {
        for alias in KUBERNETES_ALIASES {
            let name = name(&self.field, alias)?;
            add_record(hosts, field, &name, many(ips, ttl))?;
        }
        Ok(())
    }
}
