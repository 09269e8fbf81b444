//! What every verification report must say of the bytes it was made from, whatever they are.

use toolgate::audit::{VerifyReport, verify_bytes, verify_reader};

/// Verifies `data` both ways and checks the report's fields against each other and against the bytes.
pub fn checked_report(data: &[u8]) -> VerifyReport {
    let report = verify_bytes(data);
    let from_reader = verify_reader(data).expect("reading from memory does not fail");
    assert_eq!(
        from_reader, report,
        "verify_reader and verify_bytes disagree"
    );

    let lines = data.split_inclusive(|&b| b == b'\n').count() as u64;
    assert_eq!(report.lines, lines);
    assert!(report.records <= lines);
    assert_eq!(report.last_seq, report.records, "seqs run 1, 2, 3, ...");
    assert_eq!(report.last_hash.len(), 64);
    assert!(
        report
            .last_hash
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "{}",
        report.last_hash
    );
    if report.records == 0 {
        assert_eq!(report.last_hash, "0".repeat(64));
    }
    let intact_len = usize::try_from(report.intact_len).expect("a length in memory");
    assert!(intact_len <= data.len());
    match (&report.broken, &report.torn_tail) {
        (None, None) => {
            assert_eq!(report.records, lines);
            assert_eq!(intact_len, data.len());
        }
        (Some(broken), None) => {
            assert_eq!(
                broken.line,
                report.records + 1,
                "verification stops at the first break"
            );
            assert_eq!(broken.offset, report.intact_len);
        }
        (None, Some(torn)) => {
            assert_eq!(torn.line, report.records + 1);
            assert_eq!(torn.line, lines, "only the last line can be torn");
            assert_eq!(torn.offset, report.intact_len);
            assert_eq!(torn.offset + torn.len, data.len() as u64);
            assert_ne!(data.last(), Some(&b'\n'));
        }
        (Some(_), Some(_)) => panic!("a report is broken or torn, not both"),
    }
    let unterminated_end = report.records > 0 && data.last() != Some(&b'\n');
    assert_eq!(
        report.final_newline_missing,
        unterminated_end && intact_len == data.len()
    );

    // The part that verified is, on its own, an intact log with the same last record.
    if intact_len < data.len() {
        let prefix = verify_bytes(&data[..intact_len]);
        assert!(prefix.is_intact(), "{prefix}");
        assert_eq!(prefix.records, report.records);
        assert_eq!(prefix.last_hash, report.last_hash);
    }

    let shown = report.to_string();
    let status = match (report.is_intact(), &report.broken) {
        (true, _) => "INTACT",
        (false, Some(_)) => "BROKEN",
        (false, None) => "TORN TAIL",
    };
    assert!(shown.starts_with(status), "{shown}");
    report
}
