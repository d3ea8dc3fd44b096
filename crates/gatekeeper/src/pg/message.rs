//! What the gate reads from messages, parsed on demand from a frame's body, and the few
//! messages the gatekeeper writes itself.
//!
//! Only the fields the transaction tracker and the request type need are read; every
//! message is forwarded as received, parsed or not. A body that does not hold what its
//! type promises is a [`MessageError`] naming the message.

use bytes::{BufMut, Bytes, BytesMut};

use super::frame::cstr;

/// Client message type bytes the gate looks at.
pub mod client {
    pub const QUERY: u8 = b'Q';
    pub const PARSE: u8 = b'P';
    pub const BIND: u8 = b'B';
    pub const EXECUTE: u8 = b'E';
    pub const CLOSE: u8 = b'C';
    pub const DESCRIBE: u8 = b'D';
    pub const SYNC: u8 = b'S';
    pub const FLUSH: u8 = b'H';
    pub const TERMINATE: u8 = b'X';
    pub const FUNCTION_CALL: u8 = b'F';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_FAIL: u8 = b'f';
}

/// Server message type bytes the gate looks at.
pub mod server {
    pub const READY_FOR_QUERY: u8 = b'Z';
    pub const ERROR_RESPONSE: u8 = b'E';
    pub const NOTICE_RESPONSE: u8 = b'N';
    pub const COPY_IN_RESPONSE: u8 = b'G';
    pub const COPY_OUT_RESPONSE: u8 = b'H';
    pub const COPY_BOTH_RESPONSE: u8 = b'W';
    pub const BACKEND_KEY_DATA: u8 = b'K';
    pub const PARAMETER_STATUS: u8 = b'S';
    pub const COMMAND_COMPLETE: u8 = b'C';
    pub const NOTIFICATION_RESPONSE: u8 = b'A';
    pub const AUTHENTICATION: u8 = b'R';
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {message} message: {why}")]
pub struct MessageError {
    pub message: &'static str,
    pub why: &'static str,
}

fn bad(message: &'static str, why: &'static str) -> MessageError {
    MessageError { message, why }
}

fn take_cstr(body: &mut &[u8], message: &'static str) -> Result<String, MessageError> {
    cstr(body).ok_or_else(|| bad(message, "string not NUL-terminated"))
}

fn take_i32(body: &mut &[u8], message: &'static str) -> Result<i32, MessageError> {
    if body.len() < 4 {
        return Err(bad(message, "truncated integer"));
    }
    let v = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    *body = &body[4..];
    Ok(v)
}

/// Query: the SQL text.
pub fn query_text(body: &[u8]) -> Result<String, MessageError> {
    take_cstr(&mut &body[..], "Query")
}

/// Parse: (statement name, SQL text).
pub fn parse(body: &[u8]) -> Result<(String, String), MessageError> {
    let mut b = body;
    let name = take_cstr(&mut b, "Parse")?;
    let text = take_cstr(&mut b, "Parse")?;
    Ok((name, text))
}

/// Bind: (portal name, statement name).
pub fn bind(body: &[u8]) -> Result<(String, String), MessageError> {
    let mut b = body;
    let portal = take_cstr(&mut b, "Bind")?;
    let statement = take_cstr(&mut b, "Bind")?;
    Ok((portal, statement))
}

/// Execute: the portal name.
pub fn execute(body: &[u8]) -> Result<String, MessageError> {
    take_cstr(&mut &body[..], "Execute")
}

/// Close: (`b'S'` statement or `b'P'` portal, name).
pub fn close(body: &[u8]) -> Result<(u8, String), MessageError> {
    let (&kind, mut b) = body.split_first().ok_or_else(|| bad("Close", "empty body"))?;
    if kind != b'S' && kind != b'P' {
        return Err(bad("Close", "kind is neither 'S' nor 'P'"));
    }
    Ok((kind, take_cstr(&mut b, "Close")?))
}

/// ReadyForQuery's transaction status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxStatus {
    /// `I`: not in a transaction block.
    Idle,
    /// `T`: in a transaction block.
    InBlock,
    /// `E`: in a failed transaction block (until ROLLBACK).
    Failed,
}

pub fn ready_for_query(body: &[u8]) -> Result<TxStatus, MessageError> {
    match body {
        [b'I'] => Ok(TxStatus::Idle),
        [b'T'] => Ok(TxStatus::InBlock),
        [b'E'] => Ok(TxStatus::Failed),
        _ => Err(bad("ReadyForQuery", "status is not one byte of I, T or E")),
    }
}

/// The fields of an ErrorResponse or NoticeResponse the gatekeeper reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorFields {
    /// `V` (or `S` from servers before 9.6): ERROR, FATAL, PANIC, WARNING, NOTICE, ...
    pub severity: String,
    /// `C`: the SQLSTATE.
    pub code: String,
    /// `M`: the primary message.
    pub message: String,
}

pub fn error_fields(body: &[u8]) -> Result<ErrorFields, MessageError> {
    let mut b = body;
    let mut f = ErrorFields::default();
    loop {
        let (&code, rest) = b.split_first().ok_or_else(|| bad("ErrorResponse", "fields not terminated"))?;
        b = rest;
        if code == 0 {
            return Ok(f);
        }
        let value = take_cstr(&mut b, "ErrorResponse")?;
        match code {
            b'V' => f.severity = value,
            b'S' if f.severity.is_empty() => f.severity = value,
            b'C' => f.code = value,
            b'M' => f.message = value,
            _ => {}
        }
    }
}

/// BackendKeyData: (process id, secret key; 4 bytes in protocol 3.0, longer in 3.2).
pub fn backend_key_data(body: &[u8]) -> Result<(i32, Bytes), MessageError> {
    let mut b = body;
    let pid = take_i32(&mut b, "BackendKeyData")?;
    if b.len() < 4 || b.len() > super::frame::MAX_CANCEL_KEY_BYTES {
        return Err(bad("BackendKeyData", "secret key is not 4..=256 bytes"));
    }
    Ok((pid, Bytes::copy_from_slice(b)))
}

/// ParameterStatus: (name, value).
pub fn parameter_status(body: &[u8]) -> Result<(String, String), MessageError> {
    let mut b = body;
    Ok((take_cstr(&mut b, "ParameterStatus")?, take_cstr(&mut b, "ParameterStatus")?))
}

/// CommandComplete: the command tag (`SELECT 3`, `BEGIN`, `COPY 10`, ...).
pub fn command_complete(body: &[u8]) -> Result<String, MessageError> {
    take_cstr(&mut &body[..], "CommandComplete")
}

/// NotificationResponse: (sending backend's pid, channel, payload).
pub fn notification(body: &[u8]) -> Result<(i32, String, String), MessageError> {
    let mut b = body;
    let pid = take_i32(&mut b, "NotificationResponse")?;
    Ok((pid, take_cstr(&mut b, "NotificationResponse")?, take_cstr(&mut b, "NotificationResponse")?))
}

/// CopyInResponse / CopyOutResponse: (overall format 0 text / 1 binary, column count).
pub fn copy_response(body: &[u8]) -> Result<(u8, u16), MessageError> {
    match body {
        [format, hi, lo, ..] => Ok((*format, u16::from_be_bytes([*hi, *lo]))),
        _ => Err(bad("CopyResponse", "truncated header")),
    }
}

fn typed(tag: u8, body: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u8(tag);
    b.put_i32(0);
    body(&mut b);
    // A message the gatekeeper writes is a few hundred bytes at most.
    let len = i32::try_from(b.len() - 1).expect("own message under 2 GiB");
    b[1..5].copy_from_slice(&len.to_be_bytes());
    b.freeze()
}

fn put_cstr(b: &mut BytesMut, s: &str) {
    b.put_slice(s.as_bytes());
    b.put_u8(0);
}

/// CommandComplete with `tag`.
pub fn encode_command_complete(tag: &str) -> Bytes {
    typed(b'C', |b| put_cstr(b, tag))
}

/// ReadyForQuery with `status`.
pub fn encode_ready_for_query(status: TxStatus) -> Bytes {
    let s = match status {
        TxStatus::Idle => b'I',
        TxStatus::InBlock => b'T',
        TxStatus::Failed => b'E',
    };
    typed(b'Z', |b| b.put_u8(s))
}

/// ErrorResponse with severity, SQLSTATE, message and an optional hint.
pub fn encode_error(severity: &str, code: &str, message: &str, hint: Option<&str>) -> Bytes {
    typed(b'E', |b| {
        for (k, v) in [(b'S', severity), (b'V', severity), (b'C', code), (b'M', message)] {
            b.put_u8(k);
            put_cstr(b, v);
        }
        if let Some(h) = hint {
            b.put_u8(b'H');
            put_cstr(b, h);
        }
        b.put_u8(0);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::frame::next_frame;
    use postgres_protocol::message::backend::Message;
    use postgres_protocol::message::frontend;

    fn one(b: &mut BytesMut) -> crate::pg::frame::Frame {
        next_frame(b, 1 << 20).unwrap().unwrap()
    }

    #[test]
    fn client_messages_written_by_postgres_protocol() {
        let mut b = BytesMut::new();
        frontend::parse("s1", "SELECT $1", [23], &mut b).unwrap();
        frontend::bind(
            "p1",
            "s1",
            [1],
            [7i32],
            |v, buf| {
                buf.put_i32(v);
                Ok(postgres_protocol::IsNull::No)
            },
            [1],
            &mut b,
        )
        .map_err(|_| ())
        .unwrap();
        frontend::execute("p1", 0, &mut b).unwrap();
        frontend::close(b'S', "s1", &mut b).unwrap();
        assert_eq!(parse(one(&mut b).body()).unwrap(), ("s1".into(), "SELECT $1".into()));
        assert_eq!(bind(one(&mut b).body()).unwrap(), ("p1".into(), "s1".into()));
        assert_eq!(execute(one(&mut b).body()).unwrap(), "p1");
        assert_eq!(close(one(&mut b).body()).unwrap(), (b'S', "s1".into()));
        assert!(query_text(b"no terminator").is_err());
    }

    #[test]
    fn own_messages_parse_back_with_postgres_protocol() {
        let mut b = BytesMut::new();
        b.extend_from_slice(&encode_command_complete("BEGIN"));
        b.extend_from_slice(&encode_ready_for_query(TxStatus::InBlock));
        b.extend_from_slice(&encode_error("ERROR", "53300", "queue full", Some("retry later")));
        match Message::parse(&mut b).unwrap().unwrap() {
            Message::CommandComplete(c) => assert_eq!(c.tag().unwrap(), "BEGIN"),
            _ => panic!("not CommandComplete"),
        }
        match Message::parse(&mut b).unwrap().unwrap() {
            Message::ReadyForQuery(r) => assert_eq!(r.status(), b'T'),
            _ => panic!("not ReadyForQuery"),
        }
        let e = encode_error("ERROR", "53300", "queue full", None);
        let f = error_fields(&e[5..]).unwrap();
        assert_eq!((f.severity.as_str(), f.code.as_str(), f.message.as_str()), ("ERROR", "53300", "queue full"));
        match Message::parse(&mut b).unwrap().unwrap() {
            Message::ErrorResponse(_) => {}
            _ => panic!("not ErrorResponse"),
        }
    }

    #[test]
    fn server_fields() {
        assert_eq!(ready_for_query(b"E").unwrap(), TxStatus::Failed);
        assert!(ready_for_query(b"X").is_err());
        let mut kd = 77i32.to_be_bytes().to_vec();
        kd.extend_from_slice(&[9, 8, 7, 6]);
        assert_eq!(backend_key_data(&kd).unwrap(), (77, Bytes::from_static(&[9, 8, 7, 6])));
        assert_eq!(parameter_status(b"TimeZone\0UTC\0").unwrap(), ("TimeZone".into(), "UTC".into()));
        assert_eq!(command_complete(b"SELECT 3\0").unwrap(), "SELECT 3");
        let mut n = 5i32.to_be_bytes().to_vec();
        n.extend_from_slice(b"ch\0hello\0");
        assert_eq!(notification(&n).unwrap(), (5, "ch".into(), "hello".into()));
        assert_eq!(copy_response(&[0, 0, 2, 0, 0, 0, 0]).unwrap(), (0, 2));
    }
}
