//! `libferrotrace_preload.so`: the ferrotrace runtime packaged for `LD_PRELOAD`.
//!
//! `ferrotrace record` preloads this library into programs that do not link the `ferrotrace` crate
//! themselves. Its ELF constructor starts the runtime (unless `FERROTRACE_RUNTIME=linked` says the
//! program's own copy should), and its `dlopen` wraps the C library's to trace newly loaded objects at
//! once; everything else lives in the `ferrotrace` crate. Not for linking.
#![warn(missing_docs)]

#[used]
#[link_section = ".init_array"]
static START_PRELOADED: extern "C" fn() = {
    extern "C" fn start_preloaded() {
        ferrotrace::runtime::start_from_env(ferrotrace::Role::Preload);
    }
    start_preloaded
};

/// Interposes the C library's `dlopen`: after a successful load, the new object's sleds are patched
/// before the caller can call into it.
///
/// # Safety
/// Same contract as `dlopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn dlopen(
    filename: *const libc::c_char,
    flags: libc::c_int,
) -> *mut libc::c_void {
    type DlOpen = unsafe extern "C" fn(*const libc::c_char, libc::c_int) -> *mut libc::c_void;
    let real = libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr());
    if real.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: RTLD_NEXT's "dlopen" is the C library's dlopen, with this signature.
    let real: DlOpen = core::mem::transmute::<*mut libc::c_void, DlOpen>(real);
    let handle = real(filename, flags);
    if !handle.is_null() {
        ferrotrace::rescan();
    }
    handle
}
