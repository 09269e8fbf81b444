//! Outside attacks where a fleet's operator policy (guarantee 18, applied with `toolgate policy
//! apply`) meets the other stateful features of a joined process: an approver that is still thinking,
//! a two-step approval in the PostgreSQL store, the fleet's own lowering, the gate's own `lower`, the
//! taint latch, a budget shared through PostgreSQL, and a member killed and restarted while the policy
//! changed. Each test states the guarantee it attacks and asserts what SECURITY.md promises.

use std::sync::mpsc;

use crate::support::fleet::*;
use crate::support::{approve, code, token};
use toolgate::policy_file::PolicyFile;
use toolgate::postgres::PostgresStore;
use toolgate::{Approval, ApprovalRequest};

// ---------------------------------------------------------------------------------------------------
// Tools of these attacks, each counting its runs.

static WIRES: AtomicU64 = AtomicU64::new(0);
static PUSHES: AtomicU64 = AtomicU64::new(0);

/// Wire money: needs an approval in FULL_AUTO.
#[tool(risk = "HIGH_WRITE", domain = "fpx")]
fn wire(cents: u64) -> Result<u64, Denied> {
    WIRES.fetch_add(1, Ordering::SeqCst);
    Ok(cents)
}

/// Push a change: runs unasked in FULL_AUTO and PARTIAL_AUTO.
#[tool(risk = "LOW_WRITE", domain = "fpx")]
fn push(n: u64) -> Result<u64, Denied> {
    PUSHES.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// Read a page an agent does not control: untrusted output.
#[tool(risk = "READ_ONLY", domain = "fpx", untrusted_output)]
fn browse(url: String) -> Result<String, Denied> {
    Ok(url)
}

// ---------------------------------------------------------------------------------------------------
// What the attacks share.

/// A fleet handle of this process that reads its fleet every 100 ms.
fn connect(url: &str, name: &str) -> Fleet {
    Fleet::builder()
        .timeout(Duration::from_millis(30_000))
        .poll_interval(Duration::from_millis(100))
        .connect(url, name)
        .expect("the fleet")
}

/// `text` written to `file` in `scratch` and applied to `fleet` by `toolgate policy apply`, which must
/// succeed; the digest of the policy.
fn apply(url: &str, scratch: &common::Scratch, fleet: &str, file: &str, text: &str) -> String {
    let path = scratch.path(file);
    std::fs::write(&path, text).unwrap();
    let output = toolgate(&[
        "policy",
        "apply",
        "--store",
        url,
        "--fleet",
        fleet,
        "--by",
        "ana",
        path.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text_of(&output));
    if text.is_empty() {
        return String::new();
    }
    PolicyFile::parse("x", text).unwrap().digest().to_owned()
}

fn text_of(output: &std::process::Output) -> String {
    text(output)
}

/// Waits (10 s at most) until `gate` follows the policy of `digest` (`""`: none).
#[track_caller]
fn wait_for_policy(gate: &Gate, digest: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = gate.policy_digest().as_deref().map(str::to_owned);
        if now.as_deref().unwrap_or("") == digest {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the gate never followed {digest:?}: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A sync approver that says it was asked, then waits for the test's answer (20 s at most, then
/// rejects).
type Approver = Box<dyn Fn(&ApprovalRequest<'_>) -> Approval + Send + Sync + 'static>;

fn held_approver() -> (mpsc::Receiver<()>, mpsc::Sender<Approval>, Approver) {
    let (asked_tx, asked) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<Approval>();
    let asked_tx = Mutex::new(asked_tx);
    let go_rx = Mutex::new(go_rx);
    let approver = move |_: &ApprovalRequest<'_>| {
        let _ = asked_tx.lock().unwrap().send(());
        go_rx
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or(Approval::Reject("the test never answered".into()))
    };
    (asked, go, Box::new(approver))
}

/// The code a call was refused with, or `"ran"`.
fn outcome<T>(result: Result<T, Denied>) -> String {
    match result {
        Ok(_) => "ran".to_owned(),
        Err(denied) => denied.code().as_str().to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------------
// The attacks.

/// Guarantee 18: "a replacement reaches every following gate before `replace` returns, a call decided
/// under the old file is decided again at its commit point". Attack: a member's HIGH_WRITE call waits
/// at its approver; meanwhile `toolgate policy apply` gives the fleet a file denying the tool, and the
/// member follows it; then the approver approves. Asserts: the call is refused `DENY_LISTED` and its
/// body never runs.
#[test]
fn a18_60_a_fleet_deny_applied_while_a_members_approver_thinks_refuses_the_approved_call() {
    let _serial = common::serial();
    let url = database("a18_60");
    let scratch = common::Scratch::new("a18-60");
    let fleet = connect(&url, "a60");
    let (asked, go, approver) = held_approver();
    let gate = fleet
        .join(Gate::builder().mode(Mode::FullAuto).approver(approver))
        .expect("joined");
    let before = WIRES.load(Ordering::SeqCst);
    let waiting = {
        let gate = gate.clone();
        std::thread::spawn(move || outcome(gate.run(|| wire(60))))
    };
    asked.recv_timeout(Duration::from_secs(20)).unwrap();
    let digest = apply(
        &url,
        &scratch,
        "a60",
        "deny.toml",
        "format = 1\n[defaults]\ndeny = [\"fpx.wire\"]\n",
    );
    wait_for_policy(&gate, &digest);
    go.send(Approval::Approve).unwrap();
    assert_eq!(waiting.join().unwrap(), "DENY_LISTED");
    assert_eq!(WIRES.load(Ordering::SeqCst), before, "the denied body ran");
}

/// Guarantee 18 with guarantee 4: a ceiling of a file only lowers, and "a call decided under the old
/// file is decided again at its commit point". Attack: a member's HIGH_WRITE call waits at its
/// approver; the fleet's file sets the ceiling to ADVISORY; the approver then approves. Asserts: the
/// call does not run (refused by the lowered mode's check).
#[test]
fn a18_61_a_fleet_ceiling_applied_while_a_members_approver_thinks_refuses_the_approved_call() {
    let _serial = common::serial();
    let url = database("a18_61");
    let scratch = common::Scratch::new("a18-61");
    let fleet = connect(&url, "a61");
    let (asked, go, approver) = held_approver();
    let gate = fleet
        .join(Gate::builder().mode(Mode::FullAuto).approver(approver))
        .expect("joined");
    let before = WIRES.load(Ordering::SeqCst);
    let waiting = {
        let gate = gate.clone();
        std::thread::spawn(move || outcome(gate.run(|| wire(61))))
    };
    asked.recv_timeout(Duration::from_secs(20)).unwrap();
    let digest = apply(
        &url,
        &scratch,
        "a61",
        "ceiling.toml",
        "format = 1\n[defaults]\nceiling = \"ADVISORY\"\n",
    );
    wait_for_policy(&gate, &digest);
    go.send(Approval::Approve).unwrap();
    let came = waiting.join().unwrap();
    assert_ne!(came, "ran", "an approved call ran above the file's ceiling");
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
}

/// Guarantee 18 (a file can "make the latch refuse") with guarantee 14 (no write runs unasked after
/// untrusted input). Attack: the member's session is tainted; its write waits at the approver, asked
/// in the tainted session; the fleet's file sets `taint = "refuse"`; the approver approves. Asserts:
/// the write is refused `TAINTED_SESSION` at its commit point and does not run.
#[test]
fn a18_62_a_fleets_taint_refuse_applied_while_a_tainted_write_is_approved_refuses_it() {
    let _serial = common::serial();
    let url = database("a18_62");
    let scratch = common::Scratch::new("a18-62");
    let fleet = connect(&url, "a62");
    let (asked, go, approver) = held_approver();
    let gate = fleet
        .join(Gate::builder().mode(Mode::FullAuto).approver(approver))
        .expect("joined");
    gate.run(|| browse("https://evil.example".into())).unwrap();
    let before = PUSHES.load(Ordering::SeqCst);
    let waiting = {
        let gate = gate.clone();
        std::thread::spawn(move || outcome(gate.run(|| push(62))))
    };
    asked.recv_timeout(Duration::from_secs(20)).unwrap();
    let digest = apply(
        &url,
        &scratch,
        "a62",
        "taint.toml",
        "format = 1\n[defaults]\ntaint = \"refuse\"\n",
    );
    wait_for_policy(&gate, &digest);
    go.send(Approval::Approve).unwrap();
    assert_eq!(waiting.join().unwrap(), "TAINTED_SESSION");
    assert_eq!(PUSHES.load(Ordering::SeqCst), before, "a tainted write ran");
}

/// Guarantee 18 ("a ceiling follows the file down and up, but never above the gate's own mode or its
/// fleet's") with guarantee 4 (`Gate::lower` only lowers) and 11 (nothing raises a running gate).
/// Attack: the fleet is lowered to PARTIAL_AUTO and one gate lowered by its application to ADVISORY;
/// the fleet's file then sets the ceiling to SHADOW, and is removed. Asserts: each gate comes back to
/// no more than its own and its fleet's mode, a LOW_WRITE refused on the gate lowered to ADVISORY and
/// a HIGH_WRITE refused on the other.
#[test]
fn a18_63_a_fleet_ceiling_lifted_raises_no_gate_above_its_own_lowering_or_the_fleets() {
    let _serial = common::serial();
    let url = database("a18_63");
    let scratch = common::Scratch::new("a18-63");
    let fleet = connect(&url, "a63");
    let own = fleet
        .join(
            Gate::builder()
                .mode(Mode::FullAuto)
                .approver(|_: &ApprovalRequest<'_>| Approval::Approve),
        )
        .expect("joined");
    let other = fleet
        .join(
            Gate::builder()
                .mode(Mode::FullAuto)
                .approver(|_: &ApprovalRequest<'_>| Approval::Approve),
        )
        .expect("joined");
    fleet::lower(
        &url,
        "toolgate",
        "a63",
        Mode::PartialAuto,
        "ana",
        "incident",
    )
    .unwrap();
    own.lower(Mode::Advisory).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while other.mode() != Mode::PartialAuto {
        assert!(Instant::now() < deadline, "the fleet's lowering never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    let digest = apply(
        &url,
        &scratch,
        "a63",
        "shadow.toml",
        "format = 1\n[defaults]\nceiling = \"SHADOW\"\n",
    );
    wait_for_policy(&own, &digest);
    wait_for_policy(&other, &digest);
    apply(&url, &scratch, "a63", "empty.toml", "");
    wait_for_policy(&own, "");
    wait_for_policy(&other, "");
    assert!(own.mode() <= Mode::Advisory, "{}", own.mode());
    assert!(other.mode() <= Mode::PartialAuto, "{}", other.mode());
    let pushes = PUSHES.load(Ordering::SeqCst);
    let wires = WIRES.load(Ordering::SeqCst);
    assert_ne!(outcome(own.run(|| push(63))), "ran");
    assert_ne!(outcome(other.run(|| wire(63))), "ran");
    assert_eq!(PUSHES.load(Ordering::SeqCst), pushes);
    assert_eq!(WIRES.load(Ordering::SeqCst), wires);
}

/// Guarantee 3 ("a deny rule refuses its tools in every mode ... no mode and no approval lifts it") and
/// 7 ("a two-step approval runs one call"), across a fleet's policy changes. Attack: the fleet's file
/// asks for `fpx.push`; the member's call files a request in the PostgreSQL store and the operator
/// approves it; the fleet's file then denies the tool; the agent retries; the first file comes back
/// and the agent retries twice more. Asserts: the retry under the deny is refused `DENY_LISTED`
/// without spending the approval, and of the two later retries at most one runs.
#[test]
fn a18_65_a_stored_approval_lifts_no_fleet_deny_and_runs_once_after_it() {
    let _serial = common::serial();
    let url = database("a18_65");
    let scratch = common::Scratch::new("a18-65");
    let fleet = connect(&url, "a65");
    let gate = fleet
        .join(
            Gate::builder()
                .mode(Mode::FullAuto)
                .approval_store(PostgresStore::connect(&url).unwrap()),
        )
        .expect("joined");
    let ask = "format = 1\n[defaults]\nask = [\"fpx.push\"]\n";
    let first = apply(&url, &scratch, "a65", "ask.toml", ask);
    wait_for_policy(&gate, &first);
    let before = PUSHES.load(Ordering::SeqCst);
    let asked = token(gate.run(|| push(65)));
    gate.answer(&asked, approve("ops")).unwrap();
    let deny = apply(
        &url,
        &scratch,
        "a65",
        "deny.toml",
        "format = 1\n[defaults]\ndeny = [\"fpx.push\"]\n",
    );
    wait_for_policy(&gate, &deny);
    assert_eq!(outcome(gate.run(|| push(65))), "DENY_LISTED");
    assert_eq!(
        PUSHES.load(Ordering::SeqCst),
        before,
        "an approval lifted a deny"
    );
    let back = apply(&url, &scratch, "a65", "ask-again.toml", ask);
    wait_for_policy(&gate, &back);
    let retries = [
        outcome(gate.run(|| push(65))),
        outcome(gate.run(|| push(65))),
    ];
    let ran = PUSHES.load(Ordering::SeqCst) - before;
    assert!(ran <= 1, "one approval ran {ran} calls: {retries:?}");
}

/// Guarantee 13 ("a budget is never exceeded ... a call takes a unit of each budget that covers it ...
/// keeps them only at the commit point") with guarantee 18 (the file's budgets; "a call decided under
/// the old file is decided again at its commit point"). Attack: a member's HIGH_WRITE call waits at
/// its approver; the fleet's file adds a budget of one `fpx.wire` an hour, counted in the shared
/// PostgreSQL budget store; the call is approved and runs; a second call follows. Asserts: at most one
/// call passes the budget within its window (the second is refused `BUDGET_EXHAUSTED`).
#[test]
fn a13_60_a_fleet_budget_applied_while_a_call_is_approved_counts_that_call() {
    let _serial = common::serial();
    let url = database("a13_60");
    let scratch = common::Scratch::new("a13-60");
    let fleet = connect(&url, "a13");
    let store = std::sync::Arc::new(PostgresStore::connect(&url).unwrap());
    let (asked, go, approver) = held_approver();
    let gate = fleet
        .join(
            Gate::builder()
                .mode(Mode::FullAuto)
                .budget_store_shared(store.clone())
                .approver(approver),
        )
        .expect("joined");
    let before = WIRES.load(Ordering::SeqCst);
    let waiting = {
        let gate = gate.clone();
        std::thread::spawn(move || outcome(gate.run(|| wire(1))))
    };
    asked.recv_timeout(Duration::from_secs(20)).unwrap();
    let digest = apply(
        &url,
        &scratch,
        "a13",
        "budget.toml",
        "format = 1\n[[defaults.budgets]]\ntool = \"fpx.wire\"\ncalls = 1\nper = \"1h\"\n",
    );
    wait_for_policy(&gate, &digest);
    go.send(Approval::Approve).unwrap();
    let first = waiting.join().unwrap();
    let mut later = Vec::new();
    for n in 2..4 {
        let gate = gate.clone();
        let answer = std::thread::spawn(move || outcome(gate.run(|| wire(n))));
        if asked.recv_timeout(Duration::from_secs(2)).is_ok() {
            go.send(Approval::Approve).unwrap();
        }
        later.push(answer.join().unwrap());
    }
    let ran = WIRES.load(Ordering::SeqCst) - before;
    assert!(
        ran <= 1,
        "a budget of one ran {ran} calls in its window ({first}, then {later:?})"
    );
}

/// Guarantee 18 across a restart: "every joined process reads it with the fleet's mode ... and narrows
/// its gates by it". Attack: a member runs `fleet.work`; it is killed with SIGKILL; while it is down the
/// fleet's file denies the tool; the member is started again. Asserts: the restarted member's first
/// call is refused `DENY_LISTED` (no call runs before the process follows the fleet's file).
#[test]
fn a18_64_a_member_restarted_after_its_fleets_policy_changed_runs_nothing_it_denies() {
    let _serial = common::serial();
    let url = database("a18_64");
    let scratch = common::Scratch::new("a18-64");
    let stop = scratch.path("stop");
    let spawn = || {
        Proc::spawn(
            "policy_member",
            &url,
            &[
                (FLEET, "a64".to_owned()),
                (STOP_FILE, stop.display().to_string()),
            ],
        )
    };
    let mut first = spawn();
    first.expect("ready");
    assert_eq!(first.expect("came "), "ran");
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(first);
    let digest = apply(
        &url,
        &scratch,
        "a64",
        "deny.toml",
        "format = 1\n[defaults]\ndeny = [\"fleet.work\"]\n",
    );
    let mut again = spawn();
    again.expect("ready");
    assert_eq!(
        again.expect("came "),
        "DENY_LISTED",
        "the restarted member ran a call its fleet's file denies"
    );
    assert_eq!(again.expect("policy "), digest);
    std::fs::write(&stop, "").unwrap();
    again.wait();
}

/// Guarantee 18 with guarantee 15 ("what is stored is honoured for its maker alone"): a fleet's file
/// reaches every principal's gate, and a principal's table narrows that principal alone. Attack: two
/// gates of one process, alice's and bob's, joined to one fleet and sharing one PostgreSQL store; bob's
/// request is approved; the fleet's file then denies the tool to bob only. Asserts: bob's approved
/// call does not run, alice's identical call is not served by bob's approval, and alice's gate does not
/// follow bob's table (her call is asked for, not denied).
#[test]
fn a15_60_a_principals_fleet_deny_applied_after_his_approval_runs_nothing_of_his_or_hers() {
    let _serial = common::serial();
    let url = database("a15_60");
    let scratch = common::Scratch::new("a15-60");
    let fleet = connect(&url, "a15");
    let gate_of = |principal: &str| {
        fleet
            .join(
                Gate::builder()
                    .mode(Mode::FullAuto)
                    .principal(principal)
                    .approval_store(PostgresStore::connect(&url).unwrap()),
            )
            .expect("joined")
    };
    let (alice, bob) = (gate_of("alice"), gate_of("bob"));
    let before = WIRES.load(Ordering::SeqCst);
    let bobs = token(bob.run(|| wire(150)));
    bob.answer(&bobs, approve("ops")).unwrap();
    let digest = apply(
        &url,
        &scratch,
        "a15",
        "bob.toml",
        "format = 1\n[principals.bob]\ndeny = [\"fpx.wire\"]\n",
    );
    wait_for_policy(&alice, &digest);
    wait_for_policy(&bob, &digest);
    assert_eq!(code(bob.run(|| wire(150))), DenialCode::DenyListed);
    assert_eq!(
        code(alice.run(|| wire(150))),
        DenialCode::ApprovalPending,
        "alice's call was not asked for on its own"
    );
    assert_eq!(WIRES.load(Ordering::SeqCst), before);
}

/// Guarantee 13 ("In any window of a budget's length, at most its N calls pass it") with guarantee 15
/// and the file's limits ("A budget of a principal's table counts that principal's calls"). Attack: the
/// fleet's file gives alice one `fpx.push` an hour; two gates of alice (two handles on the fleet, as
/// two workers) and one of bob share a PostgreSQL budget store; bob pushes three times first, then
/// each of alice's gates pushes twice. Asserts: bob's calls take nothing of alice's budget (her first
/// call runs), and of alice's four calls exactly one runs.
#[test]
fn a13_61_a_principals_fleet_budget_holds_across_her_gates_and_is_not_spent_by_another() {
    let _serial = common::serial();
    let url = database("a13_61");
    let scratch = common::Scratch::new("a13-61");
    let store = std::sync::Arc::new(PostgresStore::connect(&url).unwrap());
    let fleets = [connect(&url, "a61b"), connect(&url, "a61b")];
    let gate_of = |fleet: &Fleet, principal: &str| {
        fleet
            .join(
                Gate::builder()
                    .mode(Mode::FullAuto)
                    .principal(principal)
                    .agent("desk")
                    .budget_store_shared(store.clone()),
            )
            .expect("joined")
    };
    let alices = [gate_of(&fleets[0], "alice"), gate_of(&fleets[1], "alice")];
    let bob = gate_of(&fleets[0], "bob");
    let digest = apply(
        &url,
        &scratch,
        "a61b",
        "alice.toml",
        "format = 1\n[[principals.alice.budgets]]\ntool = \"fpx.push\"\ncalls = 1\nper = \"1h\"\n",
    );
    for gate in alices.iter().chain([&bob]) {
        wait_for_policy(gate, &digest);
    }
    for n in 0..3 {
        assert_eq!(outcome(bob.run(|| push(n))), "ran", "bob has no budget");
    }
    let mut hers = Vec::new();
    for gate in alices.iter().chain(alices.iter()) {
        hers.push(outcome(gate.run(|| push(161))));
    }
    assert_eq!(hers[0], "ran", "bob's calls spent alice's budget: {hers:?}");
    assert_eq!(
        hers.iter().filter(|h| *h == "ran").count(),
        1,
        "alice's budget of one: {hers:?}"
    );
}
