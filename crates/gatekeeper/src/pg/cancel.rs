//! The cancel keys of the connected clients: the (process id, secret key) each one's
//! server sent in BackendKeyData. In session-pinned mode the keys pass through unchanged,
//! so a CancelRequest carrying a known key is forwarded to the upstream as received; one
//! with an unknown key is dropped (PostgreSQL answers neither, so the client cannot tell),
//! which keeps the gatekeeper from relaying cancels for sessions it does not serve.
//! A cancel whose connection's transaction waits for admission is not forwarded: it
//! withdraws the wait through the connection's [`CancelSlot`] (the server has nothing of
//! that transaction to cancel).
//!
//! Bounded: one entry per connected client (the client limit bounds it); an entry is
//! removed when its connection ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;

type Keys = HashMap<(i32, Bytes), (u64, Arc<CancelSlot>)>;

#[derive(Debug, Default, Clone)]
pub struct CancelKeys {
    keys: Arc<Mutex<Keys>>,
}

/// A connection's way to have its waiting transaction cancelled: armed while the
/// transaction waits for admission, fired at most once by a CancelRequest.
#[derive(Debug, Default)]
pub struct CancelSlot(Mutex<Option<oneshot::Sender<()>>>);

impl CancelSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<oneshot::Sender<()>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A wait begins: the receiver resolves if a cancel arrives before [`Self::disarm`].
    pub fn arm(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        *self.lock() = Some(tx);
        rx
    }

    /// The wait is over; true if a cancel fired during it.
    pub fn disarm(&self) -> bool {
        self.lock().take().is_none()
    }

    /// A cancel arrived: true if it withdrew a waiting transaction (else it is the
    /// server's to act on).
    pub fn fire(&self) -> bool {
        self.lock().take().is_some_and(|tx| tx.send(()).is_ok())
    }
}

/// Removes its key when dropped (the connection's end).
#[derive(Debug)]
pub struct KeyGuard {
    keys: CancelKeys,
    key: (i32, Bytes),
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        self.keys.lock().remove(&self.key);
    }
}

impl CancelKeys {
    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        // A panic elsewhere cannot leave the map half-updated: every update is one call.
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the key of client `conn_id` (and its cancel slot) until the guard is dropped.
    pub fn insert(&self, pid: i32, secret: Bytes, conn_id: u64, slot: Arc<CancelSlot>) -> KeyGuard {
        let key = (pid, secret);
        self.lock().insert(key.clone(), (conn_id, slot));
        KeyGuard { keys: self.clone(), key }
    }

    /// The client connection holding this key, and its cancel slot.
    pub fn find(&self, pid: i32, secret: &Bytes) -> Option<(u64, Arc<CancelSlot>)> {
        self.lock().get(&(pid, secret.clone())).cloned()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
