//! The checkpoints of a JSONL log, kept in a file beside it: reading them back, and checking a log and
//! its checkpoints together.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};

use crate::audit::checkpoint::{
    Checkpoint, CheckpointReport, ProblemKind, PublicKey, SeriesVerifier,
};
use crate::audit::verify::{Line, MAX_RECORD_LEN, VerifyReport, read_line, verify_reader_keeping};

/// The checkpoint file of the log at `log`: its path with `.checkpoints` appended
/// (`audit.jsonl.checkpoints`).
pub fn checkpoints_path(log: impl AsRef<Path>) -> PathBuf {
    let mut name = OsString::from(log.as_ref().as_os_str());
    name.push(".checkpoints");
    PathBuf::from(name)
}

/// The entries of a checkpoint file, in order.
pub(crate) struct Sidecar {
    pub(crate) entries: Vec<Result<Checkpoint, String>>,
    /// The length of the whole lines: where a last line without a newline starts.
    pub(crate) whole_len: u64,
    /// The last line has no newline: a write cut short.
    pub(crate) torn: bool,
}

impl Sidecar {
    /// Reads a checkpoint file, one line at a time: a line longer than [`MAX_RECORD_LEN`] is an
    /// unreadable entry, and nothing after it is read.
    pub(crate) fn read(reader: impl io::Read) -> io::Result<Sidecar> {
        let mut reader = BufReader::with_capacity(1 << 16, reader);
        let mut sidecar = Sidecar {
            entries: Vec::new(),
            whole_len: 0,
            torn: false,
        };
        let mut line = Vec::new();
        loop {
            match read_line(&mut reader, &mut line)? {
                Line::End => return Ok(sidecar),
                Line::TooLong => {
                    sidecar.entries.push(Err(format!(
                        "longer than {MAX_RECORD_LEN} bytes: not a checkpoint, and the file is not \
                         read past it"
                    )));
                    return Ok(sidecar);
                }
                Line::Read => match line.strip_suffix(b"\n") {
                    Some(line) => {
                        sidecar.whole_len += line.len() as u64 + 1;
                        sidecar.entries.push(Checkpoint::from_canonical_json(line));
                    }
                    None => sidecar.torn = true,
                },
            }
        }
    }

    /// The `seq`s of the records the entries name as heads, and 1, whose hash names the writer.
    pub(crate) fn heads(&self) -> BTreeSet<u64> {
        let mut heads: BTreeSet<u64> = self
            .entries
            .iter()
            .filter_map(|entry| entry.as_ref().ok().map(|c| c.head_seq))
            .collect();
        heads.insert(1);
        heads
    }

    /// The last entry, if it is a checkpoint.
    pub(crate) fn last(&self) -> Option<&Checkpoint> {
        self.entries.last().and_then(|entry| entry.as_ref().ok())
    }

    /// Checks the entries against a log's chain: `writer` is the hash of its first record (`None` when
    /// no record verified: a log cut to nothing is then reported as cut, the writer its first
    /// checkpoint names), `hash_at` the hashes of the records that verified.
    pub(crate) fn verify(
        &self,
        key: &PublicKey,
        writer: Option<&str>,
        chain_last_seq: u64,
        mut hash_at: impl FnMut(u64) -> Option<String>,
    ) -> CheckpointReport {
        let named = || {
            self.entries
                .iter()
                .find_map(|entry| entry.as_ref().ok())
                .map_or("", |c| c.writer.as_str())
        };
        let writer = writer.unwrap_or_else(named);
        let mut verifier = SeriesVerifier::new(key, writer, chain_last_seq);
        for entry in &self.entries {
            match entry {
                Ok(checkpoint) => verifier.checkpoint(checkpoint, &mut hash_at),
                Err(detail) => verifier.unreadable(detail.clone()),
            }
        }
        let mut report = verifier.finish();
        report.torn_tail = self.torn;
        report
    }
}

/// Verifies the log at `log` and the checkpoints at `checkpoints` (usually
/// [`checkpoints_path`]`(log)`) with the writer's public key: the log's own chain, then every
/// checkpoint against it. `Err` only if either file cannot be read.
///
/// The checkpoints are checked against the records that verify: when the chain is broken, a
/// checkpoint past the break is [`ProblemKind::EditedBefore`] (its records are there but were
/// edited), and one past the end of an intact chain is [`ProblemKind::BeyondEnd`] (they were cut).
/// A log with records and an empty checkpoint file has no problem to report, and is
/// [`signed_by_nothing`](CheckpointReport::signed_by_nothing): not verified by the key.
pub fn verify_signed_file(
    log: impl AsRef<Path>,
    checkpoints: impl AsRef<Path>,
    key: &PublicKey,
) -> io::Result<(VerifyReport, CheckpointReport)> {
    let checkpoints = checkpoints.as_ref();
    let sidecar = File::open(checkpoints)
        .and_then(Sidecar::read)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", checkpoints.display())))?;
    let (report, kept) = verify_reader_keeping(File::open(log)?, sidecar.heads())?;
    let text = |hash: &[u8; 64]| String::from_utf8_lossy(hash).into_owned();
    let writer = kept.get(&1).map(text);
    let mut checked = sidecar.verify(key, writer.as_deref(), report.last_seq, |seq| {
        kept.get(&seq).map(text)
    });
    if report.broken.is_some() {
        for problem in &mut checked.problems {
            if let ProblemKind::BeyondEnd { head_seq } = problem.kind {
                problem.kind = ProblemKind::EditedBefore {
                    head_seq,
                    verified_through: report.last_seq,
                };
            }
        }
    }
    Ok((report, checked))
}
