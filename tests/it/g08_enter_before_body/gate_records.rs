//! The gate's audit records, approvals and escalation, seen from a tool's caller.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use toolgate::audit::{AuditError, AuditRecord, AuditSink, Decision, Outcome, Stage};
use toolgate::{Approval, ApprovalRequest, Denied, Gate, Mode, Risk, tool};

use crate::common::gates;
use crate::fixtures::support::{assert_audit_refused, assert_record_says, counted_tools};

#[derive(Default, Clone)]
struct Recorder(Arc<Mutex<Vec<AuditRecord>>>);

impl AuditSink for Recorder {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        self.0.lock().unwrap().push(record.clone());
        Ok(())
    }
}

impl Recorder {
    fn records(&self) -> Vec<AuditRecord> {
        self.0.lock().unwrap().clone()
    }

    fn stages(&self) -> Vec<Stage> {
        self.records().iter().map(|r| r.stage).collect()
    }
}

/// A sink whose disk is gone.
struct Broken;

impl AuditSink for Broken {
    fn record(&self, _: &AuditRecord) -> Result<(), AuditError> {
        Err(AuditError::new("the audit disk is full"))
    }
}

static TRANSFERS: AtomicUsize = AtomicUsize::new(0);

/// Move money between accounts.
#[tool(risk = "HIGH_WRITE", domain = "bank", redact = [memo], record_arguments)]
fn transfer(from: u32, to: u32, cents: u64, memo: String) -> Result<u64, Denied> {
    let _ = (from, to, memo);
    TRANSFERS.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

static LABELS: AtomicUsize = AtomicUsize::new(0);

/// Label a ticket.
#[tool(risk = "LOW_WRITE", domain = "tickets")]
fn label(ticket: u32, text: String) -> Result<(), Denied> {
    let _ = (ticket, text);
    LABELS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[derive(Debug)]
enum Failure {
    Refused,
    Broke,
}

impl From<Denied> for Failure {
    fn from(_: Denied) -> Self {
        Failure::Refused
    }
}

/// Read a page, which may fail or panic.
#[tool(risk = "READ_ONLY", domain = "pages")]
fn read_page(n: u32) -> Result<String, Failure> {
    match n {
        0 => Err(Failure::Broke),
        13 => panic!("page 13 is cursed"),
        n => Ok(format!("page {n}")),
    }
}

/// Fetch a page slowly.
#[tool(risk = "READ_ONLY", domain = "pages")]
async fn fetch_slowly(n: u32) -> Result<u32, Denied> {
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(n)
}

/// Classify a shell command: anything that asks for privileges is a critical write.
fn classify(command: &str) -> Risk {
    if command
        .split_whitespace()
        .any(|w| matches!(w, "sudo" | "doas" | "pkexec"))
    {
        Risk::HighWrite
    } else {
        Risk::ReadOnly
    }
}

static SHELL_RUNS: AtomicUsize = AtomicUsize::new(0);

counted_tools! {
    /// Run a shell command.
    #[tool(risk = "LOW_WRITE", domain = "host", escalate = classify)]
    fn shell(command: String) -> SHELL_RUNS += 1, command: String;
}

fn code<T: std::fmt::Debug>(result: Result<T, Denied>) -> String {
    result.unwrap_err().code().to_string()
}

#[test]
fn an_allowed_call_leaves_enter_then_exit() {
    let sink = Recorder::default();
    let gate = Gate::builder()
        .mode(Mode::Shadow)
        .agent("support-bot")
        .audit(sink.clone())
        .build()
        .unwrap();
    assert_eq!(gate.run(|| read_page(4)).unwrap(), "page 4");
    let records = sink.records();
    assert_eq!(sink.stages(), [Stage::Enter, Stage::Exit]);
    let (enter, exit) = (&records[0], &records[1]);
    assert_eq!(enter.tool, "pages.read_page");
    assert_eq!(enter.decision, Some(Decision::Allowed));
    assert_eq!(enter.agent.as_deref(), Some("support-bot"));
    assert_eq!(enter.gate, gate.id());
    assert_eq!(enter.mode, Mode::Shadow);
    assert_eq!(enter.declared_risk, Some(Risk::ReadOnly));
    assert_eq!(enter.effective_risk, Some(Risk::ReadOnly));
    assert_eq!(enter.manifest_digest, toolgate::report::manifest_digest());
    assert_eq!(enter.policy_version, toolgate::policy::POLICY_VERSION);
    assert_eq!(enter.arguments_digest.as_ref().map(String::len), Some(64));
    assert_eq!(
        enter.arguments, None,
        "raw arguments are not recorded by default"
    );
    assert!(enter.timestamp.ends_with('Z') && enter.timestamp.contains('T'));
    assert_eq!(exit.call, enter.call);
    assert_eq!(exit.outcome, Some(Outcome::Ok));
    assert!(exit.duration_us.is_some());
    assert_eq!(exit.output_digest.as_ref().map(String::len), Some(64));
}

#[test]
fn exit_records_errors_panics_and_cancellation() {
    let sink = Recorder::default();
    let gate = Gate::builder().audit(sink.clone()).build().unwrap();
    assert!(matches!(gate.run(|| read_page(0)), Err(Failure::Broke)));
    let panicked = std::panic::catch_unwind(|| gate.run(|| read_page(13)));
    assert!(panicked.is_err());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let slow = gate.scope(fetch_slowly(1));
        let timed_out = tokio::time::timeout(Duration::from_millis(10), slow).await;
        assert!(timed_out.is_err());
    });
    let outcomes: Vec<_> = sink
        .records()
        .iter()
        .filter(|r| r.stage == Stage::Exit)
        .map(|r| (r.tool.to_string(), r.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("pages.read_page".to_owned(), Some(Outcome::Error)),
            ("pages.read_page".to_owned(), Some(Outcome::Panic)),
            ("pages.fetch_slowly".to_owned(), Some(Outcome::Cancelled)),
        ]
    );
}

#[test]
fn a_sink_that_cannot_record_refuses_the_call() {
    let gate = gates::audited(Mode::FullAuto, Broken);
    let before = LABELS.load(Ordering::SeqCst);
    let denied = gate.run(|| label(1, "urgent".into())).unwrap_err();
    assert_audit_refused(&denied, "the audit disk is full", &LABELS, before);
}

#[test]
fn a_refusal_is_recorded_with_what_the_agent_would_have_done() {
    let sink = Recorder::default();
    let gate = Gate::builder().audit(sink.clone()).build().unwrap();
    let before = LABELS.load(Ordering::SeqCst);
    assert_eq!(
        code(gate.run(|| label(7, "vip".into()))),
        "MODE_NOT_ALLOWED"
    );
    assert_eq!(LABELS.load(Ordering::SeqCst), before);
    let records = sink.records();
    assert_eq!(records.len(), 1);
    let refused = &records[0];
    assert_eq!(refused.stage, Stage::Refused);
    assert_eq!(refused.decision, Some(Decision::Refused));
    assert_record_says(refused, "MODE_NOT_ALLOWED", "tickets.label");
    let mut other = records[0].arguments_digest.clone().unwrap();
    assert_eq!(other.len(), 64);
    // The same call digests the same; another argument digests differently.
    gate.run(|| label(7, "vip".into())).unwrap_err();
    gate.run(|| label(8, "vip".into())).unwrap_err();
    let digests: Vec<_> = sink
        .records()
        .iter()
        .map(|r| r.arguments_digest.clone().unwrap())
        .collect();
    assert_eq!(digests[1], other);
    other.clear();
    assert_ne!(digests[2], digests[1]);
}

#[test]
fn recorded_arguments_leave_redacted_ones_out() {
    // `TRANSFERS` counts the runs of every test here that calls `transfer`.
    let _serial = crate::common::serial();
    let sink = Recorder::default();
    let gate = gates::approved_audited(Mode::FullAuto, toolgate::AllowAllApprover, sink.clone());
    gate.run(|| transfer(1, 2, 500, "rent, PIN 1234".into()))
        .unwrap();
    let enter = &sink.records()[0];
    assert_eq!(enter.decision, Some(Decision::Approved));
    let arguments = enter.arguments.as_deref().unwrap();
    assert_eq!(
        arguments,
        r#"{"cents":500,"from":1,"memo":"[REDACTED]","to":2}"#
    );
}

#[test]
fn the_approver_sees_the_arguments_as_the_log_records_them() {
    // `TRANSFERS` counts the runs of every test here that calls `transfer`.
    let _serial = crate::common::serial();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_by_approver = seen.clone();
    let sink = toolgate::audit::MemorySink::new();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .audit(sink.clone())
        .approver(move |request: &ApprovalRequest<'_>| {
            seen_by_approver.lock().unwrap().push((
                request.arguments.map(str::to_owned),
                request.arguments_digest.map(str::to_owned),
            ));
            match request.arguments {
                Some(arguments) if arguments.contains("\"cents\":500") => {
                    Approval::Reject("not today".into())
                }
                _ => Approval::Approve,
            }
        })
        .build()
        .unwrap();
    let before = TRANSFERS.load(Ordering::SeqCst);
    let denied = gate
        .run(|| transfer(1, 2, 500, "card 4242".into()))
        .unwrap_err();
    assert_eq!(denied.code(), "APPROVAL_REJECTED");
    assert!(denied.to_string().ends_with("not today"), "{denied}");
    assert_eq!(TRANSFERS.load(Ordering::SeqCst), before);
    gate.run(|| transfer(1, 2, 7, "card 4242".into())).unwrap();

    let seen = seen.lock().unwrap().clone();
    let shown = r#"{"cents":500,"from":1,"memo":"[REDACTED]","to":2}"#;
    assert_eq!(seen[0].0.as_deref(), Some(shown), "redacted, keys sorted");
    assert!(!format!("{seen:?}").contains("4242"), "{seen:?}");
    // What the approver saw is what the log holds for the same call, digest and all.
    let records = sink.records();
    let refused = records.iter().find(|r| r.stage == Stage::Refused).unwrap();
    let entered = records.iter().find(|r| r.stage == Stage::Enter).unwrap();
    assert_eq!(
        (refused.arguments.clone(), refused.arguments_digest.clone()),
        seen[0]
    );
    assert_eq!(
        (entered.arguments.clone(), entered.arguments_digest.clone()),
        seen[1]
    );
    assert_eq!(seen[1].1.as_ref().map(String::len), Some(64));
}

#[test]
fn two_step_approval_runs_the_same_call_once() {
    // `TRANSFERS` counts the runs of every test here that calls `transfer`.
    let _serial = crate::common::serial();
    let gate = gates::two_step(Mode::FullAuto);
    let runs = || TRANSFERS.load(Ordering::SeqCst);
    let start = runs();
    let first = gate.run(|| transfer(1, 2, 900, "a".into())).unwrap_err();
    assert_eq!(first.code(), "APPROVAL_PENDING");
    let token = first.approval_token().unwrap().to_owned();
    // The token is for the operator: neither the message nor the JSON the agent sees carries it.
    assert!(!first.to_string().contains(&token));
    assert!(!serde_json::to_string(&first).unwrap().contains(&token));
    assert_eq!(runs(), start);

    gate.approve(&token).unwrap();
    assert_eq!(
        gate.approve(&token),
        Err(toolgate::approval::ApproveError::AlreadyApproved)
    );
    let other = gate.run(|| transfer(1, 2, 901, "a".into())).unwrap_err();
    assert_eq!(other.code(), "APPROVAL_PENDING");
    assert_eq!(runs(), start);
    assert_eq!(gate.run(|| transfer(1, 2, 900, "a".into())).unwrap(), 900);
    assert_eq!(runs(), start + 1);
    let again = gate.run(|| transfer(1, 2, 900, "a".into())).unwrap_err();
    assert_eq!(again.code(), "APPROVAL_REUSED");
    assert_eq!(runs(), start + 1);
    assert_eq!(
        gate.approve("not-a-token"),
        Err(toolgate::approval::ApproveError::UnknownToken)
    );
}

#[test]
fn two_step_approvals_expire() {
    // `TRANSFERS` counts the runs of every test here that calls `transfer`.
    let _serial = crate::common::serial();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_ttl(Duration::from_millis(30))
        .build()
        .unwrap();
    let before = TRANSFERS.load(Ordering::SeqCst);
    let token = gate
        .run(|| transfer(3, 4, 77, "b".into()))
        .unwrap_err()
        .approval_token()
        .unwrap()
        .to_owned();
    gate.approve(&token).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    let expired = gate.run(|| transfer(3, 4, 77, "b".into())).unwrap_err();
    assert_eq!(expired.code(), "APPROVAL_EXPIRED");
    assert_eq!(TRANSFERS.load(Ordering::SeqCst), before);
}

#[test]
fn escalation_raises_the_risk_and_never_lowers_it() {
    let runs = || SHELL_RUNS.load(Ordering::SeqCst);
    let partial = Gate::new(Mode::PartialAuto).unwrap();
    let start = runs();
    assert_eq!(partial.run(|| shell("ls -l".into())).unwrap(), "ls -l");
    let denied = partial
        .run(|| shell("sudo rm -rf /srv".into()))
        .unwrap_err();
    assert_eq!(denied.code(), "ABOVE_CEILING");
    assert_eq!(denied.risk(), Risk::HighWrite);
    assert_eq!(
        denied.to_string(),
        "tool `host.shell` (declared LOW_WRITE, raised to HIGH_WRITE by its arguments) is above the \
         ceiling of mode PARTIAL_AUTO (LOW_WRITE); at HIGH_WRITE it runs in FULL_AUTO, with an \
         approval"
    );
    assert_eq!(runs(), start + 1);

    // `classify` says READ_ONLY for `ls`, but the declared LOW_WRITE stands: SHADOW still refuses.
    let shadow = Gate::new(Mode::Shadow).unwrap();
    assert_eq!(code(shadow.run(|| shell("ls".into()))), "MODE_NOT_ALLOWED");
    // Raised, the refusal says so, and names the modes that would really run the call.
    assert_eq!(
        shadow
            .run(|| shell("sudo ls".into()))
            .unwrap_err()
            .to_string(),
        "tool `host.shell` (declared LOW_WRITE, raised to HIGH_WRITE by its arguments) is not \
         allowed in mode SHADOW; at HIGH_WRITE it runs in FULL_AUTO, with an approval"
    );

    // In FULL_AUTO the escalated call needs an approval like any HIGH_WRITE call.
    let full = Gate::new(Mode::FullAuto).unwrap();
    assert_eq!(
        code(full.run(|| shell("sudo reboot".into()))),
        "APPROVAL_REQUIRED"
    );
    assert_eq!(full.run(|| shell("uptime".into())).unwrap(), "uptime");
    assert_eq!(runs(), start + 2);
}

#[test]
fn lowering_the_mode_is_recorded() {
    let sink = Recorder::default();
    let gate = gates::audited(Mode::FullAuto, sink.clone());
    gate.lower_by(Mode::Shadow, "on-call: runaway agent")
        .unwrap();
    let records = sink.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].stage, Stage::ModeLowered);
    assert_eq!(records[0].mode, Mode::Shadow);
    assert_eq!(
        records[0].message.as_deref(),
        Some("mode lowered from FULL_AUTO to SHADOW by on-call: runaway agent")
    );
    assert!(gate.lower(Mode::FullAuto).is_err());
    assert_eq!(sink.records().len(), 1, "a refused raise changes nothing");
}
