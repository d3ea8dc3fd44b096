//! A refused transaction, for the tracker: nothing of it reached the server (the driver
//! holds a batch back until its admission), so the tracker goes back to where it was
//! before the batch ([`Mark`]) and the client is answered as PostgreSQL answers an error:
//! - an autocommit transaction: `ErrorResponse` and `ReadyForQuery 'I'`; the session goes
//!   on as if the statement had failed;
//! - a transaction after a deferred `BEGIN` (the client already holds `BEGIN`'s answer):
//!   `ErrorResponse` and `ReadyForQuery 'E'`, the block *aborted*: until the client ends it,
//!   every statement is answered `25P02` (as PostgreSQL does in a failed block), and its
//!   `COMMIT` or `ROLLBACK` is answered `ROLLBACK` with `ReadyForQuery 'I'`, all locally (the
//!   server never saw the `BEGIN`);
//! - a batch the driver cut at a `Flush` (the client waits for answers before its `Sync`):
//!   the `ErrorResponse` now, then every message up to the `Sync` is dropped and the `Sync`
//!   answered `ReadyForQuery`, as the server skips to `Sync` after an error.

use bytes::Bytes;

use super::{ClientStep, Tracker};
use crate::pg::message::{client, encode_command_complete, encode_error, encode_ready_for_query, TxStatus};
use crate::pg::reqtype::lone_end;

const ABORTED: &str = "current transaction is aborted, commands ignored until end of transaction block";

/// The tracker's state before a batch, to return to if the batch is refused (the
/// client's side of it: what the server answers meanwhile still counts).
#[derive(Debug, Clone)]
pub struct Mark {
    open: bool,
    deferred: Option<Bytes>,
    client_added: u32,
    batch_open: bool,
    syncs_since_exec: u32,
    copy_in: bool,
    swallowing: bool,
}

impl Tracker {
    /// Where the tracker is now (taken before a batch's first message).
    pub fn mark(&self) -> Mark {
        Mark {
            open: self.open,
            deferred: self.deferred.clone(),
            client_added: self.client_added,
            batch_open: self.batch_open,
            syncs_since_exec: self.syncs_since_exec,
            copy_in: self.copy_in,
            swallowing: self.swallowing,
        }
    }

    /// The batch since `mark` was refused with `error` (an `ErrorResponse`) and not
    /// forwarded; `to_sync`: the batch ended with its `Sync` (or was one Query). Returns
    /// the bytes to answer the client with.
    pub fn refuse(&mut self, mark: Mark, error: Bytes, to_sync: bool) -> Bytes {
        self.open = mark.open;
        self.deferred = mark.deferred;
        // The server may have answered earlier work meanwhile: take back only the batch's.
        let added = self.client_added.wrapping_sub(mark.client_added);
        self.outstanding = self.outstanding.saturating_sub(added);
        self.client_added = mark.client_added;
        self.batch_open = mark.batch_open;
        self.syncs_since_exec = mark.syncs_since_exec;
        self.copy_in = mark.copy_in;
        self.swallowing = mark.swallowing;
        self.aborted = self.deferred.is_some();
        if !to_sync {
            self.skipping = true;
            return error;
        }
        [error, encode_ready_for_query(self.status())].concat().into()
    }

    /// The status the client is told while the server is not involved.
    fn status(&self) -> TxStatus {
        match (self.aborted, self.deferred.is_some()) {
            (true, _) => TxStatus::Failed,
            (false, true) => TxStatus::InBlock,
            (false, false) => TxStatus::Idle,
        }
    }

    /// Client messages after a refusal that the server must not see; `None`: the usual
    /// rules apply.
    pub(super) fn after_refusal(&mut self, tag: u8, sql: impl FnOnce() -> Option<String>) -> Option<ClientStep> {
        if tag == client::TERMINATE || tag == client::FLUSH {
            return None;
        }
        if self.skipping {
            if tag != client::SYNC {
                return Some(ClientStep::Drop);
            }
            self.skipping = false;
            return Some(ClientStep::Answer(encode_ready_for_query(self.status())));
        }
        if !self.aborted {
            return None;
        }
        let error = || encode_error("ERROR", "25P02", ABORTED, None);
        Some(ClientStep::Answer(match tag {
            client::SYNC => encode_ready_for_query(TxStatus::Failed),
            client::QUERY if sql().is_some_and(|s| lone_end(&s).is_some()) => {
                self.aborted = false;
                self.deferred = None;
                [encode_command_complete("ROLLBACK"), encode_ready_for_query(TxStatus::Idle)].concat().into()
            }
            client::QUERY | client::FUNCTION_CALL => {
                [error(), encode_ready_for_query(TxStatus::Failed)].concat().into()
            }
            _ => {
                // An extended-protocol message: the error, then skip to the Sync.
                self.skipping = true;
                error()
            }
        }))
    }
}
