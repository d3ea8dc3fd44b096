//! shortfirst-netem: a user-space WAN emulator for kernels without `netem`.
//!
//! Kernel TCP runs through it end to end: in its own network namespace, policy
//! routing sends every forwarded packet into a TUN device; this process holds
//! each packet in the delay line of its (client group, direction) and writes
//! it back when due, where the kernel routes it on. Nothing is terminated or
//! re-segmented.
//!
//! - [`config`]: the TOML file, checked, every error naming file and key;
//! - [`classify`]: IPv4 header -> (group, direction) by longest prefix;
//! - [`line`]: one delay line's decisions (loss, queue limits, rate, delay,
//!   jitter; fifo or reordering) — pure, time in, release time or drop out;
//! - [`emulator`]: all lines and their counters, pure as well;
//! - [`driver`] and [`sys`]: the thin I/O loop (TUN, `ppoll` with ns timeouts,
//!   signalfd) and the counters file.

pub mod classify;
pub mod config;
pub mod driver;
pub mod emulator;
pub mod line;
pub mod sys;

pub use config::{Config, ConfigError};
pub use driver::{run, DriverError, Options};
pub use emulator::{Emulator, Report, Verdict};
