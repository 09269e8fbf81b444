//! A policy file, read, checked and compiled for a gate.

use std::path::Path;
use std::sync::Arc;

use super::check::{self, ToolDeclaration};
use super::model::{At, PolicyErrors, ReadAction, Scope, Section};
use crate::canonical::sha256_hex;
use crate::gate::budget::{BudgetSpec, HistorySpec};
use crate::gate::narrowing::{Limit, Narrowing, ToolRules};
use crate::gate::reads::ReadRule;
use crate::registry::registry;

/// The largest policy file read, in bytes.
pub const MAX_POLICY_BYTES: usize = 1 << 20;

/// A policy file, read and checked against the linked tools.
#[derive(Debug, Clone)]
pub struct PolicyFile {
    name: Arc<str>,
    digest: Arc<str>,
    pub(crate) sections: Vec<Section>,
}

impl PolicyFile {
    /// Reads and checks the policy file at `path`. Its name in rules and errors is `path` as given.
    pub fn load(path: impl AsRef<Path>) -> Result<PolicyFile, PolicyErrors> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = read_limited(path).map_err(|message| PolicyErrors::one(&name, 1, 1, message))?;
        PolicyFile::parse(&name, &text)
    }

    /// Checks `text`, a policy file named `name` in rules and errors, against the linked tools.
    pub fn parse(name: &str, text: &str) -> Result<PolicyFile, PolicyErrors> {
        not_too_large(name, text)?;
        let sections = check::check(name, text, check::Tools::Linked)?;
        Ok(PolicyFile {
            name: name.into(),
            digest: sha256_hex(text.as_bytes()).into(),
            sections,
        })
    }

    /// Checks what of `text` needs no linked tool: the TOML, the keys, the format, modes, risks and
    /// the patterns' syntax. For a program that forwards a file to processes that check it against
    /// their tools (`toolgate policy apply`); [`PolicyFile::parse`] checks everything.
    pub fn check_shape(name: &str, text: &str) -> Result<(), PolicyErrors> {
        not_too_large(name, text)?;
        check::check(name, text, check::Tools::Shape).map(drop)
    }

    /// Checks `text` against tools declared by the processes that link them, as [`PolicyFile::parse`]
    /// checks it against the linked ones: for a program that links none of them, such as `toolgate
    /// policy apply` checking a file against the tools a fleet's members declare.
    pub fn check_declared(
        name: &str,
        text: &str,
        tools: &[ToolDeclaration],
    ) -> Result<(), PolicyErrors> {
        not_too_large(name, text)?;
        check::check(name, text, check::Tools::Declared(tools)).map(drop)
    }

    /// `text` checked for its shape only ([`PolicyFile::check_shape`]), as a policy file.
    pub(super) fn shaped(name: &str, text: &str) -> Result<PolicyFile, PolicyErrors> {
        not_too_large(name, text)?;
        Ok(PolicyFile {
            name: name.into(),
            digest: sha256_hex(text.as_bytes()).into(),
            sections: check::check(name, text, check::Tools::Shape)?,
        })
    }

    /// The file's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The digest (sha256, hex) of the file's text: every audit record of a gate following it names
    /// it (`policy_digest`).
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The rules that apply to a gate of `principal` and `agent`: `[defaults]`, then the principal's
    /// table, then the agent's, each found by its name's reading (SECURITY.md, names that read alike):
    /// a gate of `оlga`, written with a Cyrillic `о`, is narrowed as `olga`'s.
    pub(crate) fn applying<'a>(
        &'a self,
        principal: Option<&'a str>,
        agent: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Section> + 'a {
        self.sections.iter().filter(move |s| match &s.scope {
            Scope::Defaults => true,
            Scope::Principal(p) => principal.is_some_and(|name| crate::names::same(name, p)),
            Scope::Agent(a) => agent.is_some_and(|name| crate::names::same(name, a)),
        })
    }

    /// Where a rule is written, as refusals and records name it: `file:line:column`.
    pub(crate) fn place<T>(&self, at: &At<T>) -> String {
        format!("{}:{}:{}", self.name, at.line, at.column)
    }

    /// What this file takes away from a gate built for `principal` and `agent`, with what its rules
    /// logged only (`[shadow]`) would take away as well, for the gate to record.
    pub fn narrowing(&self, principal: Option<&str>, agent: Option<&str>) -> Narrowing {
        let applying = || self.applying(principal, agent);
        let mut narrowing = self.compile(applying().filter(|s| !s.shadow));
        if applying().any(|s| s.shadow) {
            narrowing.shadow = Some(Box::new(self.compile(applying())));
        }
        narrowing
    }

    /// The rules of `sections`, compiled against the linked tools.
    fn compile<'s>(&self, sections: impl Iterator<Item = &'s Section>) -> Narrowing {
        let registry = registry();
        let mut narrowing = Narrowing {
            digest: Some(self.digest.clone()),
            ..Narrowing::none()
        };
        let mut tools = vec![ToolRules::default(); registry.entries.len()];
        for section in sections {
            let rules = &section.rules;
            let shown = |what: String, at: String| -> Arc<str> { format!("{what} ({at})").into() };
            if let Some(ceiling) = &rules.ceiling
                && narrowing
                    .ceiling
                    .as_ref()
                    .is_none_or(|c| ceiling.value < c.value)
            {
                narrowing.ceiling = Some(Limit {
                    value: ceiling.value,
                    rule: shown(format!("ceiling {}", ceiling.value), self.place(ceiling)),
                });
            }
            if let Some(at) = &rules.ask_at
                && narrowing.ask_at.as_ref().is_none_or(|c| at.value < c.value)
            {
                narrowing.ask_at = Some(Limit {
                    value: at.value,
                    rule: shown(format!("ask_at {}", at.value), self.place(at)),
                });
            }
            if let Some(at) = &rules.out_of_band_at
                && narrowing
                    .out_of_band_at
                    .as_ref()
                    .is_none_or(|c| at.value < c.value)
            {
                narrowing.out_of_band_at = Some(Limit {
                    value: at.value,
                    rule: shown(format!("out_of_band_at {}", at.value), self.place(at)),
                });
            }
            if let Some(taint) = &rules.taint_refuses
                && narrowing.taint_refuses.is_none()
            {
                narrowing.taint_refuses =
                    Some(shown("taint = \"refuse\"".into(), self.place(taint)));
            }
            for budget in &rules.budgets {
                narrowing.budgets.push(BudgetSpec {
                    scope: budget.value.scope.clone(),
                    limit: budget.value.calls,
                    window: budget.value.window,
                    owner: Some((section.scope.to_string().into(), self.place(budget).into())),
                });
            }
            for rule in &rules.history {
                narrowing.history.push(HistorySpec {
                    tool: rule.value.tool.clone(),
                    order: rule.value.order,
                    other: rule.value.other.clone(),
                    within: rule.value.within,
                    per: rule.value.per,
                    owner: (section.scope.to_string().into(), self.place(rule).into()),
                });
            }
            for read in &rules.reads {
                let rule = ReadRule {
                    kind: read.value.kind,
                    pattern: read.value.pattern.clone(),
                    rule: shown(
                        format!("{} {:?}", read.value.key(), read.value.pattern.as_str()),
                        self.place(read),
                    ),
                };
                match read.value.action {
                    ReadAction::Deny => narrowing.reads.deny.push(rule),
                    ReadAction::Record => narrowing.reads.record.push(rule),
                }
            }
            for (slot, entry) in registry.entries.iter().enumerate() {
                let tool = &mut tools[slot];
                for deny in &rules.deny {
                    if tool.deny.is_none() && check::pattern_reaches(&deny.value, entry) {
                        tool.deny = Some(shown(deny.value.clone(), self.place(deny)));
                    }
                }
                for ask in &rules.ask {
                    if tool.ask.is_none() && check::pattern_reaches(&ask.value, entry) {
                        tool.ask = Some(shown(format!("ask {:?}", ask.value), self.place(ask)));
                    }
                }
                for by in &rules.out_of_band {
                    if tool.out_of_band.is_none() && check::pattern_reaches(&by.value, entry) {
                        tool.out_of_band =
                            Some(shown(format!("out_of_band {:?}", by.value), self.place(by)));
                    }
                }
                for rule in &rules.arguments {
                    if rule.value.tool == entry.manifest.id {
                        tool.arguments.push(crate::gate::narrowing::ArgumentRule {
                            parameter: rule.value.parameter.as_str().into(),
                            test: rule.value.test.clone(),
                            rule: self.place(rule).into(),
                        });
                    }
                }
            }
        }
        if tools.iter().any(ToolRules::names_the_tool) {
            narrowing.tools = tools;
        }
        narrowing
    }
}

fn not_too_large(name: &str, text: &str) -> Result<(), PolicyErrors> {
    if text.len() <= MAX_POLICY_BYTES {
        return Ok(());
    }
    Err(PolicyErrors::one(
        name,
        1,
        1,
        format!(
            "the file is {} bytes; a policy file is at most {MAX_POLICY_BYTES}",
            text.len()
        ),
    ))
}

/// Reads at most [`MAX_POLICY_BYTES`] of the file, as UTF-8.
pub(crate) fn read_limited(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read the file: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_POLICY_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the file: {e}"))?;
    if bytes.len() > MAX_POLICY_BYTES {
        return Err(format!(
            "the file is larger than {MAX_POLICY_BYTES} bytes, the most a policy file may be"
        ));
    }
    String::from_utf8(bytes).map_err(|e| format!("the file is not UTF-8: {e}"))
}
