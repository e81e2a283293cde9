//! The host against tiny hand-written modules: export checks, logs, shared
//! data, foreign-function decoding, local responses, traps and endless loops.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use oooi_wasm_host::{Action, FilterHost, HostError, SharedData};

/// A minimal proxy-wasm module; `tick` is the body of `proxy_on_tick`.
fn module(tick: &str) -> String {
    format!(
        r#"(module
  (import "env" "proxy_log" (func $log (param i32 i32 i32) (result i32)))
  (import "env" "proxy_get_buffer_bytes" (func $buf (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_set_shared_data" (func $set (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_call_foreign_function" (func $ff (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_close_stream" (func $close (param i32) (result i32)))
  (import "env" "proxy_send_local_response" (func $respond (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_grpc_call_unknown" (func $unknown (param i32) (result i32)))
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 0) "hello")
  (data (i32.const 16) "key")
  (data (i32.const 32) "value")
  (data (i32.const 64) "\0a\17envoy.tcp_proxy.cluster\12\03c-1\18\02")
  (data (i32.const 128) "set_envoy_filter_state")
  (data (i32.const 160) "denied")
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $size)))
    (local.get $p))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32)
    ;; a bad pointer must come back as InvalidMemoryAccess (6), not a host panic
    (i32.eq (call $log (i32.const 2) (i32.const 0xfffffff0) (i32.const 100)) (i32.const 6)))
  (func (export "proxy_on_configure") (param $root i32) (param $size i32) (result i32)
    (drop (call $log (i32.const 2) (i32.const 0) (i32.const 5)))
    (drop (call $buf (i32.const 7) (i32.const 0) (local.get $size) (i32.const 200) (i32.const 204)))
    (drop (call $log (i32.const 2) (i32.load (i32.const 200)) (i32.load (i32.const 204))))
    (drop (call $set (i32.const 16) (i32.const 3) (i32.const 32) (i32.const 5) (i32.const 0)))
    ;; an unimplemented import answers Unimplemented (12)
    (i32.eq (call $unknown (i32.const 0)) (i32.const 12)))
  (func (export "proxy_on_new_connection") (param i32) (result i32)
    (drop (call $ff (i32.const 128) (i32.const 22) (i32.const 64) (i32.const 32) (i32.const 208) (i32.const 212)))
    (drop (call $close (i32.const 2)))
    (i32.const 1))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (drop (call $respond (i32.const 403) (i32.const 0) (i32.const 0) (i32.const 160) (i32.const 6) (i32.const 0) (i32.const 0) (i32.const -1)))
    (i32.const 1))
  (func (export "proxy_on_request_body") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_tick") (param i32) {tick})
)"#
    )
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("test address")
}

#[test]
fn module_without_abi_version_is_refused() {
    let wat = module("").replace("proxy_abi_version_0_2_1", "proxy_abi_version_0_1_0");
    match FilterHost::load(wat.as_bytes(), SharedData::default()) {
        Err(HostError::AbiVersion { found }) => assert_eq!(found, ["proxy_abi_version_0_1_0"]),
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("loaded a module without the 0.2.1 ABI"),
    }
}

#[test]
fn module_without_required_export_is_refused_by_name() {
    let wat = module("").replace("\"proxy_on_new_connection\"", "\"something_else\"");
    match FilterHost::load(wat.as_bytes(), SharedData::default()) {
        Err(HostError::MissingExports(names)) => {
            assert_eq!(names, ["proxy_on_new_connection"]);
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("loaded a module without proxy_on_new_connection"),
    }
}

#[test]
fn plugin_logs_configuration_sets_shared_data_and_routes() {
    let shared = SharedData::default();
    let mut host = FilterHost::load(module("").as_bytes(), shared.clone()).expect("load");
    let report = host.abi_report();
    assert_eq!(report.abi_versions, ["proxy_abi_version_0_2_1"]);
    assert_eq!(report.stubbed_imports, ["env::proxy_grpc_call_unknown"]);

    let root = host.start_plugin(r#"{"role":"network"}"#).expect("start");
    let messages: Vec<&str> = host.logs().iter().map(|(_, m)| m.as_str()).collect();
    assert!(messages.contains(&"hello"), "{messages:?}");
    assert!(messages.contains(&r#"{"role":"network"}"#), "{messages:?}");
    assert_eq!(shared.get("key").map(|(v, _)| v), Some(b"value".to_vec()));

    let outcome = host
        .new_connection(
            root,
            Some("a.example"),
            addr("127.0.0.2:40000"),
            addr("127.0.0.1:443"),
        )
        .expect("connection");
    assert_eq!(outcome.action, Action::Pause);
    assert!(outcome.closed);
    assert_eq!(
        outcome
            .filter_state
            .get("envoy.tcp_proxy.cluster")
            .map(String::as_str),
        Some("c-1")
    );

    let response = host
        .http_request(root, "GET", "/ready", &[], b"")
        .expect("request")
        .expect("a local response");
    assert_eq!(response.status, 403);
    assert_eq!(response.body_text(), "denied");
}

#[test]
fn trap_is_an_error_and_fails_the_vm() {
    let mut host =
        FilterHost::load(module("unreachable").as_bytes(), SharedData::default()).expect("load");
    let root = host.start_plugin("{}").expect("start");
    match host.tick(root) {
        Err(HostError::Trap { call, .. }) => assert_eq!(call, "proxy_on_tick"),
        other => panic!("expected a trap, got {other:?}"),
    }
    assert!(matches!(host.tick(root), Err(HostError::VmFailed(_))));
}

#[test]
fn endless_loop_runs_out_of_fuel() {
    let mut host =
        FilterHost::load(module("(loop (br 0))").as_bytes(), SharedData::default()).expect("load");
    let root = host.start_plugin("{}").expect("start");
    host.set_fuel_per_call(1_000_000);
    assert!(matches!(host.tick(root), Err(HostError::OutOfFuel { .. })));
}

#[test]
fn unknown_root_context_is_an_error() {
    let mut host = FilterHost::load(module("").as_bytes(), SharedData::default()).expect("load");
    assert!(matches!(
        host.tick(99),
        Err(HostError::UnknownRootContext(99))
    ));
}
