//! `shortfirst load-pg`: transactions of a pgbench-style script against PostgreSQL (or a
//! proxy in front of it), open or closed loop, with one logged row per transaction.
//!
//! - [`script`]: the script language (pgbench's `\set … random(…)` and `:NAME`).
//! - [`run`]: the connections, the schedule and the timeouts.
//! - [`log`]: `transactions.csv` and what became of each transaction.

pub mod log;
pub mod run;
pub mod script;

pub use log::{Outcome, TxnRow};
pub use run::{run, Config, PgLoadError, Summary};
pub use script::{Script, ScriptError};
/// A connection string, parsed (`postgres://…` or libpq's `key=value` form).
pub use tokio_postgres::Config as ConnectConfig;
