//! The Kubernetes side: one `coordination.k8s.io/v1` Lease per floating
//! address, read with GET and written with POST (create) or PUT (replace at
//! the resourceVersion read: a 409 means somebody else wrote first).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use crate::machine::{Observation, Record, Write, WriteOutcome};
use crate::metrics::Metrics;

/// The annotation a home replica sets to ask for its address back; its
/// value is the home's identity.
pub const WANTED_BY: &str = oooi_vocabulary::labels::WANTED_BY;
/// Label with the address a Lease fences.
pub const ADDRESS_LABEL: &str = oooi_vocabulary::labels::ADDRESS;
/// Label naming the writer.
pub const MANAGED_BY: &str = oooi_vocabulary::labels::APP_MANAGED_BY;
/// The writer.
pub const AGENT: &str = "oooi-addr-agent";

/// The Lease name of `address`: `<prefix>-a-b-c-d`.
pub fn lease_name(prefix: &str, address: Ipv4Addr) -> String {
    let [a, b, c, d] = address.octets();
    format!("{prefix}-{a}-{b}-{c}-{d}")
}

/// A prefix that, with any address, gives a valid Lease name (a DNS-1123
/// subdomain of at most 253 characters; kept to DNS-1123 label characters).
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 200
        && prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && prefix.starts_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "--lease-prefix {prefix:?}: use lower-case letters, digits and '-', starting with a letter or digit, at most 200 characters"
        ))
    }
}

/// The part of a Lease the machine decides on.
pub fn record_of(lease: &Lease) -> Record {
    let spec = lease.spec.clone().unwrap_or_default();
    Record {
        holder: spec.holder_identity.filter(|h| !h.is_empty()),
        version: lease.metadata.resource_version.clone().unwrap_or_default(),
        wanted_by: lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(WANTED_BY).cloned())
            .filter(|w| !w.is_empty()),
        transitions: spec.lease_transitions.unwrap_or(0),
    }
}

/// The Lease `write` asks for, built on `previous` (the Lease last read or
/// written: fields this agent does not own are kept), at wall time `now`.
/// The wall times are for people and tools; no agent decides on them.
pub fn desired(
    previous: Option<&Lease>,
    name: &str,
    address: Ipv4Addr,
    write: &Write,
    lease_duration: Duration,
    now: Timestamp,
) -> Lease {
    let mut lease = previous.cloned().unwrap_or_default();
    let meta = &mut lease.metadata;
    meta.name = Some(name.to_string());
    meta.resource_version = write.base.clone();
    if write.base.is_none() {
        *meta = ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        };
    }
    meta.managed_fields = None;
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(MANAGED_BY.to_string(), AGENT.to_string());
    labels.insert(ADDRESS_LABEL.to_string(), address.to_string());
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    match &write.wanted_by {
        Some(w) => {
            annotations.insert(WANTED_BY.to_string(), w.clone());
        }
        None => {
            annotations.remove(WANTED_BY);
        }
    }
    if annotations.is_empty() {
        meta.annotations = None;
    }
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = write.holder.clone();
    // Whole seconds in the API; agents judge expiry by their own
    // --lease-duration, as client-go does.
    let seconds = lease_duration.as_millis().div_ceil(1000);
    spec.lease_duration_seconds = Some(i32::try_from(seconds).unwrap_or(i32::MAX));
    spec.lease_transitions = Some(write.transitions);
    if write.new_holder {
        spec.acquire_time = Some(MicroTime(now));
    }
    if write.renews {
        spec.renew_time = Some(MicroTime(now));
    }
    if write.holder.is_none() {
        spec.acquire_time = None;
        spec.renew_time = None;
    }
    lease
}

/// One address's Lease in the API.
pub struct LeaseClient {
    api: Api<Lease>,
    name: String,
    address: Ipv4Addr,
    lease_duration: Duration,
    last: Option<Lease>,
    metrics: Metrics,
}

impl LeaseClient {
    /// The Lease `name` fencing `address` in the namespace of `api`.
    pub fn new(
        api: Api<Lease>,
        name: String,
        address: Ipv4Addr,
        lease_duration: Duration,
        metrics: Metrics,
    ) -> LeaseClient {
        LeaseClient {
            api,
            name,
            address,
            lease_duration,
            last: None,
            metrics,
        }
    }

    /// The Lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads the Lease.
    pub async fn read(&mut self) -> Result<Observation, kube::Error> {
        let result = self.api.get_opt(&self.name).await;
        self.metrics.api_request("get", code_of(&result));
        match result? {
            Some(lease) => {
                let record = record_of(&lease);
                self.last = Some(lease);
                Ok(Observation::Found(record))
            }
            None => {
                self.last = None;
                Ok(Observation::Missing)
            }
        }
    }

    /// Writes the Lease as `write` says.
    pub async fn write(&mut self, write: &Write) -> WriteOutcome {
        let lease = desired(
            self.last.as_ref(),
            &self.name,
            self.address,
            write,
            self.lease_duration,
            Timestamp::now(),
        );
        let pp = PostParams::default();
        let (verb, result) = match write.base {
            None => ("create", self.api.create(&pp, &lease).await),
            Some(_) => ("replace", self.api.replace(&self.name, &pp, &lease).await),
        };
        self.metrics.api_request(verb, code_of(&result));
        match result {
            Ok(stored) => {
                let record = record_of(&stored);
                self.last = Some(stored);
                WriteOutcome::Written(record)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => WriteOutcome::Conflict,
            Err(e) => {
                tracing::warn!(lease = %self.name, intent = write.intent.as_str(), error = %e, "Lease write failed");
                WriteOutcome::Failed
            }
        }
    }
}

/// The HTTP status of an API answer for the request counter (`error` when
/// there was none).
fn code_of<T>(result: &Result<T, kube::Error>) -> String {
    match result {
        Ok(_) => "200".to_string(),
        Err(kube::Error::Api(status)) => status.code.to_string(),
        Err(_) => "error".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Intent;

    fn write(intent: Intent, holder: Option<&str>, wanted: Option<&str>) -> Write {
        Write {
            intent,
            base: Some("7".into()),
            holder: holder.map(str::to_string),
            wanted_by: wanted.map(str::to_string),
            transitions: 3,
            new_holder: false,
            renews: false,
        }
    }

    #[test]
    fn lease_names_carry_the_address() {
        assert_eq!(
            lease_name("vlan100-dns", Ipv4Addr::new(192, 0, 2, 3)),
            "vlan100-dns-192-0-2-3"
        );
        assert!(check_prefix("vlan100-dns").is_ok());
        let e = check_prefix("Vlan_100").unwrap_err();
        assert!(
            e.contains("--lease-prefix") && e.contains("Vlan_100"),
            "{e}"
        );
    }

    #[test]
    fn a_want_keeps_the_holder_and_its_renew_time() {
        let t = Timestamp::from_second(1_000).unwrap();
        let mut w = write(Intent::Renew, Some("a"), None);
        w.renews = true;
        w.new_holder = true;
        let held = desired(
            None,
            "l",
            Ipv4Addr::new(192, 0, 2, 3),
            &w,
            Duration::from_millis(1500),
            t,
        );
        let spec = held.spec.clone().unwrap();
        assert_eq!(spec.lease_duration_seconds, Some(2));
        assert_eq!(spec.renew_time, Some(MicroTime(t)));
        let later = Timestamp::from_second(2_000).unwrap();
        let wanted = desired(
            Some(&held),
            "l",
            Ipv4Addr::new(192, 0, 2, 3),
            &write(Intent::Want, Some("a"), Some("home")),
            Duration::from_millis(1500),
            later,
        );
        let spec = wanted.spec.clone().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(
            spec.renew_time,
            Some(MicroTime(t)),
            "only the holder renews"
        );
        assert_eq!(record_of(&wanted).wanted_by.as_deref(), Some("home"));
        assert_eq!(wanted.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            wanted
                .metadata
                .labels
                .unwrap()
                .get(ADDRESS_LABEL)
                .map(String::as_str),
            Some("192.0.2.3")
        );
    }

    #[test]
    fn a_release_empties_the_holder_and_its_times() {
        let t = Timestamp::from_second(1_000).unwrap();
        let mut w = write(Intent::Acquire, Some("a"), None);
        w.renews = true;
        w.new_holder = true;
        let held = desired(
            None,
            "l",
            Ipv4Addr::new(192, 0, 2, 3),
            &w,
            Duration::from_secs(2),
            t,
        );
        let released = desired(
            Some(&held),
            "l",
            Ipv4Addr::new(192, 0, 2, 3),
            &write(Intent::Release, None, None),
            Duration::from_secs(2),
            t,
        );
        let spec = released.spec.unwrap();
        assert_eq!(
            (spec.holder_identity, spec.renew_time, spec.acquire_time),
            (None, None, None)
        );
        assert_eq!(record_of(&held).holder.as_deref(), Some("a"));
    }
}
