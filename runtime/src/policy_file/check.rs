//! Reading a policy file's text into its rules, and every check against the linked tools: each
//! problem an error with its place, all of them reported at once.

use std::str::FromStr;

use serde_json::{Number, Value};
use toml::Spanned;

use super::model::{
    ArgumentRule, At, Budget, History, HistoryOrder, HistoryPer, PolicyError, PolicyErrors,
    ReadAction, ReadRuleDoc, Rules, Scope, Section,
};
use super::toml_doc::{ArgumentDoc, BudgetDoc, FileDoc, HistoryDoc, RulesDoc, unknown_keys};
use crate::gate::budget::{BudgetScope, MAX_BUDGET_CALLS, MAX_BUDGET_WINDOW};
use crate::gate::denylist::{DenyRule, DenyRuleError};
use crate::gate::narrowing::{ArgumentTest, compare};
use crate::gate::reads::{ReadKind, ReadPattern};
use crate::registry::{Tool, ToolEntry, registry};
use crate::terminal::escaped;
use toolgate_policy::suggest::{closest, did_you_mean};
use toolgate_policy::{Mode, Risk};

/// The file format this runtime reads.
const FORMAT: i64 = 1;

/// The tools a file's rules are checked against.
#[derive(Debug, Clone, Copy)]
pub(super) enum Tools<'a> {
    /// None: the file's shape alone.
    Shape,
    /// The tools linked into this program.
    Linked,
    /// The tools a fleet's members declared (`toolgate policy apply`, which links none).
    Declared(&'a [ToolDeclaration]),
}

/// A tool as a policy file is checked against it, declared by a process that links it to one that
/// does not (a fleet's member to `toolgate policy apply`, through the fleet's tables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDeclaration {
    /// The tool's id.
    pub id: String,
    /// The names a deny or ask pattern matches it by: its id, and for a tool of an rmcp handler gated
    /// in place, its id under its domain too.
    pub names: Vec<String>,
    /// The JSON Schema of its parameters (a `callable` tool's; `None` otherwise).
    pub parameters: Option<Value>,
    /// The parameters it redacts.
    pub redact: Vec<String>,
}

impl ToolDeclaration {
    /// Every tool linked into this program, declared.
    pub fn linked() -> Vec<ToolDeclaration> {
        registry()
            .entries
            .iter()
            .map(|&entry| {
                let manifest = &entry.manifest;
                let mut names = vec![manifest.id.to_owned()];
                if let (Some(_), Some(domain)) = (entry.in_place, manifest.domain) {
                    names.push(format!("{domain}.{}", manifest.id));
                }
                ToolDeclaration {
                    id: manifest.id.to_owned(),
                    names,
                    parameters: Tool { entry }.input_schema(),
                    redact: entry
                        .behaviour
                        .redact
                        .iter()
                        .map(|&p| p.to_owned())
                        .collect(),
                }
            })
            .collect()
    }
}

/// A tool the rules are checked against: linked, or declared.
#[derive(Clone, Copy)]
enum Known<'a> {
    Linked(&'static ToolEntry),
    Declared(&'a ToolDeclaration),
}

impl Known<'_> {
    fn id(&self) -> &str {
        match self {
            Known::Linked(entry) => entry.manifest.id,
            Known::Declared(tool) => &tool.id,
        }
    }

    fn reached_by(&self, pattern: &str) -> bool {
        match self {
            Known::Linked(entry) => pattern_reaches(pattern, entry),
            Known::Declared(tool) => DenyRule::parse(pattern)
                .is_ok_and(|rule| tool.names.iter().any(|name| rule.matches(name))),
        }
    }

    fn parameters(&self) -> Option<Value> {
        match self {
            Known::Linked(entry) => Tool { entry }.input_schema(),
            Known::Declared(tool) => tool.parameters.clone(),
        }
    }

    fn redacts(&self, parameter: &str) -> bool {
        match self {
            Known::Linked(entry) => entry.behaviour.redact.contains(&parameter),
            Known::Declared(tool) => tool.redact.iter().any(|p| p == parameter),
        }
    }
}

struct Checker<'a> {
    name: &'a str,
    text: &'a str,
    errors: Vec<PolicyError>,
    /// The tools the rules are checked against (none where none are linked, as in the `toolgate`
    /// command, which only forwards a file to a fleet, unless the fleet's members declared theirs).
    tools: Tools<'a>,
}

pub(super) fn check(
    name: &str,
    text: &str,
    tools: Tools<'_>,
) -> Result<Vec<Section>, PolicyErrors> {
    let mut checker = Checker {
        name,
        text,
        errors: Vec::new(),
        tools,
    };
    let doc: FileDoc = match toml::from_str(text) {
        Ok(doc) => doc,
        Err(error) => {
            let unknown = unknown_keys(text);
            if unknown.is_empty() {
                let start = error.span().map_or(0, |s| s.start);
                checker.error(start, error.message().trim_end().to_owned());
            }
            for (at, key, known) in unknown {
                let message = match closest(&key, known) {
                    Some(close) => {
                        format!("unknown key `{}`; did you mean `{close}`?", escaped(&key))
                    }
                    None => format!(
                        "unknown key `{}`; this table holds `{}`",
                        escaped(&key),
                        known.join("`, `")
                    ),
                };
                checker.error(at, message);
            }
            return Err(PolicyErrors(checker.errors));
        }
    };
    if *doc.format.get_ref() != FORMAT {
        checker.error(
            doc.format.span().start,
            format!(
                "format {} is not one this toolgate reads; write `format = {FORMAT}`",
                doc.format.get_ref()
            ),
        );
    }
    let mut sections = Vec::new();
    if let Some(defaults) = doc.defaults {
        sections.push(checker.section(Scope::Defaults, defaults.into_inner()));
    }
    checker.names_read_apart("principals", doc.principals.keys());
    checker.names_read_apart("agents", doc.agents.keys());
    for (principal, rules) in doc.principals {
        let scope = Scope::Principal(principal.into_inner());
        sections.push(checker.section(scope, rules.into_inner()));
    }
    for (agent, rules) in doc.agents {
        let scope = Scope::Agent(agent.into_inner());
        sections.push(checker.section(scope, rules.into_inner()));
    }
    if !matches!(tools, Tools::Shape) {
        checker.shadowed(&sections);
    }
    if let Some(shadow) = doc.shadow {
        let shadow = shadow.into_inner();
        checker.names_read_apart("shadow.principals", shadow.principals.keys());
        checker.names_read_apart("shadow.agents", shadow.agents.keys());
        let tables = shadow
            .defaults
            .map(|rules| (Scope::Defaults, rules))
            .into_iter()
            .chain(
                shadow
                    .principals
                    .into_iter()
                    .map(|(name, rules)| (Scope::Principal(name.into_inner()), rules)),
            )
            .chain(
                shadow
                    .agents
                    .into_iter()
                    .map(|(name, rules)| (Scope::Agent(name.into_inner()), rules)),
            );
        for (scope, rules) in tables {
            let rules = rules.into_inner();
            checker.logged_only(&rules);
            let mut section = checker.section(scope, rules);
            section.shadow = true;
            sections.push(section);
        }
    }
    if checker.errors.is_empty() {
        Ok(sections)
    } else {
        checker.errors.sort_by_key(|e| (e.line, e.column));
        Err(PolicyErrors(checker.errors))
    }
}

/// Whether a deny or ask pattern reaches `entry` (as the gate's own deny rules do).
pub(super) fn pattern_reaches(pattern: &str, entry: &ToolEntry) -> bool {
    DenyRule::parse(pattern).is_ok_and(|rule| rule.matches_entry(entry))
}

impl<'a> Checker<'a> {
    /// The tools the rules are checked against (none for a check of the shape alone).
    fn known(&self) -> Vec<Known<'a>> {
        match self.tools {
            Tools::Shape => Vec::new(),
            Tools::Linked => registry()
                .entries
                .iter()
                .map(|&e| Known::Linked(e))
                .collect(),
            Tools::Declared(tools) => tools.iter().map(Known::Declared).collect(),
        }
    }

    /// How errors name the tools checked against.
    fn which(&self) -> &'static str {
        match self.tools {
            Tools::Declared(_) => "tool the fleet's members declare",
            _ => "linked tool",
        }
    }

    fn error(&mut self, offset: usize, message: String) {
        let (line, column) = place(self.text, offset);
        self.errors.push(PolicyError {
            file: self.name.to_owned(),
            line,
            column,
            // Messages quote the file (a key, a pattern, a name), which an operator reads on a
            // terminal: nothing in it may hide, fake or reorder a line.
            message: escaped(&message).into_owned(),
        });
    }

    /// No two tables of `[principals]` or `[agents]` have names that read alike (SECURITY.md, names
    /// that read alike): a gate is narrowed by the table whose name reads as its principal's or
    /// agent's, so two such tables would be one.
    fn names_read_apart<'n>(
        &mut self,
        table: &str,
        names: impl Iterator<Item = &'n Spanned<String>>,
    ) {
        let mut seen: Vec<&Spanned<String>> = Vec::new();
        for name in names {
            if let Some(first) = seen
                .iter()
                .find(|first| crate::names::same(first.get_ref(), name.get_ref()))
            {
                let (line, _) = place(self.text, first.span().start);
                self.error(
                    name.span().start,
                    format!(
                        "[{table}]: {:?} reads as {:?} (line {line}): two tables of names that read \
                         alike are one",
                        name.get_ref(),
                        first.get_ref()
                    ),
                );
            }
            seen.push(name);
        }
    }

    /// A table of `[shadow]` holds only rules a gate can decide beside the enforced ones without
    /// changing the call: not budgets (they would count), nor the approval channel, nor rules on
    /// reads.
    fn logged_only(&mut self, doc: &RulesDoc) {
        let why = "a shadow table holds the rules a gate decides beside the enforced ones and \
                   records: ceiling, deny, ask, ask_at, taint and arguments";
        let mut refuse = |key: &str, at: Option<usize>| {
            if let Some(at) = at {
                self.error(at, format!("`{key}` cannot be logged only: {why}"));
            }
        };
        refuse("budgets", doc.budgets.first().map(|b| b.span().start));
        refuse("history", doc.history.first().map(|b| b.span().start));
        refuse(
            "out_of_band",
            doc.out_of_band.first().map(|b| b.span().start),
        );
        refuse(
            "out_of_band_at",
            doc.out_of_band_at.as_ref().map(|b| b.span().start),
        );
        for (key, list) in [
            ("deny_resources", &doc.deny_resources),
            ("deny_prompts", &doc.deny_prompts),
            ("record_resources", &doc.record_resources),
            ("record_prompts", &doc.record_prompts),
        ] {
            refuse(key, list.first().map(|b| b.span().start));
        }
    }

    fn at<T>(&self, spanned: &Spanned<impl Sized>, value: T) -> At<T> {
        let (line, column) = place(self.text, spanned.span().start);
        At {
            value,
            line,
            column,
        }
    }

    fn section(&mut self, scope: Scope, doc: RulesDoc) -> Section {
        let mut rules = Rules::default();
        if let Some(ceiling) = &doc.ceiling {
            rules.ceiling = self
                .named::<Mode>("ceiling", ceiling, &Mode::NAMES, "mode")
                .map(|m| self.at(ceiling, m));
        }
        if let Some(ask_at) = &doc.ask_at {
            rules.ask_at = self
                .named::<Risk>("ask_at", ask_at, &Risk::NAMES, "risk")
                .map(|r| self.at(ask_at, r));
        }
        if let Some(out_of_band_at) = &doc.out_of_band_at {
            rules.out_of_band_at = self
                .named::<Risk>("out_of_band_at", out_of_band_at, &Risk::NAMES, "risk")
                .map(|r| self.at(out_of_band_at, r));
        }
        if let Some(taint) = &doc.taint {
            if taint.get_ref() == "refuse" {
                rules.taint_refuses = Some(self.at(taint, ()));
            } else {
                self.error(
                    taint.span().start,
                    format!(
                        "taint is \"refuse\" or absent, not {:?}: a policy file can make the latch \
                         refuse the writes it would ask for, never the other way",
                        taint.get_ref()
                    ),
                );
            }
        }
        for (key, patterns, list) in [
            ("deny", &doc.deny, &mut rules.deny),
            ("ask", &doc.ask, &mut rules.ask),
            ("out_of_band", &doc.out_of_band, &mut rules.out_of_band),
        ] {
            for pattern in patterns {
                if self.pattern(key, pattern) {
                    let at = self.at(pattern, pattern.get_ref().clone());
                    if list.iter().any(|p: &At<String>| p.value == at.value) {
                        self.error(
                            pattern.span().start,
                            format!("`{}` is listed twice in `{key}`", at.value),
                        );
                    }
                    list.push(at);
                }
            }
        }
        for (action, kind, patterns) in [
            (ReadAction::Deny, ReadKind::Resource, &doc.deny_resources),
            (ReadAction::Deny, ReadKind::Prompt, &doc.deny_prompts),
            (
                ReadAction::Record,
                ReadKind::Resource,
                &doc.record_resources,
            ),
            (ReadAction::Record, ReadKind::Prompt, &doc.record_prompts),
        ] {
            for written in patterns {
                // Resource URIs are the handler's, known only when a request names one: a pattern is
                // checked for its syntax alone.
                let pattern = match ReadPattern::parse(kind, written.get_ref()) {
                    Ok(pattern) => pattern,
                    Err(why) => {
                        let key = ReadRuleDoc::key_of(action, kind);
                        self.error(written.span().start, format!("`{key}`: {why}"));
                        continue;
                    }
                };
                let rule = ReadRuleDoc {
                    action,
                    kind,
                    pattern,
                };
                if rules.reads.iter().any(|r| r.value == rule) {
                    self.error(
                        written.span().start,
                        format!(
                            "`{}` is listed twice in `{}`",
                            written.get_ref(),
                            rule.key()
                        ),
                    );
                }
                rules.reads.push(self.at(written, rule));
            }
        }
        for rule in &doc.arguments {
            if let Some(test) = self.argument(rule.get_ref()) {
                let argument = rule.get_ref();
                rules.arguments.push(self.at(
                    rule,
                    ArgumentRule {
                        tool: argument.tool.get_ref().clone(),
                        parameter: argument.parameter.get_ref().clone(),
                        test,
                    },
                ));
            }
        }
        for budget in &doc.budgets {
            if let Some(checked) = self.budget(budget.get_ref()) {
                let at = self.at(budget, checked);
                if rules
                    .budgets
                    .iter()
                    .any(|b| b.value.scope == at.value.scope)
                {
                    self.error(
                        budget.span().start,
                        "a second budget of the same scope in one table: write one".to_owned(),
                    );
                }
                rules.budgets.push(at);
            }
        }
        for rule in &doc.history {
            if let Some(checked) = self.history(rule.get_ref()) {
                rules.history.push(self.at(rule, checked));
            }
        }
        Section {
            scope,
            rules,
            shadow: false,
        }
    }

    /// Checks a budget: one scope, a number of calls the gate takes, a window it takes.
    fn budget(&mut self, doc: &BudgetDoc) -> Option<Budget> {
        let scopes = usize::from(doc.tool.is_some())
            + usize::from(doc.risk.is_some())
            + usize::from(doc.agent.is_some());
        if scopes != 1 {
            self.error(
                doc.calls.span().start,
                "a budget counts exactly one of `tool = \"id or glob\"`, `risk = \"RISK\"` or \
                 `agent = true`"
                    .to_owned(),
            );
            return None;
        }
        let scope = if let Some(tool) = &doc.tool {
            if !self.pattern("budgets.tool", tool) {
                return None;
            }
            BudgetScope::tool(tool.get_ref().clone())
        } else if let Some(risk) = &doc.risk {
            BudgetScope::RiskLevel(self.named::<Risk>(
                "budgets.risk",
                risk,
                &Risk::NAMES,
                "risk",
            )?)
        } else {
            let agent = doc.agent.as_ref().expect("one scope is given");
            if !agent.get_ref() {
                self.error(
                    agent.span().start,
                    "`agent = false` counts nothing; write `agent = true` or leave the budget out"
                        .to_owned(),
                );
                return None;
            }
            BudgetScope::Agent
        };
        let calls = *doc.calls.get_ref();
        let Some(calls) = u32::try_from(calls)
            .ok()
            .filter(|c| (1..=MAX_BUDGET_CALLS).contains(c))
        else {
            self.error(
                doc.calls.span().start,
                format!(
                    "`calls` is 1 to {MAX_BUDGET_CALLS}, not {calls} (no call at all is a `deny`)"
                ),
            );
            return None;
        };
        let Some(window) =
            window(doc.per.get_ref()).filter(|w| !w.is_zero() && *w <= MAX_BUDGET_WINDOW)
        else {
            self.error(
                doc.per.span().start,
                format!(
                    "`per` is a window such as \"30s\", \"10m\", \"1h\" or \"1d\", more than zero and at \
                     most {} s, not {:?}",
                    MAX_BUDGET_WINDOW.as_secs(),
                    doc.per.get_ref()
                ),
            );
            return None;
        };
        Some(Budget {
            scope,
            calls,
            window,
        })
    }

    /// Checks a rule over history: one of `after` and `not_after`, patterns that reach tools, a window
    /// the store keeps, and no tool that would have to follow itself.
    fn history(&mut self, doc: &HistoryDoc) -> Option<History> {
        let (order, other) = match (&doc.after, &doc.not_after) {
            (Some(after), None) => (HistoryOrder::After, after),
            (None, Some(not_after)) => (HistoryOrder::NotAfter, not_after),
            (Some(_), Some(second)) => {
                self.error(
                    second.span().start,
                    "a rule over history has one of `after` and `not_after`: write two rules"
                        .to_owned(),
                );
                return None;
            }
            (None, None) => {
                self.error(
                    doc.tool.span().start,
                    "a rule over history names the calls it looks back at: `after = \"id or glob\"` \
                     (only after one of them ended without an error) or `not_after = \"id or glob\"` \
                     (never after one of them ran)"
                        .to_owned(),
                );
                return None;
            }
        };
        let key = match order {
            HistoryOrder::After => "history.after",
            HistoryOrder::NotAfter => "history.not_after",
        };
        let reached = self.pattern("history.tool", &doc.tool) & self.pattern(key, other);
        let within =
            window(doc.within.get_ref()).filter(|w| !w.is_zero() && *w <= MAX_BUDGET_WINDOW);
        if within.is_none() {
            self.error(
                doc.within.span().start,
                format!(
                    "`within` is a window such as \"30s\", \"10m\", \"1h\" or \"1d\", more than zero \
                     and at most {} s, not {:?}",
                    MAX_BUDGET_WINDOW.as_secs(),
                    doc.within.get_ref()
                ),
            );
        }
        let per = match doc.per.as_ref().map(|per| (per, per.get_ref().as_str())) {
            None | Some((_, "principal")) => Some(HistoryPer::Principal),
            Some((_, "session")) => Some(HistoryPer::Session),
            Some((per, other)) => {
                self.error(
                    per.span().start,
                    format!(
                        "`per` is \"principal\" or \"session\", not {other:?}{}",
                        did_you_mean(other, &["principal", "session"])
                    ),
                );
                None
            }
        };
        if reached
            && order == HistoryOrder::After
            && let Some(both) = self
                .known()
                .iter()
                .find(|k| k.reached_by(doc.tool.get_ref()) && k.reached_by(other.get_ref()))
        {
            let message = format!(
                "`{}` is both the tool and the call it must follow: its first call could never run",
                both.id()
            );
            self.error(other.span().start, message);
            return None;
        }
        Some(History {
            tool: doc.tool.get_ref().clone(),
            order,
            other: other.get_ref().clone(),
            within: within?,
            per: per?,
        })
        .filter(|_| reached)
    }

    /// The value of `key`, one of `names`; an error naming the key and the value where it is none.
    fn named<T: FromStr>(
        &mut self,
        key: &str,
        value: &Spanned<String>,
        names: &[&str],
        what: &str,
    ) -> Option<T> {
        match value.get_ref().parse() {
            Ok(parsed) => Some(parsed),
            Err(_) => {
                self.error(
                    value.span().start,
                    format!(
                        "`{key}`: {:?} is not a {what}: one of {}{}",
                        value.get_ref(),
                        names.join(", "),
                        did_you_mean(value.get_ref(), names)
                    ),
                );
                None
            }
        }
    }

    /// Checks a deny or ask pattern: valid, and reaching a linked tool.
    fn pattern(&mut self, key: &str, pattern: &Spanned<String>) -> bool {
        if let Err(error) = DenyRule::parse(pattern.get_ref()) {
            let message = match error {
                DenyRuleError::Invalid { pattern, reason } => {
                    format!("`{key}` pattern {pattern:?} is not valid: {reason}")
                }
                error => format!("`{key}`: {error}"),
            };
            self.error(pattern.span().start, message);
            return false;
        }
        if matches!(self.tools, Tools::Shape) {
            return true;
        }
        let known = self.known();
        if known.iter().any(|k| k.reached_by(pattern.get_ref())) {
            return true;
        }
        let ids: Vec<&str> = known.iter().map(Known::id).collect();
        let message = format!(
            "`{key}` pattern {:?} matches no {}, so it does nothing{}",
            pattern.get_ref(),
            self.which(),
            did_you_mean(pattern.get_ref(), &ids)
        );
        self.error(pattern.span().start, message);
        false
    }

    /// Checks an argument rule against its tool's parameters.
    fn argument(&mut self, doc: &ArgumentDoc) -> Option<ArgumentTest> {
        if matches!(self.tools, Tools::Shape) {
            return self.test_alone(doc);
        }
        let known = self.known();
        let id = doc.tool.get_ref();
        let Some(tool) = known.iter().find(|k| k.id() == id) else {
            let ids: Vec<&str> = known.iter().map(Known::id).collect();
            let message = format!(
                "no {} has the id {id:?}{}",
                self.which(),
                did_you_mean(id, &ids)
            );
            self.error(doc.tool.span().start, message);
            return None;
        };
        let parameter = doc.parameter.get_ref();
        let types = match parameter_types(tool.parameters(), parameter) {
            Ok(types) => types,
            Err(why) => {
                self.error(doc.parameter.span().start, format!("tool `{id}`: {why}"));
                return None;
            }
        };
        if tool.redacts(parameter) {
            self.error(
                doc.parameter.span().start,
                format!(
                    "tool `{id}` redacts `{parameter}`: the gate never reads its value, so no rule \
                     can judge it"
                ),
            );
            return None;
        }
        if !self.one_test(doc) {
            return None;
        }
        let accepts = |kind: &str| types.as_ref().is_none_or(|t| t.iter().any(|t| t == kind));
        if !doc.refuse.is_empty() {
            if !accepts("string") && !accepts("array") {
                self.mismatch(&doc.refuse[0], id, parameter, "text patterns", &types);
                return None;
            }
            let mut globs = Vec::new();
            for glob in &doc.refuse {
                if glob.get_ref().is_empty() {
                    self.error(
                        glob.span().start,
                        "an empty pattern refuses only empty text; write the text to refuse"
                            .to_owned(),
                    );
                    return None;
                }
                globs.push(glob.get_ref().as_str().into());
            }
            return Some(ArgumentTest::Refuse(globs));
        }
        if let Some(values) = &doc.one_of {
            if values.get_ref().is_empty() {
                self.error(
                    values.span().start,
                    "`one_of = []` refuses every call; use `deny` to say so".to_owned(),
                );
                return None;
            }
            let mut allowed = Vec::new();
            for value in values.get_ref() {
                let (json, kind) = match value {
                    toml::Value::String(s) => (Value::from(s.as_str()), "string"),
                    toml::Value::Integer(i) => (Value::from(*i), "integer"),
                    toml::Value::Float(f) => (Value::from(*f), "number"),
                    toml::Value::Boolean(b) => (Value::from(*b), "boolean"),
                    _ => {
                        self.error(
                            values.span().start,
                            "`one_of` lists text, numbers or booleans".to_owned(),
                        );
                        return None;
                    }
                };
                let fits = accepts(kind) || (kind == "integer" && accepts("number"));
                if !fits {
                    self.mismatch(values, id, parameter, &format!("{kind} values"), &types);
                    return None;
                }
                allowed.push(json);
            }
            return Some(ArgumentTest::OneOf(allowed));
        }
        let (min, max) = (doc.min.as_ref(), doc.max.as_ref());
        if !accepts("integer") && !accepts("number") {
            let at = min.or(max).expect("one bound is given");
            self.mismatch(at, id, parameter, "a numeric range", &types);
            return None;
        }
        let (lo, hi) = (self.bound(min)?, self.bound(max)?);
        if let (Some(l), Some(h)) = (&lo, &hi)
            && compare(l, h) == Some(std::cmp::Ordering::Greater)
        {
            let at = min.expect("a lower bound is given");
            self.error(
                at.span().start,
                format!("`min` ({l}) is above `max` ({h}): the rule would refuse every call"),
            );
            return None;
        }
        Some(ArgumentTest::Range { min: lo, max: hi })
    }

    /// A bound of a range, as written: an integer kept exact, a finite float. `Some(None)` where there
    /// is none; `None` (an error) where it is not a number.
    fn bound(&mut self, bound: Option<&Spanned<toml::Value>>) -> Option<Option<Number>> {
        let Some(bound) = bound else {
            return Some(None);
        };
        let number = match bound.get_ref() {
            toml::Value::Integer(i) => Some(Number::from(*i)),
            toml::Value::Float(f) => Number::from_f64(*f),
            _ => None,
        };
        if number.is_none() {
            self.error(
                bound.span().start,
                "`min` and `max` are numbers (an integer, or a finite float)".to_owned(),
            );
        }
        number.map(Some)
    }

    /// Whether the rule says exactly one test; an error where it does not.
    fn one_test(&mut self, doc: &ArgumentDoc) -> bool {
        let kinds = usize::from(!doc.refuse.is_empty())
            + usize::from(doc.one_of.is_some())
            + usize::from(doc.min.is_some() || doc.max.is_some());
        if kinds != 1 {
            self.error(
                doc.parameter.span().start,
                "an argument rule says exactly one of `refuse = [globs]`, `one_of = [values]`, or \
                 `min`/`max`"
                    .to_owned(),
            );
        }
        kinds == 1
    }

    /// The rule's test, checked without the tool's parameters.
    fn test_alone(&mut self, doc: &ArgumentDoc) -> Option<ArgumentTest> {
        if !self.one_test(doc) {
            return None;
        }
        Some(ArgumentTest::Range {
            min: None,
            max: None,
        })
    }

    fn mismatch<T>(
        &mut self,
        at: &Spanned<T>,
        id: &str,
        parameter: &str,
        rule: &str,
        types: &Option<Vec<String>>,
    ) {
        let shown = types
            .as_ref()
            .map_or("unknown".to_owned(), |t| t.join(" or "));
        self.error(
            at.span().start,
            format!(
                "tool `{id}`'s parameter `{parameter}` is {shown}: a rule of {rule} cannot judge it"
            ),
        );
    }

    /// Rules that another rule makes dead: an `ask`, an `out_of_band` or an argument rule on a tool
    /// every gate it reaches refuses anyway, and a ceiling, `ask_at` or `out_of_band_at` that
    /// `[defaults]` already holds lower.
    fn shadowed(&mut self, sections: &[Section]) {
        let known = self.known();
        let defaults = sections.iter().find(|s| s.scope == Scope::Defaults);
        for section in sections {
            let denies: Vec<&At<String>> = defaults
                .into_iter()
                .chain((section.scope != Scope::Defaults).then_some(section))
                .flat_map(|s| &s.rules.deny)
                .collect();
            let denied = |tool: &Known<'_>| denies.iter().find(|d| tool.reached_by(&d.value));
            for (key, list) in [
                ("ask", &section.rules.ask),
                ("out_of_band", &section.rules.out_of_band),
            ] {
                for rule in list {
                    let reached: Vec<&Known<'_>> =
                        known.iter().filter(|k| k.reached_by(&rule.value)).collect();
                    if let Some(by) = reached
                        .iter()
                        .map(|e| denied(e))
                        .collect::<Option<Vec<_>>>()
                        .and_then(|d| d.first().copied())
                    {
                        let message = format!(
                            "`{key}` {:?} is dead: every tool it reaches is denied (by {:?} at line \
                             {})",
                            rule.value, by.value, by.line
                        );
                        self.errors.push(self.at_error(rule, message));
                    }
                }
            }
            for rule in &section.rules.arguments {
                if let Some(tool) = known.iter().find(|k| k.id() == rule.value.tool)
                    && let Some(by) = denied(tool)
                {
                    let message = format!(
                        "this argument rule is dead: `{}` is denied (by {:?} at line {})",
                        rule.value.tool, by.value, by.line
                    );
                    self.errors.push(self.at_error(rule, message));
                }
            }
            let Some(defaults) = defaults.filter(|_| section.scope != Scope::Defaults) else {
                continue;
            };
            if let (Some(own), Some(held)) = (&section.rules.ceiling, &defaults.rules.ceiling)
                && own.value >= held.value
            {
                let message = format!(
                    "this ceiling ({}) does nothing: [defaults] holds every gate at {} (line {})",
                    own.value, held.value, held.line
                );
                self.errors.push(self.at_error(own, message));
            }
            if let (Some(own), Some(held)) = (&section.rules.ask_at, &defaults.rules.ask_at)
                && own.value >= held.value
            {
                let message = format!(
                    "this ask_at ({}) does nothing: [defaults] asks from {} (line {})",
                    own.value, held.value, held.line
                );
                self.errors.push(self.at_error(own, message));
            }
            if let (Some(own), Some(held)) = (
                &section.rules.out_of_band_at,
                &defaults.rules.out_of_band_at,
            ) && own.value >= held.value
            {
                let message = format!(
                    "this out_of_band_at ({}) does nothing: [defaults] keeps every call from {} for \
                     an operator (line {})",
                    own.value, held.value, held.line
                );
                self.errors.push(self.at_error(own, message));
            }
        }
    }

    fn at_error<T>(&self, at: &At<T>, message: String) -> PolicyError {
        PolicyError {
            file: self.name.to_owned(),
            line: at.line,
            column: at.column,
            message: escaped(&message).into_owned(),
        }
    }
}

/// The JSON types a tool's parameter takes (`None`: its schema does not say), or why a rule cannot
/// name it.
fn parameter_types(schema: Option<Value>, parameter: &str) -> Result<Option<Vec<String>>, String> {
    let Some(schema) = schema else {
        return Err(
            "its parameters are known only for a `callable` tool: declare it `callable`, or write no \
             argument rule for it"
                .to_owned(),
        );
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    let Some(property) = properties.and_then(|p| p.get(parameter)) else {
        let names: Vec<&str> = properties
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        return Err(format!(
            "it has no parameter `{parameter}` (it has {}){}",
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            },
            did_you_mean(parameter, &names)
        ));
    };
    Ok(match property.get("type") {
        Some(Value::String(t)) => Some(vec![t.clone()]),
        Some(Value::Array(ts)) => Some(
            ts.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
        ),
        _ => None,
    })
}

/// A window written as a number and a unit: `s`, `m`, `h` or `d`.
fn window(text: &str) -> Option<std::time::Duration> {
    let text = text.trim();
    let unit = match text.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    let number: u64 = text[..text.len() - 1].parse().ok()?;
    number.checked_mul(unit).map(std::time::Duration::from_secs)
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
pub(super) fn place(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::super::{Direction, PolicyFile};
    use toolgate_policy::Risk;

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

    #[test]
    fn rules_on_reads_are_checked_for_their_syntax_with_their_places() {
        let text = "format = 1\n\
                    [defaults]\n\
                    deny_resources = [\"cloud://inventory*\", \"\"]\n\
                    record_prompts = [\"tri\u{200b}age\"]\n\
                    [principals.alice]\n\
                    deny_prompts = [\"triage\", \"triage\"]\n\
                    record_resources = [\"cloud://a b\"]\n";
        assert_eq!(
            errors(text),
            [
                "3:41: `deny_resources`: a resource URI pattern is never empty",
                "4:19: `record_prompts`: a prompt name pattern holds U+200B, a character a reader \
                 cannot see or that reorders text",
                "6:27: `triage` is listed twice in `deny_prompts`",
                "7:21: `record_resources`: a resource URI pattern holds U+0020, a blank, which no \
                 URI holds",
            ]
        );
        // A close key is suggested, as for every key.
        assert_eq!(
            errors("format = 1\n[defaults]\ndeny_resource = [\"x\"]\n"),
            ["3:1: unknown key `deny_resource`; did you mean `deny_resources`?"]
        );
        // A pattern need not reach anything known: the handler's URIs are known only when read.
        let file = PolicyFile::parse(
            "ops.toml",
            "format = 1\n[agents.bot]\ndeny_resources = [\"nothing://*\"]\n",
        )
        .expect("checks");
        let narrowing = file.narrowing(None, Some("bot"));
        assert_eq!(narrowing.reads.deny.len(), 1);
        assert_eq!(
            &*narrowing.reads.deny[0].rule,
            "deny_resources \"nothing://*\" (ops.toml:3:19)"
        );
        assert!(file.narrowing(None, Some("other")).reads.deny.is_empty());
    }

    #[test]
    fn a_deny_or_record_added_narrows_and_removed_widens() {
        let old = PolicyFile::parse(
            "old.toml",
            "format = 1\n[defaults]\ndeny_resources = [\"cloud://inventory*\"]\n",
        )
        .expect("checks");
        let new = PolicyFile::parse(
            "new.toml",
            "format = 1\n[defaults]\nrecord_resources = [\"cloud://inventory*\"]\n\
             [principals.alice]\ndeny_prompts = [\"triage\"]\n",
        )
        .expect("checks");
        let diff = old.diff(&new);
        let changes: Vec<(Direction, &str, &str)> = diff
            .changes
            .iter()
            .map(|c| (c.direction, c.scope.as_str(), c.what.as_str()))
            .collect();
        assert_eq!(
            changes,
            [
                (
                    Direction::Narrows,
                    "[defaults]",
                    "record_resources \"cloud://inventory*\" added, line 3"
                ),
                (
                    Direction::Narrows,
                    "[principals.\"alice\"]",
                    "deny_prompts \"triage\" added, line 5"
                ),
                (
                    Direction::Widens,
                    "[defaults]",
                    "deny_resources \"cloud://inventory*\" removed (old line 3)"
                ),
            ]
        );
        assert!(diff.widens());
        assert!(!new.diff(&new).widens());
    }

    /// The slot of a tool the unit tests register (`gate::decide::tests`).
    fn slot(id: &str) -> usize {
        let entry = crate::registry::registry().entry(id).expect("a test tool");
        entry.slot.load(std::sync::atomic::Ordering::Relaxed) as usize
    }

    #[test]
    fn the_approval_channel_keys_are_refused_as_the_files_other_bad_values_are() {
        let text = "format = 1\n\
                    [defaults]\n\
                    out_of_band = [\"scope_test.low_all\", \"scope_test.nothing*\", \"scope test\"]\n\
                    out_of_band_at = \"HIGH\"\n\
                    deny = [\"scope_test.read_full\"]\n\
                    [principals.alice]\n\
                    out_of_band = [\"scope_test.read_full\", \"scope_test.low_all\", \"scope_test.low_all\"]\n\
                    [agents.bot]\n\
                    out_of_band_at = \"LOWWRITE\"\n";
        let found = errors(text);
        assert_eq!(found.len(), 6, "{found:#?}");
        assert!(
            found[0].starts_with(
                "3:38: `out_of_band` pattern \"scope_test.nothing*\" matches no linked tool, so it \
                 does nothing"
            ),
            "{}",
            found[0]
        );
        assert!(
            found[1]
                .starts_with("3:61: `out_of_band` pattern \"scope test\" is not valid: tool ids"),
            "{}",
            found[1]
        );
        assert!(
            found[2].starts_with(
                "4:18: `out_of_band_at`: \"HIGH\" is not a risk: one of READ_ONLY, PROPOSE_ONLY, \
                 LOW_WRITE, HIGH_WRITE"
            ),
            "{}",
            found[2]
        );
        // A rule on a tool every gate it reaches refuses is dead, as an `ask` on it is.
        assert!(
            found[3].starts_with(
                "7:16: `out_of_band` \"scope_test.read_full\" is dead: every tool it reaches is \
                 denied (by \"scope_test.read_full\" at line 5)"
            ),
            "{}",
            found[3]
        );
        assert_eq!(
            found[4],
            "7:62: `scope_test.low_all` is listed twice in `out_of_band`"
        );
        assert!(
            found[5].starts_with("9:18: `out_of_band_at`: \"LOWWRITE\" is not a risk")
                && found[5].ends_with("did you mean `LOW_WRITE`?"),
            "{}",
            found[5]
        );
        // A table's `out_of_band_at` at or above the defaults' does nothing, as an `ask_at` does.
        assert_eq!(
            errors(
                "format = 1\n[defaults]\nout_of_band_at = \"LOW_WRITE\"\n\
                 [principals.alice]\nout_of_band_at = \"HIGH_WRITE\"\n"
            ),
            [
                "5:18: this out_of_band_at (HIGH_WRITE) does nothing: [defaults] keeps every call \
                 from LOW_WRITE for an operator (line 3)"
            ]
        );
        assert_eq!(
            errors("format = 1\n[defaults]\nout_of_bands = [\"x\"]\n"),
            ["3:1: unknown key `out_of_bands`; did you mean `out_of_band`?"]
        );
    }

    #[test]
    fn the_approval_channel_keys_reach_the_gates_their_tables_are_for() {
        let file = PolicyFile::parse(
            "ops.toml",
            "format = 1\n\
             [defaults]\n\
             out_of_band_at = \"HIGH_WRITE\"\n\
             [principals.alice]\n\
             out_of_band = [\"scope_test.low_*\"]\n\
             [agents.bot]\n\
             out_of_band_at = \"PROPOSE_ONLY\"\n",
        )
        .expect("checks");
        let (low, read) = (slot("scope_test.low_all"), slot("scope_test.read_all"));
        let kept = |principal, agent, slot, risk| {
            file.narrowing(principal, agent)
                .out_of_band(slot, risk)
                .map(|rule| rule.to_string())
        };
        // By name, whatever the risk, for alice alone.
        assert_eq!(
            kept(Some("alice"), None, low, Risk::LowWrite).as_deref(),
            Some("out_of_band \"scope_test.low_*\" (ops.toml:5:16)")
        );
        assert_eq!(kept(Some("bob"), None, low, Risk::LowWrite), None);
        assert_eq!(kept(None, None, low, Risk::LowWrite), None);
        // By the risk a call is judged at, not the tool's declared one: the same tool, escalated.
        assert_eq!(
            kept(Some("bob"), None, low, Risk::HighWrite).as_deref(),
            Some("out_of_band_at HIGH_WRITE (ops.toml:3:18)")
        );
        assert_eq!(kept(None, None, read, Risk::ReadOnly), None);
        // The lowest `out_of_band_at` of the tables that apply wins.
        assert_eq!(
            kept(None, Some("bot"), read, Risk::ProposeOnly).as_deref(),
            Some("out_of_band_at PROPOSE_ONLY (ops.toml:7:18)")
        );
        assert_eq!(kept(None, Some("bot"), read, Risk::ReadOnly), None);
        assert!(
            PolicyFile::parse("ops.toml", "format = 1\n")
                .unwrap()
                .narrowing(Some("alice"), Some("bot"))
                .out_of_band(low, Risk::HighWrite)
                .is_none()
        );
    }

    #[test]
    fn a_gate_asks_the_policy_it_follows_now() {
        use crate::gate::Gate;
        use crate::policy_file::LivePolicy;
        let entry = |id| crate::registry::registry().entry(id).expect("a test tool");
        let live = LivePolicy::new(PolicyFile::parse("ops.toml", "format = 1\n").unwrap());
        let gate = Gate::builder()
            .mode(toolgate_policy::Mode::FullAuto)
            .principal("alice")
            .policy(live.clone())
            .build()
            .unwrap();
        let high = entry("scope_test.high_all");
        assert!(!gate.approved_out_of_band(high, Risk::HighWrite));
        live.replace(
            PolicyFile::parse(
                "ops.toml",
                "format = 1\n[principals.alice]\nout_of_band = [\"scope_test.high_all\"]\n",
            )
            .unwrap(),
            "ops",
        );
        assert!(gate.approved_out_of_band(high, Risk::HighWrite));
        assert!(!gate.approved_out_of_band(entry("scope_test.low_all"), Risk::HighWrite));
        live.replace(
            PolicyFile::parse(
                "ops.toml",
                "format = 1\n[defaults]\nout_of_band_at = \"LOW_WRITE\"\n",
            )
            .unwrap(),
            "ops",
        );
        assert!(!gate.approved_out_of_band(high, Risk::ProposeOnly));
        assert!(gate.approved_out_of_band(entry("scope_test.low_all"), Risk::LowWrite));
    }

    #[test]
    fn explain_says_which_rule_keeps_a_call_for_an_operator() {
        let file = PolicyFile::parse(
            "ops.toml",
            "format = 1\n[principals.alice]\nout_of_band = [\"scope_test.high_all\", \"scope_test.read_all\"]\n",
        )
        .expect("checks");
        let explain = |principal, tool| {
            file.explain(
                principal,
                None,
                toolgate_policy::Mode::FullAuto,
                tool,
                &serde_json::json!({}),
            )
            .unwrap()
        };
        let kept = explain(Some("alice"), "scope_test.high_all");
        assert_eq!(kept.decision, "asks for an approval");
        assert_eq!(
            kept.approval.as_deref(),
            Some("out_of_band \"scope_test.high_all\" (ops.toml:3:16)")
        );
        assert!(
            kept.to_string().ends_with(
                "approval: out of band only, by out_of_band \"scope_test.high_all\" (ops.toml:3:16)\n"
            ),
            "{kept}"
        );
        // Another principal's call asks, and a client's form may answer it.
        let asked = explain(Some("bob"), "scope_test.high_all");
        assert_eq!(asked.decision, "asks for an approval");
        assert_eq!(asked.approval, None);
        assert!(!asked.to_string().contains("approval:"), "{asked}");
        // A call that asks for nobody has no channel to keep.
        let allowed = explain(Some("alice"), "scope_test.read_all");
        assert_eq!(allowed.decision, "allowed");
        assert_eq!(allowed.approval, None);
    }

    #[test]
    fn an_approval_channel_rule_added_narrows_and_removed_widens() {
        let old = PolicyFile::parse(
            "old.toml",
            "format = 1\n[defaults]\nout_of_band = [\"scope_test.high_all\"]\nout_of_band_at = \"HIGH_WRITE\"\n\
             [agents.bot]\nout_of_band_at = \"LOW_WRITE\"\n",
        )
        .expect("checks");
        let new = PolicyFile::parse(
            "new.toml",
            "format = 1\n[defaults]\nout_of_band_at = \"LOW_WRITE\"\n\
             [principals.alice]\nout_of_band = [\"scope_test.low_*\"]\n",
        )
        .expect("checks");
        let changes = |old: &PolicyFile, new: &PolicyFile| -> Vec<(Direction, String, String)> {
            old.diff(new)
                .changes
                .into_iter()
                .map(|c| (c.direction, c.scope, c.what))
                .collect()
        };
        let owned = |d, s: &str, w: &str| (d, s.to_owned(), w.to_owned());
        assert_eq!(
            changes(&old, &new),
            [
                owned(
                    Direction::Narrows,
                    "[defaults]",
                    "out_of_band_at LOW_WRITE (was HIGH_WRITE), line 3"
                ),
                owned(
                    Direction::Narrows,
                    "[principals.\"alice\"]",
                    "out_of_band \"scope_test.low_*\" added, line 5"
                ),
                owned(
                    Direction::Widens,
                    "[defaults]",
                    "out_of_band \"scope_test.high_all\" removed (old line 3)"
                ),
                owned(
                    Direction::Widens,
                    "[agents.\"bot\"]",
                    "out_of_band_at LOW_WRITE removed (old line 6)"
                ),
            ]
        );
        assert!(old.diff(&new).widens());
        assert!(changes(&new, &old).contains(&owned(
            Direction::Widens,
            "[defaults]",
            "out_of_band_at HIGH_WRITE (was LOW_WRITE), line 4"
        )));
        assert!(!old.diff(&old).widens());
    }
}
