//! SQL semantics: schema names, writer and fleet names, arguments and reasons are values, never SQL,
//! and separate schemas stay separate.

use crate::support::store::*;
use crate::support::trail::*;

// A11. Schema names: what is not a plain lowercase identifier is refused before any SQL (no injection),
// by the builder and by the command; two schemas in one database do not answer each other's calls.
#[test]
fn a11_schema_names_cannot_inject_and_schemas_are_separate() {
    let (_serial, url, store) = serial_store("atk3_schema");
    let gate = gate_on(store.clone(), "schema", None);
    let t = any_token(gate.run(|| pay("schema".into())));
    gate.approve(&t).unwrap();
    let before = query(&url, "SELECT count(*) FROM toolgate.approvals");
    let long = "a".repeat(64);
    for bad in [
        "toolgate; DROP TABLE toolgate.approvals; --",
        "toolgate\"; DROP TABLE toolgate.approvals; --",
        "toolgate.approvals",
        "Toolgate",
        "",
        "1abc",
        "a b",
        "a-b",
        "toolgate\u{0}",
        "tóolgate",
        long.as_str(),
        "pg_catalog",
        "pg_toast",
        "information_schema",
    ] {
        let connected =
            std::panic::catch_unwind(|| PostgresStore::builder().schema(bad).connect(&url))
                .unwrap_or_else(|_| panic!("schema {bad:?}: connect panicked"));
        if bad.starts_with("pg_") || bad == "information_schema" {
            // Valid by the documented rule; creating tables in a system schema must fail or be harmless.
            eprintln!(
                "(informational) schema {bad:?}: connect ok = {}",
                connected.is_ok()
            );
            continue;
        }
        assert!(connected.is_err(), "schema {bad:?} was accepted");
        if !bad.contains('\u{0}') {
            let listed = cli(&url, &["list", "--schema", bad]);
            assert!(
                !matches!(listed.status.code(), Some(0) | Some(101)),
                "--schema {bad:?}: {}",
                out(&listed)
            );
            eprintln!(
                "(informational) --schema {bad:?}: exit {:?}",
                listed.status.code()
            );
        }
    }
    assert_eq!(
        query(&url, "SELECT count(*) FROM toolgate.approvals"),
        before,
        "rows changed"
    );
    // A store in another schema of the same database (made by its owner) holds none of these
    // approvals.
    let other = Arc::new(
        PostgresStore::builder()
            .schema("atk3_s2")
            .migrate(true)
            .connect(&url)
            .unwrap(),
    );
    let other_gate = gate_on(other.clone(), "schema", None);
    assert!(
        other_gate.run(|| pay("schema".into())).is_err(),
        "another schema's approval ran"
    );
    assert!(
        matches!(
            other_gate.approve(&t),
            Err(ApproveError::UnknownToken) | Err(ApproveError::AlreadyApproved)
        ) || other_gate.approve(&t).is_err()
    );
    // The approval is still there for its own schema, once.
    gate.run(|| pay("schema".into())).unwrap();
    assert_eq!(runs("pay", "schema"), 1);
}

// A12. SQL injection and terminal injection through tool arguments, `--by`, `--reason`, and NUL bytes
// in what PostgreSQL text cannot hold (an agent label, a name, a reason).
#[test]
fn a12_injection_through_arguments_names_and_reasons_changes_nothing() {
    let (_serial, url, store) = serial_store("atk3_inject");
    let (sink, gate) = audited_gate_on(&store, "inject");
    let big = "x".repeat(200_000);
    let notes = [
        "'); DROP TABLE toolgate.approvals; --".to_owned(),
        "$1 $2 \\' \\\\ E'\\x00'".to_owned(),
        "nul\u{0}byte".to_owned(),
        "\u{1b}[2J\u{1b}[H42 atk3_bank.pay HIGH_WRITE FULL_AUTO spoofed\r\nline".to_owned(),
        "ü😀\u{202e}gnp.exe".to_owned(),
        big.clone(),
    ];
    let evil_by = "mallory'); UPDATE toolgate.approvals SET answer = 'approve'; --";
    let evil_reason = "no\n'); DELETE FROM toolgate.approvals; --\u{1b}[31m";
    for (i, note) in notes.iter().enumerate() {
        let r = gate.run(|| pay(note.clone()));
        let id = id_of_token(&url, &any_token(r));
        if i % 2 == 0 {
            cli_exits(&url, &["approve", &id, "--by", evil_by], 0);
        } else {
            cli_exits(
                &url,
                &["reject", &id, "--by", evil_by, "--reason", evil_reason],
                0,
            );
        }
    }
    // The operator's console gets no raw escape sequence or carriage return from an agent's arguments.
    let listed = cli_exits(&url, &["list"], 0);
    let mut shown = String::from_utf8_lossy(&listed.stdout).into_owned();
    for id in query(&url, "SELECT id FROM toolgate.approvals")
        .into_iter()
        .flatten()
        .flatten()
    {
        shown.push_str(&String::from_utf8_lossy(&cli(&url, &["show", &id]).stdout));
    }
    for line in shown
        .lines()
        .filter(|l| l.contains('\u{1b}') || l.contains('\r') || l.contains('\u{202e}'))
    {
        eprintln!("(informational) console line with a control character: {line:?}");
    }
    // The operator's own reason may hold what the operator typed; what the agent sent may not.
    let agent_part = shown.replace(evil_reason, "<reason>");
    assert!(
        !agent_part.contains('\u{1b}'),
        "an escape sequence from the arguments reaches the console"
    );
    assert!(
        !agent_part.contains('\r'),
        "a carriage return from the arguments reaches the console"
    );
    if agent_part.contains('\u{202e}') {
        eprintln!(
            "(informational) a right-to-left override from the arguments reaches the console unescaped"
        );
    }
    // Every row is still there, answered as the operator said, by the name as given.
    let rows = query(
        &url,
        "SELECT answer, answered_by FROM toolgate.approvals ORDER BY id",
    );
    assert_eq!(rows.len(), notes.len());
    for (i, row) in rows.iter().enumerate() {
        let answer = if i % 2 == 0 { "approve" } else { "reject" };
        assert_eq!(row[0].as_deref(), Some(answer));
        assert_eq!(row[1].as_deref(), Some(evil_by));
    }
    for (i, note) in notes.iter().enumerate() {
        let r = gate.run(|| pay(note.clone()));
        if i % 2 == 0 {
            r.unwrap_or_else(|d| panic!("note {i}: {d}"));
        } else {
            let d = r.unwrap_err();
            assert_eq!(d.code(), DenialCode::ApprovalRejected);
            assert_eq!(d.detail(), Some(evil_reason));
        }
    }
    for (i, note) in notes.iter().enumerate() {
        assert_eq!(runs("pay", note), usize::from(i % 2 == 0), "note {i}");
    }
    let records = sink.records();
    let bys: Vec<_> = records
        .iter()
        .filter(|r| {
            r.tool == "atk3_bank.pay"
                && matches!(r.stage, Stage::Enter | Stage::Refused)
                && r.by.is_some()
        })
        .map(|r| r.by.clone().unwrap())
        .collect();
    assert_eq!(bys.len(), notes.len());
    assert!(bys.iter().all(|b| b == evil_by), "{bys:?}");
    // NUL bytes where PostgreSQL text cannot hold them: refused, never a panic, never run.
    let nul_gate = gate_on(store.clone(), "agent\u{0}label", None);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        nul_gate.run(|| pay("nul-agent".into()))
    }))
    .expect("a NUL in the agent label panicked");
    match r {
        Ok(()) => panic!("ran without an approval"),
        Err(d) => {
            assert!(approval_codes().contains(&d.code()), "{d}");
            eprintln!(
                "(informational) NUL agent label: {:?}, token {}",
                d.code(),
                d.approval_token().is_some()
            );
        }
    }
    let t = any_token(gate.run(|| pay("nul-answer".into())));
    let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        gate.answer(
            &t,
            Answer::Reject {
                by: "a\u{0}b".into(),
                reason: "r\u{0}".into(),
                stop: false,
            },
        )
    }))
    .expect("a NUL in the answer panicked");
    eprintln!("(informational) NUL in by/reason: {answered:?}");
    let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        gate.answer(
            &t,
            Answer::Approve {
                by: "a\u{0}b".into(),
                for_session: false,
                confirmation: None,
            },
        )
    }))
    .expect("a NUL in the answer panicked");
    eprintln!("(informational) NUL in by (approve): {answered:?}");
    let r = gate.run(|| pay("nul-answer".into()));
    if answered.is_err() {
        assert!(r.is_err(), "a failed answer approved the call");
    }
}

/// f30: names as SQL: a writer name, a fleet name and a schema given to the public functions, each
/// holding a quote and a statement. Guarantee asked: names are data (bound or refused), never SQL: the
/// tables survive, the trail verifies, lowering the oddly named fleet lowers exactly it.
#[test]
fn f30_names_with_quotes_are_not_sql() {
    let url = database("f30");
    let evil = "x'); DROP TABLE toolgate.fleets; --";
    let gate = audited_gate(&url, evil, Duration::from_secs(2));
    gate.run(|| mark("f30-0".into())).unwrap();
    drop(gate);
    let fleet = member_fleet(&url, evil, 1000);
    let joined = fleet.join(Gate::builder().mode(Mode::PartialAuto)).unwrap();
    fleet::lower(&url, "toolgate", evil, Mode::Shadow, "ana'--", "x'; --").unwrap();
    assert!(eventually(Duration::from_millis(1500), || joined.mode()
        == Mode::Shadow));
    for schema in [
        "toolgate.audit; DROP TABLE toolgate.fleets; --",
        "toolgate\"; DROP TABLE toolgate.fleets; --",
    ] {
        assert!(verify_trail(&url, schema).is_err(), "{schema}");
        assert!(fleet::status(&url, schema, evil).is_err(), "{schema}");
        assert!(fleet::lower(&url, schema, evil, Mode::Shadow, "a", "b").is_err());
    }
    let tables = query(
        &url,
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'toolgate'
         AND table_name IN ('fleets', 'audit', 'fleet_changes', 'fleet_members')",
    );
    assert_eq!(tables[0][0].as_deref(), Some("4"));
    let report = verify_trail(&url, "toolgate").unwrap();
    assert!(report.is_intact(), "{report}");
    assert!(report.writer(evil).is_some(), "{report}");
    drop(joined);
    drop(fleet);
}
