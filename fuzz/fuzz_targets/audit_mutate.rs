//! Writes a valid audit log with `JsonlSink`, changes it in one way, and checks what the verifier and a
//! reopening sink make of it.
//!
//! Checked for every input:
//! - the log as written verifies, line for line, and each line holds the record's own strings;
//! - after a change, the report is never intact with every record unless the change was none (or only cut
//!   the last newline, which a crash can do and the report says);
//! - no record verifies past the first changed byte;
//! - a log cut at any byte verifies exactly the lines whose content is whole, and is torn where the cut
//!   falls inside a line;
//! - a sink reopens the changed log exactly when nothing in it is broken (and a torn tail only with
//!   `recover_torn_tail`), and the next record it writes verifies after the others.

#![no_main]

mod report_checks;

use std::fs;
use std::path::PathBuf;

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolgate::Mode;
use toolgate::audit::{AuditRecord, AuditSink, Durability, JsonlSink, Stage, verify_file};

#[derive(Arbitrary, Debug)]
struct Record {
    stage: u8,
    mode: u8,
    tool: String,
    call: u64,
    agent: Option<String>,
    message: Option<String>,
    duration_us: Option<u64>,
    timestamp: String,
}

impl Record {
    fn audit_record(&self) -> AuditRecord {
        const STAGES: [Stage; 5] = [
            Stage::Enter,
            Stage::Exit,
            Stage::Refused,
            Stage::ModeLowered,
            Stage::ApprovalGranted,
        ];
        const MODES: [Mode; 4] = [
            Mode::Shadow,
            Mode::Advisory,
            Mode::PartialAuto,
            Mode::FullAuto,
        ];
        let mut record = AuditRecord::new(
            STAGES[usize::from(self.stage) % STAGES.len()],
            self.tool.clone(),
            MODES[usize::from(self.mode) % MODES.len()],
            7,
        );
        record.call = self.call;
        record.agent = self.agent.clone().map(Into::into);
        record.message = self.message.clone();
        record.duration_us = self.duration_us;
        record.timestamp = self.timestamp.clone();
        record
    }
}

#[derive(Arbitrary, Debug)]
enum Mutation {
    /// XOR one byte with a non-zero mask.
    Flip {
        at: u32,
        mask: u8,
    },
    /// Set one byte (perhaps to what it was).
    Set {
        at: u32,
        byte: u8,
    },
    Insert {
        at: u32,
        byte: u8,
    },
    DeleteLine(u8),
    DuplicateLine(u8),
    SwapLines(u8, u8),
    Truncate(u32),
}

#[derive(Arbitrary, Debug)]
struct Input {
    first: Record,
    more: Vec<Record>,
    mutation: Mutation,
    recover_torn_tail: bool,
}

fn log_path() -> PathBuf {
    std::env::temp_dir().join(format!("toolgate-fuzz-audit-{}.jsonl", std::process::id()))
}

/// The byte ranges of the lines, each with its newline.
fn line_ranges(log: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut start = 0;
    log.split_inclusive(|&b| b == b'\n')
        .map(|line| {
            let range = start..start + line.len();
            start = range.end;
            range
        })
        .collect()
}

fn mutate(log: &[u8], mutation: &Mutation) -> Vec<u8> {
    let lines = line_ranges(log);
    let index = |i: u8| usize::from(i) % lines.len();
    let line = |i: u8| lines[index(i)].clone();
    let at = |at: u32| at as usize % log.len();
    let mut out = log.to_vec();
    match *mutation {
        Mutation::Flip { at: i, mask } => out[at(i)] ^= mask.max(1),
        Mutation::Set { at: i, byte } => out[at(i)] = byte,
        Mutation::Insert { at: i, byte } => out.insert(i as usize % (log.len() + 1), byte),
        Mutation::DeleteLine(i) => {
            out.drain(line(i));
        }
        Mutation::DuplicateLine(i) => {
            let range = line(i);
            let copy = log[range.clone()].to_vec();
            out.splice(range.end..range.end, copy);
        }
        Mutation::SwapLines(i, j) => {
            let (i, j) = (index(i), index(j));
            let (a, b) = (lines[i.min(j)].clone(), lines[i.max(j)].clone());
            if a != b {
                out = [
                    &log[..a.start],
                    &log[b.clone()],
                    &log[a.end..b.start],
                    &log[a.clone()],
                    &log[b.end..],
                ]
                .concat();
            }
        }
        Mutation::Truncate(i) => out.truncate(at(i)),
    }
    out
}

fuzz_target!(|input: Input| {
    let records: Vec<AuditRecord> = std::iter::once(&input.first)
        .chain(input.more.iter().take(7))
        .map(Record::audit_record)
        .collect();
    let path = log_path();
    let _ = fs::remove_file(&path);

    // Write the log, and check it as written.
    let sink = JsonlSink::builder(&path)
        .durability(Durability::Buffered)
        .open()
        .expect("a new log opens");
    for record in &records {
        sink.record(record).expect("a record is written");
    }
    let last_hash = sink.last_hash();
    // A buffered sink writes its records when it is dropped.
    drop(sink);
    let log = fs::read(&path).expect("the log is read back");
    let n = records.len() as u64;
    let original = report_checks::checked_report(&log);
    assert!(original.is_intact(), "{original}");
    assert_eq!((original.records, original.lines), (n, n));
    assert_eq!(original.last_hash, last_hash);
    assert_eq!(verify_file(&path).expect("the log is read"), original);
    for (line, record) in log.split(|&b| b == b'\n').zip(&records) {
        let fields: Value = serde_json::from_slice(line).expect("a line is JSON");
        assert_eq!(fields["tool"], Value::from(&*record.tool));
        assert_eq!(fields["timestamp"], Value::from(record.timestamp.as_str()));
        assert_eq!(
            fields.get("message").and_then(Value::as_str),
            record.message.as_deref()
        );
        assert_eq!(
            fields.get("agent").and_then(Value::as_str),
            record.agent.as_deref()
        );
        assert_eq!(fields["call"], Value::from(record.call));
    }

    // Change it, and check the verdict.
    let changed = mutate(&log, &input.mutation);
    let report = report_checks::checked_report(&changed);
    let first_change = log
        .iter()
        .zip(&changed)
        .position(|(a, b)| a != b)
        .unwrap_or(log.len().min(changed.len()));
    let ends = line_ranges(&log)
        .iter()
        .map(|r| r.end - 1)
        .collect::<Vec<_>>();
    let whole_before_change = ends.iter().filter(|&&end| end <= first_change).count() as u64;
    assert!(
        report.records <= whole_before_change,
        "{} records verify, but the change is at byte {first_change}\n{report}",
        report.records
    );
    if changed == log {
        assert_eq!(report, original);
    } else if report.is_intact() && report.records == n {
        assert_eq!(
            changed,
            log[..log.len() - 1],
            "only a cut last newline keeps every record"
        );
        assert!(report.final_newline_missing);
        assert_eq!(report.last_hash, original.last_hash);
    }
    if let Mutation::Truncate(_) = input.mutation {
        let cut = changed.len();
        let whole = ends.iter().filter(|&&end| end <= cut).count() as u64;
        assert_eq!(
            report.records, whole,
            "a cut log keeps the lines that are whole"
        );
        assert!(report.broken.is_none(), "a cut is not tampering: {report}");
        let at_boundary = cut == 0 || ends.iter().any(|&end| cut == end || cut == end + 1);
        assert_eq!(report.torn_tail.is_none(), at_boundary, "{report}");
    }

    // Reopen it: only a log with nothing broken is continued, and its chain goes on.
    fs::write(&path, &changed).expect("the changed log is written");
    let reopened = JsonlSink::builder(&path)
        .recover_torn_tail(input.recover_torn_tail)
        .open();
    let opens = report.broken.is_none() && (report.torn_tail.is_none() || input.recover_torn_tail);
    match reopened {
        Ok(sink) => {
            assert!(opens, "a sink continued a log it should refuse: {report}");
            assert_eq!(sink.last_seq(), report.records);
            assert_eq!(sink.last_hash(), report.last_hash);
            sink.record(&records[0]).expect("a record is appended");
            drop(sink);
            let continued = verify_file(&path).expect("the log is read");
            assert!(continued.is_intact(), "{continued}");
            assert_eq!(continued.records, report.records + 1);
        }
        Err(error) => {
            assert!(
                !opens,
                "a sink refused a log it could continue: {error}\n{report}"
            );
            assert_eq!(error.kind(), std::io::ErrorKind::InvalidData, "{error}");
        }
    }
    let _ = fs::remove_file(&path);
});
