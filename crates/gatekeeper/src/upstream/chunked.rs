//! The chunked transfer coding (RFC 9112 §7.1) decoded from a buffer, step by step: a pure
//! state machine, fed by whoever reads the socket.

use bytes::{Bytes, BytesMut};
use hyper::header::HeaderMap;

use super::wire::{fields_at, header_map, HeadError, MAX_HEADERS, MAX_HEAD_BYTES};

/// A chunk-size line (with its extensions, which are ignored) longer than this is an error.
pub const MAX_CHUNK_LINE_BYTES: usize = 4096;

/// What a chunked body was wrong with.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    #[error("invalid chunk size line {0:?}")]
    SizeLine(String),
    #[error("chunk size line longer than {MAX_CHUNK_LINE_BYTES} bytes")]
    SizeLineTooLong,
    #[error("chunk data not followed by CRLF")]
    MissingCrlf,
    #[error("trailer section: {0}")]
    Trailers(#[from] HeadError),
}

/// One step of decoding.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Body bytes, taken from the buffer.
    Data(Bytes),
    /// The trailer section (only when it has fields).
    Trailers(HeaderMap),
    /// The body is complete.
    End,
    /// More bytes are needed.
    More,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    Data(u64),
    DataCrlf,
    Trailers,
    Done,
}

#[derive(Debug)]
pub struct Decoder {
    state: State,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder { state: State::Size }
    }
}

impl Decoder {
    /// Decode from `buf` as far as the next data, trailers or end; bytes of the coding are
    /// consumed, bytes beyond the body's end are left in `buf`.
    pub fn step(&mut self, buf: &mut BytesMut) -> Result<Step, ChunkError> {
        loop {
            match self.state {
                State::Size => {
                    let Some(line) = take_line(buf)? else { return Ok(Step::More) };
                    let size = chunk_size(&line)?;
                    self.state = if size == 0 { State::Trailers } else { State::Data(size) };
                }
                State::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let left = left - n as u64;
                    self.state = if left == 0 { State::DataCrlf } else { State::Data(left) };
                    return Ok(Step::Data(buf.split_to(n).freeze()));
                }
                State::DataCrlf => match take_line(buf)? {
                    None => return Ok(Step::More),
                    Some(l) if l.is_empty() => self.state = State::Size,
                    Some(_) => return Err(ChunkError::MissingCrlf),
                },
                State::Trailers => return self.trailers(buf),
                State::Done => return Ok(Step::End),
            }
        }
    }

    /// The trailer section: empty (the common case) or fields up to an empty line.
    fn trailers(&mut self, buf: &mut BytesMut) -> Result<Step, ChunkError> {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let (len, at) = match httparse::parse_headers(buf, &mut slots).map_err(HeadError::from)? {
            httparse::Status::Partial if buf.len() >= MAX_HEAD_BYTES => return Err(HeadError::TooLarge.into()),
            httparse::Status::Partial => return Ok(Step::More),
            httparse::Status::Complete((len, _)) if len > MAX_HEAD_BYTES => return Err(HeadError::TooLarge.into()),
            httparse::Status::Complete((len, fields)) => (len, fields_at(buf, fields)),
        };
        self.state = State::Done;
        let section = buf.split_to(len).freeze();
        if at.is_empty() {
            return Ok(Step::End);
        }
        Ok(Step::Trailers(header_map(&section, &at)?))
    }
}

/// A line (LF, or CRLF, ended) taken from the start of `buf`, without its end; `None` while
/// it is incomplete.
fn take_line(buf: &mut BytesMut) -> Result<Option<BytesMut>, ChunkError> {
    let Some(i) = buf.iter().take(MAX_CHUNK_LINE_BYTES).position(|&b| b == b'\n') else {
        return if buf.len() >= MAX_CHUNK_LINE_BYTES { Err(ChunkError::SizeLineTooLong) } else { Ok(None) };
    };
    let mut line = buf.split_to(i + 1);
    line.truncate(if i > 0 && line[i - 1] == b'\r' { i - 1 } else { i });
    Ok(Some(line))
}

/// The size of a chunk-size line: hex digits, then optional whitespace and extensions.
fn chunk_size(line: &[u8]) -> Result<u64, ChunkError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let rest = &line[digits..];
    let rest_ok = rest.iter().find(|b| !matches!(b, b' ' | b'\t')).map_or(true, |&b| b == b';');
    let bad = || ChunkError::SizeLine(String::from_utf8_lossy(line).into_owned());
    if digits == 0 || digits > 15 || !rest_ok {
        return Err(bad());
    }
    let hex = std::str::from_utf8(&line[..digits]).map_err(|_| bad())?;
    u64::from_str_radix(hex, 16).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The data, the trailers, and the bytes after the body's end.
    type Decoded = (Vec<u8>, Option<HeaderMap>, Vec<u8>);

    /// Decode `wire` fed in pieces of `piece` bytes: the data, the trailers, and the bytes
    /// after the body's end (left in the buffer, or never fed).
    fn decode(wire: &[u8], piece: usize) -> Result<Decoded, ChunkError> {
        let mut d = Decoder::default();
        let mut buf = BytesMut::new();
        let (mut data, mut trailers) = (Vec::new(), None);
        let mut feed = wire.chunks(piece);
        loop {
            match d.step(&mut buf)? {
                Step::Data(b) => data.extend_from_slice(&b),
                Step::Trailers(t) => trailers = Some(t),
                Step::End => return Ok((data, trailers, [buf.to_vec(), feed.flatten().copied().collect()].concat())),
                Step::More => match feed.next() {
                    Some(p) => buf.extend_from_slice(p),
                    None => panic!("more needed at the end of {:?}", String::from_utf8_lossy(wire)),
                },
            }
        }
    }

    #[test]
    fn chunks_decode_in_any_pieces() {
        let wire = b"5;ext=1\r\nhello\r\n6 \r\n world\r\n0\r\nx-sum: 42\r\nx-more: a\r\n\r\nNEXT";
        for piece in [1, 2, 3, 7, wire.len()] {
            let (data, trailers, left) = decode(wire, piece).unwrap();
            assert_eq!(data, b"hello world", "pieces of {piece}");
            let t = trailers.expect("trailers");
            assert_eq!((t["x-sum"].as_bytes(), t["x-more"].as_bytes()), (b"42".as_slice(), b"a".as_slice()));
            assert_eq!(left, b"NEXT");
        }
        let (data, trailers, left) = decode(b"3\nabc\n0\n\n", 1).unwrap();
        assert_eq!((data.as_slice(), trailers, left.as_slice()), (b"abc".as_slice(), None, b"".as_slice()));
    }

    #[test]
    fn bad_codings_are_errors() {
        let long = [vec![b'1'], vec![b' '; MAX_CHUNK_LINE_BYTES]].concat();
        let big_trailer = [b"0\r\nx: ".as_slice(), &vec![b'a'; MAX_HEAD_BYTES]].concat();
        for (wire, want) in [
            (b"zz\r\n".as_slice(), "invalid chunk size line \"zz\""),
            (b"\r\n", "invalid chunk size line \"\""),
            (b"1 x\r\n", "invalid chunk size line \"1 x\""),
            (b"10000000000000000\r\n", "invalid chunk size line \"10000000000000000\""),
            (b"3\r\nabcX\r\n", "chunk data not followed by CRLF"),
            (&long, "chunk size line longer than 4096 bytes"),
            (b"0\r\nbad header\r\n\r\n", "trailer section: malformed response head: invalid header name"),
            (&big_trailer, "trailer section: response head larger than 65536 bytes"),
        ] {
            let e = decode(wire, wire.len()).err().unwrap_or_else(|| panic!("{wire:?} decoded"));
            assert_eq!(e.to_string(), want);
        }
    }
}
