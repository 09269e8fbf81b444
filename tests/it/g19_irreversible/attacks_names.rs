//! Outside attacks on guarantee 19 by the spelling of a target: roots and parents of paths written
//! other ways than the known `./`, `../`, `~/`; wildcards, lists and dots of other scripts and
//! percent-encoded; and numbers typed back in other spellings.
//!
//! Each test asserts the guarantee: a target that names more than one thing is refused
//! `TARGET_NOT_SINGLE` before anyone is asked, and only the target typed back exactly confirms. A
//! test that fails is an attack that got through.

use serde_json::{Value, json};
use toolgate::approval::ApproveError;
use toolgate::{DenialCode, Denied, Gate, Mode, tool};

fn read_path(path: &str) -> Result<Value, String> {
    Ok(json!({"path": path, "state": "present"}))
}

fn read_number(n: &i64) -> Result<Value, String> {
    Ok(json!({"n": n, "state": "present"}))
}

/// Remove a path for good (attacks on names).
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atkn", callable, irreversible,
       target = path, evidence = read_path)]
fn remove_path(path: String) -> Result<String, Denied> {
    Ok(path)
}

/// Drop a numbered shard for good (attacks on names).
#[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO], domain = "atkn", callable, irreversible,
       target = n, evidence = read_number)]
fn drop_shard(n: i64) -> Result<i64, Denied> {
    Ok(n)
}

fn two_step() -> Gate {
    Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap()
}

/// The targets of `targets` that were not refused `TARGET_NOT_SINGLE` before anyone was asked.
fn taken_as_one(targets: &[&str]) -> Vec<String> {
    let mut failures = Vec::new();
    for target in targets {
        let gate = two_step();
        let result = gate.run(|| remove_path((*target).to_owned()));
        match &result {
            Err(denied)
                if denied.code() == DenialCode::TargetNotSingle
                    && denied.approval_token().is_none() => {}
            Err(denied) => failures.push(format!(
                "{target:?}: {} (an operator asked: {})",
                denied.code(),
                denied.approval_token().is_some()
            )),
            Ok(_) => failures.push(format!("{target:?}: ran")),
        }
    }
    failures
}

/// a19_n1. The attack: the root, the parent and the home of a path written without the known
/// trailing `/`, with backslashes, percent-encoded, or as a URL. Asserted: each is refused
/// `TARGET_NOT_SINGLE` before an operator is asked.
#[test]
fn a19_n1_roots_and_parents_of_paths_in_other_spellings_are_not_one_target() {
    let failures = taken_as_one(&[
        "/", "//", "\\", "..", "..\\", ".\\", "~", "%2e%2e", "%2e", "%2f", ".%2f", "..%5c",
        "file:///", "C:\\",
    ]);
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a19_n2. The attack: a wildcard, a dot or `all` as other scripts write them (none of them an NFKC
/// spelling of the ASCII one), and lists and wildcards percent-encoded. Asserted: each is refused
/// `TARGET_NOT_SINGLE` before an operator is asked.
#[test]
fn a19_n2_wildcards_dots_and_lists_of_other_scripts_or_percent_encoded_are_not_one_target() {
    let failures = taken_as_one(&[
        "\u{2217}",  // asterisk operator
        "\u{204e}",  // low asterisk
        "\u{2731}",  // heavy asterisk
        "\u{66d}",   // arabic five pointed star
        "\u{22c6}",  // star operator
        "\u{3002}",  // ideographic full stop
        "\u{430}ll", // Cyrillic a, then `ll`
        "\u{251}ll", // Latin alpha, then `ll`
        "%2a",
        "%2A",
        "a%2cb",
        "a%20b",
        "a%0ab",
    ]);
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a19_n3. The attack: a number target typed back in another spelling of the same number (`-0` for
/// `0`, `1e3` or `1,000` for `1000`, ...). Asserted: each is `ConfirmationMismatch`, the call does not
/// run, and the exact spelling then approves it.
#[test]
fn a19_n3_a_number_target_typed_in_another_spelling_confirms_nothing() {
    let mut failures = Vec::new();
    for (n, wrongs) in [
        (
            0_i64,
            &["-0", "+0", "0.0", "-0.0", "0e0", "00", "\u{ff10}"][..],
        ),
        (
            1000,
            &[
                "1e3",
                "1E3",
                "1000.0",
                "1_000",
                "1,000",
                "1 000",
                "1\u{202f}000",
                "0x3e8",
                "\u{ff11}\u{ff10}\u{ff10}\u{ff10}",
                "\u{661}\u{660}\u{660}\u{660}",
            ][..],
        ),
    ] {
        let gate = two_step();
        let denied = gate.run(|| drop_shard(n)).unwrap_err();
        assert_eq!(denied.code(), DenialCode::ApprovalPending, "{denied}");
        let token = denied.approval_token().unwrap().to_owned();
        for wrong in wrongs {
            let typed = gate.approve_typed(&token, "ana", wrong);
            if !matches!(typed, Err(ApproveError::ConfirmationMismatch)) {
                failures.push(format!("{n} typed {wrong:?}: {typed:?}"));
            }
        }
        if gate.run(|| drop_shard(n)).is_ok() {
            failures.push(format!("{n}: ran on a misspelled confirmation"));
            continue;
        }
        gate.approve_typed(&token, "ana", &n.to_string()).unwrap();
        assert_eq!(gate.run(|| drop_shard(n)).unwrap(), n);
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a19_n4. The attack: the current folder, the parent and the root written as a path that climbs
/// back out of a folder it names (`x/..` is `.`, `/..` and `/tmp/..` are `/`), the root of a drive
/// in Windows' device and UNC spellings (`\\?\C:\`, `\\.\C:\`, `\\localhost\C$\`), a drive's current
/// folder (`C:`, `C:.`), a URL naming the local host (`file://localhost/`), and a dot written with
/// another script's digit (`٠`, which reads as `.`). Asserted (SECURITY.md, guarantee 19: a target
/// read as the path a back end may take it for, `..\`, `.\`, `\`, `file:///` and `C:\` the parent,
/// the current folder and the root, is a wildcard): each is refused `TARGET_NOT_SINGLE` before an
/// operator is asked.
#[test]
fn a19_n4_a_path_that_climbs_back_to_a_folder_root_or_drive_is_not_one_target() {
    let failures = taken_as_one(&[
        "x/..",
        "x\\..",
        "a/b/../..",
        "/..",
        "/tmp/..",
        "C:/..",
        "\\\\?\\C:\\",
        "\\\\.\\C:\\",
        "\\\\localhost\\C$\\",
        "C:",
        "C:.",
        "file://localhost/",
        "\u{660}",
        "\u{660}/",
    ]);
    assert!(failures.is_empty(), "{failures:#?}");
}

/// a19_n5. The attack: the home and working folders as a shell takes them (`~+` is `$PWD`, `~-` is
/// `$OLDPWD`, `~root` a home), and the same through a variable (`$HOME`, `${PWD}`), which a back end
/// that runs a shell expands. Asserted (guarantee 19: `~/` is a wildcard, a target read as the path
/// a back end may take it for): each is refused `TARGET_NOT_SINGLE` before an operator is asked.
#[test]
fn a19_n5_a_home_or_working_folder_a_shell_expands_is_not_one_target() {
    let failures = taken_as_one(&["~+", "~-", "~root", "~root/", "$HOME", "${PWD}", "$PWD/"]);
    assert!(failures.is_empty(), "{failures:#?}");
}
