//! The chunked transfer coding of request bodies (RFC 9112 §7.1), decoded to
//! be discarded: a byte-at-a-time state machine with no I/O and no buffer of
//! its own, so it takes input in whatever pieces the socket delivers.
//!
//! Strict where leniency enables request smuggling: CRLF only (no bare LF),
//! hexadecimal sizes of at most 16 digits, chunk extensions and trailers
//! bounded in length.

/// Longest chunk-size line (size, extensions) accepted.
pub const MAX_SIZE_LINE_BYTES: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("malformed chunked body")]
    Malformed,
    #[error("chunked body larger than allowed")]
    TooLarge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Size {
        value: u64,
        digits: u32,
    },
    /// Chunk extensions (discarded), up to the CR ending the size line.
    Extension {
        value: u64,
    },
    SizeLf {
        value: u64,
    },
    Data {
        left: u64,
    },
    DataCr,
    DataLf,
    /// A trailer field line (discarded), or the blank line ending the body.
    Trailer {
        line_bytes: usize,
    },
    TrailerLf {
        line_bytes: usize,
    },
    Done,
}

#[derive(Clone, Debug)]
pub struct Decoder {
    state: State,
    size_line_bytes: usize,
    data_bytes: u64,
    max_data_bytes: u64,
    trailer_bytes: usize,
    max_trailer_bytes: usize,
}

impl Decoder {
    /// At most `max_data_bytes` of chunk data and `max_trailer_bytes` of trailer fields.
    pub fn new(max_data_bytes: u64, max_trailer_bytes: usize) -> Decoder {
        Decoder {
            state: State::Size { value: 0, digits: 0 },
            size_line_bytes: 0,
            data_bytes: 0,
            max_data_bytes,
            trailer_bytes: 0,
            max_trailer_bytes,
        }
    }

    /// Chunk data seen so far.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Takes bytes from the front of `input`: `(taken, done)`. When `done`, the
    /// body ended exactly at `input[taken]`; otherwise all of `input` was taken.
    pub fn feed(&mut self, input: &[u8]) -> Result<(usize, bool), Error> {
        let mut i = 0;
        while i < input.len() {
            if self.state == State::Done {
                break;
            }
            if let State::Data { left } = self.state {
                let take = left.min((input.len() - i) as u64);
                i += take as usize;
                self.state = if take == left { State::DataCr } else { State::Data { left: left - take } };
                continue;
            }
            self.step(input[i])?;
            i += 1;
        }
        Ok((i, self.state == State::Done))
    }

    fn step(&mut self, b: u8) -> Result<(), Error> {
        use State::*;
        if matches!(self.state, Size { .. } | Extension { .. }) {
            self.size_line_bytes += 1;
            if self.size_line_bytes > MAX_SIZE_LINE_BYTES {
                return Err(Error::Malformed);
            }
        }
        self.state = match (self.state, b) {
            (Size { value, digits }, _) if b.is_ascii_hexdigit() => {
                if digits == 16 {
                    return Err(Error::Malformed);
                }
                let d = (b as char).to_digit(16).expect("a hex digit") as u64;
                Size { value: value << 4 | d, digits: digits + 1 }
            }
            (Size { value, digits }, b';' | b' ' | b'\t') if digits > 0 => Extension { value },
            (Size { value, digits }, b'\r') if digits > 0 => SizeLf { value },
            (Extension { value }, b'\r') => SizeLf { value },
            // Visible characters, space and tab; no control characters, no bare LF.
            (Extension { value }, _) if b == b'\t' || b >= 0x20 && b != 0x7f => Extension { value },
            (SizeLf { value }, b'\n') => {
                self.size_line_bytes = 0;
                if value == 0 {
                    Trailer { line_bytes: 0 }
                } else {
                    self.data_bytes = self.data_bytes.saturating_add(value);
                    if self.data_bytes > self.max_data_bytes {
                        return Err(Error::TooLarge);
                    }
                    Data { left: value }
                }
            }
            (DataCr, b'\r') => DataLf,
            (DataLf, b'\n') => Size { value: 0, digits: 0 },
            (Trailer { line_bytes }, b'\r') => TrailerLf { line_bytes },
            (Trailer { line_bytes }, _) if b != b'\n' && b != 0 => {
                self.trailer_bytes += 1;
                if self.trailer_bytes > self.max_trailer_bytes {
                    return Err(Error::TooLarge);
                }
                Trailer { line_bytes: line_bytes + 1 }
            }
            (TrailerLf { line_bytes: 0 }, b'\n') => Done,
            (TrailerLf { .. }, b'\n') => Trailer { line_bytes: 0 },
            _ => return Err(Error::Malformed),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `body` fed in pieces of every size from 1 up: the outcome must not
    /// depend on how the socket splits it.
    fn decode(body: &[u8]) -> Result<(usize, u64), Error> {
        let mut first = None;
        for piece in 1..=body.len().max(1) {
            let mut d = Decoder::new(100, 64);
            let mut at = 0;
            let got = loop {
                let end = (at + piece).min(body.len());
                match d.feed(&body[at..end]) {
                    Err(e) => break Err(e),
                    Ok((n, true)) => break Ok((at + n, d.data_bytes())),
                    Ok((n, false)) => {
                        assert_eq!(n, end - at, "an unfinished body takes all its input");
                        at = end;
                        if at == body.len() {
                            break Err(Error::Malformed); // ended inside the body
                        }
                    }
                }
            };
            match &first {
                None => first = Some(got),
                Some(f) => assert_eq!(*f, got, "piece size {piece}"),
            }
        }
        first.unwrap()
    }

    #[test]
    fn chunked_table() {
        let ok: &[(&[u8], usize, u64)] = &[
            (b"0\r\n\r\n", 5, 0),
            (b"0\r\n\r\nGET / HTTP/1.1", 5, 0),
            (b"5\r\nhello\r\n0\r\n\r\n", 15, 5),
            (b"5;name=value\r\nhello\r\n0\r\n\r\n", 26, 5),
            (b"a \t;x\r\n0123456789\r\n000\r\nTrailer: v\r\n\r\nNEXT", 38, 10),
            (b"00000000000000005\r\nhello\r\n0\r\n\r\n", 0, 0),
            (b"1\r\n\r\r\n0\r\n\r\n", 11, 1),
        ];
        for (body, taken, data) in ok {
            let want = if *taken == 0 { Err(Error::Malformed) } else { Ok((*taken, *data)) };
            assert_eq!(decode(body), want, "{:?}", String::from_utf8_lossy(body));
        }
        let bad: &[(&[u8], Error)] = &[
            (b"\r\n", Error::Malformed),
            (b"x\r\n", Error::Malformed),
            (b"-1\r\n", Error::Malformed),
            (b"5\nhello\r\n0\r\n\r\n", Error::Malformed),
            (b"5\r\nhello\n0\r\n\r\n", Error::Malformed),
            (b"5\r\nhelloX\r\n", Error::Malformed),
            (b"0\r\n\n", Error::Malformed),
            (b"0\r\nA: b\n\r\n", Error::Malformed),
            (b"1;\x01\r\n", Error::Malformed),
            (b"ffffffffffffffff\r\n", Error::TooLarge),
            (b"65\r\n", Error::TooLarge),
            (b"64\r\n", Error::Malformed), // 100 bytes allowed, but the input ends
        ];
        for (body, want) in bad {
            assert_eq!(decode(body), Err(*want), "{:?}", String::from_utf8_lossy(body));
        }
        let long_ext = [b"1;".as_slice(), &[b'x'; MAX_SIZE_LINE_BYTES], b"\r\nx\r\n0\r\n\r\n"].concat();
        assert_eq!(Decoder::new(10, 10).feed(&long_ext), Err(Error::Malformed));
        let big_trailer = [b"0\r\n".as_slice(), &[b'x'; 65], b"\r\n\r\n"].concat();
        assert_eq!(Decoder::new(10, 64).feed(&big_trailer), Err(Error::TooLarge));
    }
}
