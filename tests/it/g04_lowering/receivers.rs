//! Guarantee 4 (The mode is only ever lowered, and a lowering reaches every call not yet started),
//! against stateful tools: `callable` methods called on an instance, by name and over MCP.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolgate::registry::Instances;
use toolgate::{Gate, Mode, registry};

use crate::fixtures::receivers::*;

// ---------------------------------------------------------------------------------------------------------
// attacks: user code between the decision and the body
// ---------------------------------------------------------------------------------------------------------

/// ATTACKS guarantee 4 (the mode re-checked before the body): the receiver's own `Serialize`, run for the
/// approver and the audit digest of a method called by name, lowers the gate mid-decision. Sync by name,
/// async by name, and a direct call in a scope.
#[test]
fn s01_a_receivers_serialize_lowering_the_gate_refuses_the_call() {
    for form in ["sync by name", "async by name", "direct in a scope"] {
        let vault = Vault::new("staging");
        let sink = HookSink::default();
        let (gate, _) = approving(&sink, |_| true);
        let g = gate.clone();
        vault.on_serialize(move |_| g.lower(Mode::PartialAuto).unwrap());
        let result: Result<Value, String> = match form {
            "sync by name" => call_now(&gate, &shared(&vault), "atk_vault.wipe", json!({}))
                .map_err(|e| e.code().to_string()),
            "async by name" => {
                block_on(registry().call_with(&gate, &shared(&vault), "atk_vault.awipe", json!({})))
                    .map_err(|e| e.code().to_string())
            }
            _ => {
                let v = Arc::clone(&vault);
                block_on(gate.scope(async move { v.awipe().await }))
                    .map(Value::from)
                    .map_err(|e| e.code().as_str().to_string())
            }
        };
        assert!(
            vault.serialized.load(SeqCst) > 0,
            "{form}: the receiver was never serialized"
        );
        let code = result.expect_err(form);
        assert!(
            code == "MODE_NOT_ALLOWED" || code == "ABOVE_CEILING",
            "{form}: refused with {code}"
        );
        assert_eq!(
            vault.ran(),
            Vec::<String>::new(),
            "{form}: the body ran at the old mode"
        );
        assert_balanced(&sink.records());
    }
}

/// ATTACKS guarantee 4 and "every path passes the gate" for futures of methods moved across threads: a
/// scoped future of an async method made, then the gate lowered, then polled on another thread; and a
/// method's future made inside `run` and polled on another thread, outside it.
#[test]
fn s24_method_futures_moved_across_threads_are_decided_where_and_when_they_run() {
    let vault = Vault::new("staging");
    // Control: not lowered, the scoped future runs on another thread.
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let v = Arc::clone(&vault);
    let fut = gate.scope(async move { v.stash("a".into()).await });
    assert_eq!(
        std::thread::spawn(move || block_on(fut))
            .join()
            .unwrap()
            .unwrap(),
        "a"
    );
    // Lowered before its first poll.
    let v = Arc::clone(&vault);
    let fut = gate.scope(async move { v.stash("b".into()).await });
    gate.lower(Mode::Shadow).unwrap();
    let scoped = std::thread::spawn(move || block_on(fut)).join().unwrap();
    assert_eq!(
        scoped.map_err(|e| e.code().as_str()),
        Err("MODE_NOT_ALLOWED")
    );
    // Made inside `run`, polled outside it: no gate.
    let open = Gate::new(Mode::PartialAuto).unwrap();
    let v = Arc::clone(&vault);
    let escaped = open.run(move || async move { v.stash("d".into()).await });
    let escaped = std::thread::spawn(move || block_on(escaped))
        .join()
        .unwrap();
    assert_eq!(escaped.map_err(|e| e.code().as_str()), Err("NO_GATE"));
    assert_eq!(vault.ran(), ["stash:a@staging"]);
}

/// ATTACKS the by-name error contract (`CallError::code()`: "the gate's refusal with its own code
/// (`MODE_NOT_ALLOWED`, ...), whatever the tool's error type made of it"; `denied()` gives the refusal) and
/// guarantee 4, with the window between `call_with` (where the gate is asked first) and the first poll of
/// an async call: the gate (not audited, so the tool is allowed outright) is lowered in between, then the
/// call is polled, here and on another thread. The body must not run, and the answer must be the refusal.
#[test]
fn s30_an_async_call_by_name_lowered_before_its_first_poll_answers_the_refusal() {
    let vault = Vault::new("staging");
    let mut seen = Vec::new();
    for (id, args, elsewhere) in [
        ("atk_vault.stash", json!({"item": "c"}), false),
        ("atk_vault.stash", json!({"item": "c"}), true),
        ("atk_free.aping", json!({"n": 1}), false),
    ] {
        let gate = Gate::new(Mode::PartialAuto).unwrap();
        let call = registry().call_with(&gate, &shared(&vault), id, args);
        gate.lower(Mode::Shadow).unwrap();
        let answer = if elsewhere {
            std::thread::spawn(move || block_on(call)).join().unwrap()
        } else {
            block_on(call)
        };
        let error = answer.expect_err(id);
        seen.push((
            id,
            elsewhere,
            error.code(),
            error.denied().map(|d| d.code().as_str()),
        ));
    }
    assert_eq!(
        vault.ran(),
        Vec::<String>::new(),
        "a body ran after the gate was lowered"
    );
    assert!(
        seen.iter()
            .all(|s| s.2 == "MODE_NOT_ALLOWED" && s.3 == Some("MODE_NOT_ALLOWED")),
        "(tool, on another thread, code, denied): {seen:?}"
    );
}

/// ATTACKS "every point where user code runs between the decision and the body": an instance whose `Clone`
/// lowers the gate. If an instance were cloned after the decision, the lowered gate must refuse the call.
#[test]
fn s26_an_instance_whose_clone_lowers_the_gate() {
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let clones = Arc::new(AtomicUsize::new(0));
    let sheared = Arc::new(AtomicUsize::new(0));
    let sheep = Sheep {
        lower_on_clone: Mutex::new(Some(gate.clone())),
        clones: Arc::clone(&clones),
        sheared: Arc::clone(&sheared),
    };
    let inst = Instances::new().with(sheep);
    let by_name = call_now(&gate, &inst, "atk_sheep.shear", json!({}));
    #[cfg(feature = "mcp")]
    let _ = block_on(
        toolgate::mcp::ToolgateServer::new(gate.clone())
            .instances(inst.clone())
            .call("atk_sheep.shear", None),
    );
    let (c, s) = (clones.load(SeqCst), sheared.load(SeqCst));
    assert!(
        c == 0 || (s == 0 && gate.mode() == Mode::Shadow),
        "the instance was cloned {c} times (gate now {:?}) and the body ran {s} times: {by_name:?}",
        gate.mode()
    );
}
