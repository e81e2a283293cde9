//! The adverts the replicas of one component send each other on the VLAN:
//! the wire format, parsed and checked here (pure), sent and received by
//! the driver through a packet socket.
//!
//! An advert is one Ethernet frame of EtherType [`ETHERTYPE`] (IEEE 802
//! "local experimental"), broadcast on the VLAN interface. It carries no IP
//! header: a replica can advertise before it has any address on the VLAN,
//! and the same frame serves an IPv4 and an IPv6 component (the addresses
//! are named by their index in the component's list, never by value).
//!
//! Layout (big endian, [`LEN`] bytes):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic `OOOI` |
//! | 4 | 1 | version (1) |
//! | 5 | 1 | flags: bit 0 ready, bit 1 listening |
//! | 6 | 2 | sender's replica index |
//! | 8 | 8 | group: FNV-1a of the component's group name |
//! | 16 | 8 | incarnation (random per process start) |
//! | 24 | 8 | sequence (per incarnation, from 1) |
//! | 32 | 4 | milliseconds the sender has been ready (saturating) |
//! | 36 | 8 | addresses the sender holds (bit i: address i) |
//! | 44 | 8 | replicas the sender hears (bit i: replica i) |
//! | 52 | 8 | replicas the sender finds eligible: heard both ways, ready |
//! | 60 | 4 | FNV-1a of bytes 0..60 |
//!
//! The check word catches corruption and frames of other formats; it is no
//! authentication. The VLAN is a trusted layer 2 for this design exactly as
//! for ARP (any host on it can already answer ARP for any address), and
//! VRRPv3 dropped its authentication for the same reason.

/// EtherType of the adverts (IEEE 802 local experimental EtherType 1).
pub const ETHERTYPE: u16 = 0x88B5;

/// Length of an advert's payload.
pub const LEN: usize = 64;

/// The most replicas (and addresses) one component can have: one bit each.
pub const MAX_REPLICAS: usize = 64;

const MAGIC: &[u8; 4] = b"OOOI";
const VERSION: u8 = 1;

/// One advert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advert {
    /// The component (see [`group_id`]).
    pub group: u64,
    /// The sender's replica index: its home address is address `from`.
    pub from: u16,
    /// Random per start of the sender's process.
    pub incarnation: u64,
    /// Increases by one per advert within an incarnation.
    pub seq: u64,
    /// The sender's component is ready (and the agent is not stopping).
    pub ready: bool,
    /// The sender is still listening after its start: it takes nothing
    /// yet, and will take its home when done if it is ready.
    pub listening: bool,
    /// How long the sender has been ready, by its own clock.
    pub ready_for_ms: u32,
    /// The addresses the sender holds (and defends), by index.
    pub held: u64,
    /// The replicas the sender hears, by index.
    pub heard: u64,
    /// The replicas the sender finds eligible (heard both ways, ready, done
    /// listening), by index: what a replica that cannot hear one of them
    /// learns of it through the others.
    pub linked: u64,
}

/// Why a frame is not an advert for this component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Too short, or not ours at all.
    #[error("not an advert (length or magic)")]
    NotAdvert,
    /// A later or earlier format.
    #[error("advert version {0}")]
    Version(u8),
    /// The check word does not match.
    #[error("advert check word does not match")]
    Check,
    /// Another component's advert (another group on the same VLAN).
    #[error("advert of another group")]
    OtherGroup,
}

/// The group id of a group name: FNV-1a, 64 bits.
pub fn group_id(name: &str) -> u64 {
    fnv64(name.as_bytes())
}

fn fnv64(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn fnv32(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, x| {
        (h ^ u32::from(*x)).wrapping_mul(0x0100_0193)
    })
}

impl Advert {
    /// The frame payload.
    pub fn encode(&self) -> [u8; LEN] {
        let mut p = [0u8; LEN];
        p[0..4].copy_from_slice(MAGIC);
        p[4] = VERSION;
        p[5] = u8::from(self.ready) | (u8::from(self.listening) << 1);
        p[6..8].copy_from_slice(&self.from.to_be_bytes());
        p[8..16].copy_from_slice(&self.group.to_be_bytes());
        p[16..24].copy_from_slice(&self.incarnation.to_be_bytes());
        p[24..32].copy_from_slice(&self.seq.to_be_bytes());
        p[32..36].copy_from_slice(&self.ready_for_ms.to_be_bytes());
        p[36..44].copy_from_slice(&self.held.to_be_bytes());
        p[44..52].copy_from_slice(&self.heard.to_be_bytes());
        p[52..60].copy_from_slice(&self.linked.to_be_bytes());
        let check = fnv32(&p[0..60]);
        p[60..64].copy_from_slice(&check.to_be_bytes());
        p
    }

    /// Parses `p` as an advert of `group`. Longer frames are accepted (a
    /// later minor version may append fields; Ethernet pads short ones).
    pub fn decode(p: &[u8], group: u64) -> Result<Advert, Malformed> {
        if p.len() < LEN || &p[0..4] != MAGIC {
            return Err(Malformed::NotAdvert);
        }
        if p[4] != VERSION {
            return Err(Malformed::Version(p[4]));
        }
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&p[i..i + 8]);
            u64::from_be_bytes(b)
        };
        let u32_at = |i: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&p[i..i + 4]);
            u32::from_be_bytes(b)
        };
        if u32_at(60) != fnv32(&p[0..60]) {
            return Err(Malformed::Check);
        }
        let a = Advert {
            group: u64_at(8),
            from: u16::from_be_bytes([p[6], p[7]]),
            incarnation: u64_at(16),
            seq: u64_at(24),
            ready: p[5] & 1 == 1,
            listening: p[5] & 2 == 2,
            ready_for_ms: u32_at(32),
            held: u64_at(36),
            heard: u64_at(44),
            linked: u64_at(52),
        };
        if a.group != group {
            return Err(Malformed::OtherGroup);
        }
        Ok(a)
    }
}

/// True for a MAC no single host may send from: broadcast, multicast
/// (the group bit) or all zeros.
pub fn not_a_host(mac: [u8; 6]) -> bool {
    mac[0] & 1 == 1 || mac == [0; 6]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Advert {
        Advert {
            group: group_id("infra-dns"),
            from: 2,
            incarnation: 0xdead_beef_0102_0304,
            seq: 77,
            ready: true,
            listening: false,
            ready_for_ms: 2500,
            held: 0b101,
            heard: 0b011,
            linked: 0b001,
        }
    }

    #[test]
    fn an_advert_reads_back_as_written() {
        let a = sample();
        assert_eq!(Advert::decode(&a.encode(), a.group), Ok(a));
        // A longer frame (a later minor version) still parses.
        let mut long = a.encode().to_vec();
        long.extend_from_slice(&[0; 8]);
        assert_eq!(Advert::decode(&long, a.group), Ok(a));
    }

    #[test]
    fn foreign_corrupt_or_other_group_frames_are_refused() {
        let a = sample();
        let p = a.encode();
        assert_eq!(
            Advert::decode(&p[..LEN - 1], a.group),
            Err(Malformed::NotAdvert)
        );
        let mut bad = p;
        bad[0] = b'X';
        assert_eq!(Advert::decode(&bad, a.group), Err(Malformed::NotAdvert));
        let mut bad = p;
        bad[4] = 2;
        assert_eq!(Advert::decode(&bad, a.group), Err(Malformed::Version(2)));
        for i in 5..60 {
            let mut bad = p;
            bad[i] ^= 0x10;
            assert_eq!(
                Advert::decode(&bad, a.group),
                Err(Malformed::Check),
                "byte {i}"
            );
        }
        assert_eq!(
            Advert::decode(&p, group_id("infra-proxy")),
            Err(Malformed::OtherGroup)
        );
    }

    #[test]
    fn group_ids_differ_per_component() {
        assert_ne!(group_id("infra-dns"), group_id("infra-proxy"));
        assert_eq!(group_id("infra-dns"), group_id("infra-dns"));
    }

    #[test]
    fn broadcast_multicast_and_zero_macs_are_not_hosts() {
        assert!(not_a_host([0xff; 6]));
        assert!(not_a_host([0x01, 0x00, 0x5e, 0, 0, 1]));
        assert!(not_a_host([0x33, 0x33, 0, 0, 0, 1]));
        assert!(not_a_host([0; 6]));
        assert!(!not_a_host([0x02, 0, 0, 0x77, 0, 1]));
    }
}
