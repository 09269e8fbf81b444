//! What a new policy file changes relative to the one before: each change narrows or widens.

use std::fmt;

use super::file::PolicyFile;
use super::model::{ArgumentRule, At, Budget, Rules, Scope};

/// Whether a change takes away or gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    /// The new file takes away more: a gate following it may refuse or ask where it did not.
    Narrows,
    /// The new file takes away less than the one before (never more than the code allows).
    Widens,
}

/// One change between two policy files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Whether it narrows or widens.
    pub direction: Direction,
    /// The table it is in: `[defaults]`, `[principals."alice"]`, `[agents."bot"]`.
    pub scope: String,
    /// What changed, with the line of the new file (or the old one, for a rule removed).
    pub what: String,
}

/// What `new` changes relative to `old` ([`PolicyFile::diff`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Diff {
    /// Every change, narrowing ones first.
    pub changes: Vec<Change>,
}

impl Diff {
    /// Whether any change widens.
    pub fn widens(&self) -> bool {
        self.changes
            .iter()
            .any(|c| c.direction == Direction::Widens)
    }
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.changes.is_empty() {
            return writeln!(f, "no change to what the policy takes away");
        }
        for change in &self.changes {
            let word = match change.direction {
                Direction::Narrows => "narrows",
                Direction::Widens => "WIDENS ",
            };
            writeln!(f, "{word}  {}  {}", change.scope, change.what)?;
        }
        Ok(())
    }
}

impl PolicyFile {
    /// What `new` changes relative to `self`: every rule added, removed or changed, and whether
    /// that narrows or widens what gates following it allow.
    pub fn diff(&self, new: &PolicyFile) -> Diff {
        let mut scopes: Vec<&Scope> = self
            .sections
            .iter()
            .chain(&new.sections)
            .map(|s| &s.scope)
            .collect();
        scopes.sort();
        scopes.dedup();
        let empty = Rules::default();
        let rules = |file: &'_ PolicyFile, scope: &Scope| -> Rules {
            file.sections
                .iter()
                .find(|s| &s.scope == scope)
                .map_or_else(|| empty.clone(), |s| s.rules.clone())
        };
        let mut changes = Vec::new();
        for scope in scopes {
            let (before, after) = (rules(self, scope), rules(new, scope));
            let mut push = |direction, what: String| {
                changes.push(Change {
                    direction,
                    scope: scope.to_string(),
                    what,
                });
            };
            match (&before.ceiling, &after.ceiling) {
                (Some(a), Some(b)) if b.value < a.value => push(
                    Direction::Narrows,
                    format!("ceiling {} (was {}), line {}", b.value, a.value, b.line),
                ),
                (Some(a), Some(b)) if b.value > a.value => push(
                    Direction::Widens,
                    format!("ceiling {} (was {}), line {}", b.value, a.value, b.line),
                ),
                (None, Some(b)) => push(
                    Direction::Narrows,
                    format!("ceiling {} added, line {}", b.value, b.line),
                ),
                (Some(a), None) => push(
                    Direction::Widens,
                    format!("ceiling {} removed (old line {})", a.value, a.line),
                ),
                _ => {}
            }
            match (&before.ask_at, &after.ask_at) {
                (Some(a), Some(b)) if b.value < a.value => push(
                    Direction::Narrows,
                    format!("ask_at {} (was {}), line {}", b.value, a.value, b.line),
                ),
                (Some(a), Some(b)) if b.value > a.value => push(
                    Direction::Widens,
                    format!("ask_at {} (was {}), line {}", b.value, a.value, b.line),
                ),
                (None, Some(b)) => push(
                    Direction::Narrows,
                    format!("ask_at {} added, line {}", b.value, b.line),
                ),
                (Some(a), None) => push(
                    Direction::Widens,
                    format!("ask_at {} removed (old line {})", a.value, a.line),
                ),
                _ => {}
            }
            match (&before.taint_refuses, &after.taint_refuses) {
                (None, Some(b)) => push(
                    Direction::Narrows,
                    format!("taint = \"refuse\" added, line {}", b.line),
                ),
                (Some(a), None) => push(
                    Direction::Widens,
                    format!("taint = \"refuse\" removed (old line {})", a.line),
                ),
                _ => {}
            }
            for (key, old, new) in [
                ("deny", &before.deny, &after.deny),
                ("ask", &before.ask, &after.ask),
            ] {
                for added in new
                    .iter()
                    .filter(|n| !old.iter().any(|o| o.value == n.value))
                {
                    push(
                        Direction::Narrows,
                        format!("{key} {:?} added, line {}", added.value, added.line),
                    );
                }
                for removed in old
                    .iter()
                    .filter(|o| !new.iter().any(|n| n.value == o.value))
                {
                    push(
                        Direction::Widens,
                        format!(
                            "{key} {:?} removed (old line {})",
                            removed.value, removed.line
                        ),
                    );
                }
            }
            let budget = |b: &At<Budget>| {
                format!(
                    "budget of {} calls of {} per {} s",
                    b.value.calls,
                    b.value.scope,
                    b.value.window.as_secs()
                )
            };
            for added in after
                .budgets
                .iter()
                .filter(|n| !before.budgets.iter().any(|o| o.value == n.value))
            {
                push(
                    Direction::Narrows,
                    format!("{} added, line {}", budget(added), added.line),
                );
            }
            for removed in before
                .budgets
                .iter()
                .filter(|o| !after.budgets.iter().any(|n| n.value == o.value))
            {
                push(
                    Direction::Widens,
                    format!(
                        "{} removed or changed (old line {})",
                        budget(removed),
                        removed.line
                    ),
                );
            }
            let shown = |rule: &At<ArgumentRule>| {
                format!(
                    "argument rule on `{}`.`{}`",
                    rule.value.tool, rule.value.parameter
                )
            };
            for added in after
                .arguments
                .iter()
                .filter(|n| !before.arguments.iter().any(|o| o.value == n.value))
            {
                push(
                    Direction::Narrows,
                    format!("{} added, line {}", shown(added), added.line),
                );
            }
            for removed in before
                .arguments
                .iter()
                .filter(|o| !after.arguments.iter().any(|n| n.value == o.value))
            {
                push(
                    Direction::Widens,
                    format!(
                        "{} removed or changed (old line {})",
                        shown(removed),
                        removed.line
                    ),
                );
            }
        }
        changes.sort_by_key(|c| c.direction);
        Diff { changes }
    }
}
