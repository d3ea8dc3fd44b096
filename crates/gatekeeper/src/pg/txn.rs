//! The transaction tracker of one client connection: a pure state machine. Client and
//! server messages in (in the order each side sent them), steps out: forward, start a
//! transaction of type T (admit, then forward), answer locally, swallow, transaction over.
//!
//! Rules (the unit of admission is a transaction):
//! - When no transaction is open and nothing is outstanding, a simple Query holding one
//!   statement that opens a block (`BEGIN`, `START TRANSACTION`, with modes) is *deferred*:
//!   answered locally (`CommandComplete` + `ReadyForQuery 'T'`) and held. The next
//!   client message that needs the server starts the transaction, typed by its statement;
//!   the held `BEGIN` is sent first and its answer (CommandComplete, ReadyForQuery) is
//!   swallowed (anything else the server sends meanwhile, such as an ErrorResponse, a
//!   NoticeResponse or a NotificationResponse, is forwarded). While deferred: a
//!   lone `COMMIT`/`ROLLBACK` is answered locally and ends the empty block; a `Sync` is
//!   answered `Z 'T'`; `Flush` and `Terminate` are forwarded.
//! - Otherwise, when no transaction is open, a Query, Bind, Execute or FunctionCall starts
//!   one (the Query's text, the Bind's statement or the Execute's portal gives the type).
//!   Parse, Describe, Close, Sync and Flush alone do not: preparing is not admitted.
//! - A transaction ends at a `ReadyForQuery 'I'` that answers the last outstanding Query,
//!   Sync or FunctionCall with no extended-protocol batch open (messages since the last
//!   Sync), or when the connection closes. A pipeline is one unit: it ends when all of it
//!   is answered. `'T'` and `'E'` keep it open until COMMIT/ROLLBACK.
//! - COPY FROM STDIN: the server ignores `Sync` while in copy-in mode, so when the client
//!   ends a copy (CopyDone/CopyFail) after the server's CopyInResponse, the Syncs it sent
//!   since the COPY's Execute are no longer outstanding.
//!
//! - A refused transaction (nothing of it forwarded) is undone and answered as an error:
//!   see [`refuse`].
//!
//! Statement names are mapped to their type at Parse (and portals at Bind) in tables of at
//! most `max_prepared` entries each; names past the bound are not recorded, and a Bind of
//! one gets type [`RequestType::Unknown`]. The unnamed statement and portal always are.

use std::collections::HashMap;

use bytes::Bytes;

use super::message::{self, client, encode_command_complete, encode_ready_for_query, server, MessageError, TxStatus};
use super::reqtype::{classify, lone_begin, lone_end, RequestType, TypeSource};

mod refuse;
pub use refuse::Mark;

/// What to do with a client message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientStep {
    Forward,
    /// A transaction starts here: admit `ty`, then forward `held` (a deferred BEGIN) if
    /// any, then the message.
    Start {
        ty: RequestType,
        held: Option<Bytes>,
    },
    /// Do not forward; send these bytes to the client instead.
    Answer(Bytes),
    /// Do not forward, answer nothing (skipping to a `Sync` after a refusal).
    Drop,
}

/// What to do with a server message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerStep {
    Forward,
    /// Do not forward (the answer to a deferred BEGIN, already given locally).
    Swallow,
    /// Forward it; the transaction is over (release its admission).
    ForwardAndEnd,
}

#[derive(Debug)]
pub struct Tracker {
    source: TypeSource,
    app_name: Option<String>,
    max_prepared: usize,
    /// A transaction is admitted and not over.
    open: bool,
    /// A deferred BEGIN, as received.
    deferred: Option<Bytes>,
    /// ReadyForQuery messages the server still owes (Query, Sync, FunctionCall sent).
    outstanding: u32,
    /// Extended-protocol messages sent since the last Sync.
    batch_open: bool,
    /// Syncs sent since the last Execute or Query (ignored by a server in copy-in mode).
    syncs_since_exec: u32,
    /// The server has entered copy-in mode since the last Execute or Query.
    copy_in: bool,
    /// Server messages to swallow up to and including the next ReadyForQuery.
    swallowing: bool,
    statements: HashMap<String, RequestType>,
    portals: HashMap<String, RequestType>,
    /// The transaction after a deferred BEGIN was refused: the block is failed, locally
    /// (see [`refuse`]).
    aborted: bool,
    /// Client messages are dropped up to the next Sync (see [`refuse`]).
    skipping: bool,
    /// What client messages have added to `outstanding`, in total (wrapping): a refusal
    /// takes back its batch's share while the server's answers to earlier work go on
    /// counting down.
    client_added: u32,
}

impl Tracker {
    pub fn new(source: TypeSource, app_name: Option<String>, max_prepared: usize) -> Self {
        Tracker {
            source,
            app_name,
            max_prepared,
            open: false,
            deferred: None,
            outstanding: 0,
            batch_open: false,
            syncs_since_exec: 0,
            copy_in: false,
            swallowing: false,
            statements: HashMap::new(),
            portals: HashMap::new(),
            aborted: false,
            skipping: false,
            client_added: 0,
        }
    }

    /// A transaction is admitted and not over.
    pub fn in_transaction(&self) -> bool {
        self.open
    }

    /// The client is inside a transaction (admitted or deferred) and owes the next move:
    /// nothing is outstanding. This is the time the idle-in-transaction bound measures.
    pub fn waiting_on_client(&self) -> bool {
        (self.open || self.deferred.is_some())
            && self.outstanding == 0
            && !self.batch_open
            && !self.swallowing
            && !self.skipping
    }

    fn classify(&self, sql: &str) -> RequestType {
        classify(sql, &self.source, self.app_name.as_deref())
    }

    fn remember(map: &mut HashMap<String, RequestType>, max: usize, name: String, ty: RequestType) {
        if name.is_empty() || map.len() < max || map.contains_key(&name) {
            map.insert(name, ty);
        }
    }

    /// The step for one client message (`tag`, `body`).
    pub fn on_client(&mut self, tag: u8, body: &[u8], frame: &Bytes) -> Result<ClientStep, MessageError> {
        let before = self.outstanding;
        let step = self.client_step(tag, body, frame);
        self.client_added = self.client_added.wrapping_add(self.outstanding.wrapping_sub(before));
        step
    }

    fn client_step(&mut self, tag: u8, body: &[u8], frame: &Bytes) -> Result<ClientStep, MessageError> {
        if self.aborted || self.skipping {
            if let Some(step) = self.after_refusal(tag, || message::query_text(body).ok()) {
                return Ok(step);
            }
        }
        if self.deferred.is_some() {
            if let Some(step) = self.while_deferred(tag, body)? {
                return Ok(step);
            }
        }
        let ty = match tag {
            client::QUERY => {
                let sql = message::query_text(body)?;
                self.outstanding += 1;
                self.syncs_since_exec = 0;
                self.copy_in = false;
                if !self.open && self.deferred.is_none() && self.outstanding == 1 && !self.batch_open {
                    if let Some(cmd) = lone_begin(&sql) {
                        self.outstanding -= 1;
                        self.deferred = Some(frame.clone());
                        let mut answer = encode_command_complete(cmd).to_vec();
                        answer.extend_from_slice(&encode_ready_for_query(TxStatus::InBlock));
                        return Ok(ClientStep::Answer(answer.into()));
                    }
                }
                Some(self.classify(&sql))
            }
            client::FUNCTION_CALL => {
                self.outstanding += 1;
                Some(RequestType::Unknown)
            }
            client::SYNC => {
                self.outstanding += 1;
                self.syncs_since_exec += 1;
                self.batch_open = false;
                None
            }
            client::COPY_DONE | client::COPY_FAIL => {
                if self.copy_in {
                    self.outstanding -= self.syncs_since_exec.min(self.outstanding);
                    self.syncs_since_exec = 0;
                    self.copy_in = false;
                }
                None
            }
            client::PARSE | client::BIND | client::EXECUTE | client::CLOSE | client::DESCRIBE => {
                self.batch_open = true;
                self.on_extended(tag, body)?
            }
            // Flush, Terminate, CopyData, authentication responses ('p'): forwarded as is.
            _ => None,
        };
        match ty {
            Some(ty) if !self.open => {
                self.open = true;
                Ok(ClientStep::Start { ty, held: self.release_deferred() })
            }
            _ => Ok(ClientStep::Forward),
        }
    }

    /// Parse, Bind, Execute, Close, Describe: the type if the message starts a transaction.
    fn on_extended(&mut self, tag: u8, body: &[u8]) -> Result<Option<RequestType>, MessageError> {
        let deferred = self.deferred.is_some();
        Ok(match tag {
            client::PARSE => {
                let (name, sql) = message::parse(body)?;
                let ty = self.classify(&sql);
                Self::remember(&mut self.statements, self.max_prepared, name, ty.clone());
                deferred.then_some(ty)
            }
            client::BIND => {
                let (portal, statement) = message::bind(body)?;
                let ty = self.statements.get(&statement).cloned().unwrap_or(RequestType::Unknown);
                Self::remember(&mut self.portals, self.max_prepared, portal, ty.clone());
                Some(ty)
            }
            client::EXECUTE => {
                let portal = message::execute(body)?;
                self.syncs_since_exec = 0;
                self.copy_in = false;
                Some(self.portals.get(&portal).cloned().unwrap_or(RequestType::Unknown))
            }
            client::CLOSE => {
                let (kind, name) = message::close(body)?;
                if !name.is_empty() {
                    let map = if kind == b'S' { &mut self.statements } else { &mut self.portals };
                    map.remove(&name);
                }
                deferred.then_some(RequestType::Unknown)
            }
            // Describe.
            _ => deferred.then_some(RequestType::Unknown),
        })
    }

    fn release_deferred(&mut self) -> Option<Bytes> {
        let held = self.deferred.take()?;
        self.outstanding += 1;
        self.swallowing = true;
        Some(held)
    }

    /// Messages answered locally while a BEGIN is deferred; `None` for the others.
    fn while_deferred(&mut self, tag: u8, body: &[u8]) -> Result<Option<ClientStep>, MessageError> {
        match tag {
            client::SYNC => Ok(Some(ClientStep::Answer(encode_ready_for_query(TxStatus::InBlock)))),
            client::QUERY => {
                let sql = message::query_text(body)?;
                Ok(lone_end(&sql).map(|cmd| {
                    self.deferred = None;
                    let mut answer = encode_command_complete(cmd).to_vec();
                    answer.extend_from_slice(&encode_ready_for_query(TxStatus::Idle));
                    ClientStep::Answer(answer.into())
                }))
            }
            _ => Ok(None),
        }
    }

    /// The step for one server message (`tag`, `body`).
    pub fn on_server(&mut self, tag: u8, body: &[u8]) -> Result<ServerStep, MessageError> {
        match tag {
            server::READY_FOR_QUERY => {
                let status = message::ready_for_query(body)?;
                self.outstanding = self.outstanding.saturating_sub(1);
                if std::mem::take(&mut self.swallowing) {
                    return Ok(ServerStep::Swallow);
                }
                if self.open && self.outstanding == 0 && !self.batch_open && status == TxStatus::Idle {
                    self.open = false;
                    return Ok(ServerStep::ForwardAndEnd);
                }
                Ok(ServerStep::Forward)
            }
            server::COPY_IN_RESPONSE => {
                self.copy_in = true;
                Ok(ServerStep::Forward)
            }
            server::COMMAND_COMPLETE if self.swallowing => Ok(ServerStep::Swallow),
            _ => Ok(ServerStep::Forward),
        }
    }
}

#[cfg(test)]
mod tests;
