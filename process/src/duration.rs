//! The one duration syntax of oooi's flags and API fields.
//!
//! A duration is one or more terms, each a decimal number (a fraction
//! allowed: `1.5h`, `.5s`) followed by its unit, with no space between
//! them: `h`, `m`, `s`, `ms`, `us` (or `µs`), `ns`. Larger units come
//! first and each unit at most once (`1h30m`, `2h0m0s`, `1m30.5s`), which
//! is how Go prints a duration: what Kubernetes and `oc` write (`oc adm
//! must-gather --since`) parses unchanged. Spaces around the whole are
//! ignored. Refused: a number without a unit (`5`), a sign, a space inside,
//! an unknown unit (`1d`), units out of order or repeated (`30m1h`), and
//! anything above `u64::MAX` nanoseconds (about 584 years).
//!
//! The Infra's `leaseTime` also takes a bare number of seconds; that form
//! is the field's own (see the controller's `LeaseTime`), not this syntax.

use std::time::Duration;

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?}: {why}")]
pub struct DurationError {
    /// The text as written.
    pub text: String,
    /// What is wrong with it.
    pub why: Why,
}

/// What is wrong with a duration's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Why {
    /// Nothing (or only spaces) was written.
    #[error("empty: write a duration such as 500ms, 5s or 1h30m")]
    Empty,
    /// A term has no number before its unit.
    #[error("not a duration such as 500ms, 5s or 1h30m")]
    NoNumber,
    /// A number has no unit.
    #[error("give a unit (h, m, s, ms, us or ns)")]
    NoUnit,
    /// A unit oooi does not know.
    #[error("unknown unit {0:?} (h, m, s, ms, us or ns)")]
    Unit(String),
    /// A unit after a smaller one, or twice.
    #[error("the unit {0:?} must come before smaller ones, once")]
    Order(String),
    /// More than `u64::MAX` nanoseconds.
    #[error("too long")]
    Overflow,
    /// Zero where only a positive duration makes sense.
    #[error("must be above zero")]
    Zero,
}

/// The units, largest first, with their length in nanoseconds.
const UNITS: [(&[&str], u64); 6] = [
    (&["h"], 3_600_000_000_000),
    (&["m"], 60_000_000_000),
    (&["s"], 1_000_000_000),
    (&["ms"], 1_000_000),
    // Go writes U+00B5 (micro sign) and also reads U+03BC (Greek mu).
    (&["us", "\u{b5}s", "\u{3bc}s"], 1_000),
    (&["ns"], 1),
];

/// Parses a duration in the syntax of this module (zero allowed).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    nanos(text.trim())
        .map(Duration::from_nanos)
        .map_err(|why| DurationError {
            text: text.to_string(),
            why,
        })
}

/// [`parse`], refusing zero: for intervals and timeouts.
pub fn parse_nonzero(text: &str) -> Result<Duration, DurationError> {
    match parse(text)? {
        d if d.is_zero() => Err(DurationError {
            text: text.to_string(),
            why: Why::Zero,
        }),
        d => Ok(d),
    }
}

fn nanos(text: &str) -> Result<u64, Why> {
    if text.is_empty() {
        return Err(Why::Empty);
    }
    let mut rest = text;
    let mut total: u64 = 0;
    // The index in UNITS the next term's unit must come after.
    let mut next_rank = 0;
    while !rest.is_empty() {
        let whole_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (whole, after) = rest.split_at(whole_len);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(f) => f.split_at(f.bytes().take_while(u8::is_ascii_digit).count()),
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(Why::NoNumber);
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(Why::NoUnit);
        }
        let rank = UNITS
            .iter()
            .position(|(names, _)| names.contains(&unit))
            .ok_or_else(|| Why::Unit(unit.to_string()))?;
        if rank < next_rank {
            return Err(Why::Order(unit.to_string()));
        }
        next_rank = rank + 1;
        let scale = UNITS[rank].1;
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| Why::Overflow)?
        };
        let term = whole
            .checked_mul(scale)
            .and_then(|n| n.checked_add(fraction_nanos(fraction, scale)))
            .ok_or(Why::Overflow)?;
        total = total.checked_add(term).ok_or(Why::Overflow)?;
        rest = after;
    }
    Ok(total)
}

/// `0.<digits>` of `scale` nanoseconds, what is below a nanosecond cut off.
fn fraction_nanos(digits: &str, scale: u64) -> u64 {
    let mut place = scale;
    let mut sum = 0;
    for d in digits.bytes() {
        place /= 10;
        if place == 0 {
            break;
        }
        sum += u64::from(d - b'0') * place;
    }
    sum
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn every_unit_and_their_sums() {
        for (text, want) in [
            ("1500ms", ms(1500)),
            ("2s", Duration::from_secs(2)),
            ("0s", Duration::ZERO),
            ("0ms", Duration::ZERO),
            ("30m", Duration::from_secs(1800)),
            ("1h", Duration::from_secs(3600)),
            ("1h30m", Duration::from_secs(5400)),
            ("2h0m10s", Duration::from_secs(7210)),
            ("2h0m0s", Duration::from_secs(7200)),
            ("1m30s", Duration::from_secs(90)),
            ("1s500ms", ms(1500)),
            ("7us", Duration::from_micros(7)),
            ("7\u{b5}s", Duration::from_micros(7)),
            ("7\u{3bc}s", Duration::from_micros(7)),
            ("9ns", Duration::from_nanos(9)),
            ("1h1m1s1ms1us1ns", Duration::new(3661, 1_001_001)),
            ("  5s\n", Duration::from_secs(5)),
            ("0012s", Duration::from_secs(12)),
        ] {
            assert_eq!(parse(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn fractions_as_go_prints_them() {
        for (text, want) in [
            ("1.5s", ms(1500)),
            ("1.5h", Duration::from_secs(5400)),
            (".5s", ms(500)),
            ("5.s", Duration::from_secs(5)),
            ("1m30.25s", ms(90_250)),
            ("0.5m", Duration::from_secs(30)),
            ("1.000000001s", Duration::new(1, 1)),
            // Below a nanosecond: cut off.
            ("1.0000000019s", Duration::new(1, 1)),
            ("0.5ns", Duration::ZERO),
            ("1.2345us", Duration::from_nanos(1234)),
        ] {
            assert_eq!(parse(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn refused_forms_say_why() {
        for (text, why) in [
            ("", Why::Empty),
            ("   ", Why::Empty),
            ("5", Why::NoUnit),
            ("1h30", Why::NoUnit),
            ("ms", Why::NoNumber),
            (".s", Why::NoNumber),
            ("-5s", Why::NoNumber),
            ("+5s", Why::NoNumber),
            ("5 s", Why::Unit(" s".into())),
            ("1h 30m", Why::Unit("h ".into())),
            ("2 hours", Why::Unit(" hours".into())),
            ("1d", Why::Unit("d".into())),
            ("5S", Why::Unit("S".into())),
            ("5sec", Why::Unit("sec".into())),
            ("1.2.3s", Why::NoUnit),
            ("30m1h", Why::Order("h".into())),
            ("1s1s", Why::Order("s".into())),
            ("500ms1s", Why::Order("s".into())),
            ("5us5\u{b5}s", Why::Order("\u{b5}s".into())),
            ("18446744073709551616ns", Why::Overflow),
            ("5124095h9999999999999ns", Why::Overflow),
            ("5124096h", Why::Overflow),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.why, why, "{text:?}");
            assert_eq!(e.text, text);
        }
        // The longest duration there is.
        assert_eq!(
            parse("18446744073709551615ns"),
            Ok(Duration::from_nanos(u64::MAX))
        );
    }

    #[test]
    fn errors_name_the_text_and_the_rule() {
        assert_eq!(
            parse("2").unwrap_err().to_string(),
            "\"2\": give a unit (h, m, s, ms, us or ns)"
        );
        assert_eq!(
            parse("2d").unwrap_err().to_string(),
            "\"2d\": unknown unit \"d\" (h, m, s, ms, us or ns)"
        );
        assert_eq!(
            parse("30m1h").unwrap_err().to_string(),
            "\"30m1h\": the unit \"h\" must come before smaller ones, once"
        );
    }

    #[test]
    fn nonzero_refuses_zero_alone() {
        assert_eq!(parse_nonzero("100ms"), Ok(ms(100)));
        assert_eq!(parse_nonzero("1ns"), Ok(Duration::from_nanos(1)));
        for zero in ["0s", "0ms", "0h0m0s", "0.0s"] {
            assert_eq!(parse_nonzero(zero).unwrap_err().why, Why::Zero, "{zero}");
        }
        assert_eq!(parse_nonzero("x").unwrap_err().why, Why::NoNumber);
        assert_eq!(
            parse_nonzero("0s").unwrap_err().to_string(),
            "\"0s\": must be above zero"
        );
    }
}
