//! The README as a user meets it: its first examples are the programs of `examples/` (compiled by the
//! tests, and run here), its dependency line names every feature, and its test command is the one CI
//! runs.

use std::path::Path;
use std::process::Command;

const README: &str = include_str!("../../README.md");
const MANIFEST: &str = include_str!("../../Cargo.toml");
const CI: &str = include_str!("../../.ci/run");

/// Each Rust block of the README that names an example (`<!-- examples/NAME.rs -->` on the line
/// before it): the example's name and the block's text.
fn example_blocks() -> Vec<(&'static str, String)> {
    let mut blocks = Vec::new();
    let mut lines = README.lines();
    while let Some(line) = lines.next() {
        let Some(path) = line
            .strip_prefix("<!-- ")
            .and_then(|rest| rest.strip_suffix(" -->"))
            .filter(|path| path.starts_with("examples/"))
        else {
            continue;
        };
        assert_eq!(
            lines.next(),
            Some("```rust"),
            "the line after `{line}` opens a plain Rust block, which shows as it is on GitHub and crates.io"
        );
        let mut block = String::new();
        for line in lines.by_ref().take_while(|line| *line != "```") {
            block.push_str(line);
            block.push('\n');
        }
        blocks.push((path, block));
    }
    blocks
}

#[test]
fn the_first_examples_are_the_programs_of_examples_word_for_word() {
    let blocks = example_blocks();
    let names: Vec<&str> = blocks.iter().map(|(path, _)| *path).collect();
    assert_eq!(names, ["examples/hero.rs", "examples/users.rs"]);
    let first_block = README.find("```").expect("the README has code");
    assert!(
        README[..first_block].ends_with("<!-- examples/hero.rs -->\n"),
        "the README's first code is the hero example"
    );
    for (path, block) in blocks {
        let file = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(block, file, "the README's block of {path} is not the file");
        assert!(
            !block
                .lines()
                .any(|line| line == "#" || line.starts_with("# ")),
            "{path}: a line hidden from rustdoc shows raw on GitHub"
        );
    }
}

fn run(name: &str, mode: Option<&str>) -> String {
    let mut command = Command::new(crate::common::example(name, ""));
    command.env_remove("TOOLGATE_MODE");
    if let Some(mode) = mode {
        command.env("TOOLGATE_MODE", mode);
    }
    let output = command.output().expect("the example runs");
    assert!(
        output.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[test]
fn the_hero_refuses_the_delete_before_its_body_runs() {
    assert_eq!(
        run("hero", None),
        "MODE_NOT_ALLOWED: tool `users.delete_user` (HIGH_WRITE) is not allowed in mode \
         PARTIAL_AUTO; it is allowed in FULL_AUTO\n"
    );
}

#[test]
fn the_quickstart_runs_what_each_mode_allows_and_never_the_deny_listed_tool() {
    let denied = "DENY_LISTED: tool `users.purge_deleted` (HIGH_WRITE) is on the deny list (rule \
                  `users.purge_*`); no mode or approval lifts it\n";
    assert_eq!(
        run("users", None),
        format!(
            "user 7\nMODE_NOT_ALLOWED: tool `users.delete` (HIGH_WRITE) is not allowed in mode \
             SHADOW; it is allowed in FULL_AUTO\n{denied}cache: 0\n"
        )
    );
    assert_eq!(
        run("users", Some("full_auto")),
        format!("user 7\napproving users.delete (HIGH_WRITE)\ndeleted user 7\n{denied}cache: 0\n")
    );
}

#[test]
fn the_dependency_line_names_every_feature() {
    let features = MANIFEST
        .split("\n[features]\n")
        .nth(1)
        .expect("Cargo.toml has features")
        .split("\n[")
        .next()
        .unwrap_or_default();
    let names: Vec<&str> = features
        .lines()
        .filter(|line| !line.starts_with('#') && line.contains(" = ["))
        .filter_map(|line| line.split(" = ").next())
        .collect();
    assert_eq!(names.len(), 11, "{names:?}");
    let add_it = README
        .split("## Add it")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the README has an `Add it` section");
    for name in names {
        assert!(
            add_it.contains(&format!("`{name}`")),
            "the README's `Add it` does not name the feature `{name}`"
        );
    }
}

#[test]
fn the_two_commands_come_first_and_ci_runs_the_test_command() {
    let set_up = README
        .split("## Set up and run")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("the README's set-up has a shell block");
    let commands: Vec<&str> = set_up
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .collect();
    assert_eq!(
        commands,
        [
            "cargo run --example quickstart",
            "cargo test --workspace --all-features"
        ]
    );
    assert!(
        CI.lines().any(|line| line.trim() == commands[1]),
        ".ci/run does not run the README's test command"
    );
    assert!(
        README.find("## Set up and run") < README.find("## Quickstart"),
        "the set-up comes before the quickstart"
    );
}
