//! Where admission plugs in: the [`TxnGate`] hook the driver awaits before a transaction's
//! first message goes upstream, and [`AdmitAll`], the gate that admits at once (the
//! pass-through mode, and the tests' gate).
//!
//! Contract: `admit` resolves to a permit when the transaction may start; the driver
//! stores it and, at the transaction's end (ReadyForQuery `I` with nothing outstanding),
//! hands it back through [`TxnGate::finish`]. A transaction cut short (the client or the
//! upstream closes, a limit ends the connection) never reaches `finish`: its permit is
//! dropped, so a permit's `Drop` must release what it holds (and record no cost sample).
//! If the client goes away while `admit` is pending, the driver drops the future: an
//! implementation must treat that as a cancelled wait.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::reqtype::RequestType;

/// The admission hook of the PostgreSQL driver (see the module doc for the contract).
pub trait TxnGate: Send + Sync + 'static {
    type Permit: Send + 'static;
    /// Admit a transaction of type `ty`; resolves when it may start.
    fn admit(&self, ty: &RequestType) -> impl Future<Output = Self::Permit> + Send;
    /// The transaction admitted with `permit` is over: the server reported idle with
    /// nothing outstanding.
    fn finish(&self, permit: Self::Permit) {
        drop(permit);
    }
}

/// Admits every transaction at once and counts them: admitted, finished, in flight.
#[derive(Debug, Default, Clone)]
pub struct AdmitAll {
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    admitted: AtomicU64,
    finished: AtomicU64,
    in_flight: AtomicU64,
}

/// Counts one transaction in flight until dropped.
#[derive(Debug)]
pub struct AdmitAllPermit {
    counts: Arc<Counts>,
}

impl Drop for AdmitAllPermit {
    fn drop(&mut self) {
        self.counts.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl AdmitAll {
    pub fn new() -> Self {
        Self::default()
    }
    /// Transactions admitted so far.
    pub fn admitted(&self) -> u64 {
        self.counts.admitted.load(Ordering::Relaxed)
    }
    /// Transactions that reached their end (idle); the rest of the admitted ones were cut
    /// short or are in flight.
    pub fn finished(&self) -> u64 {
        self.counts.finished.load(Ordering::Relaxed)
    }
    /// Transactions admitted and not over.
    pub fn in_flight(&self) -> u64 {
        self.counts.in_flight.load(Ordering::Relaxed)
    }
}

impl TxnGate for AdmitAll {
    type Permit = AdmitAllPermit;

    fn admit(&self, _ty: &RequestType) -> impl Future<Output = AdmitAllPermit> + Send {
        self.counts.admitted.fetch_add(1, Ordering::Relaxed);
        self.counts.in_flight.fetch_add(1, Ordering::Relaxed);
        std::future::ready(AdmitAllPermit { counts: self.counts.clone() })
    }

    fn finish(&self, permit: AdmitAllPermit) {
        self.counts.finished.fetch_add(1, Ordering::Relaxed);
        drop(permit);
    }
}
