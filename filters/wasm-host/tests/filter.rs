//! The real oooi filter module, driven without Envoy. Set `OOOI_FILTER_WASM`
//! to the built module (`cargo build -p oooi-sni-router --target wasm32-wasip1 --profile wasm`).

use oooi_wasm_host::{FilterHost, SharedData};

fn filter_wasm() -> Vec<u8> {
    let path = std::env::var("OOOI_FILTER_WASM")
        .expect("set OOOI_FILTER_WASM to the built oooi_sni_router.wasm");
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read OOOI_FILTER_WASM={path}: {e}"))
}

#[test]
fn filter_loads_and_is_not_ready_without_a_table() {
    let mut host = FilterHost::load(&filter_wasm(), SharedData::default()).expect("load");
    assert!(
        host.abi_report()
            .abi_versions
            .contains(&"proxy_abi_version_0_2_1".to_owned())
    );
    let api = host
        .start_plugin(r#"{"role":"api","push_token":"TOKEN-0123456789abcdef"}"#)
        .expect("api plugin");
    let ready = host
        .http_request(api, "GET", "/ready", &[], b"")
        .expect("request")
        .expect("answered");
    assert_eq!(ready.status, 503, "{}", ready.body_text());
}

#[test]
fn push_without_token_is_refused() {
    let mut host = FilterHost::load(&filter_wasm(), SharedData::default()).expect("load");
    let api = host
        .start_plugin(r#"{"role":"api","push_token":"TOKEN-0123456789abcdef"}"#)
        .expect("api plugin");
    let response = host
        .http_request(
            api,
            "PUT",
            "/v1/routes",
            &[("authorization", "Bearer WRONG")],
            b"{}",
        )
        .expect("request")
        .expect("answered");
    assert!(matches!(response.status, 401 | 403), "{}", response.status);
}
