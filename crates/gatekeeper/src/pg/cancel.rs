//! The cancel keys of the connected clients: the (process id, secret key) each one's
//! server sent in BackendKeyData. In session-pinned mode the keys pass through unchanged,
//! so a CancelRequest carrying a known key is forwarded to the upstream as received; one
//! with an unknown key is dropped (PostgreSQL answers neither, so the client cannot tell),
//! which keeps the gatekeeper from relaying cancels for sessions it does not serve.
//!
//! Bounded: one entry per connected client (the client limit bounds it); an entry is
//! removed when its connection ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

#[derive(Debug, Default, Clone)]
pub struct CancelKeys {
    keys: Arc<Mutex<HashMap<(i32, Bytes), u64>>>,
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
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(i32, Bytes), u64>> {
        // A panic elsewhere cannot leave the map half-updated: every update is one call.
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the key of client `conn_id` until the guard is dropped.
    pub fn insert(&self, pid: i32, secret: Bytes, conn_id: u64) -> KeyGuard {
        let key = (pid, secret);
        self.lock().insert(key.clone(), conn_id);
        KeyGuard { keys: self.clone(), key }
    }

    /// The client connection holding this key.
    pub fn find(&self, pid: i32, secret: &Bytes) -> Option<u64> {
        self.lock().get(&(pid, secret.clone())).copied()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
