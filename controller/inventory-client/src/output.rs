//! What a person reads of the inventory: the `leases` table (and its wide
//! form), JSON and YAML, and the `why` report. Times are relative to the
//! DHCP server's clock.

use std::fmt::Write as _;

use oooi_dhcp_inventory::Why;
use serde::Serialize;

use crate::join::JoinedLease;

/// How the answer is printed.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// A table.
    Table,
    /// A table with every column.
    Wide,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// What the command found: the joined rows and what it could not do.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Inventory {
    /// The leases.
    pub leases: Vec<JoinedLease>,
    /// Servers not reached, joins not made, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The newest server clock seen (Unix seconds), for relative times.
    #[serde(skip)]
    pub now_unix: u64,
}

/// Seconds from `now` to `t`, as `in 5m` or `3h ago`.
pub fn relative(t: u64, now: u64) -> String {
    let (d, future) = if t >= now {
        (t - now, true)
    } else {
        (now - t, false)
    };
    let s = match d {
        0..60 => format!("{d}s"),
        60..3600 => format!("{}m", d / 60),
        3600..172_800 => format!("{}h", d / 3600),
        _ => format!("{}d", d / 86_400),
    };
    if future {
        format!("in {s}")
    } else {
        format!("{s} ago")
    }
}

fn dash(v: Option<&str>) -> String {
    v.filter(|s| !s.is_empty()).unwrap_or("-").to_string()
}

/// Aligned columns.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<String>, out: &mut String| {
        let last = cells.len() - 1;
        for (i, c) in cells.into_iter().enumerate() {
            if i == last {
                out.push_str(&c);
            } else {
                let pad = width[i] - c.chars().count() + 3;
                out.push_str(&c);
                out.push_str(&" ".repeat(pad));
            }
        }
        // An empty last cell leaves no padding behind.
        let kept = out.trim_end_matches(' ').len();
        out.truncate(kept);
        out.push('\n');
    };
    line(header.iter().map(|h| h.to_string()).collect(), &mut out);
    for r in rows {
        line(r.clone(), &mut out);
    }
    out
}

fn vmi_cell(r: &JoinedLease) -> String {
    match (&r.namespace, &r.vmi) {
        (Some(ns), Some(v)) => format!("{ns}/{v}"),
        _ => "-".into(),
    }
}

/// The inventory as the output format says.
pub fn render(inv: &Inventory, output: Output) -> anyhow::Result<String> {
    let now = inv.now_unix;
    Ok(match output {
        Output::Json => serde_json::to_string_pretty(inv)? + "\n",
        Output::Yaml => serde_saphyr::to_string(inv)?,
        Output::Table => {
            let rows: Vec<Vec<String>> = inv
                .leases
                .iter()
                .map(|r| {
                    vec![
                        r.infra.clone(),
                        r.lease.address.to_string(),
                        dash(r.lease.mac.as_deref()),
                        dash(r.lease.hostname.as_deref()),
                        r.lease.state.to_string(),
                        relative(r.lease.expires_unix, now),
                        vmi_cell(r),
                        dash(r.hosted_cluster.as_deref()),
                    ]
                })
                .collect();
            let mut out = table(
                &[
                    "INFRA", "ADDRESS", "MAC", "HOSTNAME", "STATE", "EXPIRES", "VMI", "CLUSTER",
                ],
                &rows,
            );
            notes(&mut out, &inv.notes);
            out
        }
        Output::Wide => {
            let rows: Vec<Vec<String>> = inv
                .leases
                .iter()
                .map(|r| {
                    vec![
                        r.infra.clone(),
                        r.lease.address.to_string(),
                        dash(r.lease.mac.as_deref()),
                        dash(r.lease.client_id.as_deref()),
                        dash(r.lease.hostname.as_deref()),
                        r.lease.state.to_string(),
                        if r.lease.reserved {
                            "yes".into()
                        } else {
                            "no".into()
                        },
                        r.lease
                            .cltt_unix
                            .map(|t| relative(t, now))
                            .unwrap_or_else(|| "-".into()),
                        relative(r.lease.expires_unix, now),
                        vmi_cell(r),
                        dash(r.vm.as_deref()),
                        dash(r.machine.as_deref()),
                        dash(r.node_pool.as_deref()),
                        dash(r.hosted_cluster.as_deref()),
                        r.lease
                            .answered_by
                            .map(|a| format!("{a:?}").to_lowercase())
                            .unwrap_or_else(|| "-".into()),
                        r.servers.join(","),
                    ]
                })
                .collect();
            let mut out = table(
                &[
                    "INFRA",
                    "ADDRESS",
                    "MAC",
                    "CLIENT-ID",
                    "HOSTNAME",
                    "STATE",
                    "RESERVED",
                    "LAST-SEEN",
                    "EXPIRES",
                    "VMI",
                    "VM",
                    "MACHINE",
                    "NODEPOOL",
                    "CLUSTER",
                    "ANSWERED-BY",
                    "SERVERS",
                ],
                &rows,
            );
            notes(&mut out, &inv.notes);
            out
        }
    })
}

fn notes(out: &mut String, notes: &[String]) {
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
}

/// One server's answer to `why`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WhyAnswer {
    /// The Infra, `namespace/name`.
    pub infra: String,
    /// The DHCPServer.
    pub dhcp_server: String,
    /// Its answer.
    #[serde(flatten)]
    pub why: Why,
}

fn rfc3339(t: u64) -> String {
    i64::try_from(t)
        .ok()
        .and_then(|t| k8s_openapi::jiff::Timestamp::from_second(t).ok())
        .map(|t| t.to_string())
        .unwrap_or_else(|| t.to_string())
}

/// `why` as the output format says (table and wide print the same text).
pub fn render_why(
    answers: &[WhyAnswer],
    notes: &[String],
    output: Output,
) -> anyhow::Result<String> {
    #[derive(Serialize)]
    struct Out<'a> {
        servers: &'a [WhyAnswer],
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        notes: &'a [String],
    }
    let out = Out {
        servers: answers,
        notes,
    };
    Ok(match output {
        Output::Json => serde_json::to_string_pretty(&out)? + "\n",
        Output::Yaml => serde_saphyr::to_string(&out)?,
        Output::Table | Output::Wide => {
            let mut s = String::new();
            for a in answers {
                let w = &a.why;
                let role = format!("{:?}", w.server.role).to_lowercase();
                let _ = writeln!(s, "{} {} ({role}) about {}:", a.infra, a.dhcp_server, w.mac);
                match &w.lease {
                    Some(l) => {
                        let _ = writeln!(
                            s,
                            "  lease: {} {}{}, expires {}{}",
                            l.address,
                            l.state,
                            if l.reserved { " (reserved)" } else { "" },
                            relative(l.expires_unix, w.server.now_unix),
                            l.hostname
                                .as_deref()
                                .map(|h| format!(", host name {h}"))
                                .unwrap_or_default(),
                        );
                    }
                    None => {
                        let _ = writeln!(s, "  lease: none");
                    }
                }
                if w.events.is_empty() {
                    let _ = writeln!(s, "  refusals: none remembered");
                } else {
                    let _ = writeln!(s, "  refusals, oldest first:");
                    let rows: Vec<Vec<String>> = w
                        .events
                        .iter()
                        .map(|e| {
                            vec![
                                format!("    {}", rfc3339(e.at_unix)),
                                format!("({})", relative(e.at_unix, w.server.now_unix)),
                                e.message.clone(),
                                e.reason.to_string(),
                                e.address
                                    .map(|a| a.to_string())
                                    .unwrap_or_else(|| "-".into()),
                                e.detail.clone().unwrap_or_default(),
                            ]
                        })
                        .collect();
                    let t = table(
                        &["    AT", "", "MESSAGE", "REASON", "ADDRESS", "DETAIL"],
                        &rows,
                    );
                    s.push_str(&t);
                }
            }
            if answers.is_empty() {
                s.push_str("no DHCP server answered\n");
            }
            self::notes(&mut s, notes);
            s
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_relative_to_the_servers_clock() {
        assert_eq!(relative(1_000, 1_000), "in 0s");
        assert_eq!(relative(1_059, 1_000), "in 59s");
        assert_eq!(relative(1_000 + 3_300, 1_000), "in 55m");
        assert_eq!(relative(1_000, 1_000 + 7_200), "2h ago");
        assert_eq!(relative(1_000, 1_000 + 3 * 86_400), "3d ago");
    }
}
