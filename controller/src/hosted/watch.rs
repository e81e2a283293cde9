//! The per-attachment watch of the apps Service in the hosted cluster.
//!
//! MetalLB writes the VIP into the Service's `status.loadBalancer` whenever
//! it assigns or moves one; a resync would notice minutes later, this watch
//! within the watch latency. Each event goes through [`Hosted::set_vip`],
//! which triggers the Infra reconcile (DNS `*.apps` and the proxy routes)
//! and the attachment's (status) only when the VIP changed.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tracing::{debug, warn};

use super::Hosted;
use crate::crd::InfraClusterAttachment;
use crate::plan::hosted::apps_ingress::vip_of;

/// What one watch event means for the VIP: `Some(vip)` to record (`None`
/// inside: no VIP), or no change to make.
pub fn vip_update(
    event: &watcher::Event<Service>,
    seen_in_init: &mut bool,
) -> Option<Option<std::net::IpAddr>> {
    let vip = |s: &Service| vip_of(&serde_json::to_value(s).unwrap_or_default());
    match event {
        watcher::Event::Apply(s) => Some(vip(s)),
        watcher::Event::InitApply(s) => {
            *seen_in_init = true;
            Some(vip(s))
        }
        watcher::Event::Delete(_) => Some(None),
        watcher::Event::Init => {
            *seen_in_init = false;
            None
        }
        // A relist that found no Service: it was deleted while disconnected.
        watcher::Event::InitDone => (!*seen_in_init).then_some(None),
    }
}

/// Starts watching Service `namespace/name` in the hosted cluster for `att`.
pub fn start(
    hosted: Hosted,
    att: InfraClusterAttachment,
    client: Client,
    namespace: String,
    name: String,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<Service> = Api::namespaced(client, &namespace);
        let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher(api, cfg).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut seen = false;
        debug!(service = %format!("{namespace}/{name}"), "watching the apps Service");
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => {
                    if let Some(vip) = vip_update(&ev, &mut seen) {
                        hosted.set_vip(&att, vip);
                    }
                }
                Err(e) => warn!(
                    service = %format!("{namespace}/{name}"),
                    "hosted apps Service watch: {e}"
                ),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(ip: Option<&str>) -> Service {
        let ingress = ip.map(|i| json!([{"ip": i}])).unwrap_or(json!([]));
        serde_json::from_value(json!({
            "metadata": {"name": "s", "namespace": "n"},
            "status": {"loadBalancer": {"ingress": ingress}}
        }))
        .unwrap()
    }

    #[test]
    fn watch_events_map_to_vip_updates() {
        let mut seen = false;
        let ip = "198.51.100.50".parse().ok();
        assert_eq!(
            vip_update(
                &watcher::Event::Apply(svc(Some("198.51.100.50"))),
                &mut seen
            ),
            Some(ip)
        );
        assert_eq!(
            vip_update(&watcher::Event::Apply(svc(None)), &mut seen),
            Some(None),
            "VIP withdrawn"
        );
        assert_eq!(
            vip_update(
                &watcher::Event::Delete(svc(Some("198.51.100.50"))),
                &mut seen
            ),
            Some(None)
        );
        assert_eq!(vip_update(&watcher::Event::Init, &mut seen), None);
        assert_eq!(
            vip_update(&watcher::Event::InitDone, &mut seen),
            Some(None),
            "relist without the Service"
        );
        assert_eq!(vip_update(&watcher::Event::Init, &mut seen), None);
        assert_eq!(
            vip_update(
                &watcher::Event::InitApply(svc(Some("198.51.100.51"))),
                &mut seen
            ),
            Some("198.51.100.51".parse().ok())
        );
        assert_eq!(vip_update(&watcher::Event::InitDone, &mut seen), None);
    }
}
