//! Guarantee 9 (The JSONL audit log is tamper-evident), against user code that runs between a
//! decision and a body (sinks, approvers, an argument's `Serialize`, `escalate`), in every
//! declaration form.
//! Each test asserts the guarantee: it passes when the attack fails.

use toolgate::{Approval, ApprovalRequest, Gate, Mode};

use crate::common::gates;
use crate::fixtures::user_code::*;

#[test]
fn g9_strange_text_in_records_verifies() {
    let _s = serial();
    let path = tmp("strange");
    let weird = "a\u{7f}\u{2028}\u{2029}\"\\\n\t\r\u{0}\u{1f}/</script>\u{fffd}\u{10ffff}é";
    {
        let sink = toolgate::audit::JsonlSink::open(&path).unwrap();
        let gate = Gate::builder()
            .mode(Mode::FullAuto)
            .agent(weird)
            .audit(sink)
            .approver(move |_: &ApprovalRequest<'_>| Approval::Reject(weird.into()))
            .build()
            .unwrap();
        let _ = gate.run(high);
        let _ = gate.run(low);
        gate.lower_by(Mode::Shadow, weird).unwrap();
    }
    let report = toolgate::audit::verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report:?}");
}

#[test]
fn g9_appending_to_a_log_without_its_last_newline_keeps_the_chain() {
    let _s = serial();
    let path = tmp("nonewline");
    log_one_call(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.pop(), Some(b'\n'));
    std::fs::write(&path, &bytes).unwrap();
    let report = toolgate::audit::verify_file(&path).unwrap();
    assert!(
        report.final_newline_missing && report.broken.is_none(),
        "{report:?}"
    );
    match toolgate::audit::JsonlSink::open(&path) {
        Ok(sink) => {
            let gate = gates::audited(Mode::PartialAuto, sink);
            gate.run(low).unwrap();
            drop(gate);
            let report = toolgate::audit::verify_file(&path).unwrap();
            assert!(
                report.is_intact(),
                "a legitimate append after a crash broke the chain: {report:?}"
            );
        }
        Err(e) => eprintln!("open refuses (holds): {e}"),
    }
}

#[test]
fn g9_crlf_and_duplicate_keys_are_tampering() {
    let _s = serial();
    let path = tmp("crlf");
    log_one_call(&path);
    let text = std::fs::read_to_string(&path).unwrap();
    let crlf = text.replace('\n', "\r\n");
    assert!(
        toolgate::audit::verify_bytes(crlf.as_bytes())
            .broken
            .is_some()
    );
    let first = text.lines().next().unwrap();
    let dup = text.replacen(first, &format!("{{\"call\":999,{}", &first[1..]), 1);
    assert!(
        toolgate::audit::verify_bytes(dup.as_bytes())
            .broken
            .is_some()
    );
}

/// Writes the log at `path` of one allowed call.
fn log_one_call(path: &std::path::Path) {
    let gate = gates::audited(
        Mode::PartialAuto,
        toolgate::audit::JsonlSink::open(path).unwrap(),
    );
    gate.run(low).unwrap();
}
