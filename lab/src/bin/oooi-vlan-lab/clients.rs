//! What the lab's clients do from a namespace: resolve with `dig`, open TLS
//! through the proxy, push the routing table as the controller does.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::lab::Lab;

/// Calls `f` until it succeeds or `secs` have passed.
pub fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> Result<String>) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => bail!("{what}: {e:#}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// TLS from `ns` to `ip:port`; the answering backend's name or `refused`.
pub fn probe(lab: &Lab, ns: &str, ip: &str, port: u16, sni: Option<&str>) -> String {
    let addr = format!("{ip}:{port}");
    let mut args = vec!["probe", addr.as_str()];
    if let Some(s) = sni {
        args.extend(["--sni", s]);
    }
    lab.me_in(ns, &args)
        .unwrap_or_else(|_| "refused".to_string())
}

/// The lowest A record `server` gives for `name`, asked from `ns`, or
/// `no answer`.
pub fn dig(lab: &Lab, ns: &str, server: &str, name: &str) -> String {
    dig_port(lab, ns, server, 53, name)
}

/// [`dig`] at `port` of `server`.
pub fn dig_port(lab: &Lab, ns: &str, server: &str, port: u16, name: &str) -> String {
    lab.run_in(
        ns,
        &[
            "dig",
            "+short",
            "+time=2",
            "+tries=1",
            "-p",
            &port.to_string(),
            &format!("@{server}"),
            name,
            "A",
        ],
    )
    .ok()
    .and_then(|s| {
        // oooi-dns rotates a name's addresses per query: the lowest one
        // stands for the answer (the Infra's first replica address).
        s.lines().filter_map(|l| l.parse::<Ipv4Addr>().ok()).min()
    })
    .map(|a| a.to_string())
    .unwrap_or_else(|| "no answer".to_string())
}

/// Every A record `server` gives for `name`, asked from `ns`, in the
/// order of the answer, comma-separated; or `no answer`.
pub fn dig_all(lab: &Lab, ns: &str, server: &str, name: &str) -> String {
    let got: Vec<String> = lab
        .run_in(
            ns,
            &[
                "dig",
                "+short",
                "+time=2",
                "+tries=1",
                &format!("@{server}"),
                name,
                "A",
            ],
        )
        .map(|s| {
            s.lines()
                .filter(|l| l.parse::<Ipv4Addr>().is_ok())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if got.is_empty() {
        "no answer".to_string()
    } else {
        got.join(",")
    }
}

/// The addresses glibc's `getaddrinfo` gives for `name` in `ns` (with the
/// worker's /etc/resolv.conf), in order, comma-separated; or the failure.
pub fn getent_ahostsv4(lab: &Lab, ns: &str, name: &str) -> String {
    match lab.run_in(ns, &["getent", "ahostsv4", name]) {
        Ok(out) => {
            let mut seen: Vec<&str> = Vec::new();
            for a in out.lines().filter_map(|l| l.split_whitespace().next()) {
                if !seen.contains(&a) {
                    seen.push(a);
                }
            }
            seen.join(",")
        }
        Err(_) => "no answer".to_string(),
    }
}

/// The table API of every proxy replica, reached from the management
/// network.
pub struct Push {
    /// The namespace the push comes from.
    pub from: String,
    /// `ip:port` of each replica's table API.
    pub apis: Vec<String>,
    pub token: String,
}

impl Push {
    /// `PUT /v1/routes` with `file` to every replica, as the controller
    /// does; `200` when every replica took it, else each replica's status.
    pub fn put(&self, lab: &Lab, file: &Path) -> String {
        let got: Vec<(String, String)> = self
            .apis
            .iter()
            .map(|api| (api.clone(), self.put_to(lab, api, file)))
            .collect();
        if got.iter().all(|(_, s)| s == "200") {
            "200".to_string()
        } else {
            got.iter()
                .map(|(api, s)| format!("{api}: {s}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    }

    /// `PUT /v1/routes` with `file` to the table API at `api`, retried for
    /// 60 s (an Envoy starting on a loaded machine takes a while to open its
    /// listeners); the HTTP status, or the error.
    pub fn put_to(&self, lab: &Lab, api: &str, file: &Path) -> String {
        wait_until(60, "push", || {
            lab.me_in(
                &self.from,
                &[
                    "http",
                    "PUT",
                    api,
                    "/v1/routes",
                    "--token",
                    &self.token,
                    "--body",
                    file.to_str().unwrap_or_default(),
                ],
            )
        })
        .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
        .unwrap_or_else(|e| format!("{e:#}"))
    }
}

/// A comma-separated list of addresses in sorted order: DNS answers every
/// proxy address rotated per query, and glibc sorts them again, so a lab
/// step compares the set.
pub fn as_set(list: &str) -> String {
    let mut v: Vec<&str> = list.split(',').filter(|a| !a.is_empty()).collect();
    // Numeric order (192.0.2.4 before 192.0.2.14), text after addresses.
    v.sort_by_key(|a| {
        (
            a.parse::<Ipv4Addr>().map_err(|_| a.to_string()),
            a.to_string(),
        )
    });
    v.join(",")
}
