//! Control characters in text output: file names, relation names and messages come from the
//! data directory and its catalogs, which anyone who can write there controls. Printed raw, an
//! escape sequence in a name (`ESC ] 0;...BEL` retitles the terminal, `ESC [2J` clears it, a
//! newline forges a line) acts on the operator's terminal. Every line pgcheckdb prints as text
//! goes through [`escape_control`]; JSON needs nothing of this (its strings are escaped by
//! the JSON encoder).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is a control character: C0 (U+0000–U+001F, newline and tab included), DEL
/// (U+007F) or C1 (U+0080–U+009F).
fn is_control(c: char) -> bool {
    c.is_control()
}

/// Appends the escaped form of a control character: `\x1b` for C0 and DEL, `\u{9b}` for C1
/// (the forms Rust's own string escapes use).
fn push_escaped(out: &mut String, c: char) {
    let code = u32::from(c);
    if code < 0x80 {
        let _ = write!(out, "\\x{code:02x}");
    } else {
        let _ = write!(out, "\\u{{{code:x}}}");
    }
}

/// One line of text with every control character escaped, newlines included: a newline in a
/// value (a file name) cannot start a line of its own. Borrowed when there is nothing to
/// escape, which is almost always.
pub fn escape_control(text: &str) -> Cow<'_, str> {
    escape_where(text, is_control)
}

/// Several lines of text (a decoded page, a rendered table): the newlines between the lines
/// are kept, every other control character is escaped.
pub fn escape_control_keep_newlines(text: &str) -> Cow<'_, str> {
    escape_where(text, |c| c != '\n' && is_control(c))
}

fn escape_where(text: &str, escape: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if escape(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_sequences_and_newlines_are_escaped() {
        let name = "base/5/\u{1b}]0;pwned\u{7}16384\u{1b}[2J\n\u{9b}1m\u{7f}\t";
        assert_eq!(
            escape_control(name),
            "base/5/\\x1b]0;pwned\\x0716384\\x1b[2J\\x0a\\u{9b}1m\\x7f\\x09"
        );
        assert_eq!(
            escape_control_keep_newlines("a\u{1b}\nb\r\n"),
            "a\\x1b\nb\\x0d\n"
        );
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let text = "error: checksum_mismatch in \"base/5/16384\": répertoire ü";
        assert!(matches!(escape_control(text), Cow::Borrowed(t) if t == text));
        assert!(matches!(
            escape_control_keep_newlines("a\nb"),
            Cow::Borrowed(_)
        ));
    }
}
