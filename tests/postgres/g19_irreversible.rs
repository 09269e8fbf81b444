//! Irreversible calls through the PostgreSQL store: the request keeps the call's target, what its
//! evidence probe read and its rollback plan, and `toolgate approvals show` shows them escaped; an
//! approval from the command takes the target typed back (`--confirm`), checked in the statement that
//! answers, so that neither a missing nor a mistyped one nor two operators racing approve anything but
//! once; the approval is bound to the target's state, and a call made once it changed is asked again;
//! a database at the schema's previous version migrates, and its requests still answer.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Mutex;

use serde_json::{Value, json};
use toolgate::approval::store::{Answer, ApproveError};
use toolgate::postgres::{PostgresStore, RequestState};
use toolgate::{DenialCode, Denied, Gate, Mode, Rollback, tool};

use crate::common::postgres::query;
use crate::support::bank::{CHILD_ROLE, stdout};
use crate::support::{
    assert_shown_escaped, cli, cli_exits, code, out, parent_database, sha256_hex, text,
    toolgate_exits, wait,
};

// ---------------------------------------------------------------------------------------------------
// The world the tools act on: instances and their state, which the evidence probe reads. The bodies
// count their runs and leave the world as the probe reads it, so that a call made again after it ran is
// the same call (its binding unchanged); a test changes the world itself where it means to.

static WORLD: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
static RUNS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn set_state(instance: &str, state: &str) {
    WORLD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(instance.to_owned(), state.to_owned());
}

/// How many times a body ran for `key`.
fn runs(key: &str) -> usize {
    RUNS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|r| *r == key)
        .count()
}

fn ran(key: String) {
    RUNS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(key);
}

/// The evidence probe: the instance as the world has it now.
fn describe(instance: &str) -> Result<Value, String> {
    let world = WORLD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match world.get(instance) {
        Some(state) => Ok(json!({"instance": instance, "state": state})),
        None => Err(format!("no instance {instance}")),
    }
}

/// The rollback plan: a restore from the instance's last snapshot, through the callable `restore`;
/// none for an instance noted as having no snapshot.
fn undo(instance: &str, note: &str) -> Result<Rollback, String> {
    if note == "no snapshot" {
        return Err(format!("{instance} has no snapshot to restore"));
    }
    Ok(Rollback::call(
        "pgirr.restore",
        json!({"instance": instance}),
    ))
}

/// Terminate an instance: its disks go with it, and it cannot be brought back.
#[tool(
    risk = "HIGH_WRITE",
    domain = "pgirr",
    callable,
    record_arguments,
    target = instance,
    evidence = describe,
    rollback = undo,
    irreversible
)]
pub(crate) fn terminate(instance: String, note: String) -> Result<(), Denied> {
    let _ = note;
    ran(format!("terminate:{instance}"));
    Ok(())
}

/// Restore an instance from its last snapshot.
#[tool(risk = "HIGH_WRITE", domain = "pgirr", callable, record_arguments)]
pub(crate) fn restore(instance: String) -> Result<(), Denied> {
    ran(format!("restore:{instance}"));
    Ok(())
}

/// Label an instance: an ordinary call that asks for an approval, with no target.
#[tool(risk = "HIGH_WRITE", domain = "pgirr", record_arguments)]
pub(crate) fn label(instance: String, label: String) -> Result<(), Denied> {
    ran(format!("label:{instance}/{label}"));
    Ok(())
}

/// A FULL_AUTO gate of the agent `ops` over a store of `url`, and the store.
fn ops_gate(url: &str) -> (std::sync::Arc<PostgresStore>, Gate) {
    let store = std::sync::Arc::new(PostgresStore::connect(url).expect("the store"));
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("ops")
        .approval_store_shared(store.clone())
        .build()
        .expect("a gate");
    (store, gate)
}

/// The refusal of a call that waits for an operator with `expected`, and the id of its request.
#[track_caller]
fn filed<T>(result: Result<T, Denied>, expected: DenialCode) -> (Denied, i64) {
    let denied = match result {
        Ok(_) => panic!("the call ran without an approval"),
        Err(denied) => denied,
    };
    assert_eq!(denied.code(), expected, "{denied}");
    assert!(denied.approval_token().is_some(), "no token: {denied}");
    let id = denied
        .approval_request_id()
        .unwrap_or_else(|| panic!("no request id: {denied}"))
        .parse()
        .expect("a numeric id");
    (denied, id)
}

/// Where the request `id` stands.
fn state(store: &PostgresStore, id: i64) -> RequestState {
    wait(store.show(id)).unwrap().expect("the request").state
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn an_irreversible_call_is_approved_from_the_command_only_with_its_target_typed_back() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "irr_confirm") else {
        return;
    };
    let (store, gate) = ops_gate(&url);
    set_state("i-0abc", "running");
    // The note is the agent's, with a right-to-left override: an operator must see it for what it is.
    let note = "decommission \u{202e}gnp.exe";
    let call = || terminate("i-0abc".into(), note.into());

    // The call files a request, which keeps the target, the state read and the plan.
    let (denied, id) = filed(gate.run(call), DenialCode::ApprovalPending);
    assert_eq!(denied.target(), Some("i-0abc"));
    let evidence = r#"{"instance":"i-0abc","state":"running"}"#;
    assert_eq!(denied.evidence(), Some(evidence));
    let request = wait(store.show(id)).unwrap().expect("the request");
    assert!(request.irreversible);
    assert_eq!(request.target.as_deref(), Some("i-0abc"));
    assert_eq!(request.evidence.as_deref(), Some(evidence));
    assert_eq!(
        request.rollback.as_deref(),
        Some(r#"{"arguments":{"instance":"i-0abc"},"kind":"call","tool":"pgirr.restore"}"#)
    );
    assert_eq!(
        request.rollback_plan(),
        Some(Rollback::call(
            "pgirr.restore",
            json!({"instance": "i-0abc"})
        ))
    );
    // The binding read back holds the target and the digest of what the approver is shown.
    assert_eq!(request.binding.target.as_deref(), Some("i-0abc"));
    assert_eq!(
        request.binding.evidence_digest.as_deref(),
        Some(sha256_hex(evidence).as_str())
    );
    assert_eq!(request.state, RequestState::Pending);

    // `show` shows the target, the evidence and the plan, says how to approve, and escapes the note.
    let shown = cli_exits(&url, &["show", &id.to_string()], 0);
    let printed = stdout(&shown);
    for expected in [
        "target    i-0abc (irreversible: the call cannot be undone)\n",
        &format!("evidence  {evidence} (the target when the call was made"),
        "rollback  call `pgirr.restore` with {\"instance\":\"i-0abc\"}\n",
        &format!("approve   `toolgate approvals approve {id} --confirm i-0abc`"),
        r"decommission \u{202e}gnp.exe",
    ] {
        assert!(printed.contains(expected), "{expected:?} not in\n{printed}");
    }
    assert_shown_escaped("the note", "\u{202e}", &shown);
    // `list` marks it.
    let listed = stdout(&cli_exits(&url, &["list"], 0));
    let row = listed
        .lines()
        .find(|line| line.starts_with(&format!("{id} ")))
        .unwrap_or_else(|| panic!("no row for {id}:\n{listed}"));
    assert!(row.contains("pgirr.terminate (irreversible)"), "{listed}");
    assert!(listed.contains("--confirm TARGET"), "{listed}");
    assert_shown_escaped("the listed note", "\u{202e}", &cli(&url, &["list"]));

    // Without --confirm, or with anything but the target exactly: refused, and the request waits.
    let id_text = id.to_string();
    let bare = cli_exits(&url, &["approve", &id_text], 1);
    let said = stderr(&bare);
    assert!(
        said.contains(&format!(
            "`toolgate approvals approve {id} --confirm i-0abc`"
        )) && said.contains("still waits"),
        "{}",
        out(&bare)
    );
    for wrong in ["i-0abd", "I-0ABC", "i-0abc ", " i-0abc", "i-0ab", ""] {
        let refused = cli_exits(&url, &["approve", &id_text, "--confirm", wrong], 1);
        assert!(
            stderr(&refused).contains(&format!("--confirm `{wrong}` is not its target `i-0abc`")),
            "{wrong:?}: {}",
            out(&refused)
        );
        assert_eq!(state(&store, id), RequestState::Pending, "{wrong:?}");
    }
    // A mistyped target with a hidden character is named escaped.
    let hidden = cli_exits(
        &url,
        &["approve", &id_text, "--confirm", "i-0abc\u{200b}"],
        1,
    );
    assert_shown_escaped("the typed target", "\u{200b}", &hidden);
    // Never for the session, even with the target typed back.
    let session = cli_exits(
        &url,
        &["approve", &id_text, "--confirm", "i-0abc", "--for-session"],
        1,
    );
    assert!(
        stderr(&session).contains("ask every time"),
        "{}",
        out(&session)
    );
    assert_eq!(state(&store, id), RequestState::Pending);
    // Nothing was approved: the call still waits, and its body has not run.
    filed(gate.run(call), DenialCode::ApprovalPending);
    assert_eq!(runs("terminate:i-0abc"), 0);

    // With the target typed back: approved once, and its call runs once.
    let approved = cli_exits(&url, &["approve", &id_text, "--confirm", "i-0abc"], 0);
    assert!(
        stdout(&approved).contains(&format!(
            "approved request {id}: pgirr.terminate (HIGH_WRITE) on `i-0abc`"
        )),
        "{}",
        out(&approved)
    );
    let answered = stdout(&cli_exits(&url, &["show", &id_text], 0));
    assert!(
        answered.contains("approved by alice (confirmed `i-0abc`), not used yet"),
        "{answered}"
    );
    assert!(!answered.contains("approve   "), "{answered}");
    assert_eq!(
        state(&store, id),
        RequestState::Answered(Answer::Approve {
            by: "alice".into(),
            for_session: false,
            confirmation: Some("i-0abc".into()),
        })
    );
    gate.run(call).expect("the approved call runs");
    assert_eq!(runs("terminate:i-0abc"), 1);
    assert_eq!(code(gate.run(call)), DenialCode::ApprovalReused);
    assert_eq!(runs("terminate:i-0abc"), 1);
    let used = cli_exits(&url, &["approve", &id_text, "--confirm", "i-0abc"], 1);
    assert!(stderr(&used).contains("used"), "{}", out(&used));
    // A rejection needs nothing typed.
    set_state("i-0rej", "running");
    let (_, rejected) = filed(
        gate.run(|| terminate("i-0rej".into(), "x".into())),
        DenialCode::ApprovalPending,
    );
    cli_exits(
        &url,
        &["reject", &rejected.to_string(), "--reason", "not today"],
        0,
    );
    assert_eq!(
        code(gate.run(|| terminate("i-0rej".into(), "x".into()))),
        DenialCode::ApprovalRejected
    );
    assert_eq!(runs("terminate:i-0rej"), 0);
    // A target that starts like an option is typed back as it is.
    set_state("-i-0dash", "running");
    let dash = || terminate("-i-0dash".into(), "x".into());
    let (_, dashed) = filed(gate.run(dash), DenialCode::ApprovalPending);
    let shown = stdout(&cli_exits(&url, &["show", &dashed.to_string()], 0));
    assert!(
        shown.contains(&format!(
            "`toolgate approvals approve {dashed} --confirm -i-0dash`"
        )),
        "{shown}"
    );
    cli_exits(
        &url,
        &["approve", &dashed.to_string(), "--confirm", "-i-0dash"],
        0,
    );
    gate.run(dash).expect("approved with its target typed back");
    assert_eq!(runs("terminate:-i-0dash"), 1);
}

#[test]
fn the_store_refuses_an_approval_without_the_target_on_every_channel() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "irr_channels") else {
        return;
    };
    let (store, gate) = ops_gate(&url);
    set_state("i-0tok", "running");
    let call = || terminate("i-0tok".into(), "by token".into());
    let (denied, id) = filed(gate.run(call), DenialCode::ApprovalPending);
    let token = denied.approval_token().unwrap().to_owned();
    // By token, through a gate: a plain approval, a mistyped target, another request's target.
    assert_eq!(
        gate.approve(&token),
        Err(ApproveError::ConfirmationMismatch)
    );
    for wrong in ["i-0to", "i-0tok\n", "I-0TOK"] {
        assert_eq!(
            gate.approve_typed(&token, "ops", wrong),
            Err(ApproveError::ConfirmationMismatch),
            "{wrong:?}"
        );
    }
    // By id, through the store: the same.
    let typed = |text: Option<&str>, for_session: bool| Answer::Approve {
        by: "ops".into(),
        for_session,
        confirmation: text.map(str::to_owned),
    };
    assert_eq!(
        wait(store.answer_id(id, typed(None, false))),
        Err(ApproveError::ConfirmationMismatch)
    );
    assert_eq!(
        wait(store.answer_id(id, typed(Some("i-0tok "), false))),
        Err(ApproveError::ConfirmationMismatch)
    );
    assert_eq!(state(&store, id), RequestState::Pending);
    let row = query(
        &url,
        &format!(
            "SELECT answered_at, answer, confirmation FROM toolgate.approvals WHERE id = {id}"
        ),
    );
    assert_eq!(
        row,
        vec![vec![None, None, None]],
        "a refused approval left a trace"
    );
    filed(gate.run(call), DenialCode::ApprovalPending);
    assert_eq!(runs("terminate:i-0tok"), 0);
    // The right one, asking for the session too: approved for this call alone.
    let answered = wait(store.answer_id(id, typed(Some("i-0tok"), true))).unwrap();
    assert_eq!(
        answered.state,
        RequestState::Answered(typed(Some("i-0tok"), false)),
        "an irreversible call was granted for the session"
    );
    assert_eq!(
        gate.approve_typed(&token, "ops", "i-0tok"),
        Err(ApproveError::AlreadyApproved)
    );
    gate.run(call).expect("the approved call runs");
    assert_eq!(code(gate.run(call)), DenialCode::ApprovalReused);
    assert_eq!(runs("terminate:i-0tok"), 1);
    // An ordinary call needs nothing typed, and keeps none of it.
    let (denied, plain) = filed(
        gate.run(|| label("i-0tok".into(), "web".into())),
        DenialCode::ApprovalPending,
    );
    let request = wait(store.show(plain)).unwrap().unwrap();
    assert!(!request.irreversible);
    assert_eq!(
        (request.target, request.evidence, request.rollback),
        (None, None, None)
    );
    assert_eq!(
        (request.binding.target, request.binding.evidence_digest),
        (None, None)
    );
    gate.approve(denied.approval_token().unwrap()).unwrap();
    gate.run(|| label("i-0tok".into(), "web".into())).unwrap();
    assert_eq!(runs("label:i-0tok/web"), 1);
}

#[test]
fn a_target_changed_since_the_approval_is_asked_again_and_does_not_run() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "irr_evidence") else {
        return;
    };
    let (store, gate) = ops_gate(&url);
    set_state("i-0ev", "running");
    let call = || terminate("i-0ev".into(), "cleanup".into());
    let (_, first) = filed(gate.run(call), DenialCode::ApprovalPending);
    cli_exits(
        &url,
        &["approve", &first.to_string(), "--confirm", "i-0ev"],
        0,
    );
    // The instance changed after the approver saw it: the approval is for another world.
    set_state("i-0ev", "serving-traffic");
    let (denied, second) = filed(gate.run(call), DenialCode::EvidenceChanged);
    assert_ne!(second, first, "no new request shows the new state");
    assert_eq!(
        denied.evidence(),
        Some(r#"{"instance":"i-0ev","state":"serving-traffic"}"#)
    );
    assert_eq!(runs("terminate:i-0ev"), 0);
    // The first approval is spent: the world it was for is gone. The new request waits, showing the
    // state now.
    assert!(matches!(
        state(&store, first),
        RequestState::Used(Answer::Approve { .. })
    ));
    assert_eq!(state(&store, second), RequestState::Pending);
    // The instance back in the state approved does not bring the spent approval back.
    set_state("i-0ev", "running");
    assert_eq!(code(gate.run(call)), DenialCode::ApprovalReused);
    assert_eq!(runs("terminate:i-0ev"), 0);
    set_state("i-0ev", "serving-traffic");
    let shown = stdout(&cli_exits(&url, &["show", &second.to_string()], 0));
    assert!(shown.contains(r#""state":"serving-traffic""#), "{shown}");
    // Asked again in that state: the same new request, pending (the other state's approval is spent).
    let (_, again) = filed(gate.run(call), DenialCode::ApprovalPending);
    assert_eq!(again, second);
    assert_eq!(runs("terminate:i-0ev"), 0);
    // Approved for the state it is in now, it runs once.
    cli_exits(
        &url,
        &["approve", &second.to_string(), "--confirm", "i-0ev"],
        0,
    );
    gate.run(call).expect("approved for this state");
    assert_eq!(runs("terminate:i-0ev"), 1);
    // Its own answer used is told.
    assert_eq!(code(gate.run(call)), DenialCode::ApprovalReused);
    assert_eq!(runs("terminate:i-0ev"), 1);

    // And its own answer expired tells more too.
    set_state("i-0exp", "running");
    let late = || terminate("i-0exp".into(), "late".into());
    let (_, seen) = filed(gate.run(late), DenialCode::ApprovalPending);
    cli_exits(
        &url,
        &["approve", &seen.to_string(), "--confirm", "i-0exp"],
        0,
    );
    set_state("i-0exp", "stopped");
    let (_, now) = filed(gate.run(late), DenialCode::EvidenceChanged);
    cli_exits(
        &url,
        &["approve", &now.to_string(), "--confirm", "i-0exp"],
        0,
    );
    query(
        &url,
        &format!("UPDATE toolgate.approvals SET expires_at = now() WHERE id = {now}"),
    );
    assert_eq!(code(gate.run(late)), DenialCode::ApprovalExpired);
    assert_eq!(runs("terminate:i-0exp"), 0);
}

/// What migration 9 added, taken away: the table as the schema's version 8 left it.
const BACK_TO_VERSION_8: &str = "ALTER TABLE toolgate.approvals
        DROP COLUMN target, DROP COLUMN irreversible, DROP COLUMN evidence,
        DROP COLUMN evidence_digest, DROP COLUMN rollback, DROP COLUMN confirmation;
    DELETE FROM toolgate.schema_version WHERE version = 9;";

#[test]
fn a_database_at_the_previous_version_migrates_and_its_requests_still_answer() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "irr_migrate") else {
        return;
    };
    // Requests filed and answered before the migration: one pending, one approved and not used.
    let (pending, approved) = {
        let (store, gate) = ops_gate(&url);
        let (_, pending) = filed(
            gate.run(|| label("i-0mig".into(), "db".into())),
            DenialCode::ApprovalPending,
        );
        let (_, approved) = filed(
            gate.run(|| label("i-0mig".into(), "cache".into())),
            DenialCode::ApprovalPending,
        );
        wait(store.answer_id(approved, crate::support::approve("bob"))).unwrap();
        (pending, approved)
    };
    crate::common::postgres::execute(
        &url,
        &format!("{}{BACK_TO_VERSION_8}", crate::support::BACK_TO_VERSION_9),
    );
    let columns = query(
        &url,
        "SELECT count(*) FROM information_schema.columns
         WHERE table_schema = 'toolgate' AND table_name = 'approvals'
           AND column_name IN ('target', 'irreversible', 'evidence', 'evidence_digest', 'rollback',
                               'confirmation')",
    );
    assert_eq!(columns[0][0].as_deref(), Some("0"));

    // At version 8, a store and the command say to migrate, and change nothing.
    let refused = PostgresStore::connect(&url).unwrap_err().to_string();
    assert!(
        refused.contains("at version 8") && refused.contains("toolgate migrate"),
        "{refused}"
    );
    let listed = cli_exits(&url, &["list"], 3);
    assert!(
        stderr(&listed).contains("toolgate migrate"),
        "{}",
        out(&listed)
    );

    let migrated = toolgate_exits(&["migrate", "--store", &url], 0);
    assert!(
        text(&migrated).contains("from version 8 to version 15"),
        "{}",
        text(&migrated)
    );
    let versions = query(
        &url,
        "SELECT version FROM toolgate.schema_version ORDER BY version",
    );
    assert_eq!(
        versions,
        (1..=15)
            .map(|v| vec![Some(v.to_string())])
            .collect::<Vec<_>>()
    );
    // The rows filed before are ordinary calls: reversible, no target, nothing typed.
    let rows = query(
        &url,
        "SELECT irreversible, target IS NULL, evidence_digest IS NULL, confirmation IS NULL
         FROM toolgate.approvals ORDER BY id",
    );
    assert_eq!(
        rows,
        vec![
            vec![
                Some("f".into()),
                Some("t".into()),
                Some("t".into()),
                Some("t".into())
            ];
            2
        ]
    );

    // The pending request is listed and answered from the command; both calls run once.
    let (store, gate) = ops_gate(&url);
    let listed = stdout(&cli_exits(&url, &["list"], 0));
    assert!(
        listed.contains(r#"{"instance":"i-0mig","label":"db"}"#),
        "{listed}"
    );
    assert!(!listed.contains("(irreversible)"), "{listed}");
    cli_exits(&url, &["approve", &pending.to_string()], 0);
    gate.run(|| label("i-0mig".into(), "db".into()))
        .expect("the request filed before the migration, approved after it");
    gate.run(|| label("i-0mig".into(), "cache".into()))
        .expect("the approval given before the migration");
    assert_eq!(runs("label:i-0mig/db"), 1);
    assert_eq!(runs("label:i-0mig/cache"), 1);
    for used in [pending, approved] {
        assert!(matches!(state(&store, used), RequestState::Used(_)));
    }
    assert_eq!(
        code(gate.run(|| label("i-0mig".into(), "db".into()))),
        DenialCode::ApprovalReused
    );
    // And an irreversible call files and answers on the migrated schema.
    set_state("i-0mig", "running");
    let (_, id) = filed(
        gate.run(|| terminate("i-0mig".into(), "after".into())),
        DenialCode::ApprovalPending,
    );
    cli_exits(&url, &["approve", &id.to_string()], 1);
    cli_exits(
        &url,
        &["approve", &id.to_string(), "--confirm", "i-0mig"],
        0,
    );
    gate.run(|| terminate("i-0mig".into(), "after".into()))
        .expect("approved with its target typed back");
    assert_eq!(runs("terminate:i-0mig"), 1);
}

#[test]
fn two_operators_approving_one_irreversible_request_at_once_approve_it_once() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "irr_race") else {
        return;
    };
    let (store, gate) = ops_gate(&url);
    for round in 0..8 {
        let instance = format!("i-race{round}");
        set_state(&instance, "running");
        let call = || terminate(instance.clone(), "race".into());
        let (_, id) = filed(gate.run(call), DenialCode::ApprovalPending);
        let id_text = id.to_string();
        // Both started before either is waited for: each connects, then answers in one statement.
        let operators: Vec<_> = ["ana", "bea"]
            .into_iter()
            .map(|by| {
                std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
                    .args(["approvals", "approve", &id_text, "--confirm", &instance])
                    .args(["--by", by])
                    .env("TOOLGATE_STORE", &url)
                    .env_remove("TOOLGATE_STORE_SCHEMA")
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("the toolgate command starts")
            })
            .collect();
        let outputs: Vec<_> = operators
            .into_iter()
            .map(|child| child.wait_with_output().expect("the command ends"))
            .collect();
        let won: Vec<usize> = (0..2)
            .filter(|&i| outputs[i].status.code() == Some(0))
            .collect();
        assert_eq!(
            won.len(),
            1,
            "round {round}: {}\n{}",
            out(&outputs[0]),
            out(&outputs[1])
        );
        let lost = &outputs[1 - won[0]];
        assert_eq!(lost.status.code(), Some(1), "round {round}: {}", out(lost));
        assert!(
            stderr(lost).contains("answered already"),
            "round {round}: {}",
            out(lost)
        );
        let winner = ["ana", "bea"][won[0]];
        assert_eq!(
            state(&store, id),
            RequestState::Answered(Answer::Approve {
                by: winner.into(),
                for_session: false,
                confirmation: Some(instance.clone()),
            }),
            "round {round}"
        );
        gate.run(call).expect("approved once");
        assert_eq!(code(gate.run(call)), DenialCode::ApprovalReused);
        assert_eq!(runs(&format!("terminate:{instance}")), 1, "round {round}");
    }
}

#[test]
fn a_plan_that_cannot_be_made_files_nothing_and_runs_nothing() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "irr_no_plan") else {
        return;
    };
    let (_store, gate) = ops_gate(&url);
    set_state("i-0nop", "running");
    let denied = gate
        .run(|| terminate("i-0nop".into(), "no snapshot".into()))
        .unwrap_err();
    assert_eq!(denied.code(), DenialCode::RollbackUnavailable, "{denied}");
    assert!(denied.to_string().contains("has no snapshot"), "{denied}");
    assert_eq!(denied.approval_token(), None);
    let filed = query(
        &url,
        "SELECT count(*) FROM toolgate.approvals WHERE target = 'i-0nop'",
    );
    assert_eq!(filed[0][0].as_deref(), Some("0"));
    assert_eq!(runs("terminate:i-0nop"), 0);
}
