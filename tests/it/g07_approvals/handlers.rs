//! Guarantee 7 (Approvals are single-use, bound and expiring), against rmcp handlers gated in
//! place, `#[toolset]` methods on registered instances, OAuth over `HttpService` and request
//! states.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(all(feature = "mcp-http", feature = "mcp-oauth"))]

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use toolgate::approval::SessionGrant;
use toolgate::mcp::{Approvals, ToolgateServer};
use toolgate::registry::CallFuture;
use toolgate::registry::Instances;
use toolgate::{Gate, Mode};

use crate::fixtures::handlers::*;
use crate::g07_approvals::served_ops::*;

/// a04. Approvals bound to the handler instance: an unnamed handler, cloned (same state behind its
/// `Arc`s) into a second server of the same gate. The approval given for a call through the first
/// server must not run the call through the second (another registration). Broken: the second
/// server's call runs, or the approved call runs more than once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a04_an_approval_for_one_unnamed_handler_does_not_run_on_another_registration() {
    let gate = two_step(Mode::FullAuto).build().unwrap();
    let (ops, first, pending) = ops_out_of_band(&gate, Dialect::Current).await;
    let second = connect(ToolgateServer::new(gate.clone()).handler(ops.clone())).await;
    let args = json!({"target": "db"});
    approve_out_of_band(&gate, &first, &pending, "ops_wipe", &args).await;
    assert_eq!(
        call_code(&second, "ops_wipe", &args).await,
        "APPROVAL_PENDING"
    );
    assert_eq!(ops.wiped(), 0);
    assert_eq!(call_code(&first, "ops_wipe", &args).await, "OK");
    assert_eq!(
        call_code(&first, "ops_wipe", &args).await,
        "APPROVAL_REUSED"
    );
    assert_eq!(ops.wiped(), 1);
}

/// a05. An approval of a handler tool's call over MCP (bound to the handler's label) used by a direct
/// call of the same method with the same arguments, inside the same gate. The direct call has no
/// registration and a receiver that is not `Serialize`: it cannot be approved in two steps. Broken:
/// the direct call runs on the MCP approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a05_an_mcp_approval_does_not_run_a_direct_call_of_the_method() {
    let gate = two_step(Mode::FullAuto).build().unwrap();
    let ops = Ops::default();
    let (server, pending) =
        pending_channel(ToolgateServer::new(gate.clone()).handler_named("prod", ops.clone()));
    let client = connect(server).await;
    let args = json!({"target": "db"});
    approve_out_of_band(&gate, &client, &pending, "ops_wipe", &args).await;
    let direct = gate
        .scope(ops.wipe_disk(Parameters(Target {
            target: "db".into(),
        })))
        .await;
    assert!(direct.is_err(), "a direct call ran on an MCP approval");
    assert_eq!(ops.wiped(), 0);
    assert_eq!(call_code(&client, "ops_wipe", &args).await, "OK");
    assert_eq!(ops.wiped(), 1);
}

/// a06. Session grants x handler instances: an approver's exact-arguments session grant, given for
/// a call on handler `prod`, must cover only that call (its arguments include the instance), not the
/// same arguments on handler `staging` served through the same gate. Broken: staging's call runs
/// without the approver being asked (the approver rejects every later question).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a06_an_exact_session_grant_for_one_handler_does_not_cover_another() {
    let (gate, _) = granting_once(SessionGrant::tool(HOUR).exact_arguments(), "only the first");
    let prod = Ops::default();
    let staging = Ops::default();
    let on_prod =
        connect(ToolgateServer::new(gate.clone()).handler_named("prod", prod.clone())).await;
    let on_staging =
        connect(ToolgateServer::new(gate.clone()).handler_named("staging", staging.clone())).await;
    let args = json!({"target": "db"});
    assert_eq!(call_code(&on_prod, "ops_wipe", &args).await, "OK");
    assert_eq!(
        call_code(&on_prod, "ops_wipe", &args).await,
        "OK",
        "the grant"
    );
    let there = call(&on_staging, "ops_wipe", args).await;
    assert_eq!(
        staging.wiped(),
        0,
        "the grant for prod ran staging's call: {there:?}"
    );
    assert_eq!(code_of(&there), "APPROVAL_REJECTED");
    assert_eq!(prod.wiped(), 2);
}

/// a08. A handler whose `call_tool` dispatches the approved request twice. A two-step approval runs
/// one call: the second dispatch must be decided on its own and refused. Broken: the HIGH_WRITE body
/// runs twice on one approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a08_a_handler_dispatching_twice_runs_one_approved_call_once() {
    let gate = two_step(Mode::FullAuto).build().unwrap();
    let lazy = Lazy::new(Behaviour::Twice);
    let (server, pending) =
        pending_channel(ToolgateServer::new(gate.clone()).handler(lazy.clone()));
    let client = connect(server).await;
    let args = json!({"target": "db"});
    let first = call(&client, "lazy_wipe", args.clone()).await;
    assert_eq!(code_of(&first), "APPROVAL_PENDING");
    gate.approve(&last_token(&pending)).expect("approved");
    let _ = call(&client, "lazy_wipe", args).await;
    assert_eq!(
        lazy.wipes.load(Ordering::SeqCst),
        1,
        "one approval ran the body twice"
    );
}

// ---------------------------------------------------------------------------------------------------
// a15-a22: request states, the handler's and toolgate's.
// ---------------------------------------------------------------------------------------------------

/// a15. A retry carrying a `requestState` toolgate did not seal "goes to the handler": it must still
/// be decided by the gate. A HIGH_WRITE handler tool called with a made-up state and an "approve"
/// answer to toolgate's form key. Broken: the body runs without an approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a15_a_foreign_request_state_skips_no_approval() {
    for approvals in [in_band(), Approvals::OutOfBand] {
        let gate = two_step(Mode::FullAuto).build().unwrap();
        let ops = Ops::default();
        let server = ToolgateServer::new(gate).handler(ops.clone());
        let client = connect(server.approvals(approvals)).await;
        let args = json!({"target": "db"});
        let said = approve(&client, "ops_wipe", &args, "handler-made-up").await;
        assert_eq!(ops.wiped(), 0, "ran without an approval: {said:?}");
        let said = approve(&client, "ops_ask", &args, "ops-ask-round-1").await;
        assert_eq!(asks(&ops), 0, "ran without an approval: {said:?}");
    }
}

/// a16. The handler's own request state after an approved round: `ops_ask` (HIGH_WRITE) is approved
/// in band and runs, answering `InputRequired` with a state of its own; the client's next round
/// carries that state. That round is another call: it must need its own approval. Broken: the body
/// runs again on the one approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a16_a_handlers_own_next_round_needs_its_own_approval() {
    let (ops, client) = ops_in_band(two_step(Mode::FullAuto).build().unwrap()).await;
    let args = json!({"target": "db"});
    let form = call(&client, "ops_ask", args.clone()).await;
    assert_eq!(code_of(&form), "INPUT_REQUIRED");
    let round1 = approve(&client, "ops_ask", &args, &state_of(&form)).await;
    assert_eq!(asks(&ops), 1, "{round1:?}");
    let theirs = state_of(&round1);
    assert_eq!(theirs, "ops-ask-round-1");
    let mut answers = BTreeMap::new();
    answers.insert(
        "sure".to_owned(),
        json!({"action": "accept", "content": {"ok": true}}),
    );
    let round2 = call_full(&client, "ops_ask", args, Some(&theirs), Some(answers)).await;
    assert_eq!(
        asks(&ops),
        1,
        "the handler's round ran on the first approval: {round2:?}"
    );
}

/// a17. Toolgate's sealed state, answered "approve", replayed on another handler tool with the same
/// arguments (`ops_wipe2`): the state carries the tool. Broken: `ops_wipe2` runs, or the state is
/// handed to the handler as not toolgate's and runs something.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a17_a_toolgate_state_for_one_tool_approves_nothing_on_another() {
    let (ops, client) = ops_in_band(two_step(Mode::FullAuto).build().unwrap()).await;
    let args = json!({"target": "db"});
    let form = call(&client, "ops_wipe", args.clone()).await;
    let state = state_of(&form);
    let other = approve(&client, "ops_wipe2", &args, &state).await;
    assert_eq!(ops.wipes2.load(Ordering::SeqCst), 0, "{other:?}");
    assert_eq!(ops.wiped(), 0, "{other:?}");
    assert_ne!(code_of(&other), "OK");
    let asked = approve(&client, "ops_ask", &args, &state).await;
    assert_eq!(asks(&ops), 0, "{asked:?}");
}

/// a18. Toolgate's state sealed for one connection, answered on another connection of the same
/// server and gate. Broken: the call runs on the second connection, or the original connection's
/// answer then runs it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a18_a_state_of_one_connection_approves_nothing_on_another() {
    let (ops, server) = ops_server(two_step(Mode::FullAuto).build().unwrap());
    let other = server.connection();
    let one = connect(server).await;
    let two = connect(other).await;
    let args = json!({"target": "db"});
    let state = state_of(&call(&one, "ops_wipe", args.clone()).await);
    let there = approve(&two, "ops_wipe", &args, &state).await;
    assert_eq!(ops.wiped(), 0, "{there:?}");
    let here = approve(&one, "ops_wipe", &args, &state).await;
    let again = approve(&one, "ops_wipe", &args, &state).await;
    assert!(ops.wiped() <= 1, "{here:?} {again:?}");
}

/// a19. A forged toolgate state (one character of a sealed one changed) is a JSON-RPC error and runs
/// nothing, neither the tool nor the handler's own state handling. Broken: the body runs, or a tool
/// result says OK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a19_a_forged_toolgate_state_is_an_error_and_runs_nothing() {
    let (ops, client) = ops_in_band(two_step(Mode::FullAuto).build().unwrap()).await;
    let args = json!({"target": "db"});
    let state = state_of(&call(&client, "ops_wipe", args.clone()).await);
    let mut forged: Vec<char> = state.chars().collect();
    let middle = forged.len() / 2;
    forged[middle] = if forged[middle] == 'A' { 'B' } else { 'A' };
    let forged: String = forged.into_iter().collect();
    let said = approve(&client, "ops_wipe", &args, &forged).await;
    assert_eq!(ops.wiped(), 0, "{said:?}");
    assert!(code_of(&said).starts_with("RPC "), "{said:?}");
    let said = approve(&client, "ops_ask", &args, &forged).await;
    assert_eq!(asks(&ops), 0, "{said:?}");
}

/// a20. An in-band form only to a client that declared form elicitation: a 2026-07-28 client without
/// it gets the out-of-band refusal (`APPROVAL_PENDING`), never an `InputRequired` it cannot answer.
/// Broken: it is sent a form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a20_no_form_to_a_client_without_elicitation() {
    let (ops, server) = ops_server(two_step(Mode::FullAuto).build().unwrap());
    let mute = connect_as(
        server.connection(),
        client_config(false, ProtocolVersion::V_2026_07_28),
    )
    .await;
    let server_old = server.connection();
    let able = connect(server).await;
    let args = json!({"target": "db"});
    assert_eq!(
        call_code(&mute, "ops_wipe", &args).await,
        "APPROVAL_PENDING"
    );
    let old = connect_as(
        server_old,
        client_config(true, ProtocolVersion::V_2025_06_18),
    )
    .await;
    assert_eq!(call_code(&old, "ops_wipe", &args).await, "APPROVAL_PENDING");
    assert_eq!(call_code(&able, "ops_wipe", &args).await, "INPUT_REQUIRED");
    assert_eq!(ops.wiped(), 0);
}

/// a21. What a human reads of a handler tool's arguments: the in-band form writes bidi overrides,
/// zero-width and tag characters of the arguments as `\u{..}`; `PendingApproval::arguments` is the
/// audit log's text (the application escapes it, as documented), and `instance` names the handler.
/// Broken: the form carries any of the hidden characters as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a21_the_form_shows_a_handler_tools_hidden_characters_escaped() {
    let gate = two_step(Mode::FullAuto).principal("alice").build().unwrap();
    let ops = Ops::default();
    let (server, pending) = pending_channel(
        ToolgateServer::new(gate)
            .handler_named("prod", ops.clone())
            .approvals(in_band()),
    );
    let client = connect(server.connection()).await;
    let form = call(&client, "ops_wipe", json!({"target": HIDDEN})).await;
    let message = form_message(&form);
    for hidden in ['\u{202E}', '\u{200B}', '\u{2066}', '\u{E0041}'] {
        assert!(
            !message.contains(hidden),
            "U+{:04X} shown as is: {message:?}",
            hidden as u32
        );
    }
    assert!(message.contains(r"\u{202E}"), "{message}");
    let mute = connect_as(server, client_config(false, ProtocolVersion::V_2025_06_18)).await;
    assert_eq!(
        call_code(&mute, "ops_wipe", &json!({"target": HIDDEN})).await,
        "APPROVAL_PENDING"
    );
    let told = pending.lock().unwrap().last().cloned().expect("told");
    assert!(
        told.instance.as_deref().unwrap_or("").starts_with("prod ("),
        "{told:?}"
    );
    let shown = toolgate::terminal::escaped(&told.arguments).to_string();
    assert!(!shown.contains('\u{202E}'), "{shown}");
    assert_eq!(ops.wiped(), 0);
}

// ---------------------------------------------------------------------------------------------------
// a24-a25: stateful toolset methods on registered instances.
// ---------------------------------------------------------------------------------------------------

/// `cloud23.sudo` called by name on `instances`.
fn sudo(gate: &Gate, instances: &Instances, args: &Value) -> CallFuture {
    toolgate::registry().call_with(gate, instances, "cloud23.sudo", args.clone())
}

/// `cloud23.sudo` called by name on `instances`, which must wait for an approval; then approved.
async fn approve_sudo(gate: &Gate, instances: &Instances, args: &Value) {
    let first = sudo(gate, instances, args).await.expect_err("pending");
    let token = first.denied().and_then(|d| d.approval_token());
    gate.approve(token.expect("a token")).expect("approved");
}

/// a24. A two-step approval of a method whose receiver is not `Serialize`, called by name on a
/// registered instance, is bound to that registration: it runs neither on another instance of the
/// type (registered unnamed), nor by a direct call of the method. Broken: either runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a24_an_approval_on_a_registered_instance_runs_on_no_other() {
    let gate = two_step(Mode::FullAuto).build().unwrap();
    let prod = Arc::new(Cloud23::new());
    let other = Arc::new(Cloud23::new());
    let named = Instances::new().with_shared(Arc::clone(&prod));
    let elsewhere = Instances::new().with_shared(Arc::clone(&other));
    let args = json!({"command": "reboot"});
    approve_sudo(&gate, &named, &args).await;
    let there = sudo(&gate, &elsewhere, &args).await;
    assert!(there.is_err(), "{there:?}");
    let direct = gate.run(|| other.sudo("reboot".into()));
    assert!(direct.is_err(), "{direct:?}");
    let direct = gate.run(|| prod.sudo("reboot".into()));
    assert!(direct.is_err(), "{direct:?}");
    assert_eq!(other.sudos.load(Ordering::SeqCst), 0);
    assert_eq!(prod.sudos.load(Ordering::SeqCst), 0);
    let ran = sudo(&gate, &named, &args).await;
    assert!(ran.is_ok(), "{ran:?}");
    assert_eq!(prod.sudos.load(Ordering::SeqCst), 1);
}

/// a25. The same instance registered twice (two `Instances` of one `Arc`), unnamed: each registration
/// gets its own label, so an approval on one does not carry over to the other; a named registration
/// carries over to the same name only. Broken: an approval runs under another registration's label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a25_instance_labels_bind_per_registration() {
    let gate = two_step(Mode::FullAuto).build().unwrap();
    let cloud = Arc::new(Cloud23::new());
    let one = Instances::new().with_shared(Arc::clone(&cloud));
    let two = Instances::new().with_shared(Arc::clone(&cloud));
    assert_ne!(one.label::<Cloud23>(), two.label::<Cloud23>());
    let args = json!({"command": "ls"});
    approve_sudo(&gate, &one, &args).await;
    let via_two = sudo(&gate, &two, &args).await;
    assert!(via_two.is_err(), "{via_two:?}");
    assert_eq!(cloud.sudos.load(Ordering::SeqCst), 0);
    let via_one = sudo(&gate, &one, &args).await;
    assert!(via_one.is_ok(), "{via_one:?}");
}

/// a35. One approval, eight identical calls of a handler tool at once (the approval consumed while
/// other calls are being decided). Guarantee 7: one runs. Broken: more than one body runs, or none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a35_one_approval_runs_one_of_many_concurrent_calls() {
    let gate = two_step(Mode::FullAuto).build().unwrap();
    let (ops, client, pending) = ops_out_of_band(&gate, Dialect::Current).await;
    let client = Arc::new(client);
    let args = json!({"target": "db"});
    approve_out_of_band(&gate, &client, &pending, "ops_wipe", &args).await;
    let mut calls = Vec::new();
    for _ in 0..8 {
        let client = Arc::clone(&client);
        let args = args.clone();
        calls.push(tokio::spawn(async move {
            call_code(&client, "ops_wipe", &args).await
        }));
    }
    let mut said = Vec::new();
    for c in calls {
        said.push(c.await.unwrap());
    }
    assert_eq!(ops.wiped(), 1, "{said:?}");
}

/// a38. In band x the registry beside the handler: a sealed state toolgate gave for the registry's
/// callable `ops23.zap` (same arguments), answered "approve" on the handler's `ops_wipe`, and the
/// reverse. The state carries the tool. Broken: either body runs on the other's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a38_a_state_for_a_registry_tool_approves_nothing_of_the_handler_and_back() {
    let gate = two_step(Mode::FullAuto).build().unwrap();
    let ops = Ops::default();
    let server = ToolgateServer::new(gate)
        .only(|m| m.id == "ops23.zap")
        .handler(ops.clone())
        .approvals(in_band());
    let client = connect(server).await;
    let target = "a38-db";
    let args = json!({"target": target});
    let for_zap = state_of(&call(&client, "ops23.zap", args.clone()).await);
    let for_wipe = state_of(&call(&client, "ops_wipe", args.clone()).await);
    let one = approve(&client, "ops_wipe", &args, &for_zap).await;
    let two = approve(&client, "ops23.zap", &args, &for_wipe).await;
    assert_eq!(ops.wiped(), 0, "{one:?}");
    assert!(!ZAPS.lock().unwrap().iter().any(|t| t == target), "{two:?}");
    let ran = approve(&client, "ops_wipe", &args, &for_wipe).await;
    assert_eq!(code_of(&ran), "OK");
    assert_eq!(ops.wiped(), 1);
}

/// a39. In band, the handler's tool: the approved state replayed after it ran, and a retry with the
/// state and other arguments (or an extra key rmcp would ignore). Guarantee 7. Broken: a second run,
/// or a run with other arguments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a39_an_in_band_state_runs_its_exact_call_once() {
    let (ops, client) = ops_in_band(two_step(Mode::FullAuto).build().unwrap()).await;
    let args = json!({"target": "db"});
    let state = state_of(&call(&client, "ops_wipe", args.clone()).await);
    let other = approve(&client, "ops_wipe", &json!({"target": "prod"}), &state).await;
    let extra = approve(
        &client,
        "ops_wipe",
        &json!({"target": "db", "force": true}),
        &state,
    )
    .await;
    assert_eq!(ops.wiped(), 0, "{other:?} {extra:?}");
    let ran = approve(&client, "ops_wipe", &args, &state).await;
    let replay = approve(&client, "ops_wipe", &args, &state).await;
    assert_eq!(*ops.wipes.lock().unwrap(), ["db"], "{ran:?} {replay:?}");
}
