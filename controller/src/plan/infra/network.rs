//! The Infra's network, parsed once, with the cross-field checks the schema
//! cannot express. Every problem names the field (`spec.…`) and the value.

use std::net::{IpAddr, SocketAddr};

use oooi_dhcp_config::Subnet;
use oooi_vocabulary::{
    AddressRange, FieldError, InterfaceAddress, IpAddress, VlanNetwork, observed_address,
};

use crate::crd::Infra;

/// The Infra's network after every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    /// The VLAN.
    pub cidr: VlanNetwork,
    /// Its gateway.
    pub gateway: IpAddr,
    /// NetworkAttachmentDefinition name.
    pub nad: String,
    /// NetworkAttachmentDefinition namespace (defaulted to the Infra's).
    pub nad_namespace: String,
    /// Upstream resolvers as `ip:port`.
    pub upstreams: Vec<SocketAddr>,
    /// `resolv.conf` is listed: the DNS pod's own resolvers follow `upstreams`.
    pub resolv_conf: bool,
    /// DHCP server addresses (one per server: two for a pair) and the
    /// pool, when DHCP is enabled.
    pub dhcp: Option<(Vec<IpAddr>, AddressRange)>,
    /// DNS replica addresses, in the Infra's order (empty when DNS is
    /// disabled).
    pub dns: Vec<IpAddr>,
    /// Proxy replica addresses, in the Infra's order (empty when the proxy
    /// is disabled).
    pub proxy: Vec<IpAddr>,
}

impl Network {
    /// `ip/prefix` with the VLAN's own prefix length, for the Multus annotation.
    pub fn with_prefix(&self, ip: IpAddr) -> String {
        self.interface_address(ip).to_string()
    }

    /// `ip` with the VLAN's own prefix length: a server's VLAN interface.
    pub fn interface_address(&self, ip: IpAddr) -> InterfaceAddress {
        // Every address here is a host of the VLAN, so of its family, and
        // the VLAN's prefix fits that family: never the fallback.
        InterfaceAddress::new(ip, self.cidr.prefix_len())
            .unwrap_or_else(|_| InterfaceAddress::host(ip))
    }

    /// Every infra address: gateway and the enabled components.
    pub fn infra_addresses(&self) -> Vec<IpAddr> {
        let mut out = vec![self.gateway];
        out.extend(self.dhcp.iter().flat_map(|d| d.0.iter().copied()));
        out.extend(self.dns.iter().copied());
        out.extend(self.proxy.iter().copied());
        out
    }

    /// True when `a` is a host address of the VLAN (not network, not broadcast).
    pub fn is_host(&self, a: IpAddr) -> bool {
        self.cidr.is_host(a)
    }

    /// An address another project reports (a VMI's interface, a Machine's
    /// address: bare or `ip/prefix`, see [`observed_address`]) when it is a
    /// host of the VLAN and no infra address: a worker's.
    pub fn worker_host(&self, reported: &str) -> Option<IpAddr> {
        let a = observed_address(reported)?;
        (self.cidr.is_host(a) && !self.infra_addresses().contains(&a)).then_some(a)
    }
}

pub use crate::crd::RESOLV_CONF;

/// Most DHCP servers one Infra runs: a pair shares one pool.
pub const MAX_DHCP_SERVERS: usize = 2;

/// Most DNS or proxy replicas one Infra runs (one per VLAN address).
pub const MAX_REPLICAS: usize = 5;

/// The addresses of a component that runs one server per VLAN address, each
/// with its field path: the list form `<base>.serverIPs` or the one-address
/// form `<base>.serverIP`. Exactly one of the two must be set, the list
/// holds 1 to `max` addresses.
pub fn server_addresses(
    base: &str,
    one: Option<IpAddress>,
    many: &[IpAddress],
    max: usize,
) -> Result<Vec<(String, IpAddress)>, FieldError> {
    match (one, many.is_empty()) {
        (Some(_), false) => Err(FieldError::new(
            format!("{base}.serverIPs"),
            "set serverIP or serverIPs, not both",
        )),
        (None, true) => Err(FieldError::new(
            format!("{base}.serverIPs"),
            "set serverIP (one server) or serverIPs (one address per server)",
        )),
        (Some(a), true) => Ok(vec![(format!("{base}.serverIP"), a)]),
        (None, false) if many.len() > max => Err(FieldError::new(
            format!("{base}.serverIPs"),
            format!("{} addresses given, at most {max}", many.len()),
        )),
        (None, false) => Ok(many
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("{base}.serverIPs[{i}]"), *a))
            .collect()),
    }
}

/// Parses and checks the Infra's network. Returns every problem found, not
/// only the first, so one status update lists them all.
///
/// Each address was parsed when the Infra was read (the fields are
/// [`IpAddress`]es); what is left are the rules across fields: one form of
/// the server addresses, every address a host of the VLAN and used once,
/// the pool inside the VLAN and clear of them.
pub fn parse_network(infra: &Infra) -> Result<Network, Vec<FieldError>> {
    let mut errors = Vec::new();
    let nc = &infra.spec.network_config;
    let comps = &infra.spec.infra_components;

    // The subnet rule (the one of every part) held when the Infra was read.
    let cidr = nc.cidr;
    // DHCPv4 serves an IPv4 VLAN only.
    if comps.dhcp.enabled
        && let Err(message) = Subnet::from_vlan(nc.cidr)
    {
        errors.push(FieldError::new("spec.networkConfig.cidr", message));
    }

    let mut servers =
        |enabled: bool, base: &str, one: Option<IpAddress>, many: &[IpAddress], max| {
            if !enabled {
                return Vec::new();
            }
            server_addresses(base, one, many, max).unwrap_or_else(|e| {
                errors.push(e);
                Vec::new()
            })
        };
    let dhcp_fields = servers(
        comps.dhcp.enabled,
        "spec.infraComponents.dhcp",
        comps.dhcp.server_ip,
        &comps.dhcp.server_ips,
        MAX_DHCP_SERVERS,
    );
    let dns_fields = servers(
        comps.dns.enabled,
        "spec.infraComponents.dns",
        comps.dns.server_ip,
        &comps.dns.server_ips,
        MAX_REPLICAS,
    );
    let proxy_fields = servers(
        comps.proxy.enabled,
        "spec.infraComponents.proxy",
        comps.proxy.server_ip,
        &comps.proxy.server_ips,
        MAX_REPLICAS,
    );
    // A host of the VLAN (so of its family).
    let mut host = |field: &str, a: IpAddress| -> Option<IpAddr> {
        match cidr.check_host(field, a.ip()) {
            Ok(()) => Some(a.ip()),
            Err(e) => {
                errors.push(e);
                None
            }
        }
    };

    // Unset: the first host of the CIDR, as the reference deployments use.
    let (gateway_field, gateway) = match nc.gateway {
        Some(g) => (
            "spec.networkConfig.gateway",
            host("spec.networkConfig.gateway", g),
        ),
        None => (
            "spec.networkConfig.gateway (unset: the first host of the CIDR)",
            Some(cidr.first_host()),
        ),
    };
    let mut hosts = |fields: Vec<(String, IpAddress)>| -> Vec<(String, Option<IpAddr>)> {
        fields
            .into_iter()
            .map(|(field, a)| {
                let a = host(&field, a);
                (field, a)
            })
            .collect()
    };
    let dhcp_ips = hosts(dhcp_fields);
    let dns_ips = hosts(dns_fields);
    let proxy_ips = hosts(proxy_fields);
    let (start_field, end_field) = (
        "spec.infraComponents.dhcp.rangeStart",
        "spec.infraComponents.dhcp.rangeEnd",
    );
    let range = comps.dhcp.enabled.then(|| {
        (
            host(start_field, comps.dhcp.range_start),
            host(end_field, comps.dhcp.range_end),
        )
    });

    // Infra addresses must be distinct: two components on one address would
    // fight over ARP on the VLAN.
    let mut named: Vec<(String, Option<IpAddr>)> = vec![(gateway_field.to_string(), gateway)];
    named.extend(dhcp_ips.iter().cloned());
    named.extend(dns_ips.iter().cloned());
    named.extend(proxy_ips.iter().cloned());
    for (i, (field, a)) in named.iter().enumerate() {
        let Some(a) = a else { continue };
        if let Some((other, _)) = named[..i].iter().find(|(_, b)| *b == Some(*a)) {
            errors.push(FieldError::new(
                field.clone(),
                format!("{a} is already used by {other}"),
            ));
        }
    }

    let mut pool = None;
    if let Some((Some(start), Some(end))) = range {
        if let Err(e) = cidr.check_pool(start_field, start, end_field, end) {
            errors.push(e);
        } else if let Some(range) = AddressRange::new(start, end) {
            for (field, a) in &named {
                if let Some(a) = *a
                    && range.contains(a)
                {
                    errors.push(FieldError::new(
                        start_field,
                        format!("the pool {range} contains {a} ({field}); the pool must exclude infra addresses"),
                    ));
                }
            }
            pool = Some(range);
        }
    }

    if comps.dhcp.enabled
        && let Err(message) = comps.dhcp.lease_time.seconds()
    {
        errors.push(FieldError::new(
            "spec.infraComponents.dhcp.leaseTime",
            message,
        ));
    }

    let mut upstreams = Vec::new();
    let mut resolv_conf = false;
    for (i, s) in nc.dns_servers.iter().enumerate() {
        if s.trim() == RESOLV_CONF {
            resolv_conf = true;
            continue;
        }
        // The DNS server's own rule for an upstream.
        match oooi_dns_config::upstream_server(s) {
            Ok(a) => upstreams.push(a),
            Err(message) => errors.push(FieldError::new(
                format!("spec.networkConfig.dnsServers[{i}]"),
                format!("{message}, nor `{RESOLV_CONF}`"),
            )),
        }
    }

    let infra_ns = infra.metadata.namespace.clone().unwrap_or_default();
    let attachment = match (
        &nc.network_attachment_definition,
        &nc.cluster_user_defined_network,
    ) {
        (Some(nad), None) => Some((
            nad.clone(),
            nc.network_attachment_namespace
                .clone()
                .unwrap_or_else(|| infra_ns.clone()),
        )),
        // OVN-Kubernetes names the NetworkAttachmentDefinition of a selected
        // namespace after the ClusterUserDefinedNetwork.
        (None, Some(cudn)) => {
            if let Some(other) = &nc.network_attachment_namespace {
                errors.push(FieldError::new(
                    "spec.networkConfig.networkAttachmentNamespace",
                    format!(
                        "`{other}` cannot be set with clusterUserDefinedNetwork: its NetworkAttachmentDefinition is in the Infra's namespace"
                    ),
                ));
            }
            Some((cudn.name.clone(), infra_ns.clone()))
        }
        (Some(_), Some(_)) => {
            errors.push(FieldError::new(
                "spec.networkConfig.clusterUserDefinedNetwork",
                "set either networkAttachmentDefinition or clusterUserDefinedNetwork, not both",
            ));
            None
        }
        (None, None) => {
            errors.push(FieldError::new(
                "spec.networkConfig.networkAttachmentDefinition",
                "unset: name the VLAN with networkAttachmentDefinition or clusterUserDefinedNetwork",
            ));
            None
        }
    };

    if !errors.is_empty() {
        return Err(errors);
    }
    // Every value below was checked above; an absent one means a disabled component.
    let (Some(gateway), Some((nad, nad_namespace))) = (gateway, attachment) else {
        return Err(vec![FieldError::new("spec.networkConfig", "incomplete")]);
    };
    Ok(Network {
        cidr,
        gateway,
        nad,
        nad_namespace,
        upstreams,
        resolv_conf,
        dhcp: pool
            .filter(|_| !dhcp_ips.is_empty())
            .map(|p| (dhcp_ips.iter().filter_map(|(_, a)| *a).collect(), p)),
        dns: dns_ips.iter().filter_map(|(_, a)| *a).collect(),
        proxy: proxy_ips.iter().filter_map(|(_, a)| *a).collect(),
    })
}
