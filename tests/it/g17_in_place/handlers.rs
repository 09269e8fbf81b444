//! Guarantee 17 (A tool of an rmcp handler gated in place is decided before rmcp's router runs it),
//! against rmcp handlers gated in place, `#[toolset]` methods on registered instances, OAuth over
//! `HttpService` and request states.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use rmcp::handler::server::wrapper::Parameters;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::Duration;
use toolgate::audit::{MemorySink, Stage};
use toolgate::gate::BudgetScope;
use toolgate::mcp::http::Principals;
use toolgate::mcp::{REFUSED, ToolgateServer, Undeclared};
use toolgate::{Gate, Mode};

use crate::common::gates;
use crate::fixtures::handlers::*;

// ---------------------------------------------------------------------------------------------------
// a01-a12: the handler gated in place.
// ---------------------------------------------------------------------------------------------------

/// a01. Guarantee 1 for in-place tools: a direct call of an rmcp tool method, with no gate and under a
/// gate whose mode refuses it, does not run its body. Broken: the body runs (the counter moves) or
/// the refusal is not `REFUSED` with the gate's code.
#[test]
fn a01_direct_calls_of_a_handler_tool_are_gated() {
    runtime().block_on(async {
        let ops = Ops::default();
        let target = || {
            Parameters(Target {
                target: "db".into(),
            })
        };
        let outside = ops.wipe_disk(target()).await.expect_err("no gate");
        assert_eq!(outside.code, REFUSED);
        assert_eq!(outside.data.as_ref().unwrap()["code"], "NO_GATE");
        let spawned = tokio::spawn({
            let ops = ops.clone();
            async move {
                ops.ops_restart(Parameters(Target { target: "x".into() }))
                    .await
            }
        });
        let gate = Gate::new(Mode::PartialAuto).unwrap();
        let inside = gate
            .scope(async {
                let _ = spawned.await;
                ops.wipe_disk(target()).await
            })
            .await
            .expect_err("HIGH_WRITE in PARTIAL_AUTO");
        assert_eq!(inside.data.as_ref().unwrap()["code"], "MODE_NOT_ALLOWED");
        assert_eq!(ops.wiped(), 0);
        assert_eq!(ops.restarted(), 0, "a spawned task ran ungated");
    });
}

/// a03. An rmcp `#[tool(name = ..)]` that differs from its method: two methods named as each other's
/// rmcp tool. The declaration beside a method must follow that method's body on every path (over MCP
/// by rmcp's name, directly by the method). Broken: under SHADOW the HIGH_WRITE body runs, over MCP
/// or by a direct call of the method.
#[test]
fn a03_swapped_rmcp_names_do_not_swap_the_risks() {
    runtime().block_on(async {
        let swapped = Swapped::default();
        let gate = Gate::new(Mode::Shadow).unwrap();
        let client = connect(ToolgateServer::new(gate.clone()).handler(swapped.clone())).await;
        let names: Vec<String> = client
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        assert_eq!(names, ["swap_danger"], "only the harmless body is listed");
        assert_eq!(
            code_of(&call(&client, "swap_read", json!({})).await),
            "MODE_NOT_ALLOWED"
        );
        assert_eq!(
            code_of(&call(&client, "swap_danger", json!({})).await),
            "OK"
        );
        let direct = gate.scope(swapped.swap_danger()).await;
        assert!(
            direct.is_err(),
            "the HIGH_WRITE method ran directly under SHADOW"
        );
        let direct = gate.scope(swapped.swap_read()).await;
        assert!(direct.is_ok(), "{direct:?}");
        assert_eq!(swapped.dangers.load(Ordering::SeqCst), 0);
        assert_eq!(swapped.reads.load(Ordering::SeqCst), 2);
    });
}

/// a09. A handler tool that calls another gated tool of the handler: the inner HIGH_WRITE call is
/// decided on its own (guarantee 1: a call from another tool passes the same check). Broken: the inner
/// body runs under PARTIAL_AUTO because the outer LOW_WRITE call was allowed.
#[test]
fn a09_a_handler_tool_calling_another_is_decided_for_each() {
    runtime().block_on(async {
        let gate = Gate::new(Mode::PartialAuto).unwrap();
        let (ops, client) = ops_client(gate).await;
        assert_eq!(
            code_of(&call(&client, "ops_chain", json!({"target": "db"})).await),
            "OK"
        );
        assert_eq!(ops.wiped(), 0);
        assert_eq!(*ops.chained.lock().unwrap(), ["MODE_NOT_ALLOWED"]);
    });
}

/// a10. A handler whose `call_tool` ignores the name it was asked for and calls another method by an
/// argument: `lazy_read` (READ_ONLY, allowed in SHADOW) with `{"op": "wipe"}`. The decision made for
/// `lazy_read` must not be taken by `lazy_wipe`'s check: a declared name runs its declared method, not
/// the handler's `call_tool`, so `lazy_read` reads. Broken: the HIGH_WRITE body runs in SHADOW.
#[test]
fn a10_a_decision_for_one_tool_is_not_taken_by_another_method() {
    runtime().block_on(async {
        let gate = Gate::new(Mode::Shadow).unwrap();
        let lazy = Lazy::new(Behaviour::ByArgument);
        let client = connect(ToolgateServer::new(gate).handler(lazy.clone())).await;
        let said = call(&client, "lazy_read", json!({"op": "wipe"})).await;
        assert_eq!(lazy.wipes.load(Ordering::SeqCst), 0, "{said:?}");
        assert_eq!(code_of(&said), "OK", "the declared READ_ONLY method reads");
    });
}

/// a11. A handler whose `call_tool` serves a name its router does not have and its list does not show
/// (`lazy_hidden`). It declares no risk: it must be refused, never handed to the handler. Broken: its
/// body runs.
#[test]
fn a11_a_tool_the_handler_serves_by_hand_is_not_run_ungated() {
    runtime().block_on(async {
        let sink = MemorySink::new();
        let gate = gates::audited(Mode::FullAuto, sink.clone());
        let lazy = Lazy::new(Behaviour::Hidden);
        let client = connect(ToolgateServer::new(gate).handler(lazy.clone())).await;
        let said = call(&client, "lazy_hidden", json!({})).await;
        assert_eq!(
            lazy.hidden.load(Ordering::SeqCst),
            0,
            "ran ungated: {said:?}"
        );
        assert_ne!(code_of(&said), "OK");
    });
}

/// a12. `Undeclared::Refuse` (the default): a tool of the handler that nobody declared is refused
/// `UNDECLARED_TOOL`, not listed, and the refusal is in the gate's log. Broken: its body runs, or no
/// record.
#[test]
fn a12_an_undeclared_tool_is_refused_on_the_record() {
    runtime().block_on(async {
        let sink = MemorySink::new();
        let gate = gates::audited(Mode::FullAuto, sink.clone());
        let legacy = Legacy23::default();
        let client = connect(ToolgateServer::new(gate).handler(legacy.clone())).await;
        assert!(client.list_all_tools().await.unwrap().is_empty());
        assert_eq!(
            code_of(&call(&client, "legacy23_drop", json!({})).await),
            "UNDECLARED_TOOL"
        );
        assert_eq!(legacy.drops.load(Ordering::SeqCst), 0);
        assert!(
            sink.records()
                .iter()
                .any(|r| r.tool == "legacy23_drop" && r.code.as_deref() == Some("UNDECLARED_TOOL")),
            "{:#?}",
            sink.records()
        );
    });
}

/// a12b. `Undeclared::Serve` runs a tool nobody declared "with no gate", and its documentation says
/// "Each call is still written to the caller's gate's audit log (`UNDECLARED_TOOL_SERVED`)". Broken:
/// the served call (its body ran) leaves no record in the gate's log, so the only trace of an ungated
/// call is missing.
#[test]
fn a12b_an_undeclared_tool_served_is_still_written_to_the_log() {
    runtime().block_on(async {
        let sink = MemorySink::new();
        let gate = gates::audited(Mode::Shadow, sink.clone());
        let legacy = Legacy23::default();
        let serving = connect(
            ToolgateServer::new(gate)
                .handler(legacy.clone())
                .undeclared(Undeclared::Serve),
        )
        .await;
        assert_eq!(
            code_of(&call(&serving, "legacy23_drop", json!({})).await),
            "OK"
        );
        assert_eq!(legacy.drops.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let records = sink.records();
        assert!(
            records.iter().any(|r| r.tool == "legacy23_drop"
                && r.code.as_deref() == Some("UNDECLARED_TOOL_SERVED")),
            "the served call left no record: {records:#?}"
        );
    });
}

/// a23. Audit x in-place gating: one MCP call of a handler tool is one decision, with one `enter` and
/// one `exit` record (the server's decision and the method's own check are not two calls). Broken:
/// two `enter` records, or an `enter` without its `exit`.
#[test]
fn a23_one_mcp_call_of_a_handler_tool_is_one_enter_and_one_exit() {
    runtime().block_on(async {
        let sink = MemorySink::new();
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .budget(BudgetScope::tool("ops_restart"), 2, HOUR)
            .audit(sink.clone())
            .build()
            .unwrap();
        let (ops, client) = ops_client(gate).await;
        let args = json!({"target": "web"});
        assert_eq!(
            code_of(&call(&client, "ops_restart", args.clone()).await),
            "OK"
        );
        assert_eq!(
            code_of(&call(&client, "ops_restart", args.clone()).await),
            "OK"
        );
        assert_eq!(
            code_of(&call(&client, "ops_restart", args).await),
            "BUDGET_EXHAUSTED"
        );
        let records = sink.records();
        let of = |stage: Stage| {
            records
                .iter()
                .filter(|r| r.tool == "ops_restart" && r.stage == stage)
                .count()
        };
        assert_eq!((of(Stage::Enter), of(Stage::Exit)), (2, 2), "{records:#?}");
        assert_eq!(ops.restarted(), 2);
    });
}

/// a36. A handler whose `call_tool` awaits (here a 10 ms sleep) before it dispatches to its router,
/// under out-of-band approvals: "approvals ... work for it as for a callable tool" (the approved call
/// runs, once). Broken: the operator's approval is spent by the server's decision and the method's own
/// check then refuses the call (`APPROVAL_REQUIRED`): the approved call can never run.
#[test]
fn a36_an_approved_call_runs_once_through_a_handler_that_awaits_before_dispatching() {
    runtime().block_on(async {
        let gate = two_step(Mode::FullAuto).build().unwrap();
        let lazy = Lazy::new(Behaviour::Sleep(10));
        let (server, pending) =
            pending_channel(ToolgateServer::new(gate.clone()).handler(lazy.clone()));
        let client = connect(server).await;
        let args = json!({"target": "db"});
        assert_eq!(
            code_of(&call(&client, "lazy_wipe", args.clone()).await),
            "APPROVAL_PENDING"
        );
        gate.approve(&last_token(&pending)).expect("approved");
        let ran = call(&client, "lazy_wipe", args.clone()).await;
        let again = call(&client, "lazy_wipe", args).await;
        assert_eq!(
            lazy.wipes.load(Ordering::SeqCst),
            1,
            "the approved call: {}, the same call again: {}",
            code_of(&ran),
            code_of(&again)
        );
        assert_eq!(code_of(&ran), "OK");
    });
}

/// a37. Budgets and audit x a handler that awaits before dispatching: each MCP call of a LOW_WRITE
/// tool must be one call, charged once to a budget of 2 and written as one `enter` and one `exit`
/// (README: "Direct calls, calls by name and async calls all count once"). Broken: one call takes two
/// units (the second call is refused `BUDGET_EXHAUSTED`) and leaves two `enter`/`exit` pairs, so the
/// log says two calls ran where one body ran.
#[test]
fn a37_a_call_through_a_handler_that_awaits_counts_once_and_is_recorded_once() {
    runtime().block_on(async {
        let sink = MemorySink::new();
        let gate = Gate::builder()
            .mode(Mode::PartialAuto)
            .audit(sink.clone())
            .budget(BudgetScope::tool("lazy_restart"), 2, HOUR)
            .build()
            .unwrap();
        let lazy = Lazy::new(Behaviour::Sleep(10));
        let client = connect(ToolgateServer::new(gate).handler(lazy.clone())).await;
        let first = call(&client, "lazy_restart", json!({})).await;
        let records = sink.records();
        let enters = records.iter().filter(|r| r.stage == Stage::Enter).count();
        let second = call(&client, "lazy_restart", json!({})).await;
        assert_eq!(
            (code_of(&first), code_of(&second)),
            ("OK".to_owned(), "OK".to_owned()),
            "two calls under a budget of two"
        );
        assert_eq!(lazy.restarts.load(Ordering::SeqCst), 2);
        assert_eq!(enters, 1, "one call, {enters} enter records: {records:#?}");
    });
}

/// a43. Streamable HTTP (2026-07-28) names the tool twice: in the `Mcp-Name` header and in the body.
/// A header naming a READ_ONLY tool over a body calling a LOW_WRITE one, for a SHADOW principal.
/// Broken: the LOW_WRITE body runs (one name decided, the other dispatched).
#[test]
fn a43_a_header_naming_another_tool_than_the_body_runs_nothing_unchecked() {
    runtime().block_on(async {
        let ops = Ops::default();
        let shadow = gates::of_principal(Mode::Shadow, "alice");
        let server = ToolgateServer::new(shadow.clone()).handler(ops.clone());
        let addr = serve_http(
            server,
            Principals::new().bearer(token_of(ALICE), "alice", shadow),
        )
        .await;
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "ops_restart", "arguments": {"target": "web"}, "_meta": meta(false)}});
        let head = vec![
            "Mcp-Protocol-Version: 2026-07-28".to_owned(),
            "Mcp-Method: tools/call".to_owned(),
            "Mcp-Name: ops_read".to_owned(),
            format!("Authorization: {ALICE}"),
        ];
        let answer = request(addr, &head, Some(&body)).await;
        assert_eq!(ops.restarted(), 0, "{answer:?}");
        assert_ne!(answer.code(), "OK", "{answer:?}");
    });
}
