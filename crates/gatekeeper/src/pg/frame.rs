//! Framing of the PostgreSQL byte stream (protocol 3.x), sans I/O.
//!
//! Two phases, each a function over a `BytesMut` the caller appends socket reads to:
//! - [`next_startup`]: the first message of a connection (and the one after an SSL or
//!   GSSENC refusal) has no type byte: `i32 length` (including itself), then `i32 code`.
//! - [`next_frame`]: every later message, in both directions: `u8 type`, `i32 length`
//!   (including itself, not the type byte), then the body.
//!
//! A frame is handed out as a `Bytes` split off the input (no copy, no re-encoding), so
//! what is forwarded is byte-for-byte what was received. A length header is checked as
//! soon as it is complete: a message longer than the limit is refused before its body
//! is buffered, so the buffer never holds more than one message of at most the limit
//! plus one read.

use bytes::{Buf, Bytes, BytesMut};

/// Longest startup-phase message accepted: PostgreSQL's own limit
/// (`MAX_STARTUP_PACKET_LENGTH` in its `pqcomm.h`).
pub const MAX_STARTUP_BYTES: usize = 10_000;
/// Protocol 3.0 as sent in a StartupMessage (major 3 in the high 16 bits, minor 0).
pub const PROTOCOL_3_0: i32 = 3 << 16;
/// The request codes of the startup phase (PostgreSQL's `pqcomm.h`).
pub const SSL_REQUEST_CODE: i32 = 80_877_103;
pub const GSSENC_REQUEST_CODE: i32 = 80_877_104;
pub const CANCEL_REQUEST_CODE: i32 = 80_877_102;
/// Longest cancel key accepted (protocol 3.2 allows up to 256 bytes; 3.0 sends 4).
pub const MAX_CANCEL_KEY_BYTES: usize = 256;

/// What can be wrong with a byte stream. Each names the message and the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("message '{tag}' declares {len_bytes} bytes, more than the limit of {max_bytes}")]
    TooLong { tag: char, len_bytes: usize, max_bytes: usize },
    #[error("message '{tag}' declares an impossible length {len} (at least 4)")]
    BadLength { tag: char, len: i32 },
    #[error("startup message declares {len_bytes} bytes (allowed 8..=10000)")]
    BadStartupLength { len_bytes: i64 },
    #[error("unsupported frontend protocol {major}.{minor}: the gatekeeper speaks 3.x")]
    UnsupportedVersion { major: u16, minor: u16 },
    #[error("startup message: {0}")]
    BadStartup(String),
    #[error("cancel request of {len_bytes} bytes (expected 12 + a key of 4..=256 bytes)")]
    BadCancel { len_bytes: usize },
}

/// One typed-phase message: its type byte and the whole message as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Type byte + length + body, exactly as received.
    pub bytes: Bytes,
}

impl Frame {
    pub fn tag(&self) -> u8 {
        self.bytes[0]
    }
    /// The body (after the type byte and the length).
    pub fn body(&self) -> &[u8] {
        &self.bytes[5..]
    }
}

/// A parsed startup-phase message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupFrame {
    /// A StartupMessage: the protocol version and its parameters, and the bytes to forward.
    Startup {
        bytes: Bytes,
        minor: u16,
        params: Vec<(String, String)>,
    },
    SslRequest,
    GssEncRequest,
    /// A CancelRequest: the backend's process id and secret key, and the bytes to forward.
    Cancel {
        bytes: Bytes,
        pid: i32,
        secret: Bytes,
    },
}

impl StartupFrame {
    /// The value of a startup parameter (`user`, `database`, `application_name`, ...).
    pub fn param(&self, name: &str) -> Option<&str> {
        match self {
            StartupFrame::Startup { params, .. } => params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()),
            _ => None,
        }
    }
}

/// The next typed message in `buf`, split off it; `None` until one is complete.
/// Messages declaring more than `max_bytes` (type byte and length included) are refused.
pub fn next_frame(buf: &mut BytesMut, max_bytes: usize) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let tag = buf[0];
    let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    if len < 4 {
        return Err(FrameError::BadLength { tag: char::from(tag), len });
    }
    // `len` is positive and at most i32::MAX: it fits a usize on every supported target.
    let total = 1 + len as usize;
    if total > max_bytes {
        return Err(FrameError::TooLong { tag: char::from(tag), len_bytes: total, max_bytes });
    }
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    Ok(Some(Frame { bytes: buf.split_to(total).freeze() }))
}

/// The next startup-phase message in `buf`, split off it; `None` until one is complete.
pub fn next_startup(buf: &mut BytesMut) -> Result<Option<StartupFrame>, FrameError> {
    if buf.len() < 8 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if !(8..=MAX_STARTUP_BYTES as i32).contains(&len) {
        return Err(FrameError::BadStartupLength { len_bytes: i64::from(len) });
    }
    let total = len as usize;
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    let bytes = buf.split_to(total).freeze();
    let code = i32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    match code {
        SSL_REQUEST_CODE if total == 8 => Ok(Some(StartupFrame::SslRequest)),
        GSSENC_REQUEST_CODE if total == 8 => Ok(Some(StartupFrame::GssEncRequest)),
        CANCEL_REQUEST_CODE => {
            if !(16..=12 + MAX_CANCEL_KEY_BYTES).contains(&total) {
                return Err(FrameError::BadCancel { len_bytes: total });
            }
            let pid = i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            let secret = bytes.slice(12..);
            Ok(Some(StartupFrame::Cancel { bytes, pid, secret }))
        }
        _ => {
            let major = (code >> 16) as u16;
            let minor = (code & 0xffff) as u16;
            if major != 3 {
                return Err(FrameError::UnsupportedVersion { major, minor });
            }
            let params = startup_params(&bytes[8..])?;
            Ok(Some(StartupFrame::Startup { bytes, minor, params }))
        }
    }
}

/// `name\0value\0 ... \0` into pairs.
fn startup_params(mut body: &[u8]) -> Result<Vec<(String, String)>, FrameError> {
    let mut params = Vec::new();
    loop {
        let name = cstr(&mut body).ok_or_else(|| FrameError::BadStartup("parameter list not terminated".into()))?;
        if name.is_empty() {
            break;
        }
        let value = cstr(&mut body)
            .ok_or_else(|| FrameError::BadStartup(format!("parameter {name:?} has no terminated value")))?;
        params.push((name, value));
    }
    if !body.is_empty() {
        return Err(FrameError::BadStartup(format!("{} bytes after the parameter list", body.len())));
    }
    Ok(params)
}

/// A NUL-terminated string at the front of `body`, consumed (lossy UTF-8).
pub(crate) fn cstr(body: &mut &[u8]) -> Option<String> {
    let end = body.iter().position(|&b| b == 0)?;
    let s = String::from_utf8_lossy(&body[..end]).into_owned();
    body.advance(end + 1);
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres_protocol::message::frontend;

    fn startup(params: &[(&str, &str)]) -> BytesMut {
        let mut b = BytesMut::new();
        frontend::startup_message(params.iter().copied(), &mut b).unwrap();
        b
    }

    #[test]
    fn startup_message_and_its_parameters() {
        let mut b = startup(&[("user", "alice"), ("database", "shop"), ("application_name", "web")]);
        let wire = b.clone().freeze();
        let f = next_startup(&mut b).unwrap().unwrap();
        assert!(b.is_empty());
        assert_eq!(f.param("user"), Some("alice"));
        assert_eq!(f.param("application_name"), Some("web"));
        match f {
            StartupFrame::Startup { bytes, minor, .. } => {
                assert_eq!(bytes, wire);
                assert_eq!(minor, 0);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ssl_gssenc_and_cancel_requests() {
        let mut b = BytesMut::new();
        frontend::ssl_request(&mut b);
        assert_eq!(next_startup(&mut b).unwrap(), Some(StartupFrame::SslRequest));
        b.extend_from_slice(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30]);
        assert_eq!(next_startup(&mut b).unwrap(), Some(StartupFrame::GssEncRequest));
        frontend::cancel_request(4242, 0x0102_0304, &mut b);
        match next_startup(&mut b).unwrap().unwrap() {
            StartupFrame::Cancel { pid, secret, bytes } => {
                assert_eq!(pid, 4242);
                assert_eq!(&secret[..], &[1, 2, 3, 4]);
                assert_eq!(bytes.len(), 16);
            }
            other => panic!("{other:?}"),
        }
    }

    /// A CancelRequest of protocol 3.2: a key of up to 256 bytes; a longer one is refused.
    #[test]
    fn cancel_keys_of_protocol_3_2() {
        let cancel = |key_bytes: usize| {
            let mut b = BytesMut::new();
            b.extend_from_slice(&((12 + key_bytes) as i32).to_be_bytes());
            b.extend_from_slice(&CANCEL_REQUEST_CODE.to_be_bytes());
            b.extend_from_slice(&7i32.to_be_bytes());
            b.extend((0..key_bytes).map(|i| i as u8));
            next_startup(&mut b)
        };
        match cancel(32).unwrap().unwrap() {
            StartupFrame::Cancel { pid, secret, bytes } => {
                assert_eq!((pid, secret.len(), bytes.len()), (7, 32, 44));
                assert_eq!(secret[31], 31);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(cancel(MAX_CANCEL_KEY_BYTES), Ok(Some(StartupFrame::Cancel { .. }))));
        assert_eq!(cancel(MAX_CANCEL_KEY_BYTES + 1), Err(FrameError::BadCancel { len_bytes: 12 + 257 }));
    }

    #[test]
    fn protocol_2_is_refused_by_name() {
        let mut b = BytesMut::from(&[0, 0, 0, 9, 0, 2, 0, 0, 0][..]);
        assert_eq!(next_startup(&mut b), Err(FrameError::UnsupportedVersion { major: 2, minor: 0 }));
        let msg = FrameError::UnsupportedVersion { major: 2, minor: 0 }.to_string();
        assert!(msg.contains("2.0"), "{msg}");
    }

    #[test]
    fn startup_too_long_or_short_is_refused_before_buffering() {
        let mut b = BytesMut::from(&[0, 1, 0, 0, 0, 3, 0, 0][..]);
        assert!(matches!(next_startup(&mut b), Err(FrameError::BadStartupLength { .. })));
        let mut b = BytesMut::from(&[0, 0, 0, 4, 0, 3, 0, 0][..]);
        assert!(matches!(next_startup(&mut b), Err(FrameError::BadStartupLength { len_bytes: 4 })));
    }

    #[test]
    fn typed_frames_split_exactly_and_wait_for_more() {
        let mut wire = BytesMut::new();
        frontend::query("SELECT 1", &mut wire).unwrap();
        frontend::sync(&mut wire);
        let all = wire.clone().freeze();
        let mut b = BytesMut::from(&all[..3]);
        assert_eq!(next_frame(&mut b, 1 << 20).unwrap(), None);
        b.extend_from_slice(&all[3..]);
        let q = next_frame(&mut b, 1 << 20).unwrap().unwrap();
        assert_eq!(q.tag(), b'Q');
        assert_eq!(q.body(), b"SELECT 1\0");
        let s = next_frame(&mut b, 1 << 20).unwrap().unwrap();
        assert_eq!(s.tag(), b'S');
        assert_eq!([q.bytes, s.bytes].concat(), all.to_vec());
        assert_eq!(next_frame(&mut b, 1 << 20).unwrap(), None);
    }

    #[test]
    fn a_message_over_the_limit_is_refused_from_its_header() {
        let mut b = BytesMut::from(&[b'Q', 0, 0, 4, 0][..]);
        assert_eq!(next_frame(&mut b, 1000), Err(FrameError::TooLong { tag: 'Q', len_bytes: 1025, max_bytes: 1000 }));
        let mut b = BytesMut::from(&[b'Q', 0, 0, 0, 3][..]);
        assert_eq!(next_frame(&mut b, 1000), Err(FrameError::BadLength { tag: 'Q', len: 3 }));
    }
}
