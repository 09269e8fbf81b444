//! Outside attacks on "gates configured alike, sharing a store, share the budget: a call through both
//! takes one unit" (SECURITY.md 13) and on the agent label in a budget's key (docs/budgets.md: "An
//! agent label with a control character builds no budget ... such a label could spell another's
//! key"): gates alike but counting in different stores, three nested gates, a call made inside a
//! call, a code budget and a policy budget of one key, and labels that read as another agent's.
//!
//! Each test asserts the bound: in no window do more than N calls pass a budget. A test that fails is
//! an attack that got through.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use toolgate::gate::BudgetScope;
use toolgate::gate::budget::{BudgetStore, MemoryBudgets};
use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::{DenialCode, Denied, Gate, GateBuilder, Mode, tool};

static NOTES: AtomicUsize = AtomicUsize::new(0);
static INNER: AtomicUsize = AtomicUsize::new(0);

/// Write a note.
#[tool(risk = "LOW_WRITE", domain = "a8b")]
fn note(n: u64) -> Result<u64, Denied> {
    NOTES.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// Write a note, and inside it a second one: two calls.
#[tool(risk = "LOW_WRITE", domain = "a8b")]
fn note_twice(n: u64) -> Result<u64, Denied> {
    NOTES.fetch_add(1, Ordering::SeqCst);
    match inner_note(n) {
        Ok(_) => INNER.fetch_add(1, Ordering::SeqCst),
        Err(_) => 0,
    };
    Ok(n)
}

/// The note written inside another.
#[tool(risk = "LOW_WRITE", domain = "a8b")]
fn inner_note(n: u64) -> Result<u64, Denied> {
    Ok(n)
}

static WIRES: AtomicUsize = AtomicUsize::new(0);

/// Wire money: needs an approval at FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "a8b")]
fn wire(cents: u64) -> Result<u64, Denied> {
    WIRES.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

static ASYNC_NOTES: AtomicUsize = AtomicUsize::new(0);

/// Write a note, from async code.
#[tool(risk = "LOW_WRITE", domain = "a8b", callable)]
async fn note_async(n: u64) -> Result<u64, Denied> {
    ASYNC_NOTES.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

const HOUR: Duration = Duration::from_secs(3600);

/// A PARTIAL_AUTO gate of agent `agent` with a budget of `limit` of the agent's calls an hour, and
/// whatever `more` adds (its store).
fn alike(agent: &str, limit: u32, more: impl FnOnce(GateBuilder) -> GateBuilder) -> Gate {
    more(Gate::builder().mode(Mode::PartialAuto).agent(agent).budget(
        BudgetScope::Agent,
        limit,
        HOUR,
    ))
    .build()
    .unwrap()
}

fn shared(store: &Arc<MemoryBudgets>) -> impl FnOnce(GateBuilder) -> GateBuilder {
    let store: Arc<dyn BudgetStore> = store.clone();
    move |b| b.budget_store_shared(store)
}

fn code<T>(result: Result<T, Denied>) -> Result<T, DenialCode> {
    result.map_err(|d| d.code())
}

/// al01. The attack: two gates configured alike (agent, scope, N, window), each counting in its own
/// store (the default, and one given each), nested. The nested call is one call of each gate. Asserted
/// (docs/budgets.md: "another gate counts its own, unless both are given the same store"): each gate's
/// budget of one is spent by it; neither gate runs another call alone.
#[test]
fn al01_gates_alike_but_counting_in_different_stores_each_count_the_call() {
    type Make = fn() -> Gate;
    let ways: [(&str, Make); 2] = [
        ("default stores", || alike("al01-a", 1, |b| b)),
        ("a store each", || {
            alike("al01-b", 1, |b| b.budget_store(MemoryBudgets::new()))
        }),
    ];
    let mut failures = Vec::new();
    for (how, make) in ways {
        let (outer, inner) = (make(), make());
        let nested = code(outer.run(|| inner.run(|| note(1))));
        let inner_alone = code(inner.run(|| note(2)));
        let outer_alone = code(outer.run(|| note(3)));
        if (nested, inner_alone, outer_alone)
            != (
                Ok(1),
                Err(DenialCode::BudgetExhausted),
                Err(DenialCode::BudgetExhausted),
            )
        {
            failures.push(format!(
                "{how}: nested {nested:?}, inner alone {inner_alone:?}, outer alone {outer_alone:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// al02. The attack: three nested gates configured alike on one store, a budget of two. Asserted (one
/// unit per call): two calls run, the third is refused, and a fourth gate alike, alone, is refused too.
#[test]
fn al02_three_nested_gates_alike_take_one_unit_and_keep_the_bound() {
    let store = Arc::new(MemoryBudgets::new());
    let make = || alike("al02", 2, shared(&store));
    let (a, b, c, d) = (make(), make(), make(), make());
    let through = |n| code(a.run(|| b.run(|| c.run(|| note(n)))));
    let codes = [through(1), through(2), through(3), code(d.run(|| note(4)))];
    assert_eq!(
        codes,
        [
            Ok(1),
            Ok(2),
            Err(DenialCode::BudgetExhausted),
            Err(DenialCode::BudgetExhausted)
        ]
    );
}

/// al03. The attack: three nested gates of one key, the outer and innermost sharing a store, the
/// middle one counting in its own. A budget of one. Asserted: the call takes one unit of each store; the
/// middle gate, alone, is refused (its own store counted the call), as is the outer.
#[test]
fn al03_three_nested_gates_of_one_key_and_two_stores_count_in_each() {
    let store = Arc::new(MemoryBudgets::new());
    let a = alike("al03", 1, shared(&store));
    let b = alike("al03", 1, |b| b.budget_store(MemoryBudgets::new()));
    let c = alike("al03", 1, shared(&store));
    let nested = code(a.run(|| b.run(|| c.run(|| note(1)))));
    let codes = [
        nested,
        code(b.run(|| note(2))),
        code(a.run(|| note(3))),
        code(c.run(|| note(4))),
    ];
    assert_eq!(
        codes,
        [
            Ok(1),
            Err(DenialCode::BudgetExhausted),
            Err(DenialCode::BudgetExhausted),
            Err(DenialCode::BudgetExhausted)
        ]
    );
}

/// al04. The attack: a call made inside a call's body, through the same gate, and through two gates
/// alike nested. That is two calls, not one call through two gates. Asserted (SECURITY.md 13: "In any
/// window of a budget's length, at most its N calls pass it"): with a budget of one, the inner call is
/// refused.
#[test]
fn al04_a_call_inside_a_call_takes_a_unit_of_its_own() {
    let store = Arc::new(MemoryBudgets::new());
    let one = alike("al04-one", 1, shared(&store));
    let before = INNER.load(Ordering::SeqCst);
    assert_eq!(code(one.run(|| note_twice(1))), Ok(1));
    assert_eq!(
        INNER.load(Ordering::SeqCst),
        before,
        "a call inside a call ran on its outer call's unit, one gate"
    );
    let (outer, inner) = (
        alike("al04-two", 1, shared(&store)),
        alike("al04-two", 1, shared(&store)),
    );
    assert_eq!(code(outer.run(|| inner.run(|| note_twice(2)))), Ok(2));
    assert_eq!(
        INNER.load(Ordering::SeqCst),
        before,
        "a call inside a call ran on its outer call's unit, two gates alike"
    );
}

/// The policy file of al05: the agent's calls, two an hour.
fn agent_budget(agent: &str, calls: u32) -> LivePolicy {
    let text = format!(
        "format = 1\n[[agents.\"{agent}\".budgets]]\nagent = true\ncalls = {calls}\nper = \"1h\"\n"
    );
    LivePolicy::new(PolicyFile::parse("al.toml", &text).unwrap())
}

/// al05. The attack: one gate's budget is the code's (the agent's calls, two an hour), the other's an
/// operator's policy budget of the same agent, scope, N and window, on one store, nested, then each
/// alone. Asserted: neither budget passes more than two calls.
#[test]
fn al05_a_code_budget_and_a_policy_budget_of_one_key_keep_the_bound() {
    let store = Arc::new(MemoryBudgets::new());
    let code_gate = alike("al05", 2, shared(&store));
    let store_dyn: Arc<dyn BudgetStore> = store.clone();
    let policy_gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .agent("al05")
        .budget_store_shared(store_dyn)
        .policy(agent_budget("al05", 2))
        .build()
        .unwrap();
    let mut through_code = 0;
    let mut through_policy = 0;
    for n in 0..2 {
        if code(code_gate.run(|| policy_gate.run(|| note(n)))).is_ok() {
            through_code += 1;
            through_policy += 1;
        }
    }
    for n in 10..13 {
        if code(code_gate.run(|| note(n))).is_ok() {
            through_code += 1;
        }
        if code(policy_gate.run(|| note(n))).is_ok() {
            through_policy += 1;
        }
    }
    assert!(
        through_code <= 2 && through_policy <= 2,
        "code budget passed {through_code}, policy budget passed {through_policy}, of two each"
    );
    assert!(through_code >= 1, "nothing ran");
}

/// al06. The attack: a gate with the same budget twice (the code's and the policy's, one key). Asserted:
/// the budget of two is not exceeded, and not spent twice by one call (two calls run).
#[test]
fn al06_one_gate_with_a_code_and_a_policy_budget_of_one_key_runs_its_n_calls() {
    let store = Arc::new(MemoryBudgets::new());
    let store_dyn: Arc<dyn BudgetStore> = store.clone();
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .agent("al06")
        .budget(BudgetScope::Agent, 2, HOUR)
        .budget_store_shared(store_dyn)
        .policy(agent_budget("al06", 2))
        .build()
        .unwrap();
    let codes: Vec<_> = (0..3).map(|n| code(gate.run(|| note(n)))).collect();
    assert_eq!(codes, [Ok(0), Ok(1), Err(DenialCode::BudgetExhausted)]);
}

/// al07. The attack: the operator's policy gives agent `desk` one call an hour; two gates on one store,
/// one labelled `desk`, one labelled with a label that reads as `desk` without a control character (a
/// Cyrillic `е`, a zero-width space, a soft hyphen, a trailing space). Asserted (docs/policy_file.md: "A
/// gate follows the table whose name reads as its ... agent's"; SECURITY.md 13: the bound holds):
/// either the look-alike gate does not follow `desk`'s table and is unbudgeted by it, or the two share
/// `desk`'s one call. A gate that follows the table and counts apart passes a second call of `desk`.
#[test]
fn al07_a_label_that_reads_as_another_agents_does_not_get_a_budget_of_its_own() {
    let mut failures = Vec::new();
    for (i, look_alike) in ["d\u{435}sk", "desk\u{200b}", "de\u{ad}sk", "desk "]
        .into_iter()
        .enumerate()
    {
        let store = Arc::new(MemoryBudgets::new());
        let live = agent_budget("desk", 1);
        let gate_of = |agent: &str| {
            let store: Arc<dyn BudgetStore> = store.clone();
            Gate::builder()
                .mode(Mode::PartialAuto)
                .agent(agent)
                .budget_store_shared(store)
                .policy(live.clone())
                .build()
        };
        let desk = gate_of("desk").unwrap();
        let other = match gate_of(look_alike) {
            Ok(gate) => gate,
            Err(_) => continue, // refused: no budget of its own
        };
        let first = code(desk.run(|| note(100 + i as u64)));
        // Does the look-alike follow desk's table? Then it is bound by desk's one call.
        let second = code(other.run(|| note(200 + i as u64)));
        let third = code(other.run(|| note(300 + i as u64)));
        let follows = matches!(third, Err(DenialCode::BudgetExhausted))
            || matches!(second, Err(DenialCode::BudgetExhausted));
        if first.is_ok() && follows && second.is_ok() {
            failures.push(format!(
                "{look_alike:?} follows `desk`'s table (one call an hour) and counted apart: \
                 desk {first:?}, look-alike {second:?} then {third:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// al08. The attack: agent labels with a control character in every class (the key's separator,
/// another C0, DEL, a C1), with code budgets and with a policy budget. Asserted (docs/budgets.md: "An
/// agent label with a control character builds no budget (`BudgetError::AgentLabel`; a policy file's
/// budgets then refuse every tool)"): the build fails, or every call is refused.
#[test]
fn al08_an_agent_label_with_any_control_character_builds_no_budget() {
    let mut failures = Vec::new();
    for label in [
        "al08\u{1f}agent",
        "al08\u{1}",
        "al08\u{7f}",
        "al08\u{85}",
        "al08\u{9f}x",
    ] {
        let built = Gate::builder()
            .mode(Mode::PartialAuto)
            .agent(label)
            .budget(BudgetScope::Agent, 5, HOUR)
            .build();
        if let Ok(gate) = built {
            failures.push(format!(
                "{label:?}: a code budget built; a call: {:?}",
                code(gate.run(|| note(8)))
            ));
        }
        let with_policy = Gate::builder()
            .mode(Mode::PartialAuto)
            .agent(label)
            .policy(LivePolicy::new(
                PolicyFile::parse(
                    "al.toml",
                    "format = 1\n[[defaults.budgets]]\nagent = true\ncalls = 5\nper = \"1h\"\n",
                )
                .unwrap(),
            ))
            .build();
        if let Ok(gate) = with_policy
            && let Ok(n) = code(gate.run(|| note(9)))
        {
            failures.push(format!("{label:?}: a policy budget let a call run ({n})"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// al09. The attack: two gates configured alike on one store (the agent's calls, one an hour), one
/// labelled `desk`, the other with a label that reads as `desk` and has no control character. Asserted
/// (SECURITY.md, "Names that read alike": an agent's name "is compared by its reading ... Names with the
/// same reading are one name: where a comparison finds something by name, a look-alike finds the same
/// thing; where two of them would be two names, the second is refused"; SECURITY.md 13: "Gates
/// configured alike, sharing a store, share the budget"): the look-alike gate is refused when built,
/// or its call is refused by `desk`'s spent budget.
#[test]
fn al09_a_label_that_reads_as_another_agents_shares_its_budget_or_is_refused() {
    let mut failures = Vec::new();
    for (i, look_alike) in [
        "d\u{435}sk",
        "desk\u{200b}",
        "de\u{ad}sk",
        "desk ",
        "ｄｅｓｋ",
    ]
    .into_iter()
    .enumerate()
    {
        let store = Arc::new(MemoryBudgets::new());
        let desk = alike("desk", 1, shared(&store));
        let store_dyn: Arc<dyn BudgetStore> = store.clone();
        let other = match Gate::builder()
            .mode(Mode::PartialAuto)
            .agent(look_alike)
            .budget(BudgetScope::Agent, 1, HOUR)
            .budget_store_shared(store_dyn)
            .build()
        {
            Ok(gate) => gate,
            Err(_) => continue,
        };
        let first = code(desk.run(|| note(400 + i as u64)));
        let second = code(other.run(|| note(500 + i as u64)));
        if first.is_ok() && second.is_ok() {
            failures.push(format!(
                "{look_alike:?}: a second call of `desk`'s budget of one ran: {first:?}, {second:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// al10. The attack: three nested gates alike on one store, each with an approver that approves (so
/// each call waits, and is held again at its commit point), a budget of two. Asserted: one unit per
/// call, and the bound: two run, the third is refused, and a gate alike alone is refused.
#[test]
fn al10_three_nested_gates_alike_whose_calls_waited_take_one_unit_and_keep_the_bound() {
    let store = Arc::new(MemoryBudgets::new());
    let make = || {
        let store: Arc<dyn BudgetStore> = store.clone();
        Gate::builder()
            .mode(Mode::FullAuto)
            .agent("al10")
            .budget(BudgetScope::Agent, 2, HOUR)
            .budget_store_shared(store)
            .approver(|_: &toolgate::ApprovalRequest<'_>| toolgate::Approval::Approve)
            .build()
            .unwrap()
    };
    let (a, b, c, d) = (make(), make(), make(), make());
    let through = |n| code(a.run(|| b.run(|| c.run(|| wire(n)))));
    let codes = [through(1), through(2), through(3), code(d.run(|| wire(4)))];
    assert_eq!(
        codes,
        [
            Ok(1),
            Ok(2),
            Err(DenialCode::BudgetExhausted),
            Err(DenialCode::BudgetExhausted)
        ]
    );
}

/// al11. The attack: two gates alike on one store, a budget of one; the call through both is refused
/// after the budget check (the outer gate's approver rejects it). Asserted ("gives them back if refused
/// after"): the one unit comes back once, not twice: a gate alike then runs one call, not two.
#[test]
fn al11_a_call_through_gates_alike_refused_after_the_budget_gives_back_one_unit_once() {
    let store = Arc::new(MemoryBudgets::new());
    let make = |answer: fn() -> toolgate::Approval| {
        let store: Arc<dyn BudgetStore> = store.clone();
        Gate::builder()
            .mode(Mode::FullAuto)
            .agent("al11")
            .budget(BudgetScope::Agent, 1, HOUR)
            .budget_store_shared(store)
            .approver(move |_: &toolgate::ApprovalRequest<'_>| answer())
            .build()
            .unwrap()
    };
    let rejects = make(|| toolgate::Approval::Reject("no".into()));
    let approves = make(|| toolgate::Approval::Approve);
    let mut codes = vec![
        code(rejects.run(|| approves.run(|| wire(1)))),
        code(approves.run(|| rejects.run(|| wire(2)))),
    ];
    codes.push(code(approves.run(|| wire(3))));
    codes.push(code(approves.run(|| wire(4))));
    assert!(
        codes[0].is_err() && codes[1].is_err(),
        "a rejected call ran: {codes:?}"
    );
    assert_eq!(
        codes[2..],
        [Ok(3), Err(DenialCode::BudgetExhausted)],
        "{codes:?}"
    );
}

/// al12. The attack: gates alike on one store nested by every path: async scopes, a sync gate inside an
/// async scope, a call by name inside a scope. A budget of two. Asserted: two calls run, then every path
/// is refused.
#[test]
fn al12_gates_alike_nested_by_async_and_by_name_keep_the_bound() {
    let store = Arc::new(MemoryBudgets::new());
    let make = || alike("al12", 2, shared(&store));
    let (a, b, c) = (make(), make(), make());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = ASYNC_NOTES.load(Ordering::SeqCst);
    let codes = rt.block_on(async {
        let mut codes = Vec::new();
        for n in 0..2 {
            codes.push(code(a.scope(b.scope(c.scope(note_async(n)))).await));
        }
        codes.push(code(a.scope(b.scope(note_async(2))).await));
        codes.push(code(a.scope(async { b.run(|| note(3)) }).await));
        let by_name = a
            .scope(toolgate::registry().call(&b, "a8b.note_async", serde_json::json!({"n": 4})))
            .await;
        codes.push(by_name.map(|_| 4).map_err(|e| match e.code() {
            "BUDGET_EXHAUSTED" => DenialCode::BudgetExhausted,
            _ => DenialCode::NoGate,
        }));
        codes
    });
    assert_eq!(
        codes,
        [
            Ok(0),
            Ok(1),
            Err(DenialCode::BudgetExhausted),
            Err(DenialCode::BudgetExhausted),
            Err(DenialCode::BudgetExhausted)
        ]
    );
    assert_eq!(ASYNC_NOTES.load(Ordering::SeqCst), before + 2);
}
