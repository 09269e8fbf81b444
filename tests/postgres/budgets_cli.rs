//! The `toolgate budgets` command against budgets that real gates count in PostgreSQL: `list` shows
//! what each window holds (expired calls not counted), `reset` clears only what it selects and is
//! refused without a selection, the record names who reset what and `toolgate audit verify` names the
//! records, text written by agents is shown escaped, a reset racing calls in other processes leaves
//! every budget counting exactly the calls after it, and the operators' role resets only through the
//! recording function.

use crate::support::mail::*;
use crate::support::{
    HIDDEN, assert_shown_escaped, hidden_text, out, text, toolgate, toolgate_exits,
};
use toolgate::postgres::budgets::{self, BudgetFilter, BudgetKey, ResetError};

/// `toolgate budgets ARGS --store URL`, as the operator `ana` (from the environment).
fn budgets_cli(url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("budgets")
        .args(args)
        .args(["--store", url])
        .env_remove("TOOLGATE_STORE")
        .env_remove("TOOLGATE_STORE_SCHEMA")
        .env("USER", "ana")
        .env_remove("LOGNAME")
        .output()
        .expect("the toolgate command runs")
}

/// [`budgets_cli`], which must exit with `code`; what it printed, stdout then stderr.
#[track_caller]
fn budgets_exits(url: &str, args: &[&str], code: i32) -> String {
    let output = budgets_cli(url, args);
    assert_eq!(output.status.code(), Some(code), "{}", out(&output));
    text(&output)
}

/// The line of `listed` (a `list` table) for the budget of `agent` and `scope`.
#[track_caller]
fn row<'a>(listed: &'a str, agent: &str, scope: &str) -> &'a str {
    listed
        .lines()
        .find(|line| {
            let mut cells = line.split_whitespace();
            cells.next() == Some(agent) && cells.next() == Some(scope)
        })
        .unwrap_or_else(|| panic!("no row for {agent} {scope} in\n{listed}"))
}

/// The third cell of a row: `CALLS`, as `held/limit`.
fn calls(row: &str) -> &str {
    row.split_whitespace().nth(2).expect("a CALLS cell")
}

/// A gate of agent `agent` counting in `store`, with `budgets` (scope, limit, window).
fn counted(
    store: &Arc<PostgresStore>,
    agent: &str,
    budgets: &[(BudgetScope, u32, Duration)],
) -> Gate {
    let mut builder = Gate::builder()
        .mode(Mode::PartialAuto)
        .agent(agent)
        .budget_store_shared(store.clone());
    for (scope, limit, window) in budgets {
        builder = builder.budget(scope.clone(), *limit, *window);
    }
    builder.build().expect("a gate")
}

#[test]
fn gates_budgets_are_listed_with_the_calls_their_windows_hold_now() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "budgets_list") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mailer = counted(
        &store,
        "mailer",
        &[
            (Risk::LowWrite.into(), 3, HOUR),
            (BudgetScope::tool("mail.send*"), 5, HOUR),
        ],
    );
    let desk = counted(&store, "desk", &[(BudgetScope::Agent, 2, HOUR)]);
    let window = Duration::from_millis(300);
    let brief = counted(&store, "brief", &[(BudgetScope::Agent, 4, window)]);
    for n in 0..2 {
        mailer.run(|| send(n)).unwrap();
    }
    desk.run(|| send(9)).unwrap();
    brief.run(|| send(7)).unwrap();
    // The call leaves the brief budget's window; its use stays in the table until the next check.
    std::thread::sleep(window + Duration::from_millis(100));
    assert_eq!(
        query(&url, "SELECT count(*) FROM toolgate.budget_uses")[0][0].as_deref(),
        Some("6")
    );

    let listed = budgets_exits(&url, &["list"], 0);
    assert_eq!(calls(row(&listed, "mailer", "risk:LOW_WRITE")), "2/3");
    assert_eq!(calls(row(&listed, "mailer", "tool:mail.send*")), "2/5");
    assert_eq!(calls(row(&listed, "desk", "agent")), "1/2");
    assert_eq!(calls(row(&listed, "brief", "agent")), "0/4", "{listed}");
    assert!(row(&listed, "desk", "agent").contains("3600 s"), "{listed}");
    assert!(row(&listed, "brief", "agent").contains("0.3 s"), "{listed}");
    // When a unit comes back: within the hour for the desk, never for a budget holding nothing.
    assert!(
        row(&listed, "desk", "agent").contains(" in 59m"),
        "{listed}"
    );
    assert_eq!(
        listed.lines().count(),
        5,
        "a header and four budgets:\n{listed}"
    );

    // Narrowed by the key's parts, all of them holding.
    let mailer_only = budgets_exits(&url, &["list", "--agent", "mailer"], 0);
    assert_eq!(mailer_only.lines().count(), 3, "{mailer_only}");
    let agents = budgets_exits(&url, &["list", "--scope", "agent"], 0);
    assert_eq!(agents.lines().count(), 3, "{agents}");
    let one = budgets_exits(
        &url,
        &["list", "--agent", "desk", "--scope", "risk:LOW_WRITE"],
        0,
    );
    assert_eq!(one.trim(), "no budget");

    // For machines: the same, and the key as stored, which `--key` takes back.
    let json = budgets_exits(&url, &["list", "--json"], 0);
    let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
    let list = parsed.as_array().unwrap();
    assert_eq!(list.len(), 4);
    let desk_budget = list
        .iter()
        .find(|b| b["agent"] == "desk")
        .expect("the desk's budget");
    assert_eq!(desk_budget["scope"], "agent");
    assert_eq!(desk_budget["calls"], 1);
    assert_eq!(desk_budget["limit"], 2);
    assert_eq!(desk_budget["window_us"], 3_600_000_000u64);
    assert_eq!(desk_budget["policy"], serde_json::Value::Null);
    let key = desk_budget["key"].as_str().unwrap();
    let parts = BudgetKey::parse(key).unwrap();
    assert_eq!((parts.agent.as_str(), parts.limit), ("desk", 2));
    let by_key = budgets_exits(&url, &["list", "--key", key], 0);
    assert_eq!(by_key.lines().count(), 2, "{by_key}");
    assert_eq!(calls(row(&by_key, "desk", "agent")), "1/2");
    // The library answers the same.
    let listed = budgets::list(&url, "toolgate", &BudgetFilter::default().agent("mailer")).unwrap();
    assert_eq!(
        listed.iter().map(|b| b.calls).collect::<Vec<_>>(),
        [2, 2],
        "{listed:?}"
    );
}

#[test]
fn a_reset_clears_only_what_it_selects_and_the_refused_call_runs_after_it() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "budgets_reset") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mailer = counted(&store, "mailer", &[(Risk::LowWrite.into(), 2, HOUR)]);
    let desk = counted(&store, "desk", &[(Risk::LowWrite.into(), 2, HOUR)]);
    for gate in [&mailer, &desk] {
        for n in 0..2 {
            gate.run(|| send(n)).unwrap();
        }
        assert_eq!(
            gate.run(|| send(3)).unwrap_err().code(),
            DenialCode::BudgetExhausted
        );
    }

    let done = budgets_exits(
        &url,
        &[
            "reset",
            "--agent",
            "mailer",
            "--reason",
            "the replay sent twice",
        ],
        0,
    );
    assert!(done.contains("reset 1 budget(s)"), "{done}");
    assert!(done.contains("2 call(s) cleared"), "{done}");
    assert!(done.contains("by ana"), "{done}");
    assert!(done.contains("recorded as reset 1"), "{done}");
    // The mailer's budget counts afresh; the desk's is untouched.
    for n in 0..2 {
        mailer.run(|| send(n)).expect("within the reset budget");
    }
    assert_eq!(
        mailer.run(|| send(3)).unwrap_err().code(),
        DenialCode::BudgetExhausted
    );
    assert_eq!(
        desk.run(|| send(3)).unwrap_err().code(),
        DenialCode::BudgetExhausted
    );
    let listed = budgets_exits(&url, &["list"], 0);
    assert_eq!(calls(row(&listed, "mailer", "risk:LOW_WRITE")), "2/2");
    assert_eq!(calls(row(&listed, "desk", "risk:LOW_WRITE")), "2/2");

    // The record: who, the role that ran it, why, what was selected, and what each window held.
    let recorded = query(
        &url,
        "SELECT reset_by, role, reason, selected, array_length(keys, 1), cleared::text
         FROM toolgate.budget_resets",
    );
    assert_eq!(
        recorded,
        [[
            Some("ana".to_owned()),
            Some("toolgate".to_owned()),
            Some("the replay sent twice".to_owned()),
            Some(r#"--agent "mailer""#.to_owned()),
            Some("1".to_owned()),
            Some("{2}".to_owned()),
        ]]
    );
    let history = budgets_exits(&url, &["history"], 0);
    for expected in [
        "reset 1 at ",
        "by ana (role toolgate): the replay sent twice",
        r#"selected --agent "mailer""#,
        "2 call(s) cleared: 2 calls of risk:LOW_WRITE per 3600 s for agent mailer",
    ] {
        assert!(history.contains(expected), "{expected} not in\n{history}");
    }
    assert_eq!(
        budgets_exits(&url, &["history", "--agent", "desk"], 0).trim(),
        "no reset recorded"
    );
    let json: serde_json::Value =
        serde_json::from_str(&budgets_exits(&url, &["history", "--json"], 0)).unwrap();
    assert_eq!(json[0]["by"], "ana");
    assert_eq!(json[0]["cleared"], 2);
    // Readers of the trail are told of it, beside the writers' chains, which it leaves intact.
    let verified = toolgate_exits(&["audit", "verify", &url], 0);
    let verified = text(&verified);
    assert!(verified.contains("INTACT"), "{verified}");
    assert!(
        verified.contains("budgets reset by operators: 1")
            && verified.contains("by ana")
            && verified.contains("the replay sent twice"),
        "{verified}"
    );

    // `--all` clears every budget; the record says it was asked for.
    let all = budgets_exits(
        &url,
        &["reset", "--all", "--reason", "new quarter", "--by", "olga"],
        0,
    );
    assert!(
        all.contains("reset 2 budget(s) selected by --all, 4 call(s) cleared, by olga"),
        "{all}"
    );
    desk.run(|| send(4))
        .expect("the desk's budget was reset too");
    let verified = text(&toolgate_exits(&["audit", "verify", &url], 0));
    assert!(
        verified.contains("budgets reset by operators: 2"),
        "{verified}"
    );
    assert!(verified.contains("by olga"), "{verified}");
}

#[test]
fn a_reset_that_selects_nothing_or_names_no_one_is_refused_and_changes_nothing() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "budgets_refused") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let mailer = counted(&store, "mailer", &[(Risk::LowWrite.into(), 2, HOUR)]);
    mailer.run(|| send(1)).unwrap();
    let uses = || query(&url, "SELECT count(*) FROM toolgate.budget_uses")[0][0].clone();
    let records = || query(&url, "SELECT count(*) FROM toolgate.budget_resets")[0][0].clone();

    // No selection: refused, saying how to select or to ask for every budget.
    let unscoped = budgets_exits(&url, &["reset", "--reason", "why"], 64);
    assert!(
        unscoped.contains("which budgets?") && unscoped.contains("--all"),
        "{unscoped}"
    );
    // `--all` with a selection, no reason, an empty one: the command line is invalid.
    budgets_exits(
        &url,
        &["reset", "--all", "--agent", "mailer", "--reason", "x"],
        64,
    );
    budgets_exits(&url, &["reset", "--agent", "mailer"], 64);
    let blank = budgets_exits(&url, &["reset", "--agent", "mailer", "--reason", " "], 64);
    assert!(blank.contains("--reason"), "{blank}");
    // An operator's name the rule of names refuses (SECURITY.md): nothing reaches the store.
    for by in ["ana\u{202e}", "аna", " "] {
        let refused = budgets_exits(
            &url,
            &["reset", "--agent", "mailer", "--reason", "x", "--by", by],
            64,
        );
        assert!(
            refused.contains("--by") || refused.contains("refused"),
            "{refused}"
        );
    }
    // Nothing matches: exit 1, nothing reset, nothing recorded.
    let nothing = budgets_exits(&url, &["reset", "--agent", "mailr", "--reason", "x"], 1);
    assert!(
        nothing.contains("no budget matches --agent `mailr`"),
        "{nothing}"
    );
    assert_eq!(uses().as_deref(), Some("1"));
    assert_eq!(records().as_deref(), Some("0"));
    // The library refuses the same, before any connection.
    assert_eq!(
        budgets::reset(&url, "toolgate", &BudgetFilter::default(), "ana", "why"),
        Err(ResetError::Unscoped)
    );
    assert!(matches!(
        budgets::reset(&url, "toolgate", &BudgetFilter::all(), "", "why"),
        Err(ResetError::Invalid(_))
    ));
    assert!(matches!(
        budgets::reset(&url, "toolgate", &BudgetFilter::all(), "оlga", "why"),
        Err(ResetError::Invalid(_))
    ));
    assert!(matches!(
        budgets::reset(
            &url,
            "toolgate",
            &BudgetFilter::default().agent("x"),
            "ana",
            "why"
        ),
        Err(ResetError::NoMatch(_))
    ));
    assert_eq!(uses().as_deref(), Some("1"));
    assert_eq!(records().as_deref(), Some("0"));

    // No store; a store that cannot be reached; a schema of another version.
    let nowhere = toolgate(&["budgets", "list"]);
    assert_eq!(nowhere.status.code(), Some(64), "{}", out(&nowhere));
    let closed = crate::common::postgres::with_database("postgres://toolgate@127.0.0.1:1", "x");
    budgets_exits(&closed, &["list"], 3);
    budgets_exits(&closed, &["reset", "--all", "--reason", "x"], 3);
    let unmigrated = crate::common::postgres::empty_database("budgets_unmigrated");
    let said = budgets_exits(&unmigrated, &["list"], 3);
    assert!(said.contains("toolgate migrate"), "{said}");
    query(
        &url,
        "INSERT INTO toolgate.schema_version (version) VALUES (99)",
    );
    let newer = budgets_exits(&url, &["history"], 2);
    assert!(newer.contains("newer than this toolgate"), "{newer}");
}

#[test]
fn agents_text_in_keys_and_records_is_shown_escaped() {
    let Some((_serial, url)) = parent_database(CHILD_ROLE, "budgets_hidden") else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    let hidden = hidden_text(HIDDEN);
    let agent = format!("bot{hidden}");
    // A gate refuses such an agent label for its budgets (the rule of names); a key with it, written
    // by another program with the store's grants, is still read, shown escaped.
    let refused = Gate::builder()
        .mode(Mode::PartialAuto)
        .agent(agent.as_str())
        .budget(BudgetScope::Agent, 2, HOUR)
        .budget_store_shared(store.clone())
        .build();
    assert!(
        matches!(&refused, Err(toolgate::GateError::Budgets(errors))
            if matches!(errors[0], toolgate::gate::budget::BudgetError::AgentLabel(..))),
        "{refused:?}"
    );
    let agents = format!("{agent}\u{1f}agent\u{1f}2\u{1f}{}", HOUR.as_nanos());
    crate::common::postgres::execute(
        &url,
        &format!(
            "INSERT INTO toolgate.budgets (key, held) VALUES ('{0}', 1);
             INSERT INTO toolgate.budget_uses (key, used_at) VALUES ('{0}', now())",
            agents.replace('\'', "''")
        ),
    );
    // A key no gate makes, written by another program with the store's grants.
    let odd = format!("odd{hidden}\u{1f}key");
    crate::common::postgres::execute(
        &url,
        &format!(
            "INSERT INTO toolgate.budgets (key, held) VALUES ('{0}', 1);
             INSERT INTO toolgate.budget_uses (key, used_at) VALUES ('{0}', now())",
            odd.replace('\'', "''")
        ),
    );

    let listed = budgets_cli(&url, &["list"]);
    assert_eq!(listed.status.code(), Some(0), "{}", out(&listed));
    assert_shown_escaped("budgets list", HIDDEN, &listed);
    // The key's separator is drawn too, and the key no gate makes is listed with its uses.
    let shown = text(&listed);
    assert!(shown.contains("\\u{001f}"), "{shown}");
    assert!(
        shown
            .lines()
            .any(|line| line.starts_with("?") && line.contains("odd")),
        "{shown}"
    );
    // JSON: every such character written as its escape, and the value the same.
    let json = budgets_cli(&url, &["list", "--json"]);
    assert_shown_json_escaped(&json);
    let parsed: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let keys: Vec<&str> = parsed
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["key"].as_str().unwrap())
        .collect();
    assert!(keys.contains(&odd.as_str()), "{keys:?}");
    assert!(
        parsed
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["agent"] == agent.as_str()),
        "{parsed}"
    );

    // The key as `list` shows it selects it; the record shows what an agent wrote escaped, and the
    // operator's reason too.
    let shown_key = toolgate::terminal::escaped(&odd).into_owned();
    let reason = format!("why{hidden}");
    let reset = budgets_cli(&url, &["reset", "--key", &shown_key, "--reason", &reason]);
    assert_eq!(reset.status.code(), Some(0), "{}", out(&reset));
    assert!(
        text(&reset).contains("1 call(s) cleared"),
        "{}",
        out(&reset)
    );
    assert_shown_escaped("budgets reset", HIDDEN, &reset);
    let reset = budgets_cli(&url, &["reset", "--agent", &agent, "--reason", &reason]);
    assert_eq!(reset.status.code(), Some(0), "{}", out(&reset));
    assert_shown_escaped("budgets reset", HIDDEN, &reset);
    let history = budgets_cli(&url, &["history"]);
    assert_eq!(history.status.code(), Some(0), "{}", out(&history));
    assert_shown_escaped("budgets history", HIDDEN, &history);
    assert_shown_json_escaped(&budgets_cli(&url, &["history", "--json"]));
    let verified = toolgate(&["audit", "verify", &url]);
    assert_shown_escaped("audit verify", HIDDEN, &verified);
    // A selection that matches nothing is named escaped too.
    let none = budgets_cli(
        &url,
        &["reset", "--agent", &format!("no{hidden}"), "--reason", "r"],
    );
    assert_eq!(none.status.code(), Some(1), "{}", out(&none));
    assert_shown_escaped("budgets reset", HIDDEN, &none);
}

/// `output` (JSON) holds none of [`HIDDEN`] raw.
#[track_caller]
fn assert_shown_json_escaped(output: &std::process::Output) {
    assert_eq!(output.status.code(), Some(0), "{}", out(output));
    let json = String::from_utf8(output.stdout.clone()).unwrap();
    for c in HIDDEN.chars().chain(['\u{1f}']) {
        assert!(!json.contains(c), "{c:?} printed raw: {json:?}");
    }
    assert!(
        json.contains("\\u202e") && json.contains("\\u001f"),
        "{json}"
    );
}

// Three processes call under one budget of 50 calls an hour (the racers' `burst`) while operators
// reset it from the command, round after round. Each check and each reset lock the budget's row:
// no call is counted twice or lost, `held` stays the number of uses kept, and between two resets the
// window never holds more than 50 calls. A reset means the budget counts afresh from it: every call
// that ran was either cleared by exactly one reset or is still counted.
#[test]
fn a_reset_racing_calls_in_other_processes_never_lets_more_than_the_limit_between_resets() {
    if std::env::var(CHILD_ROLE).is_ok() {
        return;
    }
    let url = database("budgets_reset_race");
    let mut racers: Vec<Racer> = (0..3).map(|_| racer(&url)).collect();
    let resets = 30;
    let mut ran = 0u64;
    for round in 0..resets {
        for racer in &mut racers {
            racer.tell("burst 40");
        }
        let reset = budgets_cli(
            &url,
            &[
                "reset",
                "--agent",
                "mailer",
                "--reason",
                &format!("round {round}"),
            ],
        );
        // Nothing to reset yet is the one other answer, when no call of this round has run.
        assert!(
            matches!(reset.status.code(), Some(0) | Some(1)),
            "{}",
            out(&reset)
        );
        for racer in &mut racers {
            let said = racer.said();
            ran += said.split_once(' ').unwrap().1.parse::<u64>().unwrap();
        }
    }
    let key_of = |rows: Vec<Vec<Option<String>>>| rows[0][0].clone().unwrap_or_default();
    let key = key_of(query(&url, "SELECT key FROM toolgate.budgets"));
    assert_eq!(
        BudgetKey::parse(&key).map(|p| (p.agent, p.limit)),
        Some(("mailer".to_owned(), 50))
    );
    let held = key_of(query(&url, "SELECT held FROM toolgate.budgets"));
    let kept = key_of(query(&url, "SELECT count(*) FROM toolgate.budget_uses"));
    assert_eq!(held, kept, "the count a check reads is the uses kept");
    let cleared = query(
        &url,
        "SELECT cleared[1] FROM toolgate.budget_resets ORDER BY id",
    );
    let mut segments: Vec<u64> = cleared
        .iter()
        .map(|row| row[0].as_deref().unwrap().parse().unwrap())
        .collect();
    segments.push(kept.parse().unwrap());
    for (i, segment) in segments.iter().enumerate() {
        assert!(
            *segment <= 50,
            "between resets {i}: {segment} calls: {segments:?}"
        );
    }
    assert_eq!(
        segments.iter().sum::<u64>(),
        ran,
        "every call that ran was cleared once or is counted: {segments:?}"
    );
    assert!(ran > 50, "the resets gave calls back: {ran}");
    // The last round's calls are still counted: more are refused until the next reset.
    racers[0].tell("burst 60");
    let more: u64 = racers[0].said().split_once(' ').unwrap().1.parse().unwrap();
    assert_eq!(more, 50 - kept.parse::<u64>().unwrap());
}

#[test]
fn the_operators_role_lists_and_resets_only_through_the_recording_function() {
    let url = database("budgets_roles");
    let roles = crate::common::postgres::documented_roles(&url);
    let store = Arc::new(PostgresStore::connect(&roles.agent).unwrap());
    let gate = counted(&store, "roles", &[(Risk::LowWrite.into(), 1, HOUR)]);
    gate.run(|| send(1)).unwrap();
    assert_eq!(
        gate.run(|| send(2)).unwrap_err().code(),
        DenialCode::BudgetExhausted
    );
    let listed = budgets_exits(&roles.operator, &["list"], 0);
    assert_eq!(calls(row(&listed, "roles", "risk:LOW_WRITE")), "1/1");
    budgets_exits(
        &roles.operator,
        &["reset", "--agent", "roles", "--reason", "drill"],
        0,
    );
    gate.run(|| send(3)).expect("reset by the operators' role");
    budgets_exits(&roles.operator, &["history"], 0);
    let recorded = query(&url, "SELECT role FROM toolgate.budget_resets");
    assert!(
        recorded[0][0]
            .as_deref()
            .unwrap()
            .starts_with("toolgate_operator_"),
        "the role that ran it: {recorded:?}"
    );
    // The operators' role clears no use, and writes or rewrites no record, but through the function.
    for statement in [
        "DELETE FROM toolgate.budget_uses",
        "UPDATE toolgate.budgets SET held = 0",
        "INSERT INTO toolgate.budget_resets (reset_at, reset_by, role, reason, selected, keys, \
         cleared) VALUES (now(), 'x', 'x', 'x', 'x', '{}', '{}')",
        "DELETE FROM toolgate.budget_resets",
    ] {
        let refused = std::panic::catch_unwind(|| query(&roles.operator, statement));
        assert!(refused.is_err(), "the operators' role ran {statement}");
    }
    // The gates' and the auditors' roles may not reset.
    for role in [&roles.agent, &roles.auditor] {
        let refused = budgets_cli(role, &["reset", "--all", "--reason", "x"]);
        assert_eq!(refused.status.code(), Some(2), "{}", out(&refused));
        assert!(
            text(&refused).contains("permission denied"),
            "{}",
            out(&refused)
        );
    }
    // The auditors' role reads the trail, and is told of the reset beside it.
    let verified = text(&toolgate_exits(&["audit", "verify", &roles.auditor], 0));
    assert!(
        verified.contains("budgets reset by operators: 1"),
        "{verified}"
    );
    assert_eq!(
        query(&url, "SELECT count(*) FROM toolgate.budget_resets")[0][0].as_deref(),
        Some("1")
    );
}
