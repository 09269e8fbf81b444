//! The operator's policy file: checked with line and column against the linked tools, folded into the
//! gate (ceiling, deny, ask, argument rules, taint), replaced live, and unable to widen anything.

use super::following;
use std::sync::Arc;

use serde_json::{Value, json};
use toolgate::audit::{MemorySink, Stage};
use toolgate::policy_file::{Direction, LivePolicy, PolicyFile};
use toolgate::{AllowAllApprover, Denied, Gate, Mode, registry, tool};

/// read.
#[tool(risk = "READ_ONLY", domain = "pf", callable)]
fn read(host: String) -> Result<String, Denied> {
    Ok(host)
}

/// shell.
#[tool(risk = "LOW_WRITE", domain = "pf", callable)]
fn shell(host: String, hosts: Vec<String>) -> Result<usize, Denied> {
    Ok(host.len() + hosts.len())
}

/// refund.
#[tool(risk = "HIGH_WRITE", domain = "pf", callable)]
fn refund(amount: u32, currency: String) -> Result<u32, Denied> {
    let _ = currency;
    Ok(amount)
}

/// secret.
#[tool(risk = "LOW_WRITE", domain = "pf", callable, redact = [token])]
fn secret(token: String) -> Result<(), Denied> {
    let _ = token;
    Ok(())
}

/// direct.
#[tool(risk = "LOW_WRITE", domain = "pf")]
fn direct(n: u32) -> Result<u32, Denied> {
    Ok(n)
}

fn policy(text: &str) -> PolicyFile {
    PolicyFile::parse("ops.toml", text).unwrap_or_else(|e| panic!("{e}"))
}

/// Every error of `text`, as `line:column: message`.
fn errors(text: &str) -> Vec<String> {
    match PolicyFile::parse("ops.toml", text) {
        Ok(_) => panic!("the file checks:\n{text}"),
        Err(errors) => errors
            .0
            .iter()
            .map(|e| format!("{}:{}: {}", e.line, e.column, e.message))
            .collect(),
    }
}

/// What a call by name gives: `Ok` when the body ran, else the refusal's code.
fn call(gate: &Gate, id: &str, arguments: Value) -> Result<Value, String> {
    registry()
        .call(gate, id, arguments)
        .now()
        .expect("a sync tool answers at once")
        .map_err(|e| e.code().to_owned())
}

fn gate(live: &LivePolicy, mode: Mode) -> Gate {
    following(mode, live, |b| b.principal("alice").agent("bot"))
}

#[test]
fn each_error_is_reported_at_its_line_and_column() {
    let text = r#"format = 1

[defaults]
ceiling = "FULL_AUTOO"
deny = ["pf.nothing_here"]
ask_at = "LOW"
taint = "ask"
colour = "red"
"#;
    assert_eq!(
        errors(text),
        vec![
            "8:1: unknown key `colour`; this table holds `ceiling`, `deny`, `ask`, `ask_at`, `out_of_band`, `out_of_band_at`, `taint`, `arguments`, `budgets`, `history`, `deny_resources`, `deny_prompts`, `record_resources`, `record_prompts`"
        ],
    );
    // Every unknown key at once, wherever it is, with the key meant where one is close.
    let text = r#"format = 1
fromat = 2

[defaults]
celing = "SHADOW"

[[principals.alice.arguments]]
tool = "pf.read"
parameter = "host"
refuse = ["prod-*"]
maxx = 3

[[agents.bot.budgets]]
calls = 3
per = "1h"
window = "1d"
"#;
    assert_eq!(
        errors(text),
        vec![
            "2:1: unknown key `fromat`; did you mean `format`?",
            "5:1: unknown key `celing`; did you mean `ceiling`?",
            "11:1: unknown key `maxx`; did you mean `max`?",
            "16:1: unknown key `window`; this table holds `tool`, `risk`, `agent`, `calls`, `per`",
        ],
    );
    let text = r#"format = 1

[defaults]
ceiling = "FULL_AUTOO"
deny = ["pf.nothing_here"]
ask_at = "LOW"
taint = "ask"
"#;
    let found = errors(text);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(
        found[0].starts_with("4:11: `ceiling`: \"FULL_AUTOO\" is not a mode")
            && found[0].ends_with("did you mean `FULL_AUTO`?"),
        "{}",
        found[0]
    );
    assert!(
        found[1].starts_with("5:9: `deny` pattern \"pf.nothing_here\" matches no linked tool"),
        "{}",
        found[1]
    );
    assert!(
        found[2].starts_with("6:10: `ask_at`: \"LOW\" is not a risk"),
        "{}",
        found[2]
    );
    assert!(
        found[3].starts_with("7:9: taint is \"refuse\" or absent"),
        "{}",
        found[3]
    );
}

#[test]
fn argument_rules_are_checked_against_the_tools_parameters() {
    let found = errors(
        r#"format = 1
[[defaults.arguments]]
tool = "pf.shel"
parameter = "host"
refuse = ["prod-*"]

[[defaults.arguments]]
tool = "pf.shell"
parameter = "hots"
refuse = ["prod-*"]

[[defaults.arguments]]
tool = "pf.refund"
parameter = "amount"
refuse = ["1*"]

[[defaults.arguments]]
tool = "pf.secret"
parameter = "token"
refuse = ["x*"]

[[defaults.arguments]]
tool = "pf.direct"
parameter = "n"
max = 3

[[defaults.arguments]]
tool = "pf.refund"
parameter = "amount"
min = 10
max = 5

[[defaults.arguments]]
tool = "pf.refund"
parameter = "currency"
refuse = ["x"]
max = 5
"#,
    );
    assert_eq!(found.len(), 7, "{found:#?}");
    assert!(
        found[0].starts_with("3:8: no linked tool has the id \"pf.shel\"")
            && found[0].contains("did you mean `pf.shell`?"),
        "{}",
        found[0]
    );
    assert!(
        found[1]
            .starts_with("9:13: tool `pf.shell`: it has no parameter `hots` (it has host, hosts)"),
        "{}",
        found[1]
    );
    assert!(found[2].starts_with("15:11: tool `pf.refund`'s parameter `amount` is integer: a rule of text patterns cannot judge it"), "{}", found[2]);
    assert!(
        found[3].starts_with("19:13: tool `pf.secret` redacts `token`"),
        "{}",
        found[3]
    );
    assert!(
        found[4].starts_with(
            "24:13: tool `pf.direct`: its parameters are known only for a `callable` tool"
        ),
        "{}",
        found[4]
    );
    assert!(
        found[5].starts_with("30:7: `min` (10) is above `max` (5)"),
        "{}",
        found[5]
    );
    assert!(
        found[6].starts_with("35:13: an argument rule says exactly one of"),
        "{}",
        found[6]
    );
}

#[test]
fn dead_and_shadowed_rules_are_errors() {
    let found = errors(
        r#"format = 1
[defaults]
ceiling = "ADVISORY"
ask_at = "LOW_WRITE"
deny = ["pf.shell", "pf.shell"]
ask = ["pf.shell"]

[[defaults.arguments]]
tool = "pf.shell"
parameter = "host"
refuse = ["prod-*"]

[principals.alice]
ceiling = "FULL_AUTO"
ask_at = "HIGH_WRITE"
"#,
    );
    assert_eq!(found.len(), 5, "{found:#?}");
    assert!(
        found[0].starts_with("5:21: `pf.shell` is listed twice in `deny`"),
        "{}",
        found[0]
    );
    assert!(
        found[1].starts_with("6:8: `ask` \"pf.shell\" is dead"),
        "{}",
        found[1]
    );
    assert!(
        found[2].starts_with("8:1: this argument rule is dead: `pf.shell` is denied"),
        "{}",
        found[2]
    );
    assert!(found[3].starts_with("14:11: this ceiling (FULL_AUTO) does nothing: [defaults] holds every gate at ADVISORY (line 3)"), "{}", found[3]);
    assert!(
        found[4].starts_with("15:10: this ask_at (HIGH_WRITE) does nothing"),
        "{}",
        found[4]
    );
}

#[test]
fn malformed_huge_and_unknown_format_files_are_refused() {
    let found = errors("format = 1\n[defaults\n");
    assert!(found[0].starts_with("2:10:"), "{found:?}");
    assert_eq!(
        errors("format = 2\n")[0]
            .split(':')
            .take(2)
            .collect::<Vec<_>>(),
        ["1", "10"]
    );
    let huge = format!(
        "format = 1\n# {}\n",
        "x".repeat(toolgate::policy_file::MAX_POLICY_BYTES)
    );
    assert!(errors(&huge)[0].contains("a policy file is at most"));
    let missing = PolicyFile::load("no/such/policy.toml").unwrap_err();
    assert!(
        missing
            .to_string()
            .starts_with("no/such/policy.toml:1:1: cannot read the file"),
        "{missing}"
    );
}

#[test]
fn a_gate_follows_the_rules_of_its_principal_and_agent() {
    let live = LivePolicy::new(policy(
        r#"format = 1
[defaults]
ceiling = "FULL_AUTO"
deny = ["pf.secret"]

[[defaults.arguments]]
tool = "pf.shell"
parameter = "host"
refuse = ["prod-*", "*.prod.*"]

[principals.alice]
ceiling = "PARTIAL_AUTO"

[principals.bob]
ceiling = "SHADOW"

[agents.bot]
ask = ["pf.read"]

[[agents.bot.arguments]]
tool = "pf.refund"
parameter = "amount"
max = 50
"#,
    ));
    let alice = gate(&live, Mode::FullAuto);
    assert_eq!(alice.mode(), Mode::PartialAuto, "alice's ceiling");
    assert_eq!(
        alice.policy_digest().as_deref(),
        Some(live.current().unwrap().digest())
    );
    // The agent's `ask` with no approver: refused, and told which rule asks.
    let denied = call(&alice, "pf.read", json!({"host": "a"})).unwrap_err();
    assert_eq!(denied, "APPROVAL_REQUIRED");
    assert_eq!(
        call(&alice, "pf.secret", json!({"token": "t"})).unwrap_err(),
        "DENY_LISTED"
    );
    assert_eq!(
        call(&alice, "pf.shell", json!({"host": "db1", "hosts": []})).unwrap(),
        json!(3)
    );
    for host in ["prod-db", "db.prod.eu"] {
        assert_eq!(
            call(&alice, "pf.shell", json!({"host": host, "hosts": []})).unwrap_err(),
            "ARGUMENT_REFUSED",
            "{host}"
        );
    }
    // HIGH_WRITE runs in FULL_AUTO alone, above alice's ceiling, whatever the amount.
    assert_eq!(
        call(&alice, "pf.refund", json!({"amount": 1, "currency": "EUR"})).unwrap_err(),
        "MODE_NOT_ALLOWED"
    );

    // Another principal, another agent: bob is held at SHADOW; no agent label, no `ask`.
    let bob = following(Mode::FullAuto, &live, |b| b.principal("bob"));
    assert_eq!(bob.mode(), Mode::Shadow);
    assert!(call(&bob, "pf.read", json!({"host": "a"})).is_ok());

    // A gate that can ask: the agent's `ask` asks, and the amount rule refuses before anyone is asked.
    let carol = following(Mode::FullAuto, &live, |b| {
        b.agent("bot").approver(AllowAllApprover)
    });
    assert!(call(&carol, "pf.read", json!({"host": "a"})).is_ok());
    assert_eq!(
        call(
            &carol,
            "pf.refund",
            json!({"amount": 20, "currency": "EUR"})
        )
        .unwrap(),
        json!(20)
    );
    assert_eq!(
        call(
            &carol,
            "pf.refund",
            json!({"amount": 51, "currency": "EUR"})
        )
        .unwrap_err(),
        "ARGUMENT_REFUSED"
    );
    let explained = live
        .current()
        .unwrap()
        .explain(
            None,
            Some("bot"),
            Mode::FullAuto,
            "pf.refund",
            &json!({"amount": 51}),
        )
        .unwrap();
    assert_eq!(explained.decision, "refused (ARGUMENT_REFUSED)");
    assert!(
        explained
            .rule
            .starts_with("rule ops.toml:20:1: `amount` 51 is outside ..=50"),
        "{}",
        explained.rule
    );
}

#[test]
fn a_direct_call_is_narrowed_as_a_call_by_name() {
    let live = LivePolicy::new(policy("format = 1\n[defaults]\ndeny = [\"pf.direct\"]\n"));
    let gate = gate(&live, Mode::FullAuto);
    let denied = gate.run(|| direct(1)).unwrap_err();
    assert_eq!(denied.code(), "DENY_LISTED");
    assert!(
        denied.to_string().contains("pf.direct (ops.toml:3:9)"),
        "{denied}"
    );
}

#[test]
fn a_replaced_policy_reaches_running_gates_and_records_say_which_policy_decided() {
    let first = policy("format = 1\n[defaults]\nceiling = \"PARTIAL_AUTO\"\n");
    let first_digest = first.digest().to_owned();
    let live = LivePolicy::new(first);
    let sink = Arc::new(MemorySink::new());
    let gate = following(Mode::FullAuto, &live, |b| b.audit_shared(sink.clone()));
    assert!(call(&gate, "pf.shell", json!({"host": "a", "hosts": []})).is_ok());
    let second = policy("format = 1\n[defaults]\nceiling = \"ADVISORY\"\ndeny = [\"pf.read\"]\n");
    let second_digest = second.digest().to_owned();
    assert!(live.replace(second, "ops"));
    assert_eq!(gate.mode(), Mode::Advisory);
    assert_eq!(
        call(&gate, "pf.read", json!({"host": "a"})).unwrap_err(),
        "DENY_LISTED"
    );
    // Back to the first: what the second took away is given back, never more than the code allows.
    assert!(live.replace(
        policy("format = 1\n[defaults]\nceiling = \"PARTIAL_AUTO\"\n"),
        "ops"
    ));
    assert_eq!(gate.mode(), Mode::PartialAuto);
    assert!(call(&gate, "pf.read", json!({"host": "a"})).is_ok());
    assert!(
        !live.replace(
            policy("format = 1\n[defaults]\nceiling = \"PARTIAL_AUTO\"\n"),
            "ops"
        ),
        "the same text changes nothing"
    );

    let records = sink.records();
    let stages: Vec<(Stage, Option<&str>)> = records
        .iter()
        .map(|r| (r.stage, r.policy_digest.as_deref()))
        .collect();
    assert_eq!(
        stages,
        [
            (Stage::Enter, Some(&*first_digest)),
            (Stage::Exit, Some(&*first_digest)),
            (Stage::PolicyChanged, Some(&*second_digest)),
            (Stage::Refused, Some(&*second_digest)),
            (Stage::PolicyChanged, Some(&*first_digest)),
            (Stage::Enter, Some(&*first_digest)),
            (Stage::Exit, Some(&*first_digest)),
        ]
    );
    let changed = &records[2];
    assert_eq!(changed.by.as_deref(), Some("ops"));
    assert_eq!(
        changed.message.as_deref(),
        Some(&*format!(
            "policy {second_digest} replaces policy {first_digest}, by ops"
        ))
    );
}

#[test]
fn a_file_that_does_not_check_is_refused_and_the_old_policy_kept() {
    let dir = std::env::temp_dir().join(format!("toolgate-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ops.toml");
    std::fs::write(&path, "format = 1\n[defaults]\nceiling = \"ADVISORY\"\n").unwrap();
    let live = LivePolicy::load(&path).unwrap();
    let sink = Arc::new(MemorySink::new());
    let gate = following(Mode::FullAuto, &live, |b| b.audit_shared(sink.clone()));
    let kept = live.current().unwrap().digest().to_owned();

    // A widening attempt in the only shape a file has: a key that does not exist.
    std::fs::write(
        &path,
        "format = 1\n[defaults]\nceiling = \"ADVISORY\"\nallow = [\"pf.read\"]\n",
    )
    .unwrap();
    let errors = live.reload("ops").unwrap_err();
    assert!(
        errors.to_string().contains(":4:1: unknown key `allow`"),
        "{errors}"
    );
    assert_eq!(live.current().unwrap().digest(), kept);
    assert_eq!(gate.policy_digest().as_deref(), Some(&*kept));
    assert_eq!(gate.mode(), Mode::Advisory);
    let refused = sink
        .records()
        .into_iter()
        .find(|r| r.stage == Stage::PolicyRefused)
        .expect("a policy_refused record");
    assert!(
        refused
            .message
            .as_deref()
            .unwrap()
            .contains(&format!("policy {kept} kept")),
        "{refused:?}"
    );

    // The watch takes the next good text.
    let watch = live.watch(std::time::Duration::from_millis(10)).unwrap();
    std::fs::write(&path, "format = 1\n[defaults]\nceiling = \"SHADOW\"\n").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while gate.mode() != Mode::Shadow {
        assert!(
            std::time::Instant::now() < deadline,
            "the watch never took the new file"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    drop(watch);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn diff_says_what_narrows_and_what_widens() {
    let old =
        policy("format = 1\n[defaults]\nceiling = \"PARTIAL_AUTO\"\ndeny = [\"pf.secret\"]\n");
    let new = policy(
        "format = 1\n[defaults]\nceiling = \"ADVISORY\"\nask = [\"pf.read\"]\n[principals.alice]\ntaint = \"refuse\"\n",
    );
    let diff = old.diff(&new);
    let shown: Vec<(Direction, &str, &str)> = diff
        .changes
        .iter()
        .map(|c| (c.direction, c.scope.as_str(), c.what.as_str()))
        .collect();
    assert_eq!(
        shown,
        [
            (
                Direction::Narrows,
                "[defaults]",
                "ceiling ADVISORY (was PARTIAL_AUTO), line 3"
            ),
            (
                Direction::Narrows,
                "[defaults]",
                "ask \"pf.read\" added, line 4"
            ),
            (
                Direction::Narrows,
                "[principals.\"alice\"]",
                "taint = \"refuse\" added, line 6"
            ),
            (
                Direction::Widens,
                "[defaults]",
                "deny \"pf.secret\" removed (old line 4)"
            ),
        ]
    );
    assert!(diff.widens());
    assert!(!new.diff(&new).widens());
}

/// What a call came to, ordered from most to least allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Came {
    Ran,
    Refused,
}

/// The policies the exhaustive test draws from: every combination of one choice per rule kind.
fn policies() -> Vec<String> {
    let ceilings = [
        "",
        "ceiling = \"SHADOW\"\n",
        "ceiling = \"ADVISORY\"\n",
        "ceiling = \"PARTIAL_AUTO\"\n",
        "ceiling = \"FULL_AUTO\"\n",
    ];
    let denies = ["", "deny = [\"pf.shell\"]\n", "deny = [\"pf.re*\"]\n"];
    let asks = ["", "ask = [\"pf.read\"]\n"];
    let ask_ats = [
        "",
        "ask_at = \"READ_ONLY\"\n",
        "ask_at = \"LOW_WRITE\"\n",
        "ask_at = \"HIGH_WRITE\"\n",
    ];
    let taints = ["", "taint = \"refuse\"\n"];
    let arguments = [
        "",
        "[[defaults.arguments]]\ntool = \"pf.read\"\nparameter = \"host\"\nrefuse = [\"prod*\"]\n",
        "[[defaults.arguments]]\ntool = \"pf.refund\"\nparameter = \"amount\"\nmin = 5\nmax = 50\n",
        "[[defaults.arguments]]\ntool = \"pf.refund\"\nparameter = \"currency\"\none_of = [\"EUR\"]\n",
        "[[defaults.budgets]]\nrisk = \"READ_ONLY\"\ncalls = 1\nper = \"1h\"\n",
    ];
    let mut all = Vec::new();
    for c in ceilings {
        for d in denies {
            for a in asks {
                for r in ask_ats {
                    for t in taints {
                        for g in arguments {
                            all.push(format!("format = 1\n[defaults]\n{c}{d}{a}{r}{t}{g}"));
                        }
                    }
                }
            }
        }
    }
    all
}

#[test]
fn no_policy_file_widens_any_call_in_any_mode() {
    let calls = [
        ("pf.read", json!({"host": "db"})),
        ("pf.read", json!({"host": "prod-db"})),
        ("pf.shell", json!({"host": "db", "hosts": ["a"]})),
        ("pf.refund", json!({"amount": 10, "currency": "EUR"})),
        ("pf.refund", json!({"amount": 500, "currency": "USD"})),
    ];
    let mut checked = 0;
    let mut narrowed = 0;
    for text in policies() {
        let file = match PolicyFile::parse("ops.toml", &text) {
            Ok(file) => file,
            // Some combinations are refused (an argument rule on a denied tool is dead): nothing to
            // widen there.
            Err(_) => continue,
        };
        let live = LivePolicy::new(file);
        for mode in Mode::ALL {
            for approves in [false, true] {
                let build = |with_policy: bool| {
                    let mut builder = Gate::builder().mode(mode);
                    if approves {
                        builder = builder.approver(AllowAllApprover);
                    }
                    if with_policy {
                        builder = builder.policy(live.clone());
                    }
                    builder.build().unwrap()
                };
                let (code, narrowed_gate) = (build(false), build(true));
                for (id, arguments) in &calls {
                    let came = |gate: &Gate| match call(gate, id, arguments.clone()) {
                        Ok(_) => Came::Ran,
                        Err(_) => Came::Refused,
                    };
                    let (without, with) = (came(&code), came(&narrowed_gate));
                    assert!(
                        with >= without,
                        "the policy widened `{id}` {arguments} in {mode} (approver: {approves}):\n{text}"
                    );
                    checked += 1;
                    narrowed += usize::from(with > without);
                }
            }
        }
    }
    // The domain is large enough that the policies do narrow, or the test would prove nothing.
    assert!(checked > 20_000, "{checked}");
    assert!(narrowed > checked / 4, "{narrowed} of {checked}");
}

/// `tools/list` follows the policy of the gate's principal, and `list_changed` is sent when a
/// replacement changes what that principal sees, not when it changes another principal's rules.
#[cfg(feature = "mcp-http")]
#[test]
fn mcp_lists_follow_the_policy_and_hear_of_its_changes() {
    use crate::fixtures::mcp_in_band::{rt, serve_notified};
    use std::time::Duration;
    use toolgate::mcp::ToolgateServer;

    rt().block_on(async {
        let live = LivePolicy::new(policy(
            "format = 1\n[principals.bob]\ndeny = [\"pf.read\"]\n",
        ));
        let alice = following(Mode::FullAuto, &live, |b| b.principal("alice"));
        let server = ToolgateServer::new(alice).mode_poll(Duration::from_millis(20));
        let (client, mut rx) = serve_notified(server).await;
        let listed =
            |tools: &[toolgate::mcp::rmcp::model::Tool]| tools.iter().any(|t| t.name == "pf.read");
        assert!(
            listed(&client.list_all_tools().await.unwrap()),
            "bob's deny is not alice's"
        );

        // Another principal's rule changes: alice's list does not, and she is not told it did.
        live.replace(
            policy("format = 1\n[principals.bob]\ndeny = [\"pf.read\", \"pf.shell\"]\n"),
            "ops",
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(300), rx.recv())
                .await
                .is_err(),
            "list_changed for a list that did not change"
        );

        live.replace(
            policy("format = 1\n[principals.alice]\ndeny = [\"pf.read\"]\n"),
            "ops",
        );
        let told = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert!(
            matches!(told, Ok(Some(()))),
            "no list_changed after the policy hid a tool"
        );
        assert!(!listed(&client.list_all_tools().await.unwrap()));
    });
}

/// A principal's table caps its calls; a new policy that keeps the budget keeps its count (a
/// reload never opens a fresh window), and another principal's gate is not counted.
#[test]
fn a_principals_budget_caps_it_and_a_new_policy_keeps_the_count() {
    let capped =
        "format = 1\n[[principals.alice.budgets]]\ntool = \"pf.refund\"\ncalls = 2\nper = \"1h\"\n";
    let live = LivePolicy::new(policy(capped));
    let build = |principal: &str| {
        following(Mode::FullAuto, &live, |b| {
            b.principal(principal).approver(AllowAllApprover)
        })
    };
    let (alice, bob) = (build("alice"), build("bob"));
    let refund = |gate: &Gate| call(gate, "pf.refund", json!({"amount": 1, "currency": "EUR"}));
    assert!(refund(&alice).is_ok() && refund(&alice).is_ok());
    let denied = registry()
        .call(&alice, "pf.refund", json!({"amount": 1, "currency": "EUR"}))
        .now()
        .unwrap()
        .unwrap_err();
    assert_eq!(denied.code(), "BUDGET_EXHAUSTED");
    assert!(
        denied
            .to_string()
            .contains("the operator's policy [principals.\"alice\"] (ops.toml:2:1)"),
        "{denied}"
    );
    assert!(
        refund(&bob).is_ok() && refund(&bob).is_ok() && refund(&bob).is_ok(),
        "bob is not alice"
    );

    live.replace(
        policy(&format!("{capped}[defaults]\ndeny = [\"pf.secret\"]\n")),
        "ops",
    );
    assert_eq!(
        refund(&alice).unwrap_err(),
        "BUDGET_EXHAUSTED",
        "a new policy opened a fresh window"
    );

    let found = errors(
        "format = 1\n[[defaults.budgets]]\ntool = \"pf.refund\"\nrisk = \"LOW_WRITE\"\ncalls = 0\nper = \"1y\"\n",
    );
    assert!(
        found[0].starts_with("5:9: a budget counts exactly one of"),
        "{found:?}"
    );
    let found =
        errors("format = 1\n[[defaults.budgets]]\nrisk = \"LOW_WRITE\"\ncalls = 0\nper = \"1y\"\n");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("4:9: `calls` is 1 to 100000, not 0"),
        "{found:?}"
    );
}

/// A policy's lock fails a test when the policy changes, listing what widens first; a lock that is
/// missing says how to make one; the same rules in another text change nothing the lock reports.
#[test]
fn the_policy_lock_lists_what_a_change_widens_first() {
    use toolgate::policy_file::{PolicyLockError, check_policy_lock};
    let dir = std::env::temp_dir().join(format!("toolgate-policy-lock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (file, lock) = (dir.join("ops.toml"), dir.join("ops.lock.toml"));
    std::fs::write(&file, "format = 1\n[defaults]\ndeny = [\"pf.secret\"]\n").unwrap();
    let missing = check_policy_lock(&file, &lock).unwrap_err();
    assert!(
        matches!(missing, PolicyLockError::Missing { .. }),
        "{missing}"
    );
    assert!(
        missing.to_string().contains("TOOLGATE_LOCKFILE=overwrite"),
        "{missing}"
    );

    std::fs::copy(&file, &lock).unwrap();
    check_policy_lock(&file, &lock).unwrap();
    std::fs::write(&file, "format = 1\n[defaults]\nask = [\"pf.read\"]\n").unwrap();
    let changed = check_policy_lock(&file, &lock).unwrap_err().to_string();
    let lines: Vec<&str> = changed.lines().skip(1).collect();
    assert_eq!(
        lines,
        [
            "WIDENS   [defaults]  deny \"pf.secret\" removed (old line 3)",
            "narrows  [defaults]  ask \"pf.read\" added, line 3",
        ],
        "{changed}"
    );
    std::fs::write(
        &file,
        "format = 1\n# reviewed\n[defaults]\ndeny = [\"pf.secret\"]\n",
    )
    .unwrap();
    let text_only = check_policy_lock(&file, &lock).unwrap_err().to_string();
    assert!(text_only.contains("(no rule changed)"), "{text_only}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An application's `policy test` and `policy replay` commands, as the deploy desk example gives them:
/// their reports and exit codes, on a log written here with the desk's tool ids.
#[test]
fn the_applications_policy_commands_test_and_replay() {
    use toolgate::audit::{AuditRecord, AuditSink, Decision, JsonlSink};
    let desk = crate::common::example("cli", "clap,policy-file");
    let dir = crate::common::Scratch::new("policy-test-replay");
    let none = dir.path("none.toml");
    let strict = dir.path("strict.toml");
    std::fs::write(&none, "format = 1\n").unwrap();
    std::fs::write(
        &strict,
        "format = 1\n[defaults]\ndeny = [\"deploy.delete\"]\n",
    )
    .unwrap();
    let cases = dir.path("cases.toml");
    std::fs::write(
        &cases,
        "[[case]]\nname = \"deletes are denied\"\ntool = \"deploy.delete\"\nexpect = \"DENY_LISTED\"\n\n\
         [[case]]\nname = \"restarts ask\"\ntool = \"deploy.restart\"\nexpect = \"asks\"\n",
    )
    .unwrap();
    let bad_cases = dir.path("bad.toml");
    std::fs::write(
        &bad_cases,
        "[[case]]\ntool = \"deploy.delet\"\nexpect = \"refused\"\n",
    )
    .unwrap();
    let log = dir.path("audit.jsonl");
    {
        let digest = PolicyFile::load(&none).unwrap().digest().to_owned();
        let sink = JsonlSink::open(&log).unwrap();
        for (call, tool) in [(1, "deploy.status"), (2, "deploy.delete")] {
            let mut record = AuditRecord::new(Stage::Enter, tool, Mode::FullAuto, 1);
            record.call = call;
            record.principal = Some("alice".into());
            record.decision = Some(Decision::Approved);
            record.policy_digest = Some(digest.clone());
            sink.record(&record).unwrap();
        }
    }
    let run = |args: &[&str]| crate::common::run_program(&desk, args);
    let path = |p: &std::path::Path| p.display().to_string();

    let (code, text) = run(&["policy", "test", &path(&strict), "--cases", &path(&cases)]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("ok      deletes are denied"), "{text}");
    assert!(text.contains("FAILED  restarts ask"), "{text}");
    assert!(text.contains("expected: asks"), "{text}");
    assert!(text.contains("decided:  allowed in FULL_AUTO"), "{text}");
    assert!(text.contains("2 cases: 1 passed, 1 failed"), "{text}");
    let (code, text) = run(&[
        "policy",
        "test",
        &path(&strict),
        "--cases",
        &path(&bad_cases),
    ]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains(":2:8: no linked tool has the id `deploy.delet`"),
        "{text}"
    );

    let replay = |extra: &[&str]| {
        let mut args = vec![
            "policy".to_owned(),
            "replay".to_owned(),
            path(&strict),
            "--log".to_owned(),
            path(&log),
            "--in-force".to_owned(),
            path(&none),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&args)
    };
    let (code, text) = replay(&[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.starts_with("the log verifies: 2 records"), "{text}");
    assert!(
        text.contains("deploy.delete  alice      asks -> refused  1      2"),
        "{text}"
    );
    let (code, text) = replay(&["--tool", "deploy.status"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("1 calls replayed, 1 decided under both policies, 0 flip"),
        "{text}"
    );
    let (code, text) = replay(&["--json"]);
    assert_eq!(code, Some(1), "{text}");
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["flips"][0]["to"], "refused", "{text}");
    assert_eq!(
        json["flips"][0]["records"].as_array().unwrap().len(),
        1,
        "{text}"
    );
    let (code, text) = replay(&["--since", "yesterday"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("`yesterday` is not a UTC date or time"),
        "{text}"
    );
    let (code, text) = replay(&["--decision", "maybe"]);
    assert_eq!(code, Some(2), "{text}");

    // A log edited after it was written: said first, exit 3.
    let edited = std::fs::read_to_string(&log)
        .unwrap()
        .replacen("alice", "alicf", 1);
    std::fs::write(&log, edited).unwrap();
    let (code, text) = replay(&[]);
    assert_eq!(code, Some(3), "{text}");
    assert!(
        text.starts_with("THE LOG DOES NOT VERIFY: line 1"),
        "{text}"
    );
}

/// An application's `policy check` / `explain` / `diff` commands (`toolgate::cli::PolicyCommand`), and
/// its `--policy FILE`, as the deploy desk example (`examples/cli.rs`) gives them to its operators.
#[test]
fn the_applications_policy_commands_check_explain_and_diff() {
    let desk = crate::common::example("cli", "clap,policy-file");
    let dir = std::env::temp_dir().join(format!("toolgate-policy-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (good, bad, stricter) = (
        dir.join("ops.toml"),
        dir.join("bad.toml"),
        dir.join("stricter.toml"),
    );
    std::fs::write(
        &good,
        "format = 1\n[defaults]\ndeny = [\"deploy.delete\"]\n",
    )
    .unwrap();
    std::fs::write(&bad, "format = 1\n[defaults]\ndeny = [\"deploy.delet\"]\n").unwrap();
    std::fs::write(
        &stricter,
        "format = 1\n[defaults]\nceiling = \"ADVISORY\"\n",
    )
    .unwrap();
    let run = |args: &[&str]| crate::common::run_program(&desk, args);
    let path = |p: &std::path::Path| p.display().to_string();

    let (code, text) = run(&["policy", "check", &path(&good)]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("checks (policy "), "{text}");
    let (code, text) = run(&["policy", "check", &path(&bad)]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains(":3:9: `deny` pattern \"deploy.delet\" matches no linked tool"),
        "{text}"
    );
    assert!(text.contains("did you mean `deploy.delete`?"), "{text}");

    let (code, text) = run(&[
        "policy",
        "explain",
        &path(&good),
        "--tool",
        "deploy.delete",
        "--args",
        "{\"service\":\"web\"}",
    ]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.starts_with("decision: refused (DENY_LISTED)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("by:       deploy.delete ({}:3:9)", path(&good))),
        "{text}"
    );

    // Replacing the deny with a ceiling widens (the delete runs in FULL_AUTO again) and narrows.
    let (code, text) = run(&["policy", "diff", &path(&good), &path(&stricter)]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("narrows  [defaults]  ceiling ADVISORY added, line 3"),
        "{text}"
    );
    assert!(
        text.contains("WIDENS   [defaults]  deny \"deploy.delete\" removed (old line 3)"),
        "{text}"
    );

    let (code, text) = run(&[
        "--policy",
        &path(&good),
        "--mode",
        "full_auto",
        "--yes",
        "delete",
        "web",
    ]);
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("refused DENY_LISTED"), "{text}");
    let (code, text) = run(&["--policy", &path(&bad), "status", "web"]);
    assert_eq!(
        code,
        Some(2),
        "a file that does not check runs nothing: {text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `toolgate policy diff OLD NEW`, which links none of the application's tools: the files' shape is
/// checked, each change is shown narrowing or WIDENING, and the exit status says whether one widens.
#[cfg(feature = "postgres")]
#[test]
fn the_toolgate_command_diffs_two_files_without_the_tools() {
    let dir = std::env::temp_dir().join(format!("toolgate-policy-diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (old, new, bad) = (
        dir.join("old.toml"),
        dir.join("new.toml"),
        dir.join("bad.toml"),
    );
    std::fs::write(
        &old,
        "format = 1\n[principals.\"a\\nWIDENS\"]\ndeny = [\"any.tool\"]\n",
    )
    .unwrap();
    std::fs::write(
        &new,
        "format = 1\n[principals.\"a\\nWIDENS\"]\ndeny = [\"any.tool\", \"other.*\"]\n",
    )
    .unwrap();
    std::fs::write(&bad, "format = 1\n[defaults]\nceiling = \"LOUD\"\n").unwrap();
    let run = |a: &std::path::Path, b: &std::path::Path| {
        let (a, b) = (a.display().to_string(), b.display().to_string());
        crate::common::run_program(
            std::path::Path::new(env!("CARGO_BIN_EXE_toolgate")),
            &["policy", "diff", &a, &b],
        )
    };
    let (code, text) = run(&old, &new);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(
        text.lines().count(),
        1,
        "a principal's name cannot forge a line: {text}"
    );
    assert!(
        text.starts_with("narrows  [principals.\"a\\\\nWIDENS\"]  deny \"other.*\" added, line 3"),
        "{text}"
    );
    let (code, text) = run(&new, &old);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.starts_with("WIDENS "), "{text}");
    let (code, text) = run(&old, &bad);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("bad.toml:3:11: `ceiling`: \"LOUD\" is not a mode"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A rate, compared by value.
#[tool(risk = "READ_ONLY", domain = "pf", callable)]
fn rate(rate: f64) -> Result<f64, Denied> {
    Ok(rate)
}

/// `one_of` compares numbers by value: `40` allows `40.0` and `40`, and a refusal shows the number
/// as a number.
#[test]
fn one_of_compares_numbers_by_value() {
    let live = LivePolicy::new(policy(
        "format = 1\n[[defaults.arguments]]\ntool = \"pf.rate\"\nparameter = \"rate\"\none_of = [40, 2.5]\n",
    ));
    let gate = following(Mode::FullAuto, &live, |b| b);
    for allowed in [json!(40), json!(40.0), json!(2.5)] {
        assert!(
            call(&gate, "pf.rate", json!({ "rate": allowed })).is_ok(),
            "{allowed}"
        );
    }
    let denied = registry()
        .call(&gate, "pf.rate", json!({"rate": 41.5}))
        .now()
        .unwrap()
        .unwrap_err();
    assert_eq!(denied.code(), "ARGUMENT_REFUSED");
    assert!(
        denied
            .to_string()
            .contains("`rate` 41.5 is not one of the allowed values"),
        "{denied}"
    );
}

/// `text` as a TOML quoted key, every character beyond printable ASCII as its `\U` escape.
fn toml_key(text: &str) -> String {
    let mut key = String::from("\"");
    for c in text.chars() {
        match c {
            '"' | '\\' => key.push_str(&format!("\\{c}")),
            ' '..='~' => key.push(c),
            _ => key.push_str(&format!("\\U{:08X}", u32::from(c))),
        }
    }
    key.push('"');
    key
}

/// Names that read alike (SECURITY.md): a gate whose principal or agent reads as a table's name is
/// narrowed by that table, for every look-alike of the shared corpus, and a gate of a name that reads
/// otherwise is not; a file naming two tables that read alike does not check.
#[test]
fn a_table_is_found_by_its_name_s_reading_and_two_tables_that_read_alike_are_refused() {
    use crate::common::lookalikes::{DISTINCT, LOOK_ALIKES};
    for (name, alikes) in LOOK_ALIKES {
        let key = toml_key(name);
        let live = LivePolicy::new(policy(&format!(
            "format = 1\n[principals.{key}]\nceiling = \"SHADOW\"\n[agents.{key}]\nceiling = \"ADVISORY\"\n"
        )));
        for alike in alikes.iter().chain([name]) {
            let principal = following(Mode::FullAuto, &live, |b| b.principal(*alike));
            assert_eq!(
                principal.mode(),
                Mode::Shadow,
                "principal {alike:?} of {name:?}"
            );
            let agent = following(Mode::FullAuto, &live, |b| b.agent(*alike));
            assert_eq!(agent.mode(), Mode::Advisory, "agent {alike:?} of {name:?}");
            for table in ["principals", "agents"] {
                let text = format!(
                    "format = 1\n[{table}.{key}]\nceiling = \"SHADOW\"\n[{table}.{}]\nceiling = \"SHADOW\"\n",
                    toml_key(alike)
                );
                if alike == name {
                    continue;
                }
                let found = errors(&text);
                assert!(
                    found.len() == 1 && found[0].contains("reads as"),
                    "{table} {name:?} and {alike:?}: {found:#?}"
                );
            }
        }
        for other in DISTINCT
            .iter()
            .filter(|other| !toolgate::names::same(other, name))
        {
            let gate = following(Mode::FullAuto, &live, |b| b.principal(*other).agent(*other));
            assert_eq!(gate.mode(), Mode::FullAuto, "{other:?} is not {name:?}");
        }
    }
}

/// The child of the next test: a process following a watched file whose next text does not check.
#[test]
fn refused_by_the_watch_child() {
    let Some(dir) = std::env::var_os("TG_REFUSED_BY_THE_WATCH") else {
        return;
    };
    let path = std::path::Path::new(&dir).join("ops.toml");
    std::fs::write(&path, "format = 1\n[defaults]\nceiling = \"ADVISORY\"\n").unwrap();
    let live = LivePolicy::load(&path).unwrap();
    let sink = Arc::new(MemorySink::new());
    let _gate = following(Mode::FullAuto, &live, |b| b.audit_shared(sink.clone()));
    let watch = live.watch(std::time::Duration::from_millis(10)).unwrap();
    std::fs::write(&path, "format = 1\n[defaults]\nceling = \"ADVISORY\"\n").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !sink
        .records()
        .iter()
        .any(|r| r.stage == Stage::PolicyRefused)
    {
        assert!(std::time::Instant::now() < deadline, "never refused");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    drop(watch);
}

/// Whoever saves a file that does not check reads it where a server's operator looks: stderr, in a
/// process that set no `tracing` subscriber (the audit log's `policy_refused` record aside).
#[test]
fn a_file_the_watch_refuses_is_said_on_stderr() {
    let dir = std::env::temp_dir().join(format!("toolgate-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &format!(
                "{}::refused_by_the_watch_child",
                module_path!().split_once("::").unwrap().1
            ),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TG_REFUSED_BY_THE_WATCH", &dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("1 passed"), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("toolgate: the policy file ")
            && stderr.contains("ops.toml was refused; the policy in force (")
            && stderr.contains("unknown key `celing`"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every policy file the documentation shows (the guide's TOML blocks that start with `format`, and
/// the module's) has the shape of one: its keys, modes, risks and patterns exist.
#[test]
fn every_policy_file_the_documentation_shows_has_the_shape_of_one() {
    let guide = include_str!("../../../docs/policy_file.md");
    let module = include_str!("../../../runtime/src/policy_file/mod.rs");
    let module: String = module
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| format!("{}\n", l.strip_prefix(' ').unwrap_or(l)))
        .collect();
    let mut shown = 0;
    for (name, text) in [
        ("docs/policy_file.md", guide),
        ("policy_file/mod.rs", &module),
    ] {
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.trim() != "```toml" {
                continue;
            }
            let block: String = lines
                .by_ref()
                .take_while(|l| l.trim() != "```")
                .map(|l| format!("{l}\n"))
                .collect();
            if !block.starts_with("format") {
                continue;
            }
            shown += 1;
            PolicyFile::check_shape(name, &block)
                .unwrap_or_else(|e| panic!("{name}: {e}\n{block}"));
        }
    }
    assert!(shown >= 3, "{shown} policy files shown");
}

/// The application's `policy promote`: the rule logged only at a place turned on in the file, the
/// rest as written; printed instead with `--dry-run`; refused, the file untouched, for a place of no
/// shadow rule.
#[test]
fn the_applications_policy_promote_turns_a_shadow_rule_on_in_the_file() {
    let desk = crate::common::example("cli", "clap,policy-file");
    let dir = crate::common::Scratch::new("policy-promote");
    let file = dir.path("ops.toml");
    let text = "format = 1\n# reviewed 2026-12-01\n[defaults]\ndeny = [\"deploy.delete\"]\n\n[shadow.defaults]\ndeny = [\"deploy.rollback\"]   # would anything break?\n";
    std::fs::write(&file, text).unwrap();
    let run = |args: &[&str]| crate::common::run_program(&desk, args);
    let name = file.display().to_string();

    let (code, printed) = run(&["policy", "promote", &name, "7:9", "--dry-run"]);
    assert_eq!(code, Some(0), "{printed}");
    assert!(
        printed.contains("deny = [\"deploy.delete\", \"deploy.rollback\"]"),
        "{printed}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        text,
        "--dry-run wrote"
    );

    let (code, said) = run(&["policy", "promote", &name, "6:1"]);
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("is the place of no rule of a [shadow] table"),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);

    let (code, said) = run(&["policy", "promote", &name, &format!("{name}:7:9")]);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains(&format!(
            "turned on: deny \"deploy.rollback\" of [shadow.defaults] ({name}:7:9), now in [defaults]"
        )),
        "{said}"
    );
    assert!(said.contains("narrows  [defaults]"), "{said}");
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        written,
        "format = 1\n# reviewed 2026-12-01\n[defaults]\ndeny = [\"deploy.delete\", \"deploy.rollback\"]\n"
    );
    let (code, said) = run(&["policy", "check", &name]);
    assert_eq!(code, Some(0), "{said}");
}
