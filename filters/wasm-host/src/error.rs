//! The one error type of the host.

/// Why loading or driving a filter module failed.
///
/// A trap, an endless loop or a broken ABI contract in the module is an error
/// here; the host itself never panics on anything the module does.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The bytes are not a valid wasm module (or WAT text).
    #[error("the module does not compile: {0}")]
    Compile(String),
    /// The module does not export the proxy-wasm ABI version this host speaks.
    #[error("the module does not export `proxy_abi_version_0_2_1` (ABI versions found: {found:?})")]
    AbiVersion {
        /// The `proxy_abi_version_*` exports that were found.
        found: Vec<String>,
    },
    /// Required exports are missing or are not functions.
    #[error("the module lacks required exports: {0:?}")]
    MissingExports(Vec<String>),
    /// An export has a signature the ABI does not allow.
    #[error("export `{name}` has signature {found}, expected {expected}")]
    ExportSignature {
        /// Export name.
        name: String,
        /// What the module declares.
        found: String,
        /// What the ABI requires.
        expected: String,
    },
    /// The module imports something this host cannot provide.
    #[error("the module imports `{module}::{name}` ({kind}), which this host cannot provide")]
    UnsupportedImport {
        /// Import module.
        module: String,
        /// Import name.
        name: String,
        /// What kind of item it is.
        kind: String,
    },
    /// Instantiation or the module's start function (`_initialize`/`_start`) failed.
    #[error("instantiating the module failed: {0}")]
    Instantiate(String),
    /// The module trapped (panic, unreachable, bad memory access, `proc_exit`) in a callback.
    #[error("the module trapped in `{call}`: {message}")]
    Trap {
        /// The export the host was calling.
        call: String,
        /// The trap message, with the wasm backtrace when available.
        message: String,
    },
    /// The module used up its fuel in one callback, most likely an endless loop.
    #[error("the module ran out of fuel in `{call}` (budget {fuel} per callback): endless loop?")]
    OutOfFuel {
        /// The export the host was calling.
        call: String,
        /// The fuel budget per callback.
        fuel: u64,
    },
    /// The VM trapped earlier; like Envoy, the host does not call into a failed VM again.
    #[error("the VM failed earlier and must be reloaded: {0}")]
    VmFailed(String),
    /// `proxy_on_vm_start` returned false.
    #[error("proxy_on_vm_start refused to start (last log: {last_log:?})")]
    VmStartRefused {
        /// The last line the module logged, if any.
        last_log: Option<String>,
    },
    /// `proxy_on_configure` returned false.
    #[error("proxy_on_configure rejected the plugin configuration (last log: {last_log:?})")]
    ConfigureRefused {
        /// The last line the module logged, if any.
        last_log: Option<String>,
    },
    /// The caller named a root context that `start_plugin` did not return.
    #[error("unknown root context {0}")]
    UnknownRootContext(u32),
    /// A wasmtime engine or store operation failed.
    #[error("wasmtime: {0}")]
    Engine(String),
}
