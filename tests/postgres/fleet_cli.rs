//! The `toolgate fleet` and `toolgate audit` commands: settings and changes are checked, names are
//! shown escaped, errors name what failed, and a misspelt fleet is an error that creates nothing.

use crate::support::fleet::*;
use crate::support::trail::*;

#[test]
fn fleet_settings_and_changes_are_checked() {
    let url = database("settings");
    for grace in [Duration::ZERO, Duration::from_secs(31)] {
        let refused = Fleet::builder()
            .grace(grace)
            .connect(&url, "f")
            .unwrap_err();
        assert!(refused.to_string().contains("grace period"), "{refused}");
    }
    assert!(Fleet::connect(&url, " ").is_err());
    assert!(fleet::lower(&url, "toolgate", "f", Mode::Shadow, "", "why").is_err());
    assert!(fleet::lower(&url, "toolgate", "f", Mode::Shadow, "ana", " ").is_err());
    toolgate_exits(&["fleet", "status", "--store", &url, "--fleet", "nope"], 1);
    toolgate_exits(&["fleet", "status", "--store", &url], 64);
    // A second sink with the same writer name is refused: one chain, one writer.
    let first = PostgresSink::builder().writer("w").connect(&url).unwrap();
    let second = PostgresSink::builder().writer("w").connect(&url);
    assert_refused_saying(second, "another sink writes");
    drop(first);
    let again = PostgresSink::builder().writer("w").connect(&url);
    assert!(
        again.is_ok(),
        "the name is free again once its sink is dropped"
    );
}

#[test]
fn fleet_and_trail_commands_show_names_escaped() {
    let url = database("hidden");
    let hidden = hidden_text(HIDDEN);
    // Names the API takes are refused where the rule of names refuses them (SECURITY.md): a fleet row
    // written otherwise (by an older program, or a role with SQL) is still shown escaped.
    let uncontrolled: String = HIDDEN.chars().filter(|c| !c.is_control()).collect();
    let name = format!("f{}", hidden_text(&uncontrolled));
    let quoted = |text: &str| text.replace('\'', "''");
    common::postgres::execute(
        &url,
        &format!(
            "INSERT INTO toolgate.fleets (name, mode, changed_by, reason) \
             VALUES ('{0}', 'ADVISORY', '{1}', '{2}'); \
             INSERT INTO toolgate.fleet_changes (fleet, mode, changed_by, reason) \
             VALUES ('{0}', 'ADVISORY', '{1}', '{2}')",
            quoted(&name),
            quoted(&format!("ana{hidden}")),
            quoted(&format!("why{hidden}"))
        ),
    );
    assert!(
        Fleet::connect(&url, &name).is_err(),
        "a fleet of a hidden name"
    );
    let lowered = toolgate(&[
        "fleet", "lower", "--store", &url, "--fleet", &name, "--to", "ADVISORY", "--by", "ana",
        "--reason", "why",
    ]);
    assert_ne!(lowered.status.code(), Some(0), "{}", text(&lowered));
    assert_shown_escaped("fleet lower", &uncontrolled, &lowered);
    let status = toolgate_exits(&["fleet", "status", "--store", &url, "--fleet", &name], 0);
    assert_shown_escaped("fleet status", HIDDEN, &status);

    let sink = PostgresSink::builder()
        .writer("w-shown")
        .connect(&url)
        .unwrap();
    let mut refused = AuditRecord::new(Stage::Refused, format!("t{hidden}"), Mode::Shadow, 1);
    refused.decision = Some(toolgate::audit::Decision::Refused);
    refused.code = Some("ABOVE_CEILING".into());
    toolgate::audit::AuditSink::record(&sink, &refused).unwrap();
    let mut entered = AuditRecord::new(Stage::Enter, format!("t{hidden}"), Mode::Shadow, 1);
    entered.call = 2;
    toolgate::audit::AuditSink::record(&sink, &entered).unwrap();
    drop(sink);
    let verified = toolgate(&["audit", "verify", &url]);
    assert!(
        text(&verified).contains("interrupted: call 2"),
        "{}",
        text(&verified)
    );
    assert_shown_escaped("audit verify", HIDDEN, &verified);
    let promotion = toolgate_exits(&["audit", "promotion", &url], 0);
    assert_shown_escaped("audit promotion", HIDDEN, &promotion);
}

#[test]
fn fleet_and_trail_errors_name_what_failed() {
    let url = common::postgres::empty_database("fleet_unmigrated");
    let unreachable = "postgres://toolgate@127.0.0.1:1/nowhere";
    for (args, named) in [
        (
            vec!["fleet", "status", "--store", unreachable, "--fleet", "f"],
            "fleet",
        ),
        (
            vec!["fleet", "status", "--store", &url, "--fleet", "f"],
            "fleet",
        ),
        (
            vec![
                "fleet",
                "lower",
                "--store",
                unreachable,
                "--fleet",
                "f",
                "--to",
                "SHADOW",
                "--by",
                "a",
                "--reason",
                "r",
            ],
            "fleet",
        ),
        (vec!["audit", "verify", unreachable], "audit trail"),
        (vec!["audit", "promotion", unreachable], "audit trail"),
    ] {
        let output = toolgate(&args);
        assert_eq!(output.status.code(), Some(3), "{args:?}: {}", text(&output));
        let said = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(said.contains(named), "{args:?}: {said}");
        assert!(!said.contains("approval store"), "{args:?}: {said}");
    }
    let fleet = Fleet::connect(unreachable, "f").unwrap_err().to_string();
    assert!(
        fleet.contains("fleet") && !fleet.contains("approval store"),
        "{fleet}"
    );
    let sink = PostgresSink::connect(unreachable).unwrap_err().to_string();
    assert!(
        sink.contains("audit") && !sink.contains("approval store"),
        "{sink}"
    );
    // A database without the schema: each says to migrate it.
    let fleet = Fleet::connect(&url, "f").unwrap_err().to_string();
    assert!(fleet.contains("toolgate migrate"), "{fleet}");
    let sink = PostgresSink::connect(&url).unwrap_err().to_string();
    assert!(sink.contains("toolgate migrate"), "{sink}");
}

/// f32: `toolgate fleet lower` given a misspelt fleet (`paymnets`) while the real one (`payments`) has
/// a FULL_AUTO member. Guarantee: an unknown fleet is an error (exit 1) that names the fleets there
/// are; no fleet is created by `lower` or `raise`, and the real fleet and its gate keep their mode.
#[test]
fn f32_lowering_a_misspelt_fleet_is_an_error_and_creates_nothing() {
    let url = database("f32");
    let fleet = member_fleet(&url, "payments", 5000);
    let gate = fleet.join(Gate::builder().mode(Mode::FullAuto)).unwrap();
    let typo = toolgate_exits(
        &[
            "fleet", "lower", "--store", &url, "--fleet", "paymnets", "--to", "SHADOW", "--by",
            "ana", "--reason", "incident",
        ],
        1,
    );
    assert!(
        text(&typo).contains("paymnets") && text(&typo).contains("\"payments\""),
        "the error names neither the unknown fleet nor the fleets there are: {}",
        text(&typo)
    );
    assert!(
        !text(&typo).contains("every joined gate refuses"),
        "{}",
        text(&typo)
    );
    toolgate_exits(
        &[
            "fleet", "raise", "--store", &url, "--fleet", "paymnets", "--to", "SHADOW", "--by",
            "ana", "--reason", "r",
        ],
        1,
    );
    assert!(fleet::lower(&url, "toolgate", "paymnets", Mode::Shadow, "ana", "x").is_err());
    let fleets = query(&url, "SELECT name FROM toolgate.fleets ORDER BY name");
    assert_eq!(
        fleets,
        vec![vec![Some("payments".to_owned())]],
        "a fleet was created"
    );
    assert_eq!(
        query(&url, "SELECT count(*) FROM toolgate.fleet_changes")[0][0].as_deref(),
        Some("0"),
        "a change was recorded for no fleet"
    );
    assert_eq!(
        fleet::status(&url, "toolgate", "payments").unwrap().mode,
        Mode::FullAuto
    );
    assert_eq!(gate.mode(), Mode::FullAuto);
    // The real name still lowers the real fleet.
    toolgate_exits(
        &[
            "fleet", "lower", "--store", &url, "--fleet", "payments", "--to", "SHADOW", "--by",
            "ana", "--reason", "incident",
        ],
        0,
    );
    assert!(eventually(Duration::from_secs(3), || gate.mode() == Mode::Shadow));
    drop(gate);
    drop(fleet);
}
