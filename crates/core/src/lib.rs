//! shortfirst's decision logic, pure: no sockets, no clock, no threads.
//!
//! Time and events come in as parameters; decisions go out as values. The server,
//! the gatekeeper proxy and the simulator are thin drivers around this crate, so a
//! policy behaves identically when measured and when simulated.
//!
//! Must not know: sockets, file descriptors, tokio, the wall clock, tc, HTTP.

pub mod admission;
pub mod bands;
pub mod dispatch;
pub mod names;
pub mod policy;
pub mod srrt;
pub mod stream_sched;
pub mod units;
pub mod uplink_sched;

pub use bands::{Band, BandMap, Cutoffs, Response};
