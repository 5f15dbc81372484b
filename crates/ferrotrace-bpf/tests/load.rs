//! The verifier accepts the programs, and they unwind this very process in the kernel (root needed).

use std::mem::MaybeUninit;

use ferrotrace_bpf::{Bpf, OpenObject};

#[test]
fn verifier_accepts_the_programs() {
    let mut storage = MaybeUninit::<OpenObject>::uninit();
    let bpf = Bpf::load(&mut storage).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(bpf.stats().samples, 0);
}
