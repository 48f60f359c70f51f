//! Strategy plugins: native libraries speaking the C ABI of
//! `plugins/abi/include/compactd_plugin.h`, loaded once at start-up.
//!
//! - **Trust.** A plugin runs inside the process with its privileges, so
//!   only a library whose SHA-256 matches the configuration is loaded, from
//!   a directory no one may write to (and that is not writable itself).
//! - **Handshake.** Another ABI major, or a table smaller than ABI 1.0's,
//!   refuses start-up with a message naming the plugin.
//! - **Faults.** Calls run on a thread of their own with a timeout. A plugin
//!   that panics, times out, fails, or returns bytes that do not decode or
//!   proposals that break an invariant is poisoned: taken out of rotation
//!   with an event, while the service keeps serving. Libraries are never
//!   unloaded (a timed-out call may still be running inside one).
//!
//! The pipeline side is `reducer::PluginReducer`, built by [`insert_plugins`].

pub mod reducer;

use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use compactd_plugin_sdk::abi;
use serde::{Deserialize, Serialize};

pub use reducer::insert_plugins;

/// The plugin messages (`compactd.plugin.v1`), whose threads and summaries
/// are the API's own types.
#[allow(missing_docs, clippy::all)]
pub mod wire {
    include!(concat!(env!("OUT_DIR"), "/compactd.plugin.v1.rs"));
}

/// One configured plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSettings {
    /// The name the plugin declares (checked at load).
    pub name: String,
    /// The library, inside `plugins.dir`.
    pub path: PathBuf,
    /// SHA-256 (hex) of the library file.
    pub sha256: String,
    /// The reducer it runs after: `start`, `retention`, `compress`,
    /// `clear`, `externalize` or `summarize`.
    #[serde(default = "default_after")]
    pub after: String,
    /// 0 (only what is certainly safe) to 100; passed to the plugin.
    #[serde(default = "default_aggressiveness")]
    pub aggressiveness: u32,
    /// The plugin's own configuration, handed over as JSON text.
    #[serde(default = "empty_object")]
    pub config: serde_json::Value,
    /// Deadline of one call, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Compactions fail (FAILED_PRECONDITION, `STRATEGY_UNAVAILABLE`)
    /// while the plugin is out of rotation, instead of going on without
    /// it: for strategies whose absence would make plans wrong, not just
    /// larger.
    #[serde(default)]
    pub required: bool,
}

fn default_after() -> String {
    "compress".into()
}
fn default_aggressiveness() -> u32 {
    50
}
fn empty_object() -> serde_json::Value {
    serde_json::json!({})
}
fn default_timeout_ms() -> u64 {
    250
}

/// The `plugins` section.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginsSettings {
    /// The directory plugins are loaded from; required when any is listed.
    pub dir: Option<PathBuf>,
    /// The plugins, in pipeline order among those at the same position.
    pub load: Vec<PluginSettings>,
}

/// Reducer positions a plugin may follow, in pipeline order.
pub const POSITIONS: [&str; 7] = [
    "start",
    "retention",
    "compress",
    "clear",
    "externalize",
    "summarize",
    "window",
];

/// Why a plugin was not loaded: start-up stops with this.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// A setting is wrong.
    #[error("plugins.load[{index}].{field}: {message}")]
    Setting {
        /// Which plugin.
        index: usize,
        /// Which field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The directory or file is not safe to load from.
    #[error("plugin {name}: {message}")]
    Unsafe {
        /// The plugin.
        name: String,
        /// Why.
        message: String,
    },
    /// The library does not load or speaks another ABI.
    #[error("plugin {name}: {message}")]
    Load {
        /// The plugin.
        name: String,
        /// Why.
        message: String,
    },
}

/// A call that went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// No answer within the timeout.
    Timeout,
    /// `COMPACTD_PANIC`, with the panic message.
    Panic(String),
    /// Another non-OK status, with the plugin's reason.
    Status(i32, String),
    /// The answer is not what the ABI promises.
    Garbage(String),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Timeout => write!(f, "timed out"),
            Fault::Panic(m) => write!(f, "panicked: {m}"),
            Fault::Status(s, m) => write!(f, "failed with status {s}: {m}"),
            Fault::Garbage(m) => write!(f, "returned garbage: {m}"),
        }
    }
}

/// The plugin's instance pointer, shared with call threads. The ABI makes
/// `analyze` safe to call concurrently on one instance.
#[derive(Clone, Copy)]
struct Instance(*mut c_void);
// SAFETY: the ABI requires instances to be usable from any thread.
unsafe impl Send for Instance {}
// SAFETY: as above.
unsafe impl Sync for Instance {}

/// A loaded plugin.
pub struct LoadedPlugin {
    name: &'static str,
    version: String,
    /// `name@version`, formed once.
    id: String,
    table: &'static abi::Plugin,
    instance: Instance,
    settings: PluginSettings,
    /// Why it is out of rotation; set once, never cleared.
    poisoned: std::sync::OnceLock<String>,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("poisoned", &self.poisoned())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
impl LoadedPlugin {
    /// A stand-in that is never called: the SDK's table of a strategy that
    /// proposes nothing, named and configured by `settings`. For tests of
    /// where plugins go in the pipeline.
    pub(crate) fn stand_in(settings: PluginSettings) -> LoadedPlugin {
        struct Nothing;
        impl compactd_plugin_sdk::Strategy for Nothing {
            const NAME: &'static str = "stand-in";
            const VERSION: &'static str = "0.0.0";
            fn create(_config: &str) -> Result<Self, String> {
                Ok(Nothing)
            }
            fn analyze(
                &self,
                _req: &compactd_plugin_sdk::pb::AnalyzeRequest,
            ) -> Result<compactd_plugin_sdk::pb::AnalyzeResponse, String> {
                Ok(Default::default())
            }
        }
        let name: &'static str = Box::leak(settings.name.clone().into_boxed_str());
        LoadedPlugin {
            name,
            version: "0.0.0".into(),
            id: format!("{name}@0.0.0"),
            table: Box::leak(Box::new(compactd_plugin_sdk::table::<Nothing>())),
            instance: Instance(std::ptr::null_mut()),
            settings,
            poisoned: std::sync::OnceLock::new(),
        }
    }
}

/// Collects what a plugin writes through the callback.
unsafe extern "C" fn collect(sink: *mut c_void, data: *const u8, len: usize) {
    if sink.is_null() || data.is_null() || len == 0 {
        return;
    }
    // SAFETY: `sink` is the `Vec<u8>` the host passed for this call, alive
    // until the call returns; `data` is valid for `len` bytes per the ABI.
    unsafe {
        (*sink.cast::<Vec<u8>>()).extend_from_slice(std::slice::from_raw_parts(data, len));
    }
}

impl LoadedPlugin {
    /// The name the plugin declares.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// `name@version`, as plans and audit records name it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its settings.
    pub fn settings(&self) -> &PluginSettings {
        &self.settings
    }

    /// Why it is out of rotation, if it is.
    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.get().map(String::as_str)
    }

    /// Takes it out of rotation (the first reason stays).
    pub fn poison(&self, reason: String) {
        let logged = reason.clone();
        if self.poisoned.set(reason).is_ok() {
            tracing::error!(plugin = %self.id, reason = %logged, "plugin taken out of rotation");
        }
    }

    /// One `analyze` call on a thread of its own, waited for at most the
    /// configured timeout. A call that times out keeps running detached;
    /// the library is never unloaded, so that is memory-safe.
    pub fn analyze(&self, request: Vec<u8>) -> Result<Vec<u8>, Fault> {
        let (tx, rx) = mpsc::channel();
        let (table, instance) = (self.table, self.instance);
        let spawned = std::thread::Builder::new()
            .name(format!("plugin-{}", self.name))
            .spawn(move || {
                let instance = instance;
                let mut out: Vec<u8> = Vec::new();
                let bytes = abi::Bytes {
                    ptr: request.as_ptr(),
                    len: request.len(),
                };
                // SAFETY: the table and instance come from a handshake that
                // passed; `request` and `out` outlive the call.
                let status = unsafe {
                    (table.analyze)(
                        instance.0,
                        bytes,
                        (&mut out as *mut Vec<u8>).cast(),
                        collect,
                    )
                };
                let _ = tx.send((status, out));
            });
        if let Err(e) = spawned {
            return Err(Fault::Status(-1, format!("no thread for the call: {e}")));
        }
        match rx.recv_timeout(Duration::from_millis(self.settings.timeout_ms)) {
            Ok((abi::OK, out)) => Ok(out),
            Ok((abi::PANIC, out)) => Err(Fault::Panic(String::from_utf8_lossy(&out).into_owned())),
            Ok((status, out)) => Err(Fault::Status(
                status,
                String::from_utf8_lossy(&out).into_owned(),
            )),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Fault::Timeout),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Fault::Garbage(
                "the call thread ended without an answer".into(),
            )),
        }
    }
}

/// Loads every configured plugin, or says which one cannot be and why.
pub fn load_all(settings: &PluginsSettings) -> Result<Vec<Arc<LoadedPlugin>>, PluginError> {
    let Some(dir) = check_all(settings)? else {
        return Ok(Vec::new());
    };
    check_dir(dir)?;
    let mut out = Vec::new();
    for s in &settings.load {
        out.push(Arc::new(load(dir, s)?));
    }
    Ok(out)
}

/// What can be checked of the plugin settings from the settings alone
/// (`config check` runs it, possibly on another machine than the one that
/// will hold the libraries; start-up runs it first): each entry's fields
/// and that its path names a file directly in `plugins.dir`. The plugin
/// directory, when there are plugins to load.
pub fn check_all(settings: &PluginsSettings) -> Result<Option<&Path>, PluginError> {
    if settings.load.is_empty() {
        return Ok(None);
    }
    let dir = settings.dir.as_ref().ok_or_else(|| PluginError::Setting {
        index: 0,
        field: "path",
        message: "plugins.dir must be set to load plugins".into(),
    })?;
    for (index, s) in settings.load.iter().enumerate() {
        check_settings(index, s)?;
    }
    Ok(Some(dir))
}

fn check_settings(index: usize, s: &PluginSettings) -> Result<(), PluginError> {
    let bad = |field, message: &str| {
        Err(PluginError::Setting {
            index,
            field,
            message: message.to_string(),
        })
    };
    if s.name.is_empty() {
        return bad("name", "must not be empty");
    }
    // A file directly in plugins.dir (checked again on the real file, whose
    // canonical path could still lead elsewhere).
    let mut parts = s.path.components();
    if !matches!(
        (parts.next(), parts.next()),
        (Some(std::path::Component::Normal(_)), None)
    ) {
        return bad(
            "path",
            &format!(
                "must be a file name in plugins.dir, not {}",
                s.path.display()
            ),
        );
    }
    // Reports and the pipeline tell steps apart by name.
    if POSITIONS.contains(&s.name.as_str()) {
        return bad("name", "must not be the name of a built-in reducer");
    }
    if s.sha256.len() != 64 || !s.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return bad("sha256", "must be 64 hex digits (sha256sum of the library)");
    }
    if !POSITIONS.contains(&s.after.as_str()) || s.after == "window" {
        return bad(
            "after",
            "must be start, retention, compress, clear, externalize or summarize",
        );
    }
    if s.aggressiveness > 100 {
        return bad("aggressiveness", "must be in 0..=100");
    }
    if s.timeout_ms == 0 {
        return bad("timeout_ms", "must be at least 1");
    }
    Ok(())
}

/// The directory must exist and be writable by no one: whoever can write
/// it can replace a plugin (the hash check happens at start-up only).
fn check_dir(dir: &Path) -> Result<(), PluginError> {
    use std::os::unix::fs::PermissionsExt;
    let unsafe_dir = |message: String| PluginError::Unsafe {
        name: dir.display().to_string(),
        message,
    };
    let meta = std::fs::metadata(dir).map_err(|e| unsafe_dir(format!("plugins.dir: {e}")))?;
    if !meta.is_dir() {
        return Err(unsafe_dir("plugins.dir is not a directory".into()));
    }
    if meta.permissions().mode() & 0o222 != 0 {
        return Err(unsafe_dir(
            "plugins.dir is writable; mount it read-only (or chmod a-w it)".into(),
        ));
    }
    Ok(())
}

/// The library file of `s`, canonical: directly in `dir`, not writable,
/// with the hash the configuration names.
fn verified_file(dir: &Path, s: &PluginSettings) -> Result<std::path::PathBuf, PluginError> {
    use std::os::unix::fs::PermissionsExt;
    let name = s.name.clone();
    let fail = |message: String| PluginError::Load {
        name: name.clone(),
        message,
    };
    let unsafe_file = |message: String| PluginError::Unsafe {
        name: name.clone(),
        message,
    };
    let path = dir.join(&s.path);
    let canonical = path
        .canonicalize()
        .map_err(|e| fail(format!("{}: {e}", path.display())))?;
    let dir_canonical = dir
        .canonicalize()
        .map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    if canonical.parent() != Some(dir_canonical.as_path()) {
        return Err(unsafe_file(format!(
            "{} is not a file directly in plugins.dir",
            s.path.display()
        )));
    }
    let bytes =
        std::fs::read(&canonical).map_err(|e| fail(format!("{}: {e}", canonical.display())))?;
    let mode = std::fs::metadata(&canonical)
        .map_err(|e| fail(e.to_string()))?
        .permissions()
        .mode();
    if mode & 0o222 != 0 {
        return Err(unsafe_file("the library file is writable".into()));
    }
    let digest = crate::store::content_hash(&bytes);
    if !digest.eq_ignore_ascii_case(&s.sha256) {
        return Err(unsafe_file(format!(
            "SHA-256 mismatch: the file has {digest}, the configuration expects {}",
            s.sha256
        )));
    }
    Ok(canonical)
}

fn load(dir: &Path, s: &PluginSettings) -> Result<LoadedPlugin, PluginError> {
    let name = s.name.clone();
    let fail = |message: String| PluginError::Load {
        name: name.clone(),
        message,
    };
    let canonical = verified_file(dir, s)?;
    // SAFETY: loading runs the library's initializers. That is the trust
    // the configuration gives a plugin whose hash it names.
    let lib = unsafe { libloading::Library::new(&canonical) }
        .map_err(|e| fail(format!("does not load: {e}")))?;
    // Never unloaded: a timed-out call may still run inside it.
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    // SAFETY: the symbol's type is fixed by the ABI.
    let entry: libloading::Symbol<'static, abi::EntryFn> = unsafe { lib.get(abi::ENTRY_SYMBOL) }
        .map_err(|e| fail(format!("no compactd_plugin_v1 entry point: {e}")))?;
    // SAFETY: the entry point takes nothing and returns a static table.
    let table_ptr = unsafe { entry() };
    if table_ptr.is_null() {
        return Err(fail("the entry point returned no table".into()));
    }
    // Read the header fields first: they say how much of the table exists.
    // SAFETY: every ABI version starts with struct_size and the versions.
    let (size, major, minor) = unsafe {
        let head = table_ptr.cast::<abi::Head>();
        ((*head).struct_size, (*head).abi_major, (*head).abi_minor)
    };
    if major != abi::ABI_MAJOR {
        return Err(fail(format!(
            "speaks plugin ABI {major}.{minor}; this compactd speaks {}.{}",
            abi::ABI_MAJOR,
            abi::ABI_MINOR
        )));
    }
    if size < std::mem::size_of::<abi::Plugin>() {
        return Err(fail(format!(
            "its table is {size} bytes, smaller than ABI {}.0's {}",
            abi::ABI_MAJOR,
            std::mem::size_of::<abi::Plugin>()
        )));
    }
    // SAFETY: the table is at least as large as ours and lives as long as
    // the (never unloaded) library.
    let table: &'static abi::Plugin = unsafe { &*table_ptr };
    // SAFETY: static NUL-terminated strings, per the ABI.
    let (declared, version) = unsafe {
        (
            c_str(table.name).ok_or_else(|| fail("its name is not UTF-8".into()))?,
            c_str(table.version).ok_or_else(|| fail("its version is not UTF-8".into()))?,
        )
    };
    if declared != s.name {
        return Err(fail(format!(
            "the library declares itself {declared:?}, not {:?}",
            s.name
        )));
    }
    let config = s.config.to_string();
    let mut instance: *mut c_void = std::ptr::null_mut();
    let mut err: Vec<u8> = Vec::new();
    // SAFETY: valid pointers for the duration of the call.
    let status = unsafe {
        (table.create)(
            abi::Bytes {
                ptr: config.as_ptr(),
                len: config.len(),
            },
            &mut instance,
            (&mut err as *mut Vec<u8>).cast(),
            collect,
        )
    };
    if status != abi::OK {
        return Err(fail(format!(
            "create failed (status {status}): {}",
            String::from_utf8_lossy(&err)
        )));
    }
    tracing::info!(plugin = %declared, %version, after = %s.after, "plugin loaded");
    Ok(LoadedPlugin {
        id: format!("{declared}@{version}"),
        name: Box::leak(declared.into_boxed_str()),
        version,
        table,
        instance: Instance(instance),
        settings: s.clone(),
        poisoned: std::sync::OnceLock::new(),
    })
}

/// A NUL-terminated string from the plugin.
///
/// # Safety
/// `p` is null or a valid NUL-terminated string.
unsafe fn c_str(p: *const std::ffi::c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the caller.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .ok()
        .map(str::to_string)
}

/// SHA-256 (hex) of a file, as `plugins.load[].sha256` expects it.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    Ok(crate::store::content_hash(&std::fs::read(path)?))
}
