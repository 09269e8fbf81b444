//! Signed checkpoints of a JSONL log: written by the sink, continued when it is opened again, and each
//! way of tampering with a signed log caught by `verify --public-key`.

#![cfg(feature = "checkpoints")]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::common::Scratch;
use toolgate::Mode;
use toolgate::audit::{
    AuditRecord, AuditSink, Checkpoint, Checkpoints, Durability, JsonlSink, PublicKey, SigningKey,
    Stage, checkpoints_path, verify_signed_file,
};

/// A key made once per test: generating one is cheap, and each test owns its keys.
fn key() -> SigningKey {
    SigningKey::generate().unwrap()
}

fn same_key(key: &SigningKey) -> SigningKey {
    let dir = Scratch::new(&format!("key-{}", key.public_key().to_hex()));
    key.write_pem_file(dir.path("k")).unwrap();
    SigningKey::read_pem_file(dir.path("k")).unwrap()
}

fn record(i: u64) -> AuditRecord {
    let mut record = AuditRecord::new(Stage::Enter, format!("tools.t{i}"), Mode::Shadow, 1);
    record.call = i;
    record
}

/// Opens `path` with checkpoints every `every` records and writes `records`.
fn write(
    path: &Path,
    key: &SigningKey,
    every: u64,
    records: impl IntoIterator<Item = u64>,
) -> JsonlSink {
    let sink = JsonlSink::builder(path)
        .checkpoints(Checkpoints::new(same_key(key)).every_records(every))
        .open()
        .unwrap();
    for i in records {
        sink.record(&record(i)).unwrap();
    }
    sink
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A log of `records` in a new scratch folder `name`, signed every `every` records by a new key: the
/// folder, the log's path and the key.
fn signed(
    name: &str,
    every: u64,
    records: impl IntoIterator<Item = u64>,
) -> (Scratch, PathBuf, SigningKey) {
    let dir = Scratch::new(name);
    let log = dir.path("audit.jsonl");
    let key = key();
    drop(write(&log, &key, every, records));
    (dir, log, key)
}

/// The sequence number, head and finality of each checkpoint of `series`.
fn heads(series: &[Checkpoint]) -> Vec<(u64, u64, bool)> {
    series
        .iter()
        .map(|c| (c.seq, c.head_seq, c.is_final))
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    fs::write(path, text).unwrap();
}

fn checkpoints(log: &Path) -> Vec<Checkpoint> {
    lines(&checkpoints_path(log))
        .iter()
        .map(|l| Checkpoint::from_canonical_json(l.as_bytes()).unwrap())
        .collect()
}

/// What an attacker without the key does: changes record `seq`'s `call`, then recomputes every hash
/// from it on with the public format (`hash = sha256(prev_hash ‖ line without hash)`).
fn rewrite_with_recomputed_hashes(log: &Path, seq: u64, call: u64) {
    let mut prev = "0".repeat(64);
    let mut out = Vec::new();
    for line in lines(log) {
        let mut fields: std::collections::BTreeMap<String, Value> =
            serde_json::from_str(&line).unwrap();
        if fields["seq"] == seq {
            fields.insert("call".into(), call.into());
        }
        fields.remove("hash");
        fields.insert("prev_hash".into(), prev.clone().into());
        let body = serde_json::to_string(&fields).unwrap();
        let mut hasher = Sha256::new();
        hasher.update(prev.as_bytes());
        hasher.update(body.as_bytes());
        let hash: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        fields.insert("hash".into(), hash.clone().into());
        out.push(serde_json::to_string(&fields).unwrap());
        prev = hash;
    }
    write_lines(log, &out);
}

#[test]
fn a_signed_log_has_its_checkpoints_beside_it_and_verifies() {
    let (_dir, log, key) = signed("signed", 3, 1..=10);
    let series = checkpoints(&log);
    assert_eq!(
        heads(&series),
        [(1, 3, false), (2, 6, false), (3, 9, false), (4, 10, true)]
    );
    let first_hash = serde_json::from_str::<Value>(&lines(&log)[0]).unwrap()["hash"].clone();
    assert!(
        series
            .iter()
            .all(|c| c.writer == first_hash && c.count == c.head_seq)
    );
    assert!(
        series
            .iter()
            .all(|c| c.signature_verifies(&key.public_key()))
    );

    let (chain, signed) =
        verify_signed_file(&log, checkpoints_path(&log), &key.public_key()).unwrap();
    assert!(chain.is_intact());
    assert!(signed.is_intact(), "{signed}");
    assert_eq!(
        (signed.verified, signed.covered_through, signed.uncovered()),
        (4, 10, 0)
    );
    assert!(signed.last.as_ref().unwrap().is_final);
}

#[test]
fn drop_and_close_write_a_final_checkpoint() {
    let (dir, log, key) = signed("final", 1_000, 1..=3);
    let series = checkpoints(&log);
    assert_eq!(series.len(), 1);
    assert_eq!((series[0].head_seq, series[0].is_final), (3, true));

    let closed = dir.path("closed.jsonl");
    write(&closed, &key, 2, 1..=4).close().unwrap();
    let series = checkpoints(&closed);
    // The checkpoint at 4 was due with record 4; closing adds the final one over the same head.
    let heads: Vec<(u64, bool)> = series.iter().map(|c| (c.head_seq, c.is_final)).collect();
    assert_eq!(heads, [(2, false), (4, false), (4, true)]);

    // An empty log has nothing to sign.
    let empty = dir.path("empty.jsonl");
    drop(write(&empty, &key, 2, []));
    assert_eq!(fs::read(checkpoints_path(&empty)).unwrap(), b"");
}

#[test]
fn time_makes_a_checkpoint_due_at_the_next_record() {
    let dir = Scratch::new("time");
    let log = dir.path("audit.jsonl");
    let sink = JsonlSink::builder(&log)
        .checkpoints(
            Checkpoints::new(key())
                .every_records(1_000)
                .every_interval(Duration::from_millis(50)),
        )
        .open()
        .unwrap();
    sink.record(&record(1)).unwrap();
    assert_eq!(checkpoints(&log).len(), 0);
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(
        checkpoints(&log).len(),
        0,
        "no thread writes one while idle"
    );
    sink.record(&record(2)).unwrap();
    let series = checkpoints(&log);
    assert_eq!((series.len(), series[0].head_seq), (1, 2));
    sink.flush().unwrap();
    assert_eq!(
        checkpoints(&log).len(),
        1,
        "flush adds none when nothing is uncovered"
    );
    sink.record(&record(3)).unwrap();
    sink.flush().unwrap();
    assert_eq!(checkpoints(&log)[1].head_seq, 3);
}

#[test]
fn a_reopened_log_continues_the_series_and_verifies() {
    let (_dir, log, key) = signed("reopen", 4, 1..=5);
    drop(write(&log, &key, 4, 6..=9));
    let series = checkpoints(&log);
    assert_eq!(
        heads(&series),
        [(1, 4, false), (2, 5, true), (3, 9, false), (4, 9, true)]
    );
    assert!(
        series
            .windows(2)
            .all(|w| w[1].prev == w[0].hash() && w[1].writer == w[0].writer)
    );
    let (_, signed) = verify_signed_file(&log, checkpoints_path(&log), &key.public_key()).unwrap();
    assert!(signed.is_intact(), "{signed}");

    // Reopened and closed with no new record: the last checkpoint already is final over the head.
    drop(write(&log, &key, 4, []));
    assert_eq!(checkpoints(&log).len(), 4);
    // Fewer records than make one due: closing covers them.
    drop(write(&log, &key, 4, 10..=11));
    let last = checkpoints(&log).pop().unwrap();
    assert_eq!((last.seq, last.head_seq, last.is_final), (5, 11, true));
    let (_, signed) = verify_signed_file(&log, checkpoints_path(&log), &key.public_key()).unwrap();
    assert!(signed.is_intact() && signed.uncovered() == 0, "{signed}");
}

#[test]
fn open_refuses_checkpoints_that_do_not_match_the_log() {
    let (_dir, log, key) = signed("refuse", 2, 1..=6);
    let open = |key: SigningKey| {
        JsonlSink::builder(&log)
            .checkpoints(Checkpoints::new(key))
            .open()
            .map(drop)
    };

    let err = open(SigningKey::generate().unwrap()).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    assert!(err.to_string().contains("bad signature"), "{err}");

    let log_bytes = fs::read(&log).unwrap();
    rewrite_with_recomputed_hashes(&log, 2, 99);
    let err = open(same_key(&key)).unwrap_err();
    assert!(err.to_string().contains("the log was rewritten"), "{err}");
    fs::write(&log, &log_bytes).unwrap();

    let sidecar = checkpoints_path(&log);
    let kept = fs::read(&sidecar).unwrap();
    fs::remove_file(&sidecar).unwrap();
    let err = open(same_key(&key)).unwrap_err();
    assert!(err.to_string().contains("create it empty"), "{err}");
    assert!(!sidecar.exists(), "a refused open creates nothing");

    // A checkpoint line cut short by a crash: refused, or cut off on request.
    let mut torn = kept.clone();
    torn.extend_from_slice(b"{\"count\":7");
    fs::write(&sidecar, &torn).unwrap();
    let err = open(same_key(&key)).unwrap_err();
    assert!(err.to_string().contains("torn tail"), "{err}");
    JsonlSink::builder(&log)
        .recover_torn_tail(true)
        .checkpoints(Checkpoints::new(same_key(&key)))
        .open()
        .unwrap();
    assert!(fs::read(&sidecar).unwrap().starts_with(&kept));
    let (_, signed) = verify_signed_file(&log, &sidecar, &key.public_key()).unwrap();
    assert!(signed.is_intact(), "{signed}");
}

#[test]
fn threads_recording_at_once_get_checkpoints_over_whole_records_only() {
    let dir = Scratch::new("threads");
    let log = dir.path("audit.jsonl");
    let key = key();
    for durability in [
        Durability::FsyncEach,
        Durability::Buffered,
        Durability::Flush,
    ] {
        let _ = fs::remove_file(&log);
        let _ = fs::remove_file(checkpoints_path(&log));
        let sink = JsonlSink::builder(&log)
            .durability(durability)
            .checkpoints(Checkpoints::new(same_key(&key)).every_records(7))
            .open()
            .unwrap();
        std::thread::scope(|scope| {
            for t in 0..4 {
                let sink = &sink;
                scope.spawn(move || {
                    for i in 0..40 {
                        sink.record(&record(t * 1_000 + i)).unwrap();
                    }
                });
            }
        });
        drop(sink);
        let (chain, signed) =
            verify_signed_file(&log, checkpoints_path(&log), &key.public_key()).unwrap();
        assert!(
            chain.is_intact() && chain.records == 160,
            "{durability:?}: {chain}"
        );
        assert!(signed.is_intact(), "{durability:?}: {signed}");
        assert_eq!(signed.covered_through, 160);
        let series = checkpoints(&log);
        // Buffered records stay in memory (160 small ones are under its 64 KiB) until the sink is
        // dropped: no checkpoint names them before they are written, so one final one covers them all.
        let expected = if durability == Durability::Buffered {
            1..=1
        } else {
            2..=usize::MAX
        };
        assert!(
            expected.contains(&series.len()),
            "{durability:?}: {}",
            series.len()
        );
        assert!(
            series
                .windows(2)
                .all(|w| w[1].head_seq > w[0].head_seq || w[1].is_final),
            "{durability:?}"
        );
    }
}

#[test]
fn a_policy_of_zero_is_refused() {
    let dir = Scratch::new("zero");
    let log = dir.path("audit.jsonl");
    for policy in [
        Checkpoints::new(key()).every_records(0),
        Checkpoints::new(key()).every_interval(Duration::ZERO),
    ] {
        let err = JsonlSink::builder(&log)
            .checkpoints(policy)
            .open()
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("must be more than zero"), "{err}");
    }
    assert!(!log.exists());
}

/// One way to change a signed log or its checkpoints.
#[derive(Debug, Clone)]
enum Mutation {
    /// Record `.0` changed and every hash after it recomputed.
    Rewrite(usize),
    /// Record `.0` changed, hashes left as they were.
    Edit(usize),
    /// The log cut to its first `.0` records.
    Truncate(usize),
    /// Checkpoint `.0` deleted.
    DeleteCheckpoint(usize),
    /// Checkpoints `.0` and the one after it swapped.
    SwapCheckpoints(usize),
    /// One hex digit of checkpoint `.0`'s signature changed.
    FlipSignature(usize),
    /// Checkpoint `.0`'s head moved one record back, its signature kept.
    MoveHead(usize),
    /// Checkpoint `.0`'s `final` flag flipped, its signature kept.
    FlipFinal(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let i = any::<prop::sample::Index>();
    prop_oneof![
        i.clone().prop_map(|i| Mutation::Rewrite(i.index(1 << 16))),
        i.clone().prop_map(|i| Mutation::Edit(i.index(1 << 16))),
        i.clone().prop_map(|i| Mutation::Truncate(i.index(1 << 16))),
        i.clone()
            .prop_map(|i| Mutation::DeleteCheckpoint(i.index(1 << 16))),
        i.clone()
            .prop_map(|i| Mutation::SwapCheckpoints(i.index(1 << 16))),
        i.clone()
            .prop_map(|i| Mutation::FlipSignature(i.index(1 << 16))),
        i.clone().prop_map(|i| Mutation::MoveHead(i.index(1 << 16))),
        i.prop_map(|i| Mutation::FlipFinal(i.index(1 << 16))),
    ]
}

/// Applies `mutation` to a log of `n` records and its `c` checkpoints; `false` when it changes nothing
/// (a swap with nothing after it, a cut that keeps every record).
fn apply(log: &Path, mutation: &Mutation, n: usize) -> bool {
    let sidecar = checkpoints_path(log);
    let mut series = lines(&sidecar);
    let c = series.len();
    let mut edit_checkpoint =
        |at: usize, change: &dyn Fn(&mut std::collections::BTreeMap<String, Value>)| {
            let mut fields: std::collections::BTreeMap<String, Value> =
                serde_json::from_str(&series[at]).unwrap();
            change(&mut fields);
            series[at] = serde_json::to_string(&fields).unwrap();
            write_lines(&sidecar, &series);
        };
    match *mutation {
        Mutation::Rewrite(i) => rewrite_with_recomputed_hashes(log, (i % n) as u64 + 1, 1 << 40),
        Mutation::Edit(i) => {
            let mut records = lines(log);
            records[i % n] = records[i % n].replace("\"call\":", "\"call\":1");
            write_lines(log, &records);
        }
        Mutation::Truncate(i) => {
            let records = lines(log);
            write_lines(log, &records[..i % n]);
        }
        Mutation::DeleteCheckpoint(i) => {
            series.remove(i % c);
            write_lines(&sidecar, &series);
        }
        Mutation::SwapCheckpoints(i) => {
            if c < 2 {
                return false;
            }
            series.swap(i % (c - 1), i % (c - 1) + 1);
            write_lines(&sidecar, &series);
        }
        Mutation::FlipSignature(i) => edit_checkpoint(i % c, &|fields| {
            let signature = fields["signature"].as_str().unwrap();
            let first = if signature.starts_with('0') { "1" } else { "0" };
            fields.insert(
                "signature".into(),
                format!("{first}{}", &signature[1..]).into(),
            );
        }),
        Mutation::MoveHead(i) => edit_checkpoint(i % c, &|fields| {
            let head = fields["head_seq"].as_u64().unwrap();
            fields.insert("head_seq".into(), (head - 1).into());
            fields.insert("count".into(), (head - 1).into());
        }),
        Mutation::FlipFinal(i) => edit_checkpoint(i % c, &|fields| {
            let is_final = fields["final"].as_bool().unwrap();
            fields.insert("final".into(), (!is_final).into());
        }),
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Every record is covered (the sink is dropped, so the last checkpoint is final): any change to
    /// a record or a checkpoint shows, in the chain or in the checkpoints.
    #[test]
    fn every_change_to_a_covered_record_or_a_checkpoint_is_caught(
        n in 1usize..24,
        every in 1u64..6,
        mutation in mutation(),
    ) {
        let dir = Scratch::new("prop");
        let log = dir.path("audit.jsonl");
        let key = key();
        drop(write(&log, &key, every, 1..=n as u64));
        prop_assume!(apply(&log, &mutation, n));
        let (chain, signed) =
            verify_signed_file(&log, checkpoints_path(&log), &key.public_key()).unwrap();
        // The last checkpoint is the final one: deleted, its absence is what shows.
        let final_missing = !signed.last.as_ref().is_some_and(|c| c.is_final);
        prop_assert!(
            !chain.is_intact() || !signed.is_intact() || final_missing,
            "{mutation:?} not caught:\n{chain}{signed}"
        );
        let c = lines(&checkpoints_path(&log)).len() + 1;
        match mutation {
            Mutation::DeleteCheckpoint(i) if i % c == c - 1 => {
                prop_assert!(signed.is_intact() && final_missing, "{signed}")
            }
            Mutation::Rewrite(_) => prop_assert!(signed.log_rewritten() && chain.is_intact()),
            Mutation::Truncate(_) => prop_assert!(signed.log_cut_short() && chain.is_intact()),
            Mutation::DeleteCheckpoint(_) | Mutation::SwapCheckpoints(_)
            | Mutation::FlipSignature(_) | Mutation::MoveHead(_) | Mutation::FlipFinal(_) => {
                prop_assert!(signed.checkpoints_tampered(), "{signed}")
            }
            Mutation::Edit(_) => prop_assert!(!chain.is_intact()),
        }
    }
}

#[cfg(feature = "cli")]
mod cli {
    use super::*;
    use crate::fixtures::support::{assert_text, exited, toolgate_command as toolgate};

    /// A log of 10 records signed every 3 by a key made with `toolgate audit keygen`; the paths of the
    /// `signed_log` named `audit.jsonl` in a new scratch folder `name`: the folder, the log and the
    /// public key.
    fn signed_log_in(name: &str) -> (Scratch, PathBuf, PathBuf) {
        let dir = Scratch::new(name);
        let (log, public) = signed_log(&dir, "audit.jsonl");
        (dir, log, public)
    }

    /// log and the public key.
    fn signed_log(dir: &Scratch, name: &str) -> (PathBuf, PathBuf) {
        let key_path = dir.path("key.pem");
        if !key_path.exists() {
            exited(
                0,
                toolgate(&["audit", "keygen", "--out", key_path.to_str().unwrap()]),
            );
        }
        let key = SigningKey::read_pem_file(&key_path).unwrap();
        let log = dir.path(name);
        drop(write(&log, &key, 3, 1..=10));
        (log, dir.path("key.pem.pub"))
    }

    fn verify(log: &Path, public: &Path) -> (i32, String, String) {
        toolgate(&[
            "audit",
            "verify",
            log.to_str().unwrap(),
            "--public-key",
            public.to_str().unwrap(),
        ])
    }

    #[test]
    fn keygen_writes_a_private_key_for_the_owner_alone_and_its_public_key() {
        let (dir, log, public) = signed_log_in("keygen");
        let private = dir.path("key.pem");
        assert!(
            fs::read_to_string(&private)
                .unwrap()
                .starts_with("-----BEGIN PRIVATE KEY-----\n")
        );
        assert!(
            fs::read_to_string(&public)
                .unwrap()
                .starts_with("-----BEGIN PUBLIC KEY-----\n")
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                fs::metadata(&private).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        assert_eq!(
            PublicKey::read_pem_file(&public).unwrap(),
            SigningKey::read_pem_file(&private).unwrap().public_key()
        );
        let (code, _, stderr) = toolgate(&["audit", "keygen", "--out", private.to_str().unwrap()]);
        assert_eq!(code, 3, "never overwrites a key");
        assert!(stderr.contains("exists already"), "{stderr}");
        exited(0, verify(&log, &public));
    }

    #[test]
    fn a_signed_log_exits_0_and_says_what_is_covered() {
        let (dir, log, public) = signed_log_in("cli-signed");
        let (stdout, _) = exited(0, verify(&log, &public));
        assert_text(
            &stdout,
            Some("INTACT: 10 of 10 lines verify\n"),
            &[
                "SIGNED: 4 of 4 checkpoints verify with the public key",
                "signed: records 1 to 10 of writer ",
                "is final: its writer shut down cleanly",
            ],
        );
        assert!(!stdout.contains("not covered"), "{stdout}");

        // `--checkpoints` names the file when it is elsewhere; `--expect-last` still applies.
        let moved = dir.path("elsewhere.checkpoints");
        fs::rename(checkpoints_path(&log), &moved).unwrap();
        let (code, _, stderr) = verify(&log, &public);
        assert_eq!(code, 3, "no checkpoint file: {stderr}");
        let file = log.to_str().unwrap();
        let (pubkey, sidecar) = (public.to_str().unwrap(), moved.to_str().unwrap());
        let args = [
            "audit",
            "verify",
            file,
            "--public-key",
            pubkey,
            "--checkpoints",
            sidecar,
        ];
        assert_eq!(toolgate(&args).0, 0);
        let wrong_last = ["--expect-last", &"0".repeat(64)];
        assert_eq!(toolgate(&[&args[..], &wrong_last[..]].concat()).0, 4);
    }

    #[test]
    fn a_log_rolled_back_with_its_checkpoints_and_torn_exits_4_against_the_expected_last_hash() {
        let dir = Scratch::new("cli-rolled-back-torn");
        let key_path = dir.path("key.pem");
        exited(
            0,
            toolgate(&["audit", "keygen", "--out", key_path.to_str().unwrap()]),
        );
        let key = SigningKey::read_pem_file(&key_path).unwrap();
        let public = dir.path("key.pem.pub");
        let log = dir.path("audit.jsonl");
        // A copy of the log and its checkpoints as they stood after 6 records, both final.
        drop(write(&log, &key, 3, 1..=6));
        let old_log = fs::read(&log).unwrap();
        let old_checkpoints = fs::read(checkpoints_path(&log)).unwrap();
        drop(write(&log, &key, 3, 7..=10));
        let (stdout, _) = exited(0, verify(&log, &public));
        let last = stdout
            .lines()
            .find_map(|l| l.strip_prefix("last intact record: seq 10, hash "))
            .unwrap()
            .to_owned();

        // Both rolled back together, and a few bytes appended to the log without a newline.
        let mut torn = old_log;
        torn.extend_from_slice(b"{\"agent\":");
        fs::write(&log, torn).unwrap();
        fs::write(checkpoints_path(&log), old_checkpoints).unwrap();
        let (code, stdout, _) = verify(&log, &public);
        assert_eq!(
            code, 2,
            "without the expected hash, only the torn tail shows: {stdout}"
        );
        let mut args = vec![
            "audit",
            "verify",
            log.to_str().unwrap(),
            "--public-key",
            public.to_str().unwrap(),
        ];
        args.extend(["--expect-last", &last]);
        let (stdout, _) = exited(4, toolgate(&args));
        assert!(stdout.starts_with("CUT: "), "{stdout}");
    }

    #[test]
    fn what_a_checkpoint_file_says_is_shown_escaped() {
        let (_dir, log, public) = signed_log_in("cli-hidden");
        let mut sidecar = fs::read_to_string(checkpoints_path(&log)).unwrap();
        let hidden = crate::audit_cli::hidden_text();
        sidecar.push_str(&format!(
            "{{{}:1}}",
            serde_json::to_string(&hidden).unwrap()
        ));
        sidecar.push('\n');
        fs::write(checkpoints_path(&log), sidecar).unwrap();
        let (stdout, _) = exited(5, verify(&log, &public));
        assert!(stdout.contains("unreadable (unknown field"), "{stdout}");
        crate::audit_cli::assert_shown_escaped(&stdout);
    }

    #[test]
    fn records_after_the_last_checkpoint_are_reported_as_not_covered() {
        let dir = Scratch::new("cli-uncovered");
        let key = key();
        let log = dir.path("audit.jsonl");
        // A writer that stops without closing (a crash): records 9 and 10 come after its last checkpoint.
        std::mem::forget(write(&log, &key, 4, 1..=10));
        let public = dir.path("pub.pem");
        fs::write(&public, key.public_key().to_public_key_pem()).unwrap();
        let (stdout, _) = exited(0, verify(&log, &public));
        assert!(
            stdout
                .contains("not covered: 2 records after the last signed checkpoint (seq 9 to 10)"),
            "{stdout}"
        );
        assert!(stdout.contains("is not final"), "{stdout}");

        // The honest limit: those two can be cut off unseen.
        let records = lines(&log);
        write_lines(&log, &records[..8]);
        let (stdout, _) = exited(0, verify(&log, &public));
        assert!(stdout.contains("is not final"), "{stdout}");
    }

    #[test]
    fn a_changed_record_with_every_hash_recomputed_exits_6() {
        let (_dir, log, public) = signed_log_in("cli-rewritten");
        rewrite_with_recomputed_hashes(&log, 5, 7);
        let plain = toolgate(&["audit", "verify", log.to_str().unwrap()]);
        assert_eq!(plain.0, 0, "the chain alone cannot see it: {}", plain.1);
        let (stdout, _) = exited(6, verify(&log, &public));
        assert_text(
            &stdout,
            None,
            &[
                "LOG REWRITTEN",
                "checkpoint 2 (seq 2): the log's record seq 6 is not the one signed",
            ],
        );
    }

    #[test]
    fn a_log_cut_before_its_last_checkpoint_exits_7() {
        let (_dir, log, public) = signed_log_in("cli-cut");
        let records = lines(&log);
        write_lines(&log, &records[..7]);
        let (stdout, _) = exited(7, verify(&log, &public));
        assert_text(
            &stdout,
            None,
            &[
                "LOG CUT SHORT",
                "covers records up to seq 9, past the log's end",
            ],
        );
    }

    #[test]
    fn a_log_whose_last_records_were_edited_says_edited_not_cut() {
        let (_dir, log, public) = signed_log_in("cli-edited-tail");
        let mut records = lines(&log);
        for line in &mut records[8..] {
            let mut fields: Value = serde_json::from_str(line).unwrap();
            fields["tool"] = "tools.innocent".into();
            *line = serde_json::to_string(&fields).unwrap();
        }
        write_lines(&log, &records);
        let (code, stdout, _) = verify(&log, &public);
        assert_eq!(code, 1, "the chain is broken: {stdout}");
        assert!(stdout.contains("LOG EDITED"), "{stdout}");
        assert!(!stdout.contains("CUT SHORT"), "{stdout}");
        assert!(
            stdout.contains(
                "covers records up to seq 10, but the log's chain breaks after seq 8: the last 2 \
                 signed records do not match the checkpoint, so the log was edited there, not cut"
            ),
            "{stdout}"
        );

        // Cut instead: what was signed is gone, not changed.
        let (_dir, log, public) = signed_log_in("cli-cut-tail");
        let records = lines(&log);
        write_lines(&log, &records[..8]);
        let (stdout, _) = exited(7, verify(&log, &public));
        assert!(stdout.contains("LOG CUT SHORT"), "{stdout}");
        assert!(!stdout.contains("EDITED"), "{stdout}");
    }

    #[test]
    fn a_checkpoint_from_another_writer_exits_5() {
        let dir = Scratch::new("cli-replayed");
        let (log, public) = signed_log(&dir, "a.jsonl");
        let (other, _) = signed_log(&dir, "b.jsonl");
        let mut series = lines(&checkpoints_path(&log));
        series[1] = lines(&checkpoints_path(&other))[1].clone();
        write_lines(&checkpoints_path(&log), &series);
        let (stdout, _) = exited(5, verify(&log, &public));
        assert_text(
            &stdout,
            None,
            &[
                "CHECKPOINTS TAMPERED",
                "checkpoint 2 (seq 2): names another writer",
            ],
        );
    }

    #[test]
    fn a_checkpoint_deleted_from_the_middle_exits_5() {
        let (_dir, log, public) = signed_log_in("cli-deleted");
        let mut series = lines(&checkpoints_path(&log));
        series.remove(1);
        write_lines(&checkpoints_path(&log), &series);
        let (stdout, _) = exited(5, verify(&log, &public));
        assert_text(
            &stdout,
            None,
            &["checkpoint 2 (seq 3): does not follow the checkpoint before it"],
        );
    }

    #[test]
    fn a_wrong_public_key_or_a_flipped_signature_exits_5() {
        let (dir, log, public) = signed_log_in("cli-signature");
        let stranger = dir.path("stranger.pem");
        fs::write(&stranger, key().public_key().to_public_key_pem()).unwrap();
        let (stdout, _) = exited(5, verify(&log, &stranger));
        assert_text(
            &stdout,
            None,
            &["0 of 4 checkpoints verify", "bad signature"],
        );

        let mut series = lines(&checkpoints_path(&log));
        let at = series[2].find("\"signature\":\"").unwrap() + 13;
        let digit = if &series[2][at..=at] == "a" { "b" } else { "a" };
        series[2].replace_range(at..=at, digit);
        write_lines(&checkpoints_path(&log), &series);
        let (stdout, _) = exited(5, verify(&log, &public));
        assert_text(&stdout, None, &["checkpoint 3 (seq 3): bad signature"]);

        let (code, _, stderr) = verify(&log, &log);
        assert_eq!(code, 3, "a log is not a key: {stderr}");
    }

    #[test]
    fn a_checkpoint_line_cut_short_exits_2_not_as_tampering() {
        let (_dir, log, public) = signed_log_in("cli-torn");
        let sidecar = checkpoints_path(&log);
        let bytes = fs::read(&sidecar).unwrap();
        fs::write(&sidecar, &bytes[..bytes.len() - 40]).unwrap();
        let (stdout, _) = exited(2, verify(&log, &public));
        assert_text(
            &stdout,
            None,
            &[
                "SIGNED: 3 of 3 checkpoints verify",
                "torn tail: an incomplete checkpoint",
            ],
        );
        assert!(
            stdout.contains("is not final"),
            "the final one is what was torn: {stdout}"
        );
    }

    /// With the key, a log whose records no checkpoint covers is signed by nothing and fails (9),
    /// whatever emptied its checkpoint file; 3, 1, 4 still come first; a log with no record has
    /// nothing to sign and verifies.
    #[test]
    fn a_log_no_checkpoint_covers_exits_9_and_one_with_no_record_exits_0() {
        let (_dir, log, public) = signed_log_in("cli-signed-by-nothing");
        let sidecar = checkpoints_path(&log);
        let signed = fs::read(&sidecar).unwrap();
        let records = lines(&log);

        // Emptied, or holding only a torn first checkpoint.
        for (what, left) in [("emptied", &b""[..]), ("torn", &signed[..40])] {
            fs::write(&sidecar, left).unwrap();
            let (stdout, _) = exited(9, verify(&log, &public));
            assert_text(
                &stdout,
                None,
                &[
                    "SIGNED BY NOTHING: 0 of 0 checkpoints verify",
                    "signed by nothing: no checkpoint that verifies covers the log's 10 records \
                     (seq 1 to 10)",
                ],
            );
            assert!(!stdout.contains("not covered"), "{what}: {stdout}");
        }
        fs::write(&sidecar, "").unwrap();

        // A torn last line of the log does not hide it: 9 before 2.
        let mut torn = fs::read(&log).unwrap();
        torn.extend_from_slice(b"{\"agent\":");
        fs::write(&log, &torn).unwrap();
        exited(9, verify(&log, &public));

        // A broken chain (1) and a cut the expected hash shows (4) come first.
        let mut broken = records.clone();
        broken.swap(3, 4);
        write_lines(&log, &broken);
        exited(1, verify(&log, &public));
        write_lines(&log, &records);
        let mut args = vec![
            "audit",
            "verify",
            log.to_str().unwrap(),
            "--public-key",
            public.to_str().unwrap(),
        ];
        let wrong_last = "0".repeat(64);
        args.extend(["--expect-last", &wrong_last]);
        exited(4, toolgate(&args));

        // No checkpoint file at all cannot be read (3).
        fs::remove_file(&sidecar).unwrap();
        exited(3, verify(&log, &public));

        // A log with no record, and an empty checkpoint file: nothing to sign.
        fs::write(&log, "").unwrap();
        fs::write(&sidecar, "").unwrap();
        let (stdout, _) = exited(0, verify(&log, &public));
        assert_text(
            &stdout,
            None,
            &[
                "NO CHECKPOINT: 0 of 0 checkpoints verify",
                "there is no checkpoint",
            ],
        );
        assert!(!stdout.contains("signed by nothing"), "{stdout}");

        // The signed log as written verifies.
        write_lines(&log, &records);
        fs::write(&sidecar, &signed).unwrap();
        exited(0, verify(&log, &public));
    }

    #[test]
    fn verify_without_a_public_key_says_the_checkpoints_were_not_checked() {
        let dir = Scratch::new("cli-unchecked");
        let (log, _) = signed_log(&dir, "audit.jsonl");
        let (stdout, _) = exited(0, toolgate(&["audit", "verify", log.to_str().unwrap()]));
        assert_text(
            &stdout,
            None,
            &["holds signed checkpoints of this log, not checked"],
        );
        let (help, _) = exited(0, toolgate(&["audit", "verify", "--help"]));
        for status in [
            "5   with --public-key: a checkpoint is forged",
            "6   with --public-key: the log was rewritten",
            "7   with --public-key: the log was cut short",
        ] {
            assert!(help.contains(status), "{help}");
        }
        let (code, _, _) = toolgate(&["audit", "verify", "x", "--checkpoints", "y"]);
        assert_eq!(code, 64, "--checkpoints needs --public-key");
    }
}

static SIGNED_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Restart a service.
#[toolgate::tool(risk = "READ_ONLY", domain = "signed")]
fn restart(service: String) -> Result<(), toolgate::Denied> {
    let _ = service;
    SIGNED_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

#[test]
fn a_sink_two_gates_share_is_closed_on_shutdown_with_its_final_checkpoint() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    let dir = Scratch::new("shared-close");
    let log = dir.path("audit.jsonl");
    let key = key();
    let sink = Arc::new(
        JsonlSink::builder(&log)
            .checkpoints(Checkpoints::new(same_key(&key)).every_records(3))
            .open()
            .unwrap(),
    );
    let gate = |principal: &str| {
        toolgate::Gate::builder()
            .mode(Mode::Shadow)
            .principal(principal)
            .audit_shared(sink.clone())
            .build()
            .unwrap()
    };
    let (alice, bob) = (gate("alice"), gate("bob"));
    alice.run(|| restart("web".into())).unwrap();
    bob.run(|| restart("db".into())).unwrap();

    // Shutdown: both gates still hold the sink.
    sink.close_shared().unwrap();
    let (chain, signed) =
        verify_signed_file(&log, checkpoints_path(&log), &key.public_key()).unwrap();
    assert!(
        chain.is_intact() && signed.is_intact(),
        "{chain:?} {signed:?}"
    );
    assert_eq!(chain.records, 4);
    let last = signed.last.unwrap();
    assert!(last.is_final, "the final checkpoint is written at close");
    assert_eq!(last.head_seq, 4);

    // A call after the close is refused, never run unlogged.
    let before = SIGNED_RUNS.load(Ordering::SeqCst);
    let denied = alice.run(|| restart("web".into())).unwrap_err();
    assert_eq!(denied.code(), "AUDIT_UNAVAILABLE");
    assert!(denied.to_string().contains("is closed"), "{denied}");
    assert_eq!(SIGNED_RUNS.load(Ordering::SeqCst), before);
    let err = sink.record(&record(9)).unwrap_err();
    assert!(err.to_string().contains("is closed"), "{err}");
    assert!(sink.close_shared().is_err());
    sink.flush().unwrap();

    // Dropping the last references writes nothing more: the log still ends at its final checkpoint.
    drop((alice, bob, sink));
    assert_eq!(lines(&log).len(), 4);
    let (chain, signed) =
        verify_signed_file(&log, checkpoints_path(&log), &key.public_key()).unwrap();
    assert!(
        chain.is_intact() && signed.is_intact(),
        "{chain:?} {signed:?}"
    );
    assert!(signed.last.unwrap().is_final);
}
