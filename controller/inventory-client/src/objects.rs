//! What the inventory's join reads of KubeVirt VMIs and CAPI Machines (the
//! controller's observed state reads them the same way).

use kube::api::DynamicObject;
use serde_json::Value;

/// One interface of a VMI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmiInterface {
    /// Interface name in the VMI spec (e.g. `default`, `vlan`).
    pub name: Option<String>,
    /// MAC address, as the VMI spells it.
    pub mac: Option<String>,
    /// `ipAddress` and `ipAddresses` together, without duplicates.
    pub ip_addresses: Vec<String>,
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// A VMI's `status.interfaces` (name, MAC, `ipAddress` and `ipAddresses`
/// merged without duplicates), plus the interfaces of
/// `spec.domain.devices.interfaces` with a `macAddress` that the status does
/// not report yet: a VMI's MAC is known from its creation, its address only
/// once its guest took a lease.
pub fn vmi_interfaces(obj: &DynamicObject) -> Vec<VmiInterface> {
    let mut interfaces: Vec<VmiInterface> = obj.data["status"]["interfaces"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| {
                    let mut ips = strings(&i["ipAddress"]);
                    for ip in strings(&i["ipAddresses"]) {
                        if !ips.contains(&ip) {
                            ips.push(ip);
                        }
                    }
                    VmiInterface {
                        name: i["name"].as_str().map(str::to_string),
                        mac: i["mac"].as_str().map(str::to_string),
                        ip_addresses: ips,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    for i in obj.data["spec"]["domain"]["devices"]["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let Some(mac) = i["macAddress"].as_str() else {
            continue;
        };
        let name = i["name"].as_str().map(str::to_string);
        match interfaces
            .iter_mut()
            .find(|s| s.name.is_some() && s.name == name)
        {
            Some(reported) => {
                if reported.mac.is_none() {
                    reported.mac = Some(mac.to_string());
                }
            }
            None => interfaces.push(VmiInterface {
                name,
                mac: Some(mac.to_string()),
                ip_addresses: Vec::new(),
            }),
        }
    }
    interfaces
}

/// A Machine's `status.addresses[].address`, whatever their type.
pub fn machine_addresses(obj: &DynamicObject) -> Vec<String> {
    obj.data["status"]["addresses"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x["address"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
