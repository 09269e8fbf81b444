//! Turning a rule logged only on: the rule at a place moved from its `[shadow]` table to the
//! enforced table of the same scope, the rest of the file as written (comments, order, spacing).

use std::fmt;

use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, TableLike, Value};

use super::diff::{Diff, Direction};
use super::file::PolicyFile;
use super::model::{At, PolicyErrors, Scope, Section};
use toolgate_policy::{Mode, Risk};

/// A file with one of its rules logged only turned on ([`PolicyFile::promote`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Promoted {
    /// The file's new text: the old one with the rule moved, nothing else changed.
    pub text: String,
    /// The new file, checked.
    pub file: PolicyFile,
    /// The rule as written, with its table and place: `deny "payments.refund" of
    /// [shadow.defaults] (ops.toml:7:9)`.
    pub rule: String,
    /// The enforced table it is now in: `[defaults]`.
    pub to: String,
    /// What the new file changes relative to the old one: the enforced table narrowing, the shadow
    /// table losing the rule.
    pub diff: Diff,
}

/// Why a rule could not be turned on.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum PromoteError {
    /// The file does not check, before or after: every error.
    Check(PolicyErrors),
    /// The place names no rule of a `[shadow]` table, or is not `LINE:COLUMN` (or
    /// `FILE:LINE:COLUMN`, the place a record or the console shows).
    Place(String),
    /// The file could not be edited as its TOML is written (a table written inline where a rule
    /// must be added, say): what failed.
    Edit(String),
}

impl fmt::Display for PromoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PromoteError::Check(errors) => write!(f, "{errors}"),
            PromoteError::Place(why) | PromoteError::Edit(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for PromoteError {}

/// A rule of a shadow table, found by its place.
enum Found {
    Ceiling(Mode),
    Deny(String),
    Ask(String),
    AskAt(Risk),
    Taint,
    /// The argument rule at this index among its table's.
    Argument(usize),
}

impl PolicyFile {
    /// Turns on the rule logged only written at `place` of `text` (the file named `name`): the rule
    /// leaves its `[shadow]` table and joins the enforced table of the same scope (a ceiling or an
    /// `ask_at` there already keeps the stricter of the two). The rest of the text is kept as written.
    /// The new text is checked, and refused if it would widen anything.
    pub fn promote(name: &str, text: &str, place: &str) -> Result<Promoted, PromoteError> {
        let old = PolicyFile::parse(name, text).map_err(PromoteError::Check)?;
        let (line, column) = parse_place(name, place)?;
        let (section, found, at) = old
            .sections
            .iter()
            .filter(|section| section.shadow)
            .find_map(|section| find(section, line, column).map(|(found, at)| (section, found, at)))
            .ok_or_else(|| {
                PromoteError::Place(format!(
                    "{name}:{line}:{column} is the place of no rule of a [shadow] table (a \
                     ceiling, deny, ask, ask_at, taint or arguments rule); `policy explain` and \
                     the records' `rule_in_shadow` name the places"
                ))
            })?;
        let scope = &section.scope;
        let rule = format!("{at} of {} ({name}:{line}:{column})", shadow_name(scope));
        // Written back as it was read: its byte order mark and its line ends kept.
        let (bom, body) = match text.strip_prefix('\u{feff}') {
            Some(body) => ("\u{feff}", body),
            None => ("", text),
        };
        let crlf = body.contains("\r\n");
        let mut doc: DocumentMut = body
            .parse()
            .map_err(|e| PromoteError::Edit(format!("{name} is not TOML: {e}")))?;
        let path = path_of(scope);
        {
            let shadow = table_at(doc.as_table_mut(), &["shadow"], false)?;
            let from = table_at(shadow, &path, false)?;
            take_from(from, &found)?;
        }
        {
            let to = table_at(doc.as_table_mut(), &path, true)?;
            add_to(to, &found, body, name, &path)?;
        }
        prune(doc.as_table_mut());
        let mut new_text = doc.to_string();
        if crlf {
            new_text = new_text.replace("\r\n", "\n").replace('\n', "\r\n");
        }
        new_text.insert_str(0, bom);
        let file = PolicyFile::parse(name, &new_text).map_err(PromoteError::Check)?;
        let diff = old.diff(&file);
        if let Some(widening) = diff
            .changes
            .iter()
            .find(|c| c.direction == Direction::Widens)
        {
            return Err(PromoteError::Edit(format!(
                "turning the rule on would widen {}: {}",
                widening.scope, widening.what
            )));
        }
        Ok(Promoted {
            text: new_text,
            file,
            rule,
            to: scope.to_string(),
            diff,
        })
    }
}

/// `LINE:COLUMN`, or `FILE:LINE:COLUMN` with `FILE` the file's name.
fn parse_place(name: &str, place: &str) -> Result<(usize, usize), PromoteError> {
    let bad = || {
        PromoteError::Place(format!(
            "{place:?} is not a place: write LINE:COLUMN or {name}:LINE:COLUMN, as a record's \
             `rule_in_shadow` names it"
        ))
    };
    let (rest, column) = place.rsplit_once(':').ok_or_else(bad)?;
    let (file, line) = match rest.rsplit_once(':') {
        Some((file, line)) => (Some(file), line),
        None => (None, rest),
    };
    if let Some(file) = file.filter(|file| *file != name) {
        return Err(PromoteError::Place(format!(
            "{place:?} is a place in {file:?}, not in {name:?}"
        )));
    }
    let number = |text: &str| text.parse::<usize>().ok().filter(|n| *n > 0);
    Ok((
        number(line).ok_or_else(bad)?,
        number(column).ok_or_else(bad)?,
    ))
}

/// The rule of `section` at `line`:`column`, and how it is written.
fn find(section: &Section, line: usize, column: usize) -> Option<(Found, String)> {
    let here = |at: (usize, usize)| at == (line, column);
    let rules = &section.rules;
    if let Some(ceiling) = rules.ceiling.as_ref().filter(|c| here(place(c))) {
        let value = ceiling.value;
        return Some((Found::Ceiling(value), format!("ceiling = \"{value}\"")));
    }
    if let Some(deny) = rules.deny.iter().find(|d| here(place(d))) {
        let value = deny.value.clone();
        return Some((Found::Deny(value.clone()), format!("deny {value:?}")));
    }
    if let Some(ask) = rules.ask.iter().find(|a| here(place(a))) {
        let value = ask.value.clone();
        return Some((Found::Ask(value.clone()), format!("ask {value:?}")));
    }
    if let Some(at) = rules.ask_at.as_ref().filter(|a| here(place(a))) {
        let value = at.value;
        return Some((Found::AskAt(value), format!("ask_at = \"{value}\"")));
    }
    if rules.taint_refuses.as_ref().is_some_and(|t| here(place(t))) {
        return Some((Found::Taint, "taint = \"refuse\"".to_owned()));
    }
    let (index, argument) = rules
        .arguments
        .iter()
        .enumerate()
        .find(|(_, a)| here(place(a)))?;
    Some((
        Found::Argument(index),
        format!(
            "the rule on `{}` of `{}`",
            argument.value.parameter, argument.value.tool
        ),
    ))
}

fn place<T>(at: &At<T>) -> (usize, usize) {
    (at.line, at.column)
}

/// The keys of a scope's table under the file's root (or under `[shadow]`).
fn path_of(scope: &Scope) -> Vec<String> {
    match scope {
        Scope::Defaults => vec!["defaults".to_owned()],
        Scope::Principal(name) => vec!["principals".to_owned(), name.clone()],
        Scope::Agent(name) => vec!["agents".to_owned(), name.clone()],
    }
}

fn shadow_name(scope: &Scope) -> String {
    let enforced = scope.to_string();
    format!("[shadow.{}", enforced.trim_start_matches('['))
}

/// The table at `path` under `root`, made (as a table of its own) where `create` and missing.
fn table_at<'d, S: AsRef<str>>(
    root: &'d mut dyn TableLike,
    path: &[S],
    create: bool,
) -> Result<&'d mut dyn TableLike, PromoteError> {
    let mut table = root;
    for (depth, key) in path.iter().enumerate() {
        let key = key.as_ref();
        if create && table.get(key).is_none() {
            let mut new = Table::new();
            // A parent of the rule's table is written only through its children's headers.
            new.set_implicit(depth + 1 < path.len());
            table.insert(key, Item::Table(new));
        }
        table = table
            .get_mut(key)
            .and_then(Item::as_table_like_mut)
            .ok_or_else(|| PromoteError::Edit(format!("no table `{key}` to edit")))?;
    }
    Ok(table)
}

/// Takes the rule out of its shadow table.
fn take_from(table: &mut dyn TableLike, found: &Found) -> Result<(), PromoteError> {
    let missing = |key: &str| PromoteError::Edit(format!("the shadow table has no `{key}`"));
    match found {
        Found::Ceiling(_) => table
            .remove("ceiling")
            .map(drop)
            .ok_or_else(|| missing("ceiling")),
        Found::AskAt(_) => table
            .remove("ask_at")
            .map(drop)
            .ok_or_else(|| missing("ask_at")),
        Found::Taint => table
            .remove("taint")
            .map(drop)
            .ok_or_else(|| missing("taint")),
        Found::Deny(value) | Found::Ask(value) => {
            let key = if matches!(found, Found::Deny(_)) {
                "deny"
            } else {
                "ask"
            };
            let array = table
                .get_mut(key)
                .and_then(Item::as_array_mut)
                .ok_or_else(|| missing(key))?;
            let index = array
                .iter()
                .position(|v| v.as_str() == Some(value))
                .ok_or_else(|| missing(key))?;
            array.remove(index);
            // The new first element keeps no space after the bracket that the old one had.
            if index == 0
                && let Some(first) = array.get_mut(0)
            {
                first.decor_mut().set_prefix("");
            }
            if array.is_empty() {
                table.remove(key);
            }
            Ok(())
        }
        Found::Argument(index) => {
            let item = table
                .get_mut("arguments")
                .ok_or_else(|| missing("arguments"))?;
            let empty = match item {
                Item::ArrayOfTables(tables) => {
                    if *index >= tables.len() {
                        return Err(missing("arguments"));
                    }
                    tables.remove(*index);
                    tables.is_empty()
                }
                Item::Value(Value::Array(array)) => {
                    if *index >= array.len() {
                        return Err(missing("arguments"));
                    }
                    array.remove(*index);
                    array.is_empty()
                }
                _ => return Err(missing("arguments")),
            };
            if empty {
                table.remove("arguments");
            }
            Ok(())
        }
    }
}

/// Adds the rule to the enforced table: a ceiling or `ask_at` there keeps the stricter of the two.
fn add_to(
    table: &mut dyn TableLike,
    found: &Found,
    text: &str,
    name: &str,
    path: &[String],
) -> Result<(), PromoteError> {
    match found {
        Found::Ceiling(mode) => {
            let kept = table
                .get("ceiling")
                .and_then(Item::as_str)
                .and_then(|s| s.parse::<Mode>().ok());
            let value = kept.map_or(*mode, |kept| kept.min(*mode));
            table.insert("ceiling", toml_edit::value(value.as_str()));
        }
        Found::AskAt(risk) => {
            let kept = table
                .get("ask_at")
                .and_then(Item::as_str)
                .and_then(|s| s.parse::<Risk>().ok());
            let value = kept.map_or(*risk, |kept| kept.min(*risk));
            table.insert("ask_at", toml_edit::value(value.as_str()));
        }
        Found::Taint => {
            table.insert("taint", toml_edit::value("refuse"));
        }
        Found::Deny(value) | Found::Ask(value) => {
            let key = if matches!(found, Found::Deny(_)) {
                "deny"
            } else {
                "ask"
            };
            if table.get(key).is_none() {
                table.insert(key, toml_edit::value(toml_edit::Array::new()));
            }
            let array = table
                .get_mut(key)
                .and_then(Item::as_array_mut)
                .ok_or_else(|| PromoteError::Edit(format!("`{key}` of the table is not a list")))?;
            if !array.iter().any(|v| v.as_str() == Some(value)) {
                array.push(value.as_str());
            }
        }
        Found::Argument(index) => {
            // The rule as the shadow table wrote it, read again from the old text.
            let old: DocumentMut = text
                .parse()
                .map_err(|e| PromoteError::Edit(format!("{name} is not TOML: {e}")))?;
            let mut shadow_path = vec!["shadow".to_owned()];
            shadow_path.extend(path.iter().cloned());
            let mut item: &Item = old.as_item();
            for key in shadow_path
                .iter()
                .chain(std::iter::once(&"arguments".to_owned()))
            {
                item = item
                    .get(key)
                    .ok_or_else(|| PromoteError::Edit(format!("no `{key}` in the shadow table")))?;
            }
            let rule: Table = match item {
                Item::ArrayOfTables(tables) => tables.get(*index).cloned(),
                Item::Value(Value::Array(array)) => array
                    .get(*index)
                    .and_then(Value::as_inline_table)
                    .map(|inline| inline.clone().into_table()),
                _ => None,
            }
            .ok_or_else(|| PromoteError::Edit("the shadow argument rule is gone".to_owned()))?;
            match table.get_mut("arguments") {
                None => {
                    let mut tables = ArrayOfTables::new();
                    tables.push(rule);
                    table.insert("arguments", Item::ArrayOfTables(tables));
                }
                Some(Item::ArrayOfTables(tables)) => tables.push(rule),
                Some(Item::Value(Value::Array(array))) => {
                    array.push(Value::InlineTable(rule.into_inline_table()));
                }
                Some(_) => {
                    return Err(PromoteError::Edit(
                        "`arguments` of the table is not a list of rules".to_owned(),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Whether a table the move left empty goes: not where a comment is written above it, which is the
/// operator's and stays with its header.
fn goes(item: &Item) -> bool {
    let commented = |decor: &toml_edit::Decor| {
        decor
            .prefix()
            .and_then(|p| p.as_str())
            .is_some_and(|p| p.contains('#'))
    };
    match item {
        Item::Table(table) => table.is_empty() && !commented(table.decor()),
        Item::Value(Value::InlineTable(table)) => table.is_empty(),
        _ => false,
    }
}

/// Removes the tables of `[shadow]` the move left empty, and `[shadow]` itself if it is.
fn prune(root: &mut Table) {
    let Some(shadow) = root.get_mut("shadow").and_then(Item::as_table_like_mut) else {
        return;
    };
    for group in ["principals", "agents"] {
        if let Some(tables) = shadow.get_mut(group).and_then(Item::as_table_like_mut) {
            let empty: Vec<String> = tables
                .iter()
                .filter(|(_, item)| goes(item))
                .map(|(key, _)| key.to_owned())
                .collect();
            for key in empty {
                tables.remove(&key);
            }
        }
    }
    let empty: Vec<String> = shadow
        .iter()
        .filter(|(_, item)| goes(item))
        .map(|(key, _)| key.to_owned())
        .collect();
    for key in empty {
        shadow.remove(&key);
    }
    if root.get("shadow").is_some_and(goes) {
        root.remove("shadow");
    }
}
