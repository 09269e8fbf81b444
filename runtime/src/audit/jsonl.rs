//! The append-only, hash-chained JSONL audit log.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::audit::chain::{Encoder, HashHex, parse_hash};
#[cfg(feature = "checkpoints")]
use crate::audit::checkpoint::{Checkpointer, Checkpoints};
use crate::audit::record::AuditRecord;
#[cfg(feature = "checkpoints")]
use crate::audit::sidecar::{Sidecar, checkpoints_path};
use crate::audit::sink::{AuditError, AuditSink};
use crate::audit::verify::{MAX_RECORD_LEN, verify_reader_keeping};

/// Pending bytes a [`Durability::Buffered`] sink holds before it writes them.
const BUFFERED_LIMIT: usize = 64 * 1024;

/// When a [`JsonlSink`] hands records to the operating system and to the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Each record is written to the operating system, in one `write`, before
    /// [`record`](AuditSink::record) returns: a crash of the process loses no record that was
    /// acknowledged; a crash of the machine may lose the last ones the OS had not yet put on disk.
    #[default]
    Flush,
    /// As [`Flush`](Durability::Flush), then `fsync` (`sync_data`) before returning: an acknowledged
    /// record survives a power loss. Much slower for one thread; threads recording at once share their
    /// `fsync`s (group commit, as a database's log does): a record waits for the first `fsync` that
    /// starts after it is written, and one `fsync` covers every record written before it.
    FsyncEach,
    /// As [`Flush`](Durability::Flush), with an `fsync` every `n` records (0 counts as 1): a power loss
    /// loses at most the last `n - 1` acknowledged records.
    FsyncEvery(u32),
    /// Records are kept in memory and written in batches of about 64 KiB, by
    /// [`flush`](AuditSink::flush) and when the sink is dropped. The fastest, and the weakest: a record
    /// is acknowledged, and its call runs, before it reaches the operating system, so a crash of the
    /// process loses every acknowledged record not yet written, and a write error surfaces on a later
    /// record than the one it loses. After a failed write the sink fails closed: every record tries to
    /// write what is pending, and is refused until a write succeeds.
    Buffered,
}

impl Durability {
    fn syncs(self) -> bool {
        matches!(self, Durability::FsyncEach | Durability::FsyncEvery(_))
    }
}

/// Writes audit records to an append-only JSONL file, each line chained to the one before by a hash, so
/// that changing, deleting, inserting or reordering a line shows when the file is verified
/// ([`verify_file`](crate::audit::verify_file), `toolgate audit verify`).
///
/// ```no_run
/// # extern crate toolgate_runtime as toolgate;
/// use toolgate::audit::{Durability, JsonlSink};
///
/// let sink = JsonlSink::builder("audit.jsonl")
///     .durability(Durability::FsyncEvery(100))
///     .open()?;
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # File format
///
/// UTF-8 text, one record per line, each line ending in `\n` and at most
/// [`MAX_RECORD_LEN`] bytes long without it: a longer record (arguments recorded in full, say) is
/// refused, as a failed write is. A line is the canonical JSON of an object
/// holding the [`AuditRecord`]'s fields and three members the sink adds:
///
/// - `seq`: 1 on the first line of the file, then one more on each line;
/// - `prev_hash`: the previous line's `hash`; 64 `0`s on the first line;
/// - `hash`: `hex(sha256(prev_hash ‖ body))`, where `prev_hash` is taken as its 64 ASCII hex digits
///   (not the 32 bytes they spell) and `body` is the line's canonical JSON without the `hash` member.
///
/// Hashes are written as 64 lowercase hex digits. The **canonical JSON** of an object is:
///
/// - its members sorted by key, comparing keys as UTF-8 bytes, each key once; absent optional fields
///   are left out (never `null`);
/// - no whitespace outside strings: `{"a":1,"b":"x"}`;
/// - strings as `serde_json` writes them: `"` `\` and control characters escaped (`\"` `\\` `\n` `\r`
///   `\t` `\b` `\f`, others `\u00XX` in lowercase hex), everything else literal UTF-8, `/` included;
/// - integers in decimal, with no sign, fraction or exponent.
///
/// The record's fields are declared in sorted order, so the sink serializes the record straight into
/// canonical form and splices the three members in at their sorted places; the verifier parses a line,
/// removes the three members and re-encodes the rest through the same function. A line whose bytes
/// differ from that encoding does not verify, even when its content hashes right.
///
/// For example, with `…` standing for 64 hex digits (one line in the file, wrapped here):
///
/// ```text
/// {"arguments_digest":"…","call":7,"code":"ABOVE_CEILING","decision":"refused",
/// "declared_risk":"HIGH_WRITE","effective_risk":"HIGH_WRITE","gate":1,"hash":"…",
/// "manifest_digest":"…","mode":"SHADOW","policy_version":1,"prev_hash":"…","seq":42,
/// "stage":"refused","timestamp":"2026-11-22T03:11:01.123456Z","tool":"users.delete"}
/// ```
///
/// # What the chain proves
///
/// Anyone who can rewrite the file can also recompute every hash after an edit, or cut records off the
/// end; the chain shows such changes only to someone who kept a later hash. Copy
/// [`last_hash`](JsonlSink::last_hash) somewhere the writer of the file cannot change to keep that proof.
///
/// # Checkpoints
///
/// With the `checkpoints` feature and [`JsonlSinkBuilder::checkpoints`], the sink also signs the
/// chain's head with an Ed25519 key, so that whoever holds the public key alone can tell the log that
/// was written from a rewritten or shortened one
/// ([`verify_signed_file`](crate::audit::verify_signed_file), `toolgate audit verify FILE
/// --public-key PUB`).
///
/// The checkpoints go to a file beside the log, its path with `.checkpoints` appended
/// ([`checkpoints_path`]): UTF-8, one [`Checkpoint`](crate::audit::Checkpoint) per line, each line its
/// canonical JSON (as above) ending in `\n`. The checkpoints of a log are one series: `seq` 1, 2, …,
/// each naming the previous one's hash in `prev`. Their `writer` is the hash of the log's first record,
/// fixed for the file's life: a log opened again continues the same series.
///
/// A checkpoint is written:
///
/// - when a record is written and the policy says one is due: [`Checkpoints::every_records`] records
///   since the last, or [`Checkpoints::every_interval`] since the last (the time is looked at when a
///   record is written: an idle log gets its next checkpoint with its next record, or when it closes);
/// - by [`flush`](AuditSink::flush), over every record written;
/// - by [`close`](JsonlSink::close) and when the sink is dropped, as `final`.
///
/// A checkpoint covers only records in the file, never one still buffered, and the log is `fsync`ed
/// before the checkpoint is written, whatever the durability: a crash never leaves a checkpoint naming
/// a record that is lost. The checkpoint file is `fsync`ed after it when the durability syncs the log
/// ([`FsyncEach`](Durability::FsyncEach), [`FsyncEvery`](Durability::FsyncEvery)); otherwise a crash
/// of the machine may lose the last checkpoint, never a record it names. A record that makes a
/// checkpoint due is acknowledged after the checkpoint is written; if the checkpoint cannot be
/// written, that record's call is refused (the record stays in the log) and the sink refuses every
/// record until it is opened again. On Unix the checkpoint file is appended to only while it has its
/// one name, checked when it is opened and before each checkpoint: a hard link made to it, another
/// file renamed onto its name, or its name removed, while the sink runs, is such a failure.
///
/// Opening a log with checkpoints reads the checkpoint file back and checks it against the log with
/// the key's public key; a checkpoint that does not verify, names another writer, or names a record the
/// log does not have (a log rewritten or cut short) is refused with
/// [`InvalidData`](io::ErrorKind::InvalidData), as a broken chain is, and so is a log that has records
/// but no checkpoint file (create it empty to sign such a log as it stands). A torn last checkpoint line
/// is cut off with [`recover_torn_tail`](JsonlSinkBuilder::recover_torn_tail), refused without. The
/// log must be a regular file.
///
/// # Opening and failures
///
/// [`open`](JsonlSink::open) creates the file, or verifies an existing one and continues its chain after
/// the last record. It refuses a file whose chain is broken, and a file with a torn last line (a write cut
/// short by a crash) unless [`recover_torn_tail`](JsonlSinkBuilder::recover_torn_tail) is set. A path that
/// is not a regular file (a FIFO, a device) is not read: its chain starts at `seq` 1.
///
/// Only one sink, in one process, appends to a file (or a FIFO) at a time: the sink holds an exclusive OS
/// lock (`flock`) on it while it lives, and opening it again meanwhile, in this process or another, fails
/// with [`io::ErrorKind::WouldBlock`] instead of forking its chain. A device is not locked. The lock is on
/// the file, not its name: a log deleted or renamed while a sink holds it keeps receiving that sink's
/// records, and a new sink may open a new file at the old name.
///
/// Records are numbered and chained under one lock, in the order threads take it. When a write fails (a
/// full disk, an I/O error) [`record`](AuditSink::record) returns the error, the partial line is cut off
/// again, and the chain does not advance; if the file cannot be cut back, or an `fsync` fails, every
/// later record fails too, until the file is reopened (and so verified).
#[derive(Debug)]
pub struct JsonlSink {
    path: PathBuf,
    durability: Durability,
    state: Mutex<State>,
    /// The group commit of [`Durability::FsyncEach`]: `fsync`s run outside `state`'s lock, on a handle
    /// of their own, so that records are written while one is in flight.
    sync: Mutex<GroupSync>,
    synced: Condvar,
    sync_file: File,
}

/// Where the group commit stands.
#[derive(Debug, Default)]
struct GroupSync {
    /// The highest `seq` written to the file (set under `state`'s lock, after the write).
    written: u64,
    /// The highest `seq` an `fsync` has covered.
    synced: u64,
    /// A thread is running an `fsync`.
    syncing: bool,
    /// How many `fsync`s the group commit ran.
    count: u64,
    /// An `fsync` failed: nothing after the last good one can be trusted to be on disk.
    failed: Option<String>,
}

#[derive(Debug)]
struct State {
    file: File,
    /// Whether the file can be cut back after a failed write.
    regular: bool,
    /// The length of the file up to the last whole record written.
    written_len: u64,
    seq: u64,
    last_hash: HashHex,
    /// Encoded lines not yet written: one line, or with [`Durability::Buffered`] several.
    pending: Vec<u8>,
    unsynced: u32,
    /// A write of pending records failed and none has succeeded since: a [`Durability::Buffered`]
    /// sink then writes at every record, so that no call runs on a record that only sits in memory
    /// behind records the disk refused.
    write_failed: bool,
    /// Why the sink refuses every record, after a failure it could not undo.
    failed: Option<String>,
    /// [`JsonlSink::close_shared`] closed the log: it takes no more records.
    closed: bool,
    encoder: EncoderDebug,
    #[cfg(feature = "checkpoints")]
    signing: Option<Signing>,
}

/// The checkpoints of a log with [`JsonlSinkBuilder::checkpoints`].
#[cfg(feature = "checkpoints")]
#[derive(Debug)]
struct Signing {
    policy: Checkpoints,
    file: File,
    path: PathBuf,
    /// The length of the checkpoint file up to its last whole checkpoint.
    len: u64,
    /// Made when the log's first record, whose hash names the writer, is known.
    checkpointer: Option<Checkpointer>,
    /// The last checkpoint written is final (it covers the last record if no record came since).
    closed: bool,
}

/// The encoder, with a `Debug` that does not dump its buffers.
#[derive(Default)]
struct EncoderDebug(Encoder);

impl std::fmt::Debug for EncoderDebug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Encoder")
    }
}

/// Options for opening a [`JsonlSink`]; from [`JsonlSink::builder`].
#[derive(Debug, Clone)]
#[must_use = "call `open` to open the sink"]
pub struct JsonlSinkBuilder {
    path: PathBuf,
    durability: Durability,
    recover_torn_tail: bool,
    #[cfg(feature = "checkpoints")]
    checkpoints: Option<Checkpoints>,
}

impl JsonlSinkBuilder {
    /// Signs checkpoints of the log into the file beside it ([`checkpoints_path`], `FILE.checkpoints`):
    /// see "Checkpoints" on [`JsonlSink`]. A policy of zero records or zero time is refused by
    /// [`open`](JsonlSinkBuilder::open) with [`InvalidInput`](io::ErrorKind::InvalidInput).
    #[cfg(feature = "checkpoints")]
    pub fn checkpoints(mut self, checkpoints: Checkpoints) -> JsonlSinkBuilder {
        self.checkpoints = Some(checkpoints);
        self
    }

    /// When records reach the OS and the disk; [`Durability::Flush`] by default.
    pub fn durability(mut self, durability: Durability) -> JsonlSinkBuilder {
        self.durability = durability;
        self
    }

    /// Whether to cut off a torn last line (a write cut short by a crash, never acknowledged to a
    /// caller) and continue the chain, rather than refuse to open; `false` by default. A broken chain is
    /// refused either way.
    pub fn recover_torn_tail(mut self, recover: bool) -> JsonlSinkBuilder {
        self.recover_torn_tail = recover;
        self
    }

    /// Opens the log, creating it if needed; see [`JsonlSink`] for what it checks. A broken chain or a
    /// torn tail is an error of kind [`InvalidData`](io::ErrorKind::InvalidData).
    pub fn open(self) -> io::Result<JsonlSink> {
        let JsonlSinkBuilder {
            path,
            durability,
            recover_torn_tail,
            #[cfg(feature = "checkpoints")]
            checkpoints,
        } = self;
        #[cfg(feature = "checkpoints")]
        if let Some(policy) = &checkpoints {
            policy.check()?;
        }
        let context =
            |e: io::Error| io::Error::new(e.kind(), format!("audit log {}: {e}", path.display()));
        let existed = path.exists();
        // Never through a link planted at the log's name: it would choose where the records go.
        let file = crate::files::open(
            OpenOptions::new().read(true).append(true).create(true),
            &path,
        )
        .map_err(context)?;
        let regular = file.metadata().map_err(context)?.is_file();
        // One writer per log: a second sink (in this process or another) would fork the chain, which
        // `verify` could only report as tampering. The lock lives as long as the file handle. A FIFO is
        // locked too (its reader would get two chains); a device is not (it keeps no chain).
        if regular || is_fifo(&file) {
            lock_soon(&file).map_err(|error| match error {
                std::fs::TryLockError::WouldBlock => io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "audit log {}: another sink, in this process or another, writes it; a log has \
                         one writer, so that it has one chain",
                        path.display()
                    ),
                ),
                std::fs::TryLockError::Error(e) => context(e),
            })?;
        }
        let mut state = State {
            file,
            regular,
            written_len: 0,
            seq: 0,
            last_hash: crate::audit::chain::GENESIS,
            pending: Vec::with_capacity(1024),
            unsynced: 0,
            write_failed: false,
            failed: None,
            closed: false,
            encoder: EncoderDebug::default(),
            #[cfg(feature = "checkpoints")]
            signing: None,
        };
        #[cfg(feature = "checkpoints")]
        if let Some(policy) = checkpoints {
            if !regular {
                return Err(context(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "checkpoints need a regular file, read back when it is opened again",
                )));
            }
            state
                .resume_signed(&path, recover_torn_tail, policy, durability)
                .map_err(context)?;
        } else if regular {
            state
                .resume(&path, recover_torn_tail, BTreeSet::new())
                .map_err(context)?;
        }
        #[cfg(not(feature = "checkpoints"))]
        if regular {
            state
                .resume(&path, recover_torn_tail, BTreeSet::new())
                .map_err(context)?;
        }
        if !existed && durability.syncs() {
            sync_parent_dir(&path).map_err(context)?;
        }
        let sync_file = state.file.try_clone().map_err(context)?;
        let sync = GroupSync {
            written: state.seq,
            synced: state.seq,
            ..GroupSync::default()
        };
        Ok(JsonlSink {
            path,
            durability,
            state: Mutex::new(state),
            sync: Mutex::new(sync),
            synced: Condvar::new(),
            sync_file,
        })
    }
}

impl State {
    /// Verifies the existing content and takes up its chain; returns the hashes of the records
    /// numbered `wanted`.
    fn resume(
        &mut self,
        path: &Path,
        recover_torn_tail: bool,
        wanted: BTreeSet<u64>,
    ) -> io::Result<BTreeMap<u64, HashHex>> {
        self.file.seek(SeekFrom::Start(0))?;
        let (report, kept) = verify_reader_keeping(&self.file, wanted)?;
        let refuse = |what: String| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{what}; refusing to append to it (see `toolgate audit verify {}`)",
                    path.display()
                ),
            )
        };
        if let Some(broken) = &report.broken {
            return Err(refuse(format!(
                "the hash chain is broken at {broken}; it was tampered with or damaged"
            )));
        }
        if let Some(torn) = &report.torn_tail {
            if !recover_torn_tail {
                return Err(refuse(format!(
                    "torn tail: {torn} (left by a crash; open with `recover_torn_tail(true)` to cut it off)"
                )));
            }
            self.file.set_len(torn.offset)?;
        }
        self.seq = report.last_seq;
        self.last_hash = parse_hash(&report.last_hash).unwrap_or(crate::audit::chain::GENESIS);
        self.written_len = report.intact_len;
        if report.final_newline_missing {
            self.file.write_all(b"\n")?;
            self.written_len += 1;
        }
        Ok(kept)
    }

    /// As [`resume`](State::resume), then reads the checkpoint file back, checks it against the log
    /// with the key's own public key, and continues its series.
    #[cfg(feature = "checkpoints")]
    fn resume_signed(
        &mut self,
        path: &Path,
        recover_torn_tail: bool,
        policy: Checkpoints,
        durability: Durability,
    ) -> io::Result<()> {
        let sidecar_path = checkpoints_path(path);
        let refuse = |what: String| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "checkpoints {}: {what}; refusing to append to the log (see `toolgate audit \
                     verify {} --public-key PUB`)",
                    sidecar_path.display(),
                    path.display()
                ),
            )
        };
        let in_sidecar = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("checkpoints {}: {e}", sidecar_path.display()),
            )
        };
        // Neither read nor written through a link planted at its name, nor into a file of other
        // names; the file read is the one appended to, and one created is created new.
        let (found, mut sidecar) =
            match crate::files::open_own(OpenOptions::new().read(true).append(true), &sidecar_path)
            {
                Ok(file) => {
                    let sidecar = Sidecar::read(&file)?;
                    (Some(file), sidecar)
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    (None, Sidecar::read(io::empty())?)
                }
                Err(e) => return Err(in_sidecar(e)),
            };
        let existed = found.is_some();
        let kept = self.resume(path, recover_torn_tail, sidecar.heads())?;
        if !existed && self.seq > 0 {
            // Signing a log found without its checkpoints would sign whatever someone left there.
            return Err(refuse(format!(
                "missing, and the log holds {} records; create it empty to sign the log as it now \
                 stands",
                self.seq
            )));
        }
        let cut_torn = std::mem::take(&mut sidecar.torn);
        if cut_torn && !recover_torn_tail {
            return Err(refuse(
                "torn tail: its last line is incomplete (left by a crash; open with \
                 `recover_torn_tail(true)` to cut it off)"
                    .into(),
            ));
        }
        let text = |hash: &HashHex| String::from_utf8_lossy(hash).into_owned();
        let writer = kept.get(&1).map(text);
        let report = sidecar.verify(&policy.public_key(), writer.as_deref(), self.seq, |seq| {
            kept.get(&seq).map(text)
        });
        if !report.is_intact() {
            let problems: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
            return Err(refuse(format!(
                "they do not match the log or this key: {}",
                problems.join("; ")
            )));
        }
        let file = match found {
            Some(file) => file,
            None => crate::files::open(
                OpenOptions::new().read(true).append(true).create_new(true),
                &sidecar_path,
            )
            .map_err(in_sidecar)?,
        };
        if cut_torn {
            file.set_len(sidecar.whole_len)?;
        }
        if !existed && durability.syncs() {
            sync_parent_dir(&sidecar_path)?;
        }
        let last = sidecar.last();
        self.signing = Some(Signing {
            checkpointer: writer.map(|writer| Checkpointer::new(&policy, writer, last)),
            closed: last.is_some_and(|c| c.is_final && c.head_seq == self.seq),
            policy,
            file,
            path: sidecar_path,
            len: sidecar.whole_len,
        });
        Ok(())
    }

    /// Writes a checkpoint over the records written so far if one is due, or if `close` (then a final
    /// one) or `now` ask for it. Only records in the file are covered, and they are synced to disk
    /// first: a checkpoint never names a record a crash could still take away.
    #[cfg(feature = "checkpoints")]
    fn checkpoint(
        &mut self,
        log_path: &Path,
        durability: Durability,
        close: bool,
        now: bool,
    ) -> Result<(), AuditError> {
        let Some(signing) = &mut self.signing else {
            return Ok(());
        };
        if self.seq == 0 || !self.pending.is_empty() {
            return Ok(());
        }
        let Some(checkpointer) = &mut signing.checkpointer else {
            return Ok(());
        };
        let since = self.seq - checkpointer.last_head_seq();
        let wanted = if close {
            since > 0 || !signing.closed
        } else {
            since > 0 && (now || checkpointer.due(since, std::time::Instant::now()))
        };
        if !wanted {
            return Ok(());
        }
        if let Err(e) = self.file.sync_data() {
            self.failed = Some(format!("fsync before a checkpoint failed ({e})"));
            return Err(AuditError::io(
                format!("syncing audit log {}", log_path.display()),
                e,
            ));
        }
        self.unsynced = 0;
        let head = String::from_utf8_lossy(&self.last_hash).into_owned();
        let mut line = checkpointer
            .sign(self.seq, &head, self.seq, close)
            .to_canonical_json();
        line.push('\n');
        // A hard link made to the file, or another file renamed onto its name, since it was opened:
        // refused as a failed write, and nothing written into a file kept elsewhere or unnamed.
        if let Err(e) = crate::files::still_own(&signing.file, &signing.path) {
            self.failed = Some(format!("a checkpoint was not written ({e})"));
            return Err(AuditError::io(
                format!("writing checkpoints {}", signing.path.display()),
                e,
            ));
        }
        let written = signing.file.write_all(line.as_bytes()).and_then(|()| {
            if durability.syncs() {
                signing.file.sync_data()
            } else {
                Ok(())
            }
        });
        match written {
            Ok(()) => {
                signing.len += line.len() as u64;
                signing.closed = close;
                Ok(())
            }
            Err(e) => {
                // The checkpoint is signed and counted: the series cannot go on without it, so the sink
                // stops until the log is opened again and its checkpoints read back.
                let _ = signing.file.set_len(signing.len);
                self.failed = Some(format!("writing a checkpoint failed ({e})"));
                Err(AuditError::io(
                    format!("writing checkpoints {}", signing.path.display()),
                    e,
                ))
            }
        }
    }

    /// Refuses a record (or a flush) once the sink failed beyond repair or was closed.
    fn usable(&self, path: &Path) -> Result<(), AuditError> {
        if let Some(failed) = &self.failed {
            return Err(AuditError::new(format!(
                "audit log {} is unusable: {failed}; reopen it",
                path.display()
            )));
        }
        if self.closed {
            return Err(AuditError::new(format!(
                "audit log {} is closed: it takes no more records",
                path.display()
            )));
        }
        Ok(())
    }

    /// Writes the pending bytes; on failure cuts the file back to its last whole record.
    fn write_pending(&mut self, path: &Path) -> Result<(), AuditError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        match self.file.write_all(&self.pending) {
            Ok(()) => {
                self.written_len += self.pending.len() as u64;
                self.pending.clear();
                self.write_failed = false;
                Ok(())
            }
            Err(e) => {
                self.write_failed = true;
                let cut = if self.regular {
                    self.file.set_len(self.written_len)
                } else {
                    Err(io::Error::other("not a regular file"))
                };
                if let Err(cut) = cut {
                    self.failed = Some(format!(
                        "a write failed ({e}) and the partial line could not be cut off ({cut})"
                    ));
                }
                Err(AuditError::io(
                    format!("writing audit log {}", path.display()),
                    e,
                ))
            }
        }
    }

    fn sync(&mut self, path: &Path) -> Result<(), AuditError> {
        self.unsynced = 0;
        self.file.sync_data().map_err(|e| {
            // After a failed fsync the kernel may have dropped the dirty pages: nothing written since the
            // last good one can be trusted to be on disk, so stop rather than write more after it.
            self.failed = Some(format!("fsync failed ({e})"));
            AuditError::io(format!("syncing audit log {}", path.display()), e)
        })
    }
}

impl JsonlSink {
    /// Opens the log at `path` with [`Durability::Flush`]; see [`JsonlSink`] and
    /// [`JsonlSinkBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> io::Result<JsonlSink> {
        JsonlSink::builder(path).open()
    }

    /// Options for opening the log at `path`.
    pub fn builder(path: impl AsRef<Path>) -> JsonlSinkBuilder {
        JsonlSinkBuilder {
            path: path.as_ref().to_path_buf(),
            durability: Durability::default(),
            recover_torn_tail: false,
            #[cfg(feature = "checkpoints")]
            checkpoints: None,
        }
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The durability it was opened with.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The `seq` of the last record (0 if there is none).
    pub fn last_seq(&self) -> u64 {
        self.lock().map_or(0, |state| state.seq)
    }

    /// The `hash` of the last record (64 zeros if there is none): keep a copy elsewhere to be able to
    /// show later that nothing up to it was rewritten or cut off.
    pub fn last_hash(&self) -> String {
        let hash = self
            .lock()
            .map_or(crate::audit::chain::GENESIS, |state| state.last_hash);
        String::from_utf8_lossy(&hash).into_owned()
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>, AuditError> {
        // The lock is poisoned only by a panic in the middle of writing, which leaves the file and the
        // chain state in doubt: refuse from then on.
        self.state.lock().map_err(|_| {
            AuditError::new(format!(
                "audit log {}: a thread panicked while writing it",
                self.path.display()
            ))
        })
    }
}

impl AuditSink for JsonlSink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if self.durability == Durability::FsyncEach {
            let seq = self.write_record(record)?;
            return self.wait_synced(seq);
        }
        self.write_record(record).map(drop)
    }

    /// Writes any buffered records and `fsync`s the file; with checkpoints, then writes one over every
    /// record (unless the last one already covers them).
    fn flush(&self) -> Result<(), AuditError> {
        let mut state = self.lock()?;
        if state.closed && state.failed.is_none() {
            // Closing made everything durable, and nothing was taken since.
            return Ok(());
        }
        state.usable(&self.path)?;
        state.write_pending(&self.path)?;
        state.sync(&self.path)?;
        #[cfg(feature = "checkpoints")]
        state.checkpoint(&self.path, self.durability, false, true)?;
        Ok(())
    }
}

impl JsonlSink {
    /// Encodes, chains and writes one record (or buffers it), and syncs where the durability says so,
    /// except [`Durability::FsyncEach`], whose `fsync` is the group commit's. Returns its `seq`.
    fn write_record(&self, record: &AuditRecord) -> Result<u64, AuditError> {
        if self.durability == Durability::FsyncEach {
            let sync = self.sync.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(failed) = &sync.failed {
                return Err(AuditError::new(format!(
                    "audit log {} is unusable: {failed}; reopen it",
                    self.path.display()
                )));
            }
        }
        let mut guard = self.lock()?;
        let state = &mut *guard;
        state.usable(&self.path)?;
        let start = state.pending.len();
        let seq = state.seq + 1;
        let hash = state
            .encoder
            .0
            .encode_record(record, seq, &state.last_hash, &mut state.pending)
            .map_err(|e| AuditError::new(format!("encoding an audit record: {e}")))?;
        let len = state.pending.len() - start;
        if len > MAX_RECORD_LEN {
            state.pending.truncate(start);
            return Err(AuditError::new(format!(
                "an audit record of {len} bytes is longer than a log's lines may be \
                 ({MAX_RECORD_LEN} bytes); not written"
            )));
        }
        state.pending.push(b'\n');

        let written = match self.durability {
            Durability::Buffered if !state.write_failed && state.pending.len() < BUFFERED_LIMIT => {
                Ok(())
            }
            _ => state.write_pending(&self.path),
        };
        if let Err(e) = written {
            state.pending.truncate(start);
            return Err(e);
        }
        state.seq = seq;
        state.last_hash = hash;
        state.unsynced = state.unsynced.saturating_add(1);
        #[cfg(feature = "checkpoints")]
        if let Some(signing) = state.signing.as_mut().filter(|_| seq == 1) {
            // The log's first record names its writer for the file's life.
            let writer = String::from_utf8_lossy(&hash);
            signing.checkpointer = Some(Checkpointer::new(&signing.policy, writer, None));
        }
        // Before the record is acknowledged: a due checkpoint is never skipped by a caller that stops
        // after this record.
        #[cfg(feature = "checkpoints")]
        state.checkpoint(&self.path, self.durability, false, false)?;
        match self.durability {
            Durability::FsyncEach => {
                // Still under `state`'s lock: `written` grows in the file's order.
                let mut sync = self.sync.lock().unwrap_or_else(PoisonError::into_inner);
                sync.written = seq;
                Ok(seq)
            }
            Durability::FsyncEvery(n) if state.unsynced >= n.max(1) => {
                state.sync(&self.path).map(|()| seq)
            }
            _ => Ok(seq),
        }
    }

    /// Waits until an `fsync` that started after record `seq` was written has succeeded, running one
    /// where none is in flight: the records written meanwhile by other threads share it.
    fn wait_synced(&self, seq: u64) -> Result<(), AuditError> {
        let mut sync = self.sync.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(failed) = &sync.failed {
                return Err(AuditError::new(format!(
                    "audit log {} is unusable: {failed}; reopen it",
                    self.path.display()
                )));
            }
            if sync.synced >= seq {
                return Ok(());
            }
            if sync.syncing {
                sync = self
                    .synced
                    .wait(sync)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            // Every record up to `written` is in the file before this `fsync` starts.
            let target = sync.written;
            sync.syncing = true;
            drop(sync);
            let result = self.sync_file.sync_data();
            sync = self.sync.lock().unwrap_or_else(PoisonError::into_inner);
            sync.syncing = false;
            sync.count += 1;
            match result {
                Ok(()) => sync.synced = sync.synced.max(target),
                Err(e) => {
                    // After a failed fsync the kernel may have dropped the dirty pages: nothing
                    // written since the last good one can be trusted to be on disk.
                    sync.failed = Some(format!("fsync failed ({e})"));
                }
            }
            self.synced.notify_all();
        }
    }

    /// Writes any buffered records, `fsync`s the file and, with checkpoints, writes the final one;
    /// returns what went wrong, which dropping the sink cannot. Dropping the sink does the same
    /// silently. For a sink shared between gates (an `Arc`), see [`JsonlSink::close_shared`].
    pub fn close(self) -> Result<(), AuditError> {
        self.close_shared()
    }

    /// [`JsonlSink::close`] through a shared reference, for a sink that gates share (given with
    /// [`GateBuilder::audit_shared`](crate::GateBuilder::audit_shared)) on shutdown: writes any
    /// buffered records, `fsync`s the file and, with checkpoints, writes the final one. From then on
    /// the sink refuses every record ("audit log … is closed"), so a call made through a gate that
    /// still holds it is refused with `AUDIT_UNAVAILABLE` rather than run unlogged; dropping it
    /// writes nothing more, and `flush` has nothing left to do. Closing it again is an error, and so is
    /// closing a sink that failed.
    pub fn close_shared(&self) -> Result<(), AuditError> {
        let mut state = self.lock()?;
        state.usable(&self.path)?;
        state.write_pending(&self.path)?;
        state.sync(&self.path)?;
        #[cfg(feature = "checkpoints")]
        state.checkpoint(&self.path, self.durability, true, false)?;
        state.closed = true;
        Ok(())
    }

    /// How many `fsync`s the group commit of [`Durability::FsyncEach`] has run: fewer than the records
    /// when threads shared them.
    pub fn group_syncs(&self) -> u64 {
        self.sync
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .count
    }
}

impl Drop for JsonlSink {
    fn drop(&mut self) {
        let Ok(state) = self.state.get_mut() else {
            return;
        };
        if state.failed.is_some() || state.closed {
            return;
        }
        // Errors cannot be reported from here; call `flush` (or `close`) first to see them.
        if state.write_pending(&self.path).is_ok() && state.unsynced > 0 && self.durability.syncs()
        {
            let _ = state.sync(&self.path);
        }
        #[cfg(feature = "checkpoints")]
        if state.failed.is_none() {
            let _ = state.checkpoint(&self.path, self.durability, true, false);
        }
    }
}

#[cfg(unix)]
fn is_fifo(file: &File) -> bool {
    use std::os::unix::fs::FileTypeExt;
    file.metadata().is_ok_and(|m| m.file_type().is_fifo())
}

#[cfg(not(unix))]
fn is_fifo(_file: &File) -> bool {
    false
}

#[cfg(unix)]
fn sync_parent_dir(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

#[cfg(not(unix))]
fn sync_parent_dir(_path: &Path) -> io::Result<()> {
    Ok(())
}

/// Takes the log's lock, trying again for a moment while another holds it: a process being started
/// at the same time (by any thread of this one) holds a copy of every handle, a closed log's included,
/// until it runs its program, so a log closed just before is briefly still locked. A writer that keeps
/// the log open still holds it after that moment.
fn lock_soon(file: &File) -> Result<(), std::fs::TryLockError> {
    const TRIES: u32 = 20;
    for _ in 1..TRIES {
        match file.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            done => return done,
        }
    }
    file.try_lock()
}
