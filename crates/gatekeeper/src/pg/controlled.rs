//! The transaction gate over the admission controller: the one `core::admission`
//! controller, driven by the same code as the HTTP proxy ([`crate::admit`]), with the
//! PostgreSQL driver's transactions as its requests.
//!
//! A transaction's [`RequestType`] is named (`tag:…`, `fp:…`) into the bounded type
//! registry the HTTP side uses, so `/metrics` shows the types, their estimates and spread.
//! Its cost sample is the time from admission to the server's idle `ReadyForQuery`
//! (what holds the connection and the locks), or with `--estimate-basis cpu` the processor
//! time its backend spent meanwhile ([`super::backend_cpu`]); a transaction cut short (the client or the
//! upstream closed) releases its charge without a sample.

use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use shortfirst_core::admission::{Basis, Refusal};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::gate::{NotAdmitted, TxnGate};
use super::reqtype::RequestType;
use crate::admit::{self, timer_task, Admission, Arrived, Permit};
use crate::config::ProxyConfig;
use crate::metrics::{ProxyOutcome, Snapshot};
use crate::GatekeeperError;

/// Admits transactions through the admission controller of a [`ProxyConfig`] (capacity,
/// policy, queue and wait limits, type bound, estimator).
pub struct ControllerGate {
    adm: Arc<Admission>,
    /// Expiry of waits, aging re-picks, auto-capacity ticks; stopped with the gate.
    timer: JoinHandle<()>,
    /// The processor-time cost basis: transactions are sampled at their backend's CPU time.
    cpu_basis: bool,
}

/// The permit of [`ControllerGate`]: the admitted transaction's ticket and when it started.
pub struct ControllerPermit {
    permit: Option<Permit>,
    admitted: Instant,
}

impl ControllerGate {
    /// The gate of `cfg`. Starts its timer task: call inside a tokio runtime.
    pub fn new(cfg: &ProxyConfig) -> Result<Self, GatekeeperError> {
        let adm = Admission::new(cfg)?;
        let timer = tokio::spawn(timer_task(adm.clone()));
        Ok(ControllerGate { adm, timer, cpu_basis: cfg.estimator.basis == Basis::Cpu })
    }

    /// The controller's state and the metrics' view of it.
    pub fn snapshot(&self) -> Snapshot {
        self.adm.snapshot()
    }

    /// The Prometheus text of `/metrics`.
    pub fn metrics_text(&self) -> String {
        self.adm.metrics.render(&self.adm.snapshot())
    }

    /// The Prometheus text of `/metrics` for a snapshot the driver completed.
    pub fn render(&self, snap: &Snapshot) -> String {
        self.adm.metrics.render(snap)
    }

    /// Apply a reloaded configuration's capacity and policy without dropping anything:
    /// known types keep their estimates, queued transactions their places.
    pub fn reload(&self, cfg: &ProxyConfig) -> Result<(), GatekeeperError> {
        self.adm.reload(cfg.rules.clone(), &cfg.capacity, cfg.policy)
    }

    /// Begin shutting down: every queued transaction is refused, and so is every later one;
    /// admitted transactions run on.
    pub fn shut_down(&self) {
        self.adm.begin_shutdown();
    }

    fn admitted(&self, permit: Permit, waited_us: u64) -> ControllerPermit {
        self.adm.metrics.admitted.fetch_add(1, Relaxed);
        self.adm.metrics.types[permit.type_index].queue_wait.observe_us(waited_us);
        ControllerPermit { permit: Some(permit), admitted: Instant::now() }
    }
}

impl Drop for ControllerGate {
    fn drop(&mut self) {
        self.timer.abort();
    }
}

impl Drop for ControllerPermit {
    fn drop(&mut self) {
        // Not handed back through `finish`: the transaction was cut short.
        if let Some(p) = self.permit.take() {
            if let Some(tm) = p.shared.metrics.types.get(p.type_index) {
                tm.count(ProxyOutcome::ClientGone);
            }
        }
    }
}

impl TxnGate for ControllerGate {
    type Permit = ControllerPermit;

    fn admit(
        &self,
        ty: &RequestType,
        cancel: oneshot::Receiver<()>,
    ) -> impl Future<Output = Result<ControllerPermit, NotAdmitted>> + Send {
        let type_index = self.adm.classifier.intern(&ty.name());
        async move {
            let (permit, waited_us) = match admit::arrive(&self.adm, type_index) {
                Ok(Arrived::Admitted { permit, waited_us }) => (permit, waited_us),
                Ok(Arrived::Queued(id, rx)) => {
                    // A sender dropped without sending is no cancel.
                    let cancel = async {
                        if cancel.await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    };
                    admit::wait(&self.adm, id, rx, cancel).await?
                }
                Ok(Arrived::Refused(reason)) => return Err(NotAdmitted::Refused(reason)),
                Err(e) => {
                    // Cannot happen: the registry's types are the controller's.
                    tracing::error!("gatekeeper: {e}");
                    return Err(NotAdmitted::Refused(Refusal::ShuttingDown));
                }
            };
            Ok(self.admitted(permit, waited_us))
        }
    }

    fn finish(&self, mut permit: ControllerPermit, backend_cpu_us: Option<u64>) {
        if let Some(p) = permit.permit.take() {
            let us = permit.admitted.elapsed().as_micros() as u64;
            let tm = &self.adm.metrics.types[p.type_index];
            tm.observe_upstream_us(us);
            tm.count(ProxyOutcome::Ok);
            p.finish_with_cpu(Some(us), backend_cpu_us);
        }
    }

    fn wants_backend_cpu(&self) -> bool {
        self.cpu_basis
    }
}
