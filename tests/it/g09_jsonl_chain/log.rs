//! The audit sinks, the hash-chained JSONL log, its verifier and the promotion report.

use std::error::Error as _;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use crate::common::Scratch;
use crate::fixtures::support::scratch_log;
use toolgate::audit::{
    AuditRecord, AuditSink, BreakReason, Decision, Durability, JsonlSink, MemorySink, Outcome,
    PromotionReport, Stage, VerifyReport, verify_bytes, verify_file,
};
use toolgate::{Mode, Risk};

fn record(i: u64) -> AuditRecord {
    let mut record = AuditRecord::new(Stage::Enter, format!("tools.t{i}"), Mode::PartialAuto, 1);
    record.call = i;
    record.decision = Some(Decision::Allowed);
    record.declared_risk = Some(Risk::LowWrite);
    record.effective_risk = Some(Risk::LowWrite);
    record.arguments_digest = Some(format!("{i:064x}"));
    record.manifest_digest = "f".repeat(64).into();
    record.agent = Some("agent \"7\"\n/é".into());
    record
}

/// A record with few fields, where many are written or verified in debug builds.
fn small_record(i: u64) -> AuditRecord {
    let mut record = AuditRecord::new(Stage::Enter, "t", Mode::Shadow, 1);
    record.call = i;
    record
}

/// Writes records 1..=n to a new log at `path` and returns the file's bytes.
fn write_log(path: &Path, n: u64) -> Vec<u8> {
    write_log_of(path, n, record)
}

fn write_log_of(path: &Path, n: u64, record: fn(u64) -> AuditRecord) -> Vec<u8> {
    let sink = JsonlSink::open(path).unwrap();
    for i in 1..=n {
        sink.record(&record(i)).unwrap();
    }
    drop(sink);
    fs::read(path).unwrap()
}

/// The lines of a log, each with its newline.
fn lines(log: &[u8]) -> Vec<Vec<u8>> {
    log.split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

fn json(line: &[u8]) -> serde_json::Map<String, serde_json::Value> {
    serde_json::from_slice(line).unwrap()
}

/// Asserts that the chain breaks first at `line`, whose seq is `seq`, for `reason`.
fn assert_broken(report: &VerifyReport, line: u64, seq: Option<u64>, reason: &BreakReason) {
    let broken = report.broken.as_ref().expect("the log should be broken");
    assert_eq!(
        (broken.line, broken.seq, &broken.reason),
        (line, seq, reason),
        "{report}"
    );
    assert_eq!(report.records, line - 1, "records before the break");
    assert!(!report.is_intact());
}

#[test]
fn memory_sink_keeps_records_in_order_and_fails_on_demand() {
    let sink = MemorySink::new();
    let shared = sink.clone();
    assert!(sink.is_empty());
    for i in 1..=3 {
        sink.record(&record(i)).unwrap();
    }
    assert_eq!(shared.len(), 3);
    let calls: Vec<u64> = shared.records().iter().map(|r| r.call).collect();
    assert_eq!(calls, [1, 2, 3]);
    let mut second = record(2);
    second.timestamp = shared.records()[1].timestamp.clone();
    assert_eq!(shared.records()[1], second);

    shared.fail(true);
    let err = sink.record(&record(4)).unwrap_err();
    assert!(err.to_string().contains("fail"), "{err}");
    assert_eq!(sink.len(), 3);
    shared.fail(false);
    sink.record(&record(5)).unwrap();
    assert_eq!(sink.take().len(), 4);
    assert!(shared.is_empty());
}

#[test]
fn jsonl_lines_are_canonical_chained_and_hold_the_record() {
    let (_dir, path) = scratch_log("chain");
    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!((sink.last_seq(), sink.last_hash()), (0, "0".repeat(64)));
    let written: Vec<AuditRecord> = (1..=100).map(record).collect();
    for r in &written {
        sink.record(r).unwrap();
    }
    assert_eq!(sink.last_seq(), 100);
    let last_hash = sink.last_hash();
    drop(sink);

    let report = verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(
        (report.records, report.lines, report.last_seq),
        (100, 100, 100)
    );
    assert_eq!(report.last_hash, last_hash);

    let log = fs::read(&path).unwrap();
    assert_eq!(report.intact_len, log.len() as u64);
    let mut prev_hash = "0".repeat(64);
    for (i, line) in lines(&log).iter().enumerate() {
        assert_eq!(line.last(), Some(&b'\n'));
        let mut fields = json(line);
        // Sorted keys and no whitespace: re-serializing the parsed object gives the same bytes.
        let text = std::str::from_utf8(line).unwrap().trim_end_matches('\n');
        assert_eq!(serde_json::to_string(&fields).unwrap(), text);
        assert_eq!(fields.remove("seq").unwrap(), i as u64 + 1);
        assert_eq!(fields.remove("prev_hash").unwrap(), prev_hash.as_str());
        prev_hash = fields.remove("hash").unwrap().as_str().unwrap().to_owned();
        let back: AuditRecord = serde_json::from_value(fields.into()).unwrap();
        assert_eq!(back, written[i]);
    }
    assert_eq!(prev_hash, last_hash);
}

#[test]
fn a_changed_byte_is_a_hash_mismatch() {
    let (_dir, path) = scratch_log("byte");
    let mut log = write_log(&path, 5);
    let at = find(&log, b"\"tool\":\"tools.t3\"") + 15;
    log[at] = b'9';
    let report = verify_bytes(&log);
    assert_broken(&report, 3, Some(3), &BreakReason::HashMismatch);
    assert_eq!(report.torn_tail, None);
    fs::write(&path, &log).unwrap();
    assert_eq!(verify_file(&path).unwrap(), report);
}

#[test]
fn a_deleted_record_is_a_prev_hash_mismatch() {
    let dir = Scratch::new("delete");
    let mut log = lines(&write_log(&dir.path("audit.jsonl"), 5));
    log.remove(2);
    assert_broken(
        &verify_bytes(&log.concat()),
        3,
        Some(4),
        &BreakReason::PrevHashMismatch,
    );
    // The first record too: the next one does not start the chain.
    let mut log = lines(&write_log(&dir.path("first.jsonl"), 3));
    log.remove(0);
    assert_broken(
        &verify_bytes(&log.concat()),
        1,
        Some(2),
        &BreakReason::PrevHashMismatch,
    );
}

#[test]
fn reordered_and_duplicated_records_are_prev_hash_mismatches() {
    let dir = Scratch::new("reorder");
    let log = lines(&write_log(&dir.path("audit.jsonl"), 5));
    let mut swapped = log.clone();
    swapped.swap(2, 3);
    assert_broken(
        &verify_bytes(&swapped.concat()),
        3,
        Some(4),
        &BreakReason::PrevHashMismatch,
    );
    let mut repeated = log.clone();
    repeated.insert(2, log[1].clone());
    assert_broken(
        &verify_bytes(&repeated.concat()),
        3,
        Some(2),
        &BreakReason::PrevHashMismatch,
    );
}

#[test]
fn an_appended_garbage_line_is_not_json() {
    let dir = Scratch::new("garbage");
    let mut log = write_log(&dir.path("audit.jsonl"), 5);
    log.extend_from_slice(b"garbage\n");
    let report = verify_bytes(&log);
    let broken = report.broken.as_ref().unwrap();
    assert!(matches!(broken.reason, BreakReason::NotJson(_)), "{report}");
    assert_eq!((broken.line, broken.seq, report.records), (6, None, 5));
    assert_eq!(broken.offset, log.len() as u64 - 8);
    assert_eq!(report.torn_tail, None);
}

#[test]
fn an_edit_that_keeps_the_content_is_not_canonical() {
    let dir = Scratch::new("canonical");
    let log = write_log(&dir.path("audit.jsonl"), 3);
    let mut spaced = lines(&log);
    let at = find(&spaced[1], b",\"call\"") + 1;
    spaced[1].insert(at, b' ');
    assert_broken(
        &verify_bytes(&spaced.concat()),
        2,
        Some(2),
        &BreakReason::NotCanonical,
    );
    let escaped = String::from_utf8(log)
        .unwrap()
        .replacen("tools.t2", "tools.\\u00742", 1);
    assert_broken(
        &verify_bytes(escaped.as_bytes()),
        2,
        Some(2),
        &BreakReason::NotCanonical,
    );
}

#[test]
fn a_line_cut_short_is_a_torn_tail_not_tampering() {
    let dir = Scratch::new("torn");
    let log = write_log(&dir.path("audit.jsonl"), 5);
    let last = lines(&log)[4].len();
    let start = log.len() - last;
    let report = verify_bytes(&log[..start + last / 2]);
    assert_eq!(report.broken, None, "{report}");
    let torn = report.torn_tail.as_ref().expect("a torn tail");
    assert_eq!(
        (torn.line, torn.offset, torn.len),
        (5, start as u64, last as u64 / 2)
    );
    assert_eq!((report.records, report.intact_len), (4, start as u64));
    assert!(!report.is_intact());
    assert!(
        report
            .to_string()
            .starts_with("TORN TAIL: 4 of 5 lines verify"),
        "{report}"
    );

    // Without only its newline, the last record is whole: it verifies.
    let report = verify_bytes(&log[..log.len() - 1]);
    assert!(
        report.is_intact() && report.final_newline_missing,
        "{report}"
    );
    assert_eq!(report.records, 5);
}

#[test]
fn every_single_byte_change_and_every_cut_is_caught() {
    let dir = Scratch::new("every");
    let log = write_log_of(&dir.path("audit.jsonl"), 3, small_record);
    let boundaries: Vec<usize> = log
        .iter()
        .enumerate()
        .filter(|&(_, &b)| b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();
    for at in 0..log.len() {
        for replacement in [b'0', b'a', b' ', b'"', b'\n', b'}', 0xff] {
            if log[at] == replacement {
                continue;
            }
            let mut changed = log.clone();
            changed[at] = replacement;
            let report = verify_bytes(&changed);
            assert!(
                !report.is_intact(),
                "byte {at} -> {replacement:#x}: {report}"
            );
        }
        let report = verify_bytes(&log[..at]);
        let complete = boundaries.iter().filter(|&&b| b <= at).count() as u64;
        if at == 0 || boundaries.contains(&at) || boundaries.contains(&(at + 1)) {
            assert!(report.is_intact(), "cut at {at}: {report}");
            assert_eq!(
                report.records,
                complete + u64::from(boundaries.contains(&(at + 1)))
            );
        } else {
            assert_eq!(report.broken, None, "cut at {at}: {report}");
            assert_eq!(
                report.torn_tail.as_ref().map(|t| t.line),
                Some(complete + 1)
            );
            assert_eq!(report.records, complete);
        }
    }
}

#[test]
fn arbitrary_bytes_never_panic_the_verifier() {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alphabet = b"{}[]\":,\\0123456789abcdefnulltrue seqhashprev_\n\xff\xc3";
    for len in 0..400 {
        let bytes: Vec<u8> = (0..len)
            .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
            .collect();
        let report = verify_bytes(&bytes);
        assert!(report.records <= report.lines);
        let _ = report.to_string();
    }
    let deep = format!("{}\n", "[".repeat(100_000));
    assert!(!verify_bytes(deep.as_bytes()).is_intact());
}

#[test]
fn reopening_continues_the_chain() {
    let (_dir, path) = scratch_log("reopen");
    write_log(&path, 10);
    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(sink.last_seq(), 10);
    for i in 11..=15 {
        sink.record(&record(i)).unwrap();
    }
    drop(sink);
    let report = verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!((report.records, report.last_seq), (15, 15));

    // A last record that lost only its newline is kept, and the newline restored.
    let log = fs::read(&path).unwrap();
    fs::write(&path, &log[..log.len() - 1]).unwrap();
    let sink = JsonlSink::open(&path).unwrap();
    sink.record(&record(16)).unwrap();
    drop(sink);
    let report = verify_file(&path).unwrap();
    assert!(
        report.is_intact() && !report.final_newline_missing,
        "{report}"
    );
    assert_eq!(report.records, 16);
}

#[test]
fn open_refuses_a_tampered_log_and_leaves_it_alone() {
    let (_dir, path) = scratch_log("refuse");
    let mut log = write_log(&path, 5);
    let at = find(&log, b"\"tool\":\"tools.t3\"") + 15;
    log[at] = b'9';
    fs::write(&path, &log).unwrap();
    let err = JsonlSink::open(&path).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    let message = err.to_string();
    assert!(
        message.contains("broken at line 3 (seq 3): hash mismatch") && message.contains("refusing"),
        "{message}"
    );
    assert_eq!(fs::read(&path).unwrap(), log);
}

#[test]
fn open_refuses_a_torn_tail_unless_told_to_recover() {
    let (_dir, path) = scratch_log("recover");
    let log = write_log(&path, 5);
    let cut = &log[..log.len() - 20];
    fs::write(&path, cut).unwrap();
    let err = JsonlSink::open(&path).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert!(err.to_string().contains("torn tail: line 5"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), cut);

    let sink = JsonlSink::builder(&path)
        .recover_torn_tail(true)
        .open()
        .unwrap();
    assert_eq!(sink.last_seq(), 4);
    sink.record(&record(50)).unwrap();
    drop(sink);
    let report = verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.records, 5);
}

#[test]
fn concurrent_writers_make_one_linear_chain() {
    const THREADS: u64 = 8;
    const EACH: u64 = 2_000;
    let (_dir, path) = scratch_log("threads");
    let sink = Arc::new(JsonlSink::open(&path).unwrap());
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let sink = &sink;
            scope.spawn(move || {
                for i in 0..EACH {
                    let mut r = small_record(i);
                    r.gate = thread;
                    sink.record(&r).unwrap();
                }
            });
        }
    });
    drop(sink);
    let report = verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.records, THREADS * EACH);

    // Each thread's records appear whole and in the order it wrote them.
    let mut next = vec![0; THREADS as usize];
    for line in lines(&fs::read(&path).unwrap()) {
        let thread = number_after(&line, b"\"gate\":") as usize;
        assert_eq!(number_after(&line, b"\"call\":"), next[thread]);
        next[thread] += 1;
    }
    assert!(next.iter().all(|&n| n == EACH));
}

#[test]
fn a_write_to_a_full_device_is_an_error() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        eprintln!("skipped: no /dev/full on this system");
        return;
    }
    let sink = JsonlSink::open(full).unwrap();
    let err = sink.record(&record(1)).unwrap_err();
    let source = err.source().and_then(|e| e.downcast_ref::<io::Error>());
    assert_eq!(
        source.map(io::Error::kind),
        Some(io::ErrorKind::StorageFull),
        "{err}"
    );
    assert!(err.to_string().contains("/dev/full"), "{err}");
    assert_eq!(sink.last_seq(), 0);
    // The failed line cannot be cut off a device: the sink stays failed rather than risk a broken chain.
    assert!(sink.record(&record(2)).is_err());
    assert!(sink.flush().is_err());
}

#[test]
fn a_read_only_log_cannot_be_opened() {
    let (_dir, path) = scratch_log("readonly");
    write_log(&path, 2);
    let mut permissions = fs::metadata(&path).unwrap().permissions();
    permissions.set_readonly(true);
    fs::set_permissions(&path, permissions).unwrap();
    if OpenOptions::new().append(true).open(&path).is_ok() {
        eprintln!("skipped: this process may write to read-only files (running as root?)");
        return;
    }
    let err = JsonlSink::open(&path).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
    assert!(err.to_string().contains("audit.jsonl"), "{err}");
}

#[test]
fn every_durability_gives_a_verifiable_log() {
    let dir = Scratch::new("durability");
    let durabilities = [
        Durability::Flush,
        Durability::FsyncEach,
        Durability::FsyncEvery(7),
        Durability::FsyncEvery(0),
        Durability::Buffered,
    ];
    for (n, durability) in durabilities.into_iter().enumerate() {
        let path = dir.path(&format!("{n}.jsonl"));
        let sink = JsonlSink::builder(&path)
            .durability(durability)
            .open()
            .unwrap();
        assert_eq!(sink.durability(), durability);
        for i in 1..=50 {
            sink.record(&record(i)).unwrap();
        }
        let on_disk = verify_file(&path).unwrap();
        assert!(on_disk.is_intact(), "{durability:?}: {on_disk}");
        if durability == Durability::Buffered {
            assert_eq!(
                on_disk.records, 0,
                "buffered records are not written one by one"
            );
            sink.flush().unwrap();
            assert_eq!(verify_file(&path).unwrap().records, 50);
            for i in 51..=60 {
                sink.record(&record(i)).unwrap();
            }
        } else {
            assert_eq!(on_disk.records, 50, "{durability:?}");
        }
        drop(sink);
        let report = verify_file(&path).unwrap();
        assert!(report.is_intact(), "{durability:?}: {report}");
        let expected = if durability == Durability::Buffered {
            60
        } else {
            50
        };
        assert_eq!(report.records, expected, "{durability:?}");
    }
}

#[test]
fn buffered_records_are_written_in_batches_before_the_end() {
    let (_dir, path) = scratch_log("batches");
    let sink = JsonlSink::builder(&path)
        .durability(Durability::Buffered)
        .open()
        .unwrap();
    for i in 1..=1_000 {
        sink.record(&record(i)).unwrap();
    }
    let report = verify_file(&path).unwrap();
    assert!(
        report.is_intact() && report.records > 0 && report.records < 1_000,
        "{report}"
    );
}

fn decision(stage: Stage, tool: &str, mode: Mode, risk: Option<Risk>) -> AuditRecord {
    let mut r = AuditRecord::new(stage, tool.to_owned(), mode, 1);
    r.declared_risk = risk;
    r
}

fn refused(tool: &str, mode: Mode, risk: Risk, code: &'static str, digest: &str) -> AuditRecord {
    let mut r = decision(Stage::Refused, tool, mode, Some(risk));
    r.decision = Some(Decision::Refused);
    r.code = Some(code.into());
    r.arguments_digest = Some(digest.to_owned());
    r
}

fn promotion_records() -> Vec<AuditRecord> {
    let mut allowed = decision(
        Stage::Enter,
        "users.get",
        Mode::Shadow,
        Some(Risk::ReadOnly),
    );
    allowed.decision = Some(Decision::Allowed);
    let mut exit = allowed.clone();
    exit.stage = Stage::Exit;
    exit.outcome = Some(Outcome::Ok);
    let mut approved = decision(
        Stage::Enter,
        "users.delete",
        Mode::FullAuto,
        Some(Risk::HighWrite),
    );
    approved.decision = Some(Decision::Approved);
    let lowered = decision(Stage::ModeLowered, "", Mode::Shadow, None);
    vec![
        allowed.clone(),
        exit,
        allowed,
        refused(
            "users.delete",
            Mode::Shadow,
            Risk::HighWrite,
            "ABOVE_CEILING",
            "d1",
        ),
        refused(
            "users.delete",
            Mode::Shadow,
            Risk::HighWrite,
            "ABOVE_CEILING",
            "d1",
        ),
        refused(
            "users.purge",
            Mode::Shadow,
            Risk::HighWrite,
            "MODE_NOT_ALLOWED",
            "d2",
        ),
        refused(
            "users.delete",
            Mode::Shadow,
            Risk::HighWrite,
            "DENY_LISTED",
            "d3",
        ),
        approved,
        refused(
            "users.delete",
            Mode::FullAuto,
            Risk::HighWrite,
            "APPROVAL_REJECTED",
            "d4",
        ),
        lowered,
        decision(Stage::Refused, "ghost", Mode::Advisory, None),
    ]
}

#[test]
fn promotion_report_counts_per_mode_and_risk() {
    let report = PromotionReport::from_records(promotion_records());
    let expected = "\
# Promotion report

9 decisions (calls allowed or refused) in 11 records.

| mode | declared risk | allowed | approved | refused | would have run | DENY_LISTED | MODE_NOT_ALLOWED | ABOVE_CEILING | APPROVAL_REJECTED | UNKNOWN |
| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| SHADOW | READ_ONLY | 2 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 |
| SHADOW | HIGH_WRITE | 0 | 0 | 4 | 3 | 1 | 1 | 2 | 0 | 0 |
| ADVISORY | unknown | 0 | 0 | 1 | 0 | 0 | 0 | 0 | 0 | 1 |
| FULL_AUTO | HIGH_WRITE | 1 | 1 | 1 | 0 | 0 | 0 | 0 | 1 | 0 |

*Allowed* includes approved calls. *Would have run*: refused only because of the mode (`MODE_NOT_ALLOWED`, `ABOVE_CEILING`); a mode that allows the tool would have run them.

## Calls that would have run

| mode | tool | arguments digest | times |
| --- | --- | --- | ---: |
| SHADOW | users.delete | d1 | 2 |
| SHADOW | users.purge | d2 | 1 |
";
    assert_eq!(report.to_markdown(), expected);
    let shadow_high = report
        .rows()
        .find(|row| row.mode == Mode::Shadow && row.risk == Some(Risk::HighWrite))
        .unwrap();
    assert_eq!(shadow_high.refused["ABOVE_CEILING"], 2);
    assert_eq!(report.records(), 11);
}

#[test]
fn promotion_report_reads_a_log() {
    let (_dir, path) = scratch_log("promotion");
    let sink = JsonlSink::open(&path).unwrap();
    for r in promotion_records() {
        sink.record(&r).unwrap();
    }
    drop(sink);
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"not a record\n").unwrap();
    let from_log = PromotionReport::from_file(&path).unwrap();
    assert_eq!(from_log.unreadable_lines(), 1);
    let mut expected = PromotionReport::from_records(promotion_records()).to_markdown();
    expected = expected.replacen(
        "in 11 records.\n",
        "in 11 records.\n\n**1 line could not be read as a record; it is not counted.**\n",
        1,
    );
    assert_eq!(from_log.to_markdown(), expected);
}

#[test]
fn an_empty_promotion_report_says_so() {
    let report = PromotionReport::new();
    assert_eq!(
        report.to_string(),
        "# Promotion report\n\n0 decisions (calls allowed or refused) in 0 records.\n"
    );
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present")
}

/// The integer that follows `key` in `line` (cheaper than parsing the line in debug builds).
fn number_after(line: &[u8], key: &[u8]) -> u64 {
    let start = find(line, key) + key.len();
    let digits = line[start..].iter().take_while(|b| b.is_ascii_digit());
    digits.fold(0, |n, &d| n * 10 + u64::from(d - b'0'))
}

/// `cargo test --release --test it -- --ignored --nocapture audit_log::throughput`
#[test]
#[ignore = "a measurement: run it in release mode"]
fn jsonl_throughput_with_default_durability() {
    const N: u64 = 200_000;
    let (_dir, path) = scratch_log("throughput");
    let sink = JsonlSink::open(&path).unwrap();
    let records: Vec<AuditRecord> = (1..=1_000).map(record).collect();
    let started = std::time::Instant::now();
    for i in 0..N {
        sink.record(&records[(i % 1_000) as usize]).unwrap();
    }
    let elapsed = started.elapsed();
    drop(sink);
    let bytes = fs::metadata(&path).unwrap().len();
    eprintln!(
        "{N} records ({} bytes each) in {elapsed:.2?}: {:.0} records/s",
        bytes / N,
        N as f64 / elapsed.as_secs_f64()
    );
    let started = std::time::Instant::now();
    let report = verify_file(&path).unwrap();
    eprintln!(
        "verified in {:.2?}: {:.0} records/s",
        started.elapsed(),
        N as f64 / started.elapsed().as_secs_f64()
    );
    assert!(report.is_intact() && report.records == N, "{report}");
}

// Two sinks writing one file would fork its chain, which `verify` could only report as tampering: the
// second is refused while the first lives, in this process or in another one.
#[test]
fn a_log_has_one_writer_in_this_process_or_another() {
    let (_dir, path) = scratch_log("one-writer");
    let first = JsonlSink::open(&path).unwrap();
    first.record(&record(1)).unwrap();
    let second = JsonlSink::open(&path).unwrap_err();
    assert_eq!(second.kind(), io::ErrorKind::WouldBlock);
    assert!(second.to_string().contains("another sink"), "{second}");
    assert!(second.to_string().contains("audit.jsonl"), "{second}");
    drop(first);
    // Free again once the writer is gone: the chain goes on.
    let again = JsonlSink::open(&path).unwrap();
    again.record(&record(2)).unwrap();
    drop(again);
    assert!(verify_file(&path).unwrap().is_intact());

    // Another process holds the log (flock(1), the same kind of lock): refused, file untouched.
    let before = fs::read(&path).unwrap();
    // `--no-fork`: the process that holds the lock is the one killed below.
    let mut holder = std::process::Command::new("flock")
        .args(["--exclusive", "--no-fork"])
        .arg(&path)
        .args(["sleep", "30"])
        .spawn()
        .expect("flock(1), from util-linux");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let refused = loop {
        match JsonlSink::open(&path) {
            Err(error) => break error,
            // flock(1) has not taken the lock yet.
            Ok(sink) if std::time::Instant::now() < deadline => {
                drop(sink);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(_) => panic!("the other process never held the lock"),
        }
    };
    assert_eq!(refused.kind(), io::ErrorKind::WouldBlock);
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(fs::read(&path).unwrap(), before);
    JsonlSink::open(&path).expect("free once the other process is gone");
}

// Group commit: threads recording at once with `FsyncEach` share their fsyncs, and every record is in the
// chain, in one order, each acknowledged only after an fsync that covers it.
#[test]
fn fsync_each_shares_fsyncs_between_threads_and_keeps_one_chain() {
    let (_dir, path) = scratch_log("group-commit");
    let sink = Arc::new(
        JsonlSink::builder(&path)
            .durability(Durability::FsyncEach)
            .open()
            .unwrap(),
    );
    // One thread alone: one fsync per record.
    for i in 1..=5 {
        sink.record(&record(i)).unwrap();
    }
    assert_eq!(sink.group_syncs(), 5);
    let (threads, each) = (8u64, 50u64);
    let barrier = Arc::new(std::sync::Barrier::new(threads as usize));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (sink, barrier) = (sink.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..each {
                    sink.record(&record(1_000 * (t + 1) + i)).unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let total = 5 + threads * each;
    assert_eq!(sink.last_seq(), total);
    let syncs = sink.group_syncs();
    // Eight threads that record at once meet fsyncs in flight: fewer fsyncs than records.
    assert!(
        syncs < total,
        "{syncs} fsyncs for {total} records: none shared"
    );
    drop(sink);
    let report = verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, total);
}

#[test]
fn a_record_longer_than_a_line_may_be_is_refused_and_the_chain_goes_on() {
    let (_dir, path) = scratch_log("too-long");
    let sink = JsonlSink::open(&path).unwrap();
    sink.record(&AuditRecord::new(Stage::Enter, "a", Mode::Shadow, 1))
        .unwrap();
    let mut huge = AuditRecord::new(Stage::Enter, "b", Mode::Shadow, 2);
    huge.arguments = Some("x".repeat(toolgate::audit::MAX_RECORD_LEN));
    let refused = sink.record(&huge).unwrap_err();
    assert!(refused.to_string().contains("longer than"), "{refused}");
    sink.record(&AuditRecord::new(Stage::Enter, "c", Mode::Shadow, 3))
        .unwrap();
    drop(sink);
    let report = toolgate::audit::verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.records, 2);
}
