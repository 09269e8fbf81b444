//! Tool manifests as reports (JSON, Markdown, CSV) and the manifest digest.
//!
//! Every function takes manifests in any order and form that borrows as a [`ToolManifest`]
//! (`toolgate::manifests()`, `&[ToolManifest]`, `Vec<ToolManifest>`); the renderers keep the order they are
//! given, the digest sorts.
//!
//! ```
//! # extern crate toolgate_runtime as toolgate;
//! use toolgate::report::{self, Format};
//!
//! let table = report::render(Format::Markdown);
//! assert!(table.starts_with("| id | risk |"));
//! assert_eq!(report::manifest_digest().len(), 64);
//! ```
//!
//! # The manifest digest
//!
//! [`manifest_digest`] identifies the set of linked tools; the gate stamps it into every audit record, so
//! a record names the exact declarations it was decided under. It is the lowercase hex SHA-256 of the UTF-8
//! bytes of [`canonical_json`], which is:
//!
//! - a JSON array of every manifest, each serialized as [`ToolManifest`] serializes (all nine keys, with
//!   `source` as an object of `file`, `line` and `module_path`, and `domain` as `null` when absent);
//! - sorted by `id`, then, for manifests with the same id, by their own canonical text;
//! - with the keys of every object sorted by their bytes, and no whitespace between tokens;
//! - with strings escaped only where JSON requires it: `"` and `\` as `\"` and `\\`, the control characters
//!   U+0008, U+0009, U+000A, U+000C and U+000D as `\b`, `\t`, `\n`, `\f` and `\r`, the other ones below
//!   U+0020 as `\u00XX` in lowercase hex, and everything else, non-ASCII included, as raw UTF-8; numbers
//!   (`source.line`) as plain decimal integers.
//!
//! For this data that is exactly the JSON Canonicalization Scheme (RFC 8785), and what Python's
//! `json.dumps(manifests, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` produces, so the
//! digest can be recomputed from `report::json_compact` output outside Rust. It covers `source.line`:
//! moving a tool within its file changes the digest, as the record should then point at the new line.

pub mod lockfile;

use std::borrow::Borrow;
use std::fmt::{self, Write as _};
use std::io::{self, Write as _};
use std::str::FromStr;

use crate::registry::ToolManifest;
pub use crate::registry::digest::{canonical_json, digest_of, manifest_digest};
use crate::registry::manifests;
use crate::terminal::{escaped_json, push_shown};

/// Every character that ends a line where a report may be read: CommonMark's line endings (a line
/// feed, and a carriage return alone or before one), and those other readers and editors honour (the
/// next line, line and paragraph separators, form feed and vertical tab). A field of a manifest
/// holding one must not start a row, a record or a line of its own in any report.
pub const LINE_TERMINATORS: [char; 7] = [
    '\n', '\r', '\u{85}', '\u{2028}', '\u{2029}', '\u{c}', '\u{b}',
];

/// A report format: `json` (pretty), `md` (a Markdown table) or `csv`.
///
/// `FromStr` accepts `json`, `md`, `markdown` and `csv`, in any ASCII case; `Display` writes `json`, `md`
/// or `csv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// A pretty-printed JSON array of manifests, as [`ToolManifest`] serializes.
    Json,
    /// A Markdown table, one row per tool.
    Markdown,
    /// CSV with a header row, quoted as RFC 4180 says.
    Csv,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 3] = [Format::Json, Format::Markdown, Format::Csv];

    /// The name `Display` writes: `json`, `md` or `csv`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Markdown => "md",
            Format::Csv => "csv",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let names = [
            ("json", Format::Json),
            ("md", Format::Markdown),
            ("markdown", Format::Markdown),
            ("csv", Format::Csv),
        ];
        names
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(s))
            .map(|&(_, format)| format)
            .ok_or_else(|| UnknownFormat {
                input: s.to_owned(),
            })
    }
}

/// The error of parsing a [`Format`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFormat {
    input: String,
}

impl fmt::Display for UnknownFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a report format; expected one of json, md, csv",
            self.input
        )
    }
}

impl std::error::Error for UnknownFormat {}

/// The report of every linked tool ([`manifests()`]) in `format`, ending with a line break.
pub fn render(format: Format) -> String {
    render_manifests(format, manifests())
}

/// Writes [`render`]`(format)` to standard output.
pub fn print(format: Format) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(render(format).as_bytes())?;
    out.flush()
}

/// The report of `manifests`, in their order, in `format`, ending with a line break.
pub fn render_manifests<I>(format: Format, manifests: I) -> String
where
    I: IntoIterator,
    I::Item: Borrow<ToolManifest>,
{
    match format {
        Format::Json => {
            let mut text = json_pretty(manifests);
            text.push('\n');
            text
        }
        Format::Markdown => markdown(manifests),
        Format::Csv => csv(manifests),
    }
}

fn collect<I>(manifests: I) -> Vec<ToolManifest>
where
    I: IntoIterator,
    I::Item: Borrow<ToolManifest>,
{
    manifests.into_iter().map(|m| *m.borrow()).collect()
}

/// A JSON array of `manifests`, indented by two spaces, without a final line break.
pub fn json_pretty<I>(manifests: I) -> String
where
    I: IntoIterator,
    I::Item: Borrow<ToolManifest>,
{
    escaped_json(serde_json::to_string_pretty(&collect(manifests)).expect("a manifest serializes"))
}

/// A JSON array of `manifests` on one line, keys in declaration order.
pub fn json_compact<I>(manifests: I) -> String
where
    I: IntoIterator,
    I::Item: Borrow<ToolManifest>,
{
    escaped_json(serde_json::to_string(&collect(manifests)).expect("a manifest serializes"))
}

fn yes_no(value: bool) -> &'static str {
    if value { "yes" } else { "no" }
}

/// `text` as a Markdown table cell: `|` escaped so that it cannot end the cell, `<`, `>` and `&` as
/// their character references so that a viewer shows them as text rather than render HTML (a comment
/// that hides every row after it, a folded `<details>`, an image or a link), and every character that
/// could end the row or hide what follows (line terminators, controls, invisible and reordering
/// characters) as [`escaped`](crate::terminal::escaped) shows it.
fn cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '|' => out.push_str("\\|"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            c => push_shown(&mut out, c),
        }
    }
    out
}

/// `text` in a code span's cell: a code span renders no HTML and no character reference, so only `|`
/// and what could end the row or hide what follows are escaped, as in [`cell`].
fn code_cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '|' {
            out.push_str("\\|");
        } else {
            push_shown(&mut out, c);
        }
    }
    out
}

/// `text` as a code span, with a fence longer than any run of backticks inside it.
fn code(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    if longest == 0 {
        format!("{fence}{}{fence}", code_cell(text))
    } else {
        format!("{fence} {} {fence}", code_cell(text))
    }
}

/// A Markdown table with the columns id, risk, side effects, allowed modes, idempotent, open world,
/// effects (what an irreversible or stateful tool declares: `irreversible`, its `target`, `evidence`,
/// `rollback`, or `none`), description (its first line) and source (`file:line`).
///
/// Ids and sources are code spans; flags are `yes` or `no`; modes are listed as `SHADOW, ADVISORY` (or
/// `none`); the description (up to its first line terminator, [`LINE_TERMINATORS`]) keeps its Markdown,
/// with `|` escaped and `<`, `>` and `&` written `&lt;`, `&gt;` and `&amp;`, so that a viewer renders
/// none of it as HTML. In every cell, a character that could end the row or hide text (a line terminator,
/// a control, an invisible or reordering character) is written as its escape `\u{..}`, so that each
/// tool is one row and no text of one tool shows in another's.
pub fn markdown<I>(manifests: I) -> String
where
    I: IntoIterator,
    I::Item: Borrow<ToolManifest>,
{
    let mut out = String::from(
        "| id | risk | side effects | allowed modes | idempotent | open world | effects | description | source |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for m in manifests {
        let m = m.borrow();
        let first_line = m
            .description
            .split(LINE_TERMINATORS)
            .next()
            .unwrap_or("")
            .trim();
        let source = format!("{}:{}", m.source.file, m.source.line);
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            code(m.id),
            m.risk_level,
            yes_no(m.side_effects),
            m.allowed_modes,
            yes_no(m.idempotent),
            yes_no(m.open_world),
            effects(m),
            cell(first_line),
            code(&source),
        )
        .expect("writing to a String");
    }
    out
}

/// What a tool with lasting effects declares, for the Markdown table.
fn effects(m: &ToolManifest) -> String {
    let target = m.target.map(|t| format!("target {}", code(t)));
    let declared: Vec<String> = [
        m.irreversible.then(|| "irreversible".to_owned()),
        m.out_of_band.then(|| "out of band".to_owned()),
        target,
        m.evidence.then(|| "evidence".to_owned()),
        m.rollback.then(|| "rollback".to_owned()),
    ]
    .into_iter()
    .flatten()
    .collect();
    if declared.is_empty() {
        "none".to_owned()
    } else {
        declared.join(", ")
    }
}

fn csv_field(out: &mut String, field: &str) {
    if field.contains([',', '"']) || field.contains(LINE_TERMINATORS) {
        out.push('"');
        out.push_str(&field.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(field);
    }
}

/// CSV as RFC 4180 defines it: a header row, records ending with CRLF, and a field quoted when it holds a
/// comma, a double quote or a line terminator ([`LINE_TERMINATORS`]), its quotes doubled.
///
/// Columns: `id`, `domain` (empty when none), `risk_level`, `side_effects`, `allowed_modes` (the names
/// separated by spaces), `idempotent`, `open_world`, `description` (all of it), `source_file`,
/// `source_line`, `source_module_path`, `irreversible`, `target` (empty when none), `evidence` and
/// `rollback`; flags are `true` or `false`.
pub fn csv<I>(manifests: I) -> String
where
    I: IntoIterator,
    I::Item: Borrow<ToolManifest>,
{
    let mut out = String::from(
        "id,domain,risk_level,side_effects,allowed_modes,idempotent,open_world,description,\
         source_file,source_line,source_module_path,irreversible,target,evidence,rollback\r\n",
    );
    for m in manifests {
        let m = m.borrow();
        let modes: Vec<&str> = m.allowed_modes.iter().map(|mode| mode.as_str()).collect();
        let fields = [
            m.id,
            m.domain.unwrap_or(""),
            m.risk_level.as_str(),
            if m.side_effects { "true" } else { "false" },
            &modes.join(" "),
            if m.idempotent { "true" } else { "false" },
            if m.open_world { "true" } else { "false" },
            m.description,
            m.source.file,
            &m.source.line.to_string(),
            m.source.module_path,
            if m.irreversible { "true" } else { "false" },
            m.target.unwrap_or(""),
            if m.evidence { "true" } else { "false" },
            if m.rollback { "true" } else { "false" },
        ];
        for (i, field) in fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            csv_field(&mut out, field);
        }
        out.push_str("\r\n");
    }
    out
}
