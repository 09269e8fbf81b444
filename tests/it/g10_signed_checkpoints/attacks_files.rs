//! Outside attacks on guarantee 10 through the files the sink and the `toolgate` command create
//! beside the ones a user names: the checkpoint file `audit.jsonl.checkpoints` planted as a symbolic
//! link (to an existing file, dangling), a hard link or a directory; `audit.key.pub` planted as a hard
//! link; and a rewritten log whose checkpoint file was emptied or deleted, verified with the public key.
//!
//! Each test asserts the guarantee: no write lands in a file the user did not name, and a
//! verification with the public key does not pass a log no checkpoint vouches for. A test that fails
//! is an attack that got through.

#![cfg(all(feature = "checkpoints", feature = "cli", unix))]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use crate::common::Scratch;
use crate::fixtures::support::toolgate_command as toolgate;
use toolgate::Mode;
use toolgate::audit::{
    AuditRecord, AuditSink, Checkpoints, JsonlSink, SigningKey, Stage, checkpoints_path,
};

fn record(i: u64, tool: &str) -> AuditRecord {
    let mut record = AuditRecord::new(Stage::Enter, tool.to_owned(), Mode::Shadow, 1);
    record.call = i;
    record
}

/// Opens a signed sink on `log`, writes three records and closes it: whether that all worked.
fn write_signed(log: &Path, key: SigningKey) -> Result<(), String> {
    let sink = JsonlSink::builder(log)
        .checkpoints(Checkpoints::new(key).every_records(1))
        .open()
        .map_err(|e| format!("open: {e}"))?;
    for i in 1..=3 {
        sink.record(&record(i, "users.get"))
            .map_err(|e| format!("record: {e}"))?;
    }
    sink.close().map_err(|e| format!("close: {e}"))
}

const VICTIM: &str = "a file the user never named\n";

/// a10_01. The attack: before a signed log is first opened, `audit.jsonl.checkpoints` is planted as
/// a symbolic link to another file (one with content, one empty) or to a path that does not exist.
/// Asserted: whatever the sink does, the linked file keeps its bytes and the dangling link's target
/// is not created.
#[test]
fn a10_01_a_checkpoint_file_planted_as_a_symlink_gets_no_checkpoint_written_through_it() {
    let mut failures = Vec::new();
    for (case, content) in [
        ("full", Some(VICTIM)),
        ("empty", Some("")),
        ("dangling", None),
    ] {
        let dir = Scratch::new(&format!("a10-01-{case}"));
        let log = dir.path("audit.jsonl");
        let victim = dir.path("elsewhere");
        if let Some(content) = content {
            fs::write(&victim, content).unwrap();
        }
        symlink(&victim, checkpoints_path(&log)).unwrap();
        let said = write_signed(&log, SigningKey::generate().unwrap());
        match (content, fs::read_to_string(&victim)) {
            (Some(before), Ok(after)) if after == before => {}
            (None, Err(_)) => {}
            (_, after) => failures.push(format!(
                "{case}: the sink said {said:?}, and the file the link points at now holds {after:?}"
            )),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a10_02. The attack: `audit.jsonl.checkpoints` is planted as a hard link to an empty file the
/// user keeps elsewhere. Asserted: that file stays empty (the sink refuses, or writes a file of its
/// own).
#[test]
fn a10_02_a_checkpoint_file_planted_as_a_hard_link_gets_no_checkpoint_written_through_it() {
    let dir = Scratch::new("a10-02");
    let log = dir.path("audit.jsonl");
    let victim = dir.path("elsewhere");
    fs::write(&victim, "").unwrap();
    fs::hard_link(&victim, checkpoints_path(&log)).unwrap();
    let said = write_signed(&log, SigningKey::generate().unwrap());
    let after = fs::read_to_string(&victim).unwrap();
    assert_eq!(
        after, "",
        "the sink said {said:?}, and wrote into the hard-linked file"
    );
}

/// a10_03. The attack: a directory planted where the checkpoint file goes. Asserted: the signed
/// sink refuses to open (rather than write a log that no checkpoint will ever sign).
#[test]
fn a10_03_a_directory_in_place_of_the_checkpoint_file_refuses_the_signed_sink() {
    let dir = Scratch::new("a10-03");
    let log = dir.path("audit.jsonl");
    fs::create_dir(checkpoints_path(&log)).unwrap();
    let said = write_signed(&log, SigningKey::generate().unwrap());
    assert!(
        said.as_ref().is_err_and(|e| e.starts_with("open")),
        "{said:?}"
    );
}

/// Writes a signed log with a key made by `toolgate audit keygen`, then rewrites it whole, hashes
/// recomputed, without the key, and leaves its checkpoint file as `leave` says: the log and the
/// public key.
fn rewritten(name: &str, leave: impl FnOnce(&Path)) -> (Scratch, std::path::PathBuf, String) {
    let dir = Scratch::new(name);
    let key = dir.path("key.pem");
    let (code, _, stderr) = toolgate(&["audit", "keygen", "--out", key.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let log = dir.path("audit.jsonl");
    write_signed(&log, SigningKey::read_pem_file(&key).unwrap()).unwrap();
    fs::remove_file(&log).unwrap();
    let forged = JsonlSink::open(&log).unwrap();
    for i in 1..=3 {
        forged.record(&record(i, "users.delete")).unwrap();
    }
    drop(forged);
    leave(&checkpoints_path(&log));
    let public = format!("{}.pub", key.to_str().unwrap());
    (dir, log, public)
}

/// a10_04. The attack: whoever can write the log and its checkpoints, but lacks the key, rewrites
/// the whole log and empties the checkpoint file. Asserted: `verify --public-key` does not exit 0.
#[test]
fn a10_04_a_rewritten_log_with_its_checkpoint_file_emptied_does_not_verify() {
    let (_dir, log, public) = rewritten("a10-04", |checkpoints| {
        fs::write(checkpoints, "").unwrap();
    });
    let (code, stdout, stderr) = toolgate(&[
        "audit",
        "verify",
        log.to_str().unwrap(),
        "--public-key",
        &public,
    ]);
    assert_ne!(code, 0, "a rewritten log passed: {stdout}{stderr}");
}

/// a10_05. The attack: as a10_04, but the checkpoint file is deleted. Asserted: `verify
/// --public-key` does not exit 0.
#[test]
fn a10_05_a_rewritten_log_with_its_checkpoint_file_deleted_does_not_verify() {
    let (_dir, log, public) = rewritten("a10-05", |checkpoints| {
        fs::remove_file(checkpoints).unwrap();
    });
    let (code, stdout, stderr) = toolgate(&[
        "audit",
        "verify",
        log.to_str().unwrap(),
        "--public-key",
        &public,
    ]);
    assert_ne!(code, 0, "a rewritten log passed: {stdout}{stderr}");
}

/// a10_06. The attack: `key.pem.pub`, the public key file `toolgate audit keygen --out key.pem`
/// writes beside the one the user names, is planted as a hard link to another file. Asserted: that
/// file keeps its bytes.
#[test]
fn a10_06_keygen_writes_nothing_through_a_public_key_file_planted_as_a_hard_link() {
    let dir = Scratch::new("a10-06");
    let victim = dir.path("elsewhere");
    fs::write(&victim, VICTIM).unwrap();
    let key = dir.path("key.pem");
    fs::hard_link(&victim, dir.path("key.pem.pub")).unwrap();
    let (code, _, stderr) = toolgate(&["audit", "keygen", "--out", key.to_str().unwrap()]);
    assert_eq!(
        fs::read_to_string(&victim).unwrap(),
        VICTIM,
        "keygen exited {code} ({stderr}) and wrote into the hard-linked file"
    );
}

/// a4_f1. The attack: while a signed sink runs, whoever can write the log's folder gives its
/// checkpoint file a second name, kept elsewhere (`ln audit.jsonl.checkpoints kept`). Asserted
/// (SECURITY.md, guarantee 10: the checkpoint file is "appended to only while it has its one name:
/// a hard link planted there, to a file kept elsewhere, is refused rather than written into"): no
/// checkpoint is written into the file under its other name; the sink refuses instead.
#[test]
fn a4_f1_a_checkpoint_file_given_a_second_name_while_the_sink_runs_is_not_written_into() {
    let dir = Scratch::new("a4-f1");
    let log = dir.path("audit.jsonl");
    let sink = JsonlSink::builder(&log)
        .checkpoints(Checkpoints::new(SigningKey::generate().unwrap()).every_records(1))
        .open()
        .unwrap();
    sink.record(&record(1, "users.get")).unwrap();
    let kept = dir.path("kept-elsewhere");
    fs::hard_link(checkpoints_path(&log), &kept).unwrap();
    let before = fs::read(&kept).unwrap();
    let second = sink.record(&record(2, "users.get"));
    let closed = sink.close();
    assert_eq!(
        fs::read(&kept).unwrap(),
        before,
        "checkpoints were appended to the file under its second name (record: {second:?}, close: \
         {closed:?})"
    );
}

/// a4_f2. The attack: a directory and a dangling symbolic link planted at the log's own name. Asserted (guarantee 10: a log is never written through a link at its name; guarantee 2: a
/// sink that cannot write refuses): the sink does not open, and nothing is created at the link's
/// target.
#[test]
fn a4_f2_a_directory_or_a_dangling_link_at_the_log_s_name_opens_no_sink() {
    let dir = Scratch::new("a4-f2");
    let as_dir = dir.path("dir.jsonl");
    fs::create_dir(&as_dir).unwrap();
    assert!(JsonlSink::open(&as_dir).is_err(), "a directory opened");
    let link = dir.path("link.jsonl");
    let target = dir.path("chosen-by-the-planter");
    symlink(&target, &link).unwrap();
    assert!(JsonlSink::open(&link).is_err(), "a dangling link opened");
    assert!(
        fs::symlink_metadata(&target).is_err(),
        "the link's target was created"
    );
}

/// a4_f3. The attack: while a signed sink runs, its checkpoint file is replaced by renaming another
/// file onto its name, so that the file the sink holds has no name left. Asserted (guarantee 10:
/// the checkpoint file is "appended to only while it has its one name"): the sink appends no
/// checkpoint to a file no folder names; it refuses the record instead, so that no call runs whose
/// record a checkpoint will never vouch for.
#[test]
fn a4_f3_a_checkpoint_file_replaced_by_a_rename_while_the_sink_runs_gets_nothing_unseen() {
    let dir = Scratch::new("a4-f3");
    let log = dir.path("audit.jsonl");
    let sink = JsonlSink::builder(&log)
        .checkpoints(Checkpoints::new(SigningKey::generate().unwrap()).every_records(1))
        .open()
        .unwrap();
    sink.record(&record(1, "users.get")).unwrap();
    let held = fs::File::open(checkpoints_path(&log)).unwrap();
    let before = std::io::read_to_string(&held).unwrap();
    let planted = dir.path("planted");
    fs::write(&planted, "").unwrap();
    fs::rename(&planted, checkpoints_path(&log)).unwrap();
    let second = sink.record(&record(2, "users.get"));
    let closed = sink.close();
    let mut held = held;
    std::io::Seek::seek(&mut held, std::io::SeekFrom::Start(0)).unwrap();
    let after = std::io::read_to_string(&held).unwrap();
    assert!(
        after == before || second.is_err(),
        "record 2 was acknowledged ({second:?}, close {closed:?}) and its checkpoint written to a \
         file no folder names"
    );
}
