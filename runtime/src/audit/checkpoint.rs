//! Signed checkpoints of a hash-chained audit log: the chain's head, signed with an Ed25519 key, so that
//! whoever holds the public key alone can tell a rewritten or shortened log from the one that was
//! written. Nothing here knows where records or checkpoints are stored: a sink signs with
//! [`Checkpointer`], a verifier checks a series with [`verify_checkpoints`].
//!
//! The only module that uses `ed25519-dalek`: the rest of the crate sees [`SigningKey`] and
//! [`PublicKey`].

use std::fmt;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::spki::der::zeroize::Zeroizing;
use ed25519_dalek::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, KeypairBytes,
};
use ed25519_dalek::{Signature, Signer};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::audit::time::now_rfc3339;
use crate::terminal::escaped;

/// The `prev` of a writer's first checkpoint.
pub const FIRST_PREV: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Records between two checkpoints, by default.
pub const DEFAULT_EVERY_RECORDS: u64 = 1_000;
/// Time between two checkpoints while records are written, by default.
pub const DEFAULT_EVERY_INTERVAL: Duration = Duration::from_secs(10);

/// The secret half of a checkpoint key: signs checkpoints. Its `Debug` shows the public key only, and the
/// secret is wiped from memory when it is dropped.
///
/// Read it from a PKCS#8 PEM file (`-----BEGIN PRIVATE KEY-----`), as `openssl genpkey -algorithm
/// ed25519` and `toolgate audit keygen` write them. Use the key for checkpoints alone: what it signs is
/// not bound to any other purpose.
pub struct SigningKey(ed25519_dalek::SigningKey);

/// The public half of a checkpoint key: all a verifier needs. Read from an SPKI PEM file
/// (`-----BEGIN PUBLIC KEY-----`, as `openssl pkey -pubout` and `toolgate audit keygen` write them).
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl SigningKey {
    /// A new random key, from the operating system's random source.
    pub fn generate() -> io::Result<SigningKey> {
        let mut secret = Zeroizing::new([0u8; 32]);
        getrandom::fill(&mut *secret).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(SigningKey(ed25519_dalek::SigningKey::from_bytes(&secret)))
    }

    /// Parses a PKCS#8 PEM private key; an error of kind [`InvalidData`](io::ErrorKind::InvalidData)
    /// when it is not an Ed25519 one.
    pub fn from_pkcs8_pem(pem: &str) -> io::Result<SigningKey> {
        ed25519_dalek::SigningKey::from_pkcs8_pem(pem)
            .map(SigningKey)
            .map_err(|e| invalid(format!("not an Ed25519 PKCS#8 PEM private key ({e})")))
    }

    /// Reads a PKCS#8 PEM private key file.
    pub fn read_pem_file(path: impl AsRef<Path>) -> io::Result<SigningKey> {
        let path = path.as_ref();
        let text = Zeroizing::new(fs::read_to_string(path).map_err(|e| in_file(path, e))?);
        SigningKey::from_pkcs8_pem(&text).map_err(|e| in_file(path, e))
    }

    /// Writes the key as a PKCS#8 PEM file that only its owner may read (mode 0600 on Unix); refuses to
    /// overwrite an existing file, and to write through a symbolic link at `path`, dangling or not.
    pub fn write_pem_file(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let path = path.as_ref();
        // The private key alone (PKCS#8 v1), as OpenSSL writes it: OpenSSL 3 refuses the v2 form with
        // the public key beside it that ed25519-dalek 2 writes.
        let pem = KeypairBytes {
            secret_key: self.0.to_bytes(),
            public_key: None,
        }
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| io::Error::other(format!("encoding the private key: {e}")))?;
        crate::files::create_new(path, pem.as_bytes(), 0o600).map_err(|e| in_file(path, e))
    }

    /// The public key that verifies this key's signatures.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    fn sign(&self, message: &[u8]) -> String {
        hex(&self.0.sign(message).to_bytes())
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("public_key", &self.public_key())
            .finish_non_exhaustive()
    }
}

impl PublicKey {
    /// Parses an SPKI PEM public key; an error of kind [`InvalidData`](io::ErrorKind::InvalidData) when
    /// it is not an Ed25519 one.
    pub fn from_public_key_pem(pem: &str) -> io::Result<PublicKey> {
        ed25519_dalek::VerifyingKey::from_public_key_pem(pem)
            .map(PublicKey)
            .map_err(|e| invalid(format!("not an Ed25519 SPKI PEM public key ({e})")))
    }

    /// Reads an SPKI PEM public key file.
    pub fn read_pem_file(path: impl AsRef<Path>) -> io::Result<PublicKey> {
        let path = path.as_ref();
        let text = fs::read_to_string(path).map_err(|e| in_file(path, e))?;
        PublicKey::from_public_key_pem(&text).map_err(|e| in_file(path, e))
    }

    /// Writes the key as a SubjectPublicKeyInfo PEM file (mode 0644 on Unix); refuses to overwrite an
    /// existing file, and to write through a symbolic link at `path`, dangling or not: whoever planted
    /// one would choose where the key that `verify` trusts is written.
    pub fn write_pem_file(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let path = path.as_ref();
        crate::files::create_new(path, self.to_public_key_pem().as_bytes(), 0o644)
            .map_err(|e| in_file(path, e))
    }

    /// The key as an SPKI PEM text.
    pub fn to_public_key_pem(&self) -> String {
        self.0
            .to_public_key_pem(LineEnding::LF)
            .expect("an Ed25519 public key always encodes")
    }

    /// The 32 bytes of the key as 64 lowercase hex digits: a short form to compare by eye.
    pub fn to_hex(&self) -> String {
        hex(self.0.as_bytes())
    }

    fn verifies(&self, message: &[u8], signature_hex: &str) -> bool {
        let Some(bytes) = unhex::<64>(signature_hex) else {
            return false;
        };
        self.0
            .verify_strict(message, &Signature::from_bytes(&bytes))
            .is_ok()
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_hex())
    }
}

/// A signed statement about one chain of records: "the chain of `writer` held `count` records, the last
/// being `head_seq` with hash `head_hash`, at `time`".
///
/// Written as its canonical JSON (keys sorted, no whitespace, as the log's lines), with the members
/// below; `prev` chains a writer's checkpoints as `prev_hash` chains its records, so that one deleted,
/// inserted or moved shows.
///
/// ```text
/// {"count":1000,"final":false,"head_hash":"…","head_seq":1000,"prev":"…","seq":1,
/// "signature":"…","time":"2026-11-24T17:10:04.123456Z","writer":"…"}
/// ```
///
/// `signature` is the Ed25519 signature, as 128 lowercase hex digits, of the canonical JSON of the
/// other eight members (the same text without `"signature":"…",`). The hash of a checkpoint, the next
/// one's `prev`, is `hex(sha256(canonical JSON with the signature))`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Checkpoint {
    /// Records in the chain up to the head, the head included. Chains number their records from 1
    /// without gaps, so this is `head_seq`; it is there so that a reader need not know that.
    pub count: u64,
    /// Written at shutdown (the sink closed or dropped): no record followed it at the time.
    #[serde(rename = "final")]
    pub is_final: bool,
    /// The `hash` of the record at `head_seq`, 64 lowercase hex digits.
    pub head_hash: String,
    /// The `seq` of the last record the checkpoint covers.
    pub head_seq: u64,
    /// The hash of the previous checkpoint of this writer; [`FIRST_PREV`] (64 `0`s) for its first.
    pub prev: String,
    /// The checkpoint's number in its writer's series, from 1.
    pub seq: u64,
    /// The Ed25519 signature, 128 lowercase hex digits, of the canonical JSON of the other members.
    pub signature: String,
    /// When it was signed, RFC 3339 UTC with microseconds (the writer's clock).
    pub time: String,
    /// The chain it is about: for a JSONL log, the hash of its first record.
    pub writer: String,
}

/// The members a signature covers, declared in sorted order so that serde_json writes them canonically.
#[derive(Serialize)]
struct Signed<'a> {
    count: u64,
    #[serde(rename = "final")]
    is_final: bool,
    head_hash: &'a str,
    head_seq: u64,
    prev: &'a str,
    seq: u64,
    time: &'a str,
    writer: &'a str,
}

impl Checkpoint {
    /// The bytes the signature is over: the canonical JSON of every member but `signature`.
    pub fn signed_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&Signed {
            count: self.count,
            is_final: self.is_final,
            head_hash: &self.head_hash,
            head_seq: self.head_seq,
            prev: &self.prev,
            seq: self.seq,
            time: &self.time,
            writer: &self.writer,
        })
        .expect("strings and integers serialize")
    }

    /// The canonical JSON of the whole checkpoint, as stored (without a newline).
    pub fn to_canonical_json(&self) -> String {
        serde_json::to_string(self).expect("strings and integers serialize")
    }

    /// Parses a stored checkpoint, refusing any text that is not its canonical JSON.
    pub fn from_canonical_json(text: &[u8]) -> Result<Checkpoint, String> {
        let checkpoint: Checkpoint = serde_json::from_slice(text).map_err(|e| e.to_string())?;
        if checkpoint.to_canonical_json().as_bytes() != text {
            return Err("not canonical JSON: the line was edited".into());
        }
        Ok(checkpoint)
    }

    /// The hash the next checkpoint of the writer names as its `prev`.
    pub fn hash(&self) -> String {
        hex(&Sha256::digest(self.to_canonical_json().as_bytes()))
    }

    /// Whether `key` signed it, as it is.
    pub fn signature_verifies(&self, key: &PublicKey) -> bool {
        key.verifies(&self.signed_bytes(), &self.signature)
    }
}

/// When a sink writes checkpoints, and with which key: every `every_records` records or every
/// `every_interval`, whichever comes first, and when it shuts down. The defaults: every 1,000 records or
/// 10 seconds.
///
/// Cloning it shares the key rather than copying the secret.
#[derive(Debug, Clone)]
#[must_use = "give it to a sink's builder"]
pub struct Checkpoints {
    key: Arc<SigningKey>,
    every_records: u64,
    every_interval: Duration,
}

impl Checkpoints {
    /// Checkpoints signed with `key`, at the default intervals.
    pub fn new(key: SigningKey) -> Checkpoints {
        Checkpoints {
            key: Arc::new(key),
            every_records: DEFAULT_EVERY_RECORDS,
            every_interval: DEFAULT_EVERY_INTERVAL,
        }
    }

    /// A checkpoint at least every `records` records; 0 is refused when the sink opens.
    pub fn every_records(mut self, records: u64) -> Checkpoints {
        self.every_records = records;
        self
    }

    /// A checkpoint at the first record written `interval` or more after the last one (a sink checks
    /// the time when it writes, so an idle log gets no checkpoint until its next record or its
    /// shutdown); zero is refused when the sink opens.
    pub fn every_interval(mut self, interval: Duration) -> Checkpoints {
        self.every_interval = interval;
        self
    }

    /// The public key that verifies the checkpoints.
    pub fn public_key(&self) -> PublicKey {
        self.key.public_key()
    }

    /// The policy's records between checkpoints.
    pub fn records_between(&self) -> u64 {
        self.every_records
    }

    /// The policy's time between checkpoints.
    pub fn interval(&self) -> Duration {
        self.every_interval
    }

    /// Refuses a policy that would checkpoint without end; an error of kind
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) that says which setting.
    pub(crate) fn check(&self) -> io::Result<()> {
        let refuse = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("checkpoints: {what} must be more than zero"),
            )
        };
        if self.every_records == 0 {
            return Err(refuse("every_records"));
        }
        if self.every_interval.is_zero() {
            return Err(refuse("every_interval"));
        }
        Ok(())
    }
}

/// Signs the checkpoints of one writer's chain, continuing its series.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    policy: Checkpoints,
    writer: String,
    next_seq: u64,
    prev: String,
    last_head_seq: u64,
    last_at: Instant,
}

impl Checkpointer {
    /// Starts a writer's series, or continues it after `last`, its last checkpoint (which the caller has
    /// verified).
    pub(crate) fn new(
        policy: &Checkpoints,
        writer: impl Into<String>,
        last: Option<&Checkpoint>,
    ) -> Checkpointer {
        Checkpointer {
            policy: policy.clone(),
            writer: writer.into(),
            next_seq: last.map_or(1, |c| c.seq + 1),
            prev: last.map_or_else(|| FIRST_PREV.to_owned(), Checkpoint::hash),
            last_head_seq: last.map_or(0, |c| c.head_seq),
            last_at: Instant::now(),
        }
    }

    /// The `head_seq` of the last checkpoint signed (or continued from); 0 before the first.
    pub(crate) fn last_head_seq(&self) -> u64 {
        self.last_head_seq
    }

    /// Whether a checkpoint is due, with `records_since_last` records written since the last one.
    pub(crate) fn due(&self, records_since_last: u64, now: Instant) -> bool {
        records_since_last >= self.policy.every_records
            || (records_since_last > 0
                && now.saturating_duration_since(self.last_at) >= self.policy.every_interval)
    }

    /// Signs a checkpoint over the chain's head. The caller stores it before it acknowledges anything
    /// that depends on it, and only over records that are stored: a checkpoint names no record that
    /// could still be lost.
    pub(crate) fn sign(
        &mut self,
        head_seq: u64,
        head_hash: &str,
        count: u64,
        is_final: bool,
    ) -> Checkpoint {
        let mut checkpoint = Checkpoint {
            count,
            is_final,
            head_hash: head_hash.to_owned(),
            head_seq,
            prev: self.prev.clone(),
            seq: self.next_seq,
            signature: String::new(),
            time: now_rfc3339(),
            writer: self.writer.clone(),
        };
        checkpoint.signature = self.policy.key.sign(&checkpoint.signed_bytes());
        self.prev = checkpoint.hash();
        self.next_seq += 1;
        self.last_head_seq = head_seq;
        self.last_at = Instant::now();
        checkpoint
    }
}

/// What [`verify_checkpoints`] found in a writer's checkpoints, checked against its chain of records.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointReport {
    /// The writer whose chain was checked.
    pub writer: String,
    /// How many checkpoints were given (stored lines, for a JSONL sidecar).
    pub checkpoints: u64,
    /// How many of them verified with no problem.
    pub verified: u64,
    /// Every problem found, in the order of the checkpoints.
    pub problems: Vec<CheckpointProblem>,
    /// The `seq` of the last record of the chain that was checked (the end of the log that verified).
    pub chain_last_seq: u64,
    /// The `head_seq` of the last checkpoint that verified: every record up to it is as signed.
    pub covered_through: u64,
    /// The last checkpoint given, if it verified.
    pub last: Option<Checkpoint>,
    /// After the checkpoints, the store held an incomplete one (a JSONL line without its newline: a
    /// write cut short by a crash), left out. The records are synced before a checkpoint is written, so
    /// a crash there loses no record; it may hide a `final` checkpoint, as cutting the file there would.
    pub torn_tail: bool,
}

/// One problem with one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointProblem {
    /// The checkpoint's position in the series as given, from 1 (its line in a JSONL sidecar).
    pub position: u64,
    /// The checkpoint's own `seq`, if it could be read.
    pub seq: Option<u64>,
    /// What is wrong.
    pub kind: ProblemKind,
}

/// What is wrong with a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The stored text is not a checkpoint in canonical JSON (the parser's message).
    Unreadable(String),
    /// The signature does not verify with the public key: the checkpoint was forged or changed, or the
    /// key is not the writer's.
    BadSignature,
    /// The checkpoint is about another chain: copied from another writer's series.
    OtherWriter {
        /// The writer it names.
        writer: String,
    },
    /// Its `prev` or its `seq` does not follow the checkpoint before it: a checkpoint was deleted,
    /// inserted or moved.
    BrokenSeries {
        /// The `seq` that should follow.
        expected_seq: u64,
    },
    /// It contradicts itself or the one before it (a count that is not its head's seq, a head before
    /// the previous checkpoint's): only the key's holder could have signed it.
    Inconsistent(&'static str),
    /// The chain's record at `head_seq` has another hash: the log was rewritten, even if its own hashes
    /// were recomputed.
    HeadMismatch {
        /// The record's seq.
        head_seq: u64,
    },
    /// The chain ends before the checkpoint's head: records it covers were cut from the log.
    BeyondEnd {
        /// The checkpoint's head.
        head_seq: u64,
    },
    /// The log's chain breaks before the checkpoint's head: records it signed are still there but do
    /// not verify, so they were edited (changed, deleted, inserted or reordered), not cut.
    /// [`verify_signed_file`](crate::audit::verify_signed_file) reports this where the log's report
    /// has a [`broken`](crate::audit::VerifyReport::broken) record, rather than
    /// [`BeyondEnd`](ProblemKind::BeyondEnd).
    EditedBefore {
        /// The checkpoint's head.
        head_seq: u64,
        /// The `seq` of the last record that verifies, before the break.
        verified_through: u64,
    },
}

impl ProblemKind {
    /// Whether the problem is in the checkpoints themselves (forged, changed, copied from another writer,
    /// deleted, moved), rather than in the log they cover.
    pub fn is_in_checkpoints(&self) -> bool {
        !matches!(
            self,
            ProblemKind::HeadMismatch { .. }
                | ProblemKind::BeyondEnd { .. }
                | ProblemKind::EditedBefore { .. }
        )
    }
}

impl CheckpointReport {
    /// Records of the chain after the last checkpoint that verified: no signature covers them, so they
    /// could have been changed or cut off unseen.
    pub fn uncovered(&self) -> u64 {
        self.chain_last_seq.saturating_sub(self.covered_through)
    }

    /// Whether every checkpoint verified and covers the chain as it is. A chain no checkpoint covers
    /// has no problem to report: see [`signed_by_nothing`](CheckpointReport::signed_by_nothing).
    pub fn is_intact(&self) -> bool {
        self.problems.is_empty()
    }

    /// Whether the chain has records and no checkpoint that verified covers any of them: nothing signed
    /// shows that they were not rewritten whole, as an emptied checkpoint file leaves them. A log found
    /// so has not been verified by its key (`toolgate audit verify --public-key` fails it). A chain with
    /// no record is not: there is nothing to sign.
    pub fn signed_by_nothing(&self) -> bool {
        self.chain_last_seq > 0 && self.covered_through == 0
    }

    /// Whether a checkpoint itself is forged, changed, from another writer, or missing from the series.
    pub fn checkpoints_tampered(&self) -> bool {
        self.problems.iter().any(|p| p.kind.is_in_checkpoints())
    }

    /// Whether a signed checkpoint names a record hash the chain does not have: the log was rewritten.
    pub fn log_rewritten(&self) -> bool {
        self.problems
            .iter()
            .any(|p| matches!(p.kind, ProblemKind::HeadMismatch { .. }))
    }

    /// Whether a signed checkpoint covers records past the chain's end: the log was cut short.
    pub fn log_cut_short(&self) -> bool {
        self.problems
            .iter()
            .any(|p| matches!(p.kind, ProblemKind::BeyondEnd { .. }))
    }

    /// Whether a signed checkpoint covers records that are in the log but do not verify (its chain
    /// breaks before them): the log was edited there, not cut.
    pub fn log_edited(&self) -> bool {
        self.problems
            .iter()
            .any(|p| matches!(p.kind, ProblemKind::EditedBefore { .. }))
    }
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProblemKind::Unreadable(detail) => write!(f, "unreadable ({})", escaped(detail)),
            ProblemKind::BadSignature => f.write_str(
                "bad signature: forged or changed, or the public key is not the writer's",
            ),
            ProblemKind::OtherWriter { writer } => write!(
                f,
                "names another writer ({}): copied from another log's checkpoints",
                escaped(writer)
            ),
            ProblemKind::BrokenSeries { expected_seq } => write!(
                f,
                "does not follow the checkpoint before it (expected checkpoint seq {expected_seq}): \
                 a checkpoint was deleted, inserted or moved"
            ),
            ProblemKind::Inconsistent(what) => write!(f, "inconsistent: {what}"),
            ProblemKind::HeadMismatch { head_seq } => write!(
                f,
                "the log's record seq {head_seq} is not the one signed: the log was rewritten"
            ),
            ProblemKind::BeyondEnd { head_seq } => write!(
                f,
                "covers records up to seq {head_seq}, past the log's end: the log was cut short"
            ),
            ProblemKind::EditedBefore {
                head_seq,
                verified_through,
            } => write!(
                f,
                "covers records up to seq {head_seq}, but the log's chain breaks after seq \
                 {verified_through}: the last {} signed records do not match the checkpoint, so the \
                 log was edited there, not cut",
                head_seq.saturating_sub(*verified_through)
            ),
        }
    }
}

impl fmt::Display for CheckpointProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "checkpoint {}", self.position)?;
        if let Some(seq) = self.seq {
            write!(f, " (seq {seq})")?;
        }
        write!(f, ": {}", self.kind)
    }
}

impl fmt::Display for CheckpointReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = if !self.is_intact() {
            if self.checkpoints_tampered() {
                "CHECKPOINTS TAMPERED"
            } else if self.log_rewritten() {
                "LOG REWRITTEN"
            } else if self.log_edited() {
                "LOG EDITED"
            } else {
                "LOG CUT SHORT"
            }
        } else if self.signed_by_nothing() {
            "SIGNED BY NOTHING"
        } else if self.checkpoints == 0 {
            "NO CHECKPOINT"
        } else {
            "SIGNED"
        };
        writeln!(
            f,
            "{status}: {} of {} checkpoints verify with the public key",
            self.verified, self.checkpoints
        )?;
        for problem in &self.problems {
            writeln!(f, "{problem}")?;
        }
        if self.covered_through > 0 {
            writeln!(
                f,
                "signed: records 1 to {} of writer {}",
                self.covered_through,
                escaped(&self.writer)
            )?;
        }
        let uncovered = self.uncovered();
        if self.signed_by_nothing() {
            writeln!(
                f,
                "signed by nothing: no checkpoint that verifies covers the log's {uncovered} records \
                 (seq 1 to {}), which could have been rewritten whole unseen",
                self.chain_last_seq
            )?;
        } else if uncovered > 0 {
            writeln!(
                f,
                "not covered: {uncovered} records after the last signed checkpoint (seq {} to {}) could \
                 have been changed or cut off unseen",
                self.covered_through + 1,
                self.chain_last_seq
            )?;
        }
        match &self.last {
            Some(last) if last.is_final => writeln!(
                f,
                "the last checkpoint (seq {}, {}) is final: its writer shut down cleanly",
                last.seq,
                escaped(&last.time)
            )?,
            Some(last) => writeln!(
                f,
                "the last checkpoint (seq {}, {}) is not final: its writer is still running or \
                 crashed, or records and checkpoints after it were cut off",
                last.seq,
                escaped(&last.time)
            )?,
            None if self.checkpoints == 0 => writeln!(f, "there is no checkpoint")?,
            None => {}
        }
        if self.torn_tail {
            writeln!(
                f,
                "torn tail: an incomplete checkpoint follows the last one (a write cut short), ignored"
            )?;
        }
        Ok(())
    }
}

/// Checks `checkpoints`, in the order they were written, against the chain of records of `writer`.
///
/// `chain_last_seq` is the `seq` of the chain's last record (its records are numbered from 1 without
/// gaps and their own hash chain was verified: pass the end of what verified); `hash_at(seq)` gives the
/// hash of its record `seq` (64 lowercase hex digits), for any `seq` from 1 to `chain_last_seq`.
/// Only the checkpoints' heads are looked up.
pub fn verify_checkpoints(
    key: &PublicKey,
    writer: &str,
    checkpoints: &[Checkpoint],
    chain_last_seq: u64,
    mut hash_at: impl FnMut(u64) -> Option<String>,
) -> CheckpointReport {
    let mut verifier = SeriesVerifier::new(key, writer, chain_last_seq);
    for checkpoint in checkpoints {
        verifier.checkpoint(checkpoint, &mut hash_at);
    }
    verifier.finish()
}

/// Checks a series one checkpoint at a time; stored forms that hold unreadable entries feed them to
/// [`unreadable`](SeriesVerifier::unreadable).
pub(crate) struct SeriesVerifier<'k> {
    key: &'k PublicKey,
    report: CheckpointReport,
    expected_seq: u64,
    prev: String,
    last_head_seq: u64,
}

impl<'k> SeriesVerifier<'k> {
    pub(crate) fn new(key: &'k PublicKey, writer: &str, chain_last_seq: u64) -> SeriesVerifier<'k> {
        SeriesVerifier {
            key,
            report: CheckpointReport {
                writer: writer.to_owned(),
                checkpoints: 0,
                verified: 0,
                problems: Vec::new(),
                chain_last_seq,
                covered_through: 0,
                last: None,
                torn_tail: false,
            },
            expected_seq: 1,
            prev: FIRST_PREV.to_owned(),
            last_head_seq: 0,
        }
    }

    /// An entry that could not be read as a checkpoint: the series cannot be followed across it.
    pub(crate) fn unreadable(&mut self, detail: String) {
        self.report.checkpoints += 1;
        self.push(None, ProblemKind::Unreadable(detail));
        self.report.last = None;
        self.expected_seq += 1;
        // Nothing the next checkpoint names as its `prev` can be this entry's hash.
        self.prev.clear();
    }

    pub(crate) fn checkpoint(
        &mut self,
        checkpoint: &Checkpoint,
        hash_at: &mut impl FnMut(u64) -> Option<String>,
    ) {
        self.report.checkpoints += 1;
        let before = self.report.problems.len();
        let seq = Some(checkpoint.seq);
        if !checkpoint.signature_verifies(self.key) {
            self.push(seq, ProblemKind::BadSignature);
        }
        if checkpoint.writer != self.report.writer {
            self.push(
                seq,
                ProblemKind::OtherWriter {
                    writer: checkpoint.writer.clone(),
                },
            );
        }
        if checkpoint.seq != self.expected_seq || checkpoint.prev != self.prev {
            self.push(
                seq,
                ProblemKind::BrokenSeries {
                    expected_seq: self.expected_seq,
                },
            );
        }
        if checkpoint.count != checkpoint.head_seq {
            self.push(
                seq,
                ProblemKind::Inconsistent("its count is not its head's seq"),
            );
        } else if checkpoint.head_seq == 0 {
            self.push(seq, ProblemKind::Inconsistent("it covers no record"));
        } else if checkpoint.head_seq < self.last_head_seq {
            self.push(
                seq,
                ProblemKind::Inconsistent("its head is before the previous checkpoint's"),
            );
        }
        if checkpoint.head_seq > self.report.chain_last_seq {
            self.push(
                seq,
                ProblemKind::BeyondEnd {
                    head_seq: checkpoint.head_seq,
                },
            );
        } else if checkpoint.head_seq > 0
            && hash_at(checkpoint.head_seq).as_deref() != Some(checkpoint.head_hash.as_str())
        {
            self.push(
                seq,
                ProblemKind::HeadMismatch {
                    head_seq: checkpoint.head_seq,
                },
            );
        }
        // The series goes on from the checkpoint as stored, so that one bad entry is reported by itself
        // and the next, not by every checkpoint after it.
        self.expected_seq = checkpoint.seq.saturating_add(1);
        self.prev = checkpoint.hash();
        self.last_head_seq = self.last_head_seq.max(checkpoint.head_seq);
        if self.report.problems.len() == before {
            self.report.verified += 1;
            self.report.covered_through = self.report.covered_through.max(checkpoint.head_seq);
            self.report.last = Some(checkpoint.clone());
        } else {
            self.report.last = None;
        }
    }

    fn push(&mut self, seq: Option<u64>, kind: ProblemKind) {
        self.report.problems.push(CheckpointProblem {
            position: self.report.checkpoints,
            seq,
            kind,
        });
    }

    pub(crate) fn finish(self) -> CheckpointReport {
        self.report
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 15)]));
    }
    text
}

/// Lowercase hex only, the one form that is written, so that a signature has one spelling.
fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let value = |d: u8| match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = value(pair[0])? << 4 | value(pair[1])?;
    }
    Some(out)
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

fn in_file(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8410, section 10.3: the example private key; section 10.1: its public key (the pair
    /// checked with `openssl pkey -pubout`).
    const RFC_PRIVATE: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC
-----END PRIVATE KEY-----
";
    const RFC_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=
-----END PUBLIC KEY-----
";

    fn key() -> SigningKey {
        SigningKey::from_pkcs8_pem(RFC_PRIVATE).unwrap()
    }

    /// A fake chain's record hashes: record `seq` hashes to its number, spelled in 64 digits.
    fn hash_of(seq: u64) -> String {
        format!("{seq:064x}")
    }

    /// Checkpoints of writer `w` over a chain, at heads `heads`, the last one final.
    fn series(key: &SigningKey, heads: &[u64]) -> Vec<Checkpoint> {
        let mut signer = Checkpointer::new(&Checkpoints::new(clone(key)), "w", None);
        heads
            .iter()
            .enumerate()
            .map(|(i, &head)| signer.sign(head, &hash_of(head), head, i + 1 == heads.len()))
            .collect()
    }

    fn clone(key: &SigningKey) -> SigningKey {
        SigningKey(key.0.clone())
    }

    fn check(key: &PublicKey, checkpoints: &[Checkpoint], chain_last_seq: u64) -> CheckpointReport {
        verify_checkpoints(key, "w", checkpoints, chain_last_seq, |seq| {
            (1..=chain_last_seq).contains(&seq).then(|| hash_of(seq))
        })
    }

    fn kinds(report: &CheckpointReport) -> Vec<(u64, ProblemKind)> {
        report
            .problems
            .iter()
            .map(|p| (p.position, p.kind.clone()))
            .collect()
    }

    #[test]
    fn reads_the_standard_pem_files() {
        let key = key();
        let public = PublicKey::from_public_key_pem(RFC_PUBLIC).unwrap();
        assert_eq!(key.public_key(), public);
        assert_eq!(
            public.to_hex(),
            "19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1"
        );
        assert_eq!(public.to_public_key_pem(), RFC_PUBLIC);
        let pem = key.0.to_pkcs8_pem(LineEnding::LF).unwrap();
        assert_eq!(
            SigningKey::from_pkcs8_pem(&pem).unwrap().public_key(),
            public
        );
        let path = std::env::temp_dir().join(format!("toolgate-key-{}", std::process::id()));
        let _ = fs::remove_file(&path);
        key.write_pem_file(&path).unwrap();
        let written = fs::read_to_string(&path);
        let again = key.write_pem_file(&path).unwrap_err();
        fs::remove_file(&path).unwrap();
        assert_eq!(
            written.unwrap(),
            RFC_PRIVATE,
            "the form OpenSSL reads and writes"
        );
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        let err = SigningKey::from_pkcs8_pem(RFC_PUBLIC).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(PublicKey::from_public_key_pem(RFC_PRIVATE).is_err());
    }

    #[test]
    fn the_secret_is_never_shown() {
        let key = key();
        let shown = format!("{key:?} {:?}", Checkpoints::new(clone(&key)));
        let secret = hex(key.0.as_bytes());
        assert!(!shown.contains(&secret), "{shown}");
        assert!(!shown.contains("MC4CAQAw"), "{shown}");
        assert!(shown.contains(&key.public_key().to_hex()), "{shown}");
    }

    #[test]
    fn generated_keys_differ_and_sign() {
        let (a, b) = (
            SigningKey::generate().unwrap(),
            SigningKey::generate().unwrap(),
        );
        assert_ne!(a.public_key(), b.public_key());
        let signed = series(&a, &[3]);
        assert!(signed[0].signature_verifies(&a.public_key()));
        assert!(!signed[0].signature_verifies(&b.public_key()));
    }

    #[test]
    fn a_checkpoint_is_canonical_json_and_signs_every_other_member() {
        let checkpoint = series(&key(), &[7]).remove(0);
        let text = checkpoint.to_canonical_json();
        let members: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = members.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "count",
                "final",
                "head_hash",
                "head_seq",
                "prev",
                "seq",
                "signature",
                "time",
                "writer"
            ]
        );
        assert_eq!(serde_json::to_string(&members).unwrap(), text);
        assert_eq!(checkpoint.signature.len(), 128);
        let signature = format!(r#""signature":"{}","#, checkpoint.signature);
        assert_eq!(
            checkpoint.signed_bytes(),
            text.replace(&signature, "").into_bytes()
        );
        assert_eq!(checkpoint.prev, FIRST_PREV);
        assert_eq!(
            Checkpoint::from_canonical_json(text.as_bytes()).unwrap(),
            checkpoint
        );
        let spaced = text.replace(r#""count":"#, r#""count": "#);
        assert!(Checkpoint::from_canonical_json(spaced.as_bytes()).is_err());
        let extra = text.replace('{', r#"{"a":1,"#);
        assert!(Checkpoint::from_canonical_json(extra.as_bytes()).is_err());
    }

    #[test]
    fn a_signed_series_verifies_and_says_what_it_does_not_cover() {
        let key = key();
        let checkpoints = series(&key, &[3, 6, 9]);
        assert_eq!(checkpoints[1].prev, checkpoints[0].hash());
        assert_eq!(
            checkpoints.iter().map(|c| c.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let report = check(&key.public_key(), &checkpoints, 9);
        assert!(report.is_intact(), "{report}");
        assert_eq!(
            (report.verified, report.covered_through, report.uncovered()),
            (3, 9, 0)
        );
        assert!(report.to_string().contains("is final"), "{report}");

        let report = check(&key.public_key(), &[], 4);
        assert!(report.is_intact());
        assert!(report.signed_by_nothing());
        let text = report.to_string();
        assert!(text.starts_with("SIGNED BY NOTHING: 0 of 0"), "{text}");
        assert!(text.contains("signed by nothing: no checkpoint"), "{text}");
        assert!(text.contains("4 records (seq 1 to 4)"), "{text}");

        // A chain with no record has nothing to sign.
        let report = check(&key.public_key(), &[], 0);
        assert!(report.is_intact() && !report.signed_by_nothing());
        let text = report.to_string();
        assert!(text.starts_with("NO CHECKPOINT: 0 of 0"), "{text}");
        assert!(!text.contains("not covered"), "{text}");

        let report = check(&key.public_key(), &checkpoints[..2], 11);
        assert!(report.is_intact());
        assert_eq!(report.uncovered(), 5);
        let text = report.to_string();
        assert!(text.contains("not covered: 5 records"), "{text}");
        assert!(text.contains("is not final"), "{text}");
    }

    #[test]
    fn changed_forged_or_foreign_checkpoints_are_tampering() {
        let key = key();
        let public = key.public_key();
        let good = series(&key, &[3, 6, 9]);

        let mut flipped = good.clone();
        let last = flipped[1].signature.pop().unwrap();
        flipped[1]
            .signature
            .push(if last == '0' { '1' } else { '0' });
        let report = check(&public, &flipped, 9);
        assert!(report.checkpoints_tampered());
        // The next checkpoint's `prev` is the hash of the one signed, signature included.
        assert_eq!(
            kinds(&report),
            [
                (2, ProblemKind::BadSignature),
                (3, ProblemKind::BrokenSeries { expected_seq: 3 })
            ]
        );

        let mut edited = good.clone();
        edited[2].is_final = false;
        assert_eq!(
            kinds(&check(&public, &edited, 9)),
            [(3, ProblemKind::BadSignature)]
        );

        let other = SigningKey::generate().unwrap().public_key();
        let report = check(&other, &good, 9);
        assert_eq!(report.verified, 0);
        assert!(
            report
                .problems
                .iter()
                .all(|p| p.kind == ProblemKind::BadSignature)
        );

        let mut signer = Checkpointer::new(&Checkpoints::new(clone(&key)), "x", None);
        let mut replayed = good.clone();
        replayed[0] = signer.sign(3, &hash_of(3), 3, false);
        let report = check(&public, &replayed, 9);
        assert_eq!(
            kinds(&report)[0],
            (1, ProblemKind::OtherWriter { writer: "x".into() })
        );
        // The foreign checkpoint's hash is not the `prev` of the next one.
        assert_eq!(
            kinds(&report)[1],
            (2, ProblemKind::BrokenSeries { expected_seq: 2 })
        );
    }

    #[test]
    fn a_deleted_or_moved_checkpoint_breaks_the_series() {
        let key = key();
        let good = series(&key, &[2, 4, 6, 8]);
        let mut deleted = good.clone();
        deleted.remove(1);
        let report = check(&key.public_key(), &deleted, 8);
        assert_eq!(
            kinds(&report),
            [(2, ProblemKind::BrokenSeries { expected_seq: 2 })]
        );
        assert!(report.checkpoints_tampered());

        let mut swapped = good.clone();
        swapped.swap(1, 2);
        let report = check(&key.public_key(), &swapped, 8);
        assert!(report.checkpoints_tampered());
        assert!(kinds(&report).contains(&(2, ProblemKind::BrokenSeries { expected_seq: 2 })));

        let mut first_gone = good;
        first_gone.remove(0);
        assert_eq!(
            kinds(&check(&key.public_key(), &first_gone, 8))[0],
            (1, ProblemKind::BrokenSeries { expected_seq: 1 })
        );
    }

    #[test]
    fn a_rewritten_or_shortened_chain_shows_against_the_signed_heads() {
        let key = key();
        let public = key.public_key();
        let checkpoints = series(&key, &[3, 6]);
        let report = verify_checkpoints(&public, "w", &checkpoints, 6, |seq| {
            Some(if seq == 6 {
                "f".repeat(64)
            } else {
                hash_of(seq)
            })
        });
        assert_eq!(
            kinds(&report),
            [(2, ProblemKind::HeadMismatch { head_seq: 6 })]
        );
        assert!(report.log_rewritten() && !report.checkpoints_tampered());
        assert_eq!(report.covered_through, 3);

        let report = check(&public, &checkpoints, 5);
        assert_eq!(
            kinds(&report),
            [(2, ProblemKind::BeyondEnd { head_seq: 6 })]
        );
        assert!(report.log_cut_short() && !report.log_rewritten());
        assert!(report.to_string().starts_with("LOG CUT SHORT"), "{report}");
    }

    #[test]
    fn only_the_key_holder_can_sign_an_inconsistent_checkpoint_and_it_still_shows() {
        let key = key();
        let mut signer = Checkpointer::new(&Checkpoints::new(clone(&key)), "w", None);
        let wrong_count = signer.sign(4, &hash_of(4), 5, false);
        let backwards = signer.sign(2, &hash_of(2), 2, false);
        let report = check(&key.public_key(), &[wrong_count, backwards], 6);
        assert_eq!(
            kinds(&report),
            [
                (
                    1,
                    ProblemKind::Inconsistent("its count is not its head's seq")
                ),
                (
                    2,
                    ProblemKind::Inconsistent("its head is before the previous checkpoint's")
                )
            ]
        );
    }

    #[test]
    fn a_checkpoint_is_due_after_n_records_or_t_time_with_records() {
        let policy = Checkpoints::new(key())
            .every_records(3)
            .every_interval(Duration::from_secs(5));
        let signer = Checkpointer::new(&policy, "w", None);
        let now = Instant::now();
        assert!(!signer.due(2, now));
        assert!(signer.due(3, now));
        let later = now + Duration::from_secs(6);
        assert!(signer.due(1, later));
        assert!(!signer.due(0, later), "no record, no checkpoint");
    }

    #[test]
    fn a_continued_series_follows_its_last_checkpoint() {
        let key = key();
        let first = series(&key, &[3]);
        let mut signer = Checkpointer::new(&Checkpoints::new(clone(&key)), "w", first.last());
        assert_eq!(signer.last_head_seq(), 3);
        let next = signer.sign(5, &hash_of(5), 5, true);
        assert_eq!(
            (next.seq, next.prev.as_str()),
            (2, first[0].hash().as_str())
        );
        assert!(check(&key.public_key(), &[first[0].clone(), next], 5).is_intact());
    }

    #[test]
    fn zero_intervals_are_refused() {
        let err = Checkpoints::new(key())
            .every_records(0)
            .check()
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("every_records"), "{err}");
        let err = Checkpoints::new(key())
            .every_interval(Duration::ZERO)
            .check()
            .unwrap_err();
        assert!(err.to_string().contains("every_interval"), "{err}");
        assert!(Checkpoints::new(key()).check().is_ok());
    }

    #[test]
    fn signatures_are_lowercase_hex_only() {
        assert_eq!(unhex::<2>("0aff"), Some([10, 255]));
        assert_eq!(unhex::<2>("0AFF"), None);
        assert_eq!(unhex::<2>("0af"), None);
        assert_eq!(hex(&[10, 255]), "0aff");
    }
}
