//! The types a tracepoint argument may have ([`Arg`]), and how each is encoded in a record's payload and
//! handed to an attached SDT probe. Plain Rust without the runtime: the portable fallback uses the trait
//! too, so that a tracepoint declaration that compiles on one target compiles on all.

/// Strings and byte slices are cut to this many bytes in a record.
pub const MAX_STR: usize = 256;

/// A type a tracepoint argument may have.
///
/// # Safety
/// `encode` must write exactly `encoded_len` bytes.
pub unsafe trait Arg {
    /// Type name in descriptors (`u32`, `str`, `bytes`, …).
    const TYPE: &'static str;
    /// SDT argument size: 8 for unsigned and pointer-like values, -8 for signed ones.
    const USDT_SIZE: i32;
    /// Bytes this value takes in a record's payload.
    fn encoded_len(&self) -> usize;
    /// Writes the value at `dst` and returns the position after it.
    ///
    /// # Safety
    /// `dst` must be valid for `encoded_len()` bytes.
    unsafe fn encode(&self, dst: *mut u8) -> *mut u8;
    /// The 64-bit word handed to an attached SDT probe; strings are copied NUL-terminated into `buf`.
    fn usdt_word(&self, buf: &mut [u8; MAX_STR + 1]) -> u64;
}

/// Numbers: their little-endian bytes in the record; the SDT word is `|v| word` of the value.
macro_rules! number_arg {
    ($($t:ty => $name:literal, $usdt_size:literal, |$v:ident| $word:expr;)*) => {$(
        // SAFETY: writes exactly size_of::<$t>() bytes.
        unsafe impl Arg for $t {
            const TYPE: &'static str = $name;
            const USDT_SIZE: i32 = $usdt_size;
            #[inline(always)]
            fn encoded_len(&self) -> usize {
                core::mem::size_of::<$t>()
            }
            #[inline(always)]
            unsafe fn encode(&self, dst: *mut u8) -> *mut u8 {
                // SAFETY: the caller provides `encoded_len()` = size_of::<$t>() writable bytes at `dst`.
                unsafe {
                    (dst as *mut [u8; core::mem::size_of::<$t>()]).write_unaligned(self.to_le_bytes());
                    dst.add(core::mem::size_of::<$t>())
                }
            }
            #[inline(always)]
            fn usdt_word(&self, _buf: &mut [u8; MAX_STR + 1]) -> u64 {
                let $v = *self;
                $word
            }
        }
    )*};
}

number_arg! {
    u8 => "u8", 8, |v| v as u64;
    u16 => "u16", 8, |v| v as u64;
    u32 => "u32", 8, |v| v as u64;
    u64 => "u64", 8, |v| v;
    usize => "usize", 8, |v| v as u64;
    i8 => "i8", -8, |v| v as i64 as u64;
    i16 => "i16", -8, |v| v as i64 as u64;
    i32 => "i32", -8, |v| v as i64 as u64;
    i64 => "i64", -8, |v| v as u64;
    isize => "isize", -8, |v| v as i64 as u64;
    f32 => "f32", 8, |v| v.to_bits() as u64;
    f64 => "f64", 8, |v| v.to_bits();
}

// SAFETY: 1 byte.
unsafe impl Arg for bool {
    const TYPE: &'static str = "bool";
    const USDT_SIZE: i32 = 8;
    #[inline(always)]
    fn encoded_len(&self) -> usize {
        1
    }
    #[inline(always)]
    unsafe fn encode(&self, dst: *mut u8) -> *mut u8 {
        // SAFETY: the caller provides `encoded_len()` = 1 writable byte at `dst`.
        unsafe {
            dst.write(*self as u8);
            dst.add(1)
        }
    }
    fn usdt_word(&self, _buf: &mut [u8; MAX_STR + 1]) -> u64 {
        *self as u64
    }
}

/// Writes `u16 len` and the first `len` = min(`b.len()`, [`MAX_STR`]) bytes of `b` at `dst`.
///
/// # Safety
/// `dst` must be valid for `2 + min(b.len(), MAX_STR)` bytes.
#[inline(always)]
unsafe fn encode_bytes(b: &[u8], dst: *mut u8) -> *mut u8 {
    let n = b.len().min(MAX_STR);
    // SAFETY: `dst` has room for the 2-byte length and `n` bytes (the caller's contract); `b` has `n`.
    unsafe {
        (dst as *mut [u8; 2]).write_unaligned((n as u16).to_le_bytes());
        core::ptr::copy_nonoverlapping(b.as_ptr(), dst.add(2), n);
        dst.add(2 + n)
    }
}

fn usdt_bytes(b: &[u8], buf: &mut [u8; MAX_STR + 1]) -> u64 {
    let n = b.len().min(MAX_STR);
    buf[..n].copy_from_slice(&b[..n]);
    buf[n] = 0;
    buf.as_ptr() as u64
}

/// The longest prefix of `s` of at most [`MAX_STR`] bytes that ends at a character boundary.
#[inline(always)]
fn str_cut(s: &str) -> &[u8] {
    let mut n = s.len().min(MAX_STR);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s.as_bytes()[..n]
}

// SAFETY: u16 length + at most MAX_STR bytes, as encoded_len says.
unsafe impl Arg for &str {
    const TYPE: &'static str = "str";
    const USDT_SIZE: i32 = 8;
    #[inline(always)]
    fn encoded_len(&self) -> usize {
        2 + str_cut(self).len()
    }
    #[inline(always)]
    unsafe fn encode(&self, dst: *mut u8) -> *mut u8 {
        // SAFETY: the caller provides `encoded_len()` = 2 + the cut length writable bytes at `dst`.
        unsafe { encode_bytes(str_cut(self), dst) }
    }
    fn usdt_word(&self, buf: &mut [u8; MAX_STR + 1]) -> u64 {
        usdt_bytes(self.as_bytes(), buf)
    }
}

// SAFETY: u16 length + at most MAX_STR bytes, as encoded_len says.
unsafe impl Arg for &[u8] {
    const TYPE: &'static str = "bytes";
    const USDT_SIZE: i32 = 8;
    #[inline(always)]
    fn encoded_len(&self) -> usize {
        2 + self.len().min(MAX_STR)
    }
    #[inline(always)]
    unsafe fn encode(&self, dst: *mut u8) -> *mut u8 {
        // SAFETY: the caller provides `encoded_len()` = 2 + min(len, MAX_STR) writable bytes at `dst`.
        unsafe { encode_bytes(self, dst) }
    }
    fn usdt_word(&self, buf: &mut [u8; MAX_STR + 1]) -> u64 {
        usdt_bytes(self, buf)
    }
}

/// Scratch space for one string argument of an SDT probe.
#[doc(hidden)]
pub fn usdt_buf() -> [u8; MAX_STR + 1] {
    [0; MAX_STR + 1]
}
