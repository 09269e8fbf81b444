//! Guarantee 13 (A budget is never exceeded, and counts the calls that run), against budgets and
//! two-step approvals kept in stores, the principal, and approvals over MCP.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(feature = "mcp-http")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use toolgate::approval::SessionGrant;
use toolgate::gate::BudgetScope;
use toolgate::gate::budget::{BudgetCharge, BudgetFuture, BudgetStore};
use toolgate::{Approval, ApprovalRequest, Gate, Mode, Risk};

use crate::common::gates;
use crate::fixtures::shared_stores::*;
use crate::g07_approvals::checks::{built, racing};

// ---------------------------------------------------------------------------------------------------
// Budgets
// ---------------------------------------------------------------------------------------------------

/// Clones of a gate share its budget: N calls spread over the gate and its clones, then refused.
#[test]
fn b01_clones_share_the_budget() {
    let gate = gates::budgeted(Mode::PartialAuto, BudgetScope::tool("b01.*"), 3, HOUR);
    let mut codes = Vec::new();
    for i in 0..10 {
        let g = gate.clone();
        let g2 = g.clone();
        codes.push(code(g2.run(|| b01_send(format!("{i}")))));
    }
    assert_eq!(B01.load(Ordering::SeqCst), 3, "codes {codes:?}");
    assert_eq!(codes.iter().filter(|c| *c == "BUDGET_EXHAUSTED").count(), 7);
}

/// A gate entered inside a budgeted gate (a nested ambient gate without budgets) cannot run more than
/// the outer gate's budget allows.
#[test]
fn b02_nested_gate_without_budget_is_still_counted_by_the_outer_one() {
    let outer = gates::budgeted(Mode::PartialAuto, BudgetScope::tool("b02.*"), 2, HOUR);
    let inner = Gate::builder().mode(Mode::FullAuto).build().unwrap();
    let mut codes = Vec::new();
    for i in 0..6 {
        codes.push(outer.run(|| inner.run(|| code(b02_send(format!("{i}"))))));
    }
    // The same gate entered twice counts each call once, not twice (so it may not starve either).
    assert!(
        B02.load(Ordering::SeqCst) <= 2,
        "ran {} times: {codes:?}",
        B02.load(Ordering::SeqCst)
    );
    assert_eq!(B02.load(Ordering::SeqCst), 2, "{codes:?}");
}

/// Direct, by-name and async calls all count, once each, against one budget.
#[test]
fn b03_direct_by_name_and_async_share_one_budget() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let gate = gates::budgeted(Mode::PartialAuto, BudgetScope::tool("b03.*"), 4, HOUR);
    let mut codes = Vec::new();
    for i in 0..4 {
        // direct sync
        codes.push(
            gate.run(|| b03_send(format!("d{i}")))
                .map(|_| ())
                .map_err(|d| d.code().to_string()),
        );
        // by name, sync
        let r = toolgate::registry()
            .call(
                &gate,
                "b03.b03_send",
                serde_json::json!({"to": format!("n{i}")}),
            )
            .now()
            .expect("a sync tool is ready at once");
        codes.push(r.map(|_| ()).map_err(|e| e.code().to_owned()));
        // by name, async
        let r = rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(10),
                toolgate::registry().call(
                    &gate,
                    "b03.b03_send_async",
                    serde_json::json!({"to": "a"}),
                ),
            )
            .await
            .expect("bounded")
        });
        codes.push(r.map(|_| ()).map_err(|e| e.code().to_owned()));
        // direct async, in a scope
        let r = rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(10),
                gate.scope(b03_send_async("s".into())),
            )
            .await
            .expect("bounded")
        });
        codes.push(r.map(|_| ()).map_err(|d| d.code().to_string()));
    }
    assert_eq!(B03.load(Ordering::SeqCst), 4, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| c.is_ok()).count(), 4, "{codes:?}");
}

/// A tool with a `&Gate` parameter: decided once (one unit), direct and by name; and called with the
/// budgeted gate as its argument while an unbudgeted gate is ambient, still counted.
#[test]
fn b04_gate_parameter_counts_once_and_cannot_dodge() {
    let gate = gates::budgeted(Mode::PartialAuto, BudgetScope::tool("b04.*"), 4, HOUR);
    let free = Gate::builder().mode(Mode::FullAuto).build().unwrap();
    let mut codes = Vec::new();
    for i in 0..2 {
        codes.push(code(b04_with_gate(&gate, i).map(|_| ())));
    }
    for i in 0..2 {
        let r = toolgate::registry()
            .call(&gate, "b04.b04_with_gate", serde_json::json!({"n": i}))
            .now()
            .expect("ready");
        codes.push(match r {
            Ok(_) => "OK".into(),
            Err(e) => e.code().to_owned(),
        });
    }
    // Four units are gone: every further call of the budgeted gate is refused, whichever gate is ambient.
    for i in 0..3 {
        codes.push(free.run(|| code(b04_with_gate(&gate, 10 + i).map(|_| ()))));
        codes.push(gate.run(|| code(b04_with_gate(&free, 20 + i).map(|_| ()))));
    }
    assert_eq!(
        &codes[..4],
        &["OK", "OK", "OK", "OK"],
        "each call counted once: {codes:?}"
    );
    assert_eq!(B04.load(Ordering::SeqCst), 4, "{codes:?}");
}

/// Many threads racing on one budget (and clones of the gate): never more than N bodies.
#[test]
fn b05_many_threads_never_exceed_the_budget() {
    let gate = built(Mode::PartialAuto, |b| {
        b.budget(BudgetScope::tool("b05.*"), 25, HOUR)
            .budget(BudgetScope::Agent, 1000, HOUR)
    });
    let runs = racing(&gate, 8, |gate, t| {
        let hit = |i| gate.run(|| b05_hit(t as u64 * 1000 + i)).is_ok();
        (0..60).filter(|&i| hit(i)).count()
    });
    let ok: usize = runs.into_iter().sum();
    assert_eq!(B05.load(Ordering::SeqCst), 25);
    assert_eq!(ok, 25);
}

/// Several budgets on one call: a call refused by one takes nothing of the others.
#[test]
fn b06_all_or_none_across_budgets() {
    let gate = built(Mode::PartialAuto, |b| {
        b.agent("b06-agent")
            .budget(BudgetScope::tool("b06.*"), 1, HOUR)
            .budget(BudgetScope::Agent, 3, HOUR)
    });
    let mut codes = vec![code(gate.run(b06_limited))];
    for _ in 0..20 {
        codes.push(code(gate.run(b06_limited))); // refused by the tool budget: no agent unit taken
    }
    codes.push(code(gate.run(b06_other)));
    codes.push(code(gate.run(b06_other)));
    codes.push(code(gate.run(b06_other))); // the agent's 4th: refused
    assert_eq!(codes[0], "OK");
    assert!(
        codes[1..21].iter().all(|c| c == "BUDGET_EXHAUSTED"),
        "{codes:?}"
    );
    assert_eq!(&codes[21..], &["OK", "OK", "BUDGET_EXHAUSTED"], "{codes:?}");
    assert_eq!(B06.load(Ordering::SeqCst), 201);
}

/// A call the mode refuses takes no unit of the agent budget.
#[test]
fn b07_mode_refusals_take_no_unit() {
    let gate = gates::budgeted(Mode::PartialAuto, BudgetScope::Agent, 2, HOUR);
    let mut codes = Vec::new();
    for _ in 0..5 {
        codes.push(code(gate.run(b07_full_only)));
    }
    codes.push(code(gate.run(b07_ok)));
    codes.push(code(gate.run(b07_ok)));
    codes.push(code(gate.run(b07_ok)));
    assert_eq!(&codes[5..], &["OK", "OK", "BUDGET_EXHAUSTED"], "{codes:?}");
    assert_eq!(B07.load(Ordering::SeqCst), 2);
}

/// No approver is asked about a call the budget refuses; a rejected call did not run and gives its unit
/// back, so the budget still holds for calls that run.
#[test]
fn b08_approver_not_asked_past_the_budget() {
    let asked = Arc::new(AtomicUsize::new(0));
    let gate = built(Mode::FullAuto, |b| {
        b.approver({
            let asked = asked.clone();
            move |_: &ApprovalRequest<'_>| {
                // Three rejections, then approvals.
                if asked.fetch_add(1, Ordering::SeqCst) < 3 {
                    Approval::Reject("no".into())
                } else {
                    Approval::Approve
                }
            }
        })
        .budget(Risk::HighWrite, 2, HOUR)
    });
    let codes: Vec<_> = (0..6).map(|i| code(gate.run(|| b08_wire(i)))).collect();
    assert_eq!(
        codes,
        [
            "APPROVAL_REJECTED",
            "APPROVAL_REJECTED",
            "APPROVAL_REJECTED",
            "OK",
            "OK",
            "BUDGET_EXHAUSTED"
        ]
    );
    assert_eq!(asked.load(Ordering::SeqCst), 5);
    assert_eq!(B08.load(Ordering::SeqCst), 2);
}

/// An escalated call counts at its escalated risk; the approver is not asked past it.
#[test]
fn b09_escalated_risk_is_counted() {
    let asked = Arc::new(AtomicUsize::new(0));
    let gate = built(Mode::FullAuto, |b| {
        b.approver(counting_approver(asked.clone(), || Approval::Approve))
            .budget(Risk::HighWrite, 1, HOUR)
    });
    let codes: Vec<_> = (0..4)
        .map(|i| code(gate.run(|| b09_shell(format!("sudo rm {i}")))))
        .collect();
    assert_eq!(
        codes,
        [
            "OK",
            "BUDGET_EXHAUSTED",
            "BUDGET_EXHAUSTED",
            "BUDGET_EXHAUSTED"
        ]
    );
    // Not escalated: LOW_WRITE, not covered by the HIGH_WRITE budget.
    assert_eq!(code(gate.run(|| b09_shell("ls".into()))), "OK");
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(B09.load(Ordering::SeqCst), 2);
}

/// A session grant's shortcut does not skip the budget.
#[test]
fn b10_session_grant_does_not_skip_the_budget() {
    let asked = Arc::new(AtomicUsize::new(0));
    let gate = built(Mode::FullAuto, |b| {
        b.approver(counting_approver(asked.clone(), || {
            Approval::ApproveForSession(SessionGrant::tool(HOUR))
        }))
        .budget(BudgetScope::tool("b10.*"), 2, HOUR)
    });
    let clone = gate.clone();
    let codes: Vec<_> = (0..6)
        .map(|i| {
            let g = if i % 2 == 0 { &gate } else { &clone };
            code(g.run(|| b10_wire(i)))
        })
        .collect();
    assert_eq!(B10.load(Ordering::SeqCst), 2, "{codes:?}");
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

/// A store that fails, or panics, refuses the call: the body does not run.
#[test]
fn b11_failing_store_refuses() {
    struct Failing;
    impl BudgetStore for Failing {
        fn release(
            &self,
            _: &[BudgetCharge],
            _: toolgate::gate::budget::Reservation,
        ) -> toolgate::gate::budget::ReleaseFuture {
            Box::pin(async {})
        }
        fn take(
            &self,
            _charges: &[BudgetCharge],
            _: toolgate::gate::budget::Reservation,
        ) -> BudgetFuture {
            Box::pin(async {
                Err(toolgate::approval::store::StoreError::Unavailable(
                    "down".into(),
                ))
            })
        }
        fn hold(
            &self,
            charges: &[BudgetCharge],
            r: toolgate::gate::budget::Reservation,
        ) -> BudgetFuture {
            self.take(charges, r)
        }
    }
    struct Panicking;
    impl BudgetStore for Panicking {
        fn release(
            &self,
            _: &[BudgetCharge],
            _: toolgate::gate::budget::Reservation,
        ) -> toolgate::gate::budget::ReleaseFuture {
            Box::pin(async {})
        }
        fn take(
            &self,
            _charges: &[BudgetCharge],
            _: toolgate::gate::budget::Reservation,
        ) -> BudgetFuture {
            panic!("store panics")
        }
        fn hold(&self, _: &[BudgetCharge], _: toolgate::gate::budget::Reservation) -> BudgetFuture {
            panic!("store panics")
        }
    }
    let gate = built(Mode::PartialAuto, |b| {
        b.budget(BudgetScope::tool("b11.*"), 5, HOUR)
            .budget_store(Failing)
    });
    for _ in 0..3 {
        assert_eq!(code(gate.run(b11_hit)), "BUDGET_STORE_UNAVAILABLE");
    }
    let gate = built(Mode::PartialAuto, |b| {
        b.budget(BudgetScope::tool("b11.*"), 5, HOUR)
            .budget_store(Panicking)
    });
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gate.run(b11_hit)));
    assert!(
        !matches!(r, Ok(Ok(()))),
        "a panicking store let the call through"
    );
    assert_eq!(B11.load(Ordering::SeqCst), 0);
}

/// The window slides: in no window of its length do more than N calls run, and `retry_after` is when
/// the call may run again.
#[test]
fn b12_sliding_window_edges() {
    let window = Duration::from_millis(200);
    let gate = gates::budgeted(Mode::PartialAuto, BudgetScope::tool("b12.*"), 3, window);
    let start = Instant::now();
    let mut retry_checked = 0;
    while start.elapsed() < Duration::from_millis(1200) {
        match gate.run(b12_hit) {
            Ok(()) => {}
            Err(denied) => {
                let t0 = Instant::now();
                assert_eq!(denied.code(), "BUDGET_EXHAUSTED");
                let retry = denied.retry_after().expect("a retry_after");
                assert!(retry <= window, "{retry:?}");
                if retry_checked < 3 && retry > Duration::from_millis(30) {
                    // Just before: still refused (asserted only when the call surely came early).
                    std::thread::sleep(retry - Duration::from_millis(15));
                    let early = code(gate.run(b12_hit));
                    let after = t0.elapsed();
                    if after + Duration::from_millis(5) < retry {
                        assert_eq!(
                            early, "BUDGET_EXHAUSTED",
                            "{after:?} after a refusal saying {retry:?}"
                        );
                    }
                    let rest = retry.saturating_sub(t0.elapsed());
                    std::thread::sleep(rest + Duration::from_millis(5));
                    assert_eq!(code(gate.run(b12_hit)), "OK", "after retry_after");
                    retry_checked += 1;
                }
            }
        }
    }
    let times = B12_TIMES.lock().unwrap().clone();
    assert!(times.len() >= 6, "{}", times.len());
    for w in times.windows(4) {
        // Body instants follow their checks by microseconds; allow 1 ms of slack.
        assert!(
            w[3] - w[0] + Duration::from_millis(1) >= window,
            "4 calls within {:?} of a {window:?} window of 3",
            w[3] - w[0]
        );
    }
}

/// An async tool over the budget: each call counts once, and a cancelled (dropped) call does not give
/// its unit back or run its body.
#[test]
fn b18_async_calls_and_cancellation() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let gate = gates::budgeted(Mode::PartialAuto, BudgetScope::tool("b18.*"), 5, HOUR);
    rt.block_on(async {
        let mut handles = Vec::new();
        for i in 0..40 {
            let g = gate.clone();
            handles.push(tokio::spawn(
                async move { g.scope(b18_async(i)).await.is_ok() },
            ));
        }
        let mut ok = 0;
        for h in handles {
            if tokio::time::timeout(Duration::from_secs(10), h)
                .await
                .unwrap()
                .unwrap()
            {
                ok += 1;
            }
        }
        assert_eq!(ok, 5);
    });
    assert_eq!(B18.load(Ordering::SeqCst), 5);
}

/// Two gates given one store share the budget (budget keys match); one gate of another agent label
/// does not draw on it, but neither exceeds its own.
#[test]
fn b19_shared_store_between_gates() {
    let store: Arc<dyn BudgetStore> = Arc::new(toolgate::gate::budget::MemoryBudgets::new());
    let a = built(Mode::PartialAuto, |b| {
        b.agent("b19")
            .budget(BudgetScope::tool("b19.*"), 3, HOUR)
            .budget_store_shared(store.clone())
    });
    let b = built(Mode::PartialAuto, |b| {
        b.agent("b19")
            .budget(BudgetScope::tool("b19.*"), 3, HOUR)
            .budget_store_shared(store.clone())
    });
    let mut codes = Vec::new();
    for i in 0..8 {
        let g = if i % 2 == 0 { &a } else { &b };
        codes.push(code(g.run(b19_hit)));
    }
    assert_eq!(B19.load(Ordering::SeqCst), 3, "{codes:?}");
}

/// Two budgets of one scope with different limits: the smaller holds; the same budget given twice
/// counts once per call.
#[test]
fn b37_two_budgets_of_one_scope() {
    let gate = built(Mode::PartialAuto, |b| {
        b.budget(BudgetScope::tool("b37.*"), 5, HOUR)
            .budget(BudgetScope::tool("b37.b37_hit"), 2, HOUR)
            .budget(BudgetScope::tool("b37.b37_hit"), 2, HOUR)
    });
    let codes: Vec<_> = (0..6).map(|_| code(gate.run(b37_hit))).collect();
    assert_eq!(B37.load(Ordering::SeqCst), 2, "{codes:?}");
}

/// A per-risk budget on READ_ONLY: the inlined path of an allowed call without records does not
/// skip it, from many threads.
#[test]
fn b38_read_only_budget_on_the_inlined_path() {
    let gate = gates::budgeted(Mode::Shadow, Risk::ReadOnly, 7, HOUR);
    let runs = racing(&gate, 4, |gate, _| {
        (0..50).filter(|_| gate.run(b38_read).is_ok()).count()
    });
    let ok: usize = runs.into_iter().sum();
    assert_eq!(B38.load(Ordering::SeqCst), 7);
    assert_eq!(ok, 7);
}

/// A classifier cannot move a call out of its declared risk's budget by answering lower.
#[test]
fn b39_classifier_cannot_lower_the_counted_risk() {
    let gate = built(Mode::FullAuto, |b| {
        b.approver(|_: &ApprovalRequest<'_>| Approval::Approve)
            .budget(Risk::HighWrite, 1, HOUR)
    });
    let codes: Vec<_> = (0..4).map(|i| code(gate.run(|| b39_wire(i)))).collect();
    assert_eq!(B39.load(Ordering::SeqCst), 1, "{codes:?}");
}

/// A call by name through an unbudgeted gate, made while a budgeted gate is entered around it: the
/// outer gate's budget still bounds it ("a gate entered inside this one still cannot run more than this
/// one allows"), and so does a direct call in a nested scope of an async future.
#[test]
fn b42_by_name_through_an_inner_gate_inside_a_budgeted_one() {
    let outer = gates::budgeted(Mode::PartialAuto, BudgetScope::tool("b42.*"), 1, HOUR);
    let free = Gate::builder().mode(Mode::FullAuto).build().unwrap();
    let codes: Vec<String> = outer.run(|| {
        (0..3)
            .map(|i| {
                match toolgate::registry()
                    .call(&free, "b42.b42_hit", serde_json::json!({"n": i}))
                    .now()
                    .expect("ready")
                {
                    Ok(_) => "OK".to_owned(),
                    Err(e) => e.code().to_owned(),
                }
            })
            .collect()
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let nested: Vec<String> = rt.block_on(outer.scope(async {
        let mut out = Vec::new();
        for i in 0..3 {
            out.push(code(
                free.scope(async { b42_hit(10 + i) }).await.map(|_| ()),
            ));
        }
        out
    }));
    assert!(
        B42.load(Ordering::SeqCst) <= 1,
        "{} calls ran past the outer gate's budget of 1: by name {codes:?}, nested {nested:?}",
        B42.load(Ordering::SeqCst)
    );
}
