//! `ferrotrace dump`.
