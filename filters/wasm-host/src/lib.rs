//! A small `wasmtime` host for proxy-wasm filter modules (ABI 0.2.1).
//!
//! It loads one module into one VM and drives it the way Envoy does: a root
//! context per plugin (`start_plugin`), then one stream context per downstream
//! connection (`new_connection`) or HTTP request (`http_request`). It serves the
//! host functions the oooi filter uses (logs, properties, headers, bodies,
//! shared data with CAS, `set_envoy_filter_state`, local responses, metrics)
//! and records what the module did, so tests and the controller's pre-rollout
//! check can run without Envoy.
//!
//! The host never panics on anything the module does: a trap, an endless loop
//! (bounded by fuel) or a bad pointer comes back as a [`HostError`] or an error
//! status to the module. After a trap the VM is marked failed, as in Envoy;
//! build a new [`FilterHost`] with the same [`SharedData`] to "reload" it.

mod abi;
pub mod check;
mod error;
pub mod foreign;
mod hostcalls;
mod shared;

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;

use wasmtime::{
    Config, Engine, ExternType, Func, Instance, Linker, Module, Store, Trap, Val, ValType,
};

pub use error::HostError;
pub use shared::{SetError, SharedData};

use hostcalls::{HostState, Stream, property_key};

/// Default fuel per callback: far more than parsing a large table needs, small
/// enough that an endless loop fails within seconds.
pub const DEFAULT_FUEL_PER_CALL: u64 = 20_000_000_000;

/// What the module answered to a stream callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Continue (0).
    Continue,
    /// Pause / stop iteration (1).
    Pause,
    /// Any other value the module returned.
    Other(u32),
}

impl From<u32> for Action {
    fn from(value: u32) -> Self {
        match value {
            0 => Action::Continue,
            1 => Action::Pause,
            other => Action::Other(other),
        }
    }
}

/// What a network filter did with one new downstream connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionOutcome {
    /// The return value of `proxy_on_new_connection`.
    pub action: Action,
    /// Whether the module called `proxy_close_stream` (the SDK's `close_downstream`).
    pub closed: bool,
    /// Paths and values set through the foreign function `set_envoy_filter_state`.
    pub filter_state: BTreeMap<String, String>,
}

/// A response the module sent with `proxy_send_local_response`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalResponse {
    /// HTTP status code.
    pub status: u32,
    /// Status code details.
    pub details: String,
    /// Response body.
    pub body: Vec<u8>,
    /// Additional response headers.
    pub headers: Vec<(String, String)>,
    /// gRPC status (-1 when none).
    pub grpc_status: i32,
}

impl LocalResponse {
    /// The body as text (lossy UTF-8).
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the module exports and imports, as checked at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbiReport {
    /// `proxy_abi_version_*` exports found.
    pub abi_versions: Vec<String>,
    /// Names of all exported functions, sorted.
    pub exports: Vec<String>,
    /// Imports as `module::name`, sorted.
    pub imports: Vec<String>,
    /// Imports this host does not implement (calls get an "unimplemented" status).
    pub stubbed_imports: Vec<String>,
}

/// One compiled module and one instance of it: one proxy-wasm VM.
pub struct FilterHost {
    store: Store<HostState>,
    instance: Instance,
    report: AbiReport,
    next_context: u32,
    roots: HashSet<u32>,
    fuel: u64,
    failed: Option<String>,
}

fn engine_error(e: wasmtime::Error) -> HostError {
    HostError::Engine(format!("{e:#}"))
}

/// Resource limits of one VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest linear memory the module may grow to, in bytes; a bigger
    /// `memory.grow` traps.
    pub max_memory_bytes: usize,
    /// Fuel per callback ([`DEFAULT_FUEL_PER_CALL`] by default).
    pub fuel_per_call: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_memory_bytes: usize::MAX,
            fuel_per_call: DEFAULT_FUEL_PER_CALL,
        }
    }
}

/// A compiled module whose exports passed the ABI check: compile once, then
/// [`FilterHost::instantiate`] as many VMs as needed.
pub struct FilterModule {
    engine: Engine,
    module: Module,
    report: AbiReport,
}

impl FilterModule {
    /// Compile `wasm` (binary, or WAT text) and check the proxy-wasm ABI
    /// 0.2.1 exports.
    pub fn compile(wasm: &[u8]) -> Result<FilterModule, HostError> {
        let mut config = Config::new();
        config.consume_fuel(true);
        let engine = Engine::new(&config).map_err(engine_error)?;
        let module =
            Module::new(&engine, wasm).map_err(|e| HostError::Compile(format!("{e:#}")))?;
        let report = check_exports(&module)?;
        Ok(FilterModule {
            engine,
            module,
            report,
        })
    }

    /// ABI version and exports (imports are filled in by instantiation).
    pub fn abi_report(&self) -> &AbiReport {
        &self.report
    }
}

impl FilterHost {
    /// Compile and instantiate `wasm` (binary, or WAT text), run its
    /// `_initialize`/`_start`, and check the proxy-wasm ABI 0.2.1 exports.
    pub fn load(wasm: &[u8], shared: SharedData) -> Result<Self, HostError> {
        FilterHost::instantiate(&FilterModule::compile(wasm)?, shared, Limits::default())
    }

    /// A new VM of a compiled module under `limits`; runs its
    /// `_initialize`/`_start`.
    pub fn instantiate(
        compiled: &FilterModule,
        shared: SharedData,
        limits: Limits,
    ) -> Result<Self, HostError> {
        let engine = &compiled.engine;
        let module = &compiled.module;
        let mut report = compiled.report.clone();
        let mut state = HostState::new(shared);
        state.limits = wasmtime::StoreLimitsBuilder::new()
            .memory_size(limits.max_memory_bytes)
            .trap_on_grow_failure(true)
            .build();
        let mut store = Store::new(engine, state);
        store.limiter(|s| &mut s.limits);
        let mut linker = Linker::new(engine);
        hostcalls::add_to_linker(&mut linker).map_err(engine_error)?;
        for import in module.imports() {
            let (module_name, name) = (import.module().to_owned(), import.name().to_owned());
            report.imports.push(format!("{module_name}::{name}"));
            let ExternType::Func(ty) = import.ty() else {
                return Err(HostError::UnsupportedImport {
                    module: module_name,
                    name,
                    kind: format!("{:?}", import.ty()),
                });
            };
            if module_name != "env" && module_name != "wasi_snapshot_preview1" {
                return Err(HostError::UnsupportedImport {
                    module: module_name,
                    name,
                    kind: "function".into(),
                });
            }
            if linker.get_by_import(&mut store, &import).is_some() {
                continue;
            }
            report
                .stubbed_imports
                .push(format!("{module_name}::{name}"));
            let results: Vec<ValType> = ty.results().collect();
            let value = hostcalls::unimplemented_status(&module_name);
            let label = format!("{module_name}::{name}");
            linker
                .func_new(
                    &module_name,
                    &name,
                    ty.clone(),
                    move |mut caller, _params, out| {
                        match (results.as_slice(), out) {
                            ([], _) => {}
                            ([ValType::I32], [slot]) => *slot = Val::I32(value),
                            _ => {
                                return Err(wasmtime::Error::msg(format!(
                                    "the host does not implement `{label}`"
                                )));
                            }
                        }
                        caller
                            .data_mut()
                            .log(3, format!("host: unimplemented import `{label}` called"));
                        Ok(())
                    },
                )
                .map_err(engine_error)?;
        }
        report.imports.sort();
        report.stubbed_imports.sort();
        store.set_fuel(limits.fuel_per_call).map_err(engine_error)?;
        let instance = linker
            .instantiate(&mut store, module)
            .map_err(|e| HostError::Instantiate(format!("{e:?}")))?;
        let mut host = FilterHost {
            store,
            instance,
            report,
            next_context: 1,
            roots: HashSet::new(),
            fuel: limits.fuel_per_call,
            failed: None,
        };
        for start in ["_initialize", "_start"] {
            if host.has_export(start) {
                host.call(start, &[])?;
                break;
            }
        }
        Ok(host)
    }

    /// ABI version and exports found at load.
    pub fn abi_report(&self) -> AbiReport {
        self.report.clone()
    }

    /// Fuel budget per callback (default [`DEFAULT_FUEL_PER_CALL`]).
    pub fn set_fuel_per_call(&mut self, fuel: u64) {
        self.fuel = fuel;
    }

    /// The lowest level the module should log (0 trace .. 5 critical); default 0.
    pub fn set_log_level(&mut self, level: u32) {
        self.store.data_mut().log_level = level;
    }

    /// Bytes served for `BufferType::VmConfiguration`; set before `start_plugin`.
    pub fn set_vm_configuration(&mut self, configuration: &[u8]) {
        self.store.data_mut().vm_configuration = configuration.to_vec();
    }

    /// A VM-wide property (e.g. `["plugin_name"]`) served to `proxy_get_property`.
    pub fn set_property(&mut self, path: &[&str], value: &[u8]) {
        self.store
            .data_mut()
            .properties
            .insert(property_key(path), value.to_vec());
    }

    /// Create a root context with `configuration` as its plugin configuration,
    /// and call `proxy_on_vm_start` and `proxy_on_configure`. Returns the root context id.
    pub fn start_plugin(&mut self, configuration: &str) -> Result<u32, HostError> {
        let id = self.new_context();
        let state = self.store.data_mut();
        state
            .plugin_configuration
            .insert(id, configuration.as_bytes().to_vec());
        state.root = id;
        state.stream = Stream::default();
        state.effective_context = id;
        let vm_size = len32(state.vm_configuration.len());
        self.call("proxy_on_context_create", &[id, 0])?;
        if self.has_export("proxy_on_vm_start")
            && self.call("proxy_on_vm_start", &[id, vm_size])? == Some(0)
        {
            return Err(HostError::VmStartRefused {
                last_log: self.last_log(),
            });
        }
        if self.call("proxy_on_configure", &[id, len32(configuration.len())])? == Some(0) {
            return Err(HostError::ConfigureRefused {
                last_log: self.last_log(),
            });
        }
        self.roots.insert(id);
        Ok(id)
    }

    /// A new downstream connection on a network-filter plugin. Serves the
    /// properties `connection.requested_server_name` (absent when `sni` is
    /// `None`), `source.address`/`source.port` and
    /// `destination.address`/`destination.port` (ports as 8-byte little-endian
    /// integers, as Envoy does), then calls `proxy_on_new_connection` and
    /// closes the context.
    pub fn new_connection(
        &mut self,
        root: u32,
        sni: Option<&str>,
        source: SocketAddr,
        local: SocketAddr,
    ) -> Result<ConnectionOutcome, HostError> {
        self.new_connection_raw(root, sni.map(str::as_bytes), source, local)
    }

    /// Like [`FilterHost::new_connection`], with the server name as the raw
    /// bytes a ClientHello may carry (Envoy hands over whatever bytes the
    /// client sent, UTF-8 or not).
    pub fn new_connection_raw(
        &mut self,
        root: u32,
        sni: Option<&[u8]>,
        source: SocketAddr,
        local: SocketAddr,
    ) -> Result<ConnectionOutcome, HostError> {
        let id = self.begin_stream(root)?;
        let props = &mut self.store.data_mut().stream.properties;
        if let Some(sni) = sni {
            props.insert(
                property_key(&["connection", "requested_server_name"]),
                sni.to_vec(),
            );
        }
        props.insert(
            property_key(&["source", "address"]),
            source.to_string().into_bytes(),
        );
        props.insert(
            property_key(&["source", "port"]),
            i64::from(source.port()).to_le_bytes().to_vec(),
        );
        props.insert(
            property_key(&["destination", "address"]),
            local.to_string().into_bytes(),
        );
        props.insert(
            property_key(&["destination", "port"]),
            i64::from(local.port()).to_le_bytes().to_vec(),
        );
        self.call("proxy_on_context_create", &[id, root])?;
        let action = Action::from(self.call("proxy_on_new_connection", &[id])?.unwrap_or(0));
        let stream = &mut self.store.data_mut().stream;
        let outcome = ConnectionOutcome {
            action,
            closed: stream.closed,
            filter_state: std::mem::take(&mut stream.filter_state),
        };
        // PeerType: 1 local (we closed), 2 remote.
        let peer = if outcome.closed { 1 } else { 2 };
        self.call_optional("proxy_on_downstream_connection_close", &[id, peer])?;
        self.end_stream(id)?;
        Ok(outcome)
    }

    /// An HTTP request on an HTTP-filter plugin. Headers are `:method`,
    /// `:path`, `:scheme`, `:authority` (`localhost` unless given) and
    /// `headers` (names lowercased). As in Envoy, a non-empty body is
    /// delivered in one `proxy_on_request_body` call with `end_of_stream`, and
    /// only when the headers callback returned Continue; an empty body means
    /// the headers callback sees `end_of_stream`. Returns the module's local
    /// response, or `None` if it let the request through.
    pub fn http_request(
        &mut self,
        root: u32,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Option<LocalResponse>, HostError> {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 40000));
        self.http_request_from(root, loopback, method, path, headers, body)
    }

    /// Like [`FilterHost::http_request`], from the client address `source`
    /// (served as `source.address` and `source.port`).
    pub fn http_request_from(
        &mut self,
        root: u32,
        source: SocketAddr,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Option<LocalResponse>, HostError> {
        self.http_exchange(root, source, method, path, headers, body, true)
    }

    /// The headers of a request whose body (`content-length` bytes, more
    /// than zero) has not arrived yet: only `proxy_on_request_headers` runs,
    /// without `end_of_stream`. Returns the module's local response if it
    /// answered from the headers alone, as Envoy would send it before
    /// reading any body byte.
    pub fn http_request_headers(
        &mut self,
        root: u32,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        content_length: usize,
    ) -> Result<Option<LocalResponse>, HostError> {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 40000));
        let length = content_length.max(1).to_string();
        let mut all = headers.to_vec();
        all.push(("content-length", length.as_str()));
        // The body bytes only give `end_of_stream` its value; none is delivered.
        let pending = [0u8];
        self.http_exchange(root, loopback, method, path, &all, &pending, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn http_exchange(
        &mut self,
        root: u32,
        source: SocketAddr,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        deliver_body: bool,
    ) -> Result<Option<LocalResponse>, HostError> {
        let id = self.begin_stream(root)?;
        let mut map = vec![
            (":method".to_owned(), method.to_owned()),
            (":path".to_owned(), path.to_owned()),
            (":scheme".to_owned(), "http".to_owned()),
        ];
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case(":authority"))
        {
            map.push((":authority".to_owned(), "localhost".to_owned()));
        }
        map.extend(
            headers
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), (*v).to_owned())),
        );
        if !body.is_empty() && !map.iter().any(|(k, _)| k == "content-length") {
            map.push(("content-length".to_owned(), body.len().to_string()));
        }
        let count = len32(map.len());
        let stream = &mut self.store.data_mut().stream;
        stream.headers.insert(abi::map::HTTP_REQUEST_HEADERS, map);
        stream.request_body = body.to_vec();
        stream
            .properties
            .insert(property_key(&["request", "path"]), path.as_bytes().to_vec());
        stream.properties.insert(
            property_key(&["request", "method"]),
            method.as_bytes().to_vec(),
        );
        stream.properties.insert(
            property_key(&["source", "address"]),
            source.to_string().into_bytes(),
        );
        stream.properties.insert(
            property_key(&["source", "port"]),
            i64::from(source.port()).to_le_bytes().to_vec(),
        );
        self.call("proxy_on_context_create", &[id, root])?;
        let eos = u32::from(body.is_empty());
        let action = self.call("proxy_on_request_headers", &[id, count, eos, 0])?;
        let answered = self.store.data().stream.local_response.is_some();
        if deliver_body
            && !answered
            && !body.is_empty()
            && Action::from(action.unwrap_or(0)) == Action::Continue
        {
            self.call("proxy_on_request_body", &[id, len32(body.len()), 1])?;
        }
        let response = self.store.data_mut().stream.local_response.take();
        self.end_stream(id)?;
        Ok(response)
    }

    /// Call `proxy_on_tick` on a root context.
    pub fn tick(&mut self, root: u32) -> Result<(), HostError> {
        self.check_root(root)?;
        let state = self.store.data_mut();
        state.root = root;
        state.effective_context = root;
        state.stream = Stream::default();
        self.call("proxy_on_tick", &[root])?;
        Ok(())
    }

    /// The tick period a root context asked for, in milliseconds.
    pub fn tick_period_ms(&self, root: u32) -> Option<u32> {
        self.store
            .data()
            .tick_periods
            .get(&root)
            .copied()
            .filter(|p| *p > 0)
    }

    /// Everything the module logged, as (level, message).
    pub fn logs(&self) -> &[(u32, String)] {
        &self.store.data().logs
    }

    /// What the module wrote to stdout and stderr.
    pub fn stdio(&self) -> String {
        String::from_utf8_lossy(&self.store.data().stdio).into_owned()
    }

    /// Current value of every metric the module defined, by name.
    pub fn metrics(&self) -> BTreeMap<String, i64> {
        self.store
            .data()
            .metrics
            .iter()
            .map(|m| (m.name.clone(), m.value))
            .collect()
    }

    /// The shared data this VM uses.
    pub fn shared_data(&self) -> &SharedData {
        &self.store.data().shared
    }

    fn last_log(&self) -> Option<String> {
        self.logs().last().map(|(_, m)| m.clone())
    }

    fn new_context(&mut self) -> u32 {
        let id = self.next_context;
        self.next_context = self.next_context.wrapping_add(1).max(1);
        self.store.data_mut().contexts.insert(id);
        id
    }

    fn check_root(&self, root: u32) -> Result<(), HostError> {
        if self.roots.contains(&root) {
            Ok(())
        } else {
            Err(HostError::UnknownRootContext(root))
        }
    }

    fn begin_stream(&mut self, root: u32) -> Result<u32, HostError> {
        self.check_root(root)?;
        let id = self.new_context();
        let state = self.store.data_mut();
        state.root = root;
        state.effective_context = id;
        state.stream = Stream::default();
        Ok(id)
    }

    fn end_stream(&mut self, id: u32) -> Result<(), HostError> {
        self.call_optional("proxy_on_log", &[id])?;
        self.call_optional("proxy_on_done", &[id])?;
        self.call_optional("proxy_on_delete", &[id])?;
        let state = self.store.data_mut();
        state.contexts.remove(&id);
        state.stream = Stream::default();
        Ok(())
    }

    fn has_export(&mut self, name: &str) -> bool {
        self.instance.get_func(&mut self.store, name).is_some()
    }

    fn call_optional(&mut self, name: &str, args: &[u32]) -> Result<Option<u32>, HostError> {
        if self.has_export(name) {
            self.call(name, args)
        } else {
            Ok(None)
        }
    }

    /// Call an exported function with i32 (or i64) arguments; extra trailing
    /// arguments are dropped so that older signatures still work.
    fn call(&mut self, name: &str, args: &[u32]) -> Result<Option<u32>, HostError> {
        if let Some(reason) = &self.failed {
            return Err(HostError::VmFailed(reason.clone()));
        }
        let func: Func = self
            .instance
            .get_func(&mut self.store, name)
            .ok_or_else(|| HostError::MissingExports(vec![name.to_owned()]))?;
        let ty = func.ty(&self.store);
        let mut params = Vec::new();
        for (i, param) in ty.params().enumerate() {
            let arg = args.get(i).copied().unwrap_or(0);
            params.push(match param {
                ValType::I64 => Val::I64(i64::from(arg)),
                _ => Val::I32(arg as i32),
            });
        }
        let mut results: Vec<Val> = ty.results().map(|_| Val::I32(0)).collect();
        self.store.set_fuel(self.fuel).map_err(engine_error)?;
        match func.call(&mut self.store, &params, &mut results) {
            Ok(()) => Ok(results.first().and_then(|v| match v {
                Val::I32(x) => Some(*x as u32),
                Val::I64(x) => Some(*x as u32),
                _ => None,
            })),
            Err(e) => {
                let error = if e.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) {
                    HostError::OutOfFuel {
                        call: name.to_owned(),
                        fuel: self.fuel,
                    }
                } else {
                    HostError::Trap {
                        call: name.to_owned(),
                        message: format!("{e:?}"),
                    }
                };
                self.failed = Some(error.to_string());
                Err(error)
            }
        }
    }
}

fn len32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn check_exports(module: &Module) -> Result<AbiReport, HostError> {
    let exports: Vec<(String, ExternType)> = module
        .exports()
        .map(|e| (e.name().to_owned(), e.ty()))
        .collect();
    let find = |name: &str| exports.iter().find(|(n, _)| n == name).map(|(_, t)| t);
    let abi_versions: Vec<String> = abi::ABI_VERSIONS
        .iter()
        .filter(|v| find(v).is_some())
        .map(|v| (*v).to_owned())
        .collect();
    if !abi_versions.iter().any(|v| v == abi::ABI_0_2_1) {
        return Err(HostError::AbiVersion {
            found: abi_versions,
        });
    }
    let mut missing = Vec::new();
    for (name, params, results) in abi::REQUIRED_FUNCTIONS {
        match find(name) {
            Some(ExternType::Func(ty)) => {
                let ok = ty.params().len() == params
                    && ty.results().len() == results
                    && ty
                        .params()
                        .chain(ty.results())
                        .all(|t| matches!(t, ValType::I32));
                if !ok {
                    return Err(HostError::ExportSignature {
                        name: name.to_owned(),
                        found: format!("{ty}"),
                        expected: format!("{params} i32 params, {results} i32 results"),
                    });
                }
            }
            Some(_) => missing.push(format!("{name} (not a function)")),
            None => missing.push(name.to_owned()),
        }
    }
    let has_allocator = abi::ALLOCATORS.iter().any(|name| {
        matches!(find(name), Some(ExternType::Func(ty))
            if ty.params().len() == 1 && ty.results().len() == 1)
    });
    if !has_allocator {
        missing.push("proxy_on_memory_allocate (or malloc)".to_owned());
    }
    if !matches!(find("memory"), Some(ExternType::Memory(_))) {
        missing.push("memory".to_owned());
    }
    if !missing.is_empty() {
        return Err(HostError::MissingExports(missing));
    }
    let mut names: Vec<String> = exports
        .iter()
        .filter(|(_, t)| matches!(t, ExternType::Func(_)))
        .map(|(n, _)| n.clone())
        .collect();
    names.sort();
    Ok(AbiReport {
        abi_versions,
        exports: names,
        imports: Vec::new(),
        stubbed_imports: Vec::new(),
    })
}
