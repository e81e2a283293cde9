//! `oooi-addr-agent`: runs beside each DNS and proxy replica (its own
//! container, the pod's network namespace) and moves the component's VLAN
//! addresses between ready replicas, the way VRRP does rather than the
//! kube-vip way: the replicas advertise themselves to each other on the
//! VLAN every 200 ms, and each computes the owner of every address from
//! what it hears with one pure function, so the VLAN itself is the witness
//! of who is alive and the Kubernetes API is never asked. The owner adds
//! the address to its VLAN interface and announces it by gratuitous ARP;
//! an address goes back to its home replica once that one is ready again.
//!
//! - [`machine`]: the decision logic (pure, injected time); [`advert`]:
//!   the adverts' wire format;
//! - [`netlink`], [`arp`], [`plane`]: the interface; [`defend`]: the
//!   holder's answer to other hosts claiming its addresses; [`tickle`]:
//!   ending a lost holder's connections; [`run`]: the driver;
//!   [`metrics`]: `oooi_agent_*`.
//!
//! docs/failover.md explains the design, the windows and the settings.

pub mod advert;
pub mod arp;
pub mod defend;
pub mod machine;
pub mod metrics;
pub mod netlink;
pub mod plane;
pub mod run;
pub mod tickle;

/// Parses a duration written as `<integer>ms` or `<integer>s`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| s.split_at(i))
        .ok_or_else(|| format!("{s:?}: give a unit (ms or s)"))?;
    let n: u64 = n.parse().map_err(|_| format!("{s:?}: not a duration"))?;
    match unit {
        "ms" => Ok(std::time::Duration::from_millis(n)),
        "s" => Ok(std::time::Duration::from_secs(n)),
        _ => Err(format!("{s:?}: the unit must be ms or s")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_take_ms_or_s() {
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("2").unwrap_err().contains("unit"));
        assert!(parse_duration("2m").unwrap_err().contains("\"2m\""));
    }
}
