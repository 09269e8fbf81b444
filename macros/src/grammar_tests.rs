//! `grammar.md` says every key the attribute takes, and which of them `#[toolgate(..)]` refuses: a key
//! added to `attr::TOOL_KEYS`, or refused in place, fails these tests until the grammar says so.

use std::collections::BTreeSet;

use proc_macro2::TokenStream;

use crate::attr::TOOL_KEYS;
use crate::{GRAMMAR, toolset};

/// The grammar's ```text block: the attributes as they are written.
fn syntax() -> &'static str {
    let start = GRAMMAR
        .find("```text\n")
        .expect("grammar.md opens with a ```text block")
        + 8;
    let len = GRAMMAR[start..]
        .find("```")
        .expect("the ```text block is closed");
    &GRAMMAR[start..start + len]
}

/// Whether `word` stands in `text` as a whole word.
fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        !text[..at].ends_with(ident) && !text[at + word.len()..].starts_with(ident)
    })
}

#[test]
fn every_key_of_tool_is_in_the_grammar_and_explained() {
    let syntax = syntax();
    let prose = &GRAMMAR[GRAMMAR.find(syntax).expect("in it") + syntax.len()..];
    for key in TOOL_KEYS {
        assert!(
            syntax.lines().any(|line| {
                let code = line.split("//").next().unwrap_or_default();
                has_word(code, key)
            }),
            "grammar.md: the ```text block does not write `{key}`"
        );
        assert!(
            prose.contains(&format!("`{key}`")),
            "grammar.md: no sentence below the ```text block says what `{key}` does"
        );
    }
}

/// The keys the grammar says `#[toolgate(..)]` does not take: the list after "but" on its line.
fn keys_the_grammar_refuses_in_place() -> BTreeSet<String> {
    let syntax = syntax();
    let line = syntax
        .lines()
        .find(|line| line.contains("the keys of #[tool] but"))
        .expect("grammar.md: the #[toolgate(..)] lines say \"the keys of #[tool] but ...\"");
    let list = &line[line.find(" but ").expect("found above") + 5..];
    list.split([',', ' '])
        .map(str::trim)
        .filter(|key| !key.is_empty() && *key != "and")
        .map(str::to_owned)
        .collect()
}

/// A value of each key that `#[tool]` takes on `async fn restart(&self, name: String)`.
fn sample(key: &str) -> &'static str {
    match key {
        "risk" => "risk = \"LOW_WRITE\"",
        "side_effects" => "side_effects",
        "modes" => "modes = [FULL_AUTO]",
        "id" => "id = \"ops.restart\"",
        "domain" => "domain = \"ops\"",
        "idempotent" => "idempotent",
        "open_world" => "open_world",
        "description" => "description = \"Restart a service.\"",
        "skip" => "skip",
        "escalate" => "escalate = classify",
        "record_arguments" => "record_arguments",
        "redact" => "redact = [name]",
        "callable" => "callable",
        "untrusted_output" => "untrusted_output",
        "target" => "target = name",
        "evidence" => "target = name, evidence = probe",
        "rollback" => "rollback = plan",
        "irreversible" => "irreversible, target = name, evidence = probe",
        "out_of_band" => "out_of_band",
        "annotations" => "annotations(title = \"Restart\")",
        other => panic!("a new key of #[tool], `{other}`: give it a sample value here"),
    }
}

/// `#[toolset(domain = "ops")]` over this impl, expanded.
fn expand_set(set: &str) -> String {
    let args: TokenStream = "domain = \"ops\"".parse().expect("lexes");
    let item: TokenStream = set.parse().expect("lexes");
    toolset::toolset_attribute(args, item).to_string()
}

/// Whether `#[toolset]` over this impl reports an error.
fn refused(set: &str) -> bool {
    expand_set(set).contains("compile_error")
}

/// The arguments of one declaration: `risk` and the key (`skip` stands alone).
fn arguments(key: &str) -> String {
    match key {
        "risk" | "skip" => sample(key).to_owned(),
        "irreversible" => format!("risk = \"HIGH_WRITE\", {}", sample(key)),
        _ => format!("{}, {}", sample("risk"), sample(key)),
    }
}

#[test]
fn the_keys_toolgate_refuses_in_place_are_the_ones_the_grammar_names() {
    const METHOD: &str = "async fn restart(&self, name: String) -> Result<String, E> { Ok(name) }";
    // In place, the keys read the typed arguments, of which `name` is a field.
    const IN_PLACE: &str = "async fn restart(&self, Parameters(args): Parameters<Restart>) \
                            -> Result<String, E> { Ok(args.name) }";
    let mut refused_in_place = BTreeSet::new();
    for key in TOOL_KEYS {
        let declaration = arguments(key);
        let as_a_tool =
            format!("impl Ops {{ /// Restart a service.\n #[tool({declaration})] pub {METHOD} }}");
        assert!(
            !refused(&as_a_tool),
            "`{declaration}` is a sound declaration of a tool in a #[toolset]: {}",
            expand_set(&as_a_tool)
        );
        let in_place = format!(
            "#[tool_router] impl Ops {{ /// Restart a service.\n #[tool] #[toolgate({declaration})] {IN_PLACE} }}"
        );
        if refused(&in_place) {
            refused_in_place.insert((*key).to_owned());
        }
    }
    assert!(
        !refused_in_place.contains("risk"),
        "a plain #[toolgate(risk = ..)] is refused"
    );
    assert_eq!(
        keys_the_grammar_refuses_in_place(),
        refused_in_place,
        "grammar.md names other keys than #[toolgate(..)] refuses"
    );
}
