//! The devops desk's lockfile (`examples/devops_desk/tools.lock.json`): it holds, and each change that
//! widens what a tool may do (an escalation removed, `callable` added, a parameter unredacted, arguments
//! recorded, a mode allowed, the risk raised) fails the check with its line. A binary of its own: the
//! lockfile is of every linked tool, and here those are the desk's alone.

#[allow(dead_code, reason = "the desk's tools are linked for their manifests")]
#[path = "../examples/devops_desk/tools.rs"]
mod tools;

use std::sync::atomic::{AtomicUsize, Ordering};

use toolgate::lockfile::{self, ChangeKind, Update};

const LOCKFILE: &str = "examples/devops_desk/tools.lock.json";

#[test]
fn the_desk_matches_its_lockfile() {
    lockfile::assert_lockfile(LOCKFILE);
}

/// The check of the current tools against the committed lockfile with `edit` applied to it: what the
/// check says had the tools changed the other way.
fn check_against(edit: impl Fn(&mut serde_json::Value)) -> Vec<(ChangeKind, String)> {
    let text = std::fs::read_to_string(lockfile::resolve(LOCKFILE.as_ref())).unwrap();
    let mut locked: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut locked);
    let dir = std::env::temp_dir().join(format!("toolgate-desk-lock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let path = dir.join(format!("{}.json", NEXT.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, serde_json::to_string_pretty(&locked).unwrap()).unwrap();
    let result = lockfile::check_with(&path, toolgate::manifests(), Update::Check);
    let _ = std::fs::remove_file(&path);
    match result {
        Ok(()) => Vec::new(),
        Err(error) => error
            .changes()
            .iter()
            .map(|c| (c.kind, c.to_string()))
            .collect(),
    }
}

fn tool<'a>(locked: &'a mut serde_json::Value, id: &str) -> &'a mut serde_json::Value {
    locked
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|t| t["id"] == id)
        .unwrap()
}

#[test]
fn each_widening_of_a_desk_tool_fails_the_check() {
    type Edit = fn(&mut serde_json::Value);
    // Each edit makes the lockfile say what the code said before a change: the check must fail, first
    // among its lines, with the widening that change is.
    let cases: [(Edit, ChangeKind, &str); 6] = [
        (
            |l| tool(l, "shell.run")["escalate"] = "strict_classify".into(),
            ChangeKind::Widened,
            "shell.run: escalate strict_classify -> classify",
        ),
        (
            |l| tool(l, "volume.delete")["callable"] = false.into(),
            ChangeKind::Widened,
            "volume.delete: callable false -> true",
        ),
        (
            |l| tool(l, "shell.run")["redact"] = serde_json::json!(["command", "token"]),
            ChangeKind::Widened,
            "shell.run: redact [\"command\", \"token\"] -> [\"token\"]",
        ),
        (
            |l| tool(l, "shell.run")["record_arguments"] = false.into(),
            ChangeKind::Widened,
            "shell.run: record_arguments false -> true",
        ),
        (
            |l| tool(l, "service.restart")["allowed_modes"] = serde_json::json!(["FULL_AUTO"]),
            ChangeKind::NewlyAllowedMode,
            "service.restart: allowed_modes [FULL_AUTO] -> [PARTIAL_AUTO, FULL_AUTO] (now allowed in \
             PARTIAL_AUTO)",
        ),
        (
            |l| tool(l, "deploy.plan")["risk_level"] = "READ_ONLY".into(),
            ChangeKind::RiskEscalation,
            "deploy.plan: risk_level READ_ONLY -> PROPOSE_ONLY",
        ),
    ];
    for (edit, kind, line) in cases {
        let changes = check_against(edit);
        let (first_kind, first_line) = changes.first().expect("the check fails");
        assert_eq!(*first_kind, kind, "{changes:?}");
        assert!(first_line.ends_with(line), "{first_line}");
    }
    // The lockfile as committed: no change.
    assert!(check_against(|_| {}).is_empty());
}
