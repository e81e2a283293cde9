//! The mocked Kubernetes API of the controller's integration tests: the
//! shared stateful mock (`oooi-kube-mock`, see its documentation) and the
//! checks against the controller's RBAC.

#![allow(dead_code)]
#![allow(unused_imports)]
#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

pub use oooi_kube_mock::*;

/// Asserts every recorded request is permitted by the controller's RBAC.
pub fn assert_rbac(log: &[Recorded]) {
    assert_rbac_with(log, &oooi_controller::rbac::rules());
}

/// Asserts every recorded request is permitted by `rules`.
pub fn assert_rbac_with(log: &[Recorded], rules: &[oooi_controller::rbac::Rule]) {
    for r in log {
        if let Some((g, res, verb)) = oooi_controller::rbac::request_attributes(&r.method, &r.uri) {
            assert!(
                oooi_controller::rbac::allows_in(rules, &g, &res, &verb),
                "RBAC does not allow {verb} {res} in group {g:?} ({})",
                r.line()
            );
        }
    }
}
