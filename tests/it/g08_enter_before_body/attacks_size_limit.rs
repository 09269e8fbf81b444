//! An outside attack where several audit sinks meet a real fault: a JSONL log between two in-memory
//! sinks, under a file-size limit (`ulimit -f`) with `SIGXFSZ` ignored, so that the kernel fails the
//! log's write with `EFBIG` while the other sinks go on.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::common::Scratch;
use toolgate::audit::{JsonlSink, MemorySink, Outcome, Stage, verify_file};
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

/// The child's working folder; set only in a child run.
const CHILD_DIR: &str = "TOOLGATE_SINKS_LIMIT_DIR";

static NOTED: AtomicU64 = AtomicU64::new(0);

/// Note an entry in a journal.
#[tool(risk = "LOW_WRITE", domain = "szs")]
fn note(n: u64, entry: String) -> Result<u64, Denied> {
    let _ = entry;
    NOTED.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// In the child: sinks `before`, a JSONL log, `after`; calls until the log's write fails, then checks
/// what each sink saw of the refused call.
#[test]
fn child_three_sinks_past_a_size_limit() {
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        return;
    };
    let (before, after) = (MemorySink::new(), MemorySink::new());
    let log = dir.join("audit.jsonl");
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(before.clone())
        .audit(JsonlSink::open(&log).unwrap())
        .audit(after.clone())
        .build()
        .unwrap();
    let entry = "e".repeat(700);
    let mut ran = 0;
    let refused_at = loop {
        match gate.run(|| note(ran, entry.clone())) {
            Ok(_) => ran += 1,
            Err(denied) => {
                assert_eq!(denied.code(), DenialCode::AuditUnavailable, "{denied}");
                break denied;
            }
        }
        assert!(ran < 2_000, "the log never reached the size limit");
    };
    assert_eq!(NOTED.load(Ordering::SeqCst), ran, "{refused_at}");
    let stages = |sink: &MemorySink| -> Vec<(Stage, Option<Outcome>)> {
        sink.records()
            .iter()
            .filter(|r| r.tool == "szs.note")
            .map(|r| (r.stage, r.outcome))
            .collect()
    };
    let (seen_before, seen_after) = (stages(&before), stages(&after));
    // The sink before the log got the refused call's `enter` and its `exit` (`refused`).
    assert_eq!(
        seen_before[seen_before.len() - 2..],
        [(Stage::Enter, None), (Stage::Exit, Some(Outcome::Refused))],
        "{seen_before:?}"
    );
    // The sink after it never saw the refused call: it holds each body's pair, nothing more.
    let enters_after = seen_after.iter().filter(|s| s.0 == Stage::Enter).count() as u64;
    assert_eq!(enters_after, ran, "{seen_after:?}");
    assert!(
        seen_after
            .iter()
            .all(|s| s.0 != Stage::Exit || s.1 == Some(Outcome::Ok)),
        "{seen_after:?}"
    );
    let report = verify_file(&log).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.torn_tail, None, "{report}");
    println!("@ran {ran}");
}

/// Guarantee 8: "With several sinks, an `enter` that one refuses (or panics on) refuses the call, the
/// sinks before it get its `exit`, and the sinks after it never see it"; guarantee 9: "A failed write
/// is cut off again". Attack: a gate writes to an in-memory sink, a JSONL log and another in-memory
/// sink; the log's file reaches a size limit (`EFBIG`, its line cut short) while calls go on. Asserts
/// (in a child process under the limit): the call is refused `AUDIT_UNAVAILABLE` without its body
/// running, the first sink holds its `enter` and an `exit` of outcome `refused`, the last never saw
/// it, and the log verifies without a torn tail.
#[test]
fn a08_40_a_log_failing_for_a_file_size_limit_between_two_sinks_splits_no_record() {
    let _serial = crate::common::serial();
    let scratch = Scratch::new("sinks-size-limit");
    let output = Command::new("sh")
        .args(["-c", r#"trap '' XFSZ; ulimit -f 64 && exec "$0" "$@""#])
        .arg(std::env::current_exe().unwrap())
        .args([
            "g08_enter_before_body::attacks_size_limit::child_three_sinks_past_a_size_limit",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, scratch.dir())
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed") && stdout.contains("@ran "),
        "the child failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}
