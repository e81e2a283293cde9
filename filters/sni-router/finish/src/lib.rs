//! The post-build step of the oooi filter module.
//!
//! A proxy-wasm host calls a callback only when the module exports it: Envoy
//! skips `proxy_on_upstream_data` for a module without that export, and so on
//! for every other callback. The proxy-wasm SDK exports all of them, so a
//! module built with it pays a call into the VM for every data chunk in each
//! direction and for every close, log and done event, although the filter
//! leaves them all at their default. [`finish`] removes the exports of the
//! callbacks the filter never uses ([`UNUSED_CALLBACKS`]), checks that the
//! result is still a valid module with every callback it does use
//! ([`REQUIRED_EXPORTS`]), that it carries exactly one build id slot
//! (stamping keeps working, see [`oooi_routes::build_id`]) and that it fits a
//! ConfigMap ([`MAX_MODULE_BYTES`]).
//!
//! Only the export section changes; every other section is copied byte for
//! byte, so the build id slot and the code are exactly what the compiler made.
//! The functions stay in the code section (nothing calls them any more).

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail};
use wasm_encoder::{ExportSection, Module, RawSection};
use wasmparser::{Parser, Payload, Validator};

/// Largest module the chart can carry in a ConfigMap.
pub const MAX_MODULE_BYTES: usize = 512 * 1024;

/// Callbacks the filter leaves at the SDK's default, so Envoy need not call
/// them. `proxy_on_downstream_data` is NOT here: the plain-HTTP role reads
/// the request head through it. Nor is `proxy_on_delete`: it frees the SDK's
/// per-context state (and runs the context's `Drop`).
pub const UNUSED_CALLBACKS: [&str; 18] = [
    "proxy_on_upstream_data",
    "proxy_on_downstream_connection_close",
    "proxy_on_upstream_connection_close",
    "proxy_on_log",
    "proxy_on_done",
    "proxy_on_queue_ready",
    "proxy_on_request_trailers",
    "proxy_on_request_metadata",
    "proxy_on_response_headers",
    "proxy_on_response_body",
    "proxy_on_response_trailers",
    "proxy_on_response_metadata",
    "proxy_on_http_call_response",
    "proxy_on_grpc_receive_initial_metadata",
    "proxy_on_grpc_receive",
    "proxy_on_grpc_receive_trailing_metadata",
    "proxy_on_grpc_close",
    "proxy_on_foreign_function",
];

/// Exports the filter needs: the ABI marker, the allocator, the memory and
/// every callback one of its roles implements.
pub const REQUIRED_EXPORTS: [&str; 12] = [
    "memory",
    "proxy_abi_version_0_2_1",
    "proxy_on_memory_allocate",
    "proxy_on_context_create",
    "proxy_on_vm_start",
    "proxy_on_configure",
    "proxy_on_tick",
    "proxy_on_new_connection",
    "proxy_on_downstream_data",
    "proxy_on_request_headers",
    "proxy_on_request_body",
    "proxy_on_delete",
];

/// A finished module and what was done to it.
#[derive(Debug)]
pub struct Finished {
    /// The module bytes.
    pub module: Vec<u8>,
    /// Exports removed (empty when the input was already finished).
    pub removed: Vec<String>,
    /// The build id the module carries.
    pub build_id: String,
}

/// Removes the exports named in [`UNUSED_CALLBACKS`] and in `also` from
/// `module`, then checks the result (valid module, [`REQUIRED_EXPORTS`]
/// present, one build id slot, at most [`MAX_MODULE_BYTES`]). Running it on
/// a finished module changes nothing.
pub fn finish(module: &[u8], also: &[&str]) -> Result<Finished> {
    let drop: BTreeSet<&str> = UNUSED_CALLBACKS
        .iter()
        .copied()
        .chain(also.iter().copied())
        .collect();
    let mut out = Module::new();
    let mut removed = Vec::new();
    let mut exported = BTreeSet::new();
    for payload in Parser::new(0).parse_all(module) {
        let payload = payload.context("module does not parse")?;
        if let Payload::ExportSection(reader) = &payload {
            let mut section = ExportSection::new();
            for export in reader.clone() {
                let export = export.context("export section does not parse")?;
                if drop.contains(export.name) {
                    removed.push(export.name.to_owned());
                } else {
                    exported.insert(export.name.to_owned());
                    section.export(export.name, export.kind.into(), export.index);
                }
            }
            out.section(&section);
            continue;
        }
        if let Some((id, range)) = payload.as_section() {
            let (start, end) = (range.start as usize, range.end as usize);
            let data = module
                .get(start..end)
                .context("section range outside the module")?;
            out.section(&RawSection { id, data });
        }
    }
    let bytes = out.finish();
    check(&bytes, &exported)?;
    let build_id = oooi_routes::build_id::read(&bytes).context(
        "the module must carry exactly one build id slot (OOOI_BUILD_ID=); is it the oooi filter?",
    )?;
    Ok(Finished {
        module: bytes,
        removed,
        build_id,
    })
}

fn check(bytes: &[u8], exported: &BTreeSet<String>) -> Result<()> {
    Validator::new()
        .validate_all(bytes)
        .context("the finished module does not validate")?;
    let missing: Vec<&str> = REQUIRED_EXPORTS
        .iter()
        .copied()
        .filter(|e| !exported.contains(*e))
        .collect();
    if !missing.is_empty() {
        bail!("the module lacks required exports: {}", missing.join(", "));
    }
    if bytes.len() > MAX_MODULE_BYTES {
        bail!(
            "the module is {} bytes, over the ConfigMap budget of {MAX_MODULE_BYTES}",
            bytes.len()
        );
    }
    Ok(())
}

/// Names of a module's exports.
pub fn exports(module: &[u8]) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for payload in Parser::new(0).parse_all(module) {
        if let Payload::ExportSection(reader) = payload? {
            for export in reader {
                names.push(export?.name.to_owned());
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{
        CodeSection, ConstExpr, DataSection, ExportKind, Function, FunctionSection, MemorySection,
        MemoryType, TypeSection, ValType,
    };

    /// A module shaped like the filter: every required export, some unused
    /// callbacks, and a data segment holding the build id slot.
    fn filter_like(extra_exports: &[&str], slot: &[u8]) -> Vec<u8> {
        let mut types = TypeSection::new();
        types.ty().function([ValType::I32], [ValType::I32]);
        let names: Vec<&str> = REQUIRED_EXPORTS
            .iter()
            .copied()
            .filter(|n| *n != "memory")
            .chain(extra_exports.iter().copied())
            .collect();
        let mut funcs = FunctionSection::new();
        let mut code = CodeSection::new();
        for _ in &names {
            funcs.function(0);
            let mut f = Function::new([]);
            f.instructions().local_get(0).end();
            code.function(&f);
        }
        let mut memory = MemorySection::new();
        memory.memory(MemoryType {
            minimum: 1,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        let mut exports = ExportSection::new();
        exports.export("memory", ExportKind::Memory, 0);
        for (i, n) in names.iter().enumerate() {
            exports.export(n, ExportKind::Func, i as u32);
        }
        let mut data = DataSection::new();
        data.active(0, &ConstExpr::i32_const(1024), slot.iter().copied());
        let mut m = Module::new();
        m.section(&types)
            .section(&funcs)
            .section(&memory)
            .section(&exports)
            .section(&code)
            .section(&data);
        m.finish()
    }

    fn slot(id: &str) -> Vec<u8> {
        let mut s = oooi_routes::build_id::PREFIX.to_vec();
        s.extend_from_slice(id.as_bytes());
        s.resize(s.len() + oooi_routes::build_id::LEN - id.len(), 0);
        s
    }

    #[test]
    fn unused_callbacks_are_removed_and_the_rest_kept() {
        let m = filter_like(
            &["proxy_on_upstream_data", "proxy_on_log", "proxy_on_done"],
            &slot("dev"),
        );
        let f = finish(&m, &[]).unwrap();
        assert_eq!(
            f.removed,
            ["proxy_on_upstream_data", "proxy_on_log", "proxy_on_done"]
        );
        let left = exports(&f.module).unwrap();
        for name in REQUIRED_EXPORTS {
            assert!(left.iter().any(|e| e == name), "{name} kept");
        }
        assert!(!left.iter().any(|e| e == "proxy_on_upstream_data"));
        assert_eq!(f.build_id, "dev");
    }

    #[test]
    fn finishing_twice_changes_nothing() {
        let m = filter_like(&["proxy_on_upstream_data"], &slot("dev"));
        let once = finish(&m, &[]).unwrap();
        let twice = finish(&once.module, &[]).unwrap();
        assert!(twice.removed.is_empty());
        assert_eq!(once.module, twice.module);
    }

    #[test]
    fn the_build_id_slot_survives_and_can_still_be_stamped() {
        let m = filter_like(&["proxy_on_log"], &slot("dev"));
        let f = finish(&m, &[]).unwrap();
        let stamped = oooi_routes::build_id::stamp(&f.module, "v7").unwrap();
        assert_eq!(oooi_routes::build_id::read(&stamped).as_deref(), Some("v7"));
        // Stamping first and finishing after keeps the stamped id.
        let early = oooi_routes::build_id::stamp(&m, "early").unwrap();
        assert_eq!(finish(&early, &[]).unwrap().build_id, "early");
    }

    #[test]
    fn a_module_without_the_slot_or_a_required_export_is_refused() {
        let no_slot = filter_like(&[], b"no build id here");
        let e = finish(&no_slot, &[]).unwrap_err().to_string();
        assert!(e.contains("build id"), "{e}");
        let e = finish(
            &filter_like(&[], &slot("dev")),
            &["proxy_on_downstream_data"],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("proxy_on_downstream_data"), "{e}");
        assert!(finish(b"\0asm\x01\0\0\0garbage", &[]).is_err());
    }

    #[test]
    fn an_oversized_module_is_refused() {
        let big = vec![7u8; MAX_MODULE_BYTES];
        let mut s = slot("dev");
        s.extend_from_slice(&big);
        let e = finish(&filter_like(&[], &s), &[]).unwrap_err().to_string();
        assert!(e.contains("ConfigMap budget"), "{e}");
    }
}
