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
