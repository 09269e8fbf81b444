//! Text that an agent, or another writer of a log or a database, controls, as it may be shown to a
//! person on a terminal: [`escaped`]. Every report of the `toolgate` command (`audit verify`, `audit
//! promotion`, `approvals`, `fleet`, `budgets`) shows such text through it: tool ids, arguments,
//! codes, reasons, principals, agent labels, writer and member names, budgets' keys, anything read
//! from a log or the database.
//!
//! ```
//! # extern crate toolgate_runtime as toolgate;
//! use toolgate::terminal::escaped;
//!
//! // A request for `alice` and one for `alice` followed by a zero-width space look different.
//! assert_eq!(escaped("alice\u{200b}"), "alice\\u{200b}");
//! // "approve `rm -rf /`" cannot be shown backwards by a right-to-left override.
//! assert_eq!(escaped("a\u{202e}b"), "a\\u{202e}b");
//! assert_eq!(escaped(r#"{"path":"/tmp/é"}"#), r#"{"path":"/tmp/é"}"#);
//! ```

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every character that could hide, fake or reorder what a terminal shows written as its
/// escape `\u{..}` (lowercase hex, at least four digits), and a backslash written `\\`, so that one
/// shown text stands for one text only. The rest is as given.
///
/// Escaped: control characters (C0, DEL, C1: escape sequences, carriage returns, line breaks); the
/// characters that reorder text (bidirectional marks, embeddings, overrides and isolates: "Trojan
/// Source"); the line and paragraph separators; every default-ignorable code point, which a terminal
/// shows as nothing (zero-width spaces and joiners, the word joiner, the byte order mark, the soft
/// hyphen, variation selectors, tag characters, Hangul fillers, ...); other format characters; and the
/// spaces that are not U+0020.
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c == '\\' || hides(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else {
            push_shown(&mut out, c);
        }
    }
    Cow::Owned(out)
}

/// Pushes `c` to `out` as [`escaped`] shows it, a backslash aside: its escape `\u{..}` where it
/// [`hides`], else itself. For shown text with escapes of its own (a Markdown cell).
pub(crate) fn push_shown(out: &mut String, c: char) {
    if hides(c) {
        let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
    } else {
        out.push(c);
    }
}

/// JSON text a person reads (a report, a lockfile and its diff) with every character that [`hides`]
/// written as JSON's escape `\uXXXX` (a pair of them above U+FFFF), the whitespace between tokens
/// aside: the value it parses to is the same, and no reader hides, reorders or breaks a line there.
/// A JSON serializer leaves such characters raw only inside strings, so only strings change.
pub(crate) fn escaped_json(text: String) -> String {
    let shown = |c: char| hides(c) && !matches!(c, ' ' | '\t' | '\n' | '\r');
    if !text.chars().any(shown) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if shown(c) {
            let mut units = [0; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether [`escaped`] writes `c` as its escape: it could hide, fake or reorder shown text.
pub fn hides(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            // Default-ignorable code points (Unicode's DerivedCoreProperties), which include the
            // bidirectional marks, embeddings, overrides and isolates (U+061C, U+200E, U+200F,
            // U+202A to U+202E, U+2066 to U+2069).
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'..='\u{1160}'
                | '\u{17B4}'..='\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF0}'..='\u{FFF8}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E0FFF}'
                // The Braille pattern blank: it draws nothing, yet is no space.
                | '\u{2800}'
                // Line and paragraph separators.
                | '\u{2028}'..='\u{2029}'
                // Other format characters.
                | '\u{0600}'..='\u{0605}'
                | '\u{06DD}'
                | '\u{070F}'
                | '\u{0890}'..='\u{0891}'
                | '\u{08E2}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                // Spaces that look like U+0020 and are not.
                | '\u{00A0}'
                | '\u{1680}'
                | '\u{2000}'..='\u{200A}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_could_hide_fake_or_reorder_text_is_escaped() {
        for (given, shown) in [
            ("a\u{202E}b", "a\\u{202e}b"),
            ("\u{2066}x\u{2069}", "\\u{2066}x\\u{2069}"),
            ("esc\u{1b}[2J", "esc\\u{001b}[2J"),
            ("csi\u{9b}2J", "csi\\u{009b}2J"),
            ("line\nbreak\r", "line\\u{000a}break\\u{000d}"),
            ("alice\u{200b}", "alice\\u{200b}"),
            ("al\u{2060}ice\u{feff}", "al\\u{2060}ice\\u{feff}"),
            ("soft\u{ad}hyphen", "soft\\u{00ad}hyphen"),
            ("tag\u{e0041}\u{e007f}", "tag\\u{e0041}\\u{e007f}"),
            ("ls\u{2028}ps\u{2029}", "ls\\u{2028}ps\\u{2029}"),
            ("nb\u{a0}sp", "nb\\u{00a0}sp"),
            ("\u{115f}\u{3164}", "\\u{115f}\\u{3164}"),
            ("vs\u{fe0f}", "vs\\u{fe0f}"),
        ] {
            assert_eq!(escaped(given), shown, "{given:?}");
        }
    }

    #[test]
    fn a_backslash_is_escaped_so_that_an_escape_cannot_be_typed() {
        // The text `alice\u{200b}`, typed, is not shown as the name with a zero-width space.
        assert_eq!(escaped("alice\\u{200b}"), "alice\\\\u{200b}");
        assert_ne!(escaped("alice\\u{200b}"), escaped("alice\u{200b}"));
    }

    #[test]
    fn json_shows_what_hides_as_its_escape_and_parses_to_the_same_value() {
        let value = serde_json::json!({
            "description": "a\u{2028}b\u{202e}c\u{85}d\u{1b}[2J\u{7f}\u{200b}\u{e0041}\n\t é 😀",
            "k\u{2066}": [1, "\u{a0}"],
        });
        for text in [
            serde_json::to_string(&value).unwrap(),
            serde_json::to_string_pretty(&value).unwrap(),
        ] {
            let shown = escaped_json(text.clone());
            assert!(
                !shown.chars().any(|c| hides(c) && !matches!(c, '\n' | ' ')),
                "{shown}"
            );
            assert!(
                shown.contains("\\u2028") && shown.contains("\\udb40\\udc41"),
                "{shown}"
            );
            assert!(shown.contains("é 😀"), "{shown}");
            let parsed: serde_json::Value = serde_json::from_str(&shown).unwrap();
            assert_eq!(parsed, value);
        }
        let plain = serde_json::to_string_pretty(&serde_json::json!({"a": ["b", 1]})).unwrap();
        assert_eq!(escaped_json(plain.clone()), plain);
    }

    #[test]
    fn the_rest_is_as_given_and_borrowed() {
        for text in [r#"{"path":"/tmp/é"}"#, "ü😀 日本語 a b", "", "Ω≈ç√ ﬁ"] {
            assert!(
                matches!(escaped(text), Cow::Borrowed(t) if t == text),
                "{text:?}"
            );
        }
    }
}
