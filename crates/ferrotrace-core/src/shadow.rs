//! The shadow frame: what a return hook keeps for each hooked call, in a per-thread (or per-CPU)
//! shadow stack, while the call's return address on the real stack points at the hook's return stub.
//!
//! One layout for every recorder that hooks returns: the runtime's mcount/`__fentry__` hooks (and the
//! unwind information of their return stubs), its allocation stack walk (which reads hooked frames'
//! real return addresses back), and the embedded recorder's hooks. Their assembly takes the field
//! offsets and the size from here as `const` operands, so the layout is written down once.
//!
//! ```
//! use ferrotrace_core::shadow::ShadowFrame;
//!
//! assert_eq!(ShadowFrame::SIZE, 24);
//! assert_eq!((ShadowFrame::RET, ShadowFrame::SLOT, ShadowFrame::WORD), (0, 8, 16));
//! ```

/// One hooked call. Frames are pushed by the hook at a call's entry and popped by its return stub;
/// the stack grows upward, the top pointer pointing one past the last frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ShadowFrame {
    /// The real return address, which the hook replaced with its return stub.
    pub ret: u64,
    /// The address of the stack slot that held it: how the return stub (and an unwinder, a stack
    /// walk) tells which frame is returning.
    pub slot: u64,
    /// The function's record word (the runtime's id and kind bits, the embedded recorder's address).
    pub word: u64,
}

impl ShadowFrame {
    /// Bytes of one frame.
    pub const SIZE: usize = core::mem::size_of::<ShadowFrame>();
    /// Offset of [`ShadowFrame::ret`]. The return stubs' unwind information relies on it being 0 (the
    /// frame's address is where the return address is saved).
    pub const RET: usize = core::mem::offset_of!(ShadowFrame, ret);
    /// Offset of [`ShadowFrame::slot`].
    pub const SLOT: usize = core::mem::offset_of!(ShadowFrame, slot);
    /// Offset of [`ShadowFrame::word`].
    pub const WORD: usize = core::mem::offset_of!(ShadowFrame, word);
}

const _: () = assert!(ShadowFrame::RET == 0 && ShadowFrame::SIZE == 24);
