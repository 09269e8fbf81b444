//! Attacks on rules logged only and rules over history across a fleet (docs/policy_file.md, "Shadow
//! rules: logged only", "Rules over history", "Across a fleet"): a rule promoted with
//! `PolicyFile::promote` and applied by `toolgate policy apply` while a member's call waits for its
//! approver; a rule over history applied to a fleet, its history shared through the store.

use std::sync::Arc;
use std::sync::mpsc;

use crate::support::fleet::*;
use toolgate::audit::MemorySink;
use toolgate::policy_file::PolicyFile;
use toolgate::postgres::PostgresStore;
use toolgate::{Approval, ApprovalRequest};

/// Back up a database.
#[tool(risk = "LOW_WRITE", domain = "g25pg", callable)]
fn backup() -> Result<(), Denied> {
    Ok(())
}

/// Drop a table.
#[tool(risk = "LOW_WRITE", domain = "g25pg", callable)]
fn drop_table(table: String) -> Result<String, Denied> {
    Ok(table)
}

fn connect(url: &str, name: &str) -> Fleet {
    Fleet::builder()
        .timeout(Duration::from_millis(30_000))
        .poll_interval(Duration::from_millis(100))
        .connect(url, name)
        .expect("the fleet")
}

/// `text` written to `file` and applied to `fleet`; the digest of the policy.
fn apply(
    url: &str,
    scratch: &common::Scratch,
    fleet: &str,
    file: &str,
    policy_text: &str,
) -> String {
    let path = scratch.path(file);
    std::fs::write(&path, policy_text).unwrap();
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
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    PolicyFile::parse("x", policy_text)
        .unwrap()
        .digest()
        .to_owned()
}

fn wait_for_policy(gate: &Gate, digest: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = gate.policy_digest().as_deref().map(str::to_owned);
        if now.as_deref() == Some(digest) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the gate never followed {digest:?}: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn outcome<T>(result: Result<T, Denied>) -> String {
    match result {
        Ok(_) => "ran".to_owned(),
        Err(denied) => denied.code().as_str().to_owned(),
    }
}

type Held = Box<dyn Fn(&ApprovalRequest<'_>) -> Approval + Send + Sync + 'static>;

/// A sync approver that says it was asked, then answers as the test says.
fn held_approver() -> (mpsc::Receiver<()>, mpsc::Sender<Approval>, Held) {
    let (asked_tx, asked) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<Approval>();
    let asked_tx = Mutex::new(asked_tx);
    let go_rx = Mutex::new(go_rx);
    let approver = move |_: &ApprovalRequest<'_>| {
        let _ = asked_tx.lock().unwrap().send(());
        go_rx
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or(Approval::Reject("the test never answered".into()))
    };
    (asked, go, Box::new(approver))
}

/// The place (`line:column`) at the end of what a record's `rule_in_shadow` names.
fn place_named(rule: &str) -> String {
    let inside = rule.rsplit_once('(').unwrap().1.trim_end_matches(')');
    let mut parts = inside.rsplitn(3, ':');
    let column = parts.next().unwrap();
    let line = parts.next().unwrap();
    format!("{line}:{column}")
}

/// A rule logged only in a fleet's file, then promoted and applied while a member's call waits for
/// its approver: before, no member's call is changed and each records what the rule would do; after,
/// the waiting call is refused at its commit point and every member enforces the rule.
#[test]
fn a25_f01_a_promoted_rule_reaches_every_member_and_the_call_waiting_for_its_approver() {
    let _serial = common::serial();
    let url = database("a25_f01");
    let scratch = common::Scratch::new("a25-f01");
    let (one, two) = (connect(&url, "g25"), connect(&url, "g25"));
    let (asked, go, approver) = held_approver();
    let sink_one = MemorySink::new();
    let sink_two = MemorySink::new();
    let waiting_gate = one
        .join(
            Gate::builder()
                .mode(Mode::FullAuto)
                .principal("alice")
                .approver(approver)
                .audit(sink_one.clone()),
        )
        .expect("joined");
    let other_gate = two
        .join(
            Gate::builder()
                .mode(Mode::FullAuto)
                .principal("bob")
                .approver(|_: &ApprovalRequest<'_>| Approval::Approve)
                .audit(sink_two.clone()),
        )
        .expect("joined");
    let file = "format = 1\n[defaults]\nask_at = \"LOW_WRITE\"\n[shadow.defaults]\ndeny = [\"g25pg.drop_table\"]\n";
    let digest = apply(&url, &scratch, "g25", "ops.toml", file);
    wait_for_policy(&waiting_gate, &digest);
    wait_for_policy(&other_gate, &digest);

    // Logged only: the other member's call runs and names the rule.
    assert_eq!(outcome(other_gate.run(|| drop_table("t".into()))), "ran");
    let named = sink_two
        .records()
        .into_iter()
        .rev()
        .find(|r| r.tool == "g25pg.drop_table" && r.stage == Stage::Enter)
        .and_then(|r| r.rule_in_shadow)
        .expect("the shadow rule was not recorded");
    assert!(named.starts_with("refused (DENY_LISTED)"), "{named}");
    assert_eq!(outcome(other_gate.run(backup)), "ran");
    assert!(
        sink_two
            .records()
            .iter()
            .filter(|r| r.tool == "g25pg.backup")
            .all(|r| r.rule_in_shadow.is_none())
    );

    // A call waits for its approver; the rule is promoted and applied meanwhile.
    let waiting = {
        let gate = waiting_gate.clone();
        std::thread::spawn(move || outcome(gate.run(|| drop_table("users".into()))))
    };
    asked.recv_timeout(Duration::from_secs(30)).unwrap();
    let promoted = PolicyFile::promote("ops.toml", file, &place_named(&named))
        .unwrap_or_else(|e| panic!("{named}: {e}"));
    let digest = apply(&url, &scratch, "g25", "ops.toml", &promoted.text);
    wait_for_policy(&waiting_gate, &digest);
    wait_for_policy(&other_gate, &digest);
    go.send(Approval::Approve).unwrap();
    assert_eq!(waiting.join().unwrap(), "DENY_LISTED");
    assert_eq!(
        outcome(other_gate.run(|| drop_table("t".into()))),
        "DENY_LISTED"
    );
    assert_eq!(outcome(other_gate.run(backup)), "ran");
}

/// A rule over history applied to a fleet reaches each member, and the history it reads is the one
/// the members share through the store: a backup on one member lets a drop run on the other (the
/// same principal), and no backup leaves another principal's drop refused.
#[test]
fn a25_f02_a_rule_over_history_applied_to_a_fleet_reads_one_history_across_its_members() {
    let _serial = common::serial();
    let url = database("a25_f02");
    let scratch = common::Scratch::new("a25-f02");
    let store = Arc::new(
        PostgresStore::builder()
            .timeout(Duration::from_secs(15))
            .connect(&url)
            .expect("the store"),
    );
    let (one, two) = (connect(&url, "g25h"), connect(&url, "g25h"));
    let join = |fleet: &Fleet, principal: &str| {
        fleet
            .join(
                Gate::builder()
                    .mode(Mode::FullAuto)
                    .principal(principal)
                    .budget_store_shared(store.clone()),
            )
            .expect("joined")
    };
    let (alice_one, alice_two, bob_two) =
        (join(&one, "alice"), join(&two, "alice"), join(&two, "bob"));
    let file = "format = 1\n[[defaults.history]]\ntool = \"g25pg.drop_table\"\nafter = \"g25pg.backup\"\nwithin = \"1h\"\n";
    let digest = apply(&url, &scratch, "g25h", "ops.toml", file);
    for gate in [&alice_one, &alice_two, &bob_two] {
        wait_for_policy(gate, &digest);
    }
    for gate in [&alice_one, &alice_two, &bob_two] {
        assert_eq!(
            outcome(gate.run(|| drop_table("t".into()))),
            "HISTORY_REFUSED"
        );
    }
    assert_eq!(outcome(alice_one.run(backup)), "ran");
    assert_eq!(outcome(alice_two.run(|| drop_table("t".into()))), "ran");
    assert_eq!(
        outcome(bob_two.run(|| drop_table("t".into()))),
        "HISTORY_REFUSED"
    );

    // The rule moved to alice's table and widened to every table: the history it reads is the same.
    let moved = "format = 1\n[[principals.alice.history]]\ntool = \"g25pg.drop_*\"\nafter = \"g25pg.backup\"\nwithin = \"2h\"\n";
    let digest = apply(&url, &scratch, "g25h", "moved.toml", moved);
    for gate in [&alice_one, &alice_two, &bob_two] {
        wait_for_policy(gate, &digest);
    }
    assert_eq!(outcome(alice_one.run(|| drop_table("t".into()))), "ran");
    assert_eq!(outcome(bob_two.run(|| drop_table("t".into()))), "ran");
}
