//! Precompressed sidecars: which content codings the server offers (`precompressed`) and
//! which one a request gets, from its `Accept-Encoding` (RFC 9110 §12.5.3). Pure: the
//! connection opens the sidecars (`Root::sidecar`) in the order [`rank`] returns.
//!
//! A sidecar is a file the operator made next to the original: `app.css.br`, `app.css.zst`,
//! `app.css.gz` beside `app.css`. It is never made or checked by the server: whichever
//! exists is sent as that coding of the original, with the original's `Content-Type`.
//!
//! The choice, for the codings offered in the server's order:
//! - a coding's weight is its own entry's `q` (`x-gzip` counts as `gzip`, §8.4.1.3),
//!   else that of `*`, else 0: a coding the client did not list is not sent;
//! - `identity`'s weight is its own entry's, else `*`'s, else the lowest positive weight
//!   (acceptable by default, §12.5.3, but below any coding the client listed);
//! - codings of positive weight, not below identity's, are tried from the highest weight
//!   down, the server's order among equal weights (a smaller representation first);
//! - no `Accept-Encoding` field, an empty one, or no sidecar of an acceptable coding:
//!   identity. Also when the client refuses identity (`identity;q=0`, `*;q=0`): the
//!   field is then disregarded rather than answered 406, as RFC 9110 §12.1 allows.
//!
//! A malformed weight (`q=2`, `q=abc`) drops its element, as if it were not listed.

use std::fmt;

/// A content coding a sidecar may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    Br,
    Zstd,
    Gzip,
}

impl Coding {
    const ALL: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

    /// The token of `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// The sidecar's name: the original's name plus this.
    pub fn suffix(self) -> &'static [u8] {
        match self {
            Coding::Br => b".br",
            Coding::Zstd => b".zst",
            Coding::Gzip => b".gz",
        }
    }

    /// Whether an `Accept-Encoding` token names this coding.
    fn named_by(self, token: &[u8]) -> bool {
        token.eq_ignore_ascii_case(self.token().as_bytes())
            || self == Coding::Gzip && token.eq_ignore_ascii_case(b"x-gzip")
    }
}

/// The codings offered, in the server's order of preference (`br,zstd,gzip`; `none`: off).
#[derive(Clone, Copy)]
pub struct Precompressed {
    codings: [Coding; 3],
    len: usize,
}

impl Precompressed {
    pub const NONE: Precompressed = Precompressed { codings: Coding::ALL, len: 0 };
    pub const ALL: Precompressed = Precompressed { codings: Coding::ALL, len: 3 };

    pub fn codings(&self) -> &[Coding] {
        &self.codings[..self.len]
    }

    pub fn is_on(&self) -> bool {
        self.len > 0
    }
}

impl PartialEq for Precompressed {
    fn eq(&self, other: &Precompressed) -> bool {
        self.codings() == other.codings()
    }
}

impl Eq for Precompressed {}

impl fmt::Debug for Precompressed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Precompressed({self})")
    }
}

impl fmt::Display for Precompressed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.is_on() {
            return f.write_str("none");
        }
        for (i, c) in self.codings().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(c.token())?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Precompressed {
    type Err = String;
    fn from_str(s: &str) -> Result<Precompressed, String> {
        if s.trim() == "none" {
            return Ok(Precompressed::NONE);
        }
        let mut out = Precompressed::NONE;
        for token in s.split(',').map(str::trim) {
            let Some(&coding) = Coding::ALL.iter().find(|c| c.token() == token) else {
                return Err(format!("unknown coding {token:?} in {s:?}: expected a list of br, zstd, gzip, or none"));
            };
            if out.codings().contains(&coding) {
                return Err(format!("coding {token:?} listed twice in {s:?}"));
            }
            out.codings[out.len] = coding;
            out.len += 1;
        }
        Ok(out)
    }
}

impl<'de> serde::Deserialize<'de> for Precompressed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Precompressed, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A weight in thousandths (`q=0.5` → 500), RFC 9110 §12.4.2.
type Weight = u16;

/// The lowest positive weight: identity's when the client does not mention it.
const IMPLICIT_IDENTITY: Weight = 1;

/// The codings to try for a request, best first (at most three); identity if none exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ranked {
    codings: [Coding; 3],
    len: usize,
}

impl Ranked {
    pub fn codings(&self) -> &[Coding] {
        &self.codings[..self.len]
    }
}

/// The codings of `offered` to try for a request whose `Accept-Encoding` field lines are
/// `lines` (none: the field is absent), best first. See the module docs for the rules.
pub fn rank(lines: &[&[u8]], offered: Precompressed) -> Ranked {
    let mut ranked = Ranked { codings: Coding::ALL, len: 0 };
    if lines.is_empty() || !offered.is_on() {
        return ranked;
    }
    // Weights of br, zstd, gzip, identity and `*`, as listed.
    let mut listed: [Option<Weight>; 5] = [None; 5];
    for element in lines.iter().flat_map(|line| line.split(|&b| b == b',')) {
        let mut parts = element.split(|&b| b == b';');
        let token = trim(parts.next().unwrap_or(b""));
        if token.is_empty() {
            continue; // empty list elements are allowed (RFC 9110 §5.6.1)
        }
        let Some(weight) = weight(parts) else { continue };
        let slot = match Coding::ALL.iter().position(|c| c.named_by(token)) {
            Some(i) => i,
            None if token.eq_ignore_ascii_case(b"identity") => 3,
            None if token == b"*" => 4,
            None => continue,
        };
        // A token listed twice: the first counts.
        listed[slot].get_or_insert(weight);
    }
    let star = listed[4];
    let identity = listed[3].or(star).unwrap_or(IMPLICIT_IDENTITY);
    let mut weights = [0; 3];
    for &coding in offered.codings() {
        let w = listed[Coding::ALL.iter().position(|&c| c == coding).unwrap_or(0)].or(star).unwrap_or(0);
        if w > 0 && w >= identity {
            weights[ranked.len] = w;
            ranked.codings[ranked.len] = coding;
            ranked.len += 1;
        }
    }
    // Stable insertion sort by weight, highest first: the server's order among equals.
    for i in 1..ranked.len {
        let mut j = i;
        while j > 0 && weights[j - 1] < weights[j] {
            weights.swap(j - 1, j);
            ranked.codings.swap(j - 1, j);
            j -= 1;
        }
    }
    ranked
}

/// The weight among an element's parameters: `q` (any case), 1 if absent; `None` if malformed.
fn weight<'a>(params: impl Iterator<Item = &'a [u8]>) -> Option<Weight> {
    for param in params {
        let param = trim(param);
        let Some(eq) = param.iter().position(|&b| b == b'=') else { continue };
        if trim(&param[..eq]).eq_ignore_ascii_case(b"q") {
            return qvalue(trim(&param[eq + 1..]));
        }
    }
    Some(1000)
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths.
pub(crate) fn qvalue(text: &[u8]) -> Option<Weight> {
    let (int, frac) = match text.iter().position(|&b| b == b'.') {
        Some(dot) => (&text[..dot], &text[dot + 1..]),
        None => (text, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths: Weight = 0;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| Weight::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// `s` without leading and trailing spaces and tabs (HTTP's optional white space).
pub(crate) fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| b != b' ' && b != b'\t').unwrap_or(s.len());
    let end = s.iter().rposition(|&b| b != b' ' && b != b'\t').map_or(start, |i| i + 1);
    &s[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranked(lines: &[&str], offered: &str) -> String {
        let lines: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
        let r = rank(&lines, offered.parse().unwrap());
        r.codings().iter().map(|c| c.token()).collect::<Vec<_>>().join(",")
    }

    #[test]
    fn accept_encoding_table() {
        // (field lines, offered, codings tried in order; empty: identity)
        let cases: &[(&[&str], &str, &str)] = &[
            (&[], "br,zstd,gzip", ""),
            (&[""], "br,zstd,gzip", ""),
            (&["gzip, deflate, br, zstd"], "br,zstd,gzip", "br,zstd,gzip"),
            (&["gzip, deflate, br, zstd"], "gzip,br", "gzip,br"),
            (&["gzip"], "br,zstd,gzip", "gzip"),
            (&["br;q=0, gzip"], "br,zstd,gzip", "gzip"),
            (&["br;Q=0.000, gzip;q=1.000"], "br,zstd,gzip", "gzip"),
            (&["gzip;q=0.5, br;q=0.8"], "br,zstd,gzip", "br,gzip"),
            (&["gzip;q=0.9, br;q=0.8"], "br,zstd,gzip", "gzip,br"),
            (&["gzip;q=0.5, identity"], "br,zstd,gzip", ""),
            (&["gzip;q=0.5, identity;q=0.5"], "br,zstd,gzip", "gzip"),
            (&["*"], "br,zstd,gzip", "br,zstd,gzip"),
            (&["*;q=0"], "br,zstd,gzip", ""),
            (&["*;q=0, gzip"], "br,zstd,gzip", "gzip"),
            (&["*;q=0.3, br;q=0"], "br,zstd,gzip", "zstd,gzip"),
            (&["*, identity;q=0"], "br,zstd,gzip", "br,zstd,gzip"),
            (&["identity"], "br,zstd,gzip", ""),
            (&["identity;q=0"], "br,zstd,gzip", ""),
            (&["x-gzip"], "br,zstd,gzip", "gzip"),
            (&["GZIP ; q=0.7"], "br,zstd,gzip", "gzip"),
            (&["br", "gzip;q=0.5"], "br,zstd,gzip", "br,gzip"),
            (&["gzip;q=2, br"], "br,zstd,gzip", "br"),
            (&["gzip;q=0.1234, br;q=abc"], "br,zstd,gzip", ""),
            (&["gzip, gzip;q=0"], "br,zstd,gzip", "gzip"),
            (&[" , ,gzip,,"], "br,zstd,gzip", "gzip"),
            (&["deflate, compress"], "br,zstd,gzip", ""),
            (&["gzip, br"], "none", ""),
            (&["zstd;q=1, br;q=1, gzip;q=1"], "gzip,zstd", "gzip,zstd"),
            (&["br;level=5;q=0.2, gzip;q=0.1"], "br,zstd,gzip", "br,gzip"),
        ];
        for (lines, offered, want) in cases {
            assert_eq!(ranked(lines, offered), *want, "{lines:?} offered {offered}");
        }
    }

    #[test]
    fn qvalues() {
        let ok: &[(&str, Weight)] =
            &[("0", 0), ("0.", 0), ("0.5", 500), ("0.05", 50), ("0.001", 1), ("1", 1000), ("1.000", 1000)];
        for (text, want) in ok {
            assert_eq!(qvalue(text.as_bytes()), Some(*want), "{text}");
        }
        for text in ["", "1.5", "1.001", "2", "0.1234", "-0", ".5", "0.a", "01"] {
            assert_eq!(qvalue(text.as_bytes()), None, "{text}");
        }
    }

    #[test]
    fn precompressed_setting() {
        assert_eq!("br,zstd,gzip".parse::<Precompressed>(), Ok(Precompressed::ALL));
        assert_eq!(Precompressed::ALL.to_string(), "br,zstd,gzip");
        assert_eq!("none".parse::<Precompressed>(), Ok(Precompressed::NONE));
        assert_eq!(Precompressed::NONE.to_string(), "none");
        let gz: Precompressed = "gzip, br".parse().unwrap();
        assert_eq!(gz.codings(), &[Coding::Gzip, Coding::Br]);
        assert_eq!(gz.to_string(), "gzip,br");
        assert!("gzip,deflate".parse::<Precompressed>().unwrap_err().contains("\"deflate\""));
        assert!("gzip,gzip".parse::<Precompressed>().unwrap_err().contains("twice"));
        assert!("".parse::<Precompressed>().is_err());
    }
}
