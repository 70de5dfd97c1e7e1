//! Whether a `labelSelector` parses as apimachinery's `labels.Parse` parses it. The apiserver
//! decodes a collection GET's list options before it names the request: a label selector that does
//! not parse fails the decoding, and the name a `metadata.name` field selector required is dropped
//! (requestinfo.go). Only validity is needed here, so nothing is built.
//!
//! The lexer is Go's: `!`, `=`, `<`, `>`, `(`, `)` and `,` are symbols, read as the longest of `!`,
//! `!=`, `=`, `==`, `<`, `>`, `(`, `)`, `,`; blanks are space, tab, CR and LF; `in` and `notin` are
//! keywords where an operator is read, and values elsewhere. A NUL byte is read as part of an
//! identifier, which it makes invalid: kube-apiserver v1.36.3 drops the name of
//! `labelSelector=a%3D%00!!` (the apimachinery source read here ended the string at a NUL, which
//! would have kept it; `tests/real/clients.rs` asks the real one).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    End,
    Error,
    ClosedPar,
    Comma,
    Not,
    DoubleEquals,
    Equals,
    Greater,
    Less,
    NotEquals,
    OpenPar,
    In,
    NotIn,
    Ident(&'a [u8]),
}

impl<'a> Token<'a> {
    /// The token as the parser sees it where values are read: `in` and `notin` are identifiers.
    fn as_value(self) -> Token<'a> {
        match self {
            Token::In => Token::Ident(b"in"),
            Token::NotIn => Token::Ident(b"notin"),
            t => t,
        }
    }
}

fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_symbol(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn symbol(s: &[u8]) -> Option<Token<'static>> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::Not,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::Greater,
        b"<" => Token::Less,
        b"!=" => Token::NotEquals,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

/// The selector's tokens up to and with the first end (`Parser.scan`).
fn scan(s: &[u8]) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut pos = 0;
    loop {
        while pos < s.len() && is_blank(s[pos]) {
            pos += 1;
        }
        let token = match s.get(pos) {
            None => Token::End,
            Some(&b) if is_symbol(b) => scan_symbol(s, &mut pos),
            Some(_) => {
                let start = pos;
                while pos < s.len() && !is_symbol(s[pos]) && !is_blank(s[pos]) {
                    pos += 1;
                }
                let word = &s[start..pos];
                match word {
                    b"in" => Token::In,
                    b"notin" => Token::NotIn,
                    w => Token::Ident(w),
                }
            }
        };
        tokens.push(token);
        if token == Token::End {
            return tokens;
        }
    }
}

/// The longest symbol at `pos` (`scanSpecialSymbol`): symbols are read while they still make one.
fn scan_symbol(s: &[u8], pos: &mut usize) -> Token<'static> {
    let start = *pos;
    let mut last = None;
    while *pos < s.len() && is_symbol(s[*pos]) {
        match symbol(&s[start..=*pos]) {
            Some(t) => {
                last = Some(t);
                *pos += 1;
            }
            None if last.is_some() => break,
            None => *pos += 1,
        }
    }
    last.unwrap_or(Token::Error)
}

/// Whether `selector` parses as `labels.Parse` parses it, every key and value valid.
pub(crate) fn parses(selector: &str) -> bool {
    let tokens = scan(selector.as_bytes());
    let mut p = Parser { tokens, at: 0 };
    p.selector().is_some()
}

struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Token<'a> {
        self.tokens.get(self.at).copied().unwrap_or(Token::End)
    }

    fn next(&mut self) -> Token<'a> {
        let t = self.peek();
        self.at += 1;
        t
    }

    /// `parse`: requirements separated by commas, up to the end.
    fn selector(&mut self) -> Option<()> {
        loop {
            match self.peek().as_value() {
                Token::Ident(_) | Token::Not => {
                    self.requirement()?;
                    match self.next().as_value() {
                        Token::End => return Some(()),
                        Token::Comma => {
                            if !matches!(self.peek().as_value(), Token::Ident(_) | Token::Not) {
                                return None;
                            }
                        }
                        _ => return None,
                    }
                }
                Token::End => return Some(()),
                _ => return None,
            }
        }
    }

    /// `parseRequirement`, with `NewRequirement`'s checks of its values.
    fn requirement(&mut self) -> Option<()> {
        let mut absent = false;
        let mut t = self.next().as_value();
        if t == Token::Not {
            absent = true;
            t = self.next().as_value();
        }
        let Token::Ident(key) = t else {
            return None;
        };
        if !qualified_name(key) {
            return None;
        }
        if absent || matches!(self.peek().as_value(), Token::End | Token::Comma) {
            return Some(());
        }
        match self.next() {
            Token::In | Token::NotIn => self.values(),
            Token::Equals | Token::DoubleEquals | Token::NotEquals => {
                label_value(self.exact_value()?).then_some(())
            }
            Token::Greater | Token::Less => {
                let v = self.exact_value()?;
                (label_value(v) && go_int(v)).then_some(())
            }
            _ => None,
        }
    }

    /// `parseExactValue`: one identifier, or none before the end or a comma (the empty value).
    fn exact_value(&mut self) -> Option<&'a [u8]> {
        if matches!(self.peek().as_value(), Token::End | Token::Comma) {
            return Some(b"");
        }
        match self.next().as_value() {
            Token::Ident(v) => Some(v),
            _ => None,
        }
    }

    /// `parseValues`: `(`, identifiers and commas (an empty one is the empty value), `)`.
    fn values(&mut self) -> Option<()> {
        if self.next().as_value() != Token::OpenPar {
            return None;
        }
        match self.peek().as_value() {
            Token::ClosedPar => {
                self.next();
                return Some(());
            }
            Token::Ident(_) | Token::Comma => {}
            _ => return None,
        }
        loop {
            match self.next().as_value() {
                Token::Ident(v) => {
                    if !label_value(v) {
                        return None;
                    }
                    match self.peek().as_value() {
                        Token::Comma => {}
                        Token::ClosedPar => break,
                        _ => return None,
                    }
                }
                Token::Comma => match self.peek().as_value() {
                    Token::ClosedPar => break,
                    Token::Comma => {
                        self.next();
                    }
                    _ => {}
                },
                _ => return None,
            }
        }
        (self.next().as_value() == Token::ClosedPar).then_some(())
    }
}

/// `IsQualifiedName`: a name of at most 63 characters, alphanumeric at both ends with `-`, `_` and
/// `.` between, with an optional DNS subdomain prefix and `/`.
fn qualified_name(key: &[u8]) -> bool {
    let mut parts = key.split(|&b| b == b'/');
    let (first, second, more) = (parts.next(), parts.next(), parts.next());
    match (first, second, more) {
        (Some(name), None, _) => label_name(name),
        (Some(prefix), Some(name), None) => dns_subdomain(prefix) && label_name(name),
        _ => false,
    }
}

/// A qualified name's name part: 1 to 63 characters, `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn label_name(name: &[u8]) -> bool {
    !name.is_empty() && label_value(name)
}

/// `IsValidLabelValue`: at most 63 characters, empty or alphanumeric at both ends with `-`, `_`
/// and `.` between.
fn label_value(v: &[u8]) -> bool {
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    match (v.first(), v.last()) {
        (None, _) | (_, None) => true,
        (Some(a), Some(z)) => {
            v.len() <= 63
                && a.is_ascii_alphanumeric()
                && z.is_ascii_alphanumeric()
                && v.iter().all(inner)
        }
    }
}

/// `IsDNS1123Subdomain`: at most 253 characters of dot-separated lower-case labels, each
/// alphanumeric at both ends with `-` between.
fn dns_subdomain(s: &[u8]) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split(|&b| b == b'.').all(|label| {
            let ok = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
            match (label.first(), label.last()) {
                (Some(a), Some(z)) => ok(a) && ok(z) && label.iter().all(|b| ok(b) || *b == b'-'),
                _ => false,
            }
        })
}

/// `strconv.ParseInt(v, 10, 64)` succeeds.
fn go_int(v: &[u8]) -> bool {
    let digits = v.strip_prefix(b"+").or(v.strip_prefix(b"-")).unwrap_or(v);
    !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit)
        && std::str::from_utf8(v).is_ok_and(|s| s.parse::<i64>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::parses;

    /// Each with what `labels.Parse` (apimachinery v0.35) says of it.
    #[test]
    fn selectors_parse_as_go_parses_them() {
        for (selector, valid) in [
            ("", true),
            ("   ", true),
            ("a", true),
            ("!a", true),
            ("a=b", true),
            ("a==b", true),
            ("a!=b", true),
            ("a=", true),
            ("a=,b", true),
            ("a in (x,y)", true),
            ("a notin ()", true),
            ("x in (foo,,baz),y,z notin ()", true),
            ("a in (,)", true),
            ("in in (in)", true),
            ("example.com/app=web", true),
            ("a>1", true),
            ("a<7", true),
            ("a<+7", false),
            ("a>-1", false),
            ("a>x", false),
            ("!!", false),
            ("!", false),
            ("a,", false),
            (",a", false),
            ("a b", false),
            ("a=b=c", false),
            ("a in x", false),
            ("a in (x", false),
            ("a in (x y)", false),
            ("!a=b", false),
            ("A/b=c", false),
            ("a/b/c=d", false),
            ("-a=b", false),
            ("a=-b", false),
            ("a=b c", false),
            ("a=\0!!", false),
            ("a,\0", false),
            ("a\0", false),
            ("a=<", false),
            ("a=!", false),
            ("a===b", false),
        ] {
            assert_eq!(parses(selector), valid, "{selector:?}");
        }
        let long = "a".repeat(64);
        assert!(!parses(&long));
        assert!(parses(&long[..63]));
        assert!(!parses(&format!("a={long}")));
    }
}
