//! A TPC-W-style online bookstore on PostgreSQL.
//!
//! The bookstore is the real three-tier shop that the Gatekeeper experiment
//! (Elnikety et al. 2004, §4–§5) runs against: TPC-W's schema ([`schema`]), a
//! deterministic scaled data generator ([`gen`]), the 14 web interactions with
//! TPC-W's queries ([`interactions`]), rendered as HTML ([`html`]) and served
//! over HTTP/1.1 ([`server`]) with an optional per-request log ([`reqlog`]), plus a no-load cost probe ([`costs`]) for the
//! paper's Table 1 comparison.
//!
//! What the bookstore must NOT know: anything about admission control,
//! scheduling or the load generator. It is the unmodified backend tier; the
//! Gatekeeper proxy sits in front of it and treats it as a black box.

// The wall clock: the bookstore is the real backend, and what it times (service times,
// cost probes) is real work on a real database.
#![allow(clippy::disallowed_types)]

pub mod costs;
pub mod db;
pub mod error;
pub mod gen;
pub mod html;
pub mod interactions;
pub mod reqlog;
pub mod schema;
pub mod server;
pub mod words;

pub use error::Error;
