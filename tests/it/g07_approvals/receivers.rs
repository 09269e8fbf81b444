//! Guarantee 7 (Approvals are single-use, bound and expiring), against stateful tools: `callable`
//! methods called on an instance, by name and over MCP.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolgate::audit::Stage;
use toolgate::registry::{CallError, Instances};
use toolgate::{DenialCode, Denied, Gate, Mode};

use crate::common::gates;
use crate::fixtures::receivers::*;

/// ATTACKS guarantee 7 (a two-step approval runs one call on the same receiver): a token for `wipe` on
/// staging, by name; the agent then calls `wipe` by name on production, then on staging twice. Also: the
/// token is in no message or JSON the agent sees.
#[test]
fn s04_a_two_step_approval_by_name_runs_only_on_its_receiver() {
    let staging = Vault::new("staging");
    let production = Vault::new("production");
    let gate = gates::two_step(Mode::FullAuto);
    let first = call_now(&gate, &shared(&staging), "atk_vault.wipe", json!({})).unwrap_err();
    assert_eq!(first.code(), "APPROVAL_PENDING");
    let token = token_of(&first);
    let shown = format!(
        "{first} {} {}",
        serde_json::to_string(&first).unwrap(),
        first.denied().unwrap()
    );
    assert!(
        !shown.contains(&token),
        "the token reaches the agent: {shown}"
    );
    gate.approve(&token).unwrap();
    let other = call_now(&gate, &shared(&production), "atk_vault.wipe", json!({})).unwrap_err();
    assert_eq!(other.code(), "APPROVAL_PENDING");
    assert_eq!(production.ran(), Vec::<String>::new());
    assert_eq!(
        call_now(&gate, &shared(&staging), "atk_vault.wipe", json!({})).unwrap(),
        json!("staging")
    );
    let again = call_now(&gate, &shared(&staging), "atk_vault.wipe", json!({})).unwrap_err();
    assert_eq!(again.code(), "APPROVAL_REUSED");
    assert_eq!(staging.ran(), ["wipe@staging"]);
}

/// ATTACKS guarantee 7 (an approval for `staging.drop_table` never runs `production.drop_table`), at the
/// window between the binding and the body: the receiver is shared and mutable by design ("what changes
/// inside it sits behind a lock"). A two-step approval is given for `wipe` on the vault while it points at
/// staging; while the approved call's `enter` record is written (a slow audit write, or any concurrent
/// call), the agent retargets the same vault to production with an allowed LOW_WRITE call by name. The
/// approved body must not run on production.
#[test]
fn s05_a_receiver_retargeted_between_the_two_step_binding_and_the_body() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let gate = gates::two_step_audited(Mode::FullAuto, sink.clone());
    let first = call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({})).unwrap_err();
    gate.approve(&token_of(&first)).unwrap();
    retarget_on_enter(&sink, &gate, &vault, |moved| {
        assert_eq!(moved.unwrap(), json!("staging"));
    });
    let result = call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({}));
    assert!(
        !vault.ran().contains(&"wipe@production".to_string()),
        "the approval for {{\"self\":{{\"site\":\"staging\"}}}} ran the wipe on production: {result:?}, \
         bodies {:?}",
        vault.ran()
    );
}

/// While the `enter` record of the vault's `wipe` is written, retargets `vault` to production with an
/// allowed call by name, and hands what it answered (the site it had) to `check`.
fn retarget_on_enter(
    sink: &HookSink,
    gate: &Gate,
    vault: &Arc<Vault>,
    check: impl FnOnce(Result<Value, CallError>) + Send + 'static,
) {
    let (gate, vault) = (gate.clone(), Arc::clone(vault));
    sink.arm("atk_vault.wipe", move || {
        let site = json!({"site": "production"});
        check(call_now(&gate, &shared(&vault), "atk_vault.retarget", site));
    });
}

/// ATTACKS what an approver sees (the receiver as `self`): the same window with an approver: it is shown
/// `{"self":{"site":"staging"}}` and approves; before the body, the vault is retargeted to production by an
/// allowed call. The body must not run on a receiver the approver was not shown.
#[test]
fn s06_a_receiver_retargeted_after_the_approver_saw_it() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let (gate, asked) = approving(&sink, |r| {
        r.arguments.is_some_and(|a| a.contains("\"staging\""))
    });
    retarget_on_enter(&sink, &gate, &vault, drop);
    let result = call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({}));
    let shown: Vec<_> = lock(&asked).iter().map(|a| a.1.clone()).collect();
    assert!(
        !vault.ran().contains(&"wipe@production".to_string()),
        "the approver was shown {shown:?} and the wipe ran on production: {result:?}"
    );
}

/// ATTACKS guarantee 7 for a receiver that is not serializable, by name: its call is approved in two steps
/// for the registered instance it runs on, by that registration's label, and for no other instance, nor
/// for the same value registered again; the approver sees the label and a digest of what it is shown.
#[test]
fn s07_a_receiver_that_is_not_serializable_is_approved_for_its_registered_instance_only() {
    let pool = Arc::new(Pool {
        drained: AtomicUsize::new(0),
    });
    let on_pool = Instances::new().with_shared(Arc::clone(&pool));
    let gate = gates::two_step(Mode::FullAuto);
    let refused = call_now(&gate, &on_pool, "atk_pool.drain", json!({})).unwrap_err();
    let token = refused
        .denied()
        .and_then(Denied::approval_token)
        .expect("a two-step approval is asked for")
        .to_owned();
    gate.approve(&token).unwrap();

    // Another pool, and the same pool registered anew: neither is the instance that was approved.
    let other = Arc::new(Pool {
        drained: AtomicUsize::new(0),
    });
    let on_other = Instances::new().with_shared(Arc::clone(&other));
    let again = Instances::new().with_shared(Arc::clone(&pool));
    for instances in [&on_other, &again] {
        let refused = call_now(&gate, instances, "atk_pool.drain", json!({})).unwrap_err();
        assert_eq!(
            refused.denied().map(Denied::code),
            Some(DenialCode::ApprovalPending),
            "{refused:?}"
        );
    }
    assert_eq!(other.drained.load(SeqCst), 0);
    assert_eq!(pool.drained.load(SeqCst), 0);

    assert_eq!(
        call_now(&gate, &on_pool, "atk_pool.drain", json!({})).unwrap(),
        json!(1)
    );
    let reused = call_now(&gate, &on_pool, "atk_pool.drain", json!({})).unwrap_err();
    assert!(reused.denied().is_some(), "{reused:?}");
    assert_eq!(
        pool.drained.load(SeqCst),
        1,
        "the approval ran the call once"
    );

    let sink = HookSink::default();
    let (gate, asked) = approving(&sink, |_| true);
    assert_eq!(
        call_now(&gate, &on_pool, "atk_pool.drain", json!({})).unwrap(),
        json!(2)
    );
    let asked = lock(&asked).clone();
    let label = on_pool.label::<Pool>().expect("a label");
    assert!(label.starts_with("Pool (instance "), "{label}");
    let shown = serde_json::to_string(&json!({ "self": label })).unwrap();
    assert_eq!(asked[0].1.as_deref(), Some(shown.as_str()));
    assert_eq!(
        asked[0].2.as_deref(),
        Some(sha256_hex(shown.as_bytes()).as_str()),
        "the approver gets a digest of what it is shown"
    );
}

/// ATTACKS what the approver and the log see (`arguments`, `arguments_digest`, `record_arguments`, redaction)
/// for a method: the approver's digest is the SHA-256 of what it is shown, the log's `enter` has the same
/// arguments and digest, the receiver is `self`, and the redacted PIN is nowhere, by name and directly.
#[test]
fn s08_the_approver_and_the_log_see_the_same_redacted_arguments_of_a_method() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let (gate, asked) = approving(&sink, |_| true);
    let secret = "sk_live_PIN_8642";
    call_now(
        &gate,
        &shared(&vault),
        "atk_vault.open",
        json!({"door": "front", "pin": secret}),
    )
    .unwrap();
    gate.run(|| vault.open("front".into(), secret.into()))
        .unwrap();
    let asked = lock(&asked).clone();
    let records = sink.records();
    let enters: Vec<_> = records.iter().filter(|r| r.stage == Stage::Enter).collect();
    assert_eq!((asked.len(), enters.len()), (2, 2));
    let expected = r#"{"door":"front","pin":"[REDACTED]","self":{"site":"staging"}}"#;
    for ((_, args, digest, _), enter) in asked.iter().zip(&enters) {
        assert_eq!(args.as_deref(), Some(expected));
        assert_eq!(
            digest.as_deref(),
            Some(sha256_hex(expected.as_bytes()).as_str())
        );
        assert_eq!(enter.arguments.as_deref(), Some(expected));
        assert_eq!(&enter.arguments_digest, digest);
    }
    let everything = format!("{records:?} {asked:?}");
    assert!(!everything.contains(secret), "{everything}");
    assert_balanced(&records);
}

/// ATTACKS "what the approver sees is what the log writes" with a receiver whose `Serialize` gives another
/// value each time it runs: if the call's arguments were serialized once for the approver and again for the
/// log, the log would record something the approver never saw.
#[test]
fn s09_a_nondeterministic_receiver_shows_the_approver_what_the_log_records() {
    let vault = Vault::new("staging");
    vault.ser_jitter.store(true, SeqCst);
    let sink = HookSink::default();
    let (gate, asked) = approving(&sink, |_| true);
    // Written again just before the body, the receiver is not what the approver saw: refused.
    let front = json!({"door": "front", "pin": "1234"});
    let refused = call_now(&gate, &shared(&vault), "atk_vault.open", front).unwrap_err();
    assert_eq!(refused.code(), "APPROVAL_MISMATCH");
    assert!(vault.ran().is_empty(), "{:?}", vault.ran());
    let asked = lock(&asked).clone();
    let records = sink.records();
    let enter = records.iter().find(|r| r.stage == Stage::Enter).unwrap();
    assert_eq!(
        (asked[0].1.as_deref(), asked[0].2.as_deref()),
        (
            enter.arguments.as_deref(),
            enter.arguments_digest.as_deref()
        ),
        "serialized {} times",
        vault.serialized.load(SeqCst)
    );
    assert_balanced(&records);
}

/// ATTACKS redaction ("kept out of records, approvers and errors"; "a redacted parameter's bad value is not
/// quoted back"): the redacted PIN's type has its own `Deserialize` whose error quotes what it was given.
#[test]
fn s10_a_redacted_arguments_own_deserialize_error_does_not_quote_it() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let (gate, _) = approving(&sink, |_| true);
    let pin = json!({"door": "front", "pin": "sk_live_CUSTOM_9137"});
    let quoted = "the redacted value is quoted back";
    nothing_of_it_shown(
        &gate,
        &sink,
        &vault,
        ("atk_vault.open_checked", pin),
        quoted,
    );
}

/// Calls a tool of `vault` by name with arguments that carry `sk_live` text where they may not: the
/// call is refused `INVALID_PARAMS`, runs no body, and neither its error nor the records show any of
/// that text (else `shown` says what was).
#[track_caller]
fn nothing_of_it_shown(
    gate: &Gate,
    sink: &HookSink,
    vault: &Arc<Vault>,
    (tool, args): (&str, Value),
    shown_what: &str,
) {
    let error = call_now(gate, &shared(vault), tool, args).unwrap_err();
    assert_eq!(error.code(), "INVALID_PARAMS");
    let text = format!("{} || {:?}", shown(&error), sink.records());
    assert!(!text.contains("sk_live"), "{shown_what}: {text}");
    assert_eq!(vault.ran(), Vec::<String>::new());
}

/// ATTACKS redaction of a map: the agent sends a redacted map of keys whose entry has the wrong type; the
/// map key (the secret, here) is part of the error's path, which goes into the error and the `refused`
/// record ("with the path of the problem, never the value").
#[test]
fn s11_a_bad_entry_of_a_redacted_map_does_not_put_its_key_in_the_path() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let gate = gates::audited(Mode::PartialAuto, sink.clone());
    let keys = json!({"owner": "ada", "keys": {"sk_live_MAPKEY_5521": "not a number"}});
    let key_shown = "a redacted map's key is shown";
    nothing_of_it_shown(
        &gate,
        &sink,
        &vault,
        ("atk_vault.store_keys", keys),
        key_shown,
    );
}

/// ATTACKS redaction of a struct: an unknown key inside a redacted struct argument; the key is the agent's
/// text inside a redacted field, and must stay out of the error and the record.
#[test]
fn s12_an_unknown_key_inside_a_redacted_struct_is_not_shown() {
    let vault = Vault::new("staging");
    let sink = HookSink::default();
    let gate = gates::audited(Mode::PartialAuto, sink.clone());
    let unknown = json!({"creds": {"user": "ada", "token": "t", "sk_live_UNKNOWN_7310": 1}});
    let key_shown = "a key inside a redacted argument is shown";
    nothing_of_it_shown(
        &gate,
        &sink,
        &vault,
        ("atk_vault.login", unknown),
        key_shown,
    );
    // A wrong type inside it: the value is not quoted either.
    let wrong = json!({"creds": {"user": "ada", "token": ["sk_live_TOKEN_7311"]}});
    nothing_of_it_shown(&gate, &sink, &vault, ("atk_vault.login", wrong), "quoted");
}

/// ATTACKS guarantee 7 on a generic method with a `&Gate` parameter: a two-step approval for `(staging, 1u32)`
/// runs neither `(staging, 1u64)`, nor `(production, 1u32)`, and runs `(staging, 1u32)` once.
#[test]
fn s22_a_generic_method_with_a_gate_parameter_is_bound_to_receiver_value_and_type() {
    let staging = Vault::new("staging");
    let production = Vault::new("production");
    let gate = gates::two_step(Mode::FullAuto);
    let first = staging.put(&gate, 1u32).unwrap_err();
    gate.approve(first.approval_token().unwrap()).unwrap();
    assert_eq!(
        staging.put(&gate, 1u64).unwrap_err().code().as_str(),
        "APPROVAL_PENDING"
    );
    assert_eq!(
        production.put(&gate, 1u32).unwrap_err().code().as_str(),
        "APPROVAL_PENDING"
    );
    assert!(staging.put(&gate, 1u32).is_ok());
    assert_eq!(
        staging.put(&gate, 1u32).unwrap_err().code().as_str(),
        "APPROVAL_REUSED"
    );
    assert_eq!(staging.ran(), ["put:1:u32@staging"]);
    assert_eq!(production.ran(), Vec::<String>::new());
}

/// ATTACKS approvers that re-enter tools: while deciding `wipe` on staging, the approver calls `wipe` on
/// production, directly and by name. Each nested call is decided on its own (and rejected: production), and
/// every body that ran was approved with its own receiver.
#[test]
fn s27_an_approver_calling_the_method_on_another_receiver() {
    let staging = Vault::new("staging");
    let production = Vault::new("production");
    let sink = HookSink::default();
    let slot: Arc<Mutex<Option<Gate>>> = Arc::default();
    let (s, p) = (Arc::clone(&slot), Arc::clone(&production));
    let depth = Arc::new(AtomicUsize::new(0));
    let (gate, asked) = approving(&sink, move |r| {
        if depth.fetch_add(1, SeqCst) == 0
            && let Some(g) = lock(&s).clone()
        {
            let _ = g.run(|| p.wipe());
            let _ = call_now(&g, &shared(&p), "atk_vault.wipe", json!({}));
        }
        depth.fetch_sub(1, SeqCst);
        r.arguments.is_some_and(|a| a.contains("\"staging\""))
    });
    *lock(&slot) = Some(gate.clone());
    assert_eq!(
        call_now(&gate, &shared(&staging), "atk_vault.wipe", json!({})).unwrap(),
        json!("staging")
    );
    assert_eq!(production.ran(), Vec::<String>::new());
    assert_eq!(staging.ran(), ["wipe@staging"]);
    assert_eq!(lock(&asked).len(), 3, "{:?}", lock(&asked));
    assert_balanced(&sink.records());
    *lock(&slot) = None;
}
