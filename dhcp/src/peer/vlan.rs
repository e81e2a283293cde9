//! The VLAN witness: each server of a pair sends a small authenticated UDP
//! datagram to the other's VLAN address every `heartbeat_ms`, from and to
//! UDP port 647 (`peer.vlan_port`, IANA's `dhcp-failover`) on its own VLAN address, and only
//! while its DHCP loop turns. A datagram arriving means the other server
//! is alive where its clients are, with its DHCP loop running; the state
//! it names tells a server that took over whether the other one serves
//! again. The pair link (the HTTP heartbeat on the pod network) is the
//! other witness; [`crate::pair::next_state`] weighs the two.
//!
//! Why a datagram of its own rather than watching the other server's DHCP
//! replies or ARP-probing its address: replies go to port 68 and to the
//! clients (unicast mostly), so the server socket on port 67 does not see
//! them, and a server with no clients sends none; an ARP answer comes from
//! the node's kernel, which answers while the DHCP process is dead. The
//! datagram is sent by the process, gated on its DHCP loop, and costs 66
//! bytes each way per heartbeat.
//!
//! Layout (66 bytes): `OOOIPHB1`, the sender's role (0 primary,
//! 1 secondary), its [`PairState::code`], a random epoch for the process
//! (8 bytes), a sequence number (8), its wall clock in Unix milliseconds
//! (8), then an HMAC-SHA256 of all that under the pair token. A datagram
//! is taken only when the MAC verifies, it comes from the other server's
//! VLAN address and role, and its sequence is newer than the last one of
//! the same epoch (a new epoch, a restart, is taken when its clock is
//! within [`FRESH_MS`] of this server's, skew allowed for): a host on the
//! VLAN cannot forge or replay one to keep a dead server "alive".

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ring::hmac;
use socket2::{Domain, Protocol, Socket, Type};

use super::PairShared;
use crate::config::Role;
use crate::metrics::{self, metrics};
use crate::pair::PairState;

const MAGIC: &[u8; 8] = b"OOOIPHB1";
/// Bytes covered by the MAC.
const BODY: usize = 8 + 1 + 1 + 8 + 8 + 8;
/// A whole datagram.
pub const DATAGRAM_LEN: usize = BODY + 32;
/// How far a new epoch's clock may be from this server's (after the
/// measured skew), milliseconds.
pub const FRESH_MS: i64 = 30_000;
/// How far a new epoch's clock may be from this server's while no skew
/// was measured (the pair link measures it): a day, so that a server whose
/// clock is far off (which the skew guard keeps from taking over once it
/// is measured) is not judged dead by its partner for that alone.
pub const UNKNOWN_SKEW_MS: i64 = 86_400_000;
/// The DHCP loop must have turned within this many seconds for a datagram
/// to leave (it turns at least every 500 ms).
const LOOP_STALE_SECS: u64 = 2;

/// One VLAN heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    /// The sender's role.
    pub role: Role,
    /// The sender's state.
    pub state: PairState,
    /// The sender process's random epoch.
    pub epoch: u64,
    /// Sequence within the epoch.
    pub seq: u64,
    /// The sender's wall clock, Unix milliseconds.
    pub unix_ms: i64,
}

fn key(token: &str) -> hmac::Key {
    // A key of its own for this use of the token.
    let k = hmac::Key::new(hmac::HMAC_SHA256, b"oooi-dhcp pair vlan witness");
    let derived = hmac::sign(&k, token.as_bytes());
    hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref())
}

impl Beat {
    /// The datagram, signed with `key`.
    pub fn encode(&self, key: &hmac::Key) -> [u8; DATAGRAM_LEN] {
        let mut b = [0u8; DATAGRAM_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8] = match self.role {
            Role::Primary => 0,
            Role::Secondary => 1,
        };
        b[9] = self.state.code() as u8;
        b[10..18].copy_from_slice(&self.epoch.to_be_bytes());
        b[18..26].copy_from_slice(&self.seq.to_be_bytes());
        b[26..34].copy_from_slice(&self.unix_ms.to_be_bytes());
        let tag = hmac::sign(key, &b[..BODY]);
        b[BODY..].copy_from_slice(tag.as_ref());
        b
    }

    /// Reads a datagram whose MAC verifies under `key`; the reason when it
    /// is not one.
    pub fn decode(b: &[u8], key: &hmac::Key) -> Result<Beat, &'static str> {
        if b.len() != DATAGRAM_LEN || &b[..8] != MAGIC {
            return Err("not a heartbeat");
        }
        hmac::verify(key, &b[..BODY], &b[BODY..]).map_err(|_| "bad signature")?;
        let role = match b[8] {
            0 => Role::Primary,
            1 => Role::Secondary,
            _ => return Err("bad role"),
        };
        let word = |r: std::ops::Range<usize>| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[r]);
            w
        };
        Ok(Beat {
            role,
            state: PairState::from_code(i64::from(b[9])),
            epoch: u64::from_be_bytes(word(10..18)),
            seq: u64::from_be_bytes(word(18..26)),
            unix_ms: i64::from_be_bytes(word(26..34)),
        })
    }
}

/// What a receiver remembers to refuse replays.
#[derive(Debug, Default, Clone, Copy)]
pub struct Replay {
    last: Option<(u64, u64)>,
}

impl Replay {
    /// Whether `b` is news: a later sequence of the epoch last taken, or a
    /// new epoch whose clock is within [`FRESH_MS`] of `now_ms` plus
    /// `skew_ms` (the other clock's lead, when known). Takes it when so.
    pub fn take(
        &mut self,
        b: &Beat,
        now_ms: i64,
        skew_ms: Option<i64>,
    ) -> Result<(), &'static str> {
        match self.last {
            Some((epoch, seq)) if epoch == b.epoch => {
                if b.seq <= seq {
                    return Err("replayed or reordered");
                }
            }
            _ => {
                let expected = now_ms + skew_ms.unwrap_or(0);
                // Without a measured skew only a new epoch is checked
                // against a wide window: the pair link measures skew.
                let window = if skew_ms.is_some() {
                    FRESH_MS
                } else {
                    UNKNOWN_SKEW_MS
                };
                if (b.unix_ms - expected).abs() > window {
                    return Err("stale clock in a new epoch");
                }
            }
        }
        self.last = Some((b.epoch, b.seq));
        Ok(())
    }
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The witness socket: UDP on `(own, port)`, bound to the VLAN interface
/// when one is configured, so that heartbeats leave and arrive only there.
pub fn open(own: Ipv4Addr, port: u16, interface: Option<&str>) -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    if let Some(ifname) = interface {
        s.bind_device(Some(ifname.as_bytes()))?;
    }
    s.bind(&SocketAddr::from((own, port)).into())?;
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    Ok(s.into())
}

/// Runs the witness forever: opens the socket (retrying every 5 s while it
/// cannot, logged; meanwhile the VLAN counts as alive, so that a missing
/// witness never turns a cut pair link into a takeover), then sends and
/// receives heartbeats.
pub fn run(shared: Arc<PairShared>, own: Ipv4Addr, interface: Option<String>) {
    let p = &shared.peer;
    let socket = loop {
        match open(own, p.vlan_port, interface.as_deref()) {
            Ok(s) => {
                metrics().pair_vlan_unavailable.set(0);
                shared.set_vlan_available(true);
                tracing::info!(addr = %own, port = p.vlan_port, other = %p.server_ip, "pair: VLAN witness on");
                break s;
            }
            Err(e) => {
                metrics().pair_vlan_unavailable.set(1);
                shared.set_vlan_available(false);
                tracing::error!(addr = %own, port = p.vlan_port, error = %e, "pair: cannot open the VLAN witness; until it opens, the other server is never judged dead (no takeover)");
                std::thread::sleep(Duration::from_secs(5));
            }
        }
    };
    let k = key(&p.token);
    let Ok(rx) = socket.try_clone() else {
        tracing::error!("pair: cannot clone the VLAN witness socket");
        shared.set_vlan_available(false);
        return;
    };
    let (rshared, rkey) = (shared.clone(), k.clone());
    let spawned = std::thread::Builder::new()
        .name("dhcp-pair-vlan-rx".into())
        .spawn(move || receive(rshared, rx, rkey));
    if spawned.is_err() {
        shared.set_vlan_available(false);
        return;
    }
    send(shared, socket, k);
}

fn send(shared: Arc<PairShared>, socket: UdpSocket, k: hmac::Key) {
    let p = &shared.peer;
    let to = SocketAddr::from((p.server_ip, p.vlan_port));
    let every = Duration::from_millis(u64::from(p.heartbeat_ms));
    let epoch = super::random_epoch();
    let mut seq = 0u64;
    let mut error_logged: Option<Instant> = None;
    loop {
        let last = metrics::HEARTBEAT.load(std::sync::atomic::Ordering::Relaxed);
        let loop_alive =
            last != 0 && crate::server::unix_now().saturating_sub(last) <= LOOP_STALE_SECS;
        if loop_alive {
            seq += 1;
            let b = Beat {
                role: p.role,
                state: shared.state(),
                epoch,
                seq,
                unix_ms: unix_ms(),
            };
            if let Err(e) = socket.send_to(&b.encode(&k), to) {
                // No neighbour entry yet, or the link is down: the other
                // server counts this one silent, which is what it is.
                if error_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(30)) {
                    error_logged = Some(Instant::now());
                    tracing::warn!(%to, error = %e, "pair: VLAN heartbeat not sent");
                }
            }
        }
        std::thread::sleep(every);
    }
}

fn receive(shared: Arc<PairShared>, socket: UdpSocket, k: hmac::Key) {
    let p = &shared.peer;
    let other_role = match p.role {
        Role::Primary => Role::Secondary,
        Role::Secondary => Role::Primary,
    };
    let mut replay = Replay::default();
    let mut buf = [0u8; 128];
    loop {
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "pair: VLAN witness recv failed");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let verdict = match from {
            SocketAddr::V4(a) if *a.ip() == p.server_ip => Beat::decode(&buf[..n], &k)
                .and_then(|b| {
                    if b.role == other_role {
                        Ok(b)
                    } else {
                        Err("this server's own role")
                    }
                })
                .and_then(|b| {
                    let skew = shared.skew().map(|s| (s * 1000.0) as i64);
                    replay.take(&b, unix_ms(), skew).map(|()| b)
                }),
            _ => Err("not from the other server's VLAN address"),
        };
        match verdict {
            Ok(b) => shared.vlan_heard(b.state),
            Err(reason) => {
                metrics::count_reason(&metrics().pair_vlan_refused, reason);
                tracing::debug!(%from, reason, "pair: VLAN heartbeat refused");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(seq: u64, unix_ms: i64) -> Beat {
        Beat {
            role: Role::Secondary,
            state: PairState::CommunicationRecovery,
            epoch: 7,
            seq,
            unix_ms,
        }
    }

    #[test]
    fn a_heartbeat_round_trips_and_a_changed_byte_or_another_token_is_refused() {
        let k = key("0123456789abcdef0123");
        let b = beat(3, 1_000);
        let bytes = b.encode(&k);
        assert_eq!(Beat::decode(&bytes, &k), Ok(b));
        for i in 0..DATAGRAM_LEN {
            let mut bad = bytes;
            bad[i] ^= 1;
            assert!(Beat::decode(&bad, &k).is_err(), "byte {i}");
        }
        assert_eq!(
            Beat::decode(&bytes, &key("another-token-0123456")),
            Err("bad signature")
        );
        assert_eq!(Beat::decode(&bytes[..40], &k), Err("not a heartbeat"));
    }

    #[test]
    fn a_replayed_or_stale_heartbeat_is_refused() {
        let mut r = Replay::default();
        assert_eq!(r.take(&beat(5, 1_000_000), 1_000_100, Some(0)), Ok(()));
        assert!(r.take(&beat(5, 1_000_000), 1_000_200, Some(0)).is_err());
        assert!(r.take(&beat(4, 1_000_000), 1_000_200, Some(0)).is_err());
        assert_eq!(r.take(&beat(6, 1_000_500), 1_000_600, Some(0)), Ok(()));
        // A new epoch (a restart) with a current clock is taken...
        let restart = Beat {
            epoch: 8,
            ..beat(1, 1_001_000)
        };
        assert_eq!(r.take(&restart, 1_001_000, Some(0)), Ok(()));
        // ...one with an old clock (a recorded datagram) is not.
        let old = Beat {
            epoch: 9,
            ..beat(100, 900_000)
        };
        assert!(r.take(&old, 1_001_000, Some(0)).is_err());
        // The measured skew is allowed for: an hour ahead is current then.
        let ahead = Beat {
            epoch: 10,
            ..beat(1, 1_001_000 + 3_600_000)
        };
        assert_eq!(r.take(&ahead, 1_001_000, Some(3_600_000)), Ok(()));
    }
}
