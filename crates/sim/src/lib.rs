//! shortfirst-sim: an exact, event-driven simulator of a link (or C servers)
//! running the scheduling policies of [`shortfirst_core::policy`].
//!
//! The simulator is a thin driver: the policies' ranks, the fair-share rule and
//! the band cutoffs are `shortfirst_core`'s, so a simulated result and a measured
//! one differ only by the world. [`engine`] runs jobs through the policy;
//! [`report`] turns outcomes into the load generator's per-request rows and a
//! summary; [`farm`] dispatches jobs to C hosts, each its own link and queue.
//!
//! Must not know: sockets, the wall clock, HTTP, files (the CLI reads and writes them).

pub mod engine;
pub mod farm;
pub mod gatekeeper;
pub mod report;

pub use engine::{simulate, Job, JobTimes, Link, SimError};
