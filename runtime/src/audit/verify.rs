//! Checking a hash-chained JSONL audit log.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use serde_json::Value;

use crate::audit::chain::{Encoder, GENESIS, HashHex, parse_hash};
use crate::terminal::escaped;

/// The longest line, newline excluded, that a [`JsonlSink`](crate::audit::JsonlSink) writes (a longer
/// record is refused) and that [`verify_file`] and
/// [`PromotionReport::read_log`](crate::audit::PromotionReport::read_log) read: 16 MiB. Reading a log
/// holds one line at a time, so this bounds the memory it takes, whatever the file holds.
pub const MAX_RECORD_LEN: usize = 16 << 20;

/// What [`verify_file`] found in a log written by [`JsonlSink`](crate::audit::JsonlSink).
///
/// Verification stops at the first broken record: the records after it cannot be trusted, whatever
/// they say. A torn last line, left by a crash in the middle of a write, is reported apart from
/// tampering, in [`torn_tail`](VerifyReport::torn_tail).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// How many records verified, from the first line up to the first broken one.
    pub records: u64,
    /// The `seq` of the last record that verified (0 if none did).
    pub last_seq: u64,
    /// The `hash` of the last record that verified (64 zeros if none did): what the next record's
    /// `prev_hash` must be.
    pub last_hash: String,
    /// How many bytes, from the start, hold the records that verified (with their newlines).
    pub intact_len: u64,
    /// How many lines the log has, counting a last line without a newline.
    pub lines: u64,
    /// The last record verified but lacks its trailing newline (the crash came just before it).
    pub final_newline_missing: bool,
    /// The first line that does not verify, if any, other than a torn last line.
    pub broken: Option<BrokenRecord>,
    /// A last line without a trailing newline that is not complete JSON: a write cut short.
    pub torn_tail: Option<TornTail>,
}

/// The first line of a log that does not verify.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BrokenRecord {
    /// Its line number, from 1.
    pub line: u64,
    /// The byte offset where the line starts.
    pub offset: u64,
    /// Its `seq`, if it has a readable one.
    pub seq: Option<u64>,
    /// Why it does not verify.
    pub reason: BreakReason,
}

/// Why a line of a log does not verify.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BreakReason {
    /// The line is not JSON, or not UTF-8 (the parser's message).
    NotJson(String),
    /// The line is JSON but not an object.
    NotAnObject,
    /// The line is empty.
    EmptyLine,
    /// The record has no member of this name (`seq`, `prev_hash` or `hash`).
    MissingField(&'static str),
    /// The member of this name has the wrong type or form (`seq` must be an unsigned integer, hashes 64
    /// lowercase hex digits).
    InvalidField(&'static str),
    /// The `hash` is not the hash of the record's content: the record was changed after it was written.
    HashMismatch,
    /// The bytes differ from the canonical form of the same content (added whitespace, reordered keys,
    /// escapes spelled differently): the line was edited.
    NotCanonical,
    /// The `prev_hash` is not the previous record's `hash`: a record before it was deleted, or records
    /// were reordered or inserted.
    PrevHashMismatch,
    /// The line is longer than [`MAX_RECORD_LEN`], which no sink writes: it is not a record, and the
    /// log is not read past it (a line of gigabytes, say a hole in a sparse file, would take as much
    /// memory).
    TooLong,
    /// The `seq` does not follow the previous record's.
    SeqGap {
        /// The `seq` that should follow.
        expected: u64,
        /// The `seq` the line has.
        found: u64,
    },
}

/// A last line with no trailing newline that is not complete JSON: a write cut short by a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TornTail {
    /// Its line number, from 1.
    pub line: u64,
    /// The byte offset where it starts; truncating the file there removes it.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

impl VerifyReport {
    /// Whether the log verified to its end and its last record has the hash `expected` (compared
    /// without regard to case): a log cut short, whose remaining chain is intact, does not.
    pub fn ends_at(&self, expected: &str) -> bool {
        self.broken.is_none()
            && self.torn_tail.is_none()
            && self.records > 0
            && self.last_hash.eq_ignore_ascii_case(expected.trim())
    }

    /// Whether every line verified: nothing broken, nothing torn.
    pub fn is_intact(&self) -> bool {
        self.broken.is_none() && self.torn_tail.is_none()
    }
}

impl fmt::Display for BreakReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BreakReason::NotJson(detail) => write!(f, "not JSON ({})", escaped(detail)),
            BreakReason::NotAnObject => f.write_str("not a JSON object"),
            BreakReason::EmptyLine => f.write_str("empty line"),
            BreakReason::MissingField(name) => write!(f, "no `{name}` member"),
            BreakReason::InvalidField(name) => write!(f, "invalid `{name}` member"),
            BreakReason::HashMismatch => {
                f.write_str("hash mismatch: the record was changed after it was written")
            }
            BreakReason::NotCanonical => f.write_str(
                "not canonical: the line's bytes differ from its canonical form, so it was edited",
            ),
            BreakReason::PrevHashMismatch => f.write_str(
                "prev_hash mismatch: a record before it was deleted, or records were reordered or inserted",
            ),
            BreakReason::TooLong => write!(
                f,
                "longer than {MAX_RECORD_LEN} bytes, the longest record a sink writes: not a \
                 record, and the log is not read past it"
            ),
            BreakReason::SeqGap { expected, found } => {
                write!(f, "seq gap: expected seq {expected}, found {found}")
            }
        }
    }
}

impl fmt::Display for BrokenRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}", self.line)?;
        if let Some(seq) = self.seq {
            write!(f, " (seq {seq})")?;
        }
        write!(f, ": {}", self.reason)
    }
}

impl fmt::Display for TornTail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {} ({} bytes at offset {}) is incomplete, with no trailing newline: a write cut short",
            self.line, self.len, self.offset
        )
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = match (&self.broken, &self.torn_tail) {
            (None, None) => "INTACT",
            (Some(_), _) => "BROKEN",
            (None, Some(_)) => "TORN TAIL",
        };
        writeln!(
            f,
            "{status}: {} of {} lines verify",
            self.records, self.lines
        )?;
        if self.records > 0 {
            writeln!(
                f,
                "last intact record: seq {}, hash {}",
                self.last_seq, self.last_hash
            )?;
        }
        if self.final_newline_missing {
            writeln!(f, "the last record has no trailing newline")?;
        }
        if let Some(broken) = &self.broken {
            writeln!(f, "first broken record: {broken}")?;
            writeln!(f, "records from line {} on cannot be trusted", broken.line)?;
        }
        if let Some(torn) = &self.torn_tail {
            writeln!(f, "torn tail: {torn}")?;
        }
        Ok(())
    }
}

/// Verifies the log at `path`; `Err` only if it cannot be read.
pub fn verify_file(path: impl AsRef<Path>) -> io::Result<VerifyReport> {
    verify_reader(File::open(path)?)
}

/// Verifies a log read from `reader` to its end; `Err` only if reading fails.
pub fn verify_reader(reader: impl Read) -> io::Result<VerifyReport> {
    verify_reader_keeping(reader, BTreeSet::new()).map(|(report, _)| report)
}

/// Verifies a log read from `reader`, and keeps the hashes of its records numbered `wanted` among those
/// that verify.
pub(crate) fn verify_reader_keeping(
    reader: impl Read,
    wanted: BTreeSet<u64>,
) -> io::Result<(VerifyReport, BTreeMap<u64, HashHex>)> {
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    let mut verifier = Verifier::new();
    verifier.wanted = wanted;
    let mut line = Vec::new();
    loop {
        match read_line(&mut reader, &mut line)? {
            Line::End => break,
            Line::TooLong => {
                verifier.too_long();
                break;
            }
            Line::Read => verifier.line(&line),
        }
        // A line without its newline was read at the end of the input: a log being written may
        // grow past it, and the rest of that line read next would start mid-record. It is the last.
        if !line.ends_with(b"\n") {
            break;
        }
    }
    let kept = std::mem::take(&mut verifier.kept);
    Ok((verifier.finish(), kept))
}

/// What [`read_line`] read.
pub(crate) enum Line {
    /// A line, with its newline if it has one.
    Read,
    /// More than [`MAX_RECORD_LEN`] bytes without a newline; those read are dropped.
    TooLong,
    /// Nothing: the end of the input.
    End,
}

/// Reads the next line into `line` (cleared first), holding at most [`MAX_RECORD_LEN`] bytes and its
/// newline.
pub(crate) fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<Line> {
    const LIMIT: u64 = MAX_RECORD_LEN as u64 + 1;
    line.clear();
    if Read::take(&mut *reader, LIMIT).read_until(b'\n', line)? == 0 {
        return Ok(Line::End);
    }
    if line.len() as u64 == LIMIT && line.last() != Some(&b'\n') {
        line.clear();
        line.shrink_to(1 << 16);
        return Ok(Line::TooLong);
    }
    Ok(Line::Read)
}

/// Verifies a whole log held in memory. Never panics, whatever the bytes.
pub fn verify_bytes(bytes: &[u8]) -> VerifyReport {
    let mut verifier = Verifier::new();
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        if line.strip_suffix(b"\n").unwrap_or(line).len() > MAX_RECORD_LEN {
            verifier.too_long();
            break;
        }
        verifier.line(line);
    }
    verifier.finish()
}

/// Verifies one line at a time, each with its newline if it has one.
pub(crate) struct Verifier {
    report: VerifyReport,
    last_hash: HashHex,
    offset: u64,
    encoder: Encoder,
    canonical: Vec<u8>,
    /// The last line had no newline and did not verify: it is torn if it is not JSON, else broken.
    unterminated_failure: Option<BrokenRecord>,
    /// The records whose hashes to keep, by `seq`, and those kept.
    wanted: BTreeSet<u64>,
    kept: BTreeMap<u64, HashHex>,
}

impl Verifier {
    pub(crate) fn new() -> Verifier {
        Verifier {
            report: VerifyReport {
                records: 0,
                last_seq: 0,
                last_hash: String::new(),
                intact_len: 0,
                lines: 0,
                final_newline_missing: false,
                broken: None,
                torn_tail: None,
            },
            last_hash: GENESIS,
            offset: 0,
            encoder: Encoder::default(),
            canonical: Vec::new(),
            unterminated_failure: None,
            wanted: BTreeSet::new(),
            kept: BTreeMap::new(),
        }
    }

    pub(crate) fn line(&mut self, with_newline: &[u8]) {
        let start = self.offset;
        self.offset += with_newline.len() as u64;
        self.report.lines += 1;
        let (line, terminated) = match with_newline.strip_suffix(b"\n") {
            Some(line) => (line, true),
            None => (with_newline, false),
        };
        if self.report.broken.is_some() {
            return;
        }
        let line_number = self.report.lines;
        match self.check(line) {
            Ok((seq, hash)) => {
                self.report.records += 1;
                self.report.last_seq = seq;
                self.report.intact_len = self.offset;
                self.report.final_newline_missing = !terminated;
                self.last_hash = hash;
                if self.wanted.contains(&seq) {
                    self.kept.insert(seq, hash);
                }
            }
            Err((seq, reason)) => {
                let broken = BrokenRecord {
                    line: line_number,
                    offset: start,
                    seq,
                    reason,
                };
                if terminated {
                    self.report.broken = Some(broken);
                } else {
                    self.unterminated_failure = Some(broken);
                }
            }
        }
    }

    /// How many records verified so far: a line verified where this grew as it was checked.
    #[cfg(feature = "policy-file")]
    pub(crate) fn verified(&self) -> u64 {
        self.report.records
    }

    /// The next line is longer than [`MAX_RECORD_LEN`]: it breaks the chain, and nothing after it is
    /// read.
    pub(crate) fn too_long(&mut self) {
        self.report.lines += 1;
        if self.report.broken.is_none() {
            self.report.broken = Some(BrokenRecord {
                line: self.report.lines,
                offset: self.offset,
                seq: None,
                reason: BreakReason::TooLong,
            });
        }
    }

    /// Checks one line (without its newline) against the chain so far; returns its seq and hash.
    fn check(&mut self, line: &[u8]) -> Result<(u64, HashHex), (Option<u64>, BreakReason)> {
        if line.is_empty() {
            return Err((None, BreakReason::EmptyLine));
        }
        // A `BTreeMap`, not serde_json's `Map`: the fields must come back out sorted, and `Map` keeps
        // them in the line's order, its `remove` reordering them, when a crate in the build enables
        // serde_json's `preserve_order` (rig-core does).
        let mut fields: BTreeMap<String, Value> = match serde_json::from_slice(line) {
            Ok(fields) => fields,
            Err(e) if e.is_data() => return Err((None, BreakReason::NotAnObject)),
            Err(e) => return Err((None, BreakReason::NotJson(e.to_string()))),
        };
        let seq = match fields.remove("seq") {
            None => return Err((None, BreakReason::MissingField("seq"))),
            Some(seq) => seq
                .as_u64()
                .ok_or((None, BreakReason::InvalidField("seq")))?,
        };
        let hash_field =
            |fields: &mut BTreeMap<String, Value>, name: &'static str| match fields.remove(name) {
                None => Err((Some(seq), BreakReason::MissingField(name))),
                Some(Value::String(text)) => {
                    parse_hash(&text).ok_or((Some(seq), BreakReason::InvalidField(name)))
                }
                Some(_) => Err((Some(seq), BreakReason::InvalidField(name))),
            };
        let hash = hash_field(&mut fields, "hash")?;
        let prev_hash = hash_field(&mut fields, "prev_hash")?;

        self.canonical.clear();
        let computed = self
            .encoder
            .encode(&fields, seq, &prev_hash, &mut self.canonical)
            .map_err(|_| (Some(seq), BreakReason::NotCanonical))?;
        if computed != hash {
            return Err((Some(seq), BreakReason::HashMismatch));
        }
        if self.canonical != line {
            return Err((Some(seq), BreakReason::NotCanonical));
        }
        if prev_hash != self.last_hash {
            return Err((Some(seq), BreakReason::PrevHashMismatch));
        }
        let expected = self.report.last_seq.wrapping_add(1);
        if seq != expected {
            return Err((
                Some(seq),
                BreakReason::SeqGap {
                    expected,
                    found: seq,
                },
            ));
        }
        Ok((seq, hash))
    }

    pub(crate) fn finish(mut self) -> VerifyReport {
        if let Some(failure) = self.unterminated_failure.take() {
            // A write cut short leaves a prefix of a line, which is never complete JSON; a final line
            // that parses but does not verify was not left by a crash.
            if matches!(
                failure.reason,
                BreakReason::NotJson(_) | BreakReason::EmptyLine
            ) {
                self.report.torn_tail = Some(TornTail {
                    line: failure.line,
                    offset: failure.offset,
                    len: self.offset - failure.offset,
                });
            } else {
                self.report.broken = Some(failure);
            }
        }
        self.report.last_hash = String::from_utf8_lossy(&self.last_hash).into_owned();
        self.report
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A log whose lines are chained correctly but numbered `seqs`.
    fn log_numbered(seqs: &[u64]) -> Vec<u8> {
        let mut encoder = Encoder::default();
        let mut log = Vec::new();
        let mut prev = GENESIS;
        for &seq in seqs {
            let fields: BTreeMap<&str, u64> = [("call", seq)].into();
            prev = encoder.encode(&fields, seq, &prev, &mut log).unwrap();
            log.push(b'\n');
        }
        log
    }

    #[test]
    fn a_rechained_log_with_a_record_cut_out_shows_a_seq_gap() {
        let report = verify_bytes(&log_numbered(&[1, 2, 4, 5]));
        assert_eq!(report.records, 2);
        let broken = report.broken.unwrap();
        assert_eq!((broken.line, broken.seq), (3, Some(4)));
        assert_eq!(
            broken.reason,
            BreakReason::SeqGap {
                expected: 3,
                found: 4
            }
        );
        assert_eq!(report.torn_tail, None);

        let report = verify_bytes(&log_numbered(&[2]));
        assert_eq!(
            report.broken.unwrap().reason,
            BreakReason::SeqGap {
                expected: 1,
                found: 2
            }
        );
    }

    #[test]
    fn a_final_line_that_parses_but_does_not_verify_is_broken_not_torn() {
        let mut log = log_numbered(&[1, 2]);
        log.extend_from_slice(br#"{"seq":3}"#);
        let report = verify_bytes(&log);
        assert_eq!(report.torn_tail, None);
        let broken = report.broken.unwrap();
        assert_eq!((broken.line, broken.seq), (3, Some(3)));
        assert_eq!(broken.reason, BreakReason::MissingField("hash"));
    }

    #[test]
    fn a_line_longer_than_any_record_stops_the_reading_and_breaks_the_chain() {
        let mut log = log_numbered(&[1, 2]);
        let good = log.len() as u64;
        log.resize(log.len() + MAX_RECORD_LEN + 1, b' ');
        log.extend_from_slice(b"\n");
        log.extend_from_slice(&log_numbered(&[3]));
        let from_bytes = verify_bytes(&log);
        assert_eq!(verify_reader(&log[..]).unwrap(), from_bytes);
        assert_eq!((from_bytes.records, from_bytes.lines), (2, 3));
        let broken = from_bytes.broken.unwrap();
        assert_eq!((broken.line, broken.offset), (3, good));
        assert_eq!(broken.reason, BreakReason::TooLong);
        assert_eq!(
            from_bytes.torn_tail, None,
            "longer than any write cut short"
        );

        // A line of exactly the limit is read, and judged as a line.
        let mut log = log_numbered(&[1]);
        log.resize(log.len() + MAX_RECORD_LEN, b' ');
        let report = verify_reader(&log[..]).unwrap();
        assert_eq!(report, verify_bytes(&log));
        assert_ne!(report.broken.map(|b| b.reason), Some(BreakReason::TooLong));
    }

    #[test]
    fn reader_and_bytes_agree() {
        let mut log = log_numbered(&[1, 2, 3]);
        log.extend_from_slice(b"{\"cut");
        let from_bytes = verify_bytes(&log);
        assert_eq!(verify_reader(&log[..]).unwrap(), from_bytes);
        assert_eq!(from_bytes.records, 3);
        assert_eq!(from_bytes.torn_tail.unwrap().len, 5);
    }
}
