//! Caller-supplied text in a log line: [`Escaped`] spells out every character that could end the line or restyle
//! the terminal, so a tool name, method, id or path a client sends can never forge a log line of its own.
//!
//! Why a wrapper: tracing-subscriber's text format writes a `%` (Display) field, a span's `%` fields and a message's
//! `\n` exactly as they are (checked with 0.3.23), so `tool = %name` with a name holding `\n2026-… INFO …` prints
//! what reads as a second line, and an ESC in it recolours or erases what follows. Its JSON format escapes them
//! itself, but the faces wrap caller text in both formats, so a value is spelled one way whichever format is read.
//! Both the CLI and the server log caller text, hence it lives here.

use std::fmt;

/// Displays a caller-supplied text for a log line, on one line and without terminal control sequences: `\n`,
/// `\r`, `\t`, NUL and `\` as `\n`, `\r`, `\t`, `\0` and `\\`; every other control character (C0, DEL, C1: ESC
/// is `\u{1b}`) and every character that breaks or reorders a displayed line (U+2028, U+2029, the bidirectional
/// marks, embeddings, overrides and isolates) as `\u{..}` in hex. Everything else, other Unicode included, is
/// written as it is.
///
/// The escapes are those of Rust's `Debug` for `str`, without its quotes or its escaping of quotes, so a logged
/// value reads back unambiguously (a `\` written by the caller is `\\`, never the start of an escape).
///
/// ```
/// use sandlot_core::Escaped;
/// assert_eq!(Escaped("run\ncode\x1b[2J").to_string(), "run\\ncode\\u{1b}[2J");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        // The start of the run of characters not yet written; runs that need no escape are written whole.
        let mut unwritten = 0;
        for (at, c) in text.char_indices() {
            // A two-character escape, or `None` for the `\u{..}` form.
            let short = match c {
                '\n' => Some("\\n"),
                '\r' => Some("\\r"),
                '\t' => Some("\\t"),
                '\\' => Some("\\\\"),
                '\0' => Some("\\0"),
                c if breaks_a_line(c) => None,
                _ => continue,
            };
            f.write_str(&text[unwritten..at])?;
            match short {
                Some(escape) => f.write_str(escape)?,
                None => write!(f, "\\u{{{:x}}}", u32::from(c))?,
            }
            unwritten = at + c.len_utf8();
        }
        f.write_str(&text[unwritten..])
    }
}

/// A control character (C0, DEL, C1) or one that breaks or reorders a line as a terminal or viewer shows it.
fn breaks_a_line(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' // line and paragraph separators
            | '\u{061c}' | '\u{200e}' | '\u{200f}' // bidirectional marks
            | '\u{202a}'..='\u{202e}' // embeddings and overrides
            | '\u{2066}'..='\u{2069}' // isolates
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str) -> String {
        Escaped(text).to_string()
    }

    #[test]
    fn plain_text_is_written_as_it_is() {
        for text in ["", "tools/call", "sandbox_run_code", "/p/codegen/sse", "é ünïcödé 日本語 🦀", "a\"b'c"]
        {
            assert_eq!(escaped(text), text);
        }
    }

    #[test]
    fn line_breaks_tabs_and_backslashes_get_two_character_escapes() {
        assert_eq!(escaped("a\nb\rc\td\\e"), "a\\nb\\rc\\td\\\\e");
        assert_eq!(escaped("\n"), "\\n");
        assert_eq!(escaped("\\n"), "\\\\n");
    }

    #[test]
    fn other_controls_and_line_breaking_characters_are_hex_escapes() {
        assert_eq!(escaped("\x1b[31mred\x1b[0m"), "\\u{1b}[31mred\\u{1b}[0m");
        assert_eq!(escaped("\0\x07\x08\x0b\x0c\x7f"), "\\0\\u{7}\\u{8}\\u{b}\\u{c}\\u{7f}");
        assert_eq!(escaped("\u{85}\u{9b}2J"), "\\u{85}\\u{9b}2J");
        assert_eq!(escaped("a\u{2028}b\u{2029}c"), "a\\u{2028}b\\u{2029}c");
        assert_eq!(escaped("\u{202e}txt.exe\u{2066}\u{2069}\u{200f}"), "\\u{202e}txt.exe\\u{2066}\\u{2069}\\u{200f}");
    }

    #[test]
    fn a_forged_log_line_stays_on_its_line() {
        let forged = "run_code\n2026-11-28T06:00:00.000000Z  INFO sandlot: request status=200";
        assert_eq!(escaped(forged), "run_code\\n2026-11-28T06:00:00.000000Z  INFO sandlot: request status=200");
    }

    /// No character at all comes out as a control or line-breaking character, and the escapes are Rust's `Debug`
    /// ones: only quotes, which `Debug` escapes and this does not, differ.
    #[test]
    fn no_character_survives_unescaped_and_the_escapes_are_debugs() {
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            let text = c.to_string();
            let out = escaped(&text);
            assert!(!out.chars().any(breaks_a_line), "{:x} gives {out:?}", u32::from(c));
            if breaks_a_line(c) || c == '\\' {
                let debug = format!("{text:?}");
                assert_eq!(out, debug[1..debug.len() - 1], "{:x}", u32::from(c));
            } else {
                assert_eq!(out, text);
            }
        }
    }
}
