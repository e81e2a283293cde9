//! Whether a replica holds the table the controller announced.
#![allow(clippy::unwrap_used)]

use oooi_routes::{Expected, MAX_GENERATION, Readiness};

const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

fn expected(generation: u64, digest: Option<&str>) -> Expected {
    Expected {
        generation,
        digest: digest.map(str::to_string),
    }
}

#[test]
fn a_replica_behind_the_announced_generation_is_not_ready() {
    let e = expected(5, Some(A));
    assert_eq!(
        Readiness::of(Some((4, B)), Some(&e)),
        Readiness::Behind {
            loaded: 4,
            expected: 5
        }
    );
    assert!(!Readiness::of(Some((4, B)), Some(&e)).is_ready());
    assert_eq!(Readiness::of(Some((5, A)), Some(&e)), Readiness::Ready);
    // Newer than announced: the controller moved on.
    assert_eq!(Readiness::of(Some((6, B)), Some(&e)), Readiness::Ready);
    // Nothing announced: holding a table is enough.
    assert_eq!(Readiness::of(Some((1, A)), None), Readiness::Ready);
    assert_eq!(Readiness::of(None, Some(&e)), Readiness::NoTable);
    assert_eq!(Readiness::of(None, None), Readiness::NoTable);
}

#[test]
fn the_announced_generation_under_another_digest_is_not_ready() {
    let r = Readiness::of(Some((5, B)), Some(&expected(5, Some(A))));
    assert_eq!(r.reason(), "other_digest");
    assert!(r.to_string().contains(A), "{r}");
    // Without a digest the generation alone decides.
    assert!(Readiness::of(Some((5, B)), Some(&expected(5, None))).is_ready());
}

#[test]
fn generations_compare_across_the_wrap() {
    let e = expected(2, None);
    assert_eq!(
        Readiness::of(Some((MAX_GENERATION, A)), Some(&e)).reason(),
        "behind"
    );
    assert!(Readiness::of(Some((1, A)), Some(&expected(MAX_GENERATION, None))).is_ready());
}

#[test]
fn the_announcement_is_parsed_strictly_and_round_trips() {
    let e =
        Expected::from_json(format!(r#"{{"generation":7,"digest":"{A}"}}"#).as_bytes()).unwrap();
    assert_eq!(e, expected(7, Some(A)));
    assert_eq!(Expected::decode(&e.encode()), Some(e));
    let e = Expected::from_json(br#"{"generation":9}"#).unwrap();
    assert_eq!(Expected::decode(&e.encode()), Some(e));
    for (bad, field) in [
        (r#"{"generation":0}"#.to_string(), "generation"),
        (
            format!(r#"{{"generation":{}}}"#, MAX_GENERATION + 1),
            "generation",
        ),
        (
            r#"{"generation":1,"digest":"md5:00"}"#.to_string(),
            "digest",
        ),
        (r#"{"generation":1,"extra":true}"#.to_string(), "extra"),
        (r#"{"digest":null}"#.to_string(), "generation"),
    ] {
        let err = Expected::from_json(bad.as_bytes()).unwrap_err();
        assert!(err.contains(field), "{bad}: {err}");
    }
    assert_eq!(Expected::decode(b"short"), None);
    assert_eq!(Expected::decode(&0u64.to_le_bytes()), None);
}
