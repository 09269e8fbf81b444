//! A key, a log or a checkpoint file is never written through a symbolic link planted at its name:
//! whoever plants one would choose where the key `verify` trusts goes, or where the records and
//! checkpoints go. Each is refused, dangling link or not, the link's target untouched. A checkpoint
//! file, which the sink creates, is appended to only under its one name: not through a hard link.

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::Scratch;
use toolgate::Mode;
use toolgate::audit::{
    AuditRecord, AuditSink, Checkpoints, JsonlSink, SigningKey, Stage, checkpoints_path,
};

/// What a planted link points at: a file the planter made (its text), or nothing yet.
#[derive(Debug, Clone, Copy)]
enum Planted {
    Dangling,
    ToExisting,
}

const TARGET_TEXT: &str = "the planter's file\n";

/// Plants a link at `at` in `dir`, to a file of `dir` named after it; returns the target's path.
fn plant(dir: &Scratch, at: &Path, planted: Planted) -> PathBuf {
    let target = dir.path(&format!(
        "target-of-{}",
        at.file_name().unwrap().to_string_lossy()
    ));
    if let Planted::ToExisting = planted {
        fs::write(&target, TARGET_TEXT).unwrap();
    }
    std::os::unix::fs::symlink(&target, at).unwrap();
    target
}

/// The target as it was planted: still absent, or still the planter's text alone.
fn assert_untouched(target: &Path, planted: Planted, what: &str) {
    match planted {
        Planted::Dangling => assert!(
            fs::symlink_metadata(target).is_err(),
            "{what}: something was written to the dangling link's target"
        ),
        Planted::ToExisting => assert_eq!(
            fs::read_to_string(target).unwrap(),
            TARGET_TEXT,
            "{what}: the link's target changed"
        ),
    }
}

fn assert_says_link(error: &std::io::Error, path: &Path, what: &str) {
    let text = error.to_string();
    assert!(
        text.contains("symbolic link") && text.contains(&path.display().to_string()),
        "{what}: {text}"
    );
}

const BOTH: [Planted; 2] = [Planted::Dangling, Planted::ToExisting];

#[test]
fn a_key_is_not_written_through_a_link_at_its_name() {
    for planted in BOTH {
        let dir = Scratch::new("planted-key");
        let key = SigningKey::generate().unwrap();
        let private = dir.path("key.pem");
        let target = plant(&dir, &private, planted);
        let error = key.write_pem_file(&private).unwrap_err();
        assert_says_link(&error, &private, "private key");
        assert_untouched(&target, planted, "private key");

        let public = dir.path("key.pem.pub");
        let target = plant(&dir, &public, planted);
        let error = key.public_key().write_pem_file(&public).unwrap_err();
        assert_says_link(&error, &public, "public key");
        assert_untouched(&target, planted, "public key");
    }
}

#[test]
fn a_log_is_not_written_through_a_link_at_its_name() {
    for planted in BOTH {
        let dir = Scratch::new("planted-log");
        let log = dir.path("audit.jsonl");
        let target = plant(&dir, &log, planted);
        let error = JsonlSink::open(&log).unwrap_err();
        assert_says_link(&error, &log, "log");
        assert_untouched(&target, planted, "log");
    }
}

#[test]
fn a_checkpoint_file_is_not_written_through_a_link_at_its_name() {
    for planted in BOTH {
        let dir = Scratch::new("planted-sidecar");
        let log = dir.path("audit.jsonl");
        let sidecar = checkpoints_path(&log);
        let target = plant(&dir, &sidecar, planted);
        let key = SigningKey::generate().unwrap();
        let error = JsonlSink::builder(&log)
            .checkpoints(Checkpoints::new(key))
            .open()
            .map(|sink| {
                let _ = sink.record(&AuditRecord::new(Stage::Enter, "t.t", Mode::Shadow, 1));
            })
            .unwrap_err();
        assert_says_link(&error, &sidecar, "checkpoint file");
        assert_untouched(&target, planted, "checkpoint file");
    }
}

/// A checkpoint file is appended to only under its one name: one found with another name (a hard
/// link, planted, or a copy kept by linking) is refused, with an error that says why and names it, the
/// other name's bytes untouched; once it has its one name again, the log reopens and its series goes on.
#[cfg(unix)]
#[test]
fn a_checkpoint_file_with_another_name_is_refused_until_it_has_one() {
    let dir = Scratch::new("sidecar-hard-link");
    let log = dir.path("audit.jsonl");
    let sidecar = checkpoints_path(&log);
    let pem = dir.path("key.pem");
    SigningKey::generate()
        .unwrap()
        .write_pem_file(&pem)
        .unwrap();
    let open = || {
        JsonlSink::builder(&log)
            .checkpoints(
                Checkpoints::new(SigningKey::read_pem_file(&pem).unwrap()).every_records(1),
            )
            .open()
    };
    let write = |sink: JsonlSink, call: u64| {
        let mut record = AuditRecord::new(Stage::Enter, "t.t", Mode::Shadow, 1);
        record.call = call;
        sink.record(&record).unwrap();
        sink.close().unwrap();
    };
    write(open().unwrap(), 1);
    let other = dir.path("kept-elsewhere");
    fs::hard_link(&sidecar, &other).unwrap();
    let before = fs::read(&other).unwrap();
    let error = open().map(drop).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("2 names (hard links)") && text.contains(&sidecar.display().to_string()),
        "{text}"
    );
    assert_eq!(
        fs::read(&other).unwrap(),
        before,
        "the other name's file changed"
    );
    fs::remove_file(&other).unwrap();
    write(open().unwrap(), 2);
    assert!(
        fs::read(&sidecar).unwrap().len() > before.len(),
        "the reopened log's checkpoints go on"
    );
}

static ONE_NAME_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Rotate a credential (a checkpoint file's one name).
#[toolgate::tool(risk = "LOW_WRITE", domain = "onename")]
fn rotate(credential: String) -> Result<(), toolgate::Denied> {
    let _ = credential;
    ONE_NAME_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// What is done to a running signed sink's checkpoint file, and what the refusal then says.
#[cfg(unix)]
const WHILE_OPEN: [(&str, &str); 3] = [
    ("linked", "2 names (hard links)"),
    ("renamed onto", "names another file"),
    ("removed", "names no file"),
];

/// Does `what` to the checkpoint file `sidecar` in `dir`: the file kept under another name, if any,
/// and its bytes.
#[cfg(unix)]
fn done_to(dir: &Scratch, sidecar: &Path, what: &str) -> Option<(PathBuf, Vec<u8>)> {
    let other = dir.path("kept-elsewhere");
    match what {
        "linked" => fs::hard_link(sidecar, &other).unwrap(),
        "renamed onto" => {
            fs::write(&other, "").unwrap();
            fs::rename(&other, sidecar).unwrap();
            return Some((sidecar.to_owned(), Vec::new()));
        }
        _ => {
            fs::remove_file(sidecar).unwrap();
            return None;
        }
    }
    let bytes = fs::read(&other).unwrap();
    Some((other, bytes))
}

/// The one name is checked before each append, not only at open: a hard link made to a running
/// sink's checkpoint file, another file renamed onto its name, or its name removed, and the record
/// that makes a checkpoint due is refused with a sentence naming the cause (its call refused
/// `AUDIT_UNAVAILABLE`, its body not run), the sink refuses every record after it, and no byte goes
/// to the file under its other name, to the file renamed there, or to the file no folder names.
#[cfg(unix)]
#[test]
fn a_checkpoint_file_given_another_name_or_replaced_while_the_sink_runs_gets_no_checkpoint() {
    use std::io::{Read as _, Seek as _};
    use std::sync::atomic::Ordering;
    for (what, said) in WHILE_OPEN {
        let dir = Scratch::new("sidecar-while-open");
        let log = dir.path("audit.jsonl");
        let sidecar = checkpoints_path(&log);
        let sink = std::sync::Arc::new(
            JsonlSink::builder(&log)
                .checkpoints(Checkpoints::new(SigningKey::generate().unwrap()).every_records(1))
                .open()
                .unwrap(),
        );
        let gate = toolgate::Gate::builder()
            .mode(Mode::FullAuto)
            .audit_shared(sink.clone())
            .build()
            .unwrap();
        gate.run(|| rotate("a".into())).unwrap();
        let mut held = fs::File::open(&sidecar).unwrap();
        let mut before = Vec::new();
        held.read_to_end(&mut before).unwrap();
        assert!(!before.is_empty(), "{what}: a checkpoint before");
        let other = done_to(&dir, &sidecar, what);

        let runs = ONE_NAME_RUNS.load(Ordering::SeqCst);
        let denied = gate.run(|| rotate("b".into())).unwrap_err();
        assert_eq!(denied.code(), "AUDIT_UNAVAILABLE", "{what}: {denied}");
        assert!(
            denied.to_string().contains(said)
                && denied.to_string().contains(&sidecar.display().to_string()),
            "{what}: {denied}"
        );
        assert_eq!(ONE_NAME_RUNS.load(Ordering::SeqCst), runs, "{what}: it ran");
        let again = gate.run(|| rotate("c".into())).unwrap_err();
        assert!(again.to_string().contains("unusable"), "{what}: {again}");
        assert!(sink.close_shared().is_err(), "{what}: closed");
        drop(gate);
        drop(sink);

        let mut after = Vec::new();
        held.rewind().unwrap();
        held.read_to_end(&mut after).unwrap();
        assert_eq!(after, before, "{what}: the file opened first was written");
        if let Some((other, bytes)) = other {
            assert_eq!(
                fs::read(&other).unwrap(),
                bytes,
                "{what}: {other:?} was written"
            );
        }
    }
}

/// The same between checkpoints: a link made, then a flush or a close that writes a checkpoint is
/// refused, the other name's bytes untouched; with the link removed, the log reopens and its series
/// goes on, every checkpoint verifying.
#[cfg(unix)]
#[test]
fn a_flush_or_close_writes_no_checkpoint_into_a_file_linked_since_it_was_opened() {
    for close in [false, true] {
        let dir = Scratch::new("sidecar-linked-flush");
        let log = dir.path("audit.jsonl");
        let sidecar = checkpoints_path(&log);
        let pem = dir.path("key.pem");
        SigningKey::generate()
            .unwrap()
            .write_pem_file(&pem)
            .unwrap();
        let open = || {
            JsonlSink::builder(&log)
                .checkpoints(
                    Checkpoints::new(SigningKey::read_pem_file(&pem).unwrap()).every_records(100),
                )
                .open()
                .unwrap()
        };
        let sink = open();
        sink.record(&AuditRecord::new(Stage::Enter, "t.t", Mode::Shadow, 1))
            .unwrap();
        let other = dir.path("kept-elsewhere");
        fs::hard_link(&sidecar, &other).unwrap();
        let refused = if close {
            sink.close().unwrap_err()
        } else {
            let refused = sink.flush().unwrap_err();
            drop(sink);
            refused
        };
        assert!(
            refused.to_string().contains("2 names (hard links)"),
            "{refused}"
        );
        assert_eq!(fs::read(&other).unwrap(), b"", "close {close}: written");
        fs::remove_file(&other).unwrap();
        let sink = open();
        sink.record(&AuditRecord::new(Stage::Enter, "t.t", Mode::Shadow, 1))
            .unwrap();
        sink.close().unwrap();
        let (chain, signed) = toolgate::audit::verify_signed_file(
            &log,
            &sidecar,
            &SigningKey::read_pem_file(&pem).unwrap().public_key(),
        )
        .unwrap();
        assert!(
            chain.is_intact()
                && signed.is_intact()
                && signed.last.as_ref().is_some_and(|c| c.is_final),
            "close {close}: {chain:?} {signed:?}"
        );
    }
}

#[cfg(feature = "cli")]
#[test]
fn keygen_writes_no_key_through_a_link_at_either_name() {
    use crate::fixtures::support::toolgate_command as toolgate;
    for planted in BOTH {
        for public in [false, true] {
            let dir = Scratch::new("planted-keygen");
            let private = dir.path("key.pem");
            let at = if public {
                dir.path("key.pem.pub")
            } else {
                private.clone()
            };
            let target = plant(&dir, &at, planted);
            let what = format!("keygen, {planted:?} link at {}", at.display());
            let (code, stdout, stderr) =
                toolgate(&["audit", "keygen", "--out", private.to_str().unwrap()]);
            assert_eq!(code, 3, "{what}: {stdout}{stderr}");
            assert!(
                stderr.contains(&format!("{} is a symbolic link", at.display())),
                "{what}: {stderr}"
            );
            assert_untouched(&target, planted, &what);
            if public {
                assert!(!private.exists(), "{what}: the private key was written");
            }
        }
    }
}
