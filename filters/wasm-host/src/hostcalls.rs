//! The host functions a proxy-wasm module imports: module `env` (proxy-wasm
//! ABI 0.2.1) and the few `wasi_snapshot_preview1` calls a Rust module makes.
//!
//! Every function checks its pointers: a bad pointer from the module yields an
//! error status, never a host panic. Only `proc_exit` (and a trap inside the
//! module's allocator) unwinds the call as a trap.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{SystemTime, UNIX_EPOCH};

use wasmtime::{Caller, Extern, Linker, Memory, TypedFunc};

use crate::LocalResponse;
use crate::abi::{self, buffer, errno, metric, status};
use crate::foreign::decode_filter_state_arguments;
use crate::shared::{SetError, SharedData};

/// Most log lines and stdio bytes kept, so that a chatty module cannot exhaust host memory.
const MAX_LOG_LINES: usize = 100_000;
const MAX_STDIO_BYTES: usize = 1 << 20;

/// Per-stream state: one connection, one HTTP request, or one root callback.
#[derive(Debug, Default)]
pub(crate) struct Stream {
    pub headers: HashMap<u32, Vec<(String, String)>>,
    pub request_body: Vec<u8>,
    pub properties: HashMap<String, Vec<u8>>,
    pub local_response: Option<LocalResponse>,
    pub closed: bool,
    pub continued: bool,
    pub filter_state: BTreeMap<String, String>,
}

#[derive(Debug)]
pub(crate) struct Metric {
    pub name: String,
    pub kind: u32,
    pub value: i64,
}

/// Everything the host functions can see, kept in the wasmtime `Store`.
pub(crate) struct HostState {
    pub shared: SharedData,
    pub logs: Vec<(u32, String)>,
    pub stdio: Vec<u8>,
    pub log_level: u32,
    pub vm_configuration: Vec<u8>,
    pub plugin_configuration: HashMap<u32, Vec<u8>>,
    pub root: u32,
    pub contexts: HashSet<u32>,
    pub effective_context: u32,
    pub tick_periods: HashMap<u32, u32>,
    pub stream: Stream,
    pub metrics: Vec<Metric>,
    pub properties: HashMap<String, Vec<u8>>,
    /// Memory and instance limits of the store ([`crate::Limits`]).
    pub limits: wasmtime::StoreLimits,
    rng: u64,
}

impl HostState {
    pub(crate) fn new(shared: SharedData) -> Self {
        let seed = {
            use std::hash::{BuildHasher, Hasher};
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u128(now_nanos().into());
            hasher.finish()
        };
        HostState {
            shared,
            logs: Vec::new(),
            stdio: Vec::new(),
            log_level: 0,
            vm_configuration: Vec::new(),
            plugin_configuration: HashMap::new(),
            root: 0,
            contexts: HashSet::new(),
            effective_context: 0,
            tick_periods: HashMap::new(),
            stream: Stream::default(),
            metrics: Vec::new(),
            properties: HashMap::new(),
            limits: wasmtime::StoreLimits::default(),
            rng: seed | 1,
        }
    }

    pub(crate) fn log(&mut self, level: u32, message: String) {
        if self.logs.len() < MAX_LOG_LINES {
            self.logs.push((level, message));
        }
    }

    fn next_random(&mut self) -> u64 {
        // splitmix64: good enough for a test host, no extra dependency.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The key of a property path: segments joined by NUL, without a trailing NUL.
pub(crate) fn property_key<S: AsRef<str>>(segments: &[S]) -> String {
    segments
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join("\0")
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

type C<'a> = Caller<'a, HostState>;
type R = wasmtime::Result<i32>;

fn memory(caller: &mut C<'_>) -> Option<Memory> {
    caller.get_export("memory").and_then(Extern::into_memory)
}

fn read(caller: &mut C<'_>, ptr: u32, len: u32) -> Option<Vec<u8>> {
    let mem = memory(caller)?;
    let start = ptr as usize;
    let end = start.checked_add(len as usize)?;
    mem.data(&*caller).get(start..end).map(<[u8]>::to_vec)
}

fn read_str(caller: &mut C<'_>, ptr: u32, len: u32) -> Option<String> {
    String::from_utf8(read(caller, ptr, len)?).ok()
}

fn write(caller: &mut C<'_>, ptr: u32, bytes: &[u8]) -> bool {
    let Some(mem) = memory(caller) else {
        return false;
    };
    let start = ptr as usize;
    let Some(end) = start.checked_add(bytes.len()) else {
        return false;
    };
    match mem.data_mut(&mut *caller).get_mut(start..end) {
        Some(slot) => {
            slot.copy_from_slice(bytes);
            true
        }
        None => false,
    }
}

fn write_u32(caller: &mut C<'_>, ptr: u32, value: u32) -> bool {
    write(caller, ptr, &value.to_le_bytes())
}

fn allocator(caller: &mut C<'_>) -> Option<TypedFunc<u32, u32>> {
    abi::ALLOCATORS.iter().find_map(|name| {
        let func = caller.get_export(name)?.into_func()?;
        func.typed::<u32, u32>(&*caller).ok()
    })
}

/// Copy `data` into memory the module allocates, and store its address and
/// size at `ptr_out`/`size_out`, as Envoy does (empty data: null pointer, size 0).
fn copy_out(caller: &mut C<'_>, data: &[u8], ptr_out: u32, size_out: u32) -> R {
    let Ok(size) = u32::try_from(data.len()) else {
        return Ok(status::INTERNAL_FAILURE);
    };
    let mut pointer = 0;
    if size > 0 {
        let Some(alloc) = allocator(caller) else {
            return Ok(status::INTERNAL_FAILURE);
        };
        pointer = alloc.call(&mut *caller, size)?;
        if pointer == 0 || !write(caller, pointer, data) {
            return Ok(status::INVALID_MEMORY_ACCESS);
        }
    }
    if !write_u32(caller, ptr_out, pointer) || !write_u32(caller, size_out, size) {
        return Ok(status::INVALID_MEMORY_ACCESS);
    }
    Ok(status::OK)
}

macro_rules! or_status {
    ($value:expr, $status:expr) => {
        match $value {
            Some(v) => v,
            None => return Ok($status),
        }
    };
}

fn header_map<'a>(caller: &'a mut C<'_>, map_type: u32) -> &'a mut Vec<(String, String)> {
    caller
        .data_mut()
        .stream
        .headers
        .entry(map_type)
        .or_default()
}

/// Register every host function this crate implements.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    add_env(linker)?;
    add_wasi(linker)?;
    Ok(())
}

fn add_env(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_log",
        |mut c: C<'_>, level: u32, ptr: u32, len: u32| -> R {
            let bytes = or_status!(read(&mut c, ptr, len), status::INVALID_MEMORY_ACCESS);
            if level >= c.data().log_level {
                c.data_mut()
                    .log(level, String::from_utf8_lossy(&bytes).into_owned());
            }
            Ok(status::OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_log_level",
        |mut c: C<'_>, ret: u32| -> R {
            let level = c.data().log_level;
            Ok(if write_u32(&mut c, ret, level) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_current_time_nanoseconds",
        |mut c: C<'_>, ret: u32| -> R {
            Ok(if write(&mut c, ret, &now_nanos().to_le_bytes()) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_tick_period_milliseconds",
        |mut c: C<'_>, period: u32| -> R {
            let state = c.data_mut();
            let context = state.effective_context;
            state.tick_periods.insert(context, period);
            Ok(status::OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_buffer_bytes",
        |mut c: C<'_>, kind: u32, start: u32, max: u32, ret_ptr: u32, ret_size: u32| -> R {
            let state = c.data();
            let data = match kind {
                buffer::HTTP_REQUEST_BODY => state.stream.request_body.clone(),
                buffer::VM_CONFIGURATION => state.vm_configuration.clone(),
                buffer::PLUGIN_CONFIGURATION => {
                    or_status!(
                        state.plugin_configuration.get(&state.root).cloned(),
                        status::NOT_FOUND
                    )
                }
                _ => return Ok(status::NOT_FOUND),
            };
            let start = start as usize;
            if start > data.len() {
                return Ok(status::BAD_ARGUMENT);
            }
            let end = start.saturating_add(max as usize).min(data.len());
            copy_out(&mut c, &data[start..end], ret_ptr, ret_size)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_header_map_pairs",
        |mut c: C<'_>, map_type: u32, ret_ptr: u32, ret_size: u32| -> R {
            let encoded = abi::encode_pairs(header_map(&mut c, map_type));
            copy_out(&mut c, &encoded, ret_ptr, ret_size)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_header_map_pairs",
        |mut c: C<'_>, map_type: u32, ptr: u32, len: u32| -> R {
            let bytes = or_status!(read(&mut c, ptr, len), status::INVALID_MEMORY_ACCESS);
            let pairs = or_status!(abi::decode_pairs(&bytes), status::BAD_ARGUMENT);
            *header_map(&mut c, map_type) = pairs
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect();
            Ok(status::OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_header_map_value",
        |mut c: C<'_>, map_type: u32, kptr: u32, klen: u32, ret_ptr: u32, ret_size: u32| -> R {
            let key = or_status!(read_str(&mut c, kptr, klen), status::BAD_ARGUMENT);
            let value = header_map(&mut c, map_type)
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(&key))
                .map(|(_, v)| v.clone());
            let value = or_status!(value, status::NOT_FOUND);
            copy_out(&mut c, value.as_bytes(), ret_ptr, ret_size)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_add_header_map_value",
        |mut c: C<'_>, map_type: u32, kptr: u32, klen: u32, vptr: u32, vlen: u32| -> R {
            let key = or_status!(read_str(&mut c, kptr, klen), status::BAD_ARGUMENT);
            let value = or_status!(read_str(&mut c, vptr, vlen), status::BAD_ARGUMENT);
            header_map(&mut c, map_type).push((key.to_ascii_lowercase(), value));
            Ok(status::OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_replace_header_map_value",
        |mut c: C<'_>, map_type: u32, kptr: u32, klen: u32, vptr: u32, vlen: u32| -> R {
            let key = or_status!(read_str(&mut c, kptr, klen), status::BAD_ARGUMENT);
            let value = or_status!(read_str(&mut c, vptr, vlen), status::BAD_ARGUMENT);
            let map = header_map(&mut c, map_type);
            map.retain(|(k, _)| !k.eq_ignore_ascii_case(&key));
            map.push((key.to_ascii_lowercase(), value));
            Ok(status::OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_remove_header_map_value",
        |mut c: C<'_>, map_type: u32, kptr: u32, klen: u32| -> R {
            let key = or_status!(read_str(&mut c, kptr, klen), status::BAD_ARGUMENT);
            header_map(&mut c, map_type).retain(|(k, _)| !k.eq_ignore_ascii_case(&key));
            Ok(status::OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_property",
        |mut c: C<'_>, pptr: u32, plen: u32, ret_ptr: u32, ret_size: u32| -> R {
            let path = or_status!(read(&mut c, pptr, plen), status::INVALID_MEMORY_ACCESS);
            let key = normalize_path(&path);
            let state = c.data();
            let value = state
                .stream
                .properties
                .get(&key)
                .or_else(|| state.properties.get(&key))
                .cloned();
            let value = or_status!(value, status::NOT_FOUND);
            copy_out(&mut c, &value, ret_ptr, ret_size)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_property",
        |mut c: C<'_>, pptr: u32, plen: u32, vptr: u32, vlen: u32| -> R {
            let path = or_status!(read(&mut c, pptr, plen), status::INVALID_MEMORY_ACCESS);
            let value = or_status!(read(&mut c, vptr, vlen), status::INVALID_MEMORY_ACCESS);
            let key = normalize_path(&path);
            c.data_mut().stream.properties.insert(key, value);
            Ok(status::OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_shared_data",
        |mut c: C<'_>, kptr: u32, klen: u32, ret_ptr: u32, ret_size: u32, ret_cas: u32| -> R {
            let key = or_status!(read_str(&mut c, kptr, klen), status::BAD_ARGUMENT);
            let (value, cas) = or_status!(c.data().shared.get(&key), status::NOT_FOUND);
            let copied = copy_out(&mut c, &value, ret_ptr, ret_size)?;
            if copied != status::OK {
                return Ok(copied);
            }
            Ok(if write_u32(&mut c, ret_cas, cas) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_shared_data",
        |mut c: C<'_>, kptr: u32, klen: u32, vptr: u32, vlen: u32, cas: u32| -> R {
            let key = or_status!(read_str(&mut c, kptr, klen), status::BAD_ARGUMENT);
            let value = or_status!(read(&mut c, vptr, vlen), status::INVALID_MEMORY_ACCESS);
            Ok(match c.data().shared.set(&key, &value, cas) {
                Ok(_) => status::OK,
                Err(SetError::CasMismatch) => status::CAS_MISMATCH,
            })
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_send_local_response",
        |mut c: C<'_>,
         code: u32,
         dptr: u32,
         dlen: u32,
         bptr: u32,
         blen: u32,
         hptr: u32,
         hlen: u32,
         grpc_status: i32|
         -> R {
            let details = or_status!(read(&mut c, dptr, dlen), status::INVALID_MEMORY_ACCESS);
            let body = or_status!(read(&mut c, bptr, blen), status::INVALID_MEMORY_ACCESS);
            let headers = or_status!(read(&mut c, hptr, hlen), status::INVALID_MEMORY_ACCESS);
            let headers = or_status!(abi::decode_pairs(&headers), status::BAD_ARGUMENT);
            c.data_mut().stream.local_response = Some(LocalResponse {
                status: code,
                details: String::from_utf8_lossy(&details).into_owned(),
                body,
                headers,
                grpc_status,
            });
            Ok(status::OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_continue_stream",
        |mut c: C<'_>, _stream: u32| -> R {
            c.data_mut().stream.continued = true;
            Ok(status::OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_close_stream",
        |mut c: C<'_>, _stream: u32| -> R {
            c.data_mut().stream.closed = true;
            Ok(status::OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_call_foreign_function",
        |mut c: C<'_>,
         nptr: u32,
         nlen: u32,
         aptr: u32,
         alen: u32,
         ret_ptr: u32,
         ret_size: u32|
         -> R {
            let name = or_status!(read_str(&mut c, nptr, nlen), status::BAD_ARGUMENT);
            let args = or_status!(read(&mut c, aptr, alen), status::INVALID_MEMORY_ACCESS);
            if name != "set_envoy_filter_state" {
                return Ok(status::NOT_FOUND);
            }
            let parsed = or_status!(
                decode_filter_state_arguments(&args),
                status::SERIALIZATION_FAILURE
            );
            if parsed.path.is_empty() {
                return Ok(status::BAD_ARGUMENT);
            }
            c.data_mut()
                .stream
                .filter_state
                .insert(parsed.path, parsed.value);
            copy_out(&mut c, &[], ret_ptr, ret_size)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_define_metric",
        |mut c: C<'_>, kind: u32, nptr: u32, nlen: u32, ret_id: u32| -> R {
            if kind > metric::HISTOGRAM {
                return Ok(status::BAD_ARGUMENT);
            }
            let name = or_status!(read_str(&mut c, nptr, nlen), status::BAD_ARGUMENT);
            let metrics = &mut c.data_mut().metrics;
            let index = match metrics
                .iter()
                .position(|m| m.name == name && m.kind == kind)
            {
                Some(index) => index,
                None => {
                    metrics.push(Metric {
                        name,
                        kind,
                        value: 0,
                    });
                    metrics.len() - 1
                }
            };
            // Ids start at 1 so that 0 never names a metric.
            let id = u32::try_from(index + 1).unwrap_or(u32::MAX);
            Ok(if write_u32(&mut c, ret_id, id) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_increment_metric",
        |mut c: C<'_>, id: u32, offset: i64| -> R {
            let metric = or_status!(metric_mut(&mut c, id), status::NOT_FOUND);
            if metric.kind == metric::COUNTER && offset < 0 {
                return Ok(status::BAD_ARGUMENT);
            }
            if metric.kind == metric::HISTOGRAM {
                return Ok(status::BAD_ARGUMENT);
            }
            metric.value = metric.value.saturating_add(offset);
            Ok(status::OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_record_metric",
        |mut c: C<'_>, id: u32, value: u64| -> R {
            let metric = or_status!(metric_mut(&mut c, id), status::NOT_FOUND);
            let value = i64::try_from(value).unwrap_or(i64::MAX);
            match metric.kind {
                metric::COUNTER => metric.value = metric.value.saturating_add(value),
                // A gauge is set; a histogram keeps its last sample.
                metric::GAUGE | metric::HISTOGRAM => metric.value = value,
                _ => return Ok(status::BAD_ARGUMENT),
            }
            Ok(status::OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_metric",
        |mut c: C<'_>, id: u32, ret: u32| -> R {
            let metric = or_status!(metric_mut(&mut c, id), status::NOT_FOUND);
            if metric.kind == metric::HISTOGRAM {
                return Ok(status::BAD_ARGUMENT);
            }
            let value = metric.value as u64;
            Ok(if write(&mut c, ret, &value.to_le_bytes()) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        },
    )?;
    linker.func_wrap("env", "proxy_done", |_c: C<'_>| -> R { Ok(status::OK) })?;
    linker.func_wrap(
        "env",
        "proxy_set_effective_context",
        |mut c: C<'_>, context: u32| -> R {
            let state = c.data_mut();
            if !state.contexts.contains(&context) {
                return Ok(status::BAD_ARGUMENT);
            }
            state.effective_context = context;
            Ok(status::OK)
        },
    )?;
    Ok(())
}

fn metric_mut<'a>(c: &'a mut C<'_>, id: u32) -> Option<&'a mut Metric> {
    let index = usize::try_from(id).ok()?.checked_sub(1)?;
    c.data_mut().metrics.get_mut(index)
}

fn normalize_path(path: &[u8]) -> String {
    let text = String::from_utf8_lossy(path);
    let segments: Vec<&str> = text.trim_end_matches('\0').split('\0').collect();
    property_key(&segments)
}

fn add_wasi(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    const W: &str = "wasi_snapshot_preview1";
    linker.func_wrap(
        W,
        "fd_write",
        |mut c: C<'_>, fd: u32, iovs: u32, iovs_len: u32, nwritten: u32| -> R {
            if fd != 1 && fd != 2 {
                return Ok(errno::BADF);
            }
            let mut total: u32 = 0;
            for i in 0..iovs_len {
                let Some(at) = i.checked_mul(8).and_then(|o| iovs.checked_add(o)) else {
                    return Ok(errno::FAULT);
                };
                let iov = or_status!(read(&mut c, at, 8), errno::FAULT);
                let ptr = u32::from_le_bytes([iov[0], iov[1], iov[2], iov[3]]);
                let len = u32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]);
                let bytes = or_status!(read(&mut c, ptr, len), errno::FAULT);
                let stdio = &mut c.data_mut().stdio;
                let room = MAX_STDIO_BYTES.saturating_sub(stdio.len());
                stdio.extend_from_slice(&bytes[..bytes.len().min(room)]);
                total = total.saturating_add(len);
            }
            Ok(if write_u32(&mut c, nwritten, total) {
                errno::SUCCESS
            } else {
                errno::FAULT
            })
        },
    )?;
    linker.func_wrap(W, "random_get", |mut c: C<'_>, buf: u32, len: u32| -> R {
        let mut bytes = Vec::with_capacity(len as usize);
        while bytes.len() < len as usize {
            bytes.extend_from_slice(&c.data_mut().next_random().to_le_bytes());
        }
        bytes.truncate(len as usize);
        Ok(if write(&mut c, buf, &bytes) {
            errno::SUCCESS
        } else {
            errno::FAULT
        })
    })?;
    linker.func_wrap(
        W,
        "clock_time_get",
        |mut c: C<'_>, id: u32, _precision: u64, ret: u32| -> R {
            if id > 3 {
                return Ok(errno::INVAL);
            }
            Ok(if write(&mut c, ret, &now_nanos().to_le_bytes()) {
                errno::SUCCESS
            } else {
                errno::FAULT
            })
        },
    )?;
    linker.func_wrap(
        W,
        "clock_res_get",
        |mut c: C<'_>, _id: u32, ret: u32| -> R {
            Ok(if write(&mut c, ret, &1u64.to_le_bytes()) {
                errno::SUCCESS
            } else {
                errno::FAULT
            })
        },
    )?;
    for name in ["environ_sizes_get", "args_sizes_get"] {
        linker.func_wrap(W, name, |mut c: C<'_>, count: u32, size: u32| -> R {
            Ok(
                if write_u32(&mut c, count, 0) && write_u32(&mut c, size, 0) {
                    errno::SUCCESS
                } else {
                    errno::FAULT
                },
            )
        })?;
    }
    for name in ["environ_get", "args_get"] {
        linker.func_wrap(W, name, |_c: C<'_>, _a: u32, _b: u32| -> R {
            Ok(errno::SUCCESS)
        })?;
    }
    linker.func_wrap(W, "sched_yield", |_c: C<'_>| -> R { Ok(errno::SUCCESS) })?;
    linker.func_wrap(
        W,
        "proc_exit",
        |_c: C<'_>, code: u32| -> wasmtime::Result<()> {
            Err(wasmtime::Error::msg(format!(
                "the module called proc_exit({code})"
            )))
        },
    )?;
    Ok(())
}

/// The status an import this host does not implement returns, by import module.
pub(crate) fn unimplemented_status(module: &str) -> i32 {
    if module == "env" {
        status::UNIMPLEMENTED
    } else {
        errno::NOSYS
    }
}
