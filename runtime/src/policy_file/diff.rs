//! What a new policy file changes relative to the one before: each change narrows or widens.

use std::fmt;

use super::file::PolicyFile;
use super::model::{At, PolicyErrors, Rules, Scope};

/// Whether a change takes away or gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    /// The new file takes away more: a gate following it may refuse or ask where it did not, or keep
    /// for an operator a call a client's form approved.
    Narrows,
    /// The new file takes away less than the one before (never more than the code allows).
    Widens,
    /// A rule logged only (`[shadow]`) was added, removed or changed: gates record what it would
    /// have decided, and decide as before.
    Shadow,
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
                Direction::Shadow => "shadow ",
            };
            writeln!(f, "{word}  {}  {}", change.scope, change.what)?;
        }
        Ok(())
    }
}

impl PolicyFile {
    /// What the policy `new` changes relative to `old`, both checked for their shape only
    /// ([`PolicyFile::check_shape`]): for a program that links none of the tools, such as the
    /// `toolgate` command. [`PolicyFile::diff`] compares two files checked against the tools.
    pub fn diff_texts(old: (&str, &str), new: (&str, &str)) -> Result<Diff, PolicyErrors> {
        let old = PolicyFile::shaped(old.0, old.1)?;
        Ok(old.diff(&PolicyFile::shaped(new.0, new.1)?))
    }

    /// What `new` changes relative to `self`: every rule added, removed or changed, and whether
    /// that narrows or widens what gates following it allow.
    pub fn diff(&self, new: &PolicyFile) -> Diff {
        let mut scopes: Vec<(bool, &Scope)> = self
            .sections
            .iter()
            .chain(&new.sections)
            .map(|s| (s.shadow, &s.scope))
            .collect();
        scopes.sort();
        scopes.dedup();
        let empty = Rules::default();
        let rules = |file: &'_ PolicyFile, (shadow, scope): (bool, &Scope)| -> Rules {
            file.sections
                .iter()
                .find(|s| s.shadow == shadow && &s.scope == scope)
                .map_or_else(|| empty.clone(), |s| s.rules.clone())
        };
        let mut changes = Vec::new();
        for (shadow, scope) in scopes {
            let (before, after) = (rules(self, (shadow, scope)), rules(new, (shadow, scope)));
            let shown = scope.to_string();
            let shown = if shadow {
                format!("[shadow.{}", &shown[1..])
            } else {
                shown
            };
            let mut push = |direction, what: String| {
                changes.push(Change {
                    direction: if shadow { Direction::Shadow } else { direction },
                    scope: shown.clone(),
                    what,
                });
            };
            if let Some((direction, what)) = limit("ceiling", &before.ceiling, &after.ceiling) {
                push(direction, what);
            }
            if let Some((direction, what)) = limit("ask_at", &before.ask_at, &after.ask_at) {
                push(direction, what);
            }
            if let Some((direction, what)) = limit(
                "out_of_band_at",
                &before.out_of_band_at,
                &after.out_of_band_at,
            ) {
                push(direction, what);
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
                ("out_of_band", &before.out_of_band, &after.out_of_band),
            ] {
                list_changes(
                    old,
                    new,
                    |r| format!("{key} {:?}", r.value),
                    &mut push,
                    "removed",
                );
            }
            // A deny takes a read away; a record makes a read wait for the log, and be refused where
            // the log cannot write it: each added narrows, each removed widens.
            list_changes(
                &before.reads,
                &after.reads,
                |r| format!("{} {:?}", r.value.key(), r.value.pattern.as_str()),
                &mut push,
                "removed",
            );
            list_changes(
                &before.budgets,
                &after.budgets,
                |b| {
                    format!(
                        "budget of {} calls of {} per {} s",
                        b.value.calls,
                        b.value.scope,
                        b.value.window.as_secs()
                    )
                },
                &mut push,
                "removed or changed",
            );
            list_changes(
                &before.arguments,
                &after.arguments,
                |r| {
                    format!(
                        "argument rule on `{}`.`{}`",
                        r.value.tool, r.value.parameter
                    )
                },
                &mut push,
                "removed or changed",
            );
        }
        changes.sort_by_key(|c| c.direction);
        Diff { changes }
    }
}

/// The change of a limit that narrows as it goes down (a ceiling, `ask_at`, `out_of_band_at`), if it
/// changed.
fn limit<T: PartialOrd + fmt::Display>(
    key: &str,
    before: &Option<At<T>>,
    after: &Option<At<T>>,
) -> Option<(Direction, String)> {
    Some(match (before, after) {
        (Some(a), Some(b)) if b.value < a.value => (
            Direction::Narrows,
            format!("{key} {} (was {}), line {}", b.value, a.value, b.line),
        ),
        (Some(a), Some(b)) if b.value > a.value => (
            Direction::Widens,
            format!("{key} {} (was {}), line {}", b.value, a.value, b.line),
        ),
        (None, Some(b)) => (
            Direction::Narrows,
            format!("{key} {} added, line {}", b.value, b.line),
        ),
        (Some(a), None) => (
            Direction::Widens,
            format!("{key} {} removed (old line {})", a.value, a.line),
        ),
        _ => return None,
    })
}

/// The rules of a list `new` adds (each narrows) and removes (each widens) relative to `old`.
fn list_changes<T: PartialEq>(
    old: &[At<T>],
    new: &[At<T>],
    shown: impl Fn(&At<T>) -> String,
    push: &mut impl FnMut(Direction, String),
    gone: &str,
) {
    for added in new
        .iter()
        .filter(|n| !old.iter().any(|o| o.value == n.value))
    {
        push(
            Direction::Narrows,
            format!("{} added, line {}", shown(added), added.line),
        );
    }
    for removed in old
        .iter()
        .filter(|o| !new.iter().any(|n| n.value == o.value))
    {
        push(
            Direction::Widens,
            format!("{} {gone} (old line {})", shown(removed), removed.line),
        );
    }
}
