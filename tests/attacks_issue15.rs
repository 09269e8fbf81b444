//! Attacks from outside on issue 15: budgets, two-step approvals (APPROVAL_PENDING), the principal, and
//! approvals over MCP. Safe Rust and the public API only. Each test asserts the documented guarantee:
//! it passes when the attack fails, and fails when the attack gets through. At commit time two got
//! through, both in the stdio size limit: `b29` and `b32` (see their comments); the rest hold.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use toolgate::approval::SessionGrant;
use toolgate::audit::{AuditRecord, AuditSink, Stage};
use toolgate::gate::BudgetScope;
use toolgate::gate::budget::{BudgetCharge, BudgetFuture, BudgetStore};
use toolgate::{Approval, ApprovalRequest, Denied, Gate, Mode, Risk, tool};

const HOUR: Duration = Duration::from_secs(3600);

// ---------------------------------------------------------------------------------------------------
// Tools: one per attack, so that tests running in parallel never share a body counter.
// ---------------------------------------------------------------------------------------------------

macro_rules! counter {
    ($name:ident) => {
        static $name: AtomicUsize = AtomicUsize::new(0);
    };
}

counter!(B01);
/// b01.
#[tool(risk = "LOW_WRITE", domain = "b01")]
fn b01_send(to: String) -> Result<(), Denied> {
    let _ = to;
    B01.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

counter!(B02);
/// b02.
#[tool(risk = "LOW_WRITE", domain = "b02")]
fn b02_send(to: String) -> Result<(), Denied> {
    let _ = to;
    B02.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

counter!(B03);
/// b03.
#[tool(risk = "LOW_WRITE", domain = "b03", callable)]
fn b03_send(to: String) -> Result<String, Denied> {
    B03.fetch_add(1, Ordering::SeqCst);
    Ok(to)
}
/// b03, async.
#[tool(risk = "LOW_WRITE", domain = "b03", callable)]
async fn b03_send_async(to: String) -> Result<String, Denied> {
    tokio::task::yield_now().await;
    B03.fetch_add(1, Ordering::SeqCst);
    Ok(to)
}

counter!(B04);
/// b04: a tool with the gate of the call as a parameter.
#[tool(risk = "LOW_WRITE", domain = "b04", callable)]
fn b04_with_gate(gate: &Gate, n: u64) -> Result<u64, Denied> {
    let _ = gate;
    B04.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

counter!(B05);
/// b05.
#[tool(risk = "LOW_WRITE", domain = "b05")]
fn b05_hit(n: u64) -> Result<(), Denied> {
    let _ = n;
    B05.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

counter!(B06);
/// b06: limited.
#[tool(risk = "LOW_WRITE", domain = "b06")]
fn b06_limited() -> Result<(), Denied> {
    B06.fetch_add(1, Ordering::SeqCst);
    Ok(())
}
/// b06: another tool, counted only by the agent budget.
#[tool(risk = "READ_ONLY", domain = "b06x")]
fn b06_other() -> Result<(), Denied> {
    B06.fetch_add(100, Ordering::SeqCst);
    Ok(())
}

counter!(B07);
/// b07: allowed only in FULL_AUTO.
#[tool(risk = "LOW_WRITE", domain = "b07", modes = [FULL_AUTO])]
fn b07_full_only() -> Result<(), Denied> {
    B07.fetch_add(1000, Ordering::SeqCst);
    Ok(())
}
/// b07: allowed in PARTIAL_AUTO.
#[tool(risk = "LOW_WRITE", domain = "b07x")]
fn b07_ok() -> Result<(), Denied> {
    B07.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

counter!(B08);
/// b08.
#[tool(risk = "HIGH_WRITE", domain = "b08")]
fn b08_wire(cents: u64) -> Result<(), Denied> {
    let _ = cents;
    B08.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

counter!(B09);
fn b09_classify(command: &str) -> Risk {
    if command.contains("sudo") {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}
/// b09: escalated by its command.
#[tool(risk = "LOW_WRITE", domain = "b09", escalate = b09_classify)]
fn b09_shell(command: String) -> Result<(), Denied> {
    let _ = command;
    B09.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

counter!(B10);
/// b10.
#[tool(risk = "HIGH_WRITE", domain = "b10")]
fn b10_wire(cents: u64) -> Result<(), Denied> {
    let _ = cents;
    B10.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

counter!(B11);
/// b11.
#[tool(risk = "LOW_WRITE", domain = "b11")]
fn b11_hit() -> Result<(), Denied> {
    B11.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

static B12_TIMES: Mutex<Vec<Instant>> = Mutex::new(Vec::new());
/// b12.
#[tool(risk = "LOW_WRITE", domain = "b12")]
fn b12_hit() -> Result<(), Denied> {
    B12_TIMES.lock().unwrap().push(Instant::now());
    Ok(())
}

counter!(B13);
/// b13.
#[tool(risk = "HIGH_WRITE", domain = "b13")]
fn b13_wire(cents: u64) -> Result<(), Denied> {
    let _ = cents;
    B13.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

counter!(B14);
/// b14.
#[tool(risk = "HIGH_WRITE", domain = "b14")]
fn b14_wire(cents: u64) -> Result<(), Denied> {
    let _ = cents;
    B14.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

counter!(B15);
/// b15.
#[tool(risk = "HIGH_WRITE", domain = "b15", callable)]
fn b15_wire(cents: u64) -> Result<u64, Denied> {
    B15.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

counter!(B16);
/// b16.
#[tool(risk = "HIGH_WRITE", domain = "b16")]
fn b16_wire(cents: u64) -> Result<(), Denied> {
    let _ = cents;
    B16.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

counter!(B17);
/// b17.
#[tool(risk = "HIGH_WRITE", domain = "b17")]
fn b17_wire(cents: u64) -> Result<(), Denied> {
    let _ = cents;
    B17.fetch_add(1, Ordering::SeqCst);
    Ok(())
}
/// b17, low.
#[tool(risk = "LOW_WRITE", domain = "b17x")]
fn b17_low() -> Result<(), Denied> {
    Ok(())
}

counter!(B18);
/// b18: async, counted.
#[tool(risk = "LOW_WRITE", domain = "b18")]
async fn b18_async(n: u64) -> Result<(), Denied> {
    tokio::task::yield_now().await;
    let _ = n;
    B18.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

counter!(B19);
/// b19.
#[tool(risk = "LOW_WRITE", domain = "b19")]
fn b19_hit() -> Result<(), Denied> {
    B19.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

// ---------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------

/// Keeps every record, as JSON.
#[derive(Default)]
struct Memory(Mutex<Vec<serde_json::Value>>);

impl AuditSink for Memory {
    fn record(&self, record: &AuditRecord) -> Result<(), toolgate::audit::AuditError> {
        self.0
            .lock()
            .unwrap()
            .push(serde_json::to_value(record).expect("a record serializes"));
        Ok(())
    }
}

impl Memory {
    fn records(&self) -> Vec<serde_json::Value> {
        self.0.lock().unwrap().clone()
    }
}

fn counting_approver(
    asked: Arc<AtomicUsize>,
    answer: fn() -> Approval,
) -> impl Fn(&ApprovalRequest<'_>) -> Approval + Send + Sync + 'static {
    move |_request: &ApprovalRequest<'_>| {
        asked.fetch_add(1, Ordering::SeqCst);
        answer()
    }
}

fn code(result: Result<(), Denied>) -> String {
    match result {
        Ok(()) => "OK".to_owned(),
        Err(denied) => denied.code().to_string(),
    }
}

// ---------------------------------------------------------------------------------------------------
// Budgets
// ---------------------------------------------------------------------------------------------------

/// Clones of a gate share its budget: N calls spread over the gate and its clones, then refused.
#[test]
fn b01_clones_share_the_budget() {
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("b01.*"), 3, HOUR)
        .build()
        .unwrap();
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
    let outer = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("b02.*"), 2, HOUR)
        .build()
        .unwrap();
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
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("b03.*"), 4, HOUR)
        .build()
        .unwrap();
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
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("b04.*"), 4, HOUR)
        .build()
        .unwrap();
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
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("b05.*"), 25, HOUR)
        .budget(BudgetScope::Agent, 1000, HOUR)
        .build()
        .unwrap();
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let gate = gate.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut ok = 0;
                for i in 0..60 {
                    if gate.run(|| b05_hit(t * 1000 + i)).is_ok() {
                        ok += 1;
                    }
                }
                ok
            })
        })
        .collect();
    let ok: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(B05.load(Ordering::SeqCst), 25);
    assert_eq!(ok, 25);
}

/// Several budgets on one call: a call refused by one takes nothing of the others.
#[test]
fn b06_all_or_none_across_budgets() {
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .agent("b06-agent")
        .budget(BudgetScope::tool("b06.*"), 1, HOUR)
        .budget(BudgetScope::Agent, 3, HOUR)
        .build()
        .unwrap();
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
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::Agent, 2, HOUR)
        .build()
        .unwrap();
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
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver({
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
        .build()
        .unwrap();
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
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(counting_approver(asked.clone(), || Approval::Approve))
        .budget(Risk::HighWrite, 1, HOUR)
        .build()
        .unwrap();
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
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(counting_approver(asked.clone(), || {
            Approval::ApproveForSession(SessionGrant::tool(HOUR))
        }))
        .budget(BudgetScope::tool("b10.*"), 2, HOUR)
        .build()
        .unwrap();
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
        fn release(&self, _: &[BudgetCharge], _: toolgate::gate::budget::Reservation) {}
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
    }
    struct Panicking;
    impl BudgetStore for Panicking {
        fn release(&self, _: &[BudgetCharge], _: toolgate::gate::budget::Reservation) {}
        fn take(
            &self,
            _charges: &[BudgetCharge],
            _: toolgate::gate::budget::Reservation,
        ) -> BudgetFuture {
            panic!("store panics")
        }
    }
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("b11.*"), 5, HOUR)
        .budget_store(Failing)
        .build()
        .unwrap();
    for _ in 0..3 {
        assert_eq!(code(gate.run(b11_hit)), "BUDGET_STORE_UNAVAILABLE");
    }
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("b11.*"), 5, HOUR)
        .budget_store(Panicking)
        .build()
        .unwrap();
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
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("b12.*"), 3, window)
        .build()
        .unwrap();
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
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("b18.*"), 5, HOUR)
        .build()
        .unwrap();
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
    let a = Gate::builder()
        .mode(Mode::PartialAuto)
        .agent("b19")
        .budget(BudgetScope::tool("b19.*"), 3, HOUR)
        .budget_store_shared(store.clone())
        .build()
        .unwrap();
    let b = Gate::builder()
        .mode(Mode::PartialAuto)
        .agent("b19")
        .budget(BudgetScope::tool("b19.*"), 3, HOUR)
        .budget_store_shared(store.clone())
        .build()
        .unwrap();
    let mut codes = Vec::new();
    for i in 0..8 {
        let g = if i % 2 == 0 { &a } else { &b };
        codes.push(code(g.run(b19_hit)));
    }
    assert_eq!(B19.load(Ordering::SeqCst), 3, "{codes:?}");
}

counter!(B37);
/// b37.
#[tool(risk = "LOW_WRITE", domain = "b37")]
fn b37_hit() -> Result<(), Denied> {
    B37.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Two budgets of one scope with different limits: the smaller holds; the same budget given twice
/// counts once per call.
#[test]
fn b37_two_budgets_of_one_scope() {
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("b37.*"), 5, HOUR)
        .budget(BudgetScope::tool("b37.b37_hit"), 2, HOUR)
        .budget(BudgetScope::tool("b37.b37_hit"), 2, HOUR)
        .build()
        .unwrap();
    let codes: Vec<_> = (0..6).map(|_| code(gate.run(b37_hit))).collect();
    assert_eq!(B37.load(Ordering::SeqCst), 2, "{codes:?}");
}

counter!(B38);
/// b38: a read, allowed in SHADOW (the inlined path where nothing is recorded).
#[tool(risk = "READ_ONLY", domain = "b38")]
fn b38_read() -> Result<(), Denied> {
    B38.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// A per-risk budget on READ_ONLY: the inlined path of an allowed call without records does not
/// skip it, from many threads.
#[test]
fn b38_read_only_budget_on_the_inlined_path() {
    let gate = Gate::builder()
        .mode(Mode::Shadow)
        .budget(Risk::ReadOnly, 7, HOUR)
        .build()
        .unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let g = gate.clone();
            std::thread::spawn(move || (0..50).filter(|_| g.run(b38_read).is_ok()).count())
        })
        .collect();
    let ok: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(B38.load(Ordering::SeqCst), 7);
    assert_eq!(ok, 7);
}

counter!(B39);
fn b39_lower(_cents: &u64) -> Risk {
    Risk::ReadOnly
}
/// b39: a classifier that answers lower than the declared risk.
#[tool(risk = "HIGH_WRITE", domain = "b39", escalate = b39_lower)]
fn b39_wire(cents: u64) -> Result<(), Denied> {
    let _ = cents;
    B39.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// A classifier cannot move a call out of its declared risk's budget by answering lower.
#[test]
fn b39_classifier_cannot_lower_the_counted_risk() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
        .budget(Risk::HighWrite, 1, HOUR)
        .build()
        .unwrap();
    let codes: Vec<_> = (0..4).map(|i| code(gate.run(|| b39_wire(i)))).collect();
    assert_eq!(B39.load(Ordering::SeqCst), 1, "{codes:?}");
}

counter!(B42);
/// b42.
#[tool(risk = "LOW_WRITE", domain = "b42", callable)]
fn b42_hit(n: u64) -> Result<u64, Denied> {
    B42.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// A call by name through an unbudgeted gate, made while a budgeted gate is entered around it: the
/// outer gate's budget still bounds it ("a gate entered inside this one still cannot run more than this
/// one allows"), and so does a direct call in a nested scope of an async future.
#[test]
fn b42_by_name_through_an_inner_gate_inside_a_budgeted_one() {
    let outer = Gate::builder()
        .mode(Mode::PartialAuto)
        .budget(BudgetScope::tool("b42.*"), 1, HOUR)
        .build()
        .unwrap();
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

// ---------------------------------------------------------------------------------------------------
// Two-step approvals
// ---------------------------------------------------------------------------------------------------

/// An approved pending request runs exactly the approved call, once: not other arguments, not twice,
/// not through another gate, not after the gate was lowered, not in racing threads.
#[test]
fn b13_pending_approval_other_arguments_twice_other_gate() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    let other = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    let refused = gate.run(|| b13_wire(100)).unwrap_err();
    assert_eq!(refused.code(), "APPROVAL_PENDING");
    let token = refused.approval_token().expect("a token").to_owned();
    assert!(
        !refused.to_string().contains(&token),
        "the token leaks into the message"
    );
    let json = serde_json::to_string(&refused).unwrap_or_default();
    assert!(!json.contains(&token), "the token leaks into the JSON");
    // another gate knows nothing of it
    assert!(
        other.approve(&token).is_err(),
        "another gate approved a foreign token"
    );
    assert_ne!(code(other.run(|| b13_wire(100))), "OK");
    gate.approve(&token).unwrap();
    // other arguments
    assert_ne!(code(gate.run(|| b13_wire(101))), "OK");
    assert_ne!(code(other.run(|| b13_wire(100))), "OK");
    assert_eq!(B13.load(Ordering::SeqCst), 0);
    // racing threads with the approved call: one runs
    let barrier = Arc::new(std::sync::Barrier::new(6));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let g = gate.clone();
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                code(g.run(|| b13_wire(100)))
            })
        })
        .collect();
    let codes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(B13.load(Ordering::SeqCst), 1, "{codes:?}");
    assert_ne!(code(gate.run(|| b13_wire(100))), "OK");
    assert_eq!(B13.load(Ordering::SeqCst), 1);
    // approving twice does not make a second run
    let _ = gate.approve(&token);
    assert_ne!(code(gate.run(|| b13_wire(100))), "OK");
    assert_eq!(B13.load(Ordering::SeqCst), 1);
}

/// An approved request, then the gate is lowered: the call does not run.
#[test]
fn b14_pending_approval_after_lowering() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    let refused = gate.run(|| b14_wire(7)).unwrap_err();
    let token = refused.approval_token().unwrap().to_owned();
    gate.approve(&token).unwrap();
    gate.lower(Mode::PartialAuto).unwrap();
    assert_ne!(code(gate.run(|| b14_wire(7))), "OK");
    assert_eq!(B14.load(Ordering::SeqCst), 0);
}

/// An approval given for a direct call is used once whether the retry is direct or by name.
#[test]
fn b15_pending_approval_by_name_and_direct_once() {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    let err = toolgate::registry()
        .call(&gate, "b15.b15_wire", serde_json::json!({"cents": 5}))
        .now()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), "APPROVAL_PENDING");
    let token = err.denied().unwrap().approval_token().unwrap().to_owned();
    assert!(!serde_json::to_string(&err).unwrap().contains(&token));
    gate.approve(&token).unwrap();
    // by name with a different JSON spelling of the same value: allowed to run (same canonical JSON)
    let r1 = toolgate::registry()
        .call(&gate, "b15.b15_wire", serde_json::json!({"cents": 5}))
        .now()
        .unwrap();
    let r2 = gate.run(|| b15_wire(5));
    let r3 = toolgate::registry()
        .call(&gate, "b15.b15_wire", serde_json::json!({"cents": 5}))
        .now()
        .unwrap();
    assert_eq!(B15.load(Ordering::SeqCst), 1, "{r1:?} {r2:?} {r3:?}");
}

// ---------------------------------------------------------------------------------------------------
// The principal
// ---------------------------------------------------------------------------------------------------

/// Every record of a gate names its principal; the approver sees it.
#[test]
fn b16_every_record_names_the_principal() {
    let sink = Arc::new(Memory::default());
    let seen = Arc::new(Mutex::new(Vec::<Option<String>>::new()));
    let seen2 = seen.clone();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .principal("alice@example.com")
        .audit_shared(sink.clone())
        .approver(move |r: &ApprovalRequest<'_>| {
            seen2.lock().unwrap().push(r.principal.map(str::to_owned));
            if r.arguments.is_some_and(|a| a.contains("13")) {
                Approval::Reject("no".into())
            } else {
                Approval::ApproveForSession(SessionGrant::tool(HOUR).exact_arguments())
            }
        })
        .budget(BudgetScope::tool("b16.*"), 3, HOUR)
        .build()
        .unwrap();
    let clone = gate.clone();
    let _ = gate.run(|| b16_wire(1));
    let _ = clone.run(|| b16_wire(1));
    let _ = gate.run(|| b16_wire(13));
    let _ = gate.run(|| b16_wire(2));
    let _ = gate.run(|| b16_wire(3)); // over budget
    gate.revoke_grants(None, "ops");
    gate.lower_by(Mode::Shadow, "ops").unwrap();
    let _ = gate.run(|| b16_wire(4));
    let records = sink.records();
    assert!(records.len() >= 8, "{records:#?}");
    let bad: Vec<_> = records
        .iter()
        .filter(|r| r.get("principal").and_then(|p| p.as_str()) != Some("alice@example.com"))
        .collect();
    assert!(bad.is_empty(), "records without the principal: {bad:#?}");
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .all(|p| p.as_deref() == Some("alice@example.com"))
    );
    assert!(!seen.lock().unwrap().is_empty());
}

/// A two-step answer's records (approval_granted, approval_rejected) name the principal too.
#[test]
fn b17_two_step_records_name_the_principal() {
    let sink = Arc::new(Memory::default());
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .principal("bob")
        .agent("b17")
        .audit_shared(sink.clone())
        .two_step_approvals()
        .build()
        .unwrap();
    let t1 = gate
        .run(|| b17_wire(1))
        .unwrap_err()
        .approval_token()
        .unwrap()
        .to_owned();
    let t2 = gate
        .run(|| b17_wire(2))
        .unwrap_err()
        .approval_token()
        .unwrap()
        .to_owned();
    gate.answer(
        &t1,
        toolgate::approval::store::Answer::Approve {
            by: "op".into(),
            for_session: true,
        },
    )
    .unwrap();
    gate.answer(
        &t2,
        toolgate::approval::store::Answer::Reject {
            by: "op".into(),
            reason: "no".into(),
            stop: false,
        },
    )
    .unwrap();
    let _ = gate.run(|| b17_wire(1));
    let _ = gate.run(|| b17_wire(2));
    let _ = gate.run(b17_low);
    let records = sink.records();
    let stages: Vec<_> = records.iter().map(|r| r["stage"].clone()).collect();
    let bad: Vec<_> = records
        .iter()
        .filter(|r| r.get("principal").and_then(|p| p.as_str()) != Some("bob"))
        .collect();
    assert!(
        bad.is_empty(),
        "records without the principal: {bad:#?} (stages {stages:?})"
    );
    assert_eq!(B17.load(Ordering::SeqCst), 1);
    let _ = Stage::Enter;
}

// ---------------------------------------------------------------------------------------------------
// Approvals over MCP (in band), driven with rmcp's own client over an in-process duplex
// ---------------------------------------------------------------------------------------------------

mod mcp {
    use super::*;
    use serde_json::{Value, json};
    use toolgate::mcp::rmcp::model::{CallToolRequestParams, CallToolResponse, ProtocolVersion};
    use toolgate::mcp::rmcp::service::{
        ClientLifecycleMode, RoleClient, RunningService, serve_client_with_lifecycle,
    };
    use toolgate::mcp::rmcp::{ClientHandler, ServiceExt};
    use toolgate::mcp::{APPROVAL_INPUT, Approvals, InBand, ToolgateServer};

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef-attack15";
    const T: Duration = Duration::from_secs(10);

    counter!(M01);
    /// m01: slow, async.
    #[tool(risk = "HIGH_WRITE", domain = "m01", callable)]
    pub async fn m01_wire(cents: u64) -> Result<u64, Denied> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        M01.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    counter!(M02);
    /// m02.
    #[tool(risk = "HIGH_WRITE", domain = "m02", callable)]
    pub fn m02_wire(cents: u64) -> Result<u64, Denied> {
        M02.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }
    /// m02, another tool with the same parameters.
    #[tool(risk = "HIGH_WRITE", domain = "m02", callable)]
    pub fn m02_wire_other(cents: u64) -> Result<u64, Denied> {
        M02.fetch_add(1000, Ordering::SeqCst);
        Ok(cents)
    }

    counter!(M03);
    /// m03.
    #[tool(risk = "HIGH_WRITE", domain = "m03", callable)]
    pub fn m03_wire(cents: u64) -> Result<u64, Denied> {
        M03.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    counter!(M04);
    /// m04.
    #[tool(risk = "HIGH_WRITE", domain = "m04", callable)]
    pub fn m04_wire(cents: u64) -> Result<u64, Denied> {
        M04.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    counter!(M05);
    /// m05: waits long once started.
    #[tool(risk = "HIGH_WRITE", domain = "m05", callable)]
    pub async fn m05_slow(cents: u64) -> Result<u64, Denied> {
        M05.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(30)).await;
        M05.fetch_add(1000, Ordering::SeqCst);
        Ok(cents)
    }

    counter!(M06);
    /// m06.
    #[tool(risk = "HIGH_WRITE", domain = "m06", callable)]
    pub fn m06_wire(cents: u64) -> Result<u64, Denied> {
        M06.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    counter!(M07);
    /// m07.
    #[tool(risk = "HIGH_WRITE", domain = "m07", callable)]
    pub fn m07_wire(cents: u64) -> Result<u64, Denied> {
        M07.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    /// m09: lowered out of the list.
    #[tool(risk = "LOW_WRITE", domain = "m09", callable)]
    pub fn m09_low() -> Result<(), Denied> {
        Ok(())
    }

    fn gate(sink: Arc<Memory>) -> Gate {
        Gate::builder()
            .mode(Mode::FullAuto)
            .two_step_approvals()
            .principal("carol")
            .audit_shared(sink)
            .build()
            .unwrap()
    }

    fn in_band(gate: Gate) -> ToolgateServer {
        ToolgateServer::new(gate).approvals(Approvals::InBand(InBand::new(KEY).unwrap()))
    }

    type Client = RunningService<RoleClient, FormClient>;

    /// A client that shows forms: it declares elicitation, so an in-band approval form is sent to it.
    #[derive(Clone, Copy)]
    struct FormClient;

    impl ClientHandler for FormClient {
        fn get_info(&self) -> toolgate::mcp::rmcp::model::ClientConfig {
            let mut capabilities = toolgate::mcp::rmcp::model::ClientCapabilities::default();
            capabilities.elicitation =
                Some(toolgate::mcp::rmcp::model::ElicitationCapability::new());
            toolgate::mcp::rmcp::model::ClientConfig::new(
                capabilities,
                toolgate::mcp::rmcp::model::Implementation::new("forms", "0"),
            )
        }
    }

    async fn connect(server: ToolgateServer) -> Client {
        let (c, s) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            if let Ok(running) = server.serve(tokio::io::split(s)).await {
                let _ = running.waiting().await;
            }
        });
        tokio::time::timeout(
            T,
            serve_client_with_lifecycle(
                FormClient,
                tokio::io::split(c),
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            ),
        )
        .await
        .expect("connect in time")
        .expect("connects")
    }

    fn answer(decision: &str) -> toolgate::mcp::rmcp::model::InputResponses {
        let mut m = std::collections::BTreeMap::new();
        m.insert(
            APPROVAL_INPUT.to_owned(),
            json!({"action": "accept", "content": {"decision": decision, "reason": "attack"}}),
        );
        m
    }

    async fn call(
        client: &Client,
        name: &str,
        arguments: Value,
        state: Option<&str>,
        decision: Option<&str>,
    ) -> CallToolResponse {
        let Value::Object(arguments) = arguments else {
            panic!()
        };
        let mut params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        if let Some(state) = state {
            params = params.with_request_state(state.to_owned());
        }
        if let Some(decision) = decision {
            params = params.with_input_responses(answer(decision));
        }
        match tokio::time::timeout(T, client.call_tool_once(params))
            .await
            .expect("answered in time")
        {
            Ok(response) => response,
            // A request state that fails its integrity check is a JSON-RPC error: seen here by its
            // code, as a refusal is.
            Err(toolgate::mcp::rmcp::ServiceError::McpError(error))
                if error.code == toolgate::mcp::rmcp::model::ErrorCode::INVALID_PARAMS =>
            {
                let mut result = toolgate::mcp::rmcp::model::CallToolResult::error(vec![]);
                result.structured_content = error.data;
                CallToolResponse::Complete(result)
            }
            Err(error) => panic!("a tool response: {error:?}"),
        }
    }

    /// The request state of an `InputRequired` answer.
    fn state_of(response: &CallToolResponse) -> String {
        match response {
            CallToolResponse::InputRequired(input) => input.request_state.clone().expect("a state"),
            other => panic!("not InputRequired: {other:?}"),
        }
    }

    /// The code of a result: `OK`, a refusal's code, or `INPUT_REQUIRED`.
    fn code_of(response: &CallToolResponse) -> String {
        match response {
            CallToolResponse::Complete(result) if result.is_error != Some(true) => "OK".into(),
            CallToolResponse::Complete(result) => result
                .structured_content
                .as_ref()
                .and_then(|c| c.get("code"))
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned(),
            CallToolResponse::InputRequired(_) => "INPUT_REQUIRED".into(),
            _ => "TASK".into(),
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Four retries racing with one approved state, on one connection: the body runs once.
    #[test]
    fn b20_racing_retries_with_one_state_run_once() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let client = Arc::new(connect(in_band(gate(sink.clone()))).await);
            let first = call(&client, "m01.m01_wire", json!({"cents": 1}), None, None).await;
            let state = state_of(&first);
            let mut tasks = Vec::new();
            for _ in 0..4 {
                let client = client.clone();
                let state = state.clone();
                tasks.push(tokio::spawn(async move {
                    code_of(
                        &call(
                            &client,
                            "m01.m01_wire",
                            json!({"cents": 1}),
                            Some(&state),
                            Some("approve"),
                        )
                        .await,
                    )
                }));
            }
            let mut codes = Vec::new();
            for t in tasks {
                codes.push(tokio::time::timeout(T, t).await.unwrap().unwrap());
            }
            assert_eq!(M01.load(Ordering::SeqCst), 1, "{codes:?}");
            assert_eq!(codes.iter().filter(|c| *c == "OK").count(), 1, "{codes:?}");
        });
    }

    /// A state used on another connection of the same server, with other arguments, or for another
    /// tool: nothing runs; the genuine retry runs once.
    #[test]
    fn b21_state_other_connection_arguments_tool() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let server = in_band(gate(sink.clone()));
            let other_connection = server.connection();
            let a = connect(server).await;
            let b = connect(other_connection).await;
            let state = state_of(&call(&a, "m02.m02_wire", json!({"cents": 2}), None, None).await);
            let codes = vec![
                code_of(
                    &call(
                        &b,
                        "m02.m02_wire",
                        json!({"cents": 2}),
                        Some(&state),
                        Some("approve"),
                    )
                    .await,
                ),
                code_of(
                    &call(
                        &a,
                        "m02.m02_wire",
                        json!({"cents": 3}),
                        Some(&state),
                        Some("approve"),
                    )
                    .await,
                ),
                code_of(
                    &call(
                        &a,
                        "m02.m02_wire_other",
                        json!({"cents": 2}),
                        Some(&state),
                        Some("approve"),
                    )
                    .await,
                ),
            ];
            assert_eq!(M02.load(Ordering::SeqCst), 0, "{codes:?}");
            assert!(codes.iter().all(|c| c != "OK"), "{codes:?}");
            let genuine = code_of(
                &call(
                    &a,
                    "m02.m02_wire",
                    json!({"cents": 2}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            assert_eq!(genuine, "OK");
            let replay_b = code_of(
                &call(
                    &b,
                    "m02.m02_wire",
                    json!({"cents": 2}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            let replay_a = code_of(
                &call(
                    &a,
                    "m02.m02_wire",
                    json!({"cents": 2}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            let plain = code_of(&call(&a, "m02.m02_wire", json!({"cents": 2}), None, None).await);
            assert_eq!(
                M02.load(Ordering::SeqCst),
                1,
                "{replay_b} {replay_a} {plain}"
            );
            // Every record names the principal.
            let bad: Vec<_> = sink
                .records()
                .into_iter()
                .filter(|r| r.get("principal").and_then(Value::as_str) != Some("carol"))
                .collect();
            assert!(bad.is_empty(), "records without the principal: {bad:#?}");
        });
    }

    /// The form answered approve after the gate was lowered: the call does not run.
    #[test]
    fn b22_answer_after_lowering() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let g = gate(sink.clone());
            let client = connect(in_band(g.clone())).await;
            let state =
                state_of(&call(&client, "m03.m03_wire", json!({"cents": 3}), None, None).await);
            g.lower(Mode::PartialAuto).unwrap();
            let c = code_of(
                &call(
                    &client,
                    "m03.m03_wire",
                    json!({"cents": 3}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            assert_eq!(M03.load(Ordering::SeqCst), 0, "{c}");
        });
    }

    /// A rejected state answered again with approve, and a declined one: nothing runs.
    #[test]
    fn b23_reject_then_approve_with_the_same_state() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let client = connect(in_band(gate(sink.clone()))).await;
            let state =
                state_of(&call(&client, "m04.m04_wire", json!({"cents": 4}), None, None).await);
            let r1 = code_of(
                &call(
                    &client,
                    "m04.m04_wire",
                    json!({"cents": 4}),
                    Some(&state),
                    Some("reject"),
                )
                .await,
            );
            let r2 = code_of(
                &call(
                    &client,
                    "m04.m04_wire",
                    json!({"cents": 4}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            // A state with no answer at all, then with an answer of another shape.
            let s2 =
                state_of(&call(&client, "m04.m04_wire", json!({"cents": 5}), None, None).await);
            let r3 = code_of(
                &call(
                    &client,
                    "m04.m04_wire",
                    json!({"cents": 5}),
                    Some(&s2),
                    None,
                )
                .await,
            );
            let mut weird = std::collections::BTreeMap::new();
            weird.insert(
                APPROVAL_INPUT.to_owned(),
                json!({"action": "accept", "content": {"decision": ["approve"]}}),
            );
            let Value::Object(args) = json!({"cents": 5}) else {
                panic!()
            };
            let params = CallToolRequestParams::new("m04.m04_wire")
                .with_arguments(args)
                .with_request_state(s2.clone())
                .with_input_responses(weird);
            let r4 = code_of(
                &tokio::time::timeout(T, client.call_tool_once(params))
                    .await
                    .unwrap()
                    .unwrap(),
            );
            let r5 = code_of(
                &call(
                    &client,
                    "m04.m04_wire",
                    json!({"cents": 5}),
                    Some(&s2),
                    Some("Approve"),
                )
                .await,
            );
            assert_eq!(r1, "APPROVAL_REJECTED");
            assert_eq!(M04.load(Ordering::SeqCst), 0, "{r1} {r2} {r3} {r4} {r5}");
        });
    }

    /// A cancelled retry: its exit record says `cancelled`, and neither a replay of its state nor a plain
    /// call runs the body again.
    #[test]
    fn b24_cancelled_retry_runs_once_and_says_cancelled() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let client = connect(in_band(gate(sink.clone()))).await;
            let state =
                state_of(&call(&client, "m05.m05_slow", json!({"cents": 5}), None, None).await);
            let Value::Object(args) = json!({"cents": 5}) else {
                panic!()
            };
            let params = CallToolRequestParams::new("m05.m05_slow")
                .with_arguments(args)
                .with_request_state(state.clone())
                .with_input_responses(answer("approve"));
            let started = Instant::now();
            {
                let fut = client.call_tool_once(params);
                tokio::pin!(fut);
                loop {
                    tokio::select! {
                        r = &mut fut => panic!("the slow call finished: {r:?}"),
                        _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                    }
                    if M05.load(Ordering::SeqCst) >= 1 {
                        break;
                    }
                    assert!(started.elapsed() < T, "the body never started");
                }
            } // dropped: rmcp sends notifications/cancelled
            let deadline = Instant::now() + T;
            let exit = loop {
                let exits: Vec<_> = sink
                    .records()
                    .into_iter()
                    .filter(|r| r["stage"] == "exit" && r["tool"] == "m05.m05_slow")
                    .collect();
                if let Some(e) = exits.last() {
                    break e.clone();
                }
                assert!(
                    Instant::now() < deadline,
                    "no exit record: {:#?}",
                    sink.records()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            assert_eq!(exit["outcome"], "cancelled", "{exit:#}");
            let replay = code_of(
                &call(
                    &client,
                    "m05.m05_slow",
                    json!({"cents": 5}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            let plain =
                code_of(&call(&client, "m05.m05_slow", json!({"cents": 5}), None, None).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(M05.load(Ordering::SeqCst), 1, "{replay} {plain}");
        });
    }

    /// A state sealed by one server's key opens at no server with another gate, even with the same key
    /// and agent label.
    #[test]
    fn b25_state_of_another_gate_same_key() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let a = connect(in_band(gate(sink.clone()))).await;
            let b = connect(in_band(gate(sink.clone()))).await;
            let state = state_of(&call(&a, "m06.m06_wire", json!({"cents": 6}), None, None).await);
            let c = code_of(
                &call(
                    &b,
                    "m06.m06_wire",
                    json!({"cents": 6}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            assert_eq!(M06.load(Ordering::SeqCst), 0, "{c}");
            assert_eq!(c, "APPROVAL_STATE_INVALID");
            // As the protocol requires, a JSON-RPC error, not a tool result.
            let Value::Object(arguments) = json!({"cents": 6}) else {
                unreachable!()
            };
            let raw = b
                .call_tool_once(
                    CallToolRequestParams::new("m06.m06_wire")
                        .with_arguments(arguments)
                        .with_request_state(state)
                        .with_input_responses(answer("approve")),
                )
                .await;
            assert!(
                matches!(&raw, Err(toolgate::mcp::rmcp::ServiceError::McpError(e))
                    if e.code == toolgate::mcp::rmcp::model::ErrorCode::INVALID_PARAMS),
                "{raw:?}"
            );
        });
    }

    /// Out of band: the pending token goes to `on_pending` and never to the agent.
    #[test]
    fn b26_out_of_band_token_never_reaches_the_client() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let tokens = Arc::new(Mutex::new(Vec::<String>::new()));
            let t2 = tokens.clone();
            let g = gate(sink.clone());
            let server = ToolgateServer::new(g.clone())
                .on_pending(move |p| t2.lock().unwrap().push(p.token.clone()));
            let client = connect(server).await;
            let r = call(&client, "m07.m07_wire", json!({"cents": 7}), None, None).await;
            let text = format!("{r:?}");
            let token = tokens
                .lock()
                .unwrap()
                .first()
                .cloned()
                .expect("on_pending was called");
            assert!(
                !text.contains(&token),
                "the token reached the client: {text}"
            );
            assert_eq!(code_of(&r), "APPROVAL_PENDING");
            g.approve(&token).unwrap();
            let codes = [
                code_of(&call(&client, "m07.m07_wire", json!({"cents": 8}), None, None).await),
                code_of(&call(&client, "m07.m07_wire", json!({"cents": 7}), None, None).await),
                code_of(&call(&client, "m07.m07_wire", json!({"cents": 7}), None, None).await),
            ];
            assert_eq!(M07.load(Ordering::SeqCst), 1, "{codes:?}");
        });
    }

    struct Notified(tokio::sync::mpsc::UnboundedSender<()>);
    impl ClientHandler for Notified {
        async fn on_tool_list_changed(
            &self,
            _context: toolgate::mcp::rmcp::service::NotificationContext<RoleClient>,
        ) {
            let _ = self.0.send(());
        }
    }

    /// `list_changed` is sent to a client of the initialize handshake after `lower`, and the next list
    /// is narrower.
    #[test]
    fn b27_list_changed_after_lower() {
        rt().block_on(async {
            let g = Gate::builder().mode(Mode::PartialAuto).build().unwrap();
            let server = ToolgateServer::new(g.clone()).mode_poll(Duration::from_millis(20));
            let (c, s) = tokio::io::duplex(1 << 20);
            tokio::spawn(async move {
                if let Ok(running) = server.serve(tokio::io::split(s)).await {
                    let _ = running.waiting().await;
                }
            });
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let client = tokio::time::timeout(T, Notified(tx).serve(tokio::io::split(c)))
                .await
                .unwrap()
                .unwrap();
            let before = tokio::time::timeout(T, client.list_all_tools())
                .await
                .unwrap()
                .unwrap();
            assert!(before.iter().any(|t| t.name == "m09.m09_low"));
            g.lower(Mode::Shadow).unwrap();
            let got = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await;
            assert!(
                matches!(got, Ok(Some(()))),
                "no list_changed within 3 s of lower"
            );
            let after = tokio::time::timeout(T, client.list_all_tools())
                .await
                .unwrap()
                .unwrap();
            assert!(!after.iter().any(|t| t.name == "m09.m09_low"));
        });
    }

    /// Sends `line` (over a 4 KiB limit) after the handshake and returns what the server answers within
    /// 3 s (`None`: silence).
    async fn oversized(line: String) -> Option<Value> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let g = Gate::builder().mode(Mode::PartialAuto).build().unwrap();
        let server = ToolgateServer::new(g);
        let (c, s) = tokio::io::duplex(1 << 22);
        let (sr, sw) = tokio::io::split(s);
        let reader = toolgate::mcp::stdio::LimitedLines::new(sr, 4096);
        tokio::spawn(async move {
            if let Ok(running) = server.serve((reader, sw)).await {
                let _ = running.waiting().await;
            }
        });
        let (cr, mut cw) = tokio::io::split(c);
        let mut lines = BufReader::new(cr).lines();
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}});
        cw.write_all(format!("{init}\n").as_bytes()).await.unwrap();
        let first = tokio::time::timeout(T, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(first.contains("\"id\":1"), "{first}");
        cw.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .await
            .unwrap();
        cw.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        match tokio::time::timeout(Duration::from_secs(3), lines.next_line()).await {
            Ok(Ok(Some(l))) => serde_json::from_str(&l).ok(),
            _ => None,
        }
    }

    fn pad() -> String {
        "A".repeat(10_000)
    }

    fn answered_under(got: &Option<Value>, id: Value) -> bool {
        got.as_ref()
            .is_some_and(|v| v["id"] == id && v["error"]["code"] == -32600)
    }

    /// An oversized message with its id first is answered with an error under its id.
    #[test]
    fn b28_oversized_message_answered_under_its_id() {
        let pad = pad();
        let got = rt().block_on(oversized(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{{\"name\":\"x\",\"arguments\":{{\"pad\":\"{pad}\"}}}}}}"
        )));
        assert!(answered_under(&got, json!(7)), "{got:#?}");
    }

    /// An oversized message whose params hold an `id` key before the top-level id (all within the
    /// first KiB): the error must go to the request's own id, not to the nested one.
    ///
    /// GOT THROUGH (at commit time): the error is sent under `"id": 99`, the key nested in `params`,
    /// so request 8 is never answered (the client waits, as with rmcp's own reader), and a client
    /// with a request 99 in flight would see that one fail instead.
    #[test]
    fn b29_oversized_message_nested_id_before_the_real_one() {
        let pad = pad();
        let got = rt().block_on(oversized(format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{{\"id\":99,\"name\":\"x\"}},\"id\":8,\"pad\":\"{pad}\"}}"
        )));
        assert!(
            answered_under(&got, json!(8)),
            "the oversized request 8 was answered as: {got:#?}"
        );
    }

    /// A string id.
    #[test]
    fn b30_oversized_message_string_id() {
        let pad = pad();
        let got = rt().block_on(oversized(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"s-9\",\"method\":\"tools/call\",\"params\":{{\"pad\":\"{pad}\"}}}}"
        )));
        assert!(answered_under(&got, json!("s-9")), "{got:#?}");
    }

    /// An `"id":` inside a string value before the real id.
    #[test]
    fn b31_oversized_message_id_inside_a_string_before_the_real_one() {
        let pad = pad();
        let got = rt().block_on(oversized(format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"x \\\"id\\\":98\",\"id\":10,\"pad\":\"{pad}\"}}"
        )));
        assert!(
            answered_under(&got, json!(10)),
            "the oversized request 10 was answered as: {got:#?}"
        );
    }

    /// The id after whitespace and an escaped key (`"\u0069d"` is `"id"` to a JSON parser).
    ///
    /// GOT THROUGH (at commit time, an edge): answered by an error without an id, so request 11,
    /// whose id is in the first KiB, is never answered.
    #[test]
    fn b32_oversized_message_escaped_id_key() {
        let pad = pad();
        let got = rt().block_on(oversized(format!(
            "{{ \"jsonrpc\" : \"2.0\" , \"\\u0069d\" : 11 , \"method\":\"tools/call\",\"pad\":\"{pad}\"}}"
        )));
        assert!(
            answered_under(&got, json!(11)),
            "the oversized request 11 was answered as: {got:#?}"
        );
    }

    counter!(H01);
    /// h01: allowed in PARTIAL_AUTO, refused in SHADOW.
    #[tool(risk = "LOW_WRITE", domain = "h01", callable)]
    pub fn h01_low(n: u64) -> Result<u64, Denied> {
        H01.fetch_add(1, Ordering::SeqCst);
        Ok(n)
    }

    /// Serves an `HttpService` on a loopback port; returns the address.
    async fn serve_http(service: toolgate::mcp::http::HttpService) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(service.clone());
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                });
            }
        });
        addr
    }

    /// The status of an HTTP answer and the JSON-RPC messages of its body (JSON or SSE `data:` lines).
    fn answer_of(text: &str) -> (u16, Vec<Value>) {
        let status: u16 = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut messages = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            let candidate = line.strip_prefix("data:").map(str::trim).unwrap_or(line);
            if candidate.starts_with('{')
                && let Ok(v) = serde_json::from_str::<Value>(candidate)
            {
                messages.push(v);
            }
        }
        (status, messages)
    }

    /// One POST: the status, the session id header, and the JSON-RPC messages of the body (JSON or SSE).
    async fn post(
        addr: std::net::SocketAddr,
        token: Option<&str>,
        session: Option<&str>,
        body: Value,
    ) -> (u16, Option<String>, Vec<Value>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = body.to_string();
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\nContent-Length: {}\r\n",
            addr.port(),
            body.len()
        );
        if let Some(token) = token {
            request.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        if let Some(session) = session {
            request.push_str(&format!(
                "Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-06-18\r\n"
            ));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
                Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&raw);
            if text.contains("\"result\"") || text.contains("\"error\"") {
                // one JSON-RPC answer per POST: enough
                if text.matches("\n\n").count() >= 2 || !text.contains("event-stream") {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    if let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_millis(50), stream.read(&mut buf)).await
                    {
                        raw.extend_from_slice(&buf[..n]);
                    }
                    break;
                }
            }
        }
        let text = String::from_utf8_lossy(&raw).to_string();
        let session = text
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("mcp-session-id:"))
            .map(|l| l.split_once(':').unwrap().1.trim().to_owned());
        let (status, messages) = answer_of(&text);
        (status, session, messages)
    }

    /// A session opened by one principal, then used with another principal's token: the call is
    /// decided by the second principal's gate (or refused), never by the first's; a session used with
    /// no or an unknown token is 401; records name the principal whose gate decided.
    #[test]
    fn b33_http_session_changes_principal() {
        use toolgate::mcp::http::{HttpService, Principals};
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let alice = Gate::builder()
                .mode(Mode::PartialAuto)
                .principal("alice")
                .audit_shared(sink.clone())
                .build()
                .unwrap();
            let bob = Gate::builder()
                .mode(Mode::Shadow)
                .principal("bob")
                .audit_shared(sink.clone())
                .build()
                .unwrap();
            let server = ToolgateServer::new(bob.clone()).only(|m| m.domain == Some("h01"));
            let principals = Principals::new()
                .bearer("alice-token-0123456789", "alice", alice.clone())
                .bearer("bob-token-0123456789", "bob", bob.clone());
            let config = toolgate::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default();
            let addr = serve_http(HttpService::new(server, principals, config)).await;
            let alice_t = Some("alice-token-0123456789");
            let bob_t = Some("bob-token-0123456789");

            let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}});
            let (status, session, msgs) = post(addr, alice_t, None, init).await;
            assert_eq!(status, 200, "{msgs:?}");
            let session = session.expect("a legacy session id");
            let (st, _, _) = post(
                addr,
                alice_t,
                Some(&session),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
            assert!(st == 202 || st == 200, "{st}");
            // alice may call it
            let call = |id: u64, n: u64| {
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "h01.h01_low", "arguments": {"n": n}}})
            };
            let (st, _, msgs) = post(addr, alice_t, Some(&session), call(2, 1)).await;
            assert_eq!(st, 200, "{msgs:?}");
            assert_eq!(H01.load(Ordering::SeqCst), 1, "alice's call ran: {msgs:?}");
            // bob on alice's session: his gate is SHADOW, so nothing runs
            let (st_b, _, msgs_b) = post(addr, bob_t, Some(&session), call(3, 2)).await;
            let (st_l, _, list_b) = post(
                addr,
                bob_t,
                Some(&session),
                json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),
            )
            .await;
            // no token, unknown token, on alice's session: 401
            let (st_none, _, _) = post(addr, None, Some(&session), call(5, 3)).await;
            let (st_bad, _, _) = post(addr, Some("mallory"), Some(&session), call(6, 4)).await;
            assert_eq!(st_none, 401);
            assert_eq!(st_bad, 401);
            assert_eq!(
                H01.load(Ordering::SeqCst),
                1,
                "bob's call on alice's session ran under alice's gate: status {st_b} {msgs_b:?}"
            );
            let listed = list_b.iter().any(|m| m.to_string().contains("h01.h01_low"));
            assert!(!listed, "bob's tools/list on alice's session shows alice's tools: {st_l} {list_b:?}");
            // records: each names the principal whose gate made them; none lacks one
            let records = sink.records();
            let bad: Vec<_> = records
                .iter()
                .filter(|r| !matches!(r.get("principal").and_then(Value::as_str), Some("alice" | "bob")))
                .collect();
            assert!(bad.is_empty(), "records without a principal: {bad:#?}");
        });
    }

    counter!(M10);
    /// m10.
    #[tool(risk = "HIGH_WRITE", domain = "m10", callable)]
    pub fn m10_wire(cents: u64) -> Result<u64, Denied> {
        M10.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    /// In band under a budget: forms left unanswered keep no unit, a call the budget refuses gets no
    /// form (no approver is asked), and no form answered runs a call past the budget.
    #[test]
    fn b34_in_band_form_not_shown_past_the_budget() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let g = Gate::builder()
                .mode(Mode::FullAuto)
                .two_step_approvals()
                .audit_shared(sink.clone())
                .budget(BudgetScope::tool("m10.*"), 2, HOUR)
                .build()
                .unwrap();
            let client = connect(in_band(g)).await;
            let s1 = call(&client, "m10.m10_wire", json!({"cents": 1}), None, None).await;
            let s2 = call(&client, "m10.m10_wire", json!({"cents": 2}), None, None).await;
            let third = call(&client, "m10.m10_wire", json!({"cents": 3}), None, None).await;
            assert_eq!(code_of(&s1), "INPUT_REQUIRED");
            assert_eq!(code_of(&s2), "INPUT_REQUIRED");
            // Waiting forms hold no unit: a third call gets its own form.
            assert_eq!(code_of(&third), "INPUT_REQUIRED", "{third:?}");
            let r3 = code_of(
                &call(
                    &client,
                    "m10.m10_wire",
                    json!({"cents": 3}),
                    Some(&state_of(&third)),
                    Some("approve"),
                )
                .await,
            );
            assert_eq!(r3, "OK");
            let r1 = code_of(
                &call(
                    &client,
                    "m10.m10_wire",
                    json!({"cents": 1}),
                    Some(&state_of(&s1)),
                    Some("approve"),
                )
                .await,
            );
            let r2 = code_of(
                &call(
                    &client,
                    "m10.m10_wire",
                    json!({"cents": 2}),
                    Some(&state_of(&s2)),
                    Some("approve"),
                )
                .await,
            );
            // The third ran first; of the two others one more fits the budget of 2 in the hour.
            assert_eq!([r1.as_str(), r2.as_str()], ["OK", "BUDGET_EXHAUSTED"]);
            assert!(M10.load(Ordering::SeqCst) <= 2, "{r1} {r2}");
            let allowed = sink
                .records()
                .iter()
                .filter(|r| r["stage"] == "enter")
                .count();
            assert!(allowed <= 2, "{r1} {r2}: {allowed} calls entered");
        });
    }

    counter!(H02);
    /// h02.
    #[tool(risk = "HIGH_WRITE", domain = "h02", callable)]
    pub fn h02_wire(cents: u64) -> Result<u64, Denied> {
        H02.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    /// Over HTTP with the 2026-07-28 protocol (no session): an in-band state sealed for alice, retried
    /// with bob's token, does not run (bound to the principal), and alice's own retry runs once.
    #[test]
    fn b35_http_in_band_state_of_another_principal() {
        use toolgate::mcp::http::{HttpService, Principals};
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let mk = |p: &str| {
                Gate::builder()
                    .mode(Mode::FullAuto)
                    .two_step_approvals()
                    .principal(p)
                    .audit_shared(sink.clone())
                    .build()
                    .unwrap()
            };
            let (alice, bob) = (mk("alice"), mk("bob"));
            let server = in_band(bob.clone()).only(|m| m.domain == Some("h02"));
            let principals = Principals::new()
                .bearer("alice-token-0123456789", "alice", alice.clone())
                .bearer("bob-token-0123456789", "bob", bob.clone());
            let config = toolgate::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default();
            let addr = serve_http(HttpService::new(server, principals, config)).await;
            let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}});
            let call = |id: u64, state: Option<&str>| {
                let mut params = json!({"name": "h02.h02_wire", "arguments": {"cents": 9}, "_meta": meta.clone()});
                if let Some(state) = state {
                    params["requestState"] = json!(state);
                    params["inputResponses"] = json!({APPROVAL_INPUT: {"action": "accept", "content": {"decision": "approve"}}});
                }
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
            };
            let post2 = |token: &'static str, body: Value| async move {
                post2(addr, token, body).await
            };
            let (st, msgs) = post2("alice-token-0123456789", call(1, None)).await;
            let state = msgs
                .iter()
                .find_map(|m| m["result"]["requestState"].as_str().map(str::to_owned))
                .unwrap_or_else(|| panic!("no request state: {st} {msgs:#?}"));
            let (st_b, by_bob) = post2("bob-token-0123456789", call(2, Some(&state))).await;
            assert_eq!(H02.load(Ordering::SeqCst), 0, "bob ran alice's approval: {st_b} {by_bob:#?}");
            let (_, by_alice) = post2("alice-token-0123456789", call(3, Some(&state))).await;
            let (_, again) = post2("alice-token-0123456789", call(4, Some(&state))).await;
            assert_eq!(H02.load(Ordering::SeqCst), 1, "{by_alice:#?} {again:#?}");
        });
    }

    /// A POST in the 2026-07-28 protocol (no session).
    async fn post2(addr: std::net::SocketAddr, token: &str, body: Value) -> (u16, Vec<Value>) {
        let method = body["method"].as_str().unwrap_or("").to_owned();
        let name = body["params"]["name"]
            .as_str()
            .or(body["params"]["taskId"].as_str())
            .map(|n| format!("Mcp-Name: {n}\r\n"))
            .unwrap_or_default();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = body.to_string();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\nMcp-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n{name}Authorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
            addr.port(),
            body.len()
        );
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
                Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&raw);
            if text.contains("\"jsonrpc\"") && (text.ends_with("\n\n") || text.ends_with('}')) {
                break;
            }
        }
        let text = String::from_utf8_lossy(&raw).to_string();
        let (status, mut messages) = answer_of(&text);
        if messages.is_empty() {
            messages.push(json!({"raw": text}));
        }
        (status, messages)
    }

    counter!(H03);
    /// h03.
    #[tool(risk = "HIGH_WRITE", domain = "h03", callable)]
    pub fn h03_wire(cents: u64) -> Result<u64, Denied> {
        H03.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    /// Tasks over HTTP: alice's task (a call waiting for an operator) is answered to alice only: bob's
    /// `tasks/get` and `tasks/cancel` of its id reach nothing; after the operator approves, it runs once.
    #[test]
    fn b36_http_task_of_another_principal() {
        use toolgate::mcp::http::{HttpService, Principals};
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let mk = |p: &str| {
                Gate::builder()
                    .mode(Mode::FullAuto)
                    .two_step_approvals()
                    .principal(p)
                    .audit_shared(sink.clone())
                    .build()
                    .unwrap()
            };
            let (alice, bob) = (mk("alice"), mk("bob"));
            let tokens = Arc::new(Mutex::new(Vec::<String>::new()));
            let t2 = tokens.clone();
            let server = ToolgateServer::new(bob.clone())
                .only(|m| m.domain == Some("h03"))
                .on_pending(move |p| t2.lock().unwrap().push(p.token.clone()));
            let principals = Principals::new()
                .bearer("alice-token-0123456789", "alice", alice.clone())
                .bearer("bob-token-0123456789", "bob", bob.clone());
            let config = toolgate::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default();
            let addr = serve_http(HttpService::new(server, principals, config)).await;
            let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
            const A: &str = "alice-token-0123456789";
            const B: &str = "bob-token-0123456789";
            let body = |id: u64, method: &str, params: Value| {
                let mut params = params;
                params["_meta"] = meta.clone();
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
            };
            let (st, msgs) = post2(addr, A, body(1, "tools/call", json!({"name": "h03.h03_wire", "arguments": {"cents": 3}}))).await;
            let task = msgs
                .iter()
                .find_map(|m| m["result"]["taskId"].as_str().map(str::to_owned))
                .unwrap_or_else(|| panic!("no task: {st} {msgs:#?}"));
            let (_, get_b) = post2(addr, B, body(2, "tasks/get", json!({"taskId": task}))).await;
            let (_, cancel_b) = post2(addr, B, body(3, "tasks/cancel", json!({"taskId": task}))).await;
            let leaked = |msgs: &Vec<Value>| msgs.iter().any(|m| m.get("result").is_some_and(|r| r.get("status").is_some()));
            assert!(!leaked(&get_b), "bob read alice's task: {get_b:#?}");
            let header_error = |msgs: &Vec<Value>| msgs.iter().any(|m| m["error"]["code"] == -32020);
            assert!(!header_error(&get_b) && !header_error(&cancel_b), "{get_b:#?} {cancel_b:#?}");
            assert!(!leaked(&cancel_b), "bob cancelled alice's task: {cancel_b:#?}");
            let token = tokens.lock().unwrap().first().cloned().expect("on_pending");
            alice.approve(&token).unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            let done = loop {
                let (_, get_a) = post2(addr, A, body(4, "tasks/get", json!({"taskId": task}))).await;
                let status = get_a.iter().find_map(|m| m["result"]["status"].as_str().map(str::to_owned));
                if status.as_deref().is_some_and(|s| s != "working" && s != "input_required") {
                    break get_a;
                }
                assert!(Instant::now() < deadline, "the task never completed: {get_a:#?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            assert_eq!(H03.load(Ordering::SeqCst), 1, "{done:#?}");
        });
    }

    counter!(M11);
    /// m11.
    #[tool(risk = "HIGH_WRITE", domain = "m11", callable)]
    pub fn m11_wire(cents: u64) -> Result<u64, Denied> {
        M11.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    /// A state answered after its time to live: refused (`APPROVAL_EXPIRED`), nothing runs.
    #[test]
    fn b40_in_band_state_answered_late() {
        rt().block_on(async {
            let sink = Arc::new(Memory::default());
            let server = ToolgateServer::new(gate(sink.clone())).approvals(Approvals::InBand(
                InBand::new(KEY).unwrap().ttl(Duration::from_millis(300)),
            ));
            let client = connect(server).await;
            let state =
                state_of(&call(&client, "m11.m11_wire", json!({"cents": 1}), None, None).await);
            tokio::time::sleep(Duration::from_millis(600)).await;
            let c = code_of(
                &call(
                    &client,
                    "m11.m11_wire",
                    json!({"cents": 1}),
                    Some(&state),
                    Some("approve"),
                )
                .await,
            );
            assert_eq!(M11.load(Ordering::SeqCst), 0, "{c}");
            assert_eq!(c, "APPROVAL_EXPIRED");
        });
    }

    /// `tools/list` over HTTP without a session (2026-07-28) shows each principal its own gate's tools.
    #[test]
    fn b41_http_tools_list_per_principal() {
        use toolgate::mcp::http::{HttpService, Principals};
        rt().block_on(async {
            let alice = Gate::builder().mode(Mode::PartialAuto).principal("alice").build().unwrap();
            let bob = Gate::builder().mode(Mode::Shadow).principal("bob").build().unwrap();
            let server = ToolgateServer::new(alice.clone()).only(|m| m.domain == Some("h01"));
            let principals = Principals::new()
                .bearer("alice-token-0123456789", "alice", alice.clone())
                .bearer("bob-token-0123456789", "bob", bob.clone());
            let config = toolgate::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default();
            let addr = serve_http(HttpService::new(server, principals, config)).await;
            let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}});
            let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}});
            let (_, a) = post2(addr, "alice-token-0123456789", list.clone()).await;
            let (_, b) = post2(addr, "bob-token-0123456789", list.clone()).await;
            let (st, _) = post2(addr, "nobody", list.clone()).await;
            let shows = |m: &Vec<Value>| m.iter().any(|v| v.to_string().contains("h01.h01_low"));
            assert!(shows(&a), "alice: {a:#?}");
            assert!(!shows(&b), "bob sees what alice's gate allows: {b:#?}");
            assert_eq!(st, 401);
        });
    }
}
