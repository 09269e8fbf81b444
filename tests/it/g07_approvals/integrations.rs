//! Guarantee 7 (Approvals are single-use, bound and expiring), against tools handed to a rig agent,
//! tool definitions for model APIs, and the tracing sink's spans.
//! Each test asserts the guarantee: it passes when the attack fails.
#![cfg(feature = "rig")]

use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use toolgate::audit::TracingSink;
use toolgate::{Approval, ApprovalRequest, CallError, Denied, Mode, registry};

use crate::common::gates;
use crate::fixtures::integrations::*;
use crate::g07_approvals::checks::built;

/// Tries: approvals through rig under an async approver: a sync HIGH_WRITE tool (which cannot wait
/// for it), and an async one. Guarantee: the sync tool's call is refused `APPROVAL_REQUIRED` at once,
/// never run and never asked; the async one is asked once and runs once when approved, and a
/// rejection is `APPROVAL_REJECTED` with the body not run.
#[tokio::test]
async fn i06_an_async_approver_through_rig() {
    let asked = Arc::new(AtomicUsize::new(0));
    let gate = built(Mode::FullAuto, |b| {
        b.async_approver(CountingAsync {
            asked: asked.clone(),
            answer: || Approval::Approve,
            lower: Arc::new(OnceLock::new()),
        })
    });
    let tools = iatk(&gate);
    let refused = refusal(run(&tools, "iatk.wipe", json!({"id": 601})).await);
    assert_eq!(refused.code(), Some("APPROVAL_REQUIRED"));
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the sync call asked");
    assert_eq!(
        ran("wipe", 601),
        0,
        "a sync tool ran under an async approver"
    );

    let done = run(&tools, "iatk.wipe_async", json!({"id": 602}))
        .await
        .unwrap();
    assert_eq!(done.as_text(), Some("entry 602 wiped"));
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(ran("wipe_async", 602), 1);

    let rejecting = built(Mode::FullAuto, |b| {
        b.async_approver(CountingAsync {
            asked: Arc::new(AtomicUsize::new(0)),
            answer: || Approval::Reject("not entry 603".into()),
            lower: Arc::new(OnceLock::new()),
        })
    });
    let refused = refusal(run(&iatk(&rejecting), "iatk.wipe_async", json!({"id": 603})).await);
    assert_eq!(refused.code(), Some("APPROVAL_REJECTED"));
    assert!(refused.model_feedback().unwrap().contains("not entry 603"));
    assert_eq!(ran("wipe_async", 603), 0);
}

/// Tries: two-step approvals through rig: the token leaking to the model (the feedback, the error's
/// message, `Display`, `Debug`), and the approved call run twice or with other arguments. Guarantee
/// 7: the token is for the operator, not in what the agent sees; an approval runs one call of the
/// same tool with the same arguments, once.
#[tokio::test]
async fn i08_two_step_approvals_through_rig() {
    let gate = gates::two_step(Mode::FullAuto);
    let tools = iatk(&gate);
    let first = refusal(run(&tools, "iatk.wipe", json!({"id": 801})).await);
    assert_eq!(first.code(), Some("APPROVAL_PENDING"));
    // The operator's token: from the rig error if it carries the call's error, else asked again.
    let token = match first.downcast_ref::<CallError>() {
        Some(error) => error
            .denied()
            .and_then(Denied::approval_token)
            .map(str::to_owned),
        None => None,
    };
    let token = match token {
        Some(token) => token,
        None => registry()
            .call(&gate, "iatk.wipe", json!({"id": 801}))
            .await
            .unwrap_err()
            .denied()
            .and_then(Denied::approval_token)
            .expect("a token for the operator")
            .to_owned(),
    };
    let seen = format!(
        "{} {:?} {} {:?} {}",
        first.model_feedback().unwrap_or(""),
        first,
        first,
        first.model_output(),
        first.message()
    );
    assert!(
        !seen.contains(&token),
        "the token reaches the agent: {seen}"
    );

    gate.approve(&token).unwrap();
    let other = refusal(run(&tools, "iatk.wipe", json!({"id": 802})).await);
    assert!(other.is_refusal(), "another argument ran on the approval");
    let extra = run(&tools, "iatk.wipe", json!({"id": 801, "x": 1})).await;
    assert!(extra.is_err(), "extra keys ran on the approval");
    let done = run(&tools, "iatk.wipe", json!({"id": 801})).await.unwrap();
    assert_eq!(done.as_text(), Some("entry 801 wiped"));
    let again = refusal(run(&tools, "iatk.wipe", json!({"id": 801})).await);
    assert!(
        matches!(again.code(), Some("APPROVAL_REUSED" | "APPROVAL_PENDING")),
        "{:?}",
        again.code()
    );
    assert_eq!(ran("wipe", 801), 1, "an approval ran more than once");
    assert_eq!(ran("wipe", 802), 0);
}

// ---------------------------------------------------------------------------------------------------
// spans

/// Tries: a redacted argument of a `record_arguments` tool reaching a span: an allowed call, a call
/// with an extra key, a redacted value of the wrong type, a refused call (mode) and a rejected one
/// (after the arguments were read), all through rig. Guarantee: arguments only for tools declared
/// `record_arguments`, redacted ones as `"[REDACTED]"`; a redacted parameter's bad value is not
/// quoted back, in the span or to the model.
#[test]
fn i12_a_redacted_argument_never_reaches_a_span_or_the_model() {
    let partial = gates::audited(Mode::PartialAuto, TracingSink::new());
    let rejecting = built(Mode::FullAuto, |b| {
        b.audit(TracingSink::new())
            .approver(|_: &ApprovalRequest<'_>| Approval::Reject("no".into()))
    });
    let secrets = [
        "S3CRET-TOKEN-A",
        "S3CRET-TOKEN-B",
        "987654321",
        "424242",
        "515151",
        "S3CRET-TOKEN-C",
    ];
    let mut feedback = Vec::new();
    let spans = exported(|| {
        runtime().block_on(async {
            let tools = iatk(&partial);
            let ok = run(
                &tools,
                "iatk.login",
                json!({"user": "ann", "token": "S3CRET-TOKEN-A"}),
            )
            .await
            .unwrap();
            feedback.push(ok.render());
            for arguments in [
                json!({"user": "ann", "token": "S3CRET-TOKEN-B", "zz": 1}),
                json!({"user": "ann", "token": 987654321u64}),
                json!({"token": "S3CRET-TOKEN-C"}),
            ] {
                let error = refusal(run(&tools, "iatk.login", arguments).await);
                feedback.push(format!(
                    "{} {} {error:?}",
                    error.model_feedback().unwrap_or(""),
                    error.model_output().render()
                ));
            }
            let refused =
                refusal(run(&tools, "iatk.vault", json!({"user": "ann", "pin": 424242})).await);
            feedback.push(format!("{:?}", refused));
            let bad_pin = refusal(
                run(
                    &tools,
                    "iatk.vault",
                    json!({"user": "ann", "pin": "424242"}),
                )
                .await,
            );
            feedback.push(format!("{:?}", bad_pin));
            let rejected = refusal(
                run(
                    &iatk(&rejecting),
                    "iatk.vault",
                    json!({"user": "ann", "pin": 515151}),
                )
                .await,
            );
            assert_eq!(rejected.code(), Some("APPROVAL_REJECTED"));
            feedback.push(format!("{:?}", rejected));
        });
    });
    let login = tool_spans(&spans, "iatk.login");
    assert!(login.len() >= 2, "{}", login.len());
    let allowed = login
        .iter()
        .find(|s| attributes(s).get("toolgate.outcome").map(String::as_str) == Some("ok"))
        .expect("the allowed login's span");
    let arguments = &attributes(allowed)["gen_ai.tool.call.arguments"];
    assert!(arguments.contains("[REDACTED]"), "{arguments}");
    for span in &spans {
        let shown = everything(span);
        for secret in secrets {
            assert!(!shown.contains(secret), "a span shows {secret}: {shown}");
        }
    }
    for text in &feedback {
        for secret in secrets {
            assert!(!text.contains(secret), "the model reads {secret}: {text}");
        }
    }
}

/// Tries: an approver asked about a rig call of a tool with a redacted parameter: the real value in
/// `request.arguments`. Guarantee: the approver sees the arguments as the audit log writes them, a
/// redacted one as `"[REDACTED]"`; the redacted value is never seen by an approver.
#[tokio::test]
async fn i21_an_approver_of_a_rig_call_never_sees_a_redacted_value() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let gate = gates::approved(Mode::FullAuto, move |request: &ApprovalRequest<'_>| {
        log.lock().unwrap().push(format!("{:?}", request.arguments));
        Approval::Approve
    });
    let done = run(
        &iatk(&gate),
        "iatk.vault",
        json!({"user": "ann", "pin": 613_613}),
    )
    .await
    .unwrap();
    assert_eq!(done.as_text(), Some("ann opened the vault"));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert!(
        !seen[0].contains("613613"),
        "the approver saw the pin: {}",
        seen[0]
    );
    assert!(seen[0].contains("[REDACTED]"), "{}", seen[0]);
}

/// Tries: a two-step approval's token in the spans and events the tracing sink emits for the
/// refused call (a refusal's message is `otel.status_description`): whoever reads the traces could
/// then approve. Guarantee 7 and the README: the token is for the operator, not in the message or
/// JSON of the refusal.
#[test]
fn i22_a_two_step_token_is_not_in_a_span() {
    let gate = gates::two_step_audited(Mode::FullAuto, TracingSink::new());
    let mut token = None;
    let spans = exported(|| {
        runtime().block_on(async {
            let error = registry()
                .call(&gate, "iatk.wipe", json!({"id": 2201}))
                .await
                .unwrap_err();
            token = error
                .denied()
                .and_then(Denied::approval_token)
                .map(str::to_owned);
            let _ = run(&iatk(&gate), "iatk.wipe", json!({"id": 2201})).await;
        });
    });
    let token = token.expect("a token");
    assert!(!spans.is_empty());
    for span in &spans {
        let shown = everything(span);
        assert!(!shown.contains(&token), "a span holds the token: {shown}");
    }
    assert_eq!(ran("wipe", 2201), 0);
}
