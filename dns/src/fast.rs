//! The fast path for static answers over UDP: answer wire bytes are built once
//! per config, and a query is answered by copying them behind its header and
//! question, without decoding it into hickory types or allocating.
//!
//! The fast path only takes the common, simple case: a standard query with
//! one question of class IN and type A or AAAA, at most an EDNS(0) OPT record,
//! for a name the view owns, whose answer fits the client's buffer. Anything
//! else (other types, forwarded names, truncation, odd packets) returns
//! [`Fast::Slow`] and goes through the hickory handler (the `handler`
//! module), which stays the reference for every DNS semantic. The tables are derived
//! from [`crate::answer::answer`] itself, and tests compare both paths.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::OnceLock;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{LowerName, Name, RecordType};
use prometheus_client::metrics::counter::Counter;

use crate::answer::{Answer, SOA_MNAME, SOA_RNAME, SOA_TIMERS, answer, from_set, negative_ttl};
use crate::config::{Config, View};
use crate::forward::Forwarder;
use crate::metrics::{qtype_label, query_counter};
use crate::wire::wire_name;

/// Largest reply the fast path writes: the EDNS buffer we advertise.
pub const MAX_REPLY: usize = 1232;

/// What to do with one UDP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fast {
    /// The reply is the first `n` bytes of the output buffer.
    Reply(usize),
    /// Not for the fast path: hand it to the full handler.
    Slow,
    /// Not worth an answer (shorter than a header, or a response).
    Drop,
}

/// The precomputed reply to one (name, type): everything after the question.
#[derive(Debug)]
struct Reply {
    rcode: u8,
    answers: u16,
    authorities: u16,
    /// Answer records (owner compressed to the question) then authority.
    body: Box<[u8]>,
    /// `oooi_dns_queries_total` for this view, type and rcode.
    counter: Counter,
}

#[derive(Debug)]
struct Entry {
    a: Reply,
    aaaa: Reply,
}

impl Entry {
    fn get(&self, qtype: u16) -> &Reply {
        if qtype == u16::from(RecordType::AAAA) {
            &self.aaaa
        } else {
            &self.a
        }
    }
}

/// One view's tables, keyed by lowercase wire-format names.
#[derive(Debug, Default)]
struct FastView {
    /// View name, for the metrics of forwarded answers.
    name: String,
    /// `oooi_dns_queries_total` of forwarded answers by (A, AAAA) and rcode,
    /// made on first use.
    forwarded: [[OnceLock<Counter>; 16]; 2],
    /// Hosts, records, zone apexes and every name between a record and its
    /// apex (empty non-terminals), with the answer the reference logic gives.
    exact: HashMap<Box<[u8]>, Entry>,
    /// Zone apex to zone index.
    zones: HashMap<Box<[u8]>, usize>,
    /// Parent of a wildcard (`x` for `*.x`) to (zone index, its answers).
    wild: HashMap<Box<[u8]>, Vec<(usize, Entry)>>,
    /// NXDOMAIN answers per zone index.
    nx: Vec<Entry>,
}

/// Fast-path tables of every view of one config.
#[derive(Debug, Default)]
pub struct FastTables {
    views: Vec<FastView>,
}

fn push_name(out: &mut Vec<u8>, name: &str) {
    // Names here are our constants and validated config names.
    if let Ok(n) = Name::from_ascii(name) {
        out.extend_from_slice(&wire_name(&LowerName::new(&n)));
    } else {
        out.push(0);
    }
}

fn soa_rr(out: &mut Vec<u8>, owner: &LowerName, ttl: u32) {
    out.extend_from_slice(&wire_name(owner));
    out.extend_from_slice(&u16::from(RecordType::SOA).to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    let len_at = out.len();
    out.extend_from_slice(&[0, 0]);
    push_name(out, SOA_MNAME);
    push_name(out, SOA_RNAME);
    for t in SOA_TIMERS {
        out.extend_from_slice(&t.to_be_bytes());
    }
    out.extend_from_slice(&ttl.to_be_bytes());
    let rdlen = (out.len() - len_at - 2) as u16;
    out[len_at..len_at + 2].copy_from_slice(&rdlen.to_be_bytes());
}

fn build_reply(view: &View, a: &Answer, qtype: RecordType) -> Option<Reply> {
    let mut body = Vec::new();
    let (rcode, answers, authorities) = match a {
        Answer::Records { addrs, ttl } => {
            let mut n = 0u16;
            for ip in addrs {
                // Owner: a pointer to the question name at offset 12.
                body.extend_from_slice(&[0xc0, 12]);
                let (t, data): (RecordType, &[u8]) = match ip {
                    IpAddr::V4(v4) => (RecordType::A, &v4.octets()[..]),
                    IpAddr::V6(v6) => (RecordType::AAAA, &v6.octets()[..]),
                };
                body.extend_from_slice(&u16::from(t).to_be_bytes());
                body.extend_from_slice(&1u16.to_be_bytes());
                body.extend_from_slice(&ttl.to_be_bytes());
                body.extend_from_slice(&(data.len() as u16).to_be_bytes());
                body.extend_from_slice(data);
                n += 1;
            }
            (ResponseCode::NoError, n, 0)
        }
        Answer::NoData { soa_owner, ttl } => {
            soa_rr(&mut body, soa_owner, *ttl);
            (ResponseCode::NoError, 0, 1)
        }
        Answer::NxDomain { soa_owner, ttl } => {
            soa_rr(&mut body, soa_owner, *ttl);
            (ResponseCode::NXDomain, 0, 1)
        }
        Answer::Forward => return None,
    };
    let counter = query_counter(&view.name, qtype_label(qtype), rcode);
    Some(Reply {
        rcode: u16::from(rcode) as u8,
        answers,
        authorities,
        body: body.into_boxed_slice(),
        counter,
    })
}

fn entry(view: &View, f: impl Fn(RecordType) -> Answer) -> Option<Entry> {
    Some(Entry {
        a: build_reply(view, &f(RecordType::A), RecordType::A)?,
        aaaa: build_reply(view, &f(RecordType::AAAA), RecordType::AAAA)?,
    })
}

impl FastView {
    fn build(view: &View) -> Self {
        let mut t = FastView {
            name: view.name.clone(),
            ..FastView::default()
        };
        // Every name whose answer the walk in `lookup` could not derive:
        // hosts, apexes, records and all their ancestors up to the apex.
        let mut names: Vec<LowerName> = view.hosts.keys().cloned().collect();
        for z in &view.zones {
            names.push(z.origin.clone());
            for r in z.records.keys() {
                let mut cur = r.clone();
                while z.origin.zone_of(&cur) {
                    names.push(cur.clone());
                    if cur == z.origin {
                        break;
                    }
                    cur = cur.base_name();
                }
            }
        }
        for n in names {
            let key = wire_name(&n);
            if t.exact.contains_key(&key) {
                continue;
            }
            if let Some(e) = entry(view, |q| answer(view, &n, q)) {
                t.exact.insert(key, e);
            }
        }
        for (i, z) in view.zones.iter().enumerate() {
            t.zones.entry(wire_name(&z.origin)).or_insert(i);
            let neg = negative_ttl(z);
            let nx = entry(view, |_| Answer::NxDomain {
                soa_owner: z.origin.clone(),
                ttl: neg,
            });
            t.nx.extend(nx);
            for (r, set) in &z.records {
                if r.is_wildcard()
                    && let Some(e) = entry(view, |q| from_set(set, q, &z.origin))
                {
                    t.wild
                        .entry(wire_name(&r.base_name()))
                        .or_default()
                        .push((i, e));
                }
            }
        }
        t
    }

    /// The entry for a lowercase wire name, or None to forward. `labels` are
    /// the offsets of each label and of the root byte.
    fn lookup(&self, name: &[u8], labels: &[usize]) -> Option<&Entry> {
        if let Some(e) = self.exact.get(name) {
            return Some(e);
        }
        // The closest enclosing zone, as `answer` picks it (longest origin).
        let (pos, zone) = labels
            .iter()
            .enumerate()
            .skip(1)
            .find_map(|(i, &o)| self.zones.get(&name[o..]).map(|z| (i, *z)))?;
        // The deepest wildcard `*.x` of that zone with `x` above the name.
        for &o in &labels[1..=pos] {
            if let Some(ws) = self.wild.get(&name[o..])
                && let Some((_, e)) = ws.iter().find(|(z, _)| *z == zone)
            {
                return Some(e);
            }
        }
        self.nx.get(zone)
    }
}

impl FastTables {
    /// Builds the tables of every view of `config`.
    pub fn build(config: &Config) -> Self {
        FastTables {
            views: config.views.iter().map(FastView::build).collect(),
        }
    }

    /// Answers `query` for view number `view` into `out`, or says why not.
    /// Forwarded names are answered from `forwarder`'s cache when warm.
    /// Several addresses are rotated left by `rot` (see [`crate::spread`]).
    pub fn respond(
        &self,
        view: usize,
        query: &[u8],
        out: &mut [u8; MAX_REPLY],
        forwarder: &Forwarder,
        rot: usize,
    ) -> Fast {
        let Some(v) = self.views.get(view) else {
            return Fast::Slow;
        };
        respond(v, query, out, forwarder, rot)
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Whether a packet is worth any answer: at least a header, and a query.
pub fn answerable(query: &[u8]) -> bool {
    query.len() >= 12 && query[2] & 0x80 == 0
}

/// The OPT record of a fast reply.
#[derive(Debug, Clone, Copy)]
struct Opt {
    /// The buffer size we advertise.
    size: u16,
    /// The client's DNSSEC OK bit, echoed.
    dnssec_ok: bool,
}

/// Writes the header, the question and `body` (its two parts in order),
/// then the OPT; returns the reply length. The caller checked the size.
#[allow(clippy::too_many_arguments)]
fn write_reply(
    out: &mut [u8; MAX_REPLY],
    q: &[u8],
    qend: usize,
    authoritative: bool,
    rcode: u8,
    counts: [u16; 3],
    body: [&[u8]; 2],
    edns: Option<Opt>,
) -> usize {
    out[0] = q[0];
    out[1] = q[1];
    // QR, AA, RD copied; RA, CD copied, rcode.
    out[2] = 0x80 | if authoritative { 0x04 } else { 0 } | (q[2] & 0x01);
    out[3] = 0x80 | (q[3] & 0x10) | rcode;
    out[4..6].copy_from_slice(&1u16.to_be_bytes());
    out[6..8].copy_from_slice(&counts[0].to_be_bytes());
    out[8..10].copy_from_slice(&counts[1].to_be_bytes());
    let additional = counts[2] + u16::from(edns.is_some());
    out[10..12].copy_from_slice(&additional.to_be_bytes());
    out[12..qend].copy_from_slice(&q[12..qend]);
    let mut w = qend;
    for part in body {
        out[w..w + part.len()].copy_from_slice(part);
        w += part.len();
    }
    if let Some(opt) = edns {
        // Our OPT: root owner, buffer size, no extended rcode, version 0,
        // the client's DO bit (RFC 3225), no options.
        out[w..w + 11].copy_from_slice(&[0, 0, 41, 0, 0, 0, 0, 0, 0, 0, 0]);
        out[w + 3..w + 5].copy_from_slice(&opt.size.to_be_bytes());
        if opt.dnssec_ok {
            out[w + 7] = 0x80;
        }
        w += 11;
    }
    w
}

fn respond(v: &FastView, q: &[u8], out: &mut [u8; MAX_REPLY], fwd: &Forwarder, rot: usize) -> Fast {
    if !answerable(q) {
        return Fast::Drop;
    }
    // Opcode QUERY, TC clear; one question, no answers or authorities, at
    // most one additional (the OPT).
    if q[2] & 0x7a != 0 {
        return Fast::Slow;
    }
    let counts = [be16(q, 4), be16(q, 6), be16(q, 8), be16(q, 10)];
    if counts[..3] != [Some(1), Some(0), Some(0)] || counts[3].is_none_or(|n| n > 1) {
        return Fast::Slow;
    }
    // The question name, lowercased; compression pointers go the slow way.
    // Room for the qtype after the name: the forwarding cache key.
    let mut name = [0u8; 257];
    let mut labels = [0usize; 128];
    let (mut len, mut n, mut at) = (0usize, 0usize, 12usize);
    loop {
        let Some(&l) = q.get(at) else {
            return Fast::Slow;
        };
        let l = usize::from(l);
        if n == labels.len() || l > 63 || len + l + 1 > 255 {
            return Fast::Slow;
        }
        labels[n] = len;
        n += 1;
        name[len] = l as u8;
        if l == 0 {
            len += 1;
            at += 1;
            break;
        }
        let Some(label) = q.get(at + 1..at + 1 + l) else {
            return Fast::Slow;
        };
        for (d, s) in name[len + 1..len + 1 + l].iter_mut().zip(label) {
            *d = s.to_ascii_lowercase();
        }
        len += l + 1;
        at += l + 1;
    }
    let (Some(qtype), Some(qclass)) = (be16(q, at), be16(q, at + 2)) else {
        return Fast::Slow;
    };
    let qend = at + 4;
    if qclass != 1 || (qtype != u16::from(RecordType::A) && qtype != u16::from(RecordType::AAAA)) {
        return Fast::Slow;
    }
    // EDNS(0): a root-owned OPT filling the rest of the packet.
    let mut limit = 512usize;
    let mut edns = None;
    if counts[3] == Some(1) {
        // Version 0 only: others get BADVERS from the handler.
        let (Some(&0), Some(41), Some(size), Some(&0), Some(&flags), Some(rdlen)) = (
            q.get(qend),
            be16(q, qend + 1),
            be16(q, qend + 3),
            q.get(qend + 6),
            q.get(qend + 7),
            be16(q, qend + 9),
        ) else {
            return Fast::Slow;
        };
        if qend + 11 + usize::from(rdlen) != q.len() {
            return Fast::Slow;
        }
        // The options must tile the RDATA exactly; anything else is the
        // handler's to judge (it answers FORMERR).
        let mut o = qend + 11;
        while o < q.len() {
            let Some(olen) = be16(q, o + 2) else {
                return Fast::Slow;
            };
            o += 4 + usize::from(olen);
        }
        if o != q.len() {
            return Fast::Slow;
        }
        limit = usize::from(size).clamp(512, MAX_REPLY);
        edns = Some(Opt {
            size: limit as u16,
            dnssec_ok: flags & 0x80 != 0,
        });
    } else if qend != q.len() {
        return Fast::Slow;
    }
    let opt = if edns.is_some() { 11 } else { 0 };
    let Some(entry) = v.lookup(&name[..len], &labels[..n]) else {
        // Forwarded: answer from the cache when it holds this name.
        name[len..len + 2].copy_from_slice(&qtype.to_be_bytes());
        let done = fwd.with_cached(&name[..len + 2], |w, left| {
            if qend + w.body.len() + opt > limit {
                return Fast::Slow;
            }
            let n = write_reply(out, q, qend, false, w.rcode, w.counts, [&w.body, &[]], edns);
            for &at in &w.ttl_offsets {
                let t = qend + at;
                let ttl = u32::from_be_bytes([out[t], out[t + 1], out[t + 2], out[t + 3]]);
                out[t..t + 4].copy_from_slice(&ttl.min(left).to_be_bytes());
            }
            Fast::Reply(n)
        });
        if let Some(Fast::Reply(_)) = done {
            let t = usize::from(qtype == u16::from(RecordType::AAAA));
            let rcode = out[3] & 0x0f;
            v.forwarded[t][usize::from(rcode)]
                .get_or_init(|| {
                    let qtype = if t == 1 { "AAAA" } else { "A" };
                    query_counter(&v.name, qtype, ResponseCode::from(0, rcode))
                })
                .inc();
        }
        return done.unwrap_or(Fast::Slow);
    };
    let r = entry.get(qtype);
    if qend + r.body.len() + opt > limit {
        // Truncation is the handler's job.
        return Fast::Slow;
    }
    // Address records all have the size of the asked type: rotating the
    // list is splitting the body at a record boundary.
    let split = match (r.answers, r.authorities) {
        (n, 0) if n > 1 => r.body.len() / usize::from(n) * (rot % usize::from(n)),
        _ => 0,
    };
    let (head, tail) = r.body.split_at(split);
    let w = write_reply(
        out,
        q,
        qend,
        true,
        r.rcode,
        [r.answers, r.authorities, 0],
        [tail, head],
        edns,
    );
    r.counter.inc();
    Fast::Reply(w)
}
