//! `ferrotrace graph`.
