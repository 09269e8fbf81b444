//! Every report of the manifests (Markdown, JSON, CSV, the lockfile and its check's list of changes)
//! keeps one tool to one row, record or line whatever line terminator a field a tool sets holds: no
//! text of one tool can start a row of its own or hide the rows after it.

use toolgate::lockfile::{self, LockfileError, Update};
use toolgate::report::{self, Format, LINE_TERMINATORS};
use toolgate::{Denied, ToolManifest, tool};

/// Reads a page.
#[tool(risk = "READ_ONLY", domain = "reports")]
pub fn plain(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

#[doc = "Reads a row.\r| `reports.forged` | READ_ONLY | no | FULL_AUTO | yes | no | none | harmless | `x:1` |"]
#[tool(risk = "HIGH_WRITE", domain = "reports")]
pub fn carriage(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

/// What a hostile field holds: a terminator, then what would pass for a row of another tool, a CSV
/// record and a JSON line.
fn hostile(terminator: &str) -> String {
    format!(
        "first{terminator}| `FORGED` | READ_ONLY | no | FULL_AUTO | yes | no | none | FORGED | `x:1` |\
         {terminator}FORGED,,READ_ONLY{terminator}\"FORGED\": 1{terminator}"
    )
}

/// Every terminator, and a carriage return before a line feed.
fn terminators() -> Vec<String> {
    let mut all: Vec<String> = LINE_TERMINATORS.iter().map(|c| c.to_string()).collect();
    all.push("\r\n".to_owned());
    all
}

fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// The fields a tool sets that a report shows.
const FIELDS: [&str; 6] = [
    "id",
    "domain",
    "description",
    "target",
    "file",
    "module_path",
];

/// Three tools, the middle one with `field` hostile.
fn three(field: &str, terminator: &str) -> Vec<ToolManifest> {
    let base = *toolgate::registry()
        .manifest("reports.plain")
        .expect("the plain tool is linked");
    let mut tools = Vec::new();
    for name in ["a_before", "m_hostile", "z_after"] {
        let mut m = base;
        m.id = leak(format!("reports.{name}"));
        tools.push(m);
    }
    let text = leak(hostile(terminator));
    let m = &mut tools[1];
    match field {
        "id" => m.id = leak(format!("reports.m_hostile{text}")),
        "domain" => m.domain = Some(text),
        "description" => m.description = text,
        "target" => m.target = Some(text),
        "file" => m.source.file = text,
        "module_path" => m.source.module_path = text,
        other => panic!("no field {other}"),
    }
    tools
}

/// The lines of `text` as any reader might break them: at every terminator, CRLF as one.
fn lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if LINE_TERMINATORS.contains(&c) {
            out.push(&text[start..at]);
            let mut end = at + c.len_utf8();
            if c == '\r' && chars.peek().is_some_and(|&(_, n)| n == '\n') {
                chars.next();
                end += 1;
            }
            start = end;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// RFC 4180 records: fields split at commas outside quotes, records at CRLF outside quotes.
fn csv_records(text: &str) -> Vec<Vec<String>> {
    let (mut records, mut record, mut field) = (Vec::new(), Vec::new(), String::new());
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => record.push(std::mem::take(&mut field)),
            '\r' if !quoted && chars.peek() == Some(&'\n') => {
                chars.next();
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            c => field.push(c),
        }
    }
    assert!(!quoted && field.is_empty() && record.is_empty(), "{text:?}");
    records
}

/// The pipes of a Markdown row that end a cell: those no backslash escapes.
fn cell_ends(row: &str) -> usize {
    let bytes = row.as_bytes();
    (0..bytes.len())
        .filter(|&i| bytes[i] == b'|' && (i == 0 || bytes[i - 1] != b'\\'))
        .count()
}

fn what(field: &str, terminator: &str) -> String {
    format!("{field} holding {:?}", terminator)
}

#[test]
fn markdown_keeps_each_tool_to_one_row_whatever_terminator_any_field_holds() {
    for terminator in terminators() {
        for field in FIELDS {
            let what = what(field, &terminator);
            let table = report::render_manifests(Format::Markdown, three(field, &terminator));
            let rows = lines(&table);
            assert_eq!(rows.len(), 5, "{what}: {table:?}");
            for (row, id) in rows[2..].iter().zip(["a_before", "m_hostile", "z_after"]) {
                assert!(
                    row.starts_with("| `") && row.ends_with(" |"),
                    "{what}: {row:?}"
                );
                assert!(row.contains(id), "{what}: {row:?}");
                assert_eq!(cell_ends(row), 10, "{what}: {row:?}");
            }
            for row in [rows[2], rows[4]] {
                assert!(!row.contains("FORGED"), "{what}: {row:?}");
            }
        }
    }
}

#[test]
fn json_keeps_each_value_to_its_own_string_and_lines_whatever_terminator_any_field_holds() {
    for terminator in terminators() {
        for field in FIELDS {
            let what = what(field, &terminator);
            let tools = three(field, &terminator);
            let plain = report::render_manifests(Format::Json, three(field, ""));
            for text in [
                report::render_manifests(Format::Json, &tools),
                report::json_pretty(&tools) + "\n",
            ] {
                // The same lines as the report of the same tools without the terminator.
                assert_eq!(lines(&text).len(), lines(&plain).len(), "{what}: {text}");
                let values: serde_json::Value = serde_json::from_str(&text).unwrap();
                let back: Vec<serde_json::Value> = values.as_array().unwrap().clone();
                assert_eq!(back.len(), 3, "{what}");
                let expected = serde_json::to_value(tools[1]).unwrap();
                assert_eq!(back[1], expected, "{what}: the value survives");
                for line in lines(&text) {
                    assert!(
                        !line.contains("FORGED") || line.trim_start().starts_with('"'),
                        "{what}: {line:?}"
                    );
                }
            }
            let compact = report::json_compact(&tools);
            assert_eq!(lines(&compact).len(), 1, "{what}: {compact}");
            let back: serde_json::Value = serde_json::from_str(&compact).unwrap();
            assert_eq!(back[1], serde_json::to_value(tools[1]).unwrap(), "{what}");
        }
    }
}

#[test]
fn csv_keeps_each_tool_to_one_record_whatever_terminator_any_field_holds() {
    for terminator in terminators() {
        for field in FIELDS {
            let what = what(field, &terminator);
            let tools = three(field, &terminator);
            let text = report::render_manifests(Format::Csv, &tools);
            let records = csv_records(&text);
            assert_eq!(records.len(), 4, "{what}: {text:?}");
            assert!(records.iter().all(|r| r.len() == 15), "{what}: {records:?}");
            let ids: Vec<&str> = records[1..].iter().map(|r| r[0].as_str()).collect();
            assert_eq!(
                ids,
                tools.iter().map(|m| m.id).collect::<Vec<_>>(),
                "{what}"
            );
            let column = match field {
                "id" => 0,
                "domain" => 1,
                "description" => 7,
                "file" => 8,
                "module_path" => 10,
                _ => 12,
            };
            let expected = match field {
                "id" => tools[1].id,
                "domain" => tools[1].domain.unwrap(),
                "description" => tools[1].description,
                "file" => tools[1].source.file,
                "module_path" => tools[1].source.module_path,
                _ => tools[1].target.unwrap(),
            };
            assert_eq!(
                records[2][column], expected,
                "{what}: the field survives whole"
            );
            for record in [&records[1], &records[3]] {
                assert!(record.iter().all(|f| !f.contains("FORGED")), "{what}");
            }
        }
    }
}

#[test]
fn the_lockfile_and_its_list_of_changes_keep_each_tool_to_its_lines_whatever_terminator() {
    let dir = crate::common::Scratch::new("report-terminators");
    for (n, terminator) in terminators().into_iter().enumerate() {
        for field in FIELDS {
            let what = what(field, &terminator);
            let tools = three(field, &terminator);
            let plain = lockfile::render(three(field, ""));
            let text = lockfile::render(&tools);
            assert_eq!(lines(&text).len(), lines(&plain).len(), "{what}: {text}");
            let path = dir.path(&format!("{n}-{field}.lock.json"));
            std::fs::write(&path, &text).unwrap();
            lockfile::check_with(&path, &tools, Update::Check)
                .unwrap_or_else(|e| panic!("{what}: the lockfile reads back as written: {e}"));

            // The list of changes, as a terminal shows it: one line per change. The lockfile leaves
            // the source's file out (it is not portable), so a change there is none.
            if field == "file" {
                continue;
            }
            std::fs::write(&path, &plain).unwrap();
            let Err(error @ LockfileError::Mismatch { .. }) =
                lockfile::check_with(&path, &tools, Update::Check)
            else {
                panic!("{what}: a changed field is a mismatch");
            };
            let shown = error.to_string();
            assert_eq!(
                lines(&shown).len(),
                error.changes().len() + 2,
                "{what}: {shown}"
            );
            for change in error.changes() {
                assert_eq!(lines(&change.to_string()).len(), 1, "{what}: {change}");
            }
        }
    }
}

#[test]
fn a_declared_description_with_a_carriage_return_shows_one_row() {
    let linked = [
        *toolgate::registry().manifest("reports.carriage").unwrap(),
        *toolgate::registry().manifest("reports.plain").unwrap(),
    ];
    assert!(linked[0].description.contains('\r'));
    let table = report::render_manifests(Format::Markdown, linked);
    assert_eq!(lines(&table).len(), 4, "{table:?}");
    assert!(!table.contains("reports.forged"), "{table:?}");
    let _ = (carriage(1), plain(1));
}

/// The lockfile is never written through a symbolic link: one at its name, dangling or to a file, is
/// refused, as is one at the name of the temporary file it is written through; the link's target is
/// untouched either way.
#[cfg(unix)]
#[test]
fn the_lockfile_is_not_written_through_a_link() {
    let tools = three("description", "");
    for dangling in [true, false] {
        let dir = crate::common::Scratch::new("lockfile-links");
        let target = dir.path("target");
        if !dangling {
            std::fs::write(&target, "the planter's file\n").unwrap();
        }
        let path = dir.path("tools.lock.json");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let error = lockfile::check_with(&path, &tools, Update::Overwrite).unwrap_err();
        assert!(
            matches!(error, LockfileError::Io { .. })
                && error.to_string().contains("symbolic link"),
            "{error}"
        );
        let untouched = |what: &str| {
            if dangling {
                assert!(std::fs::symlink_metadata(&target).is_err(), "{what}");
            } else {
                assert_eq!(
                    std::fs::read_to_string(&target).unwrap(),
                    "the planter's file\n",
                    "{what}"
                );
            }
        };
        untouched("a link at the lockfile's name");

        // Links at every temporary name the next writes could take.
        std::fs::remove_file(&path).unwrap();
        let temporary =
            |n: u64| dir.path(&format!("tools.lock.json.{}.{n}.tmp", std::process::id()));
        for n in 0..1_000 {
            std::os::unix::fs::symlink(&target, temporary(n)).unwrap();
        }
        let error = lockfile::check_with(&path, &tools, Update::Overwrite).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        untouched("a link at the temporary name");
        assert!(
            std::fs::symlink_metadata(&path).is_err(),
            "nothing was renamed into place"
        );
    }
}

/// A description's `&` is shown as typed: `&lt;` in it is not shown as `<`.
#[test]
fn a_markdown_description_shows_a_character_reference_as_typed() {
    let mut m = *toolgate::registry().manifest("reports.plain").unwrap();
    m.description = "Read &lt;b&gt; & <b>.";
    let table = report::markdown([m]);
    assert!(
        table.contains("| Read &amp;lt;b&amp;gt; &amp; &lt;b&gt;. |"),
        "{table:?}"
    );
}

/// Characters a field may hold: any, and more often one that ends a line, hides or reorders text, or
/// is HTML or a cell border.
fn hostile_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let marked = [
        '\n',
        '\r',
        '\u{85}',
        '\u{2028}',
        '\u{2029}',
        '\u{c}',
        '\u{b}',
        '\u{1b}',
        '\u{9b}',
        '\u{7f}',
        '\u{202e}',
        '\u{2066}',
        '\u{200b}',
        '\u{feff}',
        '\u{e0041}',
        '\u{a0}',
        '<',
        '>',
        '&',
        '|',
        '`',
        '\\',
        '"',
    ];
    proptest::collection::vec(
        prop_oneof![any::<char>(), proptest::sample::select(marked.to_vec())],
        0..24,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Whatever a description holds, the Markdown report shows one row per tool, no character that
    /// hides raw and no `<` (no HTML); the JSON reports and the lockfile show no such character
    /// outside the whitespace between tokens, and read back to the same value.
    #[test]
    fn every_report_shows_any_description_escaped_and_keeps_its_value(description in hostile_text()) {
        let mut tools = three("description", "");
        tools[1].description = leak(description.clone());
        let hides_raw = |text: &str| {
            text.chars()
                .filter(|&c| toolgate::terminal::hides(c) && !matches!(c, '\n' | '\r' | '\t'))
                .collect::<Vec<char>>()
        };
        let table = report::markdown(&tools);
        proptest::prop_assert!(hides_raw(&table).is_empty(), "{table:?}");
        proptest::prop_assert!(!table.contains('\r') && !table.contains('<'), "{table:?}");
        proptest::prop_assert_eq!(table.lines().count(), 5, "{:?}", table);
        for text in [report::json_pretty(&tools), report::json_compact(&tools)] {
            proptest::prop_assert!(hides_raw(&text).is_empty(), "{text:?}");
            let back: serde_json::Value = serde_json::from_str(&text).unwrap();
            proptest::prop_assert_eq!(&back[1], &serde_json::to_value(tools[1]).unwrap());
        }
        let locked = lockfile::render(&tools);
        proptest::prop_assert!(hides_raw(&locked).is_empty(), "{locked:?}");
        let back: serde_json::Value = serde_json::from_str(&locked).unwrap();
        proptest::prop_assert_eq!(back[1]["description"].as_str(), Some(description.as_str()));
        // The digest's canonical form keeps the text as JSON requires, unchanged.
        let canonical = report::canonical_json(&tools);
        let required = serde_json::to_string(&description).unwrap();
        proptest::prop_assert!(canonical.contains(&required), "{canonical:?}");
    }
}
