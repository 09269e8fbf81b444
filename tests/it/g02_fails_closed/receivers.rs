//! Guarantee 2 (It fails closed), against stateful tools: `callable` methods called on an instance,
//! by name and over MCP.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use serde_json::json;
use toolgate::audit::Stage;
use toolgate::registry::Instances;
use toolgate::{CallError, Mode, registry};

use crate::common::gates;
use crate::fixtures::receivers::*;

/// ATTACKS guarantees 2 and 8 (fail closed, every enter closed): the receiver's `Serialize` panics during a
/// call by name. Nothing runs, no decision is left behind for a later call, and the gate still works.
#[test]
fn s02_a_receivers_serialize_panicking_leaves_nothing_behind() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let approve = Arc::new(AtomicBool::new(true));
    let a = Arc::clone(&approve);
    let (gate, asked) = approving(&sink, move |_| a.load(SeqCst));
    vault.ser_panic.store(true, SeqCst);
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({}))
    }));
    let outcome = format!("{panicked:?}");
    assert!(
        matches!(panicked, Err(_) | Ok(Err(_))),
        "the call ran: {outcome}"
    );
    assert_eq!(vault.ran(), Vec::<String>::new());
    vault.ser_panic.store(false, SeqCst);
    // A later call is decided afresh: the approver is asked and rejects.
    approve.store(false, SeqCst);
    let before = lock(&asked).len();
    let rejected = call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({})).unwrap_err();
    assert_eq!(rejected.code(), "APPROVAL_REJECTED");
    assert_eq!(lock(&asked).len(), before + 1);
    // Direct, too.
    assert_eq!(
        gate.run(|| vault.wipe()).unwrap_err().code().as_str(),
        "APPROVAL_REJECTED"
    );
    assert_eq!(vault.ran(), Vec::<String>::new());
    approve.store(true, SeqCst);
    assert_eq!(
        call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({})).unwrap(),
        json!("staging")
    );
    assert_eq!(vault.ran(), ["wipe@staging"]);
    assert_balanced(&sink.records());
}

// s13 ATTACKED redaction of the receiver with `redact = [self]` on a method: it does not compile
// ("`redact` takes a list of argument names in brackets"), so a receiver cannot be hidden from approvers and
// `record_arguments` records; it fails closed at compile time (no test at run time).

/// ATTACKS strict arguments and the instance: an agent sends `self` (to pick the receiver) or `gate` (to pick
/// the gate) in the arguments of a method called by name. Both are unknown keys: `INVALID_PARAMS` at their
/// path, nothing runs, and each stop at the door leaves a `refused` record, as `NO_INSTANCE` does.
#[test]
fn s14_self_and_gate_sent_as_arguments_are_unknown_keys() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let gate = gates::audited(Mode::PartialAuto, sink.clone());
    let inst = shared(&vault);
    let cases = [
        (
            "atk_vault.peek",
            json!({"self": {"site": "production"}}),
            "self",
        ),
        (
            "atk_vault.stash",
            json!({"item": "x", "self": null}),
            "self",
        ),
        (
            "atk_vault.gated_call",
            json!({"n": 1, "gate": {"mode": "FULL_AUTO"}}),
            "gate",
        ),
    ];
    for (id, args, path) in cases {
        let error = block_on(registry().call_with(&gate, &inst, id, args)).unwrap_err();
        assert_eq!(error.code(), "INVALID_PARAMS", "{id}");
        assert_eq!(
            serde_json::to_value(&error).unwrap()["path"],
            json!(path),
            "{id}"
        );
    }
    let no_instance = call_now(&gate, &Instances::new(), "atk_vault.peek", json!({})).unwrap_err();
    assert_eq!(no_instance.code(), "NO_INSTANCE");
    assert_eq!(vault.ran(), Vec::<String>::new());
    let refused: Vec<_> = sink
        .records()
        .iter()
        .filter(|r| r.stage == Stage::Refused)
        .map(|r| (r.tool.to_string(), r.code.as_deref().map(str::to_string)))
        .collect();
    assert_eq!(
        refused,
        [
            (
                "atk_vault.peek".to_string(),
                Some("INVALID_PARAMS".to_string())
            ),
            ("atk_vault.stash".into(), Some("INVALID_PARAMS".into())),
            ("atk_vault.gated_call".into(), Some("INVALID_PARAMS".into())),
            ("atk_vault.peek".into(), Some("NO_INSTANCE".into())),
        ]
    );
    // With the right arguments, the gate parameter is the call's gate.
    assert_eq!(
        call_now(&gate, &inst, "atk_vault.gated_call", json!({"n": 2})).unwrap(),
        json!(2)
    );
}

/// ATTACKS strict arguments at every depth: an unknown key inside an internally tagged enum
/// (`#[serde(tag = "kind")]`), which serde reads through a buffer.
#[test]
fn s15_an_unknown_key_inside_an_internally_tagged_enum_is_refused() {
    assert_strict(
        "atk_strict.tagged",
        json!({"op": {"kind": "Restart", "service": "web"}}),
        json!({"op": {"kind": "Restart", "service": "web", "force": true}}),
        "op.force",
    );
}

/// ATTACKS strict arguments at every depth: an unknown key inside an untagged enum's struct variant.
#[test]
fn s16_an_unknown_key_inside_an_untagged_enum_is_refused() {
    assert_strict(
        "atk_strict.untagged",
        json!({"target": {"host": "db", "port": 5432}}),
        json!({"target": {"host": "db", "port": 5432, "apiKey": "x"}}),
        "target.apiKey",
    );
}

/// ATTACKS strict arguments at every depth: an unknown key beside a `#[serde(flatten)]`ed struct.
#[test]
fn s17_an_unknown_key_beside_a_flattened_struct_is_refused() {
    assert_strict(
        "atk_strict.flat",
        json!({"outer": {"name": "n", "limit": 3}}),
        json!({"outer": {"name": "n", "limit": 3, "apiKey": "x"}}),
        "outer.apiKey",
    );
}

/// ATTACKS strict arguments at every depth (regression, the forms serde reads directly): an externally
/// tagged struct variant, and structs in a `Vec` in an `Option`.
#[test]
fn s18_unknown_keys_in_enum_variants_and_optional_vectors_are_refused() {
    let ok = strict_call(
        "atk_strict.external",
        json!({"action": {"Restart": {"force": true}}, "extra": [{"limit": 1}]}),
    );
    assert!(ok.is_ok(), "{ok:?}");
    for (args, path) in [
        (
            json!({"action": {"Restart": {"force": true, "apiKey": "x"}}}),
            "action.Restart.apiKey",
        ),
        (
            json!({"action": {"Restart": {"force": true}}, "extra": [{"limit": 1}, {"limit": 2, "apiKey": 1}]}),
            "extra[1].apiKey",
        ),
    ] {
        let error = strict_call("atk_strict.external", args).unwrap_err();
        assert_eq!(error.code(), "INVALID_PARAMS");
        let path_seen = serde_json::to_value(&error).unwrap()["path"].clone();
        assert!(
            path_seen.as_str().is_some_and(|p| p.contains("apiKey")),
            "expected {path}, got {path_seen}"
        );
    }
}

/// `id` takes the arguments `ok`, and refuses `sneaky`, which add the unknown key `key`, with
/// `INVALID_PARAMS`.
#[track_caller]
fn assert_strict(id: &str, ok: serde_json::Value, sneaky: serde_json::Value, key: &str) {
    let ok = strict_call(id, ok);
    assert!(ok.is_ok(), "{ok:?}");
    let sneaky = strict_call(id, sneaky);
    assert_eq!(
        sneaky.as_ref().map_err(CallError::code),
        Err("INVALID_PARAMS"),
        "the unknown key `{key}` was ignored and the body ran: {sneaky:?}"
    );
}
