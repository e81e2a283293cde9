//! Replication of lease records to the other server of a pair, as pure
//! bookkeeping (the HTTP is in [`crate::peer`]).
//!
//! **Sender** ([`Window`]): every written batch that the other server must
//! store is [`Window::push`]ed with its seq (see [`crate::commit`]) as soon
//! as its records are written, beside the local `fdatasync`. Records pushed
//! while requests are in flight wait and go together in the next request
//! (group replication); at most `max_in_flight` requests run at once, each
//! numbered in its stream (1, 2, …) and holding at most `max_bytes` of
//! records (whole batches). An acknowledgement is cumulative: the
//! other server applies a stream's requests in number order and answers
//! only after an `fdatasync` covering what it wrote, so the answer to
//! request `n` means every request `≤ n` is durable there
//! ([`Window::acked`] returns the new watermark for
//! [`crate::commit::AckGate::replicated_through`]). When a request fails
//! (connection lost, the other server restarted or timed out waiting for an
//! earlier request), [`Window::restart`] closes the stream; the next one
//! (opened by the receiver) carries every record not acknowledged yet, in their order:
//! applying a record twice changes nothing. When the other server counts as
//! down, [`Window::abandon`] drops what is unsent (it gets those leases from
//! the full exchange when it returns) and nothing waits for it any more.
//!
//! **Receiver** ([`Order`]): requests of one stream may arrive out of order
//! over several connections; each is applied only when its number is the
//! next one, so records are merged in the order they were decided (a lease
//! released and then committed again stays committed). A request repeating
//! one already applied is answered once what it repeats is durable.
//! Streams are issued by the receiver (`POST /pair/v1/streams`): an epoch
//! it draws at random at start and a number it counts up, never a clock. A
//! stream replaces the current one only when the receiver issued it later,
//! and from its first request; a stream it did not issue (a forged or stale
//! header, a stream of its previous life) is refused.

use std::collections::VecDeque;

use crate::commit::Seq;

/// A stream of requests, named by the receiver: its epoch (a random number
/// it draws at start, so that a stream of its previous life is never taken
/// for one of this life) and the number it issued. No header can jump the
/// order: a stream the receiver did not issue is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stream {
    /// The receiver's epoch.
    pub epoch: u64,
    /// The receiver's number for it (1, 2, … in issue order).
    pub n: u64,
}

impl Stream {
    /// The header form, `<epoch as 16 hex digits>-<n>`.
    pub fn header(&self) -> String {
        format!("{:016x}-{}", self.epoch, self.n)
    }

    /// Parses [`Stream::header`].
    pub fn parse(s: &str) -> Option<Stream> {
        let (e, n) = s.trim().split_once('-')?;
        if e.len() != 16 {
            return None;
        }
        Some(Stream {
            epoch: u64::from_str_radix(e, 16).ok()?,
            n: n.parse().ok()?,
        })
    }
}

/// A pushed batch: its seq and records.
type Batch = (Seq, Vec<u8>);

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
    /// The stream the receiver issued; None until one is opened (at start
    /// and after every failure).
    stream: Option<Stream>,
    next_n: u64,
    /// Pushed batches not sent yet: (seq, records).
    queued: VecDeque<(Seq, Vec<u8>)>,
    /// Highest seq pushed.
    pushed: Seq,
    /// Requests sent and not acknowledged, in number order: (n, through,
    /// batches), the batches kept for a restart.
    in_flight: VecDeque<(u64, Seq, Vec<Batch>)>,
    /// Highest seq the other server has stored.
    replicated: Seq,
    max_in_flight: usize,
    /// Most record bytes in one request (whole batches; a batch larger
    /// than this goes alone).
    max_bytes: usize,
    /// Batches at the front of `queued` that go in one request whatever
    /// their size: those resent after a failure. The receiver may have
    /// applied them already, so they are applied again all at once, never
    /// a part of them after later records (at most `max_in_flight`
    /// requests' worth).
    together: usize,
}

impl Window {
    /// A window that lets at most `max_in_flight` (≥ 1) requests of at most
    /// `max_bytes` of records (whole batches) run at once.
    pub fn new(max_in_flight: usize, max_bytes: usize) -> Window {
        Window {
            stream: None,
            next_n: 1,
            queued: VecDeque::new(),
            pushed: 0,
            in_flight: VecDeque::new(),
            replicated: 0,
            max_in_flight: max_in_flight.max(1),
            max_bytes: max_bytes.max(1),
            together: 0,
        }
    }

    /// Batch `seq` wrote `records` for the other server. Returns the new
    /// watermark when nothing was left to wait for (empty records with
    /// nothing queued or in flight).
    pub fn push(&mut self, seq: Seq, records: &[u8]) -> Option<Seq> {
        self.pushed = self.pushed.max(seq);
        if !records.is_empty() {
            self.queued.push_back((seq, records.to_vec()));
        }
        if self.queued.is_empty() && self.in_flight.is_empty() && self.replicated < self.pushed {
            self.replicated = self.pushed;
            return Some(self.replicated);
        }
        None
    }

    /// Whether records wait and no stream is open: open one with the
    /// receiver and give it to [`Window::set_stream`].
    pub fn needs_stream(&self) -> bool {
        self.stream.is_none() && self.busy()
    }

    /// The receiver issued `stream`: requests go on it from number 1.
    pub fn set_stream(&mut self, stream: Stream) {
        self.stream = Some(stream);
        self.next_n = 1;
    }

    /// The next request to send, when a stream is open, records are queued
    /// and fewer than the maximum requests are in flight.
    pub fn next_request(&mut self) -> Option<Request> {
        let stream = self.stream?;
        if self.queued.is_empty() || self.in_flight.len() >= self.max_in_flight {
            return None;
        }
        let n = self.next_n;
        self.next_n += 1;
        let mut batches = Vec::new();
        let mut bytes = 0;
        let together = std::mem::take(&mut self.together);
        while let Some((_, r)) = self.queued.front() {
            if batches.len() >= together && !batches.is_empty() && bytes + r.len() > self.max_bytes
            {
                break;
            }
            bytes += r.len();
            batches.extend(self.queued.pop_front());
        }
        // Through the last batch sent; when nothing is left queued, through
        // every push (empty batches included).
        let through = if self.queued.is_empty() {
            self.pushed
        } else {
            batches.last().map_or(self.replicated, |(s, _)| *s)
        };
        let mut records = Vec::with_capacity(bytes);
        for (_, r) in &batches {
            records.extend_from_slice(r);
        }
        self.in_flight.push_back((n, through, batches));
        Some(Request {
            stream,
            n,
            records,
            through,
        })
    }

    /// Request `n` of `stream` was acknowledged (stored durably there, and
    /// with it every earlier request of the stream). Returns the new
    /// watermark when it moved. Answers of a replaced stream are ignored.
    pub fn acked(&mut self, stream: Stream, n: u64) -> Option<Seq> {
        if Some(stream) != self.stream {
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

    /// A request failed: the stream is closed, and every batch not
    /// acknowledged goes again (in order) on the next one.
    pub fn restart(&mut self) {
        let mut again: VecDeque<(Seq, Vec<u8>)> = VecDeque::new();
        for (_, _, batches) in self.in_flight.drain(..) {
            again.extend(batches);
        }
        self.together += again.len();
        again.append(&mut self.queued);
        self.queued = again;
        self.stream = None;
        self.next_n = 1;
    }

    /// A request of `stream` failed: restarts when it is the current
    /// stream (a failure of a replaced stream changes nothing). Returns
    /// whether it restarted.
    pub fn failed(&mut self, stream: Stream) -> bool {
        let current = Some(stream) == self.stream;
        if current {
            self.restart();
        }
        current
    }

    /// Nothing waits for the other server any more (contact is lost, or
    /// it took too long): everything unsent or unacknowledged is dropped
    /// (it goes over in the full exchange when contact returns) and the
    /// watermark moves to the last push. Returns the watermark and the
    /// number of record bytes dropped.
    pub fn abandon(&mut self) -> (Seq, usize) {
        let dropped = self.queued.iter().map(|(_, r)| r.len()).sum::<usize>()
            + self
                .in_flight
                .iter()
                .flat_map(|(_, _, b)| b.iter().map(|(_, r)| r.len()))
                .sum::<usize>();
        self.queued.clear();
        self.in_flight.clear();
        self.together = 0;
        self.stream = None;
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

    /// The current stream, if one is open.
    pub fn stream(&self) -> Option<Stream> {
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
    /// A replaced stream, or one this receiver never issued: refuse.
    Stale,
}

/// The receiver's side (see the module docs).
#[derive(Debug)]
pub struct Order {
    epoch: u64,
    /// The last stream number issued.
    issued: u64,
    /// The stream being applied (0: none yet).
    current: u64,
    next: u64,
}

impl Order {
    /// A receiver whose streams carry `epoch` (draw it at random at start).
    pub fn new(epoch: u64) -> Order {
        Order {
            epoch,
            issued: 0,
            current: 0,
            next: 1,
        }
    }

    /// Issues a new stream; it replaces the current one when its first
    /// request arrives.
    pub fn open(&mut self) -> Stream {
        self.issued += 1;
        Stream {
            epoch: self.epoch,
            n: self.issued,
        }
    }

    /// Decides about request `n` of `stream`; [`Admit::Apply`] moves the
    /// order past it.
    pub fn admit(&mut self, stream: Stream, n: u64) -> Admit {
        if stream.epoch != self.epoch
            || stream.n == 0
            || stream.n > self.issued
            || stream.n < self.current
            || n == 0
        {
            return Admit::Stale;
        }
        if stream.n > self.current {
            if n != 1 {
                return Admit::Wait;
            }
            self.current = stream.n;
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

    /// A window whose stream `o` issued.
    fn opened(o: &mut Order, max: usize) -> Window {
        let mut w = Window::new(max, 1 << 20);
        w.set_stream(o.open());
        w
    }

    #[test]
    fn records_pushed_while_requests_run_go_together_in_the_next() {
        let mut o = Order::new(7);
        let mut w = opened(&mut o, 1);
        w.push(1, b"a");
        let r1 = w.next_request().unwrap();
        assert_eq!((r1.stream.n, r1.n, r1.through), (1, 1, 1));
        w.push(2, b"b");
        w.push(3, b"c");
        assert_eq!(w.next_request(), None, "one request at a time");
        assert_eq!(w.acked(r1.stream, 1), Some(1));
        let r2 = w.next_request().unwrap();
        assert_eq!(
            (r2.n, r2.records.as_slice(), r2.through),
            (2, &b"bc"[..], 3)
        );
        assert_eq!(w.acked(r2.stream, 2), Some(3));
        assert!(!w.busy());
    }

    #[test]
    fn a_request_holds_whole_batches_up_to_the_size_limit() {
        let mut o = Order::new(7);
        let mut w = Window::new(4, 2);
        w.set_stream(o.open());
        w.push(1, b"ab");
        w.push(2, b"c");
        w.push(3, b"de");
        let r1 = w.next_request().unwrap();
        assert_eq!((r1.records.as_slice(), r1.through), (&b"ab"[..], 1));
        let r2 = w.next_request().unwrap();
        assert_eq!((r2.records.as_slice(), r2.through), (&b"c"[..], 2));
        let r3 = w.next_request().unwrap();
        assert_eq!((r3.records.as_slice(), r3.through), (&b"de"[..], 3));
        assert_eq!(w.acked(r1.stream, 2), Some(2));
        assert_eq!(w.acked(r1.stream, 3), Some(3));
    }

    #[test]
    fn an_acknowledgement_covers_every_earlier_request() {
        let mut o = Order::new(1);
        let mut w = opened(&mut o, 3);
        w.push(1, b"a");
        let s = w.next_request().unwrap().stream;
        w.push(2, b"b");
        w.next_request().unwrap();
        w.push(3, b"c");
        w.next_request().unwrap();
        assert_eq!(w.in_flight(), 3);
        assert_eq!(w.acked(s, 2), Some(2));
        assert_eq!(w.in_flight(), 1);
        assert_eq!(w.acked(s, 1), None, "already covered");
        assert_eq!(w.acked(s, 3), Some(3));
    }

    #[test]
    fn a_restart_resends_everything_unacknowledged_in_order_on_a_new_stream() {
        let mut o = Order::new(1);
        let mut w = opened(&mut o, 2);
        w.push(1, b"a");
        let old = w.next_request().unwrap().stream;
        w.push(2, b"b");
        w.next_request().unwrap();
        w.push(3, b"c");
        w.restart();
        assert!(w.needs_stream());
        assert_eq!(w.next_request(), None, "no request before a stream is open");
        w.set_stream(o.open());
        assert_eq!(
            w.acked(old, 2),
            None,
            "answers of the old stream are ignored"
        );
        let r = w.next_request().unwrap();
        assert_eq!(
            (r.stream.n, r.n, r.records.as_slice(), r.through),
            (2, 1, &b"abc"[..], 3)
        );
        assert_eq!(w.acked(r.stream, 1), Some(3));
    }

    #[test]
    fn abandoning_drops_what_is_unsent_and_releases_everything() {
        let mut o = Order::new(1);
        let mut w = opened(&mut o, 1);
        w.push(1, b"ab");
        w.next_request().unwrap();
        w.push(2, b"c");
        assert_eq!(w.abandon(), (2, 3));
        assert!(!w.busy());
        assert_eq!(w.stream(), None);
        // An empty push with nothing pending moves the watermark at once.
        assert_eq!(w.push(3, b""), Some(3));
    }

    #[test]
    fn the_receiver_applies_a_stream_in_number_order() {
        let mut o = Order::new(5);
        let s1 = o.open();
        assert_eq!(o.admit(s1, 2), Admit::Wait, "the stream starts at 1");
        assert_eq!(o.admit(s1, 1), Admit::Apply);
        assert_eq!(o.admit(s1, 3), Admit::Wait);
        assert_eq!(o.admit(s1, 2), Admit::Apply);
        assert_eq!(o.admit(s1, 3), Admit::Apply);
        assert_eq!(o.admit(s1, 2), Admit::Repeat);
        let s2 = o.open();
        assert_eq!(o.admit(s2, 1), Admit::Apply, "a later stream replaces it");
        assert_eq!(o.admit(s1, 4), Admit::Stale);
    }

    #[test]
    fn a_stream_the_receiver_did_not_issue_is_refused_and_cannot_jump_the_order() {
        let mut o = Order::new(0x1234);
        let s1 = o.open();
        assert_eq!(o.admit(s1, 1), Admit::Apply);
        // A forged header far ahead, another epoch (a previous life of the
        // receiver), stream or request 0: refused, and the order is intact.
        for forged in [
            Stream {
                epoch: 0x1234,
                n: u64::MAX,
            },
            Stream { epoch: 1, n: 1 },
            Stream {
                epoch: 0x1234,
                n: 0,
            },
        ] {
            assert_eq!(o.admit(forged, 1), Admit::Stale, "{forged:?}");
        }
        assert_eq!(o.admit(s1, 0), Admit::Stale);
        assert_eq!(o.admit(s1, 2), Admit::Apply);
        let s2 = o.open();
        assert_eq!(o.admit(s2, 1), Admit::Apply);
    }

    #[test]
    fn stream_headers_round_trip_and_junk_does_not_parse() {
        let s = Stream {
            epoch: 0xdead_beef_0000_0001,
            n: 42,
        };
        assert_eq!(Stream::parse(&s.header()), Some(s));
        for junk in [
            "18446744073709551615",
            "",
            "-1",
            "zz-1",
            "00000000000000ff-x",
        ] {
            assert_eq!(Stream::parse(junk), None, "{junk}");
        }
    }

    #[derive(Debug, Clone)]
    enum Ev {
        /// A batch with records is written.
        Push,
        /// The sender sends what it may (opening a stream when it needs one).
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
            max_bytes in 1usize..4,
        ) {
            let mut o = Order::new(99);
            let mut w = Window::new(max, max_bytes);
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
                        if w.needs_stream() { w.set_stream(o.open()); }
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
                    Ev::Fail => { if let Some(s) = w.stream() { w.failed(s); } }
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
