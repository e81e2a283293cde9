//! A compact binary encoding of a validated table.
//!
//! The filter validates a pushed JSON document once, then stores this form in
//! proxy-wasm shared data. Every worker thread rebuilds its index from it when
//! the generation changes; decoding is a linear read with no JSON parsing.
//!
//! Layout (little endian): magic `OOOIRT\x01\0`, generation `u64`, digest
//! (`u8` length + bytes), route count `u32`, then per route: port `u16`, match
//! tag `u8` (0 SNI + str, 1 IPv4 + prefix, 2 IPv6 + prefix, 3 SNI + str +
//! allowed sources, 4 alias IPv4 + prefix, 5 alias IPv6 + prefix), upstream tag `u8` (0 cluster + str, 1 host str + port
//! `u16`), owner flag `u8` (+ str). A str is a `u16` length and UTF-8 bytes;
//! allowed sources are a `u16` count, then per entry a family `u8` (4 or 6),
//! the address octets and the prefix `u8`.
//!
//! Tag 3 came with `sources`, tags 4 and 5 with `alias_source`; a table
//! without them encodes exactly as before, so only tables that use them need
//! a filter that knows the tags (an older one refuses them as unreadable and
//! keeps its table).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use oooi_vocabulary::Cidr;

use crate::table::{Route, RouteMatch, RouteTable, Upstream};

const MAGIC: &[u8; 8] = b"OOOIRT\x01\0";

/// Encodes a table and its digest.
pub fn encode(table: &RouteTable, digest: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + table.routes.len() * 64);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&table.generation.to_le_bytes());
    let d = &digest.as_bytes()[..digest.len().min(255)];
    out.push(d.len() as u8);
    out.extend_from_slice(d);
    out.extend_from_slice(&(table.routes.len() as u32).to_le_bytes());
    for r in &table.routes {
        out.extend_from_slice(&r.port.to_le_bytes());
        match &r.matches {
            RouteMatch::Sni(name) => {
                out.push(0);
                put_str(&mut out, name);
            }
            RouteMatch::Source(c) => put_cidr(&mut out, c, 1, 2),
            RouteMatch::AliasSource(c) => put_cidr(&mut out, c, 4, 5),
            RouteMatch::SniFrom { sni, sources } => {
                out.push(3);
                put_str(&mut out, sni);
                // Validated tables hold at most MAX_ROUTE_SOURCES (< u16::MAX).
                let n = sources.len().min(u16::MAX as usize);
                out.extend_from_slice(&(n as u16).to_le_bytes());
                for c in &sources[..n] {
                    match c.addr() {
                        IpAddr::V4(a) => {
                            out.push(4);
                            out.extend_from_slice(&a.octets());
                        }
                        IpAddr::V6(a) => {
                            out.push(6);
                            out.extend_from_slice(&a.octets());
                        }
                    }
                    out.push(c.prefix());
                }
            }
        }
        match &r.upstream {
            Upstream::Cluster(name) => {
                out.push(0);
                put_str(&mut out, name);
            }
            Upstream::Address { host, port } => {
                out.push(1);
                put_str(&mut out, host);
                out.extend_from_slice(&port.to_le_bytes());
            }
        }
        match &r.owner {
            None => out.push(0),
            Some(o) => {
                out.push(1);
                put_str(&mut out, o);
            }
        }
    }
    out
}

/// Reads only the generation, without decoding the routes.
pub fn peek_generation(bytes: &[u8]) -> Option<u64> {
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        return None;
    }
    Some(u64::from_le_bytes(bytes[8..16].try_into().ok()?))
}

/// Decodes a table and its digest. Fails (never panics) on anything truncated
/// or malformed.
pub fn decode(bytes: &[u8]) -> Result<(RouteTable, String), String> {
    let mut r = Reader { b: bytes, pos: 0 };
    if r.take(8)? != MAGIC {
        return Err("bad magic".into());
    }
    let generation = r.u64()?;
    let dlen = r.u8()? as usize;
    let digest = std::str::from_utf8(r.take(dlen)?)
        .map_err(|_| "digest is not UTF-8")?
        .to_string();
    let count = r.u32()? as usize;
    // Each route takes at least 8 bytes: refuse absurd counts before allocating.
    if count > bytes.len() / 8 {
        return Err("route count exceeds the data".into());
    }
    let mut routes = Vec::with_capacity(count);
    for _ in 0..count {
        let port = r.u16()?;
        let matches = match r.u8()? {
            0 => RouteMatch::Sni(r.str()?),
            1 => RouteMatch::Source(r.cidr_v4()?),
            2 => RouteMatch::Source(r.cidr_v6()?),
            4 => RouteMatch::AliasSource(r.cidr_v4()?),
            5 => RouteMatch::AliasSource(r.cidr_v6()?),
            3 => {
                let sni = r.str()?;
                let n = r.u16()? as usize;
                // Each entry takes at least 6 bytes: refuse absurd counts before allocating.
                if n > (bytes.len() - r.pos) / 6 {
                    return Err("source count exceeds the data".into());
                }
                let mut sources = Vec::with_capacity(n);
                for _ in 0..n {
                    let addr = match r.u8()? {
                        4 => {
                            let o: [u8; 4] = r.take(4)?.try_into().map_err(|_| "short v4")?;
                            IpAddr::V4(Ipv4Addr::from(o))
                        }
                        6 => {
                            let o: [u8; 16] = r.take(16)?.try_into().map_err(|_| "short v6")?;
                            IpAddr::V6(Ipv6Addr::from(o))
                        }
                        f => return Err(format!("bad source family {f}")),
                    };
                    sources.push(Cidr::new(addr, r.u8()?)?);
                }
                RouteMatch::SniFrom { sni, sources }
            }
            t => return Err(format!("bad match tag {t}")),
        };
        let upstream = match r.u8()? {
            0 => Upstream::Cluster(r.str()?),
            1 => {
                let host = r.str()?;
                let port = r.u16()?;
                Upstream::Address { host, port }
            }
            t => return Err(format!("bad upstream tag {t}")),
        };
        let owner = match r.u8()? {
            0 => None,
            1 => Some(r.str()?),
            t => return Err(format!("bad owner flag {t}")),
        };
        routes.push(Route {
            port,
            matches,
            upstream,
            owner,
        });
    }
    if r.pos != bytes.len() {
        return Err("trailing bytes".into());
    }
    Ok((RouteTable { generation, routes }, digest))
}

fn put_cidr(out: &mut Vec<u8>, c: &Cidr, v4_tag: u8, v6_tag: u8) {
    match c.addr() {
        IpAddr::V4(a) => {
            out.push(v4_tag);
            out.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            out.push(v6_tag);
            out.extend_from_slice(&a.octets());
        }
    }
    out.push(c.prefix());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Validated names are at most 255 bytes; clamp defensively on a char boundary.
    let mut end = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).ok_or("overflow")?;
        let s = self.b.get(self.pos..end).ok_or("truncated")?;
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().map_err(|_| "short")?,
        ))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| "short")?,
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| "short")?,
        ))
    }
    fn cidr_v4(&mut self) -> Result<Cidr, String> {
        let o: [u8; 4] = self.take(4)?.try_into().map_err(|_| "short v4")?;
        let p = self.u8()?;
        Cidr::new(IpAddr::V4(Ipv4Addr::from(o)), p)
    }
    fn cidr_v6(&mut self) -> Result<Cidr, String> {
        let o: [u8; 16] = self.take(16)?.try_into().map_err(|_| "short v6")?;
        let p = self.u8()?;
        Cidr::new(IpAddr::V6(Ipv6Addr::from(o)), p)
    }
    fn str(&mut self) -> Result<String, String> {
        let n = self.u16()? as usize;
        let s = self.take(n)?;
        std::str::from_utf8(s)
            .map(str::to_string)
            .map_err(|_| "string is not UTF-8".into())
    }
}
