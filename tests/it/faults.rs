//! Real faults under a gate: a full disk, a log that stops being writable, a process killed in the
//! middle of a write, an approver that fails, approvals that expire.
//!
//! Every failure here is a real one from the operating system, never a sink written to fail. Where the
//! environment cannot produce one (no `/dev/full`, no way to mount a file system or to make a file
//! immutable), the test says why on stderr and passes without asserting anything.
//!
//! Some tests re-run this binary as a child process: the child runs one test by exact name, with
//! `TOOLGATE_FAULT_CHILD` set to its working path. Without that variable, those child tests return at
//! once.

use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};
use toolgate::approval::ApproveError;
use toolgate::audit::{
    AuditError, AuditRecord, AuditSink, Durability, JsonlSink, Stage, verify_file,
};
use toolgate::{Approval, ApprovalRequest, DenialCode, Denied, Gate, Mode, tool};

use crate::common::gates;
use crate::common::{Scratch, serial};
use crate::fixtures::support::full_auto_with_ttl;

pub(crate) const CHILD_ENV: &str = "TOOLGATE_FAULT_CHILD";

static APPENDS: AtomicUsize = AtomicUsize::new(0);
static READS: AtomicUsize = AtomicUsize::new(0);
static SETTLEMENTS: AtomicUsize = AtomicUsize::new(0);

/// Appends an entry to the ledger; the entry is written into the audit log with the call.
#[tool(risk = "LOW_WRITE", domain = "ledger", record_arguments)]
fn append(n: u64, entry: String) -> Result<u64, Denied> {
    let _ = entry;
    APPENDS.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// Reads the ledger.
#[tool(risk = "READ_ONLY", domain = "ledger")]
fn balance() -> Result<u64, Denied> {
    READS.fetch_add(1, Ordering::SeqCst);
    Ok(0)
}

/// Settles an account: needs an approval.
#[tool(risk = "HIGH_WRITE", domain = "ledger")]
fn settle(account: u64, cents: u64) -> Result<u64, Denied> {
    let _ = account;
    SETTLEMENTS.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

fn audited(mode: Mode, sink: &Arc<JsonlSink>) -> Gate {
    gates::audited_shared(mode, Arc::clone(sink) as Arc<dyn AuditSink>)
}

/// How many lines of the file end in a newline.
fn complete_lines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

/// The working path of a child run, or `None` in an ordinary test run.
fn child_path() -> Option<PathBuf> {
    std::env::var_os(CHILD_ENV).map(PathBuf::from)
}

/// This test binary, asked to run exactly `test` with `path` as its working path.
fn child_command(program: &str, leading: &[&str], test: &str, path: &Path) -> Command {
    let exe = std::env::current_exe().unwrap();
    let mut command = Command::new(program);
    command
        .args(leading)
        .arg(exe)
        .arg(test)
        .args(["--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, path);
    command
}

// ---------------------------------------------------------------------------------------------------------
// A full disk
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_full_device_refuses_every_allowed_call_and_no_body_runs() {
    let _serial = serial();
    let full = Path::new("/dev/full");
    if !full.exists() {
        eprintln!("skipped: this system has no /dev/full");
        return;
    }
    // A device is not a regular file: the sink does not read it, and starts its chain at seq 1.
    let sink = Arc::new(JsonlSink::open(full).unwrap());
    assert_eq!(sink.last_seq(), 0);
    let gate = audited(Mode::PartialAuto, &sink);
    let (appends, reads) = (count(&APPENDS), count(&READS));

    let denied = gate.run(|| append(1, "first".into())).unwrap_err();
    assert_eq!(denied.code(), DenialCode::AuditUnavailable);
    let detail = denied.detail().unwrap();
    assert!(detail.contains("/dev/full"), "{detail}");
    assert!(detail.contains("No space left on device"), "{detail}");
    assert_eq!(count(&APPENDS), appends, "the body did not run");

    // The line could not be cut off a device, so the sink refuses from then on, reads included: every
    // allowed call needs its `enter` record.
    let denied = gate.run(balance).unwrap_err();
    assert_eq!(denied.code(), DenialCode::AuditUnavailable);
    assert!(denied.detail().unwrap().contains("unusable"), "{denied}");
    assert_eq!(count(&READS), reads);

    // A refusal keeps its own code: the sink failing to record it does not turn it into anything else.
    let shadow = audited(Mode::Shadow, &sink);
    let denied = shadow.run(|| append(2, "second".into())).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
    assert_eq!(count(&APPENDS), appends);
    assert_eq!(sink.last_seq(), 0);
}

#[test]
fn a_full_file_system_refuses_the_call_and_leaves_a_verifiable_log() {
    let _serial = serial();
    in_a_small_file_system("64k", "faults::child_fills_a_file_system");
}

#[test]
fn a_buffered_log_on_a_full_file_system_refuses_every_call_after_a_failed_write() {
    let _serial = serial();
    in_a_small_file_system("256k", "faults::child_fills_a_file_system_through_a_buffer");
}

/// Runs the child test `test` (its path in this binary, `faults::child_…`) with a tmpfs of `size` mounted
/// at its working path (`CHILD_ENV`), in a private mount namespace: the small file system exists for the
/// child only and goes with it.
pub(crate) fn in_a_small_file_system(size: &str, test: &str) {
    let scratch = Scratch::new(test);
    let mount_point = scratch.path("mnt");
    fs::create_dir(&mount_point).unwrap();
    let script = format!(
        r#"mount -t tmpfs -o size={size} toolgate-faults "$TOOLGATE_FAULT_CHILD" || exit 97
exec "$@""#
    );
    let leading = unshare_arguments();
    let mut leading: Vec<&str> = leading.iter().map(String::as_str).collect();
    leading.extend(["--", "sh", "-c", &script, "sh"]);
    let output = child_command("unshare", &leading, test, &mount_point).output();
    run_child(output, "a size-limited tmpfs in a private mount namespace");
}

/// `unshare` options for a private mount namespace: as root, a mount namespace; otherwise a user
/// namespace too, where the mount is allowed if the system permits unprivileged user namespaces.
fn unshare_arguments() -> Vec<String> {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    let mut arguments = vec!["--mount".to_owned(), "--propagation=private".to_owned()];
    if !root {
        arguments.insert(0, "--map-root-user".to_owned());
    }
    arguments
}

/// Checks a child's outcome: it passed, or it could not set its fault up (then the test is skipped).
fn run_child(output: io::Result<std::process::Output>, what: &str) {
    let output = match output {
        Ok(output) => output,
        Err(error) => {
            eprintln!("skipped: cannot start a child in {what}: {error}");
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !stdout.contains("running 1 test") {
        eprintln!(
            "skipped: cannot set up {what} ({}): {}",
            output.status,
            stderr.trim()
        );
        return;
    }
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the child failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

/// In the child: fills a 64 KiB file system with the audit log of allowed calls until the disk is full.
#[test]
fn child_fills_a_file_system() {
    let Some(dir) = child_path() else { return };
    let path = dir.join("audit.jsonl");
    // A file that takes part of the space, to free it later.
    fs::write(dir.join("ballast"), vec![b'x'; 16 * 1024]).unwrap();
    let sink = Arc::new(JsonlSink::open(&path).unwrap());
    let gate = audited(Mode::PartialAuto, &sink);
    let entry = "e".repeat(700);
    let mut ran = 0;
    let denied = loop {
        match gate.run(|| append(ran, entry.clone())) {
            Ok(_) => ran += 1,
            Err(denied) => break denied,
        }
        assert!(ran < 1_000, "a 64 KiB file system never filled up");
    };
    assert_eq!(denied.code(), DenialCode::AuditUnavailable);
    assert!(
        denied.detail().unwrap().contains("No space left on device"),
        "{denied}"
    );
    assert_eq!(
        count(&APPENDS) as u64,
        ran,
        "the refused call's body did not run"
    );

    // The failed line was cut off: the log verifies, without a torn tail, and holds exactly one `enter`
    // record for each body that ran (the last `exit` record may be the one that did not fit).
    let report = verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.records, sink.last_seq());
    let log = fs::read_to_string(&path).unwrap();
    let enters = log
        .lines()
        .filter(|l| l.contains(r#""stage":"enter""#))
        .count() as u64;
    assert_eq!(enters, ran);
    assert!(
        report.records == 2 * ran || report.records == 2 * ran - 1,
        "{report}"
    );

    // Once there is room again, the same sink goes on, and the chain with it.
    fs::remove_file(dir.join("ballast")).unwrap();
    gate.run(|| append(ran, "after".into())).unwrap();
    let after = verify_file(&path).unwrap();
    assert!(after.is_intact(), "{after}");
    assert_eq!(after.records, report.records + 2);
    println!("{ran} calls ran before the file system was full");
}

/// In the child: a `Buffered` log acknowledges records before it writes them, so calls run until a
/// batch cannot be written; from then on every call is refused, a small one whose record would still
/// fit in the buffer included, until a write succeeds again.
#[test]
fn child_fills_a_file_system_through_a_buffer() {
    let Some(dir) = child_path() else { return };
    let path = dir.join("audit.jsonl");
    // Leaves about 32 KiB free: less than one batch.
    fs::write(dir.join("ballast"), vec![b'x'; 224 * 1024]).unwrap();
    let sink = Arc::new(
        JsonlSink::builder(&path)
            .durability(Durability::Buffered)
            .open()
            .unwrap(),
    );
    let gate = audited(Mode::PartialAuto, &sink);
    // Large records, so that the buffer left after the failed batch has room for a small one.
    let entry = "e".repeat(12 * 1024);
    let mut ran = 0;
    let denied = loop {
        match gate.run(|| append(ran, entry.clone())) {
            Ok(_) => ran += 1,
            Err(denied) => break denied,
        }
        assert!(ran < 1_000, "a 256 KiB file system never filled up");
    };
    assert_eq!(denied.code(), DenialCode::AuditUnavailable);
    assert!(
        denied.detail().unwrap().contains("No space left on device"),
        "{denied}"
    );
    assert_eq!(
        count(&APPENDS) as u64,
        ran,
        "the refused call's body did not run"
    );

    for small in 0..3 {
        let denied = gate.run(|| append(small, String::new())).unwrap_err();
        assert_eq!(denied.code(), DenialCode::AuditUnavailable, "{denied}");
        assert_eq!(
            count(&APPENDS) as u64,
            ran,
            "no body runs after a failed write"
        );
    }

    // Once there is room again, the buffered records are written and calls run again.
    fs::remove_file(dir.join("ballast")).unwrap();
    gate.run(|| append(ran, "after".into())).unwrap();
    sink.flush().unwrap();
    let report = verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.records, sink.last_seq());
    println!("{ran} calls ran before a batch could not be written");
}

// ---------------------------------------------------------------------------------------------------------
// A log that cannot be written
// ---------------------------------------------------------------------------------------------------------

/// Clears the immutable flag of a file when dropped, so that it can be removed whatever happens.
struct Immutable<'a>(&'a Path);

impl Immutable<'_> {
    fn set(path: &Path) -> Result<Immutable<'_>, String> {
        let output = Command::new("chattr")
            .arg("+i")
            .arg(path)
            .output()
            .map_err(|e| format!("cannot run chattr: {e}"))?;
        if output.status.success() {
            Ok(Immutable(path))
        } else {
            Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
        }
    }
}

impl Drop for Immutable<'_> {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(self.0).status();
    }
}

#[test]
fn a_log_that_stops_being_writable_refuses_the_call() {
    let _serial = serial();
    let scratch = Scratch::new("immutable");
    let path = scratch.path("audit.jsonl");
    let sink = Arc::new(JsonlSink::open(&path).unwrap());
    let gate = audited(Mode::PartialAuto, &sink);
    gate.run(|| append(1, "before".into())).unwrap();
    let before = fs::read(&path).unwrap();

    // Permissions do not apply to a file already open, and not at all to root: the immutable flag
    // refuses writes to open files, to root too.
    let immutable = match Immutable::set(&path) {
        Ok(flag) => flag,
        Err(why) => {
            eprintln!("skipped: cannot make the log immutable: {why}");
            return;
        }
    };
    let appends = count(&APPENDS);
    let denied = gate.run(|| append(2, "refused".into())).unwrap_err();
    assert_eq!(denied.code(), DenialCode::AuditUnavailable);
    assert!(
        denied.detail().unwrap().contains("Operation not permitted"),
        "{denied}"
    );
    assert_eq!(count(&APPENDS), appends, "the body did not run");
    // The partial line could not be cut off either: the sink refuses every later record.
    assert!(gate.run(balance).is_err());
    drop(immutable);
    let denied = gate.run(balance).unwrap_err();
    assert!(denied.detail().unwrap().contains("reopen it"), "{denied}");
    assert_eq!(fs::read(&path).unwrap(), before, "nothing reached the file");

    // Reopened, the log verifies and continues.
    drop(gate);
    drop(sink);
    let sink = Arc::new(JsonlSink::open(&path).unwrap());
    assert_eq!(sink.last_seq(), 2);
    audited(Mode::PartialAuto, &sink)
        .run(|| append(3, "after".into()))
        .unwrap();
    let report = verify_file(&path).unwrap();
    assert!(report.is_intact() && report.records == 4, "{report}");
}

#[test]
fn a_log_that_cannot_be_opened_for_writing_gives_no_sink() {
    let _serial = serial();
    let scratch = Scratch::new("unwritable");
    let path = scratch.path("audit.jsonl");
    {
        let sink = Arc::new(JsonlSink::open(&path).unwrap());
        audited(Mode::PartialAuto, &sink)
            .run(|| append(1, "x".into()))
            .unwrap();
    }
    let mut permissions = fs::metadata(&path).unwrap().permissions();
    permissions.set_readonly(true);
    fs::set_permissions(&path, permissions).unwrap();
    let bypassed = fs::OpenOptions::new().append(true).open(&path).is_ok();
    if !bypassed {
        let error = JsonlSink::open(&path).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::PermissionDenied, "{error}");
        assert!(error.to_string().contains("audit.jsonl"), "{error}");
        return;
    }
    // File permissions do not bind this process (root): a path under a regular file is a real failure
    // that does.
    let under_a_file = path.join("audit.jsonl");
    let error = JsonlSink::open(&under_a_file).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotADirectory, "{error}");
    assert!(
        error
            .to_string()
            .contains(&under_a_file.display().to_string()),
        "{error}"
    );
    // And a read-only file system, where one can be mounted.
    let read_only = scratch.path("ro");
    fs::create_dir(&read_only).unwrap();
    let script = r#"mount -t tmpfs -o ro,size=16k toolgate-faults "$TOOLGATE_FAULT_CHILD" || exit 97
exec "$@""#;
    let leading = unshare_arguments();
    let mut leading: Vec<&str> = leading.iter().map(String::as_str).collect();
    leading.extend(["--", "sh", "-c", script, "sh"]);
    let output = child_command(
        "unshare",
        &leading,
        "faults::child_opens_a_log_on_a_read_only_file_system",
        &read_only,
    )
    .output();
    run_child(output, "a read-only tmpfs in a private mount namespace");
}

/// In the child: a log on a read-only file system cannot be opened.
#[test]
fn child_opens_a_log_on_a_read_only_file_system() {
    let Some(dir) = child_path() else { return };
    let path = dir.join("audit.jsonl");
    let error = JsonlSink::open(&path).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ReadOnlyFilesystem, "{error}");
    assert!(!path.exists());
}

// ---------------------------------------------------------------------------------------------------------
// Killed while writing
// ---------------------------------------------------------------------------------------------------------

/// The sizes of the entries the child writes, in turn: small lines, and lines of many pages, which a
/// kill can cut in the middle.
const ENTRY_SIZES: [usize; 4] = [200, 20_000, 500, 60_000];

/// In the child: calls a tool through an audited gate in a loop, until it is killed.
#[test]
fn child_writes_until_killed() {
    let Some(path) = child_path() else { return };
    let sink = Arc::new(JsonlSink::open(&path).unwrap());
    let gate = audited(Mode::PartialAuto, &sink);
    let entries: Vec<String> = ENTRY_SIZES.iter().map(|&n| "k".repeat(n)).collect();
    for n in 0.. {
        let entry = entries[n as usize % entries.len()].clone();
        gate.run(|| append(n, entry)).unwrap();
    }
}

/// What one kill left behind.
#[derive(Debug, PartialEq, Eq)]
enum Tail {
    /// The file ends after a whole line.
    Clean,
    /// The last line was cut short.
    Torn,
    /// The last line is whole but its newline was not written.
    NoNewline,
}

/// Kills writers at different moments and checks what each left: every complete record verifies, a line
/// cut short is a torn tail, and the log can be reopened past it.
///
/// `SIGKILL` lands in the middle of a line only when it arrives during a write of several pages, which
/// takes microseconds: the attempts that watch for a write under way usually get one, but a loaded
/// machine may not schedule the watcher in time. One more writer is killed by the kernel itself, at a
/// byte it chooses: past a file-size limit (`ulimit -f`), a write is cut short at the limit and the next
/// one raises `SIGXFSZ`, whose default action ends the process. That one always tears a line.
#[test]
fn a_process_killed_while_writing_leaves_every_complete_record_verifiable() {
    let _serial = serial();
    let scratch = Scratch::new("sigkill");
    let mut tails = Vec::new();
    for attempt in 0..3 {
        let path = scratch.path(&format!("audit-{attempt}.jsonl"));
        let tail = kill_a_writer(&path, attempt);
        check_after_kill(&path, &tail);
        tails.push(tail);
    }
    let path = scratch.path("audit-limit.jsonl");
    match write_past_a_size_limit(&path) {
        Ok(()) => {
            let tail = tail_of(&path);
            check_after_kill(&path, &tail);
            assert_eq!(tail, Tail::Torn, "the limit cut a line");
            tails.push(tail);
        }
        Err(why) => eprintln!("no file-size limit run: {why}"),
    }
    eprintln!("tails after {} kills: {tails:?}", tails.len());
}

/// Starts a child writing to `path`, waits for a few records, kills it with `SIGKILL`, and says what the
/// tail is.
///
/// The first attempt kills at once, the second after a few milliseconds; the third watches the file and
/// kills while its last line is incomplete, that is while a write of many pages is under way.
fn kill_a_writer(path: &Path, attempt: u32) -> Tail {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "faults::child_writes_until_killed",
            "--exact",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while complete_records(path) < 2 {
        assert!(Instant::now() < deadline, "the child wrote nothing");
        std::thread::sleep(Duration::from_millis(1));
    }
    match attempt {
        0 => {}
        1 => std::thread::sleep(Duration::from_millis(7)),
        _ => {
            let file = File::open(path).unwrap();
            let mut last = [0u8];
            let watch = Instant::now() + Duration::from_secs(1);
            while Instant::now() < watch {
                let len = file.metadata().unwrap().len();
                if len > 0 && file.read_at(&mut last, len - 1).unwrap() == 1 && last[0] != b'\n' {
                    break;
                }
            }
        }
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "the child died of SIGKILL: {status}"
    );
    tail_of(path)
}

/// Runs a writer under a file-size limit of 200 KiB, until the kernel ends it.
fn write_past_a_size_limit(path: &Path) -> Result<(), String> {
    let mut child = Command::new("sh")
        .args(["-c", r#"ulimit -f 400 && exec "$0" "$@""#])
        .arg(std::env::current_exe().unwrap())
        .args([
            "faults::child_writes_until_killed",
            "--exact",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run sh: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            return Err("the writer never reached the limit".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // SIGXFSZ is 25 on Linux.
    if status.signal() != Some(25) {
        return Err(format!("the writer did not die of SIGXFSZ: {status}"));
    }
    assert_eq!(
        fs::metadata(path).unwrap().len(),
        400 * 512,
        "cut at the limit"
    );
    Ok(())
}

/// How the file at `path` ends.
fn tail_of(path: &Path) -> Tail {
    let bytes = fs::read(path).unwrap();
    match bytes.last() {
        None | Some(b'\n') => Tail::Clean,
        Some(_) => {
            let start = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            if serde_json::from_slice::<serde_json::Value>(&bytes[start..]).is_ok() {
                Tail::NoNewline
            } else {
                Tail::Torn
            }
        }
    }
}

fn complete_records(path: &Path) -> u64 {
    fs::read(path).map_or(0, |bytes| complete_lines(&bytes))
}

/// Every complete line verifies; a partial last line is reported as a torn tail, and the log can be
/// reopened past it.
fn check_after_kill(path: &Path, tail: &Tail) {
    let bytes = fs::read(path).unwrap();
    let complete = complete_lines(&bytes);
    let report = verify_file(path).unwrap();
    assert_eq!(report.broken, None, "{report}");
    let whole_end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) as u64;
    match tail {
        Tail::Clean => {
            assert!(report.is_intact(), "{report}");
            assert_eq!(report.records, complete);
        }
        Tail::Torn => {
            assert_eq!(report.records, complete, "{report}");
            let torn = report.torn_tail.clone().expect("a torn tail");
            assert_eq!(torn.offset, whole_end);
            assert_eq!(torn.len, bytes.len() as u64 - whole_end);
        }
        Tail::NoNewline => {
            assert!(report.final_newline_missing && report.torn_tail.is_none());
            assert_eq!(report.records, complete + 1);
        }
    }
    assert_eq!(
        report.last_seq, report.records,
        "seq counts from 1 with no gap"
    );
    assert_eq!(
        report.intact_len,
        if *tail == Tail::Torn {
            whole_end
        } else {
            bytes.len() as u64
        }
    );

    // A torn log is not appended to unless the tail is cut off on purpose; then the chain goes on.
    if *tail == Tail::Torn {
        let error = JsonlSink::open(path).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidData, "{error}");
    }
    let sink = Arc::new(
        JsonlSink::builder(path)
            .recover_torn_tail(true)
            .open()
            .unwrap(),
    );
    assert_eq!(sink.last_seq(), report.records);
    audited(Mode::PartialAuto, &sink)
        .run(|| append(0, "after the crash".into()))
        .unwrap();
    let after = verify_file(path).unwrap();
    assert!(after.is_intact(), "{after}");
    assert_eq!(after.records, report.records + 2);
}

// ---------------------------------------------------------------------------------------------------------
// Sinks and approvers that fail
// ---------------------------------------------------------------------------------------------------------

/// A sink with a bug: it panics on the records of the stage it is given.
struct PanicsOn(Stage);

impl AuditSink for PanicsOn {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        assert_ne!(record.stage, self.0, "sink bug");
        Ok(())
    }
}

#[test]
fn a_sink_that_panics_on_enter_stops_the_call_before_the_body() {
    let _serial = serial();
    let gate = gates::audited(Mode::PartialAuto, PanicsOn(Stage::Enter));
    let appends = count(&APPENDS);
    // A sink that panics on the `enter` has refused it, as an approver that panics has rejected.
    let caught = std::panic::catch_unwind(|| gate.run(|| append(1, "x".into())));
    let denied = caught
        .expect("the sink's panic is a refusal, not an unwind through the caller")
        .unwrap_err();
    assert_eq!(denied.code(), DenialCode::AuditUnavailable);
    assert!(denied.to_string().contains("panicked"), "{denied}");
    assert_eq!(count(&APPENDS), appends, "the body did not run");
    // The call left the gate.
    assert_eq!(balance().unwrap_err().code(), DenialCode::NoGate);
}

#[test]
fn an_approver_that_rejects_or_fails_refuses_the_call() {
    let _serial = serial();
    let scratch = Scratch::new("approver");
    let policy = scratch.path("approvals.txt");
    // The approver reads its policy from a file each time, and fails closed when it cannot.
    let approver = {
        let policy = policy.clone();
        move |request: &ApprovalRequest<'_>| match fs::read_to_string(&policy) {
            Err(error) => Approval::Reject(format!("cannot read the approval policy: {error}")),
            Ok(text) if text.lines().any(|l| l == request.tool.id) => Approval::Approve,
            Ok(_) => Approval::Reject(format!("{} is not in the policy", request.tool.id)),
        }
    };
    let gate = gates::approved(Mode::FullAuto, approver);
    let settlements = count(&SETTLEMENTS);

    // No policy file: a real I/O error, turned into a rejection.
    let denied = gate.run(|| settle(1, 100)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRejected);
    let detail = denied.detail().unwrap();
    assert!(detail.contains("No such file or directory"), "{detail}");
    assert!(denied.to_string().contains(detail), "{denied}");

    // A policy that does not name the tool.
    fs::write(&policy, "ledger.other\n").unwrap();
    let denied = gate.run(|| settle(1, 100)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRejected);
    assert_eq!(denied.detail(), Some("ledger.settle is not in the policy"));

    // A policy that cannot be read (a directory where the file should be).
    fs::remove_file(&policy).unwrap();
    fs::create_dir(&policy).unwrap();
    let denied = gate.run(|| settle(1, 100)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRejected);
    assert!(
        denied.detail().unwrap().contains("Is a directory"),
        "{denied}"
    );
    assert_eq!(count(&SETTLEMENTS), settlements, "no body ran");

    // The policy that names it approves it: the refusals above were the approver's.
    fs::remove_dir(&policy).unwrap();
    fs::write(&policy, "ledger.settle\n").unwrap();
    assert_eq!(gate.run(|| settle(1, 100)).unwrap(), 100);
    assert_eq!(count(&SETTLEMENTS), settlements + 1);
}

#[test]
fn an_approver_whose_operator_is_gone_refuses_the_call() {
    let _serial = serial();
    // Requests go to an operator over a channel; the operator has hung up.
    let (to_operator, from_agent) = mpsc::channel::<(String, mpsc::Sender<bool>)>();
    drop(from_agent);
    let to_operator = Mutex::new(to_operator);
    let gate = gates::approved(Mode::FullAuto, move |request: &ApprovalRequest<'_>| {
        let (answer, answered) = mpsc::channel();
        let sent = to_operator
            .lock()
            .unwrap()
            .send((request.tool.id.to_owned(), answer));
        match sent.map(|()| answered.recv_timeout(Duration::from_secs(5))) {
            Ok(Ok(true)) => Approval::Approve,
            Ok(Ok(false)) => Approval::Reject("the operator said no".into()),
            Ok(Err(error)) => Approval::Reject(format!("no answer: {error}")),
            Err(error) => Approval::Reject(format!("cannot reach the operator: {error}")),
        }
    });
    let settlements = count(&SETTLEMENTS);
    let denied = gate.run(|| settle(2, 200)).unwrap_err();
    assert_eq!(denied.code(), DenialCode::ApprovalRejected);
    assert!(
        denied
            .detail()
            .unwrap()
            .starts_with("cannot reach the operator"),
        "{denied}"
    );
    assert_eq!(count(&SETTLEMENTS), settlements);
}

// ---------------------------------------------------------------------------------------------------------
// Expiry
// ---------------------------------------------------------------------------------------------------------

/// Two-step approvals expire by a monotonic clock (`std::time::Instant`): on Linux `CLOCK_MONOTONIC`,
/// which setting the wall clock (`settimeofday`, `clock_settime(CLOCK_REALTIME)`, an NTP step) does not
/// move. The store is not reachable from outside the crate to be fed a time, and a test cannot set the
/// system clock: this test shows expiry itself, with a short time to live, and that nothing after it
/// brings an expired approval back.
#[test]
fn an_expired_two_step_approval_stays_expired() {
    let _serial = serial();
    const TTL: Duration = Duration::from_millis(200);
    let gate = full_auto_with_ttl(TTL);
    let settlements = count(&SETTLEMENTS);
    let token_of = |denied: Denied| denied.approval_token().unwrap().to_owned();

    // A request approved too late is not approved.
    let late = token_of(gate.run(|| settle(3, 300)).unwrap_err());
    std::thread::sleep(TTL + TTL / 2);
    assert_eq!(gate.approve(&late), Err(ApproveError::Expired));
    assert_eq!(gate.approve(&late), Err(ApproveError::Expired));

    // The next call asks anew, with a new token: the expired one is not reused.
    let fresh = gate.run(|| settle(3, 300)).unwrap_err();
    assert_eq!(fresh.code(), DenialCode::ApprovalPending);
    let fresh = token_of(fresh);
    assert_ne!(fresh, late);
    gate.approve(&fresh).unwrap();

    // Approved, then not used in time: the call is refused, and stays refused when retried.
    std::thread::sleep(TTL + TTL / 2);
    let expired = gate.run(|| settle(3, 300)).unwrap_err();
    assert_eq!(expired.code(), DenialCode::ApprovalExpired);
    let retried = gate.run(|| settle(3, 300)).unwrap_err();
    assert_eq!(retried.code(), DenialCode::ApprovalExpired);
    assert_eq!(gate.approve(&fresh), Err(ApproveError::Expired));
    assert_eq!(count(&SETTLEMENTS), settlements, "no body ran");

    // A new approval, used in time, runs the call once.
    let again = token_of(retried);
    assert_ne!(again, fresh);
    gate.approve(&again).unwrap();
    assert_eq!(gate.run(|| settle(3, 300)).unwrap(), 300);
    assert_eq!(count(&SETTLEMENTS), settlements + 1);
}
