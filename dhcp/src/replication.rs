//! Replication of lease records to the other server of a pair, as pure
//! bookkeeping (the HTTP is in [`crate::peer`]).
//!
//! **Sender** ([`Window`]): every written batch that the other server must
//! store is [`Window::push`]ed with its seq (see [`crate::commit`]) as soon
//! as its records are written, beside the local `fdatasync`. Records pushed
//! while requests are in flight wait and go together in the next request
//! (group replication); at most `max_in_flight` requests run at once, each
//! numbered in its stream (1, 2, …). An acknowledgement is cumulative: the
//! other server applies a stream's requests in number order and answers
//! only after an `fdatasync` covering what it wrote, so the answer to
//! request `n` means every request `≤ n` is durable there
//! ([`Window::acked`] returns the new watermark for
//! [`crate::commit::AckGate::replicated_through`]). When a request fails
//! (connection lost, the other server restarted or timed out waiting for an
//! earlier request), [`Window::restart`] opens a new stream whose first
//! request carries every record not acknowledged yet, in their order:
//! applying a record twice changes nothing. When the other server counts as
//! down, [`Window::abandon`] drops what is unsent (it gets those leases from
//! the full exchange when it returns) and nothing waits for it any more.
//!
//! **Receiver** ([`Order`]): requests of one stream may arrive out of order
//! over several connections; each is applied only when its number is the
//! next one, so records are merged in the order they were decided (a lease
//! released and then committed again stays committed). A request repeating
//! one already applied is answered once what it repeats is durable. A
//! stream replaces the current one only with a higher id and from its first
//! request.

use std::collections::VecDeque;

use crate::commit::Seq;

/// A stream of requests (ids increase: a new stream replaces older ones).
pub type Stream = u64;

/// One request to send: records (in decision order) and the highest seq
/// they cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The stream it belongs to.
    pub stream: Stream,
    /// Its number in the stream (1, 2, …).
    pub n: u64,
    /// Log records.
    pub records: Vec<u8>,
    /// Every batch `≤ through` is in this request or an earlier one.
    pub through: Seq,
}

/// The sender's side (see the module docs).
#[derive(Debug)]
pub struct Window {
    stream: Stream,
    next_n: u64,
    queued: Vec<u8>,
    /// Highest seq pushed.
    pushed: Seq,
    /// Requests sent and not acknowledged, in number order: (n, through,
    /// records), the records kept for a restart.
    in_flight: VecDeque<(u64, Seq, Vec<u8>)>,
    /// Highest seq the other server has stored.
    replicated: Seq,
    max_in_flight: usize,
}

impl Window {
    /// A window that starts with stream `stream` and lets at most
    /// `max_in_flight` (≥ 1) requests run at once.
    pub fn new(stream: Stream, max_in_flight: usize) -> Window {
        Window {
            stream,
            next_n: 1,
            queued: Vec::new(),
            pushed: 0,
            in_flight: VecDeque::new(),
            replicated: 0,
            max_in_flight: max_in_flight.max(1),
        }
    }

    /// Batch `seq` wrote `records` for the other server. Returns the new
    /// watermark when nothing was left to wait for (empty records with
    /// nothing queued or in flight).
    pub fn push(&mut self, seq: Seq, records: &[u8]) -> Option<Seq> {
        self.pushed = self.pushed.max(seq);
        self.queued.extend_from_slice(records);
        if self.queued.is_empty() && self.in_flight.is_empty() && self.replicated < self.pushed {
            self.replicated = self.pushed;
            return Some(self.replicated);
        }
        None
    }

    /// The next request to send, when records are queued and fewer than
    /// the maximum requests are in flight.
    pub fn next_request(&mut self) -> Option<Request> {
        if self.queued.is_empty() || self.in_flight.len() >= self.max_in_flight {
            return None;
        }
        let n = self.next_n;
        self.next_n += 1;
        let records = std::mem::take(&mut self.queued);
        self.in_flight.push_back((n, self.pushed, records.clone()));
        Some(Request {
            stream: self.stream,
            n,
            records,
            through: self.pushed,
        })
    }

    /// Request `n` of `stream` was acknowledged (stored durably there, and
    /// with it every earlier request of the stream). Returns the new
    /// watermark when it moved. Answers of a replaced stream are ignored.
    pub fn acked(&mut self, stream: Stream, n: u64) -> Option<Seq> {
        if stream != self.stream {
            return None;
        }
        let mut through = None;
        while self.in_flight.front().is_some_and(|(m, _, _)| *m <= n) {
            through = self.in_flight.pop_front().map(|(_, t, _)| t);
        }
        let t = through?;
        (t > self.replicated).then(|| {
            self.replicated = t;
            t
        })
    }

    /// A request failed: a new stream starts whose first request carries
    /// every record not acknowledged yet (in order), then what is queued.
    pub fn restart(&mut self) {
        let mut records: Vec<u8> = Vec::new();
        for (_, _, r) in self.in_flight.drain(..) {
            records.extend_from_slice(&r);
        }
        records.append(&mut self.queued);
        self.queued = records;
        self.stream += 1;
        self.next_n = 1;
    }

    /// A request of `stream` failed: restarts when it is the current
    /// stream (a failure of a replaced stream changes nothing). Returns
    /// whether it restarted.
    pub fn failed(&mut self, stream: Stream) -> bool {
        let current = stream == self.stream;
        if current {
            self.restart();
        }
        current
    }

    /// The other server counts as down: everything unsent or unacknowledged
    /// is dropped (it gets those leases from the full exchange when it
    /// returns) and the watermark moves to the last push. Returns the
    /// watermark and the number of record bytes dropped.
    pub fn abandon(&mut self) -> (Seq, usize) {
        let dropped = self.queued.len()
            + self
                .in_flight
                .iter()
                .map(|(_, _, r)| r.len())
                .sum::<usize>();
        self.queued.clear();
        self.in_flight.clear();
        self.stream += 1;
        self.next_n = 1;
        self.replicated = self.pushed;
        (self.replicated, dropped)
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether records wait to be sent or acknowledged.
    pub fn busy(&self) -> bool {
        !self.queued.is_empty() || !self.in_flight.is_empty()
    }

    /// The current stream.
    pub fn stream(&self) -> Stream {
        self.stream
    }
}

/// What the receiver does with request `n` of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// It is the next one: apply it now (the order moved past it).
    Apply,
    /// Already applied: answer once what is written is durable.
    Repeat,
    /// An earlier request of the stream has not arrived yet: wait.
    Wait,
    /// A replaced stream: refuse.
    Stale,
}

/// The receiver's side (see the module docs).
#[derive(Debug, Default)]
pub struct Order {
    stream: Stream,
    next: u64,
}

impl Order {
    /// Decides about request `n` of `stream`; [`Admit::Apply`] moves the
    /// order past it.
    pub fn admit(&mut self, stream: Stream, n: u64) -> Admit {
        if stream < self.stream {
            return Admit::Stale;
        }
        if stream > self.stream {
            if n != 1 {
                return Admit::Wait;
            }
            self.stream = stream;
            self.next = 1;
        }
        match n.cmp(&self.next) {
            std::cmp::Ordering::Equal => {
                self.next += 1;
                Admit::Apply
            }
            std::cmp::Ordering::Less => Admit::Repeat,
            std::cmp::Ordering::Greater => Admit::Wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn records_pushed_while_requests_run_go_together_in_the_next() {
        let mut w = Window::new(7, 1);
        w.push(1, b"a");
        let r1 = w.next_request().unwrap();
        assert_eq!((r1.stream, r1.n, r1.through), (7, 1, 1));
        w.push(2, b"b");
        w.push(3, b"c");
        assert_eq!(w.next_request(), None, "one request at a time");
        assert_eq!(w.acked(7, 1), Some(1));
        let r2 = w.next_request().unwrap();
        assert_eq!(
            (r2.n, r2.records.as_slice(), r2.through),
            (2, &b"bc"[..], 3)
        );
        assert_eq!(w.acked(7, 2), Some(3));
        assert!(!w.busy());
    }

    #[test]
    fn an_acknowledgement_covers_every_earlier_request() {
        let mut w = Window::new(1, 3);
        w.push(1, b"a");
        w.next_request().unwrap();
        w.push(2, b"b");
        w.next_request().unwrap();
        w.push(3, b"c");
        w.next_request().unwrap();
        assert_eq!(w.in_flight(), 3);
        assert_eq!(w.acked(1, 2), Some(2));
        assert_eq!(w.in_flight(), 1);
        assert_eq!(w.acked(1, 1), None, "already covered");
        assert_eq!(w.acked(1, 3), Some(3));
    }

    #[test]
    fn a_restart_resends_everything_unacknowledged_in_order_on_a_new_stream() {
        let mut w = Window::new(1, 2);
        w.push(1, b"a");
        w.next_request().unwrap();
        w.push(2, b"b");
        w.next_request().unwrap();
        w.push(3, b"c");
        w.restart();
        assert_eq!(w.acked(1, 2), None, "answers of the old stream are ignored");
        let r = w.next_request().unwrap();
        assert_eq!(
            (r.stream, r.n, r.records.as_slice(), r.through),
            (2, 1, &b"abc"[..], 3)
        );
        assert_eq!(w.acked(2, 1), Some(3));
    }

    #[test]
    fn abandoning_drops_what_is_unsent_and_releases_everything() {
        let mut w = Window::new(1, 1);
        w.push(1, b"ab");
        w.next_request().unwrap();
        w.push(2, b"c");
        assert_eq!(w.abandon(), (2, 3));
        assert!(!w.busy());
        assert_eq!(w.stream(), 2);
        // An empty push with nothing pending moves the watermark at once.
        assert_eq!(w.push(3, b""), Some(3));
    }

    #[test]
    fn the_receiver_applies_a_stream_in_number_order() {
        let mut o = Order::default();
        assert_eq!(o.admit(5, 2), Admit::Wait, "the stream starts at 1");
        assert_eq!(o.admit(5, 1), Admit::Apply);
        assert_eq!(o.admit(5, 3), Admit::Wait);
        assert_eq!(o.admit(5, 2), Admit::Apply);
        assert_eq!(o.admit(5, 3), Admit::Apply);
        assert_eq!(o.admit(5, 2), Admit::Repeat);
        assert_eq!(o.admit(4, 1), Admit::Stale);
        assert_eq!(o.admit(6, 1), Admit::Apply, "a newer stream replaces it");
        assert_eq!(o.admit(5, 4), Admit::Stale);
    }

    #[derive(Debug, Clone)]
    enum Ev {
        /// A batch with records is written.
        Push,
        /// The sender sends what it may.
        Send,
        /// The network delivers request `i` (of those sent and not yet
        /// delivered) to the receiver.
        Deliver(usize),
        /// The receiver's answer to the request it applied `i`-th reaches
        /// the sender.
        Answer(usize),
        /// A request fails.
        Fail,
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Any interleaving of writes, sends, out-of-order deliveries,
        /// answers and failures: the receiver applies every record in the
        /// order the sender wrote them (a record may repeat only right
        /// after a restart, as part of a resent prefix), and the watermark
        /// never passes a batch whose records the receiver has not applied.
        #[test]
        fn records_are_applied_in_order_and_acknowledged_only_once_applied(
            evs in proptest::collection::vec(
                prop_oneof![
                    3 => Just(Ev::Push),
                    3 => Just(Ev::Send),
                    3 => (0usize..4).prop_map(Ev::Deliver),
                    3 => (0usize..4).prop_map(Ev::Answer),
                    1 => Just(Ev::Fail),
                ],
                0..150,
            ),
            max in 1usize..4,
        ) {
            let mut w = Window::new(1, max);
            let mut o = Order::default();
            let mut seq: Seq = 0;
            // Requests on the wire, and answers on their way back.
            let mut wire: Vec<Request> = Vec::new();
            let mut answers: Vec<(Stream, u64)> = Vec::new();
            // Records (one byte each: the seq) as the receiver applied them.
            let mut applied: Vec<u8> = Vec::new();
            let mut watermark: Seq = 0;
            for ev in evs {
                match ev {
                    Ev::Push => {
                        seq += 1;
                        if let Some(t) = w.push(seq, &[seq as u8]) { watermark = t; }
                    }
                    Ev::Send => {
                        while let Some(r) = w.next_request() { wire.push(r); }
                    }
                    Ev::Deliver(i) if !wire.is_empty() => {
                        let r = wire.remove(i % wire.len());
                        match o.admit(r.stream, r.n) {
                            Admit::Apply => {
                                applied.extend_from_slice(&r.records);
                                answers.push((r.stream, r.n));
                            }
                            Admit::Repeat => answers.push((r.stream, r.n)),
                            // Waiting forever is a failure the sender sees.
                            Admit::Wait | Admit::Stale => { w.failed(r.stream); }
                        }
                    }
                    Ev::Answer(i) if !answers.is_empty() => {
                        let (s, n) = answers.remove(i % answers.len());
                        if let Some(t) = w.acked(s, n) {
                            prop_assert!(t > watermark);
                            watermark = t;
                        }
                    }
                    Ev::Fail => { w.failed(w.stream()); }
                    _ => {}
                }
                // Every batch up to the watermark was applied there.
                for s in 1..=watermark {
                    prop_assert!(applied.contains(&(s as u8)), "seq {} acknowledged, not applied", s);
                }
                // Applied in order: no record before the ones written
                // before it, and the last application of each record comes
                // after the last of every earlier one (a repeat is always
                // followed by everything written after it), so replaying
                // what was applied ends in the state the sender decided.
                let mut highest = 0u8;
                let mut last = std::collections::BTreeMap::new();
                for (i, &b) in applied.iter().enumerate() {
                    prop_assert!(b <= highest + 1, "record {} applied before {}", b, highest + 1);
                    highest = highest.max(b);
                    last.insert(b, i);
                }
                let positions: Vec<usize> = last.values().copied().collect();
                prop_assert!(positions.windows(2).all(|p| p[0] < p[1]), "{:?}", applied);
            }
        }
    }
}
