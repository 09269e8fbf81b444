//! Runs `N` calls of one variant and nothing else, for counting instructions with callgrind:
//! `instructions VARIANT N`. `benches/callgrind.sh` runs each variant with `N = 0` and with a large `N`
//! under `valgrind --tool=callgrind`; the difference of the two totals divided by `N` is the exact
//! number of instructions per call, since everything else the program does is the same in both runs.
//!
//! Run by `cargo bench` (which passes `--bench`), it only says so.

use std::hint::black_box;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use toolgate::approval::SessionGrant;
use toolgate::gate::{BudgetScope, budget};
use toolgate::{Approval, ApprovalRequest, Gate, Mode};

use toolgate::audit::{AuditSink, JsonlSink, TracingSink};
use toolgate_benches::by_name::CallByName;
use toolgate_benches::gate_tools::{add, add_async, add_async_direct, add_direct, delete, gate};
use toolgate_benches::{audit, policy_gate, ready};

/// Every variant, with what it runs `N` times.
const VARIANTS: &[(&str, &str)] = &[
    ("direct", "add_direct(i, 2): the body without #[tool]"),
    (
        "allowed",
        "add(i, 2): #[tool], allowed, inside one gate.run",
    ),
    (
        "policy_allowed",
        "add(i, 2) under a gate following a policy file with no rule naming the tool, inside one gate.run",
    ),
    (
        "refused",
        "delete(i, 2): #[tool], refused (MODE_NOT_ALLOWED), inside one gate.run",
    ),
    (
        "allowed_run_each",
        "gate.run(|| add(i, 2)): a gate entered around each call",
    ),
    (
        "budget_other",
        "add(i, 2) under a gate with a budget of another tool: the inlined check, as `allowed`",
    ),
    (
        "budget_memory",
        "add(i, 2) under a gate whose budget (in memory) covers it: the full decision and a unit taken",
    ),
    (
        "full_allowed",
        "add(i, 2) in FULL_AUTO, under a gate with an approver: needs no approval",
    ),
    (
        "granted",
        "delete(i, 2) in FULL_AUTO, HIGH_WRITE, run by a session grant of the tool",
    ),
    (
        "two_step",
        "delete(i, 2) in FULL_AUTO with two-step approvals in memory: refused with a token, approved, run",
    ),
    (
        "async_direct",
        "add_async_direct(i, 2).await, in one async block",
    ),
    (
        "async_allowed",
        "add_async(i, 2).await, in one async block inside one gate.scope",
    ),
    (
        "async_direct_each",
        "ready(add_async_direct(i, 2)): each future polled on its own",
    ),
    (
        "async_scope_each",
        "ready(gate.scope(add_async(i, 2))): a scope around each call",
    ),
    (
        "floor",
        "call by name, serde floor: clone, from_value, call, to_string",
    ),
    (
        "toolgate",
        "call by name, toolgate::registry().call(&gate, \"add\", args), to_string",
    ),
    (
        "policy_by_name",
        "call by name as `toolgate`, through a gate whose policy file has argument rules on `add`",
    ),
    (
        "toolgate_audit",
        "call by name, toolgate with the JSONL audit sink (Flush), to_string",
    ),
    (
        "rmcp_stored",
        "call by name, rmcp call_tool, router kept in a field, to_string",
    ),
    (
        "rmcp_rebuilt",
        "call by name, rmcp call_tool, bare #[tool_handler], to_string",
    ),
    (
        "audit_record",
        "JsonlSink::record of one enter record (Durability::Flush)",
    ),
    (
        "traced",
        "add(i, 2) under a gate auditing to TracingSink, no subscriber: 2 records",
    ),
    (
        "traced_subscribed",
        "add(i, 2) under a gate auditing to TracingSink, a subscriber taking everything: 2 records",
    ),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--bench") {
        println!("instructions: counts instructions under callgrind; run benches/callgrind.sh");
        return ExitCode::SUCCESS;
    }
    let (Some(variant), Some(Ok(n))) = (args.first(), args.get(1).map(|n| n.parse::<u64>())) else {
        return usage();
    };
    if run(variant, n) {
        ExitCode::SUCCESS
    } else {
        usage()
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: instructions VARIANT N\n\nvariants:");
    for (name, what) in VARIANTS {
        eprintln!("  {name:<18} {what}");
    }
    ExitCode::FAILURE
}

/// Runs `n` calls of `variant`; `false` if there is no such variant.
fn run(variant: &str, n: u64) -> bool {
    let gate = gate();
    match variant {
        "direct" => gate.run(|| {
            for i in 0..n {
                let _ = black_box(add_direct(black_box(i), black_box(2)));
            }
        }),
        "allowed" => gate.run(|| {
            for i in 0..n {
                let _ = black_box(add(black_box(i), black_box(2)));
            }
        }),
        "policy_allowed" => {
            let gate = policy_gate::gate();
            assert!(
                gate.policy_digest().is_some(),
                "the gate follows the policy"
            );
            gate.run(|| {
                for i in 0..n {
                    let _ = black_box(add(black_box(i), black_box(2)));
                }
            })
        }
        "refused" => gate.run(|| {
            for i in 0..n {
                let _ = black_box(delete(black_box(i), black_box(2)));
            }
        }),
        "budget_other" | "budget_memory" => {
            let counted = if variant == "budget_memory" {
                "gate.add"
            } else {
                "gate.delete"
            };
            let budgeted = Gate::builder()
                .mode(toolgate_benches::gate_tools::MODE)
                .budget(
                    BudgetScope::tool(counted),
                    budget::MAX_BUDGET_CALLS,
                    budget::MAX_BUDGET_WINDOW,
                )
                .build()
                .expect("the benchmarks' tools have distinct ids");
            assert!(
                n < u64::from(budget::MAX_BUDGET_CALLS),
                "N is within the budget"
            );
            budgeted.run(|| {
                for i in 0..n {
                    let _ = black_box(add(black_box(i), black_box(2))).expect("within budget");
                }
            })
        }
        "full_allowed" | "granted" => {
            let gate = granting_gate();
            gate.run(|| {
                // The first call is approved and grants the tool, outside the count.
                let _ = black_box(delete(0, 2)).expect("approved");
                if variant == "granted" {
                    for i in 0..n {
                        let _ = black_box(delete(black_box(i), black_box(2)));
                    }
                } else {
                    for i in 0..n {
                        let _ = black_box(add(black_box(i), black_box(2)));
                    }
                }
            })
        }
        "two_step" => {
            let gate = Gate::builder()
                .mode(Mode::FullAuto)
                .two_step_approvals()
                .build()
                .expect("the benchmarks' tools have distinct ids");
            gate.run(|| {
                for i in 0..n {
                    let token = match delete(black_box(i), black_box(2)) {
                        Err(denied) => denied.approval_token().map(str::to_owned),
                        Ok(_) => None,
                    };
                    gate.approve(&token.expect("a token")).expect("approved");
                    black_box(delete(black_box(i), black_box(2))).expect("runs once");
                }
            })
        }
        "allowed_run_each" => {
            for i in 0..n {
                let _ = black_box(gate.run(|| add(black_box(i), black_box(2))));
            }
        }
        "async_direct" => ready(async {
            for i in 0..n {
                let _ = black_box(add_async_direct(black_box(i), black_box(2)).await);
            }
        }),
        "async_allowed" => ready(gate.scope(async {
            for i in 0..n {
                let _ = black_box(add_async(black_box(i), black_box(2)).await);
            }
        })),
        "async_direct_each" => {
            for i in 0..n {
                let _ = black_box(ready(add_async_direct(black_box(i), black_box(2))));
            }
        }
        "async_scope_each" => {
            for i in 0..n {
                let _ = black_box(ready(gate.scope(add_async(black_box(i), black_box(2)))));
            }
        }
        "floor" | "toolgate" | "toolgate_audit" | "rmcp_stored" | "rmcp_rebuilt" => {
            let bench = CallByName::new(tmp()).expect("set up the call-by-name benchmark");
            let _runtime = bench.enter();
            let call = match variant {
                "floor" => CallByName::floor,
                "toolgate" => CallByName::toolgate,
                "toolgate_audit" => CallByName::toolgate_audited,
                "rmcp_stored" => CallByName::rmcp_stored,
                _ => CallByName::rmcp_rebuilt,
            };
            let args = bench.args.clone();
            // Once outside the count, so that a first call's one-time work is in both runs.
            assert!(call(&bench, &args).contains("42"));
            for _ in 0..n {
                black_box(call(&bench, black_box(&args)));
            }
        }
        "policy_by_name" => {
            let bench = CallByName::new(tmp()).expect("set up the call-by-name benchmark");
            let gate = policy_gate::gate();
            let refused = ready(toolgate::registry().call(
                &gate,
                "add",
                serde_json::json!({"a": 2, "b": 39}),
            ));
            assert_eq!(
                refused.expect_err("the rule on `b` refuses 39").code(),
                "ARGUMENT_REFUSED"
            );
            let args = bench.args.clone();
            // Once outside the count, as for the other ways of calling by name.
            assert!(bench.toolgate_through(&gate, &args).contains("42"));
            for _ in 0..n {
                black_box(bench.toolgate_through(&gate, black_box(&args)));
            }
        }
        "audit_record" => {
            let path = tmp().join("instructions-audit.jsonl");
            let _ = std::fs::remove_file(&path);
            let sink = JsonlSink::open(&path).expect("open the audit log");
            let record = audit::enter_record(1);
            sink.record(&record).expect("record");
            for _ in 0..n {
                sink.record(black_box(&record)).expect("record");
            }
        }
        "traced" | "traced_subscribed" => {
            let traced = Gate::builder()
                .mode(Mode::PartialAuto)
                .audit(TracingSink::new())
                .build()
                .expect("the benchmarks' tools have distinct ids");
            let calls = || {
                traced.run(|| {
                    let _ = add(1, 2);
                    for i in 0..n {
                        let _ = black_box(add(black_box(i), black_box(2)));
                    }
                })
            };
            if variant == "traced" {
                calls();
            } else {
                tracing::subscriber::with_default(TakesAll::default(), calls);
            }
        }
        _ => return false,
    }
    true
}

/// A subscriber that is interested in every span and event and keeps nothing: what the sink itself
/// costs once something listens, without an exporter's work.
#[derive(Default)]
struct TakesAll {
    next: std::sync::atomic::AtomicU64,
}

impl tracing::Subscriber for TakesAll {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        black_box(span);
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::span::Id::from_u64(id + 1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        black_box(values);
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        black_box(event);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A FULL_AUTO gate whose approver grants each tool it is asked about for the session.
fn granting_gate() -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .approver(|_: &ApprovalRequest<'_>| {
            Approval::ApproveForSession(SessionGrant::tool(Duration::from_secs(3600)))
        })
        .build()
        .expect("the benchmarks' tools have distinct ids")
}

fn tmp() -> &'static Path {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
}
