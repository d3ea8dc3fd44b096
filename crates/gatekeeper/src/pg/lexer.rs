//! A small SQL lexer for PostgreSQL's dialect: enough to tell literals, parameters,
//! identifiers, keywords, comments and statement ends apart, never a parser.
//!
//! Handled: `--` and nested `/* */` comments; `'…'` strings with `''`; `E'…'` strings with
//! backslash escapes; `B'…'`, `X'…'`, `N'…'`, `U&'…'` strings; `$tag$…$tag$` dollar
//! quoting; `"…"` and `U&"…"` quoted identifiers with `""`; numbers (decimal, exponent,
//! `0x`/`0o`/`0b`, `_` separators); `$n` parameters; identifiers with `$` inside; operators.
//! An unterminated string, identifier or comment runs to the end of the text (the server
//! will reject the statement; the lexer only must not loop or panic). Work is linear in
//! the text's length.

/// The kinds of token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An unquoted identifier or keyword (compare case-insensitively).
    Word,
    /// A `"quoted"` identifier (case-sensitive).
    QuotedIdent,
    /// A string literal of any form (including dollar-quoted).
    String,
    Number,
    /// `$1`, `$2`, ...
    Param,
    /// A run of operator characters (`=`, `<>`, `||`, `-`, ...).
    Operator,
    /// One punctuation character: `( ) [ ] , ; . :`.
    Punct,
    /// A comment (`--` or `/* */`), including its delimiters.
    Comment,
}

/// A token: its kind and its text (a slice of the input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token<'a> {
    pub kind: Kind,
    pub text: &'a str,
}

/// The tokens of `sql`, whitespace left out.
pub fn tokens(sql: &str) -> Lexer<'_> {
    Lexer { s: sql, pos: 0 }
}

pub struct Lexer<'a> {
    s: &'a str,
    pos: usize,
}

const OPERATOR_CHARS: &[u8] = b"+-*/<>=~!@#%^&|`?";

fn is_word_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

fn is_word_char(b: u8) -> bool {
    is_word_start(b) || b.is_ascii_digit() || b == b'$'
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let b = self.s.as_bytes();
        while self.pos < b.len() && b[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        if self.pos >= b.len() {
            return None;
        }
        let start = self.pos;
        let kind = self.scan(start);
        debug_assert!(self.pos > start, "the lexer always advances");
        // Every scan stops on an ASCII byte or at the end, so the slice is on char bounds.
        Some(Token { kind, text: &self.s[start..self.pos] })
    }
}

impl Lexer<'_> {
    fn peek(&self, at: usize) -> u8 {
        self.s.as_bytes().get(at).copied().unwrap_or(0)
    }

    fn scan(&mut self, start: usize) -> Kind {
        let c = self.peek(start);
        let n = self.peek(start + 1);
        match c {
            b'-' if n == b'-' => self.line_comment(),
            b'/' if n == b'*' => self.block_comment(),
            b'\'' => {
                self.pos = start + 1;
                self.quoted(b'\'', false);
                Kind::String
            }
            b'"' => {
                self.pos = start + 1;
                self.quoted(b'"', false);
                Kind::QuotedIdent
            }
            b'$' if n.is_ascii_digit() => {
                self.pos = start + 1;
                while self.peek(self.pos).is_ascii_digit() {
                    self.pos += 1;
                }
                Kind::Param
            }
            b'$' => self.dollar(start),
            b'0'..=b'9' => self.number(start),
            b'.' if n.is_ascii_digit() => self.number(start),
            _ if is_word_start(c) => self.word(start),
            _ if OPERATOR_CHARS.contains(&c) => self.operator(start),
            _ => {
                // Punctuation, or any other single byte (a stray `\`, a control byte):
                // stepping over a whole UTF-8 sequence keeps slices on char bounds.
                self.pos = start + utf8_len(c);
                Kind::Punct
            }
        }
    }

    fn line_comment(&mut self) -> Kind {
        let b = self.s.as_bytes();
        while self.pos < b.len() && b[self.pos] != b'\n' {
            self.pos += 1;
        }
        Kind::Comment
    }

    fn block_comment(&mut self) -> Kind {
        self.pos += 2;
        let mut depth = 1u32;
        while self.pos < self.s.len() && depth > 0 {
            match (self.peek(self.pos), self.peek(self.pos + 1)) {
                (b'/', b'*') => {
                    depth += 1;
                    self.pos += 2;
                }
                (b'*', b'/') => {
                    depth -= 1;
                    self.pos += 2;
                }
                _ => self.pos += 1,
            }
        }
        self.pos = self.pos.min(self.s.len());
        Kind::Comment
    }

    /// After an opening `q`: up to the closing one, a doubled `q` being one character;
    /// with `backslash`, `\x` is one escaped character.
    fn quoted(&mut self, q: u8, backslash: bool) {
        let len = self.s.len();
        while self.pos < len {
            let c = self.peek(self.pos);
            if backslash && c == b'\\' {
                self.pos = (self.pos + 2).min(len);
                // Land on a char boundary if the escaped byte started a multi-byte char.
                while self.pos < len && !self.s.is_char_boundary(self.pos) {
                    self.pos += 1;
                }
                continue;
            }
            self.pos += 1;
            if c == q {
                if self.peek(self.pos) == q {
                    self.pos += 1;
                } else {
                    return;
                }
            }
        }
    }

    fn dollar(&mut self, start: usize) -> Kind {
        // `$tag$`: tag is empty or an identifier without `$`.
        let mut end = start + 1;
        if is_word_start(self.peek(end)) {
            while is_word_char(self.peek(end)) && self.peek(end) != b'$' {
                end += 1;
            }
        }
        if self.peek(end) != b'$' {
            self.pos = start + 1;
            return Kind::Operator;
        }
        let delim = &self.s[start..=end];
        match self.s[end + 1..].find(delim) {
            Some(i) => self.pos = end + 1 + i + delim.len(),
            None => self.pos = self.s.len(),
        }
        Kind::String
    }

    fn number(&mut self, start: usize) -> Kind {
        self.pos = start;
        loop {
            let c = self.peek(self.pos);
            let exp_sign = (c == b'+' || c == b'-')
                && matches!(self.peek(self.pos.wrapping_sub(1)), b'e' | b'E')
                && !self.s[start..self.pos].starts_with("0x")
                && self.peek(self.pos + 1).is_ascii_digit();
            if c.is_ascii_alphanumeric() || c == b'_' || exp_sign || (c == b'.' && self.peek(self.pos + 1) != b'.') {
                self.pos += 1;
            } else {
                return Kind::Number;
            }
        }
    }

    fn word(&mut self, start: usize) -> Kind {
        let mut end = start;
        while end < self.s.len() && is_word_char(self.peek(end)) {
            end += 1;
        }
        while end < self.s.len() && !self.s.is_char_boundary(end) {
            end += 1;
        }
        let w = &self.s[start..end];
        let next = self.peek(end);
        if next == b'\'' && w.len() == 1 && matches!(w.as_bytes()[0] | 0x20, b'e' | b'b' | b'x' | b'n') {
            self.pos = end + 1;
            self.quoted(b'\'', w.eq_ignore_ascii_case("e"));
            return Kind::String;
        }
        if w.eq_ignore_ascii_case("u") && next == b'&' && matches!(self.peek(end + 1), b'\'' | b'"') {
            let q = self.peek(end + 1);
            self.pos = end + 2;
            self.quoted(q, false);
            return if q == b'\'' { Kind::String } else { Kind::QuotedIdent };
        }
        self.pos = end;
        Kind::Word
    }

    fn operator(&mut self, start: usize) -> Kind {
        self.pos = start;
        while OPERATOR_CHARS.contains(&self.peek(self.pos)) {
            // A comment starts inside an operator run: stop before it.
            if self.pos > start && matches!((self.peek(self.pos), self.peek(self.pos + 1)), (b'-', b'-') | (b'/', b'*'))
            {
                break;
            }
            self.pos += 1;
        }
        Kind::Operator
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xf0..=0xff => 4,
        0xe0..=0xef => 3,
        0xc0..=0xdf => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(sql: &str) -> Vec<(Kind, &str)> {
        tokens(sql).map(|t| (t.kind, t.text)).collect()
    }

    #[test]
    fn strings_of_every_form() {
        use Kind::*;
        assert_eq!(kinds("'it''s'"), vec![(String, "'it''s'")]);
        assert_eq!(kinds(r"E'a\'b' x"), vec![(String, r"E'a\'b'"), (Word, "x")]);
        assert_eq!(kinds("$$a;'b$$"), vec![(String, "$$a;'b$$")]);
        assert_eq!(kinds("$fn$ $$ $fn$;"), vec![(String, "$fn$ $$ $fn$"), (Punct, ";")]);
        assert_eq!(
            kinds("X'1F' B'01' U&'d\\0061'"),
            vec![(String, "X'1F'"), (String, "B'01'"), (String, "U&'d\\0061'")]
        );
        assert_eq!(kinds(r#""a""b" U&"x""#), vec![(QuotedIdent, r#""a""b""#), (QuotedIdent, r#"U&"x""#)]);
    }

    #[test]
    fn comments_nest_and_numbers_parse() {
        use Kind::*;
        assert_eq!(kinds("/* a /* b */ c */1"), vec![(Comment, "/* a /* b */ c */"), (Number, "1")]);
        assert_eq!(kinds("1 -- x\n2"), vec![(Number, "1"), (Comment, "-- x"), (Number, "2")]);
        assert_eq!(
            kinds("1.5e-3 0x1F 1_000 .5"),
            vec![(Number, "1.5e-3"), (Number, "0x1F"), (Number, "1_000"), (Number, ".5")]
        );
        assert_eq!(
            kinds("a$1 $2 x::int"),
            vec![(Word, "a$1"), (Param, "$2"), (Word, "x"), (Punct, ":"), (Punct, ":"), (Word, "int")]
        );
        assert_eq!(kinds("a<>-b"), vec![(Word, "a"), (Operator, "<>-"), (Word, "b")]);
        assert_eq!(kinds("a=--c"), vec![(Word, "a"), (Operator, "="), (Comment, "--c")]);
    }

    #[test]
    fn unterminated_things_end_at_the_end() {
        for s in ["'abc", "\"abc", "/* abc", "$q$ abc", "E'\\", "é'", "'é", "U&", "$", "\\é"] {
            let total: usize = tokens(s).map(|t| t.text.len()).sum();
            assert!(total <= s.len(), "{s:?}");
        }
    }
}
