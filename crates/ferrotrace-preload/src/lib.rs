//! `libferrotrace_preload.so`: the ferrotrace runtime packaged for `LD_PRELOAD`.
//!
//! `ferrotrace record` preloads this library into programs that do not link the `ferrotrace` crate
//! themselves. Its ELF constructor starts the runtime (unless `FERROTRACE_RUNTIME=linked` says the
//! program's own copy should); everything else lives in the `ferrotrace` crate. Not for linking.
#![warn(missing_docs)]

#[used]
#[link_section = ".init_array"]
static START_PRELOADED: extern "C" fn() = {
    extern "C" fn start_preloaded() {
        ferrotrace::runtime::start_from_env(ferrotrace::Role::Preload);
    }
    start_preloaded
};
