//! Guarantee 1 (Every path into a tool's body passes the gate), against stateful tools: `callable`
//! methods called on an instance, by name and over MCP.
//! Each test asserts the guarantee: it passes when the attack fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use serde_json::json;
use toolgate::registry::Instances;
use toolgate::{CallError, Gate, Mode};

use crate::fixtures::receivers::*;

/// ATTACKS guarantee 1 (one decision, handed only to the check of that tool): while the `enter` record of an
/// approved `wipe` on staging is written, the sink calls `wipe` on production, directly and by name. The
/// approval of staging must not run production: each nested call is decided by itself, and rejected.
#[test]
fn s03_a_sink_calling_the_same_method_on_another_receiver_does_not_take_the_decision() {
    let staging = Vault::new("staging");
    let production = Vault::new("production");
    let sink = HookSink::default();
    let (gate, asked) = approving(&sink, |r| {
        r.arguments.is_some_and(|a| a.contains("staging"))
    });
    let (g, p) = (gate.clone(), Arc::clone(&production));
    sink.arm("atk_vault.wipe", move || {
        let direct = g.run(|| p.wipe());
        assert!(
            direct.is_err(),
            "a direct wipe of production from the sink ran"
        );
        let by_name = call_now(&g, &shared(&p), "atk_vault.wipe", json!({}));
        assert!(
            by_name.is_err(),
            "a wipe of production by name from the sink ran"
        );
    });
    let result = call_now(&gate, &shared(&staging), "atk_vault.wipe", json!({}));
    assert_eq!(result.unwrap(), json!("staging"));
    assert_eq!(staging.ran(), ["wipe@staging"]);
    assert_eq!(
        production.ran(),
        Vec::<String>::new(),
        "production was wiped on staging's approval"
    );
    assert!(
        lock(&asked).len() >= 2,
        "the nested calls were never asked about"
    );
    assert_balanced(&sink.records());
}

// ---------------------------------------------------------------------------------------------------------
// attacks: declaration forms and the adapter
// ---------------------------------------------------------------------------------------------------------

/// ATTACKS guarantee 1 (the adapter names the tool so the name can mean nothing else): a `callable` method
/// of a `#[toolset]` trait impl, on a type with an inherent, ungated method of the same name. A call by
/// name must reach the trait's gated `go`, never the inherent one.
#[test]
fn s19_a_trait_methods_adapter_never_calls_an_inherent_method_of_the_same_name() {
    let twin = Arc::new(Twin {
        by_tool: AtomicUsize::new(0),
        by_other: AtomicUsize::new(0),
    });
    let inst = Instances::new().with_shared(Arc::clone(&twin));
    let refused = call_now(
        &Gate::new(Mode::Shadow).unwrap(),
        &inst,
        "atk_twin.go",
        json!({}),
    );
    assert!(refused.is_err());
    let sink = HookSink::default();
    let (gate, _) = approving(&sink, |_| true);
    let ran = call_now(&gate, &inst, "atk_twin.go", json!({}));
    assert_eq!(
        (
            ran.as_ref().ok().cloned(),
            twin.by_tool.load(SeqCst),
            twin.by_other.load(SeqCst)
        ),
        (Some(json!("trait")), 1, 0),
        "the call by name of `atk_twin.go` reached another function: {ran:?}"
    );
}

/// ATTACKS guarantee 1 (no second entry point): a blanket trait in scope of the toolset whose methods have
/// the tools' names (`fetch(&self)` for every type, `burn(self: Arc<Self>)`). A call by name must reach the
/// gated inherent methods, never the blanket ones.
#[test]
fn s20_a_blanket_trait_in_scope_does_not_capture_the_adapter() {
    let decoy = Arc::new(Decoy {
        by_tool: AtomicUsize::new(0),
    });
    let inst = Instances::new().with_shared(Arc::clone(&decoy));
    let before = SNEAK_RAN.load(SeqCst);
    let fetched = call_now(
        &Gate::new(Mode::Shadow).unwrap(),
        &inst,
        "atk_decoy.fetch",
        json!({}),
    );
    let burned = call_now(
        &Gate::new(Mode::Shadow).unwrap(),
        &inst,
        "atk_decoy.burn",
        json!({}),
    );
    assert_eq!(fetched.ok(), Some(json!("tool")));
    assert_eq!(
        burned.as_ref().map_err(CallError::code),
        Err("MODE_NOT_ALLOWED"),
        "{burned:?}"
    );
    assert_eq!(
        SNEAK_RAN.load(SeqCst),
        before,
        "a blanket method answered to a tool's name"
    );
    assert_eq!(decoy.by_tool.load(SeqCst), 1);
}

/// ATTACKS the MCP surface of stateful tools: an instance given by value or as a wrong type (`Arc<Vault>`
/// is another type), a gate lowered after the server was built (through another clone), `self` sent as an
/// argument. The body runs only on the instance the server holds, and only as the gate allows now.
#[cfg(feature = "mcp")]
#[test]
fn s25_an_mcp_server_runs_methods_only_on_its_instance_and_only_as_its_gate_allows_now() {
    use toolgate::mcp::ToolgateServer;
    let vault = Vault::new("staging");
    let ours = |m: &toolgate::ToolManifest| m.domain == Some("atk_vault");
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    let wrong = ToolgateServer::new(gate.clone())
        .only(ours)
        .instance(Arc::clone(&vault));
    assert!(
        !wrong.serves("atk_vault.peek"),
        "an Arc<Vault> serves Vault's methods"
    );
    assert!(block_on(wrong.call("atk_vault.peek", None)).is_err());
    let server = ToolgateServer::new(gate.clone())
        .only(ours)
        .instances(shared(&vault));
    let ok = block_on(server.call("atk_vault.stash", json!({"item": "x"}).as_object().cloned()))
        .unwrap();
    assert_eq!(ok.is_error, Some(false));
    let injected = block_on(server.call(
        "atk_vault.peek",
        json!({"self": {"site": "production"}}).as_object().cloned(),
    ))
    .unwrap();
    assert_eq!(injected.is_error, Some(true));
    gate.lower(Mode::Shadow).unwrap();
    let names: Vec<String> = server.tools().iter().map(|t| t.name.to_string()).collect();
    assert!(!names.contains(&"atk_vault.stash".to_string()), "{names:?}");
    let refused =
        block_on(server.call("atk_vault.stash", json!({"item": "y"}).as_object().cloned()))
            .unwrap();
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(
        refused.structured_content.unwrap()["code"],
        json!("MODE_NOT_ALLOWED")
    );
    assert_eq!(vault.ran(), ["stash:x@staging"]);
}
