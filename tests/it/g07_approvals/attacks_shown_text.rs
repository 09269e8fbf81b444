//! Outside attacks on what toolgate shows a person of text someone else wrote (guarantee 7: "escapes
//! what it shows an operator, so one request cannot pass for another"): the Markdown report of the
//! manifests with every line terminator but the known lone CR, and HTML that a Markdown viewer
//! renders; a call by an unknown name whose error repeats the name; and `toolgate audit verify` on a
//! planted log.
//!
//! Each test asserts that the text shows nothing raw that hides, reorders or forges a row or a line.
//! A test that fails is an attack that got through.

use serde_json::json;
use toolgate::report;
use toolgate::{Gate, Mode, Risk, ToolManifest};

use crate::fixtures::support::runtime;

/// Characters that end a line, for a terminal, an editor or a Markdown viewer (the lone CR aside,
/// known), or hide or reorder text.
const RAW: [char; 10] = [
    '\u{85}', '\u{2028}', '\u{2029}', '\u{c}', '\u{b}', '\u{1b}', '\u{9b}', '\u{202e}', '\u{2066}',
    '\u{200b}',
];

fn raw_in(text: &str) -> Vec<char> {
    text.chars().filter(|c| RAW.contains(c)).collect()
}

/// A manifest with `description`, based on a linked tool's.
fn manifest(id: &'static str, description: &'static str) -> ToolManifest {
    let mut m = *toolgate::manifests().next().expect("a linked tool");
    m.id = id;
    m.domain = Some("demo");
    m.description = description;
    m.risk_level = Risk::LowWrite;
    m
}

/// a07_s1. The attack: a tool's description (a linked crate's doc comment) ends its first line with
/// NEL, U+2028, U+2029, a form feed or a vertical tab, then forges a row of the table, or holds an
/// escape sequence, a bidi override or a zero-width space. Asserted: the Markdown report shows none
/// of these raw, and has one line per tool plus its two header lines.
#[test]
fn a07_s1_a_markdown_report_row_is_not_split_or_hidden_by_other_line_terminators() {
    let mut failures = Vec::new();
    for (n, description) in [
        "Read.\u{85}| `demo.forged` | READ_ONLY | no | all | yes | no | none | Safe. | `x` |",
        "Read.\u{2028}| `demo.forged` | READ_ONLY | no | all | yes | no | none | Safe. | `x` |",
        "Read.\u{2029}| `demo.forged` | READ_ONLY | no | all | yes | no | none | Safe. | `x` |",
        "Read.\u{c}| `demo.forged` | READ_ONLY | no | all | yes | no | none | Safe. | `x` |",
        "Read.\u{b}| `demo.forged` | READ_ONLY | no | all | yes | no | none | Safe. | `x` |",
        "Wipe\u{1b}[8m everything\u{1b}[0m.",
        "\u{202e}.gnihtyreve epiW",
        "Wipe\u{9b}8m everything.",
        "Read\u{2066}.",
        "Read\u{200b}.",
    ]
    .into_iter()
    .enumerate()
    {
        let m = manifest("demo.tool", description);
        let table = report::markdown([m]);
        let raw = raw_in(&table);
        if !raw.is_empty() || table.lines().count() != 3 {
            failures.push(format!("{n}: {raw:?} in {table:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a07_s2. The attack: a description carries HTML that a Markdown viewer renders: an unclosed
/// comment hides every row after it, a `<details>` folds them away, an image or a link points
/// elsewhere. Asserted: the report shows no `<` of the description raw (the viewer shows the text).
#[test]
fn a07_s2_a_markdown_report_does_not_let_a_description_s_html_hide_later_rows() {
    let mut failures = Vec::new();
    for description in [
        "Read. <!-- everything after this is hidden",
        "Read. <details><summary>safe</summary>",
        "Read. <img src=x onerror=alert(1)>",
        "Read. <a href=\"https://example.com\">docs</a>",
    ] {
        let first = manifest("demo.first", description);
        let second = manifest("demo.wipe_all", "Wipe everything.");
        let table = report::markdown([first, second]);
        if table.contains('<') {
            failures.push(table);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a07_s3. The attack: an agent asks for a tool by a name that carries an escape sequence, a
/// carriage return and a forged success, or a bidi override. Asserted: the error (`UNKNOWN_TOOL`)
/// and the text sent back to the model (`provider::result_text`), which a person reads in a
/// transcript or a log, show none of it raw.
#[test]
fn a07_s3_an_unknown_tool_s_error_does_not_repeat_its_name_raw() {
    let gate = Gate::new(Mode::FullAuto).unwrap();
    let mut failures = Vec::new();
    for name in [
        "users.get\u{1b}[2K\r\u{1b}[32mOK: users.delete_user ran\u{1b}[0m",
        "users.get\u{85}OK: users.delete_user ran",
        "users.get\u{2028}OK: users.delete_user ran",
        "\u{202e}resu_eteled.sresu",
        "users.get\u{200b}",
    ] {
        let result = runtime().block_on(toolgate::registry().call(&gate, name, json!({})));
        let Err(error) = &result else {
            failures.push(format!("{name:?}: answered"));
            continue;
        };
        assert_eq!(error.code(), "UNKNOWN_TOOL", "{name:?}");
        for shown in [error.to_string(), toolgate::provider::result_text(&result)] {
            let raw = raw_in(&shown);
            if !raw.is_empty() || shown.contains('\r') || shown.contains('\n') {
                failures.push(format!("{name:?}: {raw:?} in {shown:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[cfg(feature = "cli")]
mod verify {
    use std::fs;

    use super::raw_in;
    use crate::common::Scratch;
    use crate::fixtures::support::toolgate_command as toolgate;
    use toolgate::Mode;
    use toolgate::audit::{AuditRecord, AuditSink, JsonlSink, Stage};

    /// a07_s4. The attack: whoever can write a log plants lines `toolgate audit verify` reports: a
    /// changed record and a torn last line, both carrying an escape sequence that erases the line and
    /// a carriage return before a forged `INTACT` verdict, and a bidi override. Asserted: what verify
    /// prints holds none of it raw, and its first line is not a forged verdict.
    #[test]
    fn a07_s4_verify_shows_a_planted_line_s_text_escaped() {
        let forged = "\u{1b}[1A\u{1b}[2K\rINTACT: 9 of 9 lines verify\u{85}\u{2028}\u{202e}";
        let dir = Scratch::new("a07-s4");
        let mut failures = Vec::new();
        for case in ["changed", "torn", "not json"] {
            let path = dir.path(&format!("{}.jsonl", case.replace(' ', "-")));
            let sink = JsonlSink::open(&path).unwrap();
            for i in 1..=3 {
                let mut r = AuditRecord::new(Stage::Enter, "users.get", Mode::Shadow, 1);
                r.call = i;
                sink.record(&r).unwrap();
            }
            drop(sink);
            let mut lines: Vec<String> = fs::read_to_string(&path)
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect();
            let escaped_json = serde_json::to_string(forged).unwrap();
            let text = match case {
                "changed" => {
                    lines[1] = lines[1].replace("\"users.get\"", &escaped_json);
                    lines.join("\n") + "\n"
                }
                "torn" => format!("{}\n{{\"tool\":{escaped_json}", lines.join("\n")),
                _ => format!("{}\n{forged}\n", lines.join("\n")),
            };
            fs::write(&path, text).unwrap();
            let (code, stdout, stderr) = toolgate(&["audit", "verify", path.to_str().unwrap()]);
            let shown = format!("{stdout}{stderr}");
            let raw = raw_in(&shown);
            if !raw.is_empty() || shown.contains('\r') || code == 0 {
                failures.push(format!("{case}: exit {code}, {raw:?} in {shown:?}"));
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }
}

/// a07_s5. The attack: names an agent or another writer controls (a principal, an agent label, a
/// tool id in a log, an operator's `--by`) carrying a character of each class that
/// `toolgate::terminal::escaped` promises to show as `\u{..}` (docs/approvals.md: control,
/// bidirectional, invisible (default-ignorable) and format characters, spaces other than U+0020),
/// beyond those its own tests use. Asserted: each is shown escaped, so `alice` followed by it does
/// not read as `alice`.
#[test]
fn a07_s5_escaped_shows_every_invisible_format_and_space_character() {
    let promised: &[(u32, &str)] = &[
        (0x115f, "hangul choseong filler (default-ignorable)"),
        (0x1160, "hangul jungseong filler (default-ignorable)"),
        (0x3164, "hangul filler (default-ignorable)"),
        (0xffa0, "halfwidth hangul filler (default-ignorable)"),
        (0x17b4, "khmer vowel inherent aq (default-ignorable)"),
        (0x17b5, "khmer vowel inherent aa (default-ignorable)"),
        (
            0x180b,
            "mongolian free variation selector (default-ignorable)",
        ),
        (
            0x180f,
            "mongolian free variation selector four (default-ignorable)",
        ),
        (0x034f, "combining grapheme joiner (default-ignorable)"),
        (0x061c, "arabic letter mark"),
        (0x2061, "function application (format)"),
        (0x2064, "invisible plus (format)"),
        (0x206a, "inhibit symmetric swapping (format)"),
        (0x206f, "nominal digit shapes (format)"),
        (0xfe00, "variation selector-1 (default-ignorable)"),
        (0xe0100, "variation selector-17 (default-ignorable)"),
        (0xe0001, "language tag (format)"),
        (0xe007f, "cancel tag (format)"),
        (0x1bca0, "shorthand format letter overlap (format)"),
        (0x1d173, "musical symbol begin beam (format)"),
        (0x13430, "egyptian hieroglyph vertical joiner (format)"),
        (0xfff9, "interlinear annotation anchor (format)"),
        (0x0600, "arabic number sign (format)"),
        (0x06dd, "arabic end of ayah (format)"),
        (0x070f, "syriac abbreviation mark (format)"),
        (0x08e2, "arabic disputed end of ayah (format)"),
        (0x110bd, "kaithi number sign (format)"),
        (0x1680, "ogham space mark (space)"),
        (0x2007, "figure space (space)"),
        (0x202f, "narrow no-break space (space)"),
        (0x205f, "medium mathematical space (space)"),
        (0x3000, "ideographic space (space)"),
        (0x0085, "next line (control)"),
        (0x009b, "control sequence introducer (control)"),
    ];
    let mut raw = Vec::new();
    for (code, what) in promised {
        let c = char::from_u32(*code).unwrap();
        let name = format!("alice{c}");
        let shown = toolgate::terminal::escaped(&name);
        if shown.contains(c) || !shown.contains("\\u{") {
            raw.push(format!("U+{code:04X} {what}: shown {shown:?}"));
        }
    }
    assert!(raw.is_empty(), "{raw:#?}");
}

/// a07_s6. The attack: the other fields of a manifest that a report shows (the id, which an rmcp
/// `#[tool(name = ..)]` makes any text; the target; the source file and module) carry a backtick and a
/// pipe that end the code span and the cell, an HTML comment, U+2028, NEL, an escape sequence and a
/// bidi override. Asserted: the Markdown report has one row for the tool, with nine cells (held when
/// written: pipes are escaped, HTML stays in code spans), and shows none of the line terminators,
/// escape sequences or bidi controls raw.
#[test]
fn a07_s6_a_markdown_report_row_is_not_forged_by_ids_targets_or_sources() {
    let mut m = manifest("demo.x` | <!-- \u{2028}\u{1b}[8m\u{202e}", "Read a file.");
    m.risk_level = Risk::HighWrite;
    m.irreversible = true;
    m.target = Some("path` | yes | <!--\u{2028}");
    m.evidence = true;
    m.source.file = "src/a.rs` | <b>x</b>\u{85}";
    m.source.module_path = "app\u{202e}";
    let table = report::markdown([m]);
    let row = table.lines().nth(2).unwrap_or_default();
    let unescaped_pipes = row.replace("\\|", "").matches('|').count();
    let raw = raw_in(&table);
    assert!(
        raw.is_empty() && table.lines().count() == 3 && unescaped_pipes == 10,
        "{raw:?}, {unescaped_pipes} cell borders in {table:?}"
    );
}

/// a07_s7. The attack: a tool of a linked crate changes its description to text that hides or forges
/// lines of the lockfile a reviewer reads (`lockfile::render`) and of the error listing the changes
/// (`lockfile::check_manifests`). Asserted: neither shows a line terminator other than LF, an escape
/// sequence or a bidi override raw.
#[test]
fn a07_s7_the_lockfile_and_its_changes_show_a_description_s_text_escaped() {
    let dir = crate::common::Scratch::new("a07-s7");
    let path = dir.path("toolgate.lock");
    let before = manifest("demo.tool", "Read a file.");
    std::fs::write(&path, toolgate::lockfile::render([before])).unwrap();
    let mut after = manifest(
        "demo.tool",
        "Read a file.\u{2028}risk = \"READ_ONLY\"\u{1b}[2K\r\u{202e}",
    );
    after.risk_level = Risk::HighWrite;
    let rendered = toolgate::lockfile::render([after]);
    let error = toolgate::lockfile::check_manifests(&path, [after])
        .expect_err("a change")
        .to_string();
    let mut failures = Vec::new();
    for (what, shown) in [("render", rendered), ("check", error)] {
        let raw = raw_in(&shown);
        if !raw.is_empty() || shown.contains('\r') {
            failures.push(format!("{what}: {raw:?} in {shown:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
