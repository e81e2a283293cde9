//! DNS names from the file's strings, and the record sets they own. Every
//! error names the field and quotes the bad value.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::str::FromStr;

use hickory_proto::rr::{LowerName, Name};

use crate::error::{ConfigError, invalid};
use crate::model::RecordSet;

/// A fully qualified name.
pub(crate) fn name(field: &str, s: &str) -> Result<Name, ConfigError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(invalid(field, "empty name"));
    }
    let mut name =
        Name::from_str(s).map_err(|e| invalid(field, format!("`{s}` is not a DNS name: {e}")))?;
    name.set_fqdn(true);
    Ok(name)
}

/// `label` (one or more labels) under `origin`.
pub(crate) fn join(field: &str, label: &str, origin: &Name) -> Result<Name, ConfigError> {
    let rel = name(field, label)?;
    rel.append_domain(origin)
        .map_err(|e| invalid(field, format!("`{label}` under `{origin}`: {e}")))
}

/// Adds `set` under `name`. The same address twice is fine (several clusters
/// sharing a proxy); different addresses for one name is a conflict.
pub(crate) fn add_record(
    records: &mut BTreeMap<LowerName, RecordSet>,
    field: &str,
    name: &Name,
    set: RecordSet,
) -> Result<(), ConfigError> {
    let key = LowerName::new(name);
    if let Some(old) = records.get_mut(&key) {
        if (!old.a.is_empty() && !set.a.is_empty() && old.a != set.a)
            || (!old.aaaa.is_empty() && !set.aaaa.is_empty() && old.aaaa != set.aaaa)
        {
            return Err(invalid(
                field,
                format!("`{name}` already has different addresses"),
            ));
        }
        if old.a.is_empty() {
            old.a = set.a;
        }
        if old.aaaa.is_empty() {
            old.aaaa = set.aaaa;
        }
        return Ok(());
    }
    records.insert(key, set);
    Ok(())
}

/// The record set of one address.
/// Several addresses, in the order given, split by family.
pub(crate) fn many(ips: &[IpAddr], ttl: u32) -> RecordSet {
    let mut set = RecordSet {
        a: vec![],
        aaaa: vec![],
        ttl,
    };
    for ip in ips {
        match ip {
            IpAddr::V4(a) => set.a.push(*a),
            IpAddr::V6(a) => set.aaaa.push(*a),
        }
    }
    set
}

pub(crate) fn single(ip: IpAddr, ttl: u32) -> RecordSet {
    match ip {
        IpAddr::V4(a) => RecordSet {
            a: vec![a],
            aaaa: vec![],
            ttl,
        },
        IpAddr::V6(a) => RecordSet {
            a: vec![],
            aaaa: vec![a],
            ttl,
        },
    }
}
