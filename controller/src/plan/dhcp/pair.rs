//! The DHCP pair as the controller plans it: two servers of one pool, each
//! reaching the other's pair API through a peer Service with a shared token
//! Secret, and one PodDisruptionBudget over both. The servers' own failover
//! is `oooi-dhcp`'s; this module only names and wires the pair.

use std::net::IpAddr;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::crd::DHCPServer;
use crate::plan::labels::Component;

/// Port of the pair API (`--pair-listen`, on the pod address; its peer
/// Service forwards to it).
pub const PEER_PORT: u16 = 9068;
/// Where the pair token Secret is mounted.
pub const PAIR_TOKEN_DIR: &str = "/etc/oooi-dhcp-pair";
/// Key of the pair token in its Secret (and file name in the mount).
pub const PAIR_TOKEN_KEY: &str = "token";

/// Name of the Secret (key `token`) the two DHCP servers of an Infra's pair
/// authenticate each other with.
pub fn pair_token_secret_name(infra: &str) -> String {
    format!("{infra}-dhcp-pair-token")
}

/// What [`peer_service_name`] appends to the server's name.
const PEER_SERVICE_SUFFIX: &str = "-peer";

/// Name of the Service in front of a pair server's pair API.
pub fn peer_service_name(server: &str) -> String {
    format!("{server}{PEER_SERVICE_SUFFIX}")
}

/// The other server of a DHCP pair, as this server's config reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairPartner {
    /// The DHCPServer `name` in `namespace`, reached through its peer
    /// Service (how the controller plans every pair).
    Server {
        /// Its name (its pods' [`SERVER_LABEL`](crate::plan::labels::SERVER_LABEL)).
        name: String,
        /// Its namespace.
        namespace: String,
    },
    /// Reached by address: its pods cannot be told by their labels, so
    /// every other oooi DHCP pod of the namespace is admitted (the pair
    /// API still asks for the pair's token).
    Unnamed,
}

/// The other server of a pair from the `api` its config names: the server
/// behind a peer Service (`<server>-peer[.<namespace>[.svc[.<domain>]]]:<port>`,
/// as [`super::configs`] writes it), else [`PairPartner::Unnamed`] (an address, or
/// a name the controller did not write). `namespace` is the server's own.
pub fn pair_partner(api: &str, namespace: &str) -> PairPartner {
    let host = api.rsplit_once(':').map_or(api, |(h, _)| h);
    if host.parse::<IpAddr>().is_ok() {
        return PairPartner::Unnamed;
    }
    let mut labels = host.split('.');
    let service = labels.next().unwrap_or_default();
    let theirs = labels.next();
    let rest: Vec<&str> = labels.collect();
    // Past the namespace only the cluster's Service domain may follow.
    if rest.first().is_some_and(|l| *l != "svc") {
        return PairPartner::Unnamed;
    }
    match service.strip_suffix(PEER_SERVICE_SUFFIX) {
        Some(name) if !name.is_empty() => PairPartner::Server {
            name: name.to_string(),
            namespace: theirs.unwrap_or(namespace).to_string(),
        },
        _ => PairPartner::Unnamed,
    }
}

/// The PodDisruptionBudget of a pair (both servers' pods): a drain evicts
/// one server at a time, so the other keeps serving the whole pool. A pod
/// that is not Ready may be evicted anyway (it serves nobody).
pub fn pair_budget(primary: &DHCPServer, name: &str, instance: &str) -> PodDisruptionBudget {
    crate::plan::workload::rolling::replicas_budget(
        primary,
        &format!("{name}-pair"),
        instance,
        Component::Dhcp,
    )
}
