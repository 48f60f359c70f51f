//! Write a compactd strategy plugin in Rust: implement [`Strategy`], then
//! [`export_plugin!`] it from a `cdylib` crate. The macro exports the C ABI
//! of `plugins/abi/include/compactd_plugin.h`, and every exported function
//! is wrapped so that a panic becomes a `COMPACTD_PANIC` status with its
//! message: a panic unwinding out of `extern "C"` would abort the host, a
//! process that serves every tenant.
//!
//! ```ignore
//! use compactd_plugin_sdk::{export_plugin, pb, Strategy};
//!
//! struct Noop;
//! impl Strategy for Noop {
//!     const NAME: &'static str = "noop";
//!     const VERSION: &'static str = "0.1.0";
//!     fn create(_config: &str) -> Result<Self, String> { Ok(Noop) }
//!     fn analyze(&self, _req: &pb::AnalyzeRequest) -> Result<pb::AnalyzeResponse, String> {
//!         Ok(pb::AnalyzeResponse::default())
//!     }
//! }
//! export_plugin!(Noop);
//! ```
//!
//! [`testing::run`] calls a plugin through the same C ABI the host uses,
//! without a server.

use std::ffi::{c_char, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use prost::Message as _;

/// The protobuf messages: the plugin's own (`AnalyzeRequest`, ...) at the
/// top, the API's (`Thread`, `StructuredSummary`, ...) under [`pb::api`].
pub mod pb {
    /// Generated from `proto/`.
    #[allow(missing_docs, clippy::all)]
    pub mod compactd {
        /// The gRPC API's messages.
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/compactd.v1.rs"));
        }
        /// The plugin messages.
        pub mod plugin {
            /// Version 1.
            pub mod v1 {
                include!(concat!(env!("OUT_DIR"), "/compactd.plugin.v1.rs"));
            }
        }
    }
    pub use compactd::plugin::v1::*;
    /// The API's messages (threads, summaries).
    pub use compactd::v1 as api;
}

/// Proposals built in one expression, e.g.
/// `pb::Proposal::clear(id, "[stale]").because("read again").freeing(900)`.
/// The fields stay public; these only spare the nesting of `oneof` types.
impl pb::Proposal {
    fn of(action: pb::proposal::Action) -> Self {
        pb::Proposal {
            action: Some(action),
            ..Default::default()
        }
    }

    /// Replace one tool result's content with `replacement`.
    pub fn clear(message_id: impl Into<String>, replacement: impl Into<String>) -> Self {
        Self::of(pb::proposal::Action::Clear(pb::ClearProposal {
            message_id: message_id.into(),
            replacement: replacement.into(),
            preserved_fields: Default::default(),
        }))
    }

    /// Replace consecutive messages (whole call/result groups) with `summary`.
    pub fn summarize(message_ids: Vec<String>, summary: pb::api::StructuredSummary) -> Self {
        Self::of(pb::proposal::Action::Summarize(pb::SummarizeProposal {
            message_ids,
            summary: Some(summary),
        }))
    }

    /// Leave consecutive messages (whole call/result groups) out.
    pub fn drop_messages(message_ids: Vec<String>) -> Self {
        Self::of(pb::proposal::Action::Drop(pb::DropProposal { message_ids }))
    }

    /// Move one message's content to the artifact store; the prompt keeps a
    /// pointer the host summarizes and hints itself unless
    /// [`Self::with_pointer`] says otherwise.
    pub fn externalize(message_id: impl Into<String>) -> Self {
        Self::of(pb::proposal::Action::Externalize(pb::ExternalizeProposal {
            message_id: message_id.into(),
            ..Default::default()
        }))
    }

    /// For an externalization: the pointer's summary (its span is set by the
    /// host) and when to read the content back (empty: the host's default).
    /// Other proposals are returned unchanged.
    pub fn with_pointer(
        mut self,
        summary: Option<pb::api::StructuredSummary>,
        rehydrate_hint: impl Into<String>,
    ) -> Self {
        if let Some(pb::proposal::Action::Externalize(x)) = &mut self.action {
            x.summary = summary;
            x.rehydrate_hint = rehydrate_hint.into();
        }
        self
    }

    /// For a clear: a value that must survive, as JSON text.
    /// Other proposals are returned unchanged.
    pub fn preserving(mut self, name: impl Into<String>, json: impl Into<String>) -> Self {
        if let Some(pb::proposal::Action::Clear(c)) = &mut self.action {
            c.preserved_fields.insert(name.into(), json.into());
        }
        self
    }

    /// Why, for the audit record (short, no message content).
    pub fn because(mut self, rationale: impl Into<String>) -> Self {
        self.rationale = rationale.into();
        self
    }

    /// The plugin's estimate of the request tokens this frees; the host
    /// reports it beside what it measured (`compact.proposal`).
    pub fn freeing(mut self, estimated_tokens: u32) -> Self {
        self.estimated_tokens_freed = estimated_tokens;
        self
    }
}

/// A strategy: a name, a version, and what it proposes for a thread.
/// Instances are shared across host threads, hence `Send + Sync`.
pub trait Strategy: Send + Sync + Sized + 'static {
    /// Shown in plans, audit records and logs (no NUL).
    const NAME: &'static str;
    /// The plugin's own version (no NUL).
    const VERSION: &'static str;
    /// From the configured JSON (`"{}"` when none).
    fn create(config: &str) -> Result<Self, String>;
    /// Proposals for one pipeline step. An error skips the plugin for this
    /// call; the host validates every proposal it returns.
    fn analyze(&self, req: &pb::AnalyzeRequest) -> Result<pb::AnalyzeResponse, String>;
}

/// The C ABI, as in `compactd_plugin.h`.
pub mod abi {
    use std::ffi::{c_char, c_void};

    /// `COMPACTD_PLUGIN_ABI_MAJOR`.
    pub const ABI_MAJOR: u32 = 1;
    /// `COMPACTD_PLUGIN_ABI_MINOR`.
    pub const ABI_MINOR: u32 = 0;
    /// `COMPACTD_PLUGIN_ENTRY_SYMBOL`, NUL-terminated.
    pub const ENTRY_SYMBOL: &[u8] = b"compactd_plugin_v1\0";
    /// `COMPACTD_OK`.
    pub const OK: i32 = 0;
    /// `COMPACTD_INVALID_ARGUMENT`.
    pub const INVALID_ARGUMENT: i32 = 1;
    /// `COMPACTD_INTERNAL`.
    pub const INTERNAL: i32 = 2;
    /// `COMPACTD_PANIC`.
    pub const PANIC: i32 = 3;

    /// `compactd_bytes`: borrowed for the call.
    #[repr(C)]
    #[derive(Debug, Clone, Copy)]
    pub struct Bytes {
        /// Start (may be null when `len` is 0).
        pub ptr: *const u8,
        /// Length.
        pub len: usize,
    }

    impl Bytes {
        /// The bytes as a slice.
        ///
        /// # Safety
        /// `ptr` must be valid for `len` bytes for the returned lifetime.
        pub unsafe fn as_slice<'a>(&self) -> &'a [u8] {
            if self.ptr.is_null() || self.len == 0 {
                &[]
            } else {
                // SAFETY: the caller guarantees ptr/len.
                unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
            }
        }
    }

    /// `compactd_write_fn`.
    pub type WriteFn = unsafe extern "C" fn(sink: *mut c_void, data: *const u8, len: usize);

    /// `compactd_plugin`.
    #[repr(C)]
    #[derive(Debug)]
    pub struct Plugin {
        /// `sizeof(compactd_plugin)`.
        pub struct_size: usize,
        /// ABI major.
        pub abi_major: u32,
        /// ABI minor.
        pub abi_minor: u32,
        /// NUL-terminated name.
        pub name: *const c_char,
        /// NUL-terminated version.
        pub version: *const c_char,
        /// `create`.
        pub create: unsafe extern "C" fn(Bytes, *mut *mut c_void, *mut c_void, WriteFn) -> i32,
        /// `destroy`.
        pub destroy: unsafe extern "C" fn(*mut c_void),
        /// `analyze`.
        pub analyze: unsafe extern "C" fn(*mut c_void, Bytes, *mut c_void, WriteFn) -> i32,
    }

    /// The fields every ABI version starts with: what a host reads before
    /// it knows how large the table is.
    #[repr(C)]
    #[derive(Debug)]
    pub struct Head {
        /// `struct_size`.
        pub struct_size: usize,
        /// `abi_major`.
        pub abi_major: u32,
        /// `abi_minor`.
        pub abi_minor: u32,
    }

    /// `compactd_plugin_entry_fn`.
    pub type EntryFn = unsafe extern "C" fn() -> *const Plugin;

    // SAFETY: the table is immutable after it is built and its pointers
    // point at data that lives as long as the library.
    unsafe impl Sync for Plugin {}
    // SAFETY: as above.
    unsafe impl Send for Plugin {}
}

/// The table of `T`; what the exported entry point returns (see [`export_plugin!`]).
pub fn table<T: Strategy>() -> abi::Plugin {
    let leak = |s: &str| {
        CString::new(s)
            .unwrap_or_else(|_| c"invalid name".to_owned())
            .into_raw() as *const c_char
    };
    abi::Plugin {
        struct_size: std::mem::size_of::<abi::Plugin>(),
        abi_major: abi::ABI_MAJOR,
        abi_minor: abi::ABI_MINOR,
        name: leak(T::NAME),
        version: leak(T::VERSION),
        create: create::<T>,
        destroy: destroy::<T>,
        analyze: analyze::<T>,
    }
}

/// Writes `text` through the host's callback.
///
/// # Safety
/// `write` and `sink` are the host's, valid during the call.
unsafe fn say(write: abi::WriteFn, sink: *mut c_void, text: &[u8]) {
    // SAFETY: per the ABI, the callback copies the bytes before returning.
    unsafe { write(sink, text.as_ptr(), text.len()) }
}

/// A panic payload as text.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

unsafe extern "C" fn create<T: Strategy>(
    config: abi::Bytes,
    instance: *mut *mut c_void,
    err: *mut c_void,
    write: abi::WriteFn,
) -> i32 {
    // SAFETY: borrowed for the call, per the ABI.
    let bytes = unsafe { config.as_slice() };
    let made = catch_unwind(|| {
        let text = std::str::from_utf8(bytes).map_err(|e| format!("config is not UTF-8: {e}"))?;
        T::create(text)
    });
    match made {
        Ok(Ok(t)) => {
            if !instance.is_null() {
                // SAFETY: the host passes a valid out pointer.
                unsafe { *instance = Box::into_raw(Box::new(t)).cast() };
            }
            abi::OK
        }
        Ok(Err(e)) => {
            // SAFETY: the host's callback, during the call.
            unsafe { say(write, err, e.as_bytes()) };
            abi::INVALID_ARGUMENT
        }
        Err(p) => {
            // SAFETY: as above.
            unsafe { say(write, err, panic_text(p.as_ref()).as_bytes()) };
            abi::PANIC
        }
    }
}

unsafe extern "C" fn destroy<T: Strategy>(instance: *mut c_void) {
    if instance.is_null() {
        return;
    }
    // A panic in Drop must not unwind into the host either.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: made by `create::<T>` with Box::into_raw; destroyed once.
        drop(unsafe { Box::from_raw(instance.cast::<T>()) });
    }));
}

unsafe extern "C" fn analyze<T: Strategy>(
    instance: *mut c_void,
    request: abi::Bytes,
    out: *mut c_void,
    write: abi::WriteFn,
) -> i32 {
    if instance.is_null() {
        // SAFETY: the host's callback.
        unsafe { say(write, out, b"no instance") };
        return abi::INVALID_ARGUMENT;
    }
    // SAFETY: made by `create::<T>`, alive until `destroy`.
    let strategy = unsafe { &*instance.cast::<T>() };
    // SAFETY: borrowed for the call.
    let bytes = unsafe { request.as_slice() };
    let answered = catch_unwind(AssertUnwindSafe(|| {
        let req = pb::AnalyzeRequest::decode(bytes).map_err(|e| {
            (
                abi::INVALID_ARGUMENT,
                format!("request does not decode: {e}"),
            )
        })?;
        strategy
            .analyze(&req)
            .map(|r| r.encode_to_vec())
            .map_err(|e| (abi::INTERNAL, e))
    }));
    match answered {
        Ok(Ok(bytes)) => {
            // SAFETY: the host's callback.
            unsafe { say(write, out, &bytes) };
            abi::OK
        }
        Ok(Err((status, e))) => {
            // SAFETY: as above.
            unsafe { say(write, out, e.as_bytes()) };
            status
        }
        Err(p) => {
            // SAFETY: as above.
            unsafe { say(write, out, panic_text(p.as_ref()).as_bytes()) };
            abi::PANIC
        }
    }
}

/// Exports `$ty` (a [`Strategy`]) as the plugin's entry point,
/// `compactd_plugin_v1`.
#[macro_export]
macro_rules! export_plugin {
    ($ty:ty) => {
        /// The plugin's entry point (see `compactd_plugin.h`).
        #[unsafe(no_mangle)]
        pub extern "C" fn compactd_plugin_v1() -> *const $crate::abi::Plugin {
            static TABLE: ::std::sync::OnceLock<$crate::abi::Plugin> = ::std::sync::OnceLock::new();
            TABLE.get_or_init(|| $crate::table::<$ty>()) as *const $crate::abi::Plugin
        }
    };
}

/// Running a plugin without the server, through its C ABI.
pub mod testing {
    use super::*;

    unsafe extern "C" fn collect(sink: *mut c_void, data: *const u8, len: usize) {
        if sink.is_null() || (data.is_null() && len > 0) {
            return;
        }
        // SAFETY: `sink` is the Vec passed below; data/len per the ABI.
        unsafe {
            let v = &mut *sink.cast::<Vec<u8>>();
            if len > 0 {
                v.extend_from_slice(std::slice::from_raw_parts(data, len));
            }
        }
    }

    /// Creates `T` from `config` and analyzes `req` through the exported
    /// table, as the host would: `Err((status, message))` on failure.
    pub fn run<T: Strategy>(
        config: &str,
        req: &pb::AnalyzeRequest,
    ) -> Result<pb::AnalyzeResponse, (i32, String)> {
        let t = table::<T>();
        let mut err: Vec<u8> = Vec::new();
        let mut instance: *mut c_void = std::ptr::null_mut();
        let cfg = abi::Bytes {
            ptr: config.as_ptr(),
            len: config.len(),
        };
        // SAFETY: valid pointers for the duration of the call.
        let status = unsafe {
            (t.create)(
                cfg,
                &mut instance,
                (&mut err as *mut Vec<u8>).cast(),
                collect,
            )
        };
        if status != abi::OK {
            return Err((status, String::from_utf8_lossy(&err).into_owned()));
        }
        let bytes = req.encode_to_vec();
        let mut out: Vec<u8> = Vec::new();
        // SAFETY: as above; the instance is alive until destroy below.
        let status = unsafe {
            (t.analyze)(
                instance,
                abi::Bytes {
                    ptr: bytes.as_ptr(),
                    len: bytes.len(),
                },
                (&mut out as *mut Vec<u8>).cast(),
                collect,
            )
        };
        // SAFETY: made by create above, destroyed once.
        unsafe { (t.destroy)(instance) };
        if status != abi::OK {
            return Err((status, String::from_utf8_lossy(&out).into_owned()));
        }
        pb::AnalyzeResponse::decode(out.as_slice())
            .map_err(|e| (abi::INTERNAL, format!("response does not decode: {e}")))
    }
}
