//! The approval channel from the operator's policy file: `out_of_band = [..]` and `out_of_band_at` keep
//! calls for an operator over a server with `Approvals::InBand`, as a tool declared `out_of_band` is
//! kept: no form, a request state sent with such a call refused, the call run only once an operator
//! approved it. `out_of_band_at` judges the call's effective risk, a replaced policy applies to the
//! next call (and to the answer of a form sent before it), and a principal's table to its gates alone.
#![cfg(feature = "mcp-http")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolgate::mcp::PendingApproval;
use toolgate::mcp::rmcp::model::CallToolResponse;
use toolgate::policy_file::LivePolicy;
use toolgate::{Gate, Mode, Risk, tool};

use crate::fixtures::mcp_in_band::{
    Client, answered_with, call, code_of, connect, in_band, rt, state_of,
};
use crate::fixtures::support::counted_tools;

static WIRED: AtomicUsize = AtomicUsize::new(0);
static SHELLED: AtomicUsize = AtomicUsize::new(0);
static PAID: AtomicUsize = AtomicUsize::new(0);

/// A command that asks for privileges is a critical write.
fn classify(command: &str) -> Risk {
    if command.starts_with("sudo ") {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

counted_tools! {
    /// Wire money.
    #[tool(risk = "HIGH_WRITE", domain = "oobp", callable)]
    fn wire(cents: u64) -> WIRED += 1;
    /// Run a shell command.
    #[tool(risk = "LOW_WRITE", domain = "oobp", callable, escalate = classify)]
    fn shell(command: String) -> SHELLED += 1;
}

/// Pay.
#[tool(risk = "HIGH_WRITE", domain = "oobp", callable)]
fn pay(cents: u64) -> Result<u64, toolgate::Denied> {
    PAID.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

/// A policy file at a path of its own, which `live` reloads.
struct File {
    path: std::path::PathBuf,
    live: LivePolicy,
}

impl File {
    fn new(name: &str, text: &str) -> File {
        let dir = std::env::temp_dir().join(format!("toolgate-oob-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ops.toml");
        std::fs::write(&path, text).unwrap();
        let live = LivePolicy::load(&path).unwrap_or_else(|e| panic!("{e}"));
        File { path, live }
    }

    /// Writes `text` and reloads it: every gate following it follows it from the next call.
    fn reload(&self, text: &str) {
        std::fs::write(&self.path, text).unwrap();
        assert!(self.live.reload("ops").unwrap_or_else(|e| panic!("{e}")));
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.path.parent().unwrap());
    }
}

type Pending = Arc<Mutex<Vec<PendingApproval>>>;

/// A client of an in-band server over a gate of `principal` following `live`, serving `tool` alone;
/// what the server hands its operator lands in the second value.
async fn serve(principal: &str, live: &LivePolicy, tool: &'static str) -> (Client, Gate, Pending) {
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .principal(principal)
        .policy(live.clone())
        .build()
        .unwrap();
    let pending: Pending = Arc::default();
    let held = pending.clone();
    let server = in_band(gate.clone())
        .only(move |m| m.id == tool)
        .on_pending(move |p| held.lock().unwrap().push(p.clone()));
    (connect(server).await, gate, pending)
}

fn approve() -> Value {
    json!({"decision": "approve"})
}

/// The last request of `tool` handed to the operator.
fn handed(pending: &Pending, tool: &str) -> PendingApproval {
    pending
        .lock()
        .unwrap()
        .iter()
        .rev()
        .find(|p| p.tool == tool)
        .cloned()
        .unwrap_or_else(|| panic!("no request of {tool} was handed to the operator"))
}

fn is_form(response: &CallToolResponse) -> bool {
    matches!(response, CallToolResponse::InputRequired(_))
}

/// o01 (1, 3). Broken: a HIGH_WRITE tool the policy names `out_of_band` is still sent a form, a form
/// sent before the policy named it still approves it, or a reload reaches only later connections.
/// Asserted: without the key a form, answered, runs the call; once the file is reloaded with the key,
/// the form sent before approves nothing, the next call gets no form and waits for the operator, a
/// request state sent with it is refused, and the operator's approval runs it once.
#[test]
fn o01_a_tool_the_policy_names_is_approved_by_an_operator_only_from_the_next_call() {
    rt().block_on(async {
        let file = File::new("o01", "format = 1\n");
        let (client, gate, pending) = serve("carol", &file.live, "oobp.wire").await;
        let first_args = json!({"cents": 700});

        let first = call(&client, "oobp.wire", first_args.clone(), None, None).await;
        assert!(is_form(&first), "no policy: a form: {first:?}");
        assert_eq!(
            answered_with(
                &client,
                "oobp.wire",
                &first_args,
                &state_of(&first),
                approve()
            )
            .await,
            "OK"
        );
        assert_eq!(WIRED.load(Ordering::SeqCst), 1);

        let args = json!({"cents": 701});

        // A form sent under the old policy, answered under the new one.
        let sent = state_of(&call(&client, "oobp.wire", args.clone(), None, None).await);
        file.reload("format = 1\n[defaults]\nout_of_band = [\"oobp.wire\"]\n");
        assert_eq!(
            answered_with(&client, "oobp.wire", &args, &sent, approve()).await,
            "APPROVAL_STATE_INVALID"
        );
        assert_eq!(WIRED.load(Ordering::SeqCst), 1, "wired on a form's answer");

        let kept = call(&client, "oobp.wire", args.clone(), None, None).await;
        assert_eq!(code_of(&kept), "APPROVAL_PENDING", "{kept:?}");
        assert_eq!(
            answered_with(&client, "oobp.wire", &args, &sent, approve()).await,
            "APPROVAL_STATE_INVALID"
        );
        assert_eq!(WIRED.load(Ordering::SeqCst), 1, "wired on a form's answer");

        let request = handed(&pending, "oobp.wire");
        assert_eq!(request.risk, Risk::HighWrite);
        gate.approve(&request.token).unwrap();
        let ran = call(&client, "oobp.wire", args.clone(), None, None).await;
        assert_eq!(code_of(&ran), "OK", "{ran:?}");
        assert_eq!(WIRED.load(Ordering::SeqCst), 2);
        let again = call(&client, "oobp.wire", args.clone(), None, None).await;
        assert!(
            !is_form(&again) && code_of(&again) != "OK",
            "approved once: {again:?}"
        );
        assert_eq!(WIRED.load(Ordering::SeqCst), 2);
    });
}

/// o02 (2). Broken: `out_of_band_at` compares the tool's declared risk, so a LOW_WRITE tool whose
/// arguments raise a call to HIGH_WRITE is sent a form under `out_of_band_at = "HIGH_WRITE"`, or a
/// form sent at HIGH_WRITE before the key was added still approves the call; or the key catches the
/// same tool's calls at LOW_WRITE. Asserted: the raised call gets no form and runs only once the
/// operator approved it; a form sent for it before the reload approves nothing; the tool's call at
/// LOW_WRITE (which the file's `ask` makes ask) gets a form that runs it.
#[test]
fn o02_out_of_band_at_judges_the_risk_a_call_is_judged_at() {
    rt().block_on(async {
        let asks = "format = 1\n[defaults]\nask = [\"oobp.shell\"]\n";
        let file = File::new("o02", asks);
        let (client, gate, pending) = serve("carol", &file.live, "oobp.shell").await;
        let (plain, raised) = (json!({"command": "ls"}), json!({"command": "sudo ls"}));

        // Before the key: the raised call's form, kept for after the reload.
        let before = call(&client, "oobp.shell", raised.clone(), None, None).await;
        let sent = state_of(&before);
        file.reload(&format!("{asks}out_of_band_at = \"HIGH_WRITE\"\n"));
        assert_eq!(
            answered_with(&client, "oobp.shell", &raised, &sent, approve()).await,
            "APPROVAL_STATE_INVALID"
        );
        assert_eq!(SHELLED.load(Ordering::SeqCst), 0, "ran on a form's answer");

        let kept = call(&client, "oobp.shell", raised.clone(), None, None).await;
        assert_eq!(code_of(&kept), "APPROVAL_PENDING", "{kept:?}");
        let request = handed(&pending, "oobp.shell");
        assert_eq!(
            (request.declared_risk, request.risk),
            (Risk::LowWrite, Risk::HighWrite)
        );

        let asked = call(&client, "oobp.shell", plain.clone(), None, None).await;
        assert!(is_form(&asked), "LOW_WRITE is below the key: {asked:?}");
        assert_eq!(
            answered_with(&client, "oobp.shell", &plain, &state_of(&asked), approve()).await,
            "OK"
        );
        assert_eq!(SHELLED.load(Ordering::SeqCst), 1);

        gate.approve(&request.token).unwrap();
        let ran = call(&client, "oobp.shell", raised.clone(), None, None).await;
        assert_eq!(code_of(&ran), "OK", "{ran:?}");
        assert_eq!(SHELLED.load(Ordering::SeqCst), 2);
    });
}

/// o03 (4). Broken: a principal's `out_of_band` keeps every principal's calls, or none. Asserted:
/// carol's call gets no form and waits for the operator; dave's, under the same file, gets a form.
#[test]
fn o03_a_principals_table_keeps_that_principals_calls_alone() {
    rt().block_on(async {
        let file = File::new(
            "o03",
            "format = 1\n[principals.carol]\nout_of_band = [\"oobp.pay\"]\n",
        );
        let (carol, carol_gate, pending) = serve("carol", &file.live, "oobp.pay").await;
        let (dave, _, _) = serve("dave", &file.live, "oobp.pay").await;
        let args = json!({"cents": 5});

        let kept = call(&carol, "oobp.pay", args.clone(), None, None).await;
        assert_eq!(code_of(&kept), "APPROVAL_PENDING", "{kept:?}");
        let asked = call(&dave, "oobp.pay", args.clone(), None, None).await;
        assert!(is_form(&asked), "dave's table keeps nothing: {asked:?}");
        // dave's form answers dave's call, and nothing of carol's.
        assert_ne!(
            answered_with(&carol, "oobp.pay", &args, &state_of(&asked), approve()).await,
            "OK"
        );
        assert_eq!(PAID.load(Ordering::SeqCst), 0);
        assert_eq!(
            answered_with(&dave, "oobp.pay", &args, &state_of(&asked), approve()).await,
            "OK"
        );
        assert_eq!(PAID.load(Ordering::SeqCst), 1);

        carol_gate
            .approve(&handed(&pending, "oobp.pay").token)
            .unwrap();
        let ran = call(&carol, "oobp.pay", args.clone(), None, None).await;
        assert_eq!(code_of(&ran), "OK", "{ran:?}");
        assert_eq!(PAID.load(Ordering::SeqCst), 2);
    });
}
