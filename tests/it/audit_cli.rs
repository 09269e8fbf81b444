//! The `toolgate` command on intact, tampered and torn logs.

#![cfg(feature = "cli")]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::Scratch;
use crate::fixtures::support::{assert_text, exited, toolgate_command as toolgate};
use toolgate::audit::{AuditRecord, AuditSink, Decision, JsonlSink, Stage};
use toolgate::{Mode, Risk};

/// A log of five records: three allowed reads, then two refused deletes in SHADOW mode.
fn write_log(dir: &Scratch) -> (PathBuf, Vec<u8>) {
    let path = dir.path("audit.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    for call in 1..=5 {
        let mut record = if call <= 3 {
            let mut r = AuditRecord::new(Stage::Enter, "users.get", Mode::Shadow, 1);
            r.decision = Some(Decision::Allowed);
            r.declared_risk = Some(Risk::ReadOnly);
            r
        } else {
            let mut r = AuditRecord::new(Stage::Refused, "users.delete", Mode::Shadow, 1);
            r.decision = Some(Decision::Refused);
            r.code = Some("ABOVE_CEILING".into());
            r.declared_risk = Some(Risk::HighWrite);
            r.arguments_digest = Some("d".repeat(64));
            r
        };
        record.call = call;
        sink.record(&record).unwrap();
    }
    drop(sink);
    let bytes = fs::read(&path).unwrap();
    (path, bytes)
}

fn verify(path: &Path) -> (i32, String, String) {
    toolgate(&["audit", "verify", path.to_str().unwrap()])
}

#[test]
fn an_intact_log_exits_0() {
    let dir = Scratch::new("intact");
    let (path, _) = write_log(&dir);
    let (stdout, stderr) = exited(0, verify(&path));
    assert_text(
        &stdout,
        Some("INTACT: 5 of 5 lines verify\n"),
        &["last intact record: seq 5, hash "],
    );
    assert_eq!(stderr, "");
}

#[test]
fn a_tampered_log_exits_1_and_names_the_line() {
    let dir = Scratch::new("tampered");
    let (path, bytes) = write_log(&dir);
    let text = String::from_utf8(bytes).unwrap();
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    let edited = lines[2].replace("\"call\":3", "\"call\":4");
    lines[2] = &edited;
    fs::write(&path, lines.concat()).unwrap();
    let (stdout, _) = exited(1, verify(&path));
    assert_text(
        &stdout,
        Some("BROKEN: 2 of 5 lines verify\n"),
        &["first broken record: line 3 (seq 3): hash mismatch"],
    );

    lines.remove(2);
    fs::write(&path, lines.concat()).unwrap();
    let (stdout, _) = exited(1, verify(&path));
    assert_text(
        &stdout,
        None,
        &["first broken record: line 3 (seq 4): prev_hash mismatch"],
    );
}

#[test]
fn a_torn_log_exits_2() {
    let dir = Scratch::new("torn");
    let (path, bytes) = write_log(&dir);
    fs::write(&path, &bytes[..bytes.len() - 30]).unwrap();
    let (stdout, _) = exited(2, verify(&path));
    assert_text(
        &stdout,
        Some("TORN TAIL: 4 of 5 lines verify\n"),
        &["torn tail: line 5 ("],
    );
    assert!(!stdout.contains("broken"), "{stdout}");
}

#[test]
fn an_unreadable_log_exits_3() {
    let dir = Scratch::new("missing");
    let (_, stderr) = exited(3, verify(&dir.path("absent.jsonl")));
    assert_text(&stderr, None, &["cannot read", "absent.jsonl"]);
    // A directory cannot be read as a file either.
    let (code, _, _) = verify(dir.dir());
    assert_eq!(code, 3);
}

#[test]
fn usage_errors_do_not_look_like_a_verdict() {
    exited(64, toolgate(&["audit", "verify"]));
    exited(64, toolgate(&["audit", "check", "x"]));
    let (help, _) = exited(0, toolgate(&["audit", "verify", "--help"]));
    for status in [
        "0   the log is intact",
        "1   the hash chain is broken",
        "2   only the last line is torn",
        "3   the file could not be read",
    ] {
        assert!(help.contains(status), "{help}");
    }
}

#[test]
fn promotion_prints_the_markdown_report() {
    let dir = Scratch::new("promotion");
    let (path, bytes) = write_log(&dir);
    let (stdout, stderr) = exited(0, toolgate(&["audit", "promotion", path.to_str().unwrap()]));
    assert_text(
        &stdout,
        Some("# Promotion report\n"),
        &[
            "| SHADOW | READ_ONLY | 3 | 0 | 0 | 0 | 0 |",
            "| SHADOW | HIGH_WRITE | 0 | 0 | 2 | 2 | 2 |",
        ],
    );
    assert!(
        stdout.contains(&format!(
            "| SHADOW | users.delete | {} | 2 |",
            "d".repeat(64)
        )),
        "{stdout}"
    );
    assert_eq!(stderr, "");

    fs::write(&path, &bytes[..bytes.len() - 30]).unwrap();
    let (code, stdout, stderr) = toolgate(&["audit", "promotion", path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stdout.starts_with("# Promotion report\n"), "{stdout}");
    assert!(stderr.contains("is not intact"), "{stderr}");
}

#[test]
fn a_log_cut_at_its_end_exits_4_against_the_expected_last_hash() {
    let dir = Scratch::new("cut");
    let (path, bytes) = write_log(&dir);
    let (stdout, _) = exited(0, verify(&path));
    let last = stdout
        .lines()
        .find_map(|l| l.strip_prefix("last intact record: seq 5, hash "))
        .unwrap()
        .to_owned();
    let file = path.to_str().unwrap();
    let expect = |hash: &str| toolgate(&["audit", "verify", file, "--expect-last", hash]);
    assert_eq!(expect(&last).0, 0);
    assert_eq!(expect(&last.to_uppercase()).0, 0, "hex in any case");

    // The last two records removed: the chain that is left is intact, and says so alone.
    let text = String::from_utf8(bytes).unwrap();
    let kept: String = text.split_inclusive('\n').take(3).collect();
    fs::write(&path, kept).unwrap();
    assert_eq!(
        verify(&path).0,
        0,
        "without the expected hash, a cut is not seen"
    );
    let (code, stdout, stderr) = expect(&last);
    assert_eq!(code, 4, "{stdout}{stderr}");
    assert_text(
        &stdout,
        Some("CUT: the chain is intact but ends at hash "),
        &[
            &format!("not at the expected {last}"),
            "INTACT: 3 of 3 lines verify",
        ],
    );
}

#[test]
fn a_cut_log_with_a_torn_line_appended_exits_4_against_the_expected_last_hash() {
    let dir = Scratch::new("cut-torn");
    let (path, bytes) = write_log(&dir);
    let (_, stdout, _) = verify(&path);
    let hash_of = |stdout: &str, seq: u64| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("last intact record: seq {seq}, hash ")))
            .unwrap()
            .to_owned()
    };
    let last = hash_of(&stdout, 5);
    let file = path.to_str().unwrap();
    let expect = |hash: &str| toolgate(&["audit", "verify", file, "--expect-last", hash]);

    // The last two records removed, and a few bytes without a newline after the rest: torn, but the
    // expected hash is nowhere, so the cut wins.
    let text = String::from_utf8(bytes).unwrap();
    let kept: String = text.split_inclusive('\n').take(3).collect();
    fs::write(&path, format!("{kept}{{\"agent")).unwrap();
    assert_eq!(verify(&path).0, 2, "alone, only the torn tail shows");
    let (code, stdout, stderr) = expect(&last);
    assert_eq!(code, 4, "{stdout}{stderr}");
    assert_text(
        &stdout,
        Some("CUT: "),
        &[&format!("not at the expected {last}"), "torn tail: line 4"],
    );

    // The hash of the last complete record: only the tail is torn.
    let third = hash_of(&verify(&path).1, 3);
    let (code, stdout, _) = expect(&third);
    assert_eq!(code, 2, "{stdout}");
    assert_text(&stdout, Some("TORN TAIL: 3 of 4 lines verify"), &[]);
}

/// Characters that hide, fake or reorder text on a terminal: what a writer of a log, or of a database,
/// may put in a tool id, a code or a name for an operator to misread.
pub(crate) const HIDDEN: [char; 14] = [
    '\u{202e}',
    '\u{2066}',
    '\u{1b}',
    '\u{9b}',
    '\u{200b}',
    '\u{2060}',
    '\u{feff}',
    '\u{ad}',
    '\u{e0041}',
    '\u{2028}',
    '\u{2029}',
    '\u{180e}',
    '\u{115f}',
    '\u{fe0f}',
];

/// `x` and one of every [`HIDDEN`] character.
pub(crate) fn hidden_text() -> String {
    HIDDEN.iter().map(|c| format!("x{c}")).collect()
}

/// Every [`HIDDEN`] character is shown as its `\u{..}` escape, none raw.
#[track_caller]
pub(crate) fn assert_shown_escaped(output: &str) {
    for c in HIDDEN {
        assert!(!output.contains(c), "{c:?} printed raw: {output:?}");
        let escape = format!("\\u{{{:04x}}}", u32::from(c));
        assert!(output.contains(&escape), "no {escape}: {output:?}");
    }
}

#[test]
fn promotion_shows_what_the_log_says_escaped() {
    let dir = Scratch::new("promotion-hidden");
    let path = dir.path("audit.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    let hidden = hidden_text();
    let mut cut = AuditRecord::new(
        Stage::Refused,
        format!("users.delete{hidden}"),
        Mode::Shadow,
        1,
    );
    cut.decision = Some(Decision::Refused);
    cut.code = Some("ABOVE_CEILING".into());
    cut.arguments_digest = Some(format!("d{hidden}"));
    sink.record(&cut).unwrap();
    let mut coded = AuditRecord::new(Stage::Refused, "users.get", Mode::Shadow, 2);
    coded.decision = Some(Decision::Refused);
    coded.code = Some(format!("DENIED{hidden}").into());
    sink.record(&coded).unwrap();
    drop(sink);
    let (code, stdout, stderr) = toolgate(&["audit", "promotion", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout.matches(&"\\u{202e}".to_owned()).count(),
        3,
        "the tool, its digest and the code: {stdout}"
    );
    assert_shown_escaped(&stdout);
}

#[test]
fn a_log_followed_by_a_huge_sparse_hole_is_refused_within_bounded_memory() {
    let dir = Scratch::new("sparse");
    let (path, bytes) = write_log(&dir);
    // Three GiB of zeros without a newline after the intact records, taking no disk space.
    let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(bytes.len() as u64 + (3 << 30)).unwrap();
    drop(file);
    for command in ["verify", "promotion"] {
        // Under a 1.2 GB address-space limit: reading the hole as one line would abort.
        let Output {
            status,
            stdout,
            stderr,
        } = Command::new("sh")
            .args([
                "-c",
                "ulimit -v 1200000 && exec \"$0\" audit \"$1\" \"$2\"",
                env!("CARGO_BIN_EXE_toolgate"),
                command,
                path.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr),
        );
        assert_eq!(status.code(), Some(8), "{command}: {stdout}{stderr}");
        let report = if command == "verify" {
            &stdout
        } else {
            &stderr
        };
        assert!(
            report.contains("first broken record: line 6: longer than"),
            "{command}: {stdout}{stderr}"
        );
        assert!(
            report.contains("5 of 6 lines verify"),
            "{command}: {report}"
        );
    }
    let (help, _) = exited(0, toolgate(&["audit", "verify", "--help"]));
    assert_text(&help, None, &["8   a line is longer than any record"]);
}
