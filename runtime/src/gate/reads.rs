//! Reads that are no tool call: an MCP server's resources (by URI) and prompts (by name). Each has a
//! risk, READ_ONLY unless the server declares one, and the operator's policy may deny them or ask the
//! audit log to record them, by pattern.
//!
//! A pattern is a glob (`*` any run of characters, `?` one) matched on the whole URI or name. A URI or
//! name is compared as written and as it reads (SECURITY.md, names that read alike): a pattern reaches
//! it where it matches either way, so that a look-alike of a denied name is denied too and never
//! escapes a rule. A URI is read after its percent-escapes are decoded and its scheme is lowercased,
//! and its path as what it names (`cloud://x/../secrets` reads as `cloud:secrets`, as
//! `cloud://secrets` does; no `..` climbs above its scheme). A URI or name that holds a character a
//! reader cannot see or that reorders text (a URI: any blank too, or one its percent-escapes decode
//! to) is refused outright.
#![cfg_attr(
    not(all(feature = "mcp", feature = "policy-file")),
    allow(
        dead_code,
        reason = "an MCP server reads, a policy file writes the rules: each alone uses a part"
    )
)]

use std::fmt;
use std::sync::Arc;

use crate::gate::denylist::glob_match;
use crate::names::reading;
use crate::terminal::hides;

/// What is read: a resource, by URI, or a prompt, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadKind {
    /// `resources/read`, by URI.
    Resource,
    /// `prompts/get`, by name.
    Prompt,
}

impl ReadKind {
    /// How a record or a refusal names a read of `name`: a URI without its user information, query
    /// and fragment, which may carry what the log must not (a password, a token); the record's
    /// `arguments_digest` is the SHA-256 of the whole URI or name.
    pub(crate) fn label(self, name: &str) -> String {
        match self {
            ReadKind::Resource => {
                let end = name.find(['?', '#']).unwrap_or(name.len());
                let (before, host_on) = split_userinfo(&name[..end]);
                format!("resource:{before}{host_on}")
            }
            ReadKind::Prompt => format!("prompt:{name}"),
        }
    }

    fn what(self) -> &'static str {
        match self {
            ReadKind::Resource => "a resource URI",
            ReadKind::Prompt => "a prompt name",
        }
    }
}

/// A glob over resource URIs or prompt names, kept as written and as it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadPattern {
    written: Box<str>,
    read: Box<str>,
}

impl ReadPattern {
    /// A pattern, or why it is none: empty, or holding a character a reader cannot see (or, for a URI,
    /// a blank, which no URI holds).
    pub(crate) fn parse(kind: ReadKind, pattern: &str) -> Result<ReadPattern, String> {
        if pattern.trim().is_empty() {
            return Err(format!("{} pattern is never empty", kind.what()));
        }
        if let Some(c) = unseen(kind, pattern) {
            return Err(format!("{} pattern holds {}", kind.what(), unseen_why(c)));
        }
        Ok(ReadPattern {
            written: pattern.into(),
            read: read_form(kind, pattern).into(),
        })
    }

    /// The pattern as written.
    pub(crate) fn as_str(&self) -> &str {
        &self.written
    }

    /// Whether the pattern reaches `name`: as written, or as both read.
    pub(crate) fn matches(&self, name: &ReadName) -> bool {
        glob_match(self.written.as_bytes(), name.written.as_bytes())
            || glob_match(self.read.as_bytes(), name.read.as_bytes())
    }

    /// Whether the pattern, as written, matches every URI that the RFC 6570 template `template` can
    /// expand to, each `{..}` standing for any text: the server hides a template only where this holds.
    /// `false` where it cannot tell (a template or pattern longer than it looks at).
    pub(crate) fn covers_template(&self, template: &str) -> bool {
        const MAX: usize = 2048;
        let pattern: Vec<char> = self.written.chars().collect();
        let Some(tokens) = template_tokens(template).filter(|t| t.len() <= MAX) else {
            return false;
        };
        if pattern.len() > MAX {
            return false;
        }
        covers(&pattern, &tokens)
    }
}

impl fmt::Display for ReadPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

/// A resource URI or prompt name as a request gives it, as written and as it reads.
#[derive(Debug, Clone)]
pub(crate) struct ReadName {
    written: Box<str>,
    read: Box<str>,
}

impl ReadName {
    /// The name of a read, or why it is refused: it holds a character a reader cannot see or that
    /// reorders text (a URI: a blank too, written or percent-escaped).
    pub(crate) fn parse(kind: ReadKind, name: &str) -> Result<ReadName, String> {
        let decoded = match kind {
            ReadKind::Resource => percent_decoded(name),
            ReadKind::Prompt => name.to_owned(),
        };
        for text in [name, decoded.as_str()] {
            if let Some(c) = unseen(kind, text) {
                return Err(format!("{} holds {}", kind.what(), unseen_why(c)));
            }
        }
        Ok(ReadName {
            written: name.into(),
            read: read_form(kind, &decoded).into(),
        })
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.written
    }
}

/// The first character of `text` that a reader cannot see (for a URI, any blank too).
fn unseen(kind: ReadKind, text: &str) -> Option<char> {
    text.chars()
        .find(|&c| hides(c) || (kind == ReadKind::Resource && c.is_whitespace()))
}

/// What is wrong with `c`, found by [`unseen`].
fn unseen_why(c: char) -> String {
    if hides(c) {
        format!(
            "U+{:04X}, a character a reader cannot see or that reorders text",
            u32::from(c)
        )
    } else {
        format!("U+{:04X}, a blank, which no URI holds", u32::from(c))
    }
}

/// How a URI or name reads: [`reading`]; for a URI, its scheme (what comes before the first `:`,
/// where no `/` does) lowercased and read, its authority (after `//`) without user information and
/// lowercased, as a host is read, then `:` and the rest read as a path from a root, so that no
/// `..` climbs out of it, without that root (`cloud://x/../inventory` reads as `cloud:inventory`). A
/// pattern with no scheme (`*secrets*`) reads as its path alone, and so reaches a URI's reading as its
/// text does.
fn read_form(kind: ReadKind, text: &str) -> String {
    match kind {
        ReadKind::Prompt => reading(text),
        ReadKind::Resource => {
            let (scheme, rest) = match text.split_once(':') {
                Some((scheme, rest)) if !scheme.contains('/') => (Some(scheme), rest),
                _ => (None, text),
            };
            let rest = match rest.strip_prefix("//") {
                Some(after) => {
                    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
                    let authority = &after[..end];
                    let host = authority
                        .rsplit_once('@')
                        .map_or(authority, |(_, host)| host);
                    format!(
                        "//{}{}",
                        crate::names::reading_without_case(host),
                        &after[end..]
                    )
                }
                None => rest.to_owned(),
            };
            let path = reading(&format!("/{rest}"));
            let path = path.strip_prefix('/').unwrap_or(&path);
            match scheme {
                Some(scheme) => format!("{}:{path}", reading(&scheme.to_lowercase())),
                None => path.to_owned(),
            }
        }
    }
}

/// `uri` (without its query and fragment) split around its user information (`user:password@`
/// after `scheme://`): what comes before it, and the host on; the user information is left out.
fn split_userinfo(uri: &str) -> (&str, &str) {
    let Some(start) = uri
        .find("://")
        .filter(|&at| !uri[..at].contains('/'))
        .map(|at| at + 3)
    else {
        return (uri, "");
    };
    let after = &uri[start..];
    let end = after.find('/').unwrap_or(after.len());
    match after[..end].rfind('@') {
        Some(at) => (&uri[..start], &after[at + 1..]),
        None => (uri, ""),
    }
}

/// `uri` with its `%XX` escapes decoded where they decode to UTF-8; as it is otherwise.
fn percent_decoded(uri: &str) -> String {
    if !uri.contains('%') {
        return uri.to_owned();
    }
    let bytes = uri.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| uri.to_owned())
}

/// A template as a pattern: its text, and `Any` for each `{..}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Text(char),
    Any,
}

/// `None` for a template whose braces do not close.
fn template_tokens(template: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::with_capacity(template.len());
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c == '{' {
            chars.by_ref().find(|&c| c == '}')?;
            tokens.push(Token::Any);
        } else {
            tokens.push(Token::Text(c));
        }
    }
    Some(tokens)
}

/// Whether the glob `pattern` matches every text `tokens` stands for: an `Any` can be met only by a
/// `*`, which takes any run of the tokens. A `true` is certain; a `false` may be too cautious.
fn covers(pattern: &[char], tokens: &[Token]) -> bool {
    // `memo[i][j]`: `pattern[i..]` covers `tokens[j..]`, row by row from the end.
    let (n, m) = (pattern.len(), tokens.len());
    let mut next = vec![false; m + 1];
    next[m] = true;
    for i in (0..n).rev() {
        let mut row = vec![false; m + 1];
        for j in (0..=m).rev() {
            row[j] = match pattern[i] {
                '*' => next[j] || (j < m && row[j + 1]),
                '?' => j < m && matches!(tokens[j], Token::Text(_)) && next[j + 1],
                c => j < m && tokens[j] == Token::Text(c) && next[j + 1],
            };
        }
        next = row;
    }
    next[0]
}

/// The operator's rules on reads, for one gate: each pattern with the rule it is, as refusals and
/// records name it (`file:line:column`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ReadRules {
    /// Refused in every mode.
    pub(crate) deny: Vec<ReadRule>,
    /// Written to the audit log before the read runs; refused where the log cannot write it.
    pub(crate) record: Vec<ReadRule>,
}

/// One pattern of the operator's policy on reads.
#[derive(Debug, Clone)]
pub(crate) struct ReadRule {
    pub(crate) kind: ReadKind,
    pub(crate) pattern: ReadPattern,
    pub(crate) rule: Arc<str>,
}

impl ReadRules {
    /// The first deny rule that reaches `name`.
    pub(crate) fn denies(&self, kind: ReadKind, name: &ReadName) -> Option<&ReadRule> {
        first(&self.deny, kind, name)
    }

    /// The first record rule that reaches `name`.
    pub(crate) fn records(&self, kind: ReadKind, name: &ReadName) -> Option<&ReadRule> {
        first(&self.record, kind, name)
    }

    /// The first deny rule that reaches every URI the template `template` expands to.
    pub(crate) fn denies_template(&self, template: &str) -> Option<&ReadRule> {
        self.deny
            .iter()
            .find(|r| r.kind == ReadKind::Resource && r.pattern.covers_template(template))
    }
}

fn first<'a>(rules: &'a [ReadRule], kind: ReadKind, name: &ReadName) -> Option<&'a ReadRule> {
    rules
        .iter()
        .find(|r| r.kind == kind && r.pattern.matches(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(dead_code)]
    mod corpus {
        include!("../../../tests/common/lookalikes.rs");
    }
    use corpus::*;

    /// Every look-alike of the corpus is reached by a pattern of the name it reads as, or refused
    /// outright; plain names stay apart.
    #[test]
    fn every_look_alike_of_the_corpus_is_reached_by_its_name_s_pattern_or_refused() {
        for (name, alikes) in LOOK_ALIKES {
            let prompt = ReadPattern::parse(ReadKind::Prompt, name).unwrap();
            let resource =
                ReadPattern::parse(ReadKind::Resource, &format!("cloud://{name}")).unwrap();
            for alike in *alikes {
                if let Ok(read) = ReadName::parse(ReadKind::Prompt, alike) {
                    assert!(prompt.matches(&read), "{alike:?} against {name:?}");
                }
                let uri = format!("cloud://{alike}");
                if let Ok(read) = ReadName::parse(ReadKind::Resource, &uri) {
                    assert!(resource.matches(&read), "{uri:?} against {name:?}");
                }
            }
        }
        for (i, a) in DISTINCT.iter().enumerate() {
            let pattern = ReadPattern::parse(ReadKind::Prompt, a).unwrap();
            for b in &DISTINCT[i + 1..] {
                let b = ReadName::parse(ReadKind::Prompt, b).unwrap();
                assert!(!pattern.matches(&b), "{a:?} and {b:?}");
            }
        }
    }

    fn resource(pattern: &str, uri: &str) -> bool {
        let pattern = ReadPattern::parse(ReadKind::Resource, pattern).unwrap();
        pattern.matches(&ReadName::parse(ReadKind::Resource, uri).unwrap())
    }

    fn prompt(pattern: &str, name: &str) -> bool {
        let pattern = ReadPattern::parse(ReadKind::Prompt, pattern).unwrap();
        pattern.matches(&ReadName::parse(ReadKind::Prompt, name).unwrap())
    }

    #[test]
    fn a_pattern_matches_the_whole_uri_as_written_and_as_it_reads() {
        assert!(resource("cloud://inventory*", "cloud://inventory"));
        assert!(resource("cloud://inventory*", "cloud://inventory/eu"));
        assert!(resource("cloud://secrets/?", "cloud://secrets/a"));
        assert!(!resource("cloud://secrets/?", "cloud://secrets/ab"));
        assert!(!resource("cloud://inventory", "cloud://inventory/eu"));
        assert!(!resource("cloud://inventory*", "cloud://runbook"));
        // The same resource, spelled otherwise.
        assert!(resource("cloud://inventory*", "CLOUD://inventory"));
        assert!(resource("cloud://inventory*", "cloud://%69nventory"));
        assert!(resource("cloud://inventory*", "cloud://x/../inventory"));
        assert!(resource("cloud://inventory*", "cloud://../inventory"));
        assert!(resource("cloud://inventory*", "\u{441}loud://inventory"));
        assert!(resource("cloud://inventory*", "cloud://\u{456}nventory"));
        assert!(resource("cloud://inventory*", "cloud://ｉnventory"));
        // A pattern with no scheme, or a glob for one, reaches look-alikes too.
        assert!(resource("*inventory*", "cloud://\u{456}nventory"));
        assert!(resource("*://inventory", "cloud://\u{456}nventory"));
        assert!(resource("*", "cloud://\u{456}nventory"));
        assert!(!resource("*inventory", "cloud://inventory/eu"));
        // A host is read without its case, and user information is not part of it.
        assert!(resource("cloud://inventory*", "cloud://INVENTORY"));
        assert!(resource("cloud://inventory*", "cloud://Inventory/eu"));
        assert!(resource("cloud://inventory*", "cloud://ops@inventory"));
        assert!(resource("cloud://secrets/db", "cloud://ops:x@secrets/db"));
        assert!(resource("cloud://secrets/db", "cloud://a@b@SECRETS/db"));
        // A path keeps its case.
        assert!(!resource("cloud://secrets/db", "cloud://secrets/DB"));
    }

    #[test]
    fn a_label_leaves_out_user_information_query_and_fragment() {
        let label = |uri| ReadKind::Resource.label(uri);
        assert_eq!(
            label("cloud://ops:tok3n@billing/q3"),
            "resource:cloud://billing/q3"
        );
        assert_eq!(
            label("cloud://a@b@billing/q3?k=v#f"),
            "resource:cloud://billing/q3"
        );
        assert_eq!(label("cloud://billing/a@b"), "resource:cloud://billing/a@b");
        assert_eq!(label("file:///tmp/x?t=1"), "resource:file:///tmp/x");
        assert_eq!(
            label("mailto:ops@example.com"),
            "resource:mailto:ops@example.com"
        );
    }

    #[test]
    fn a_uri_or_name_with_what_a_reader_cannot_see_is_refused() {
        for uri in [
            "cloud://inven\u{200b}tory",
            "cloud://inventory\u{202e}",
            "cloud://inventory ",
            "cloud://inventory%E2%80%8B",
            "cloud://in%20ventory",
            "cloud://in\nventory",
        ] {
            assert!(ReadName::parse(ReadKind::Resource, uri).is_err(), "{uri:?}");
        }
        assert!(ReadName::parse(ReadKind::Prompt, "tri\u{200b}age").is_err());
        assert!(ReadName::parse(ReadKind::Prompt, "daily summary").is_ok());
        assert!(ReadName::parse(ReadKind::Resource, "cloud://inventory%2Feu").is_ok());
    }

    #[test]
    fn a_prompt_name_that_reads_as_a_denied_one_is_reached() {
        assert!(prompt("triage", "triage"));
        assert!(prompt("triage", "tri\u{430}ge"));
        assert!(prompt("triage", "ｔriage"));
        assert!(prompt("tri*", "tri\u{430}ge-eu"));
        assert!(!prompt("triage", "Triage"));
        assert!(!prompt("triage", "summary"));
    }

    #[test]
    fn patterns_with_nothing_or_what_no_one_sees_are_refused() {
        assert!(ReadPattern::parse(ReadKind::Resource, "").is_err());
        assert!(ReadPattern::parse(ReadKind::Prompt, "  ").is_err());
        assert!(ReadPattern::parse(ReadKind::Resource, "cloud://a b").is_err());
        assert!(ReadPattern::parse(ReadKind::Prompt, "a\u{2066}b").is_err());
        assert!(ReadPattern::parse(ReadKind::Prompt, "daily summary").is_ok());
    }

    #[test]
    fn a_template_is_covered_only_where_every_expansion_matches() {
        let covers = |p: &str, t: &str| {
            ReadPattern::parse(ReadKind::Resource, p)
                .unwrap()
                .covers_template(t)
        };
        assert!(covers("cloud://inventory*", "cloud://inventory/{region}"));
        assert!(covers("cloud://*", "cloud://{kind}/{id}"));
        assert!(covers("*", "{anything}"));
        assert!(covers("cloud://*/x*", "cloud://{a}/x{b}"));
        // An expansion may miss the pattern.
        assert!(!covers(
            "cloud://inventory/eu*",
            "cloud://inventory/{region}"
        ));
        assert!(!covers("cloud://inventory/?", "cloud://inventory/{region}"));
        assert!(!covers("cloud://secrets", "cloud://{name}"));
        assert!(!covers("cloud://*/x", "cloud://{a}/x{b}"));
        assert!(!covers("cloud://*", "cloud://{unclosed"));
    }
}
