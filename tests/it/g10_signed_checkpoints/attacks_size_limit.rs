//! Outside attacks where signed checkpoints meet a real fault: a file-size limit (`ulimit -f`) with
//! `SIGXFSZ` ignored, so that the kernel cuts a write short at the limit and fails the next one with
//! `EFBIG` instead of ending the process. The signer, the chain and the gate must all survive a write
//! cut in the middle of a line, in a child process that goes on calling tools.

#![cfg(feature = "checkpoints")]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::common::Scratch;
use toolgate::audit::{
    Checkpoints, Durability, JsonlSink, SigningKey, checkpoints_path, verify_signed_file,
};
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

/// The child's working folder; set only in a child run.
const CHILD_DIR: &str = "TOOLGATE_SIZE_LIMIT_DIR";
/// `buffered` or `fsync`: the child's sink's durability.
const CHILD_DURABILITY: &str = "TOOLGATE_SIZE_LIMIT_DURABILITY";

static APPENDED: AtomicU64 = AtomicU64::new(0);

/// Append an entry to a journal.
#[tool(risk = "LOW_WRITE", domain = "szl", record_arguments)]
fn append(n: u64, entry: String) -> Result<u64, Denied> {
    let _ = entry;
    APPENDED.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// Runs the child test `test` of this file under a file-size limit of 32 KiB with `SIGXFSZ` ignored,
/// in `dir`, its sink of `durability`; what the child printed after `@`.
fn run_limited(dir: &Path, durability: &str, test: &str) -> String {
    let script = r#"trap '' XFSZ; ulimit -f 64 && exec "$0" "$@""#;
    let output = Command::new("sh")
        .args(["-c", script])
        .arg(std::env::current_exe().unwrap())
        .args([
            &format!("g10_signed_checkpoints::attacks_size_limit::{test}"),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir)
        .env(CHILD_DURABILITY, durability)
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the child failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    stdout
        .lines()
        .filter_map(|l| l.split_once('@').map(|(_, said)| said.trim().to_owned()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD_DIR).map(PathBuf::from)
}

/// In the child: a signed log (a checkpoint every 4 records) of `durability`, 400 calls of 700-byte
/// records under the size limit; prints how many bodies ran, and how many after the first refusal.
#[test]
fn child_signs_past_a_size_limit() {
    let Some(dir) = child_dir() else { return };
    let durability = match std::env::var(CHILD_DURABILITY).as_deref() {
        Ok("buffered") => Durability::Buffered,
        _ => Durability::FsyncEach,
    };
    let key = SigningKey::read_pem_file(dir.join("key.pem")).unwrap();
    let log = dir.join("audit.jsonl");
    let sink = JsonlSink::builder(&log)
        .durability(durability)
        .checkpoints(Checkpoints::new(key).every_records(4))
        .open()
        .unwrap();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit(sink)
        .build()
        .unwrap();
    let entry = "e".repeat(700);
    let (mut ran, mut refused, mut after) = (0u64, 0u64, 0u64);
    for n in 0..400 {
        match gate.run(|| append(n, entry.clone())) {
            Ok(_) if refused > 0 => {
                ran += 1;
                after += 1;
            }
            Ok(_) => ran += 1,
            Err(denied) => {
                assert_eq!(denied.code(), DenialCode::AuditUnavailable, "{denied}");
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "the log never reached the size limit");
    assert_eq!(APPENDED.load(Ordering::SeqCst), ran);
    drop(gate);
    println!("@ran {ran} refused {refused} after {after}");
}

fn parse(said: &str, what: &str) -> u64 {
    let words: Vec<&str> = said.split_whitespace().collect();
    let at = words.iter().position(|w| *w == what).unwrap();
    words[at + 1].parse().unwrap()
}

/// Sets up a key and runs the child with `durability`; the log, the key and what the child said.
fn signed_past_a_limit(durability: &str) -> (Scratch, PathBuf, SigningKey, String) {
    let scratch = Scratch::new(&format!("size-limit-{durability}"));
    let key = SigningKey::generate().unwrap();
    key.write_pem_file(scratch.path("key.pem")).unwrap();
    let said = run_limited(scratch.dir(), durability, "child_signs_past_a_size_limit");
    let log = scratch.path("audit.jsonl");
    (scratch, log, key, said)
}

/// Guarantee 9 ("a failed write is cut off again, so a full disk never breaks the chain") and 10 ("a
/// checkpoint names only records synced to disk, so a crash never makes an intact log look cut") with
/// guarantee 8 ("the body runs only if that write succeeded"). Attack: a signed `FsyncEach` log whose
/// writes the kernel cuts short at a file-size limit (`EFBIG`, the line half written), while the
/// process goes on calling tools. Asserts: every call past the limit is refused `AUDIT_UNAVAILABLE`
/// and no body runs after the first refusal; the log verifies with no torn tail, holds an `enter` for
/// every body that ran, and its checkpoints verify with the public key.
#[test]
fn a10_40_a_signed_log_cut_short_by_a_file_size_limit_still_verifies_and_runs_nothing_unlogged() {
    let _serial = crate::common::serial();
    let (_scratch, log, key, said) = signed_past_a_limit("fsync");
    let (ran, after) = (parse(&said, "ran"), parse(&said, "after"));
    assert_eq!(after, 0, "a body ran after a refused write: {said}");
    let (chain, signed) =
        verify_signed_file(&log, checkpoints_path(&log), &key.public_key()).unwrap();
    assert!(chain.is_intact(), "{chain}");
    assert_eq!(chain.torn_tail, None, "{chain}");
    let text = fs::read_to_string(&log).unwrap();
    let enters = text
        .lines()
        .filter(|l| l.contains(r#""stage":"enter""#))
        .count() as u64;
    assert_eq!(enters, ran, "{said}");
    assert!(signed.is_intact(), "{signed}");
    assert!(
        signed.covered_through <= chain.records,
        "{signed} / {chain}"
    );
}

/// Guarantee 8's exception ("after a failed write of its buffer, every call is refused
/// `AUDIT_UNAVAILABLE` until a write succeeds") with guarantee 10 (a checkpoint names only records
/// synced to disk). Attack: a signed `Buffered` log under a file-size limit, whose batch write the
/// kernel cuts short (`EFBIG`), while calls go on. Asserts: no body runs after the first refusal (no
/// write can succeed past the limit), the log verifies without a torn tail and its checkpoints verify
/// with the public key, covering no record the log does not hold.
#[test]
fn a10_41_a_buffered_signed_log_past_a_file_size_limit_refuses_every_later_call_and_verifies() {
    let _serial = crate::common::serial();
    let (_scratch, log, key, said) = signed_past_a_limit("buffered");
    assert_eq!(
        parse(&said, "after"),
        0,
        "a body ran after a refused write: {said}"
    );
    let (chain, signed) =
        verify_signed_file(&log, checkpoints_path(&log), &key.public_key()).unwrap();
    assert!(chain.is_intact(), "{chain}");
    assert_eq!(chain.torn_tail, None, "{chain}");
    assert!(signed.is_intact(), "{signed}");
    assert!(
        signed.covered_through <= chain.records,
        "{signed} / {chain}"
    );
}
