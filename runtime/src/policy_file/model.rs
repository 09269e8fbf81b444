//! A policy file's rules as checked: whom each table is for, and every rule with its place.

use std::fmt;

use std::time::Duration;

use crate::gate::budget::BudgetScope;
pub(crate) use crate::gate::budget::{HistoryOrder, HistoryPer};
use crate::gate::narrowing::ArgumentTest;
use crate::gate::reads::{ReadKind, ReadPattern};
use crate::terminal::push_shown;
use toolgate_policy::{Mode, Risk};

/// Whom a table of rules is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Scope {
    Defaults,
    Principal(String),
    Agent(String),
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Defaults => f.write_str("[defaults]"),
            // Quoted as Rust quotes a string, then with what a reader cannot see drawn too: a table
            // whose name holds a blank that is no space never reads as another.
            Scope::Principal(p) => write!(f, "[principals.{}]", quoted(p)),
            Scope::Agent(a) => write!(f, "[agents.{}]", quoted(a)),
        }
    }
}

/// A table's name as Rust quotes a string, with every character a reader cannot see drawn too.
fn quoted(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    for c in format!("{name:?}").chars() {
        push_shown(&mut out, c);
    }
    out
}

#[derive(Debug, Clone)]
pub(crate) struct Section {
    pub(crate) scope: Scope,
    pub(crate) rules: Rules,
    /// A table of `[shadow]`: its rules are logged only, never enforced.
    pub(crate) shadow: bool,
}

/// One table of rules.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rules {
    pub(crate) ceiling: Option<At<Mode>>,
    pub(crate) deny: Vec<At<String>>,
    pub(crate) ask: Vec<At<String>>,
    pub(crate) ask_at: Option<At<Risk>>,
    /// Tools whose calls an operator approves, never a client's form (`out_of_band`), as written.
    pub(crate) out_of_band: Vec<At<String>>,
    /// The risk from which every call is approved by an operator only (`out_of_band_at`).
    pub(crate) out_of_band_at: Option<At<Risk>>,
    pub(crate) taint_refuses: Option<At<()>>,
    pub(crate) arguments: Vec<At<ArgumentRule>>,
    pub(crate) budgets: Vec<At<Budget>>,
    pub(crate) history: Vec<At<History>>,
    /// Resource URIs and prompt names the table denies (`deny_resources`, `deny_prompts`) and asks
    /// the log to record (`record_resources`, `record_prompts`), each a pattern as written.
    pub(crate) reads: Vec<At<ReadRuleDoc>>,
}

/// What a rule on reads does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadAction {
    Deny,
    Record,
}

/// A rule on reads as written: its key and its pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadRuleDoc {
    pub(crate) action: ReadAction,
    pub(crate) kind: ReadKind,
    pub(crate) pattern: ReadPattern,
}

impl ReadRuleDoc {
    /// The key it is written under.
    pub(crate) fn key(&self) -> &'static str {
        ReadRuleDoc::key_of(self.action, self.kind)
    }

    /// The key of rules of `action` on reads of `kind`.
    pub(crate) fn key_of(action: ReadAction, kind: ReadKind) -> &'static str {
        match (action, kind) {
            (ReadAction::Deny, ReadKind::Resource) => "deny_resources",
            (ReadAction::Deny, ReadKind::Prompt) => "deny_prompts",
            (ReadAction::Record, ReadKind::Resource) => "record_resources",
            (ReadAction::Record, ReadKind::Prompt) => "record_prompts",
        }
    }
}

/// A budget as written: at most `calls` calls of `scope` in any `window`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Budget {
    pub(crate) scope: BudgetScope,
    pub(crate) calls: u32,
    pub(crate) window: Duration,
}

/// A rule over the calls before this one, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct History {
    /// The calls it decides: an id or a glob.
    pub(crate) tool: String,
    pub(crate) order: HistoryOrder,
    /// The calls it looks back at: an id or a glob.
    pub(crate) other: String,
    pub(crate) within: Duration,
    pub(crate) per: HistoryPer,
}

/// An argument rule as written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ArgumentRule {
    pub(crate) tool: String,
    pub(crate) parameter: String,
    pub(crate) test: ArgumentTest,
}

impl PartialEq for ArgumentTest {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ArgumentTest::Refuse(a), ArgumentTest::Refuse(b)) => a == b,
            (ArgumentTest::OneOf(a), ArgumentTest::OneOf(b)) => a == b,
            (ArgumentTest::Range { min: a, max: b }, ArgumentTest::Range { min: c, max: d }) => {
                a == c && b == d
            }
            _ => false,
        }
    }
}

/// A value and where it is written.
#[derive(Debug, Clone)]
pub(crate) struct At<T> {
    pub(crate) value: T,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

/// One thing wrong with a policy file, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// The file's name, as given.
    pub file: String,
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    /// What is wrong, and what would be right.
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

impl std::error::Error for PolicyError {}

/// Everything wrong with a policy file, in the order of the text. The file was not used.
///
/// Its `Debug` form is its message, as `main` returning `Result<_, Box<dyn Error>>` prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct PolicyErrors(pub Vec<PolicyError>);

impl PolicyErrors {
    pub(crate) fn one(file: &str, line: usize, column: usize, message: String) -> PolicyErrors {
        PolicyErrors(vec![PolicyError {
            file: file.to_owned(),
            line,
            column,
            message,
        }])
    }
}

impl fmt::Display for PolicyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for PolicyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return f.debug_tuple("PolicyErrors").field(&self.0).finish();
        }
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for PolicyErrors {}
