//! shortfirst-load: trace-driven load generation with per-request logs, and the
//! workload models behind it.
//!
//! - [`run`]: the load generator itself (`shortfirst load`): open,
//!   partly-open and closed models over real connections.
//! - [`trace`]: reading traces (our CSV, CLF/Combined access logs, WC98 binary).
//! - [`pg`]: `shortfirst load-pg`, a pgbench-style script's transactions against
//!   PostgreSQL, open or closed loop, that outlive refusals and time out as users do.
//! - [`received`]: body bytes received per 100 ms (`received.csv`).
//! - [`record`]: the per-request output row (`requests.csv`) and its writer,
//!   shared with the simulator and the lab.
//! - [`schedule`]: `--load-schedule`, piecewise-constant rate multipliers
//!   over time and the time warp that applies them to a trace.
//! - [`source_addrs`]: which source address each client identity connects
//!   from (`--source-addrs`), so one process can stand for several client groups.
//! - [`dist`], [`workload`], [`generate`], [`stats`]: size/time distributions,
//!   synthetic workloads, writing them to disk, and trace statistics.

// The wall clock throughout: the generator sends on a real schedule from threads of its
// own (spin loops, blocking sleeps) and measures what real servers do.
#![allow(clippy::disallowed_types)]

pub mod dist;
pub mod generate;
pub mod http;
pub mod pg;
pub mod received;
pub mod record;
pub mod run;
pub mod scale;
pub mod schedule;
pub mod session;
pub mod source_addrs;
pub mod stats;
mod timerfd;
pub mod trace;
pub mod workload;
