//! The tool lockfile: writing it, checking it, and the order and wording of the differences.

use std::path::{Path, PathBuf};

use toolgate::lockfile::{self, ChangeKind, LockfileError, Update};
use toolgate::policy::ModeSet;
use toolgate::{Mode, Risk, ToolManifest, tool};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Look a user up.
#[tool(risk = "READ_ONLY", domain = "users")]
#[allow(dead_code, reason = "registered for its manifest, never called")]
fn get_user() -> Result<(), BoxError> {
    Ok(())
}

/// Label a user.
#[tool(risk = "LOW_WRITE", domain = "users", modes = [PARTIAL_AUTO])]
#[allow(dead_code, reason = "registered for its manifest, never called")]
fn label_user() -> Result<(), BoxError> {
    Ok(())
}

/// Delete a user.
#[tool(risk = "HIGH_WRITE", domain = "users")]
#[allow(dead_code, reason = "registered for its manifest, never called")]
fn delete_user() -> Result<(), BoxError> {
    Ok(())
}

/// How risky a job is.
fn classify(command: &str, _token: &str) -> Risk {
    if command.starts_with("sudo") {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

/// Run a job.
#[tool(
    risk = "LOW_WRITE",
    domain = "users",
    callable,
    escalate = classify,
    redact = [token],
    record_arguments
)]
#[allow(dead_code, reason = "registered for its manifest, never called")]
fn run_job(command: String, token: String) -> Result<(), BoxError> {
    let _ = (command, token);
    Ok(())
}

/// A directory of its own under the system's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "toolgate-lockfile-test-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self) -> PathBuf {
        self.0.join("tools.lock.json")
    }

    /// A new folder `name` whose lockfile is [`EXPECTED`], and that lockfile's path.
    fn locked(name: &str) -> (TempDir, PathBuf) {
        let dir = TempDir::new(name);
        let path = dir.file();
        std::fs::write(&path, EXPECTED).unwrap();
        (dir, path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn base() -> Vec<ToolManifest> {
    toolgate::manifests().copied().collect()
}

fn tool_mut<'a>(set: &'a mut [ToolManifest], id: &str) -> &'a mut ToolManifest {
    set.iter_mut().find(|m| m.id == id).unwrap()
}

/// The change lines of a mismatch, without the header (which names the temporary path) and the advice.
fn change_lines(error: &LockfileError) -> Vec<String> {
    let text = error.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("the tools differ from the lockfile "),
        "{text}"
    );
    assert_eq!(
        *lines.last().unwrap(),
        "review them; to accept them, run the tests once with TOOLGATE_LOCKFILE=overwrite \
         (`TOOLGATE_LOCKFILE=overwrite cargo test`) and commit the lockfile"
    );
    lines[1..lines.len() - 1]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

/// The lockfile of this binary's tools, as `lockfile::render` writes it.
const EXPECTED: &str = include_str!("lockfile/expected.json");

#[test]
fn overwrite_writes_the_sorted_manifests_without_source_lines() {
    let dir = TempDir::new("overwrite");
    let path = dir.file();
    let mut reversed = base();
    reversed.reverse();
    lockfile::check_with(&path, &reversed, Update::Overwrite).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), EXPECTED);
    assert_eq!(lockfile::render(toolgate::manifests()), EXPECTED);
}

#[test]
fn overwrite_creates_missing_directories_and_replaces_a_stale_file() {
    let dir = TempDir::new("stale");
    let path = dir.0.join("nested").join("tools.lock.json");
    let mut old = base();
    tool_mut(&mut old, "users.get_user").description = "Old text.";
    lockfile::check_with(&path, &old, Update::Overwrite).unwrap();
    assert!(lockfile::check_with(&path, base(), Update::Check).is_err());
    lockfile::check_with(&path, base(), Update::Overwrite).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), EXPECTED);
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["tools.lock.json"], "no temporary file left");
}

#[test]
fn check_passes_on_the_same_set_in_any_order_and_formatting() {
    let (_dir, path) = TempDir::locked("same");
    lockfile::check_with(&path, base(), Update::Check).unwrap();
    lockfile::check_with(&path, base().iter().rev(), Update::Check).unwrap();

    let value: serde_json::Value = serde_json::from_str(EXPECTED).unwrap();
    let mut entries = value.as_array().unwrap().clone();
    entries.reverse();
    std::fs::write(&path, serde_json::to_string(&entries).unwrap()).unwrap();
    lockfile::check_with(&path, base(), Update::Check).unwrap();

    std::fs::write(&path, EXPECTED.replace('\n', "\r\n")).unwrap();
    lockfile::check_with(&path, base(), Update::Check).unwrap();
}

#[test]
fn the_source_line_is_not_locked() {
    let (_dir, path) = TempDir::locked("line");
    let mut moved = base();
    for m in &mut moved {
        m.source.line += 100;
        m.source.file = "elsewhere.rs";
    }
    lockfile::check_with(&path, &moved, Update::Check).unwrap();
}

#[test]
fn escalations_and_newly_allowed_modes_come_first() {
    let (_dir, path) = TempDir::locked("escalation");

    let mut now = base();
    let get = tool_mut(&mut now, "users.get_user");
    get.description = "Find a user.";
    get.risk_level = Risk::ProposeOnly;
    tool_mut(&mut now, "users.label_user").allowed_modes =
        ModeSet::of(&[Mode::PartialAuto, Mode::FullAuto]);
    let mut archive = *tool_mut(&mut now, "users.delete_user");
    archive.id = "users.archive_user";
    now.retain(|m| m.id != "users.delete_user");
    now.push(archive);

    let error = lockfile::check_with(&path, &now, Update::Check).unwrap_err();
    let kinds: Vec<ChangeKind> = error.changes().iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [
            ChangeKind::RiskEscalation,
            ChangeKind::NewlyAllowedMode,
            ChangeKind::NewTool,
            ChangeKind::RemovedTool,
            ChangeKind::Changed,
        ]
    );
    assert_eq!(
        change_lines(&error),
        [
            "  risk escalation    users.get_user: risk_level READ_ONLY -> PROPOSE_ONLY",
            "  newly allowed mode users.label_user: allowed_modes [PARTIAL_AUTO] -> \
             [PARTIAL_AUTO, FULL_AUTO] (now allowed in FULL_AUTO)",
            "  new tool           users.archive_user: (absent) -> risk_level HIGH_WRITE, \
             allowed_modes [FULL_AUTO], side_effects true",
            "  removed tool       users.delete_user: risk_level HIGH_WRITE, \
             allowed_modes [FULL_AUTO], side_effects true -> (absent)",
            "  changed            users.get_user: description \"Look a user up.\" -> \"Find a user.\"",
        ]
    );
    assert!(error.to_string().contains(&path.display().to_string()));
    assert_eq!(
        format!("{error:?}"),
        error.to_string(),
        "unwrap is readable"
    );
}

#[test]
fn lowered_risk_and_narrowed_modes_are_plain_changes() {
    let (_dir, path) = TempDir::locked("lowered");

    let mut now = base();
    let delete = tool_mut(&mut now, "users.delete_user");
    delete.risk_level = Risk::LowWrite;
    delete.side_effects = false;
    delete.idempotent = true;
    delete.open_world = true;
    delete.domain = None;
    delete.source.module_path = "lockfile::moved";
    tool_mut(&mut now, "users.get_user").allowed_modes = ModeSet::of(&[Mode::Shadow]);

    let error = lockfile::check_with(&path, &now, Update::Check).unwrap_err();
    assert!(
        error
            .changes()
            .iter()
            .all(|c| c.kind == ChangeKind::Changed)
    );
    assert_eq!(
        change_lines(&error),
        [
            "  changed            users.delete_user: risk_level HIGH_WRITE -> LOW_WRITE",
            "  changed            users.delete_user: side_effects true -> false",
            "  changed            users.delete_user: idempotent false -> true",
            "  changed            users.delete_user: open_world false -> true",
            "  changed            users.delete_user: domain \"users\" -> null",
            "  changed            users.delete_user: source.module_path \"lockfile\" -> \
             \"lockfile::moved\"",
            "  changed            users.get_user: allowed_modes [SHADOW, ADVISORY, PARTIAL_AUTO, \
             FULL_AUTO] -> [SHADOW]",
        ]
    );
}

#[test]
fn a_mode_swap_counts_as_newly_allowed() {
    let (_dir, path) = TempDir::locked("swap");
    let mut now = base();
    tool_mut(&mut now, "users.label_user").allowed_modes = ModeSet::of(&[Mode::FullAuto]);
    let error = lockfile::check_with(&path, &now, Update::Check).unwrap_err();
    assert_eq!(
        change_lines(&error),
        [
            "  newly allowed mode users.label_user: allowed_modes [PARTIAL_AUTO] -> [FULL_AUTO] \
          (now allowed in FULL_AUTO)"
        ]
    );
}

#[test]
fn a_missing_lockfile_says_how_to_create_it() {
    let dir = TempDir::new("missing");
    let path = dir.file();
    let error = lockfile::check_with(&path, base(), Update::Check).unwrap_err();
    assert!(matches!(error, LockfileError::Missing { .. }));
    assert_eq!(
        error.to_string(),
        format!(
            "tool lockfile {} does not exist; to create it, run the tests once with \
             TOOLGATE_LOCKFILE=overwrite (`TOOLGATE_LOCKFILE=overwrite cargo test`), then review \
             and commit it",
            path.display()
        )
    );
    assert!(!path.exists(), "a check never writes");
}

#[test]
fn an_invalid_lockfile_is_an_error_not_a_mismatch() {
    let dir = TempDir::new("invalid");
    let path = dir.file();
    for text in [
        "not json",
        "{}",
        &EXPECTED.replace(
            "\"open_world\": false,",
            "\"open_world\": false, \"extra\": 1,",
        ),
        &EXPECTED.replace("\"HIGH_WRITE\"", "\"VERY_HIGH\""),
    ] {
        std::fs::write(&path, text).unwrap();
        let error = lockfile::check_with(&path, base(), Update::Check).unwrap_err();
        assert!(matches!(error, LockfileError::Invalid { .. }), "{text}");
        assert!(error.to_string().contains("TOOLGATE_LOCKFILE=overwrite"));
    }
}

#[test]
fn relative_paths_are_relative_to_the_crate_root() {
    assert_eq!(
        lockfile::resolve(Path::new("tools.lock.json")),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tools.lock.json")
    );
    let absolute = std::env::temp_dir().join("x.json");
    assert_eq!(lockfile::resolve(&absolute), absolute);
}

/// The only test that reads `TOOLGATE_LOCKFILE`: every other one passes the update mode explicitly, so
/// setting the variable here cannot change what they do.
#[test]
fn the_environment_variable_selects_overwrite() {
    fn set(value: Option<&str>) {
        // SAFETY: no other test in this binary reads TOOLGATE_LOCKFILE, and the environment is read only
        // through `std::env`, which serializes access; nothing here calls C code that reads it.
        unsafe {
            match value {
                Some(value) => std::env::set_var(lockfile::LOCKFILE_ENV_VAR, value),
                None => std::env::remove_var(lockfile::LOCKFILE_ENV_VAR),
            }
        }
    }
    let dir = TempDir::new("env");
    let path = dir.file();

    set(None);
    assert_eq!(Update::from_env().unwrap(), Update::Check);
    let error = lockfile::check(&path).unwrap_err();
    assert!(matches!(error, LockfileError::Missing { .. }));
    let panic = std::panic::catch_unwind(|| lockfile::assert_lockfile(&path)).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("TOOLGATE_LOCKFILE=overwrite"), "{message}");

    set(Some("overwrite"));
    assert_eq!(Update::from_env().unwrap(), Update::Overwrite);
    lockfile::check(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), EXPECTED);

    set(Some("check"));
    lockfile::assert_lockfile(&path);
    let mut escalated = base();
    tool_mut(&mut escalated, "users.get_user").risk_level = Risk::HighWrite;
    let error = lockfile::check_manifests(&path, &escalated).unwrap_err();
    assert_eq!(error.changes().len(), 1);
    assert_eq!(error.changes()[0].kind, ChangeKind::RiskEscalation);
    assert_eq!(error.changes()[0].id, "users.get_user");

    set(Some("overwirte"));
    let error = lockfile::check(&path).unwrap_err();
    assert!(matches!(error, LockfileError::BadEnv { .. }));
    assert_eq!(
        error.to_string(),
        "environment variable TOOLGATE_LOCKFILE is `overwirte`; expected `overwrite`, `check` or unset"
    );

    set(Some(""));
    lockfile::check(&path).unwrap();
    set(None);
}

#[test]
fn what_the_declaration_says_beyond_the_manifest_is_locked_widenings_first() {
    let dir = TempDir::new("behaviour");
    let path = dir.file();
    // The lockfile of before: `run_job` neither callable nor escalated nor recording, `get_user`
    // callable, and a redaction and an escalation that are gone now.
    let before = EXPECTED
        .replace(
            "\"callable\": true,\n    \"escalate\": \"classify\",\n    \"redact\": [\n      \"token\"\n    ],\n    \"record_arguments\": true",
            "\"callable\": false,\n    \"escalate\": null,\n    \"redact\": [\"command\", \"token\"],\n    \"record_arguments\": false",
        )
        .replacen(
            "\"callable\": false,\n    \"escalate\": null,",
            "\"callable\": false,\n    \"escalate\": \"sudo_check\",",
            1,
        )
        .replacen("\"callable\": false", "\"callable\": true", 2)
        .replacen("\"callable\": true", "\"callable\": false", 1);
    assert_ne!(before, EXPECTED);
    std::fs::write(&path, &before).unwrap();
    let error = lockfile::check_with(&path, toolgate::manifests(), Update::Check).unwrap_err();
    assert_eq!(
        change_lines(&error),
        [
            "  widened            users.delete_user: escalate sudo_check -> (none)",
            "  widened            users.run_job: callable false -> true",
            "  widened            users.run_job: redact [\"command\", \"token\"] -> [\"token\"]",
            "  widened            users.run_job: record_arguments false -> true",
            "  changed            users.get_user: callable true -> false",
            "  changed            users.run_job: escalate (none) -> classify",
        ]
    );
}

#[test]
fn a_lockfile_with_no_tool_to_lock_fails_in_both_modes_and_says_how_to_link_them() {
    let dir = TempDir::new("empty");
    let path = dir.file();
    for update in [Update::Overwrite, Update::Check] {
        let error =
            lockfile::check_with(&path, std::iter::empty::<&ToolManifest>(), update).unwrap_err();
        assert!(
            matches!(error, LockfileError::NothingToLock { .. }),
            "{error}"
        );
        let text = error.to_string();
        assert!(text.contains("no tool is linked"), "{text}");
        assert!(text.contains("use my_tools as _;"), "{text}");
        assert!(!path.exists(), "nothing is written");
    }
    // An empty lockfile written before does not make an empty set pass either.
    std::fs::write(&path, "[]\n").unwrap();
    let error = lockfile::check_with(&path, std::iter::empty::<&ToolManifest>(), Update::Check)
        .unwrap_err();
    assert!(matches!(error, LockfileError::NothingToLock { .. }));
}

#[test]
fn a_lockfile_of_before_these_keys_lists_what_they_add() {
    let dir = TempDir::new("older");
    let path = dir.file();
    let mut value: serde_json::Value = serde_json::from_str(EXPECTED).unwrap();
    for entry in value.as_array_mut().unwrap() {
        let entry = entry.as_object_mut().unwrap();
        for key in ["callable", "escalate", "redact", "record_arguments"] {
            entry.remove(key);
        }
    }
    std::fs::write(&path, serde_json::to_string(&value).unwrap()).unwrap();
    let error = lockfile::check_with(&path, toolgate::manifests(), Update::Check).unwrap_err();
    let kinds: Vec<ChangeKind> = error.changes().iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [
            ChangeKind::Widened,
            ChangeKind::Widened,
            ChangeKind::Changed,
            ChangeKind::Changed
        ],
        "{error}"
    );
}

#[test]
fn untrusted_output_is_locked_and_dropping_it_is_a_widening() {
    let dir = TempDir::new("untrusted");
    let path = dir.file();
    let mut value: serde_json::Value = serde_json::from_str(EXPECTED).unwrap();
    let get_user = value
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|entry| entry["id"] == "users.get_user")
        .unwrap();
    get_user["untrusted_output"] = serde_json::Value::Bool(true);
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    // The tool no longer declares it: the taint latch no longer closes after it.
    let error = lockfile::check_with(&path, toolgate::manifests(), Update::Check).unwrap_err();
    assert_eq!(
        change_lines(&error),
        ["  widened            users.get_user: untrusted_output true -> false"]
    );

    // The other way: declaring it is a change, and the lockfile writes it beside `open_world`.
    std::fs::write(&path, EXPECTED).unwrap();
    let mut declared = base();
    tool_mut(&mut declared, "users.get_user").untrusted_output = true;
    let error = lockfile::check_with(&path, &declared, Update::Check).unwrap_err();
    assert_eq!(
        change_lines(&error),
        ["  changed            users.get_user: untrusted_output false -> true"]
    );
    lockfile::check_with(&path, &declared, Update::Overwrite).unwrap();
    let written = std::fs::read_to_string(&path).unwrap();
    assert_eq!(written.matches("\"untrusted_output\": true").count(), 1);
    assert!(
        written.contains("\"open_world\": false,\n    \"untrusted_output\": true,\n    \"source\"")
    );
}

#[test]
fn irreversible_target_evidence_and_rollback_are_locked_and_dropping_them_is_a_widening() {
    let dir = TempDir::new("irreversible");
    let path = dir.file();
    let mut value: serde_json::Value = serde_json::from_str(EXPECTED).unwrap();
    let delete = value
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|entry| entry["id"] == "users.delete_user")
        .unwrap();
    delete["irreversible"] = serde_json::Value::Bool(true);
    delete["target"] = serde_json::Value::from("id");
    delete["evidence"] = serde_json::Value::from("describe_user");
    delete["rollback"] = serde_json::Value::from("restore_plan");
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    // The tool no longer declares them: it asks less of whoever approves it.
    let error = lockfile::check_with(&path, toolgate::manifests(), Update::Check).unwrap_err();
    assert_eq!(
        change_lines(&error),
        [
            "  widened            users.delete_user: irreversible true -> false",
            "  widened            users.delete_user: target id -> (none)",
            "  widened            users.delete_user: evidence describe_user -> (none)",
            "  widened            users.delete_user: rollback restore_plan -> (none)",
        ]
    );

    // Declaring them is a change, written beside what the manifest says.
    std::fs::write(&path, EXPECTED).unwrap();
    let mut declared = base();
    let tool = tool_mut(&mut declared, "users.delete_user");
    tool.irreversible = true;
    tool.target = Some("id");
    let error = lockfile::check_with(&path, &declared, Update::Check).unwrap_err();
    assert_eq!(
        change_lines(&error),
        [
            "  changed            users.delete_user: irreversible false -> true",
            "  changed            users.delete_user: target (none) -> id",
        ]
    );
    lockfile::check_with(&path, &declared, Update::Overwrite).unwrap();
    let written = std::fs::read_to_string(&path).unwrap();
    assert_eq!(written.matches("\"irreversible\": true").count(), 1);
    assert_eq!(written.matches("\"target\": \"id\"").count(), 1);
    // A lockfile written before these keys still matches the tools that declare none.
    assert!(!EXPECTED.contains("irreversible"));
    lockfile::check_with(&path, &declared, Update::Check).unwrap();
}

#[test]
fn out_of_band_is_locked_and_dropping_it_is_a_widening() {
    let dir = TempDir::new("out-of-band");
    let path = dir.file();
    let mut value: serde_json::Value = serde_json::from_str(EXPECTED).unwrap();
    let delete = value
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|entry| entry["id"] == "users.delete_user")
        .unwrap();
    delete["out_of_band"] = serde_json::Value::Bool(true);
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    // The tool's calls may be approved in band again: by whoever drives the client.
    let error = lockfile::check_with(&path, toolgate::manifests(), Update::Check).unwrap_err();
    assert_eq!(
        change_lines(&error),
        ["  widened            users.delete_user: out_of_band true -> false"]
    );

    std::fs::write(&path, EXPECTED).unwrap();
    let mut declared = base();
    tool_mut(&mut declared, "users.delete_user").out_of_band = true;
    let error = lockfile::check_with(&path, &declared, Update::Check).unwrap_err();
    assert_eq!(
        change_lines(&error),
        ["  changed            users.delete_user: out_of_band false -> true"]
    );
    lockfile::check_with(&path, &declared, Update::Overwrite).unwrap();
    let written = std::fs::read_to_string(&path).unwrap();
    assert_eq!(written.matches("\"out_of_band\": true").count(), 1);
}
