//! `ferrotrace tui`.
