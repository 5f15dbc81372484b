//! `ferrotrace flame`.
