//! The C ABI of `plugins/abi/include/compactd_plugin.h`, host side. A test
//! compiles the header and checks that these layouts match it.

use std::ffi::{c_char, c_void};

/// `COMPACTD_PLUGIN_ABI_MAJOR`.
pub const ABI_MAJOR: u32 = 1;
/// `COMPACTD_PLUGIN_ABI_MINOR`.
pub const ABI_MINOR: u32 = 0;
/// `COMPACTD_PLUGIN_ENTRY_SYMBOL`, NUL-terminated.
pub const ENTRY_SYMBOL: &[u8] = b"compactd_plugin_v1\0";
/// `COMPACTD_OK`.
pub const OK: i32 = 0;
/// `COMPACTD_PANIC`.
pub const PANIC: i32 = 3;

/// `compactd_bytes`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Bytes {
    pub ptr: *const u8,
    pub len: usize,
}

/// `compactd_write_fn`.
pub type WriteFn = unsafe extern "C" fn(sink: *mut c_void, data: *const u8, len: usize);

/// The fields every ABI version starts with.
#[repr(C)]
pub struct Head {
    pub struct_size: usize,
    pub abi_major: u32,
    pub abi_minor: u32,
}

/// `compactd_plugin`, ABI 1.0.
#[repr(C)]
pub struct Plugin {
    pub struct_size: usize,
    pub abi_major: u32,
    pub abi_minor: u32,
    pub name: *const c_char,
    pub version: *const c_char,
    pub create: unsafe extern "C" fn(Bytes, *mut *mut c_void, *mut c_void, WriteFn) -> i32,
    pub destroy: unsafe extern "C" fn(*mut c_void),
    pub analyze: unsafe extern "C" fn(*mut c_void, Bytes, *mut c_void, WriteFn) -> i32,
}

// SAFETY: a plugin's table is immutable and lives as long as its library,
// which is never unloaded.
unsafe impl Sync for Plugin {}
// SAFETY: as above.
unsafe impl Send for Plugin {}

/// `compactd_plugin_entry_fn`.
pub type EntryFn = unsafe extern "C" fn() -> *const Plugin;
