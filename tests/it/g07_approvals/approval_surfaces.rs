//! Guarantee 7 (Approvals are single-use, bound and expiring), against async approvers, session
//! grants, rejections and stops with reasons, and custom approval stores.
//! Each test asserts the guarantee: it passes when the attack fails.

use serde_json::json;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::Duration;
use tokio::runtime::Runtime;
use toolgate::approval::SessionGrant;
use toolgate::approval::store::{Answer, Consumed};
use toolgate::approval::two_step::MemoryStore;
use toolgate::audit::{Decision, MemorySink, Stage};
use toolgate::gate::GateError;
use toolgate::{Approval, ApprovalRequest, DenialCode, Denied, Gate, Mode};

use crate::common::gates;
use crate::fixtures::approval_surfaces::*;
#[cfg(feature = "mcp")]
use crate::g07_approvals::checks::refused_over_mcp;
use crate::g07_approvals::checks::{assert_denied, built, denial, entered, refused_by_name};

// ---------------------------------------------------------------------------------------------------------
// 1. Async approvers: cancellation, lowering, panics, re-entry, threads
// ---------------------------------------------------------------------------------------------------------

// Attacks: dropping an async tool's future (direct, by name, over MCP) while its async approver is still
// thinking. The body must not run, the approver's future must be dropped with it, and no `enter` record
// may be left without its `exit`.
#[test]
fn atk2_a_call_cancelled_while_its_async_approver_waits_runs_nothing_on_any_path() {
    let _serial = serial();
    let sink = MemorySink::new();
    let asked = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicBool::new(false));
    let (a, d) = (asked.clone(), dropped.clone());
    let gate = built(Mode::FullAuto, |b| {
        b.async_approver(async_fn("never", move |_| {
            a.fetch_add(1, SeqCst);
            let guard = DropFlag(d.clone());
            Box::pin(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                Approval::Approve
            })
        }))
        .audit(sink.clone())
    });
    let before = WIRE.load(SeqCst);

    let mut direct = Box::pin(gate.scope(wire("x".into(), 1)));
    assert!(poll_once(direct.as_mut()).is_pending());
    assert_eq!(asked.load(SeqCst), 1);
    drop(direct);
    assert!(
        dropped.swap(false, SeqCst),
        "the approver's future is dropped with the call"
    );

    let mut by_name =
        Box::pin(toolgate::registry().call(&gate, "atk2_a.wire", json!({"to": "y", "cents": 2})));
    assert!(poll_once(by_name.as_mut()).is_pending());
    assert_eq!(asked.load(SeqCst), 2);
    drop(by_name);
    assert!(dropped.swap(false, SeqCst));

    #[cfg(feature = "mcp")]
    {
        let server = toolgate::mcp::ToolgateServer::new(gate.clone());
        let mut over_mcp = Box::pin(server.call(
            "atk2_a.wire",
            json!({"to": "z", "cents": 3}).as_object().cloned(),
        ));
        assert!(poll_once(over_mcp.as_mut()).is_pending());
        assert_eq!(asked.load(SeqCst), 3);
        drop(over_mcp);
        assert!(dropped.swap(false, SeqCst));
    }

    assert_eq!(WIRE.load(SeqCst), before, "no body ran");
    assert_paired(&sink.records());
    // The gate is not left in a state where it runs something it should not.
    assert_eq!(
        current_thread()
            .block_on(wire("no-scope".into(), 4))
            .unwrap_err()
            .code(),
        DenialCode::NoGate
    );
    assert_eq!(WIRE.load(SeqCst), before);
}

// Attacks: an async approver whose future returns `Pending` once and panics on its second poll. That is
// an approver that panicked: `APPROVAL_REJECTED`, the body not run, the panic not escaping into the
// agent's code, the gate still usable.
#[test]
fn atk2_an_async_approver_that_panics_on_a_later_poll_has_rejected() {
    let _serial = serial();
    let sink = MemorySink::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let gate = built(Mode::FullAuto, |b| {
        b.async_approver(async_fn("flaky", move |_| {
            if c.fetch_add(1, SeqCst) > 0 {
                return Box::pin(async { Approval::Approve });
            }
            let mut polled = false;
            Box::pin(std::future::poll_fn(move |cx| {
                if !polled {
                    polled = true;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                } else {
                    panic!("the approver broke on its second poll")
                }
            }))
        }))
        .audit(sink.clone())
    });
    let rt = runtime(1);
    let before = rejected_on_a_panic(&gate, &sink, &rt, ESCAPED);
    // The next call, approved, runs: the panic left the gate working.
    assert_eq!(rt.block_on(gate.scope(wire("b".into(), 2))).unwrap(), 2);
    assert_eq!(WIRE.load(SeqCst) - before, 1);
    assert_paired(&sink.records());
}

const ESCAPED: &str = "the approver's panic escaped the gate instead of rejecting";

/// Calls `wire` on `rt` through `gate`, whose async approver panics: the call is rejected
/// (`expect`ing the panic not to escape), its body not run, its `enter` closed and no gate left
/// entered on this thread. Returns the count of `wire`'s runs before it.
fn rejected_on_a_panic(gate: &Gate, sink: &MemorySink, rt: &Runtime, expect: &str) -> usize {
    let before = WIRE.load(SeqCst);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(gate.scope(wire("a".into(), 1)))
    }));
    assert_eq!(WIRE.load(SeqCst), before, "ran on a panicking approver");
    assert_paired(&sink.records());
    assert_eq!(
        denial(read_sync()),
        DenialCode::NoGate,
        "the unwinding left the gate entered on this thread"
    );
    assert_denied(outcome.expect(expect), DenialCode::ApprovalRejected);
    before
}

// Attacks: an async approver whose `approve` panics before it even returns its future (while building
// it). Also an approver that panics: rejected, not run, no `enter` left open, no gate left entered on the
// thread that polled the call, the panic not escaping into the agent's code.
#[test]
fn atk2_an_async_approver_that_panics_while_building_its_future_has_rejected() {
    let _serial = serial();
    let sink = MemorySink::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let gate = built(Mode::FullAuto, |b| {
        b.async_approver(async_fn("eager-panic", move |_| {
            if c.fetch_add(1, SeqCst) == 0 {
                panic!("the approver panicked before returning a future")
            }
            Box::pin(async { Approval::Approve })
        }))
        .audit(sink.clone())
    });
    let rt = current_thread();
    rejected_on_a_panic(&gate, &sink, &rt, ESCAPED);
    // The gate still works.
    assert_eq!(rt.block_on(gate.scope(wire("b".into(), 2))).unwrap(), 2);
}

// Attacks: `Approver::name` (used for the `by` of the records) panicking after the approver said yes.
// The approver is user code that panicked: the call must be refused (`APPROVAL_REJECTED`), never run,
// never leave an `enter` without `exit` nor the gate entered on the thread, and the panic must not
// escape the gate.
#[test]
fn atk2_a_sync_approver_whose_name_panics_has_rejected() {
    let _serial = serial();
    let sink = MemorySink::new();
    let gate = gates::approved_audited(Mode::FullAuto, SyncBadName, sink.clone());
    let before = SYNC_WIRE.load(SeqCst);
    let outcome = catch_unwind(AssertUnwindSafe(|| gate.run(|| sync_wire("a".into(), 1))));
    assert_eq!(
        SYNC_WIRE.load(SeqCst),
        before,
        "ran on a panicking approver"
    );
    assert_paired(&sink.records());
    assert_denied(read_sync(), DenialCode::NoGate);
    assert_eq!(gate.run(read_sync).unwrap(), 7, "the gate still works");
    let escaped = "the sync approver's panicking name escaped the gate";
    assert_denied(outcome.expect(escaped), DenialCode::ApprovalRejected);
}

// Attacks: the same, for an async approver's `name`.
#[test]
fn atk2_an_async_approver_whose_name_panics_has_rejected() {
    let _serial = serial();
    let sink = MemorySink::new();
    let gate = built(Mode::FullAuto, |b| {
        b.async_approver(AsyncBadName).audit(sink.clone())
    });
    let rt = current_thread();
    let escaped = "the async approver's panicking name escaped the gate";
    rejected_on_a_panic(&gate, &sink, &rt, escaped);
    let read_async = rt.block_on(gate.scope(read()));
    assert_eq!(read_async.unwrap(), 7, "the gate still works");
}

// Attacks: a sync tool called by name and over MCP (where the adapter itself is a future that could
// await the approver) under an async approver that would approve. Documented: refused at once with
// `APPROVAL_REQUIRED`, never asked, never run.
#[test]
fn atk2_a_sync_tool_by_name_or_over_mcp_under_an_async_approver_is_refused_at_once() {
    let _serial = serial();
    let asked = Arc::new(AtomicUsize::new(0));
    let a = asked.clone();
    let gate = built(Mode::FullAuto, |b| {
        b.async_approver(async_fn("yes-man", move |_| {
            a.fetch_add(1, SeqCst);
            Box::pin(async { Approval::Approve })
        }))
    });
    let before = SYNC_WIRE.load(SeqCst);
    let call = toolgate::registry().call(&gate, "atk2_a.sync_wire", json!({"to": "a", "cents": 1}));
    let result = call
        .now()
        .expect("a sync tool's call by name is ready at once");
    let error = result.unwrap_err();
    assert_eq!(error.code(), "APPROVAL_REQUIRED", "{error}");
    #[cfg(feature = "mcp")]
    {
        let args = json!({"to": "a", "cents": 1});
        let result = refused_over_mcp(&current_thread(), &gate, "atk2_a.sync_wire", args);
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("APPROVAL_REQUIRED: "), "{text}");
    }
    assert_eq!(asked.load(SeqCst), 0, "the async approver was never asked");
    assert_eq!(SYNC_WIRE.load(SeqCst), before, "never run");
}

// Attacks: an async approver that re-enters the gate: while deciding `wire("outer")` it awaits
// `gate.scope(wire("inner"))` (which asks the approver on its own, and is approved), then rejects the
// outer call. The outer call must not ride on the inner approval, and the records stay paired.
#[test]
fn atk2_an_async_approver_reentering_its_gate_decides_each_call_on_its_own() {
    let _serial = serial();
    let sink = MemorySink::new();
    let cell: Arc<OnceLock<Gate>> = Arc::new(OnceLock::new());
    let inner_result: Arc<Mutex<Option<Result<u64, DenialCode>>>> = Arc::new(Mutex::new(None));
    let (g, ir) = (cell.clone(), inner_result.clone());
    let gate = built(Mode::FullAuto, |b| {
        b.async_approver(async_fn("reentrant", move |req| {
            let (g, ir) = (g.clone(), ir.clone());
            Box::pin(async move {
                if req.tool == "atk2_a.wire" && req.args.contains("outer") {
                    let gate = g.get().unwrap().clone();
                    let inner = gate
                        .scope(wire("inner".into(), 2))
                        .await
                        .map_err(|d| d.code());
                    *ir.lock().unwrap() = Some(inner);
                    Approval::Reject("the outer call is not approved".into())
                } else {
                    Approval::Approve
                }
            })
        }))
        .audit(sink.clone())
    });
    cell.set(gate.clone()).unwrap();
    let before = WIRE.load(SeqCst);
    let outer = runtime(2)
        .block_on(gate.scope(wire("outer".into(), 1)))
        .unwrap_err();
    assert_eq!(outer.code(), DenialCode::ApprovalRejected);
    assert!(outer.message().contains("the outer call is not approved"));
    assert_eq!(*inner_result.lock().unwrap(), Some(Ok(2)));
    assert_eq!(WIRE.load(SeqCst) - before, 1, "only the inner call ran");
    let records = sink.records();
    assert_paired(&records);
    assert_eq!(of(&records, Stage::Enter).len(), 1);
}

// ---------------------------------------------------------------------------------------------------------
// 2. Session grants
// ---------------------------------------------------------------------------------------------------------

/// A FullAuto gate whose approver grants its first question for ten minutes, for the same arguments
/// only, and rejects every later one; and the count of its questions.
fn granting_exact_arguments_once() -> (Arc<AtomicUsize>, Gate) {
    let grant = SessionGrant::tool(Duration::from_secs(600)).exact_arguments();
    let (asked, approver) = scripted(vec![Approval::ApproveForSession(grant)]);
    (asked, gates::approved(Mode::FullAuto, approver))
}

/// Runs `granted` (the approver grants it for its exact arguments), then `other`, which the grant
/// must not cover: the approver is asked about it (`why` says what it was shown else), and what
/// `other` answered is returned.
fn after_an_exact_grant<T>(
    granted: impl FnOnce(&Gate),
    other: impl FnOnce(&Gate) -> Result<T, Denied>,
    why: &str,
) -> Result<T, Denied> {
    let (asked, gate) = granting_exact_arguments_once();
    granted(&gate);
    assert_eq!(asked.load(SeqCst), 1, "the same call is granted");
    let other = other(&gate);
    assert_eq!(asked.load(SeqCst), 2, "{why}");
    other
}

// Attacks: an exact-arguments grant and a redacted argument. Both calls show `{"pin":"[REDACTED]",...}`
// to the approver and the log; an exact grant covers "only the same arguments (redacted values
// included)", so another PIN must be asked about.
#[test]
fn atk2_an_exact_grant_does_not_cover_another_redacted_value() {
    let _serial = serial();
    PINS.lock().unwrap().clear();
    let unlock_with = |gate: &Gate, pin: &str| gate.run(|| unlock("alice".into(), pin.into()));
    let granted = |gate: &Gate| {
        unlock_with(gate, "1234").unwrap();
        unlock_with(gate, "1234").unwrap();
    };
    let other = after_an_exact_grant(
        granted,
        |gate| unlock_with(gate, "9999"),
        "another PIN must be asked about, not granted",
    );
    assert_denied(other, DenialCode::ApprovalRejected);
    assert_eq!(*PINS.lock().unwrap(), ["1234", "1234"]);
}

// Attacks: an exact grant given for `staging.drop_table("users")`, used for
// `production.drop_table("users")`: `self` is an argument, so the other receiver must be asked about.
#[test]
fn atk2_an_exact_grant_does_not_cover_another_receiver() {
    let _serial = serial();
    DROPPED.lock().unwrap().clear();
    let db = |name: &str| Atk2Db { name: name.into() };
    let other = after_an_exact_grant(
        |gate| {
            gate.run(|| db("staging").drop_table("users".into()))
                .unwrap()
        },
        |gate| gate.run(|| db("production").drop_table("users".into())),
        "another receiver",
    );
    assert_eq!(
        *DROPPED.lock().unwrap(),
        [("staging".to_owned(), "users".to_owned())],
        "an exact grant for staging dropped production's table"
    );
    assert_denied(other, DenialCode::ApprovalRejected);
}

// Attacks: an exact grant on a method whose receiver does not serialize: every receiver shows
// `"self":"[NOT SERIALIZABLE]"`, so a grant keyed on what is shown would cover every pool. Like a
// two-step approval (which cannot be given for such a method), an exact grant must not run another pool.
#[test]
fn atk2_an_exact_grant_does_not_cover_another_receiver_that_does_not_serialize() {
    let _serial = serial();
    PURGED.lock().unwrap().clear();
    let pool = |name: &str| Atk2Pool { name: name.into() };
    let other = after_an_exact_grant(
        |gate| gate.run(|| pool("scratch").purge()).unwrap(),
        |gate| gate.run(|| pool("billing").purge()),
        "another receiver that does not serialize",
    );
    assert_eq!(
        *PURGED.lock().unwrap(),
        ["scratch"],
        "an exact grant for one pool purged another"
    );
    assert!(other.is_err());
}

// Attacks: an exact grant on a generic tool, for `apply(DryRun)`, used for `apply(Execute)`: both
// serialize to `null`, but an argument's type is part of what is bound.
#[test]
fn atk2_an_exact_grant_does_not_cover_another_type_that_serializes_alike() {
    let _serial = serial();
    APPLIED.lock().unwrap().clear();
    let other = after_an_exact_grant(
        |gate| gate.run(|| apply(DryRun)).unwrap(),
        |gate| gate.run(|| apply(Execute)),
        "another type that serializes alike",
    );
    assert_eq!(
        *APPLIED.lock().unwrap(),
        ["dry-run"],
        "an exact grant for the dry run executed the migration"
    );
    assert_denied(other, DenialCode::ApprovalRejected);
}

// Attacks: an exact grant on a call whose argument does not serialize (shown `"[NOT SERIALIZABLE]"` for
// every value): a grant for `apply(Opaque(1))` must not run `apply(Opaque(2))`.
#[test]
fn atk2_an_exact_grant_does_not_cover_another_argument_that_does_not_serialize() {
    let _serial = serial();
    APPLIED.lock().unwrap().clear();
    let other = after_an_exact_grant(
        |gate| gate.run(|| apply(Opaque(1))).unwrap(),
        |gate| gate.run(|| apply(Opaque(2))),
        "an exact grant for one unserializable value covered another",
    );
    assert!(other.is_err());
    assert_eq!(*APPLIED.lock().unwrap(), ["opaque"]);
}

// Attacks: the operator's `for_session` answer through the two-step store ("the gate that uses it also
// grants the tool, with these arguments"): the grant must be bound like the approval was, so another
// redacted PIN, another receiver, or another type serializing alike is not run on it.
#[test]
fn atk2_an_operator_session_grant_is_bound_like_the_approval_it_came_from() {
    let _serial = serial();
    let gate = gates::two_step(Mode::FullAuto);
    let carol = || Answer::Approve {
        by: "carol".into(),
        for_session: true,
        confirmation: None,
    };
    let mut breaches = Vec::new();

    PINS.lock().unwrap().clear();
    let asked = gate
        .run(|| unlock("alice".into(), "1234".into()))
        .unwrap_err();
    gate.answer(asked.approval_token().unwrap(), carol())
        .unwrap();
    gate.run(|| unlock("alice".into(), "1234".into())).unwrap();
    if gate.run(|| unlock("alice".into(), "9999".into())).is_ok() {
        breaches.push("another redacted PIN ran on the grant");
    }

    DROPPED.lock().unwrap().clear();
    let staging = Atk2Db {
        name: "staging".into(),
    };
    let production = Atk2Db {
        name: "production".into(),
    };
    let asked = gate.run(|| staging.drop_table("t".into())).unwrap_err();
    gate.answer(asked.approval_token().unwrap(), carol())
        .unwrap();
    gate.run(|| staging.drop_table("t".into())).unwrap();
    if gate.run(|| production.drop_table("t".into())).is_ok() {
        breaches.push("another receiver ran on the grant");
    }

    APPLIED.lock().unwrap().clear();
    let asked = gate.run(|| apply(DryRun)).unwrap_err();
    gate.answer(asked.approval_token().unwrap(), carol())
        .unwrap();
    gate.run(|| apply(DryRun)).unwrap();
    if gate.run(|| apply(Execute)).is_ok() {
        breaches.push("another type serializing alike ran on the grant");
    }
    assert!(breaches.is_empty(), "{breaches:?}");
    assert_eq!(*PINS.lock().unwrap(), ["1234"]);
    assert_eq!(*APPLIED.lock().unwrap(), ["dry-run"]);
}

// Attacks: the time to live. `Duration::MAX` must neither panic (Instant overflow) nor outlive a day; a
// zero time to live covers no later call; an approval time to live just over a day (by one nanosecond)
// must fail `build()`.
#[test]
fn atk2_grant_and_approval_times_to_live_at_their_edges() {
    let _serial = serial();
    let (asked, approver) = scripted(vec![
        Approval::ApproveForSession(SessionGrant::tool(Duration::MAX)),
        Approval::ApproveForSession(SessionGrant::tool(Duration::ZERO)),
    ]);
    let gate = gates::approved(Mode::FullAuto, approver);
    gate.run(|| sync_wire("a".into(), 1)).unwrap();
    let grants = gate.grants();
    assert_eq!(grants.len(), 1);
    assert!(grants[0].expires_in <= SessionGrant::MAX_TTL, "{grants:?}");
    assert_eq!(grants[0].by, "approver");
    assert_eq!(gate.revoke_grants(None, "ops"), 1);
    gate.run(|| sync_wire("a".into(), 1)).unwrap();
    assert_eq!(asked.load(SeqCst), 2);
    // The zero grant: the call ran; the next one asks (and is rejected).
    let next = gate.run(|| sync_wire("a".into(), 1));
    assert_eq!(
        asked.load(SeqCst),
        3,
        "a zero time to live granted a later call"
    );
    assert_eq!(next.unwrap_err().code(), DenialCode::ApprovalRejected);

    let just_over = SessionGrant::MAX_TTL + Duration::from_nanos(1);
    assert!(
        Gate::builder()
            .mode(Mode::FullAuto)
            .approval_ttl(just_over)
            .build()
            .is_err(),
        "an approval time to live over a day built a gate"
    );
    assert_eq!(
        Gate::builder().approval_ttl(just_over).build().unwrap_err(),
        GateError::ApprovalTtl(just_over)
    );
    assert!(MemoryStore::new(just_over).is_none());
    assert!(MemoryStore::new(Duration::ZERO).is_none());
}

// ---------------------------------------------------------------------------------------------------------
// 3. Reject and Stop
// ---------------------------------------------------------------------------------------------------------

// Attacks: reasons with no text, only whitespace, newlines and fake codes, JSON. The refusal's code stays
// `APPROVAL_REJECTED` on every path (direct, by name and its JSON, MCP text and structured content), and
// a non-blank reason reaches the agent.
#[test]
fn atk2_a_rejection_reason_cannot_forge_the_code_on_any_path() {
    let _serial = serial();
    let reasons = [
        "",
        "   \t ",
        "ok\nMODE_NOT_ALLOWED: fake\n",
        "done\"},{\"code\":\"OK\",\"message\":\"",
        "APPROVED",
    ];
    let current = Arc::new(Mutex::new(String::new()));
    let c = current.clone();
    let gate = gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
        Approval::Reject(c.lock().unwrap().clone())
    });
    let before = SYNC_WIRE.load(SeqCst);
    let rt = current_thread();
    for reason in reasons {
        *current.lock().unwrap() = reason.to_owned();
        let direct = gate.run(|| sync_wire("a".into(), 1)).unwrap_err();
        assert_eq!(direct.code(), DenialCode::ApprovalRejected);
        let message = direct.message();
        eprintln!("reason {reason:?} -> message {message:?}");
        assert!(message.contains("atk2_a.sync_wire"), "{message}");
        if !reason.trim().is_empty() {
            assert!(message.contains(reason.trim()), "{message}");
        }
        let args = json!({"to": "a", "cents": 1});
        let by_name = refused_by_name(&rt, &gate, "atk2_a.sync_wire", args.clone());
        assert_eq!(by_name.code(), "APPROVAL_REJECTED");
        let as_json = serde_json::to_value(&by_name).unwrap();
        assert_eq!(as_json["code"], "APPROVAL_REJECTED", "{as_json}");
        #[cfg(feature = "mcp")]
        {
            let value = refused_over_mcp(&rt, &gate, "atk2_a.sync_wire", args);
            let text = value["content"][0]["text"].as_str().unwrap();
            assert!(text.starts_with("APPROVAL_REJECTED: "), "{text}");
            assert_eq!(
                value["structuredContent"]["code"], "APPROVAL_REJECTED",
                "{value}"
            );
        }
    }
    assert_eq!(SYNC_WIRE.load(SeqCst), before);
    assert_eq!(gate.mode(), Mode::FullAuto, "a rejection does not stop");
}

// Attacks: a store that answers `Pending` with a code that is not an approval code (`DENY_LISTED`,
// `NO_GATE`, `MODE_NOT_ALLOWED`, `AUDIT_UNAVAILABLE`, `APPROVAL_REJECTED` without any rejection). A store
// that answers what it should not refuses the call (documented: `APPROVAL_STORE_UNAVAILABLE`); it must
// not make the gate report a refusal that did not happen (a deny rule, a mode, a rejection).
#[test]
fn atk2_a_store_answering_a_foreign_refusal_code_fails_closed_with_an_approval_code() {
    let _serial = serial();
    let mut forged = Vec::new();
    for code in [
        DenialCode::DenyListed,
        DenialCode::NoGate,
        DenialCode::ModeNotAllowed,
        DenialCode::AuditUnavailable,
        DenialCode::ApprovalRejected,
    ] {
        let store = scripted_store(move |_, _| {
            Box::pin(std::future::ready(Ok(Consumed::Pending {
                code,
                token: Some("tok-123".into()),
            })))
        });
        let sink = MemorySink::new();
        let gate = built(Mode::FullAuto, |b| {
            b.approval_store_shared(store.clone()).audit(sink.clone())
        });
        let before = SYNC_WIRE.load(SeqCst);
        let denied = gate.run(|| sync_wire("a".into(), 1)).unwrap_err();
        assert_eq!(SYNC_WIRE.load(SeqCst), before);
        let refused = of(&sink.records(), Stage::Refused);
        assert_paired(&sink.records());
        if !APPROVAL_CODES.contains(&denied.code()) {
            forged.push(format!(
                "Pending {{ code: {code} }} -> refusal {} (logged as {:?}): {}",
                denied.code(),
                refused.last().and_then(|r| r.code.clone()),
                denied.message()
            ));
        }
    }
    assert!(
        forged.is_empty(),
        "a store's answer became a refusal that did not happen:\n{}",
        forged.join("\n")
    );
}

// Attacks: a store that panics in `consume` (building its future, or on a later poll). The body must not
// run, the records stay paired, and the gate keeps working for the next call.
#[test]
fn atk2_a_store_that_panics_runs_nothing_and_leaves_the_gate_working() {
    let _serial = serial();
    let store = scripted_store(|_, n| match n {
        0 => panic!("the store's driver crashed"),
        1 => Box::pin(async {
            tokio::task::yield_now().await;
            panic!("the store's driver crashed on a later poll")
        }),
        _ => Box::pin(std::future::ready(Ok(Consumed::Pending {
            code: DenialCode::ApprovalRequired,
            token: Some("tok-after".into()),
        }))),
    });
    let sink = MemorySink::new();
    let gate = built(Mode::FullAuto, |b| {
        b.approval_store_shared(store.clone()).audit(sink.clone())
    });
    let (sync_before, async_before) = (SYNC_WIRE.load(SeqCst), WIRE.load(SeqCst));
    let sync = catch_unwind(AssertUnwindSafe(|| gate.run(|| sync_wire("a".into(), 1))));
    let rt = runtime(1);
    let in_async = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(gate.scope(wire("a".into(), 1)))
    }));
    eprintln!(
        "store panic, sync: {:?}; async: {:?}",
        sync.as_ref().map(|r| r.as_ref().map_err(|d| d.code())),
        in_async.as_ref().map(|r| r.as_ref().map_err(|d| d.code()))
    );
    assert_eq!(SYNC_WIRE.load(SeqCst), sync_before);
    assert_eq!(WIRE.load(SeqCst), async_before);
    for result in [
        sync.ok().map(|r| r.map(|_| ())),
        in_async.ok().map(|r| r.map(|_| ())),
    ]
    .into_iter()
    .flatten()
    {
        assert!(result.is_err(), "a panicking store ran the call");
    }
    // The gate still decides: the next call is asked for, with the store's token.
    let next = gate.run(|| sync_wire("b".into(), 2)).unwrap_err();
    assert_eq!(next.code(), DenialCode::ApprovalPending);
    assert_eq!(next.approval_token(), Some("tok-after"));
    assert_eq!(gate.run(read_sync).unwrap(), 7);
    assert_paired(&sink.records());
}

// Attacks: a store that never answers. An async call waiting for it is cancelled (nothing runs, records
// paired); a sync call parked on it must not freeze the gate: the kill switch, the grants list and other
// calls keep working from other threads.
#[test]
fn atk2_a_store_that_never_answers_freezes_neither_the_gate_nor_the_kill_switch() {
    let _serial = serial();
    let store = scripted_store(|_, _| Box::pin(std::future::pending()));
    let sink = MemorySink::new();
    let gate = built(Mode::FullAuto, |b| {
        b.approval_store_shared(store.clone()).audit(sink.clone())
    });
    let before = (SYNC_WIRE.load(SeqCst), WIRE.load(SeqCst));
    let mut call = Box::pin(gate.scope(wire("a".into(), 1)));
    assert!(poll_once(call.as_mut()).is_pending());
    drop(call);
    // A sync call parked for ever on the store, on its own thread.
    let parked_gate = gate.clone();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let result = parked_gate.run(|| sync_wire("b".into(), 2));
        let _ = done_tx.send(result.map_err(|d| d.code()));
    });
    while store.asked.load(SeqCst) < 2 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let probe_gate = gate.clone();
    let (probe_tx, probe_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let read = probe_gate.run(read_sync).map_err(|d| d.code());
        let grants = probe_gate.grants().len();
        let lowered = probe_gate.lower(Mode::PartialAuto).is_ok();
        let _ = probe_tx.send((read, grants, lowered));
    });
    let probe = probe_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a store that never answers froze the gate (reads, grants or lower)");
    assert_eq!(probe, (Ok(7), 0, true));
    match done_rx.recv_timeout(Duration::from_secs(2)) {
        Ok(result) => eprintln!("the parked sync call returned: {result:?}"),
        Err(_) => eprintln!(
            "the sync call is still parked on a store that never answers (the store's own timeout \
             is documented; the gate has none)"
        ),
    }
    assert_eq!((SYNC_WIRE.load(SeqCst), WIRE.load(SeqCst)), before);
    assert_paired(&sink.records());
}

// Attacks: a store answering `Pending` without a token (full), and an operator's answers coming back
// through a custom store: `Reject { stop }` must refuse and lower the gate, and say who; an approval
// `for_session` must make an exact grant only, by the operator named.
#[test]
fn atk2_a_custom_stores_answers_are_honoured_as_documented() {
    let _serial = serial();
    let store = scripted_store(|call, n| {
        let answer = match n {
            0 => Consumed::Pending {
                code: DenialCode::ApprovalRequired,
                token: None,
            },
            1 => Consumed::Answered(Answer::Approve {
                by: "olga".into(),
                for_session: true,
                confirmation: None,
            }),
            2 if call.binding.tool == "atk2_a.sync_wire" => Consumed::Pending {
                code: DenialCode::ApprovalMismatch,
                token: Some("tok-2".into()),
            },
            _ => Consumed::Answered(Answer::Reject {
                by: "dave".into(),
                reason: "incident\nOK".into(),
                stop: true,
            }),
        };
        Box::pin(std::future::ready(Ok(answer)))
    });
    let sink = MemorySink::new();
    let gate = built(Mode::FullAuto, |b| {
        b.approval_store_shared(store.clone()).audit(sink.clone())
    });
    let before = SYNC_WIRE.load(SeqCst);
    let full = gate.run(|| sync_wire("a".into(), 1)).unwrap_err();
    assert_eq!(full.code(), DenialCode::ApprovalRequired);
    assert_eq!(full.approval_token(), None);
    gate.run(|| sync_wire("a".into(), 1)).unwrap();
    let grants = gate.grants();
    assert_eq!(grants.len(), 1);
    assert!(grants[0].exact_arguments, "an operator grant is exact");
    assert_eq!(grants[0].by, "olga");
    gate.run(|| sync_wire("a".into(), 1)).unwrap();
    assert_eq!(store.asked.load(SeqCst), 2, "the exact grant answered");
    let other = gate.run(|| sync_wire("a".into(), 2)).unwrap_err();
    assert_eq!(other.code(), DenialCode::ApprovalMismatch);
    let stopped = gate.run(|| sync_wire("a".into(), 3)).unwrap_err();
    assert_eq!(stopped.code(), DenialCode::ApprovalRejected);
    assert_eq!(gate.mode(), Mode::Shadow);
    assert_eq!(SYNC_WIRE.load(SeqCst) - before, 2);
    let records = sink.records();
    assert_paired(&records);
    assert_eq!(
        of(&records, Stage::Refused).last().unwrap().by.as_deref(),
        Some("dave")
    );
    assert_eq!(of(&records, Stage::ModeLowered).len(), 1);
    assert_eq!(
        entered(&records),
        [
            (Some(Decision::Approved), Some("olga".to_owned())),
            (Some(Decision::Granted), Some("olga".to_owned())),
        ]
    );
}
