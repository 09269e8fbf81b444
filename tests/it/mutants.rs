//! Tests written to kill the mutants cargo-mutants makes of the gate's decision code (see
//! `.cargo/mutants.toml`): each pins a behaviour of `policy`, `gate`, `scope`, `two_step` or `approval`
//! that no other test pinned, so that changing it fails a test.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use toolgate::approval::ApproveError;
use toolgate::audit::{Decision, MemorySink, Stage};
use toolgate::gate::DenyRuleError;
use toolgate::{AllowAllApprover, Approval, ApprovalRequest, DenialCode, Gate, Mode, Risk, tool};

use crate::common::gates;
use crate::common::serial;
use crate::fixtures::support::{counted_tools, full_auto_with_ttl};

static PAYMENTS: AtomicUsize = AtomicUsize::new(0);
static COMMANDS: AtomicUsize = AtomicUsize::new(0);

counted_tools! {
    /// Pays an invoice.
    #[tool(risk = "HIGH_WRITE", domain = "billing")]
    fn pay(invoice: u64) -> PAYMENTS += 1, invoice: u64;
}

/// Anything run with `sudo` is a critical write.
fn classify(command: &str) -> Risk {
    if command.starts_with("sudo ") {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

counted_tools! {
    /// Runs a command.
    #[tool(risk = "LOW_WRITE", domain = "host", escalate = classify)]
    fn run(command: String) -> COMMANDS += 1, command: String;
}

#[test]
fn an_approval_displays_as_what_it_says() {
    assert_eq!(Approval::Approve.to_string(), "approved");
    assert_eq!(
        Approval::Reject("over budget".into()).to_string(),
        "rejected: over budget"
    );
}

#[test]
fn a_gate_keeps_its_agent_label() {
    let labelled = Gate::builder().agent("billing-bot").build().unwrap();
    assert_eq!(labelled.agent(), Some("billing-bot"));
    assert_eq!(labelled.clone().agent(), Some("billing-bot"));
    assert_eq!(Gate::new(Mode::Shadow).unwrap().agent(), None);
}

#[test]
fn a_rejection_without_a_reason_has_no_detail() {
    for reason in ["", "   ", "\n\t"] {
        let gate = gates::approved(Mode::FullAuto, move |_: &ApprovalRequest<'_>| {
            Approval::Reject(reason.to_owned())
        });
        let denied = gate.run(|| pay(1)).unwrap_err();
        assert_eq!(denied.code(), DenialCode::ApprovalRejected);
        assert_eq!(denied.detail(), None, "{reason:?}");
        assert_eq!(
            denied.to_string(),
            "tool `billing.pay` (HIGH_WRITE) was not approved in mode FULL_AUTO: no reason given"
        );
    }
}

#[test]
fn an_approval_granted_record_names_the_call_it_approves() {
    let sink = MemorySink::new();
    let gate = gates::two_step_audited(Mode::FullAuto, sink.clone());
    let refused = gate.run(|| pay(42)).unwrap_err();
    gate.approve(refused.approval_token().unwrap()).unwrap();
    let records = sink.records();
    let [refusal, granted] = &records[..] else {
        panic!("expected a refusal and an approval, got {records:?}");
    };
    assert_eq!(refusal.stage, Stage::Refused);
    assert_eq!(granted.stage, Stage::ApprovalGranted);
    assert_eq!(granted.tool, "billing.pay");
    assert_eq!(granted.decision, Some(Decision::Approved));
    assert_eq!(granted.effective_risk, Some(Risk::HighWrite));
    assert_eq!(granted.mode, Mode::FullAuto);
    assert!(granted.arguments_digest.is_some());
    assert_eq!(granted.arguments_digest, refusal.arguments_digest);
    assert!(granted.call > refusal.call);
}

#[test]
fn a_refusal_record_has_the_declared_and_the_effective_risk() {
    let sink = MemorySink::new();
    let gate = gates::audited(Mode::PartialAuto, sink.clone());
    let before = COMMANDS.load(Ordering::SeqCst);
    let denied = gate.run(|| run("sudo reboot".into())).unwrap_err();
    assert_eq!(denied.code(), DenialCode::AboveCeiling);
    assert_eq!(COMMANDS.load(Ordering::SeqCst), before);
    let records = sink.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].stage, Stage::Refused);
    assert_eq!(records[0].declared_risk, Some(Risk::LowWrite));
    assert_eq!(records[0].effective_risk, Some(Risk::HighWrite));
    assert_eq!(records[0].code.as_deref(), Some("ABOVE_CEILING"));
    assert_eq!(records[0].decision, Some(Decision::Refused));
}

#[test]
fn an_approving_approver_runs_the_call() {
    let _serial = serial();
    let gate = gates::approved(Mode::FullAuto, AllowAllApprover);
    let before = PAYMENTS.load(Ordering::SeqCst);
    assert_eq!(gate.run(|| pay(7)).unwrap(), 7);
    assert_eq!(PAYMENTS.load(Ordering::SeqCst), before + 1);
}

#[test]
fn every_record_of_a_call_has_its_call_number() {
    let sink = MemorySink::new();
    let gate = gates::audited(Mode::PartialAuto, sink.clone());
    gate.run(|| {
        run("ls".into()).unwrap();
        run("sudo ls".into()).unwrap_err();
        run("pwd".into()).unwrap();
    });
    let calls: Vec<(Stage, u64)> = sink.records().iter().map(|r| (r.stage, r.call)).collect();
    assert_eq!(
        calls,
        [
            (Stage::Enter, 1),
            (Stage::Exit, 1),
            (Stage::Refused, 2),
            (Stage::Enter, 3),
            (Stage::Exit, 3),
        ]
    );
    assert!(sink.records().iter().all(|r| r.gate == gate.id()));
}

#[test]
fn a_gate_error_lists_each_rule_once_separated() {
    let dead = |pattern: &str| {
        DenyRuleError::MatchesNothing {
            pattern: pattern.into(),
        }
        .to_string()
    };
    let one = Gate::builder().deny("nothing.here").build().unwrap_err();
    assert_eq!(
        one.to_string(),
        format!("cannot build the gate: {}", dead("nothing.here"))
    );
    let two = Gate::builder()
        .deny("nothing.here")
        .deny("nor.there")
        .build()
        .unwrap_err();
    assert_eq!(
        two.to_string(),
        format!(
            "cannot build the gate: {}; {}",
            dead("nothing.here"),
            dead("nor.there")
        )
    );
}

#[test]
fn a_gate_builder_shows_its_settings() {
    let builder = Gate::builder()
        .mode(Mode::PartialAuto)
        .deny("billing.pay")
        .agent("ops")
        .two_step_approvals();
    let debug = format!("{builder:?}");
    for part in [
        "GateBuilder",
        "mode: PartialAuto",
        "\"billing.pay\"",
        "approver: false",
        "store: Memory(600s)",
        "audit: false",
        "\"ops\"",
    ] {
        assert!(debug.contains(part), "{part} in {debug}");
    }
}

#[test]
fn two_step_approvals_last_ten_minutes_by_default() {
    assert_eq!(
        toolgate::approval::DEFAULT_APPROVAL_TTL,
        Duration::from_secs(600)
    );
}

#[test]
fn approve_errors_say_what_went_wrong() {
    let cases = [
        (
            ApproveError::UnknownToken,
            "no approval request has this token",
        ),
        (ApproveError::Expired, "the approval request expired"),
        (
            ApproveError::AlreadyApproved,
            "the request is answered already",
        ),
        (ApproveError::AlreadyUsed, "the answer was used already"),
        (
            ApproveError::Store(toolgate::approval::store::StoreError::Timeout),
            "the approval store did not answer in time",
        ),
        (
            ApproveError::NotEnabled,
            "this gate does not take two-step approvals",
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text);
    }
    assert_eq!(
        Gate::new(Mode::FullAuto).unwrap().approve("any"),
        Err(ApproveError::NotEnabled)
    );
}

/// A request is kept one time-to-live past its expiry, so that a late retry hears it expired, then
/// forgotten: its token is unknown, and the call asks anew.
#[test]
fn an_expired_request_is_forgotten_one_time_to_live_later() {
    let _serial = serial();
    const TTL: Duration = Duration::from_millis(300);
    let gate = full_auto_with_ttl(TTL);
    let before = PAYMENTS.load(Ordering::SeqCst);
    let first = gate.run(|| pay(9)).unwrap_err();
    let token = first.approval_token().unwrap().to_owned();
    gate.approve(&token).unwrap();
    std::thread::sleep(TTL + TTL / 3);
    let expired = gate.run(|| pay(9)).unwrap_err();
    assert_eq!(expired.code(), DenialCode::ApprovalExpired);
    assert_eq!(gate.approve(&token), Err(ApproveError::Expired));
    std::thread::sleep(TTL + TTL / 3);
    // Past expiry plus one time-to-live, the next refusal prunes it: its token is unknown from then on,
    // and the call after asks anew.
    gate.run(|| pay(9)).unwrap_err();
    assert_eq!(gate.approve(&token), Err(ApproveError::UnknownToken));
    let fresh = gate.run(|| pay(9)).unwrap_err();
    assert_eq!(fresh.code(), DenialCode::ApprovalPending);
    assert_ne!(fresh.approval_token(), Some(token.as_str()));
    assert_eq!(PAYMENTS.load(Ordering::SeqCst), before);
}

/// A refusal says the risk the call was judged at. Refused in SHADOW at its declared risk already, an
/// escalated call is still reported at the escalated one, by a lone gate that keeps no record too.
#[test]
fn an_escalated_call_refused_by_a_lone_gate_carries_the_escalated_risk() {
    let shadow = Gate::new(Mode::Shadow).unwrap();
    let before = COMMANDS.load(Ordering::SeqCst);
    let escalated = shadow.run(|| run("sudo ls".into())).unwrap_err();
    assert_eq!(escalated.code(), DenialCode::ModeNotAllowed);
    assert_eq!(escalated.risk(), Risk::HighWrite);
    assert!(
        escalated
            .to_string()
            .contains("(declared LOW_WRITE, raised to HIGH_WRITE by its arguments)"),
        "{escalated}"
    );
    let plain = shadow.run(|| run("ls".into())).unwrap_err();
    assert!(
        plain.to_string().contains("(LOW_WRITE) is not allowed"),
        "{plain}"
    );
    assert_eq!(plain.risk(), Risk::LowWrite);
    assert_eq!(COMMANDS.load(Ordering::SeqCst), before);
}
