//! Quantiles, the summary table and the target verdict.

use super::*;

/// The `p` quantile of sorted durations, in µs.
pub(crate) fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// The median of finite values (NaN if none).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// A signed µs value, or "-" when unknown.
pub(crate) fn signed_us(v: f64) -> String {
    if v.is_finite() {
        format!("{v:+.0}")
    } else {
        "-".into()
    }
}

/// An unsigned µs value, or "-" when unknown.
pub(crate) fn plain(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".into()
    }
}

/// One line of the summary table: one kind, table size and load fraction.
pub(crate) struct Row {
    pub(crate) kind: &'static str,
    pub(crate) routes: usize,
    pub(crate) fraction: f64,
    pub(crate) offered: f64,
    pub(crate) native_rate: f64,
    pub(crate) empty_rate: f64,
    pub(crate) oooi_rate: f64,
    /// Envoy CPU µs per connection: native, empty wasm, oooi wasm.
    pub(crate) cpu: [f64; 3],
    /// p50 added over native (pooled over rounds): empty wasm, oooi wasm.
    pub(crate) p50_added: [f64; 2],
    /// p99 added over native, median of the rounds: empty wasm, oooi wasm.
    pub(crate) p99_added: [f64; 2],
    /// How far the control (the empty filter, which adds next to nothing)
    /// strayed from native at p99 in its worst round: the noise floor.
    pub(crate) p99_noise: f64,
}

/// The p99 part of the verdict: the oooi filter's median p99 added, judged
/// against the target with the noise floor the control measured. Met only
/// when even the noise cannot lift it over the target, missed only when
/// even the noise cannot bring it under. A filter cannot make connections
/// faster, so a negative median counts as zero: it shows noise, not a gain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum P99Verdict {
    Met,
    Missed,
    Unresolved,
}

pub(crate) fn p99_verdict(added: f64, noise: f64, target_us: f64) -> P99Verdict {
    if !(added.is_finite() && noise.is_finite()) {
        P99Verdict::Unresolved
    } else if added.max(0.0) + noise <= target_us {
        P99Verdict::Met
    } else if added - noise > target_us {
        P99Verdict::Missed
    } else {
        P99Verdict::Unresolved
    }
}

/// The largest absolute value (the control's worst round), NaN when empty.
pub(crate) fn worst_abs(values: &[f64]) -> f64 {
    values.iter().map(|v| v.abs()).fold(f64::NAN, f64::max)
}

pub(crate) fn print_table(rows: &[Row], rounds: usize) {
    println!(
        "  {:<5} {:>6} {:>9} {:>9} {:>9} {:>6} {:>6} {:>16} {:>14} {:>12} {:>12}  target",
        "kind",
        "routes",
        "native/s",
        "empty/s",
        "oooi/s",
        "empty",
        "oooi",
        "CPU us n/e/o",
        "latency at",
        "p50+ e/o",
        "p99+ e/o",
    );
    for r in rows {
        let ratio = |rate: f64| rate / r.native_rate * 100.0;
        let rate_met = ratio(r.oooi_rate) >= 90.0;
        let p99 = p99_verdict(r.p99_added[1], r.p99_noise, 100.0);
        let noise = format!("p99 unresolved, noise +-{:.0} us", r.p99_noise);
        let verdict = match (rate_met, p99) {
            (true, P99Verdict::Met) => "met".to_owned(),
            (false, P99Verdict::Met) => "MISSED (rate)".to_owned(),
            (true, P99Verdict::Missed) => "MISSED (p99)".to_owned(),
            (false, P99Verdict::Missed) => "MISSED (rate, p99)".to_owned(),
            (true, P99Verdict::Unresolved) => format!("rate met; {noise}"),
            (false, P99Verdict::Unresolved) => format!("MISSED (rate); {noise}"),
        };
        println!(
            "  {:<5} {:>6} {:>9.0} {:>9.0} {:>9.0} {:>5.0}% {:>5.0}% {:>16} {:>14} {:>12} {:>12}  {verdict}",
            r.kind,
            r.routes,
            r.native_rate,
            r.empty_rate,
            r.oooi_rate,
            ratio(r.empty_rate),
            ratio(r.oooi_rate),
            format!(
                "{}/{}/{}",
                plain(r.cpu[0], 0),
                plain(r.cpu[1], 0),
                plain(r.cpu[2], 0)
            ),
            format!("{:.0}% {:.0}/s", r.fraction * 100.0, r.offered),
            format!(
                "{}/{}",
                signed_us(r.p50_added[0]),
                signed_us(r.p50_added[1])
            ),
            format!(
                "{}/{}",
                signed_us(r.p99_added[0]),
                signed_us(r.p99_added[1])
            ),
        );
    }
    println!(
        "  (empty, oooi: rate as % of native's. CPU: Envoy µs per connection for native / empty wasm / oooi wasm. p50+, p99+: µs added over native in the interleaved run, empty wasm / oooi wasm; p99+ is the median of {rounds} rounds. Target: oooi wasm >= 90 % of native's rate and p99 added <= 100 us. The empty filter is the control: its worst round's |p99 added| is the noise; p99 counts as met only if oooi's p99+ (at least 0) plus that noise is <= 100 us, as missed only if minus it is > 100 us)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_p99_verdict_allows_for_the_controls_noise() {
        // Quiet machine: the control stays within 20 us.
        assert_eq!(p99_verdict(60.0, 20.0, 100.0), P99Verdict::Met);
        assert_eq!(p99_verdict(150.0, 20.0, 100.0), P99Verdict::Missed);
        assert_eq!(p99_verdict(90.0, 20.0, 100.0), P99Verdict::Unresolved);
        // This VM: the control strays by milliseconds, so a negative median
        // proves nothing either way.
        assert_eq!(p99_verdict(-357.0, 840.0, 100.0), P99Verdict::Unresolved);
        // A median far below zero is noise too, not a filter that speeds
        // connections up.
        assert_eq!(p99_verdict(-1643.0, 1500.0, 100.0), P99Verdict::Unresolved);
        assert_eq!(p99_verdict(-40.0, 30.0, 100.0), P99Verdict::Met);
        assert_eq!(p99_verdict(5178.0, 840.0, 100.0), P99Verdict::Missed);
        assert_eq!(p99_verdict(f64::NAN, 10.0, 100.0), P99Verdict::Unresolved);
        assert_eq!(p99_verdict(50.0, f64::NAN, 100.0), P99Verdict::Unresolved);
    }

    #[test]
    fn the_noise_is_the_controls_worst_round() {
        assert_eq!(worst_abs(&[69.0, -142.0, -41.0]), 142.0);
        assert!(worst_abs(&[]).is_nan());
    }
}
