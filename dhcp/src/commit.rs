//! The ordering rule of pipelined group commit, apart from any I/O.
//!
//! The persister `write()`s each decided batch of lease records to the log
//! at once (one writer, so records reach the file in decision order) and
//! numbers the batch. An `fdatasync` started after batch `n` was written
//! makes every batch `≤ n` durable, whatever other syncs are still running.
//! So several syncs may be in flight at once (on this disk, concurrent
//! flushes cost little more than one, and a batch no longer waits for the
//! sync before it to finish before its own can start), and a batch's
//! replies (its ACKs) are released as soon as ANY sync that started after
//! the batch was written has finished — never earlier.
//!
//! [`AckGate`] is that bookkeeping: [`AckGate::written`] numbers a batch,
//! [`AckGate::next_sync`] says whether to start a sync now and what it
//! covers, [`AckGate::synced`] releases the replies it made durable, in
//! decision order.
//!
//! One server of a pair also waits for the other server: a batch written
//! with [`AckGate::written_replicated`] is released only when a local sync
//! covers it AND the other server has acknowledged storing it durably
//! ([`AckGate::replicated_through`], fed by [`crate::replication`]),
//! whichever comes last. Both run at once: the records go to the other
//! server as soon as they are written, not after the local sync.

use std::collections::VecDeque;

/// Sequence number of a written batch (1, 2, …).
pub type Seq = u64;

/// Holds each batch's replies until a sync covering the batch has finished.
#[derive(Debug)]
pub struct AckGate<R> {
    /// Seq of the last written batch (0: none yet).
    written: Seq,
    /// Highest seq a started sync covers.
    dispatched: Seq,
    /// Highest seq known durable.
    durable: Seq,
    in_flight: usize,
    max_in_flight: usize,
    /// Replies that wait for a local sync only.
    pending: VecDeque<(Seq, Vec<R>)>,
    /// Highest seq the other server of a pair has stored (None: alone).
    replicated: Option<Seq>,
    /// Replies that wait for a local sync and the other server.
    pending_replicated: VecDeque<(Seq, Vec<R>)>,
}

impl<R> AckGate<R> {
    /// A gate that lets at most `max_in_flight` (≥ 1) syncs run at once.
    pub fn new(max_in_flight: usize) -> Self {
        AckGate {
            written: 0,
            dispatched: 0,
            durable: 0,
            in_flight: 0,
            max_in_flight: max_in_flight.max(1),
            pending: VecDeque::new(),
            replicated: None,
            pending_replicated: VecDeque::new(),
        }
    }

    /// The gate of one server of a pair: replies written with
    /// [`AckGate::written_replicated`] also wait for
    /// [`AckGate::replicated_through`].
    pub fn with_replication(mut self) -> Self {
        self.replicated = Some(self.written);
        self
    }

    /// Records that a batch's records were written (not yet synced); its
    /// `replies` wait for a sync. Returns the batch's seq.
    pub fn written(&mut self, replies: Vec<R>) -> Seq {
        self.written += 1;
        if !replies.is_empty() {
            self.pending.push_back((self.written, replies));
        }
        self.written
    }

    /// Records that a batch was written whose `replies` wait for a local
    /// sync AND the other server's acknowledgement (alone: the same as
    /// [`AckGate::written`]). Returns the batch's seq.
    pub fn written_replicated(&mut self, replies: Vec<R>) -> Seq {
        if self.replicated.is_none() {
            return self.written(replies);
        }
        self.written += 1;
        if !replies.is_empty() {
            self.pending_replicated.push_back((self.written, replies));
        }
        self.written
    }

    /// Holds `replies` until everything written so far is durable here
    /// (used when a request needs nothing new written but must not be
    /// answered before what it repeats is durable). Returns them at once
    /// when it already is.
    pub fn after_written(&mut self, replies: Vec<R>) -> Vec<R> {
        if self.durable >= self.written {
            return replies;
        }
        match self.pending.back_mut() {
            Some((s, r)) if *s == self.written => r.extend(replies),
            _ => self.pending.push_back((self.written, replies)),
        }
        Vec::new()
    }

    /// The other server has durably stored every replicated batch up to
    /// `seq` (or counts as down, and nothing waits for it any more):
    /// returns the replies now released, in decision order.
    pub fn replicated_through(&mut self, seq: Seq) -> Vec<R> {
        let seq = seq.min(self.written);
        if let Some(r) = &mut self.replicated {
            *r = (*r).max(seq);
        }
        self.release()
    }

    /// Whether to start a sync now: `Some(seq)` when something written is
    /// not covered by a running or finished sync and fewer than the maximum
    /// syncs are running. The sync must start after this call (it then
    /// covers every batch up to `seq`); report it with [`AckGate::synced`].
    pub fn next_sync(&mut self) -> Option<Seq> {
        if self.written > self.dispatched && self.in_flight < self.max_in_flight {
            self.dispatched = self.written;
            self.in_flight += 1;
            Some(self.written)
        } else {
            None
        }
    }

    /// A sync started for `seq` finished successfully: returns the replies
    /// now durable, in decision order.
    pub fn synced(&mut self, seq: Seq) -> Vec<R> {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.durable_through(seq)
    }

    /// Everything written up to `seq` is durable by other means (the log
    /// was compacted: the new file was synced before it replaced the old
    /// one). Returns the replies released.
    pub fn durable_through(&mut self, seq: Seq) -> Vec<R> {
        let seq = seq.min(self.written);
        self.durable = self.durable.max(seq);
        if self.dispatched < self.durable {
            self.dispatched = self.durable;
        }
        self.release()
    }

    /// Pops what the watermarks allow: local-only replies up to `durable`,
    /// replicated ones up to the lower of `durable` and `replicated`.
    fn release(&mut self) -> Vec<R> {
        let mut out = Vec::new();
        pop_through(&mut self.pending, self.durable, &mut out);
        if let Some(r) = self.replicated {
            pop_through(&mut self.pending_replicated, self.durable.min(r), &mut out);
        }
        out
    }

    /// Seq of the last written batch.
    pub fn last_written(&self) -> Seq {
        self.written
    }

    /// Syncs running now.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Replies waiting for a sync (or the other server).
    pub fn waiting(&self) -> usize {
        self.pending
            .iter()
            .chain(&self.pending_replicated)
            .map(|(_, r)| r.len())
            .sum()
    }
}

fn pop_through<R>(q: &mut VecDeque<(Seq, Vec<R>)>, through: Seq, out: &mut Vec<R>) {
    while q.front().is_some_and(|(s, _)| *s <= through) {
        if let Some((_, r)) = q.pop_front() {
            out.extend(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_reply_waits_for_a_sync_started_after_its_batch() {
        let mut g = AckGate::new(2);
        let s1 = g.written(vec!["a1"]);
        assert_eq!(g.next_sync(), Some(s1));
        // Batch 2 is written while sync 1 runs: sync 1 does not cover it.
        let s2 = g.written(vec!["a2"]);
        assert_eq!(g.next_sync(), Some(s2));
        assert_eq!(g.next_sync(), None, "nothing new to cover");
        assert_eq!(g.synced(s1), vec!["a1"]);
        assert_eq!(g.waiting(), 1);
        assert_eq!(g.synced(s2), vec!["a2"]);
        assert_eq!(g.in_flight(), 0);
    }

    #[test]
    fn a_later_sync_finishing_first_releases_the_earlier_batches_too() {
        let mut g = AckGate::new(2);
        g.written(vec![1]);
        let s1 = g.next_sync().unwrap();
        g.written(vec![2, 3]);
        let s2 = g.next_sync().unwrap();
        assert_eq!(g.synced(s2), vec![1, 2, 3]);
        assert_eq!(g.synced(s1), Vec::<i32>::new());
    }

    #[test]
    fn at_most_max_in_flight_and_one_sync_covers_what_waited() {
        let mut g = AckGate::new(1);
        g.written(vec![1]);
        let s1 = g.next_sync().unwrap();
        g.written(vec![2]);
        g.written(vec![3]);
        assert_eq!(g.next_sync(), None, "one sync at a time");
        assert_eq!(g.synced(s1), vec![1]);
        let s3 = g.next_sync().unwrap();
        assert_eq!(s3, 3, "one sync covers both waiting batches");
        assert_eq!(g.synced(s3), vec![2, 3]);
    }

    #[test]
    fn compaction_releases_everything_written() {
        let mut g = AckGate::new(2);
        g.written(vec![1]);
        let s1 = g.next_sync().unwrap();
        g.written(vec![2]);
        assert_eq!(g.durable_through(g.last_written()), vec![1, 2]);
        assert_eq!(g.next_sync(), None, "already durable");
        assert_eq!(g.synced(s1), Vec::<i32>::new());
        assert_eq!(g.in_flight(), 0);
    }

    #[test]
    fn a_replicated_reply_waits_for_the_sync_and_the_other_server_whichever_is_last() {
        let mut g = AckGate::new(2).with_replication();
        let s1 = g.written_replicated(vec!["ack1"]);
        let sync1 = g.next_sync().unwrap();
        // The other server stored it first: still waits for the local sync.
        assert_eq!(g.replicated_through(s1), Vec::<&str>::new());
        assert_eq!(g.synced(sync1), vec!["ack1"]);
        // Local sync first: waits for the other server.
        let s2 = g.written_replicated(vec!["ack2"]);
        let sync2 = g.next_sync().unwrap();
        assert_eq!(g.synced(sync2), Vec::<&str>::new());
        assert_eq!(g.waiting(), 1);
        assert_eq!(g.replicated_through(s2), vec!["ack2"]);
    }

    #[test]
    fn a_local_only_reply_does_not_wait_behind_a_replicated_one() {
        let mut g = AckGate::new(2).with_replication();
        g.written_replicated(vec!["client ack"]);
        g.written(vec!["peer ack"]);
        let s = g.next_sync().unwrap();
        assert_eq!(g.synced(s), vec!["peer ack"]);
        assert_eq!(g.replicated_through(s), vec!["client ack"]);
    }

    #[test]
    fn alone_a_replicated_write_is_a_plain_write() {
        let mut g = AckGate::new(1);
        g.written_replicated(vec![1]);
        let s = g.next_sync().unwrap();
        assert_eq!(g.synced(s), vec![1]);
    }

    #[test]
    fn a_repeat_waits_for_what_is_written_to_be_durable() {
        let mut g = AckGate::new(1);
        assert_eq!(g.after_written(vec!["now"]), vec!["now"], "nothing written");
        g.written(vec!["a"]);
        assert_eq!(g.after_written(vec!["repeat"]), Vec::<&str>::new());
        let s = g.next_sync().unwrap();
        assert_eq!(g.synced(s), vec!["a", "repeat"]);
        assert_eq!(g.after_written(vec!["later"]), vec!["later"]);
    }

    #[derive(Debug, Clone)]
    enum Ev {
        Write(u8),
        Finish(usize),
    }

    #[derive(Debug, Clone)]
    enum PairEv {
        /// A batch of `n` replies; replicated or local only.
        Write(u8, bool),
        /// A running sync finishes.
        Finish(usize),
        /// The other server acknowledges through the `k`-th highest
        /// written seq not yet acknowledged.
        Replicated(u8),
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Any interleaving of writes and sync completions (in any order):
        /// every reply is released exactly once, in decision order, and
        /// only after a sync that started after its batch was written.
        #[test]
        fn never_released_before_a_covering_sync(
            evs in proptest::collection::vec(
                prop_oneof![
                    (0u8..3).prop_map(Ev::Write),
                    (0usize..4).prop_map(Ev::Finish),
                ],
                0..200,
            ),
            max in 1usize..4,
        ) {
            let mut g = AckGate::new(max);
            // Running syncs: (seq they cover). A sync "started" at
            // next_sync covers exactly the batches written before it.
            let mut running: Vec<Seq> = Vec::new();
            let mut next_reply = 0u64;
            let mut released: Vec<u64> = Vec::new();
            let mut batch_of: Vec<Seq> = Vec::new(); // reply id -> seq
            let mut max_finished: Seq = 0;
            for ev in evs {
                match ev {
                    Ev::Write(n) => {
                        let replies: Vec<u64> = (0..n).map(|_| { next_reply += 1; next_reply - 1 }).collect();
                        let seq = g.written(replies.clone());
                        for _ in replies { batch_of.push(seq); }
                    }
                    Ev::Finish(i) => {
                        if !running.is_empty() {
                            let s = running.remove(i % running.len());
                            max_finished = max_finished.max(s);
                            for r in g.synced(s) {
                                // Released only when a finished sync covers
                                // its batch (a sync's seq is the last batch
                                // written before it started).
                                prop_assert!(batch_of[r as usize] <= max_finished);
                                released.push(r);
                            }
                        }
                    }
                }
                if let Some(s) = g.next_sync() {
                    prop_assert!(running.len() < max);
                    running.push(s);
                }
                prop_assert_eq!(g.in_flight(), running.len());
            }
            // Decision order, no duplicates.
            prop_assert!(released.windows(2).all(|w| w[0] + 1 == w[1]));
            prop_assert!(released.first().is_none_or(|f| *f == 0));
            // Finish every running sync (and the ones they allow): all out.
            while let Some(s) = running.pop() {
                max_finished = max_finished.max(s);
                for r in g.synced(s) {
                    prop_assert!(batch_of[r as usize] <= max_finished);
                    released.push(r);
                }
                if let Some(s) = g.next_sync() { running.push(s); }
            }
            prop_assert_eq!(released.len() as u64, next_reply);
        }

        /// A pair's gate under any interleaving of writes, sync completions
        /// and acknowledgements of the other server: a replicated reply is
        /// released only once a finished sync AND the other server cover
        /// its batch, a local-only one once a sync does; each kind in
        /// decision order, every reply exactly once.
        #[test]
        fn pair_replies_wait_for_both_sides(
            evs in proptest::collection::vec(
                prop_oneof![
                    (0u8..3, any::<bool>()).prop_map(|(n, r)| PairEv::Write(n, r)),
                    (0usize..4).prop_map(PairEv::Finish),
                    (0u8..3).prop_map(PairEv::Replicated),
                ],
                0..200,
            ),
        ) {
            let mut g = AckGate::new(2).with_replication();
            let mut running: Vec<Seq> = Vec::new();
            let mut next_reply = 0u64;
            // reply id -> (seq, replicated?)
            let mut meta: Vec<(Seq, bool)> = Vec::new();
            let mut released: Vec<u64> = Vec::new();
            let (mut max_finished, mut replicated): (Seq, Seq) = (0, 0);
            let check = |out: Vec<u64>, released: &mut Vec<u64>, meta: &Vec<(Seq, bool)>, fin: Seq, rep: Seq| -> Result<(), TestCaseError> {
                for r in out {
                    let (s, needs) = meta[r as usize];
                    prop_assert!(s <= fin, "reply {} released before a covering sync", r);
                    prop_assert!(!needs || s <= rep, "reply {} released before the other server", r);
                    released.push(r);
                }
                Ok(())
            };
            for ev in evs {
                match ev {
                    PairEv::Write(n, rep) => {
                        let ids: Vec<u64> = (0..n).map(|_| { next_reply += 1; next_reply - 1 }).collect();
                        let seq = if rep { g.written_replicated(ids.clone()) } else { g.written(ids.clone()) };
                        for _ in ids { meta.push((seq, rep)); }
                    }
                    PairEv::Finish(i) => {
                        if !running.is_empty() {
                            let s = running.remove(i % running.len());
                            max_finished = max_finished.max(s);
                            let out = g.synced(s);
                            check(out, &mut released, &meta, max_finished, replicated)?;
                        }
                    }
                    PairEv::Replicated(k) => {
                        let last = g.last_written();
                        if last > replicated {
                            replicated = (replicated + 1 + u64::from(k)).min(last);
                            let out = g.replicated_through(replicated);
                            check(out, &mut released, &meta, max_finished, replicated)?;
                        }
                    }
                }
                if let Some(s) = g.next_sync() { running.push(s); }
            }
            // Each kind in decision order, no duplicates.
            for kind in [false, true] {
                let ids: Vec<u64> = released.iter().copied().filter(|r| meta[*r as usize].1 == kind).collect();
                prop_assert!(ids.windows(2).all(|w| w[0] < w[1]));
            }
            while let Some(s) = running.pop() {
                max_finished = max_finished.max(s);
                let out = g.synced(s);
                check(out, &mut released, &meta, max_finished, replicated)?;
                if let Some(s) = g.next_sync() { running.push(s); }
            }
            replicated = g.last_written();
            let out = g.replicated_through(replicated);
            check(out, &mut released, &meta, max_finished, replicated)?;
            prop_assert_eq!(released.len() as u64, next_reply);
        }
    }
}
