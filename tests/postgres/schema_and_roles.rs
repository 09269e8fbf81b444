//! The schema and roles of `toolgate::postgres`: a database without the schema says to migrate and its
//! owner migrates it; roles with exactly the documented grants use the store, answer, write the trail,
//! join and lower fleets, and audit.

use crate::support::bank::*;
use crate::support::fleet::*;

#[test]
fn a_database_without_the_schema_says_to_migrate_and_the_owner_migrates_it() {
    let url = common::postgres::empty_database("store_unmigrated");
    // Connecting makes nothing: it says what to run.
    let refused = PostgresStore::connect(&url).unwrap_err().to_string();
    assert!(refused.contains("toolgate migrate"), "{refused}");
    assert!(!refused.contains("permission"), "{refused}");
    let listed = cli_exits(&url, &["list"], 3);
    assert!(
        String::from_utf8_lossy(&listed.stderr).contains("toolgate migrate"),
        "{}",
        all(&listed)
    );
    assert!(
        query(
            &url,
            "SELECT 1 FROM pg_namespace WHERE nspname = 'toolgate'"
        )
        .is_empty()
    );

    // The owner's step, from the command: made once, then already there.
    let migrated = toolgate_exits(&["migrate", "--store", &url], 0);
    assert!(
        stdout(&migrated).contains("from version 0 to version 15"),
        "{}",
        all(&migrated)
    );
    let again = toolgate_exits(&["migrate", "--store", &url], 0);
    assert!(
        stdout(&again).contains("at version 15 already"),
        "{}",
        all(&again)
    );
    let store = PostgresStore::connect(&url).expect("a migrated schema");
    drop(store);

    // A builder asked to make it does, as the owner; another schema is left alone until then.
    let refused = PostgresStore::builder().schema("other").connect(&url);
    assert_refused_saying(refused, "toolgate migrate");
    PostgresStore::builder()
        .schema("other")
        .migrate(true)
        .connect(&url)
        .expect("made by the builder");
    toolgate_exits(
        &["migrate", "--store", "postgres://toolgate@127.0.0.1:1/x"],
        3,
    );
    assert_eq!(toolgate(&["migrate"]).status.code(), Some(64));
}

#[test]
fn roles_with_exactly_the_documented_grants_use_the_store_and_answer() {
    let url = database("store_roles");
    let roles = common::postgres::documented_roles(&url);
    // The gates' role files requests, uses answers and counts budgets: no CREATE, no ownership.
    let store = std::sync::Arc::new(
        PostgresStore::connect(&roles.agent).expect("the agents' role connects"),
    );
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .agent("roles")
        .approval_store_shared(store.clone())
        .budget(
            toolgate::gate::BudgetScope::tool("bank.read_message"),
            2,
            Duration::from_secs(3600),
        )
        .budget_store_shared(store.clone())
        .build()
        .unwrap();
    let _ = token(gate.run(|| wire("acct-1".into(), 100, "1234".into())));
    let pending = wait(store.list()).unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let id = pending[0].id.to_string();
    // The operators' role lists, shows and answers.
    let listed = cli(&roles.operator, &["list"]);
    assert_eq!(listed.status.code(), Some(0), "{}", all(&listed));
    assert!(stdout(&listed).contains("bank.wire"), "{}", all(&listed));
    let shown = cli(&roles.operator, &["show", &id]);
    assert_eq!(shown.status.code(), Some(0), "{}", all(&shown));
    let approved = cli(&roles.operator, &["approve", &id]);
    assert_eq!(approved.status.code(), Some(0), "{}", all(&approved));
    let before = WIRES.load(Ordering::SeqCst);
    gate.run(|| wire("acct-1".into(), 100, "1234".into()))
        .expect("the approved call runs");
    assert_eq!(WIRES.load(Ordering::SeqCst), before + 1);
    // A budget of two, counted in the database: the third call is refused.
    for _ in 0..2 {
        gate.run(|| read_message(1)).expect("within the budget");
    }
    assert_eq!(
        code(gate.run(|| read_message(1))),
        DenialCode::BudgetExhausted
    );
    let held = query(&url, "SELECT sum(held) FROM toolgate.budgets");
    assert_eq!(held[0][0].as_deref(), Some("2"));
}

#[test]
fn roles_with_exactly_the_documented_grants_write_join_lower_and_audit() {
    let url = database("fleet_roles");
    let roles = common::postgres::documented_roles(&url);
    // The gates' role: a sink and a fleet, each connecting as the role, no CREATE, no ownership.
    let sink = PostgresSink::builder()
        .writer("roles")
        .connect(&roles.agent)
        .expect("the sink connects as the gates' role");
    let fleet = Fleet::connect(&roles.agent, "roles").expect("the fleet, as the gates' role");
    let gate = fleet
        .join(
            Gate::builder()
                .mode(Mode::FullAuto)
                .agent("roles")
                .audit(sink),
        )
        .expect("joined");
    gate.run(|| count(7)).expect("runs, its records committed");
    // The operators' role lowers the fleet and sees who is joined.
    toolgate_exits(
        &[
            "fleet",
            "lower",
            "--store",
            &roles.operator,
            "--fleet",
            "roles",
            "--to",
            "SHADOW",
            "--by",
            "ana",
            "--reason",
            "drill",
        ],
        0,
    );
    let status = toolgate_exits(
        &[
            "fleet",
            "status",
            "--store",
            &roles.operator,
            "--fleet",
            "roles",
        ],
        0,
    );
    assert!(text(&status).contains("SHADOW"), "{}", text(&status));
    let deadline = Instant::now() + Duration::from_secs(10);
    while gate.run(|| count(8)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the lowering never reached the gate"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The operators' role applies a policy, checked against the tools the gates' role declared; the
    // gates' role records that it accepted it, the one way its grants allow.
    let scratch = common::Scratch::new("roles-policy");
    let policy = scratch.path("policy.toml");
    std::fs::write(&policy, "format = 1\n[defaults]\nask = [\"fleet.count\"]\n").unwrap();
    let apply = |file: &std::path::Path, code: i32| {
        let path = file.display().to_string();
        toolgate_exits(
            &[
                "policy",
                "apply",
                "--store",
                &roles.operator,
                "--fleet",
                "roles",
                "--by",
                "ana",
                &path,
            ],
            code,
        )
    };
    apply(&policy, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while query(
        &url,
        "SELECT accepted_digest IS NOT NULL FROM toolgate.fleets WHERE name = 'roles'",
    )[0][0]
        .as_deref()
        != Some("t")
    {
        assert!(
            Instant::now() < deadline,
            "the acceptance was never recorded"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(&policy, "format = 1\n[defaults]\nask = [\"fleet.cuont\"]\n").unwrap();
    apply(&policy, 1);
    // The gates' role cannot write a policy in force of its own.
    let forged = std::panic::catch_unwind(|| {
        query(
            &roles.agent,
            "UPDATE toolgate.fleets SET accepted_policy = NULL, accepted_digest = NULL",
        )
    });
    assert!(
        forged.is_err(),
        "the gates' role changed the policy in force"
    );
    drop(gate);
    drop(fleet);
    // The auditors' role verifies the trail and reports on it.
    toolgate_prints(
        &["audit", "verify", &roles.auditor],
        0,
        "INTACT: 1 writer(s)",
    );
    toolgate_exits(&["audit", "promotion", &roles.auditor], 0);
    // Neither the auditors' role nor the operators' writes into the trail.
    for role in [&roles.auditor, &roles.operator] {
        let refused = match PostgresSink::builder().writer("forged").connect(role) {
            Err(error) => error.to_string(),
            Ok(sink) => toolgate::audit::AuditSink::record(
                &sink,
                &AuditRecord::new(Stage::Enter, "forged", Mode::FullAuto, 1),
            )
            .expect_err("a record written by a role that may not")
            .to_string(),
        };
        assert!(refused.contains("permission denied"), "{role}: {refused}");
    }
    assert_eq!(
        query(&url, "SELECT DISTINCT writer FROM toolgate.audit"),
        vec![vec![Some("roles".to_owned())]]
    );
}
