//! The crate where the runtime does not exist (every target but x86_64 Linux; on x86_64 Linux under
//! `RUSTFLAGS='--cfg ferrotrace_portable_check'`, see build.rs): tracepoints compile to nothing and the
//! runtime's functions do nothing. Declarations are checked as on x86_64 Linux: every argument type must
//! be an [`Arg`](crate::__macro_support::Arg) type and the format may only name arguments.

/// Always false: there is no runtime on this target.
pub fn is_recording() -> bool {
    false
}

/// No-op: there is no runtime on this target.
pub fn finish() {}

/// No-op: there is no runtime on this target.
pub fn rescan() {}

/// Enabling tracepoints, which do not exist on this target.
pub mod tracepoints {
    /// Selects nothing: returns 0.
    pub fn enable(glob: &str) -> usize {
        let _ = glob;
        0
    }

    /// Selects nothing: returns 0.
    pub fn disable(glob: &str) -> usize {
        let _ = glob;
        0
    }
}

/// Declares a tracepoint: on this target, a function that does nothing.
#[macro_export]
macro_rules! tracepoint {
    ($vis:vis $name:ident $(, $arg:ident : $ty:ty)* $(,)?) => {
        $crate::tracepoint!($vis $name $(, $arg : $ty)*, "");
    };
    ($vis:vis $name:ident $(, $arg:ident : $ty:ty)*, $fmt:literal $(,)?) => {
        #[doc = concat!("The tracepoint `", stringify!($name), "`: does nothing on this target.")]
        #[inline(always)]
        #[allow(dead_code, unused_variables, clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) {
            $(let _ = <$ty as $crate::__macro_support::Arg>::TYPE;)*
            if false {
                let _ = format_args!($fmt);
            }
        }
    };
}

/// Fires a tracepoint: on this target, nothing (the arguments are type-checked, not evaluated).
#[macro_export]
macro_rules! trace {
    ($($tp:ident)::+ ( $($arg:expr),* $(,)? )) => {
        if false {
            $($tp)::+($($arg),*);
        }
    };
}

/// The allocator wrapper: on this target it only forwards to the allocator it wraps.
pub struct Allocator<A> {
    inner: A,
}

impl<A> Allocator<A> {
    /// Wraps `inner`.
    pub const fn new(inner: A) -> Self {
        Allocator { inner }
    }
}

// SAFETY: every call is forwarded to `inner` with the same arguments.
unsafe impl<A: std::alloc::GlobalAlloc> std::alloc::GlobalAlloc for Allocator<A> {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract is forwarded.
        unsafe { self.inner.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract is forwarded.
        unsafe { self.inner.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller's contract is forwarded.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is forwarded.
        unsafe { self.inner.realloc(ptr, layout, new_size) }
    }
}
