//! Outside attacks on guarantee 18 by names that read alike: rules of the operator's file naming a
//! linked tool in another case, another script or with a character no one sees, and principal or
//! agent tables renamed to a lookalike in a change that `diff` shows a reviewer.
//!
//! Each test asserts the guarantee: a file whose rule names no linked tool does not check (or the
//! rule reaches the tool a reader takes it for), and a diff never shows two different principals as
//! one. A test that fails is an attack that got through.

use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::{Denied, Gate, Mode, tool};

/// Deploy a build (attacks on names).
#[tool(risk = "LOW_WRITE", domain = "atkp", callable)]
fn deploy(build: String) -> Result<String, Denied> {
    Ok(build)
}

/// Spellings of `atkp.deploy` that a reader takes for it.
const LOOKALIKES: [&str; 10] = [
    "ATKP.deploy",
    "atkp.Deploy",
    "atkp.deploy ",
    " atkp.deploy",
    "atkp.deploy\\u200b",
    "\\u0430tkp.deploy",
    "atkp\\uff0edeploy",
    "atkp\\u2024deploy",
    "atkp.deplo\\u0443",
    "atkp.de\\u00adploy",
];

/// a18_n1. The attack: a `deny`, an `ask`, an argument rule and a budget naming `atkp.deploy` in a
/// lookalike spelling. Asserted: each file is refused when checked, or its rule reaches
/// `atkp.deploy` (the call is refused).
#[test]
fn a18_n1_a_rule_naming_a_tool_in_a_lookalike_spelling_does_not_check_or_reaches_it() {
    let mut failures = Vec::new();
    for name in LOOKALIKES {
        for (what, text) in [
            (
                "deny",
                format!("format = 1\n[defaults]\ndeny = [\"{name}\"]\n"),
            ),
            (
                "ask",
                format!("format = 1\n[defaults]\nask = [\"{name}\"]\n"),
            ),
            (
                "argument",
                format!(
                    "format = 1\n[[defaults.arguments]]\ntool = \"{name}\"\nparameter = \"build\"\nrefuse = [\"*\"]\n"
                ),
            ),
            (
                "budget",
                format!(
                    "format = 1\n[[defaults.budgets]]\ntool = \"{name}\"\ncalls = 0\nper = \"1h\"\n"
                ),
            ),
        ] {
            let Ok(file) = PolicyFile::parse("ops.toml", &text) else {
                continue;
            };
            let gate = Gate::builder()
                .mode(Mode::FullAuto)
                .policy(LivePolicy::new(file))
                .build();
            let Ok(gate) = gate else {
                continue;
            };
            if let Ok(ran) = gate.run(|| deploy("b1".into())) {
                failures.push(format!(
                    "{what} {name:?}: the file checks and `atkp.deploy` ran ({ran})"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a18_n2. The attack: a change renames `[principals.alice]` (or `[agents.triage]`) to a table whose
/// name reads the same but holds an invisible character: alice's deny rule is gone (a widening),
/// and the reviewer reads the diff. Asserted: each file does not check, or the diff's text shows the
/// removed and the added table under names that differ to a reader (an escape shows the hidden
/// character).
#[test]
fn a18_n2_a_table_renamed_to_an_invisible_lookalike_does_not_read_as_the_same_one_in_a_diff() {
    let mut failures = Vec::new();
    for table in ["principals", "agents"] {
        let old = PolicyFile::parse(
            "old.toml",
            &format!("format = 1\n[{table}.alice]\ndeny = [\"atkp.deploy\"]\n"),
        )
        .unwrap();
        for hidden in [
            "\\u200b", "\\u2060", "\\u00ad", "\\u180e", "\\u3164", "\\u2800", "\\u115f", "\\u034f",
            "\\ufe0f", "\\u00a0",
        ] {
            let Ok(new) = PolicyFile::parse(
                "new.toml",
                &format!("format = 1\n[{table}.\"alice{hidden}\"]\ndeny = [\"atkp.deploy\"]\n"),
            ) else {
                continue;
            };
            let diff = old.diff(&new);
            let shown = diff.to_string();
            let raw: Vec<char> = shown.chars().filter(|c| !c.is_ascii()).collect();
            if !raw.is_empty() || !diff.widens() {
                failures.push(format!(
                    "{table} alice{hidden}: widens {}, shown {shown:?}",
                    diff.widens()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a18_n3. The attack: as a18_n2, the operator asks `explain` (`app policy explain --principal P`)
/// about a principal or agent whose table's name holds a default-ignorable or blank character (the
/// principal the application mapped a token to). Asserted: the rule `explain` names shows that
/// character escaped, never raw, so the operator does not read the table as `alice`'s. (Held when
/// written: `explain` names a rule by its file and line, not by its table's name.)
#[test]
fn a18_n3_explain_shows_a_lookalike_table_s_name_escaped() {
    let mut failures = Vec::new();
    for hidden in ['\u{3164}', '\u{115f}', '\u{2800}', '\u{200b}', '\u{2060}'] {
        for table in ["principals", "agents"] {
            let escaped = format!("\\u{:04x}", u32::from(hidden));
            let Ok(file) = PolicyFile::parse(
                "ops.toml",
                &format!("format = 1\n[{table}.\"alice{escaped}\"]\ndeny = [\"atkp.deploy\"]\n"),
            ) else {
                continue;
            };
            let name = format!("alice{hidden}");
            let (principal, agent) = if table == "principals" {
                (Some(name.as_str()), None)
            } else {
                (None, Some(name.as_str()))
            };
            let explained = file.explain(
                principal,
                agent,
                Mode::FullAuto,
                "atkp.deploy",
                &serde_json::json!({"build": "b1"}),
            );
            let shown = match explained {
                Ok(e) => e.to_string(),
                Err(e) => e,
            };
            if shown.contains(hidden) {
                failures.push(format!("{table} U+{:04X}: {shown:?}", u32::from(hidden)));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a4_18_n1. The attack: the operator's file names `[principals.olga]` (or `[agents.olga]`) and the
/// gate's principal (or agent) is a spelling that reads as it without a Cyrillic or Greek letter,
/// a hidden character or a compatibility form: an Armenian `օ`, a Hebrew `ו`; and a file naming both
/// spellings as two tables. Asserted (docs/policy_file.md: a gate follows the table whose name reads
/// as its principal's or agent's; two tables that read alike do not check): the gate is narrowed,
/// and the file with both does not check.
#[test]
fn a4_18_n1_a_table_reaches_a_principal_or_agent_named_by_an_armenian_or_hebrew_look_alike() {
    let mut failures = Vec::new();
    let file = PolicyFile::parse(
        "ops.toml",
        "format = 1\n[principals.olga]\ndeny = [\"atkp.deploy\"]\n[agents.olga]\ndeny = [\"atkp.deploy\"]\n",
    )
    .unwrap();
    let live = LivePolicy::new(file);
    for alike in ["\u{585}lga", "o\u{5d5}ga"] {
        for by_agent in [false, true] {
            let builder = Gate::builder().mode(Mode::FullAuto).policy(live.clone());
            let gate = if by_agent {
                builder.agent(alike)
            } else {
                builder.principal(alike)
            }
            .build()
            .unwrap();
            if gate.run(|| deploy("b1".into())).is_ok() {
                failures.push(format!(
                    "{} {alike:?}: not narrowed by olga's table",
                    if by_agent { "agent" } else { "principal" }
                ));
            }
        }
        for table in ["principals", "agents"] {
            let escaped: String = alike
                .chars()
                .map(|c| {
                    if c.is_ascii() {
                        c.to_string()
                    } else {
                        format!("\\U{:08X}", u32::from(c))
                    }
                })
                .collect();
            let text = format!(
                "format = 1\n[{table}.olga]\nceiling = \"SHADOW\"\n[{table}.\"{escaped}\"]\nceiling = \"SHADOW\"\n"
            );
            if PolicyFile::parse("ops.toml", &text).is_ok() {
                failures.push(format!("{table} olga and {alike:?}: the file checks"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
