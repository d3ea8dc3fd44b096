//! Where admission plugs in: the [`TxnGate`] hook the driver awaits before a transaction's
//! first message goes upstream, and two gates that need no cost model: [`AdmitAll`]
//! admits at once (the pass-through mode), [`CountLimit`] admits at most N transactions
//! at once, first come first served (what a connection pool in transaction mode does).
//!
//! The gate over the admission controller, [`ControllerGate`], is in [`super::controlled`].
//!
//! Contract: `admit` resolves to a permit when the transaction may start (or to why it
//! may not: refused, or withdrawn by a CancelRequest; the driver then answers the
//! client); the driver
//! stores it and, at the transaction's end (ReadyForQuery `I` with nothing outstanding),
//! hands it back through [`TxnGate::finish`]. A transaction cut short (the client or the
//! upstream closes, a limit ends the connection) never reaches `finish`: its permit is
//! dropped, so a permit's `Drop` must release what it holds (and record no cost sample).
//! If the client goes away while `admit` is pending, the driver drops the future: an
//! implementation must treat that as a cancelled wait.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

pub use crate::admit::NotAdmitted;

use super::reqtype::RequestType;

/// The admission hook of the PostgreSQL driver (see the module doc for the contract).
pub trait TxnGate: Send + Sync + 'static {
    type Permit: Send + 'static;
    /// Admit a transaction of type `ty`; resolves when it may start, or with why it may not.
    /// `cancel` resolving (its sender sending) withdraws a wait: `NotAdmitted::Cancelled`.
    fn admit(
        &self,
        ty: &RequestType,
        cancel: oneshot::Receiver<()>,
    ) -> impl Future<Output = Result<Self::Permit, NotAdmitted>> + Send;
    /// The transaction admitted with `permit` is over: the server reported idle with
    /// nothing outstanding. `backend_cpu_us`: the processor time its backend spent on it,
    /// when [`TxnGate::wants_backend_cpu`] and the driver could measure it.
    fn finish(&self, permit: Self::Permit, backend_cpu_us: Option<u64>) {
        let _ = backend_cpu_us;
        drop(permit);
    }
    /// Whether the driver should measure each transaction's backend processor time (see
    /// [`super::backend_cpu`]): only the processor-time cost basis uses it.
    fn wants_backend_cpu(&self) -> bool {
        false
    }
}

/// Transactions admitted, finished, in flight and waiting, of one gate.
#[derive(Debug, Default)]
pub struct Counts {
    admitted: AtomicU64,
    finished: AtomicU64,
    in_flight: AtomicU64,
    waiting: AtomicU64,
}

impl Counts {
    /// Transactions admitted so far.
    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }
    /// Transactions that reached their end (idle); the rest of the admitted ones were cut
    /// short or are in flight.
    pub fn finished(&self) -> u64 {
        self.finished.load(Ordering::Relaxed)
    }
    /// Transactions admitted and not over.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }
    /// Transactions waiting for admission.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    fn admit(self: &Arc<Self>) -> InFlight {
        self.admitted.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }
}

/// Counts one transaction in flight until dropped.
#[derive(Debug)]
struct InFlight(Arc<Counts>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts one waiting transaction until dropped (admitted or abandoned).
struct Waiting(Arc<Counts>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Admits every transaction at once and counts them.
#[derive(Debug, Default, Clone)]
pub struct AdmitAll {
    counts: Arc<Counts>,
}

/// The permit of [`AdmitAll`]: one transaction in flight until dropped.
#[derive(Debug)]
pub struct AdmitAllPermit {
    _in_flight: InFlight,
}

impl AdmitAll {
    pub fn new() -> Self {
        Self::default()
    }
}

impl std::ops::Deref for AdmitAll {
    type Target = Counts;
    fn deref(&self) -> &Counts {
        &self.counts
    }
}

impl TxnGate for AdmitAll {
    type Permit = AdmitAllPermit;

    fn admit(
        &self,
        _ty: &RequestType,
        _cancel: oneshot::Receiver<()>,
    ) -> impl Future<Output = Result<AdmitAllPermit, NotAdmitted>> + Send {
        std::future::ready(Ok(AdmitAllPermit { _in_flight: self.counts.admit() }))
    }

    fn finish(&self, permit: AdmitAllPermit, _: Option<u64>) {
        self.counts.finished.fetch_add(1, Ordering::Relaxed);
        drop(permit);
    }
}

/// Admits at most `limit` transactions at once; the others wait in arrival order
/// (tokio's semaphore is fair). The wait is bounded only by the transactions ahead.
#[derive(Debug, Clone)]
pub struct CountLimit {
    slots: Arc<Semaphore>,
    counts: Arc<Counts>,
}

/// The permit of [`CountLimit`]: one slot until dropped.
#[derive(Debug)]
pub struct CountLimitPermit {
    _slot: OwnedSemaphorePermit,
    _in_flight: InFlight,
}

impl CountLimit {
    pub fn new(limit: usize) -> Self {
        CountLimit { slots: Arc::new(Semaphore::new(limit)), counts: Arc::default() }
    }
}

impl std::ops::Deref for CountLimit {
    type Target = Counts;
    fn deref(&self) -> &Counts {
        &self.counts
    }
}

impl TxnGate for CountLimit {
    type Permit = CountLimitPermit;

    fn admit(
        &self,
        _ty: &RequestType,
        cancel: oneshot::Receiver<()>,
    ) -> impl Future<Output = Result<CountLimitPermit, NotAdmitted>> + Send {
        let (slots, counts) = (self.slots.clone(), self.counts.clone());
        counts.waiting.fetch_add(1, Ordering::Relaxed);
        let waiting = Waiting(counts.clone());
        async move {
            let slot = tokio::select! {
                // The semaphore lives as long as the gate and is never closed.
                slot = slots.acquire_owned() => slot.expect("the gate's semaphore is never closed"),
                Ok(()) = cancel => return Err(NotAdmitted::Cancelled),
            };
            drop(waiting);
            Ok(CountLimitPermit { _slot: slot, _in_flight: counts.admit() })
        }
    }

    fn finish(&self, permit: CountLimitPermit, _: Option<u64>) {
        self.counts.finished.fetch_add(1, Ordering::Relaxed);
        drop(permit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn count_limit_admits_in_order_and_an_abandoned_wait_leaks_nothing() {
        let gate = CountLimit::new(1);
        let ty = RequestType::Unknown;
        let none = || oneshot::channel().1;
        let first = gate.admit(&ty, none()).await.unwrap();
        let mut second = Box::pin(gate.admit(&ty, none()));
        assert!(futures_util::FutureExt::now_or_never(&mut second).is_none());
        let third = gate.admit(&ty, none());
        assert_eq!((gate.in_flight(), gate.waiting()), (1, 2));
        drop(third);
        assert_eq!(gate.waiting(), 1);
        gate.finish(first, None);
        let second = second.await.unwrap();
        assert_eq!((gate.admitted(), gate.finished(), gate.in_flight(), gate.waiting()), (2, 1, 1, 0));
        drop(second);
        assert_eq!(gate.in_flight(), 0);
        let _again = gate.admit(&ty, none()).await;
    }
}
