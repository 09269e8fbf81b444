//! Guarantee 7 (Approvals are single-use, bound and expiring), against holes found by review, each
//! reproduced as an outside attacker would write it.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use toolgate::audit::{JsonlSink, MemorySink, Stage};
use toolgate::{AllowAllApprover, Approval, ApprovalRequest, Gate, Mode};

use crate::common::gates;
use crate::common::{Scratch, serial};
use crate::fixtures::regressions::*;

// Finding: `Gate::approve` writes the approval's binding digest, the sha256 of the arguments with the
// redacted ones' real values, into the `approval_granted` record; for a short secret (a 4-digit PIN) that
// digest gives the secret away to anyone who can read the log.
#[test]
fn the_audit_log_holds_no_digest_of_a_redacted_argument() {
    let _serial = serial();
    let scratch = Scratch::new("redacted-digest");
    let log = scratch.path("audit.jsonl");
    let memory = MemorySink::new();
    let gate = gates::two_step_audited(
        Mode::FullAuto,
        Tee(JsonlSink::open(&log).unwrap(), memory.clone()),
    );
    let before = count(&UNLOCKS);
    let first = gate
        .run(|| unlock("front".into(), "4711".into()))
        .unwrap_err();
    assert_eq!(first.code().as_str(), "APPROVAL_PENDING");
    let token = first.approval_token().unwrap().to_owned();
    gate.approve(&token).unwrap();
    gate.run(|| unlock("front".into(), "4711".into())).unwrap();
    assert_eq!(count(&UNLOCKS), before + 1);

    let text = std::fs::read_to_string(&log).unwrap();
    let records: Vec<String> = memory
        .records()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    // The digests below are computed as the gate computes them: the redacted form is in the log.
    let redacted = sha256_hex(br#"{"door":"front","pin":"[REDACTED]"}"#);
    assert!(
        text.contains(&redacted),
        "the log holds the digest of the redacted arguments:\n{text}"
    );
    for pin in 0..=9999 {
        let pin = format!("{pin:04}");
        let digest = sha256_hex(format!(r#"{{"door":"front","pin":"{pin}"}}"#).as_bytes());
        assert!(
            !text.contains(&digest),
            "the audit log holds the sha256 of the arguments with pin {pin}: the PIN can be read \
             back from it\n{text}"
        );
        for record in &records {
            assert!(
                !record.contains(&digest),
                "an audit record holds the sha256 of the arguments with pin {pin}: {record}"
            );
        }
    }
}

// Finding: a two-step approval is bound to the tool and its named arguments, not to the receiver of a
// method: an approval given for `staging.drop_table("users")` runs `production.drop_table("users")`.
#[test]
fn a_two_step_approval_for_one_receiver_does_not_run_another() {
    let _serial = serial();
    let (staging, production) = (db("staging"), db("production"));
    let gate = gates::two_step(Mode::FullAuto);
    DROPPED.lock().unwrap().clear();
    let first = gate.run(|| staging.drop_table("users".into())).unwrap_err();
    assert_eq!(first.code().as_str(), "APPROVAL_PENDING");
    gate.approve(first.approval_token().unwrap()).unwrap();

    let other = gate.run(|| production.drop_table("users".into()));
    assert_eq!(
        dropped(),
        [],
        "the approval for staging must not drop production's table"
    );
    assert_eq!(refusal_code(other), "APPROVAL_PENDING");

    gate.run(|| staging.drop_table("users".into())).unwrap();
    assert_eq!(dropped(), [("staging".to_owned(), "users".to_owned())]);
}

/// A FullAuto gate whose approver rejects every call for `why`, keeping what `shown` picks of each
/// request.
fn rejecting_seeing(
    shown: for<'a> fn(&ApprovalRequest<'a>) -> Option<&'a str>,
    why: &'static str,
) -> (Gate, Arc<Mutex<Vec<Option<String>>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let gate = gates::approved(Mode::FullAuto, move |request: &ApprovalRequest<'_>| {
        keep.lock().unwrap().push(shown(request).map(str::to_owned));
        Approval::Reject(why.into())
    });
    (gate, seen)
}

// Finding (same): an approver is shown the same arguments digest for calls on two receivers, so it
// cannot tell which database it is asked to drop a table of.
#[test]
fn an_approver_sees_different_digests_for_different_receivers() {
    let _serial = serial();
    let (gate, seen) = rejecting_seeing(|request| request.arguments_digest, "asked only");
    DROPPED.lock().unwrap().clear();
    let staging = gate.run(|| db("staging").drop_table("users".into()));
    let production = gate.run(|| db("production").drop_table("users".into()));
    assert_eq!(refusal_code(staging), "APPROVAL_REJECTED");
    assert_eq!(refusal_code(production), "APPROVAL_REJECTED");
    assert_eq!(dropped(), []);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let (staging, production) = (&seen[0], &seen[1]);
    assert_eq!(staging.as_ref().map(String::len), Some(64));
    assert_eq!(production.as_ref().map(String::len), Some(64));
    assert_ne!(
        staging, production,
        "calls on two receivers must not digest alike"
    );
}

// Finding (same): the audit log records the same arguments digest for calls on two receivers.
#[test]
fn audit_records_of_calls_on_different_receivers_have_different_digests() {
    let _serial = serial();
    let sink = MemorySink::new();
    let gate = gates::approved_audited(Mode::FullAuto, AllowAllApprover, sink.clone());
    DROPPED.lock().unwrap().clear();
    gate.run(|| db("staging").drop_table("users".into()))
        .unwrap();
    gate.run(|| db("production").drop_table("users".into()))
        .unwrap();
    assert_eq!(dropped().len(), 2);
    let digests: Vec<Option<String>> = sink
        .records()
        .iter()
        .filter(|r| r.stage == Stage::Enter && r.tool == "db.drop_table")
        .map(|r| r.arguments_digest.clone())
        .collect();
    assert_eq!(digests.len(), 2, "{digests:?}");
    assert!(
        digests
            .iter()
            .all(|d| d.as_ref().map(String::len) == Some(64))
    );
    assert_ne!(
        digests[0], digests[1],
        "the records of calls on two receivers must not digest alike"
    );
}

// Finding: a two-step approval is bound to the arguments' JSON as serialized, and a `HashMap` serializes
// in the order of its random hasher: the same arguments, in a new map, do not match their approval.
#[test]
fn a_two_step_approval_runs_the_same_map_argument_built_again() {
    let _serial = serial();
    let gate = gates::two_step(Mode::FullAuto);
    for round in 0..5u32 {
        let entries: Vec<(String, u32)> = (0..30)
            .map(|i| (format!("round{round}-key{i}"), round * 100 + i))
            .collect();
        let build = || entries.iter().cloned().collect::<HashMap<String, u32>>();
        let approved = build();
        // The same entries in a map that iterates in another order, as almost every new map does.
        let retried = (0..100)
            .map(|_| build())
            .find(|map| {
                serde_json::to_string(map).unwrap() != serde_json::to_string(&approved).unwrap()
            })
            .expect("a new map iterates in another order");
        assert_eq!(retried, approved);

        let before = count(&TALLIES);
        let first = gate.run(|| tally(approved)).unwrap_err();
        assert_eq!(first.code().as_str(), "APPROVAL_PENDING", "round {round}");
        gate.approve(first.approval_token().unwrap()).unwrap();
        let sum = (0..30).map(|i| round * 100 + i).sum::<u32>();
        match gate.run(|| tally(retried)) {
            Ok(total) => assert_eq!(total, sum),
            Err(denied) => panic!(
                "round {round}: the approved call, with the same entries in a new map, was refused \
                 {}: {denied}",
                denied.code().as_str()
            ),
        }
        assert_eq!(count(&TALLIES), before + 1, "round {round}");
    }
}

// Finding 8, opaque receiver: a method whose receiver cannot be serialized cannot be bound to it, so
// it cannot be approved in two steps, and an approver is shown that the receiver is not serializable.
#[test]
fn a_method_whose_receiver_is_not_serializable_cannot_be_approved_in_two_steps() {
    let _serial = serial();
    DROPPED.lock().unwrap().clear();
    let pool = Pool { name: "main" };
    let two_step = gates::two_step(Mode::FullAuto);
    let denied = two_step.run(|| pool.drop_all()).unwrap_err();
    assert_eq!(denied.code().as_str(), "APPROVAL_REQUIRED");
    assert!(denied.approval_token().is_none());
    assert!(
        denied.detail().unwrap().contains("receiver"),
        "{:?}",
        denied.detail()
    );
    let (asked, seen) = rejecting_seeing(|request| request.arguments, "no");
    assert!(asked.run(|| pool.drop_all()).is_err());
    assert_eq!(
        *seen.lock().unwrap(),
        [Some(r#"{"self":"[NOT SERIALIZABLE]"}"#.to_owned())]
    );
    assert_eq!(dropped(), []);
}

// Findings 8 and the map order, generic form: a generic tool's approval is bound to its argument's
// value, maps nested in structs included, whatever order they iterate in.
#[test]
fn a_generic_tool_is_bound_to_its_arguments_value_nested_maps_included() {
    let _serial = serial();
    PUT.lock().unwrap().clear();
    let gate = gates::two_step(Mode::FullAuto);
    let first = gate.run(|| put(settings())).unwrap_err();
    gate.approve(first.approval_token().unwrap()).unwrap();
    let other = gate.run(|| put(1u8)).unwrap_err();
    assert_eq!(other.code().as_str(), "APPROVAL_PENDING");
    assert!(PUT.lock().unwrap().is_empty());
    // Built again: new hashers, another iteration order, the same value.
    gate.run(|| put(settings())).unwrap();
    assert_eq!(PUT.lock().unwrap().len(), 1);
    let again = gate.run(|| put(settings())).unwrap_err();
    assert_eq!(again.code().as_str(), "APPROVAL_REUSED");
}

/// Names that read alike (SECURITY.md): the `toolgate` command refuses an operator's `--by` that a
/// person would read as another name (`оlga` with a Cyrillic `о`, `ｏｌｇａ`, a hidden character, and
/// every look-alike of the shared corpus but spaces around a name, which it trims), before it
/// reaches the store: answers are never recorded under a name that reads as someone else's.
#[cfg(feature = "postgres")]
#[test]
fn an_operator_named_by_a_look_alike_is_refused_by_the_command() {
    let people = crate::common::lookalikes::LOOK_ALIKES
        .iter()
        .filter(|(name, _)| !name.contains(['.', '~', '/']))
        .flat_map(|(_, alikes)| alikes.iter().copied())
        .filter(|alike| alike.trim() == *alike);
    for by in ["\u{43e}lga", "ｏｌｇａ", "ol\u{200b}ga"]
        .into_iter()
        .chain(people)
    {
        for answer in [vec!["approve", "1"], vec!["reject", "1", "--reason", "no"]] {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
                .arg("approvals")
                .args(&answer)
                .args([
                    "--store",
                    "postgres://toolgate@127.0.0.1:1/none",
                    "--by",
                    by,
                ])
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "{by:?} {answer:?}: {said}");
            assert!(
                said.contains("the operator's name is refused"),
                "{by:?}: {said}"
            );
        }
    }
}
