//! A lockfile of the tools' manifests, so that a change to what a tool may do is reviewed like code.
//!
//! Commit a `tools.lock.json` next to `Cargo.toml` and add one test:
//!
//! ```no_run
//! # extern crate toolgate_runtime as toolgate;
//! #[test]
//! fn tools_match_the_lockfile() {
//!     toolgate::lockfile::assert_lockfile("tools.lock.json");
//! }
//! ```
//!
//! The test fails while the linked tools differ from the file, with a list of the differences that puts
//! first what widens an agent's power: **risk escalations** (a tool whose `risk_level` went up),
//! **newly allowed modes**, and **widenings** (a tool became `callable`, lost or changed its `escalate`
//! function, stopped redacting a parameter, started recording its arguments, or stopped declaring its
//! output untrusted); then new tools, removed
//! tools, and every other changed field, each line naming the tool and the old and new values. It also
//! fails when there is no tool to lock: a test binary that does not link the tools' crate would
//! otherwise lock `[]` and pass from then on. To accept the changes, run the tests once with
//! `TOOLGATE_LOCKFILE=overwrite` ([`LOCKFILE_ENV_VAR`]), which rewrites the file and passes, and commit the
//! file: its diff is what a reviewer reads. A missing lockfile fails the same way, saying how to create it.
//! CI should run without the variable.
//!
//! # The format
//!
//! Pretty-printed JSON (two-space indent, a final line break): an array of the tools sorted by id, each an
//! object with the manifest's keys in the order [`ToolManifest`] serializes them, except that `source`
//! keeps only `module_path`, then what the declaration says beyond the manifest: `callable`, `escalate`
//! (the function's path as written, or `null`), `redact` (sorted) and `record_arguments`:
//!
//! ```json
//! [
//!   {
//!     "id": "users.delete",
//!     "domain": "users",
//!     "description": "Delete a user account.",
//!     "risk_level": "HIGH_WRITE",
//!     "side_effects": true,
//!     "allowed_modes": [
//!       "FULL_AUTO"
//!     ],
//!     "idempotent": false,
//!     "open_world": false,
//!     "source": {
//!       "module_path": "app::users"
//!     },
//!     "callable": true,
//!     "escalate": null,
//!     "redact": [],
//!     "record_arguments": false
//!   }
//! ]
//! ```
//!
//! `source.line` is left out because it changes on every edit above a tool, which would make the file
//! churn with no change of meaning. `source.file` is left out because it is not portable: `file!()` is
//! relative to the workspace for the workspace's own crates but an absolute path, under the user's home,
//! for a dependency's, so a lockfile written on one machine would fail on another. `module_path` is stable
//! and still says where a tool lives; moving a tool to another module is a reviewable change.
//!
//! The file is compared by content, not by text: a reformatted file (or one whose line endings Git
//! converted) with the same tools passes. Unknown keys make it invalid; the four keys after `source` may
//! be absent (a lockfile written before they were locked), and then read as `false`, `null`, `[]` and
//! `false`, so that the check lists what they add.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::registry::{Behaviour, ToolManifest, manifests, registry};
use crate::terminal::escaped;
use toolgate_policy::ModeSet;
use toolgate_policy::Risk;

/// The environment variable that [`check`] and [`check_manifests`] read: `overwrite` rewrites the
/// lockfile; unset, empty or `check` only compares.
pub const LOCKFILE_ENV_VAR: &str = "TOOLGATE_LOCKFILE";

/// What a check does with the lockfile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// Compare, and fail on any difference or a missing file.
    Check,
    /// Write the file from the current manifests (unless it already says the same) and pass.
    Overwrite,
}

impl Update {
    /// Reads [`LOCKFILE_ENV_VAR`]: `overwrite` (any ASCII case) is [`Update::Overwrite`]; unset, empty or
    /// `check` is [`Update::Check`]; anything else is an error rather than a silent check.
    pub fn from_env() -> Result<Update, LockfileError> {
        let Some(value) = std::env::var_os(LOCKFILE_ENV_VAR) else {
            return Ok(Update::Check);
        };
        match value.to_str() {
            Some(v) if v.eq_ignore_ascii_case("overwrite") => Ok(Update::Overwrite),
            Some(v) if v.is_empty() || v.eq_ignore_ascii_case("check") => Ok(Update::Check),
            _ => Err(LockfileError::BadEnv {
                value: value.to_string_lossy().into_owned(),
            }),
        }
    }
}

/// Checks every linked tool ([`manifests()`]) against the lockfile at `path`, in the mode
/// [`Update::from_env`] reads.
///
/// A relative `path` is relative to the crate root: `CARGO_MANIFEST_DIR` as the environment gives it at
/// run time (Cargo sets it for tests), else the current directory. The error's `Debug` is its `Display`,
/// so `check(path).unwrap()` also fails with the readable list of changes.
pub fn check(path: impl AsRef<Path>) -> Result<(), LockfileError> {
    check_manifests(path, manifests())
}

/// [`check`], panicking with the list of changes: the one line a test needs.
#[track_caller]
pub fn assert_lockfile(path: impl AsRef<Path>) {
    if let Err(error) = check(path) {
        panic!("{error}");
    }
}

/// [`check`] of the given manifests rather than the linked ones.
pub fn check_manifests<I>(path: impl AsRef<Path>, manifests: I) -> Result<(), LockfileError>
where
    I: IntoIterator,
    I::Item: Borrow<ToolManifest>,
{
    check_with(path, manifests, Update::from_env()?)
}

/// [`check_manifests`] with the update mode given rather than read from the environment.
pub fn check_with<I>(
    path: impl AsRef<Path>,
    manifests: I,
    update: Update,
) -> Result<(), LockfileError>
where
    I: IntoIterator,
    I::Item: Borrow<ToolManifest>,
{
    let path = resolve(path.as_ref());
    let current = entries(manifests);
    if current.is_empty() {
        return Err(LockfileError::NothingToLock { path });
    }
    let existing = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(error) if error.kind() == io::ErrorKind::NotFound => None,
        Err(source) => return Err(LockfileError::Io { path, source }),
    };
    match update {
        Update::Overwrite => {
            let text = to_text(&current);
            if existing.as_deref() != Some(text.as_str()) {
                write_atomically(&path, &text).map_err(|source| LockfileError::Io {
                    path: path.clone(),
                    source,
                })?;
            }
            Ok(())
        }
        Update::Check => {
            let Some(text) = existing else {
                return Err(LockfileError::Missing { path });
            };
            let mut locked: Vec<Entry> =
                serde_json::from_str(&text).map_err(|source| LockfileError::Invalid {
                    path: path.clone(),
                    source,
                })?;
            sort(&mut locked);
            let changes = diff(&locked, &current);
            if changes.is_empty() {
                Ok(())
            } else {
                Err(LockfileError::Mismatch { path, changes })
            }
        }
    }
}

/// The lockfile text for `manifests`: what [`Update::Overwrite`] writes.
pub fn render<I>(manifests: I) -> String
where
    I: IntoIterator,
    I::Item: Borrow<ToolManifest>,
{
    to_text(&entries(manifests))
}

/// `path` made absolute against `CARGO_MANIFEST_DIR` (read at run time), else the current directory.
pub fn resolve(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_owned();
    }
    match std::env::var_os("CARGO_MANIFEST_DIR") {
        Some(root) => Path::new(&root).join(path),
        None => std::env::current_dir()
            .map(|dir| dir.join(path))
            .unwrap_or_else(|_| path.to_owned()),
    }
}

/// One tool as the lockfile records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    domain: Option<String>,
    description: String,
    risk_level: Risk,
    side_effects: bool,
    allowed_modes: ModeSet,
    idempotent: bool,
    open_world: bool,
    /// Absent where false, as in the manifest, so that lockfiles written before it still match.
    #[serde(default, skip_serializing_if = "is_false")]
    untrusted_output: bool,
    /// Absent where not declared, as in the manifest.
    #[serde(default, skip_serializing_if = "is_false")]
    irreversible: bool,
    /// Absent where not declared, as in the manifest.
    #[serde(default, skip_serializing_if = "is_false")]
    out_of_band: bool,
    /// Absent where not declared, as in the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<String>,
    source: EntrySource,
    /// Whether it can be called by name (and over MCP). Absent in a lockfile written before it was
    /// locked: read as `false`, so that the check lists it.
    #[serde(default)]
    callable: bool,
    #[serde(default)]
    escalate: Option<String>,
    #[serde(default)]
    redact: Vec<String>,
    #[serde(default)]
    record_arguments: bool,
    /// The `evidence` probe's path as written; absent where none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    evidence: Option<String>,
    /// The `rollback` function's path as written; absent where none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rollback: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntrySource {
    module_path: String,
}

impl From<&ToolManifest> for Entry {
    fn from(m: &ToolManifest) -> Entry {
        // What the declaration says beyond the manifest is the linked tool's of that id: a manifest of
        // no linked tool has none of it.
        let linked = registry().entry(m.id);
        let behaviour = linked.map_or(Behaviour::NONE, |entry| entry.behaviour);
        let mut redact: Vec<String> = behaviour.redact.iter().map(|&r| r.to_owned()).collect();
        redact.sort();
        Entry {
            id: m.id.to_owned(),
            domain: m.domain.map(str::to_owned),
            description: m.description.to_owned(),
            risk_level: m.risk_level,
            side_effects: m.side_effects,
            allowed_modes: m.allowed_modes,
            idempotent: m.idempotent,
            open_world: m.open_world,
            untrusted_output: m.untrusted_output,
            irreversible: m.irreversible,
            out_of_band: m.out_of_band,
            title: m.title.map(str::to_owned),
            target: m.target.map(str::to_owned),
            source: EntrySource {
                module_path: m.source.module_path.to_owned(),
            },
            callable: linked.is_some_and(|entry| entry.callable.is_some()),
            escalate: behaviour.escalate.map(str::to_owned),
            redact,
            record_arguments: behaviour.record_arguments,
            evidence: behaviour.evidence.map(str::to_owned),
            rollback: behaviour.rollback.map(str::to_owned),
        }
    }
}

/// `Widened` where what changed asked something of the call that it no longer asks.
fn widened_or_changed_by(widened: bool) -> ChangeKind {
    if widened {
        ChangeKind::Widened
    } else {
        ChangeKind::Changed
    }
}

fn entries<I>(manifests: I) -> Vec<Entry>
where
    I: IntoIterator,
    I::Item: Borrow<ToolManifest>,
{
    let mut entries: Vec<Entry> = manifests
        .into_iter()
        .map(|m| Entry::from(m.borrow()))
        .collect();
    sort(&mut entries);
    entries
}

/// By id, then (for duplicate ids, whose input order is arbitrary) by their JSON text.
fn sort(entries: &mut [Entry]) {
    entries.sort_by_cached_key(|e| {
        (
            e.id.clone(),
            serde_json::to_string(e).expect("an entry serializes"),
        )
    });
}

fn to_text(entries: &[Entry]) -> String {
    let mut text = crate::terminal::escaped_json(
        serde_json::to_string_pretty(entries).expect("an entry serializes"),
    );
    text.push('\n');
    text
}

/// Writes through a new temporary file and a rename, so that a concurrent reader never sees half a
/// file, and never through a symbolic link: one at the lockfile's name is refused.
fn write_atomically(path: &Path, text: &str) -> io::Result<()> {
    crate::files::replace(path, text.as_bytes())
}

/// The kind of a [`Change`], in the order the list of changes shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ChangeKind {
    /// A tool's `risk_level` went up.
    RiskEscalation,
    /// A tool's `allowed_modes` gained a mode.
    NewlyAllowedMode,
    /// A tool may do more or shows more than before: it became `callable`, its `escalate` function
    /// was removed or replaced, a parameter is no longer redacted, or it started recording its
    /// arguments.
    Widened,
    /// A tool that the lockfile lacks.
    NewTool,
    /// A tool of the lockfile that is gone.
    RemovedTool,
    /// Any other field changed: a lowered risk, a mode taken away, `callable` or `record_arguments`
    /// turned off, an `escalate` added, a parameter newly redacted, `side_effects`, `description`,
    /// `idempotent`, `open_world`, `domain` or `source.module_path`.
    Changed,
}

impl ChangeKind {
    fn label(self) -> &'static str {
        match self {
            ChangeKind::RiskEscalation => "risk escalation",
            ChangeKind::NewlyAllowedMode => "newly allowed mode",
            ChangeKind::Widened => "widened",
            ChangeKind::NewTool => "new tool",
            ChangeKind::RemovedTool => "removed tool",
            ChangeKind::Changed => "changed",
        }
    }
}

/// One difference between the lockfile and the current manifests.
///
/// Displays as one line: the kind, the tool id, then the field and its old and new values, such as
/// `risk escalation    users.delete: risk_level LOW_WRITE -> HIGH_WRITE`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Change {
    /// What kind of change.
    pub kind: ChangeKind,
    /// The tool's id.
    pub id: String,
    /// The field with its old and new values (`risk_level LOW_WRITE -> HIGH_WRITE`).
    pub detail: String,
}

impl fmt::Display for Change {
    /// One line: the id escaped for a terminal ([`escaped`]), the values in the detail quoted as Rust
    /// quotes them, which leaves no line terminator raw either.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<18} {}: {}",
            self.kind.label(),
            escaped(&self.id),
            escaped(&self.detail)
        )
    }
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn modes(set: ModeSet) -> String {
    let names: Vec<&str> = set.iter().map(|m| m.as_str()).collect();
    format!("[{}]", names.join(", "))
}

fn summary(e: &Entry) -> String {
    format!(
        "risk_level {}, allowed_modes {}, side_effects {}",
        e.risk_level,
        modes(e.allowed_modes),
        e.side_effects
    )
}

fn compare(old: &Entry, new: &Entry, out: &mut Vec<Change>) {
    let mut push = |kind, detail: String| {
        out.push(Change {
            kind,
            id: new.id.clone(),
            detail,
        });
    };
    if old.risk_level != new.risk_level {
        let kind = if new.risk_level > old.risk_level {
            ChangeKind::RiskEscalation
        } else {
            ChangeKind::Changed
        };
        push(
            kind,
            format!("risk_level {} -> {}", old.risk_level, new.risk_level),
        );
    }
    if old.allowed_modes != new.allowed_modes {
        let gained: Vec<&str> = new
            .allowed_modes
            .iter()
            .filter(|&m| !old.allowed_modes.contains(m))
            .map(|m| m.as_str())
            .collect();
        let transition = format!(
            "allowed_modes {} -> {}",
            modes(old.allowed_modes),
            modes(new.allowed_modes)
        );
        if gained.is_empty() {
            push(ChangeKind::Changed, transition);
        } else {
            push(
                ChangeKind::NewlyAllowedMode,
                format!("{transition} (now allowed in {})", gained.join(", ")),
            );
        }
    }
    if old.side_effects != new.side_effects {
        push(
            ChangeKind::Changed,
            format!("side_effects {} -> {}", old.side_effects, new.side_effects),
        );
    }
    if old.description != new.description {
        push(
            ChangeKind::Changed,
            format!("description {:?} -> {:?}", old.description, new.description),
        );
    }
    if old.idempotent != new.idempotent {
        push(
            ChangeKind::Changed,
            format!("idempotent {} -> {}", old.idempotent, new.idempotent),
        );
    }
    if old.open_world != new.open_world {
        push(
            ChangeKind::Changed,
            format!("open_world {} -> {}", old.open_world, new.open_world),
        );
    }
    // A tool that stops declaring its output untrusted no longer closes the taint latch.
    if old.untrusted_output != new.untrusted_output {
        push(
            if old.untrusted_output {
                ChangeKind::Widened
            } else {
                ChangeKind::Changed
            },
            format!(
                "untrusted_output {} -> {}",
                old.untrusted_output, new.untrusted_output
            ),
        );
    }
    // A tool that stops being irreversible, or stops reading evidence of its target or saying how it
    // is undone, asks less of whoever approves it.
    if old.irreversible != new.irreversible {
        push(
            widened_or_changed_by(old.irreversible),
            format!("irreversible {} -> {}", old.irreversible, new.irreversible),
        );
    }
    // Approved in band again: whoever drives the client may answer what only an operator did.
    if old.out_of_band != new.out_of_band {
        push(
            widened_or_changed_by(old.out_of_band),
            format!("out_of_band {} -> {}", old.out_of_band, new.out_of_band),
        );
    }
    let show = |v: &Option<String>| v.as_deref().unwrap_or("(none)").to_owned();
    if old.title != new.title {
        push(
            ChangeKind::Changed,
            format!("title {} -> {}", show(&old.title), show(&new.title)),
        );
    }
    if old.target != new.target {
        push(
            widened_or_changed_by(old.target.is_some() && old.irreversible),
            format!("target {} -> {}", show(&old.target), show(&new.target)),
        );
    }
    if old.evidence != new.evidence {
        push(
            widened_or_changed_by(old.evidence.is_some()),
            format!(
                "evidence {} -> {}",
                show(&old.evidence),
                show(&new.evidence)
            ),
        );
    }
    if old.rollback != new.rollback {
        push(
            widened_or_changed_by(old.rollback.is_some()),
            format!(
                "rollback {} -> {}",
                show(&old.rollback),
                show(&new.rollback)
            ),
        );
    }
    if old.domain != new.domain {
        let show = |d: &Option<String>| d.as_ref().map_or("null".to_owned(), |d| format!("{d:?}"));
        push(
            ChangeKind::Changed,
            format!("domain {} -> {}", show(&old.domain), show(&new.domain)),
        );
    }
    let widened_or_changed = |widened: bool| {
        if widened {
            ChangeKind::Widened
        } else {
            ChangeKind::Changed
        }
    };
    if old.callable != new.callable {
        push(
            widened_or_changed(new.callable),
            format!("callable {} -> {}", old.callable, new.callable),
        );
    }
    if old.escalate != new.escalate {
        let show = |e: &Option<String>| e.as_deref().unwrap_or("(none)").to_owned();
        push(
            widened_or_changed(old.escalate.is_some()),
            format!(
                "escalate {} -> {}",
                show(&old.escalate),
                show(&new.escalate)
            ),
        );
    }
    if old.redact != new.redact {
        let unredacted = old.redact.iter().any(|r| !new.redact.contains(r));
        push(
            widened_or_changed(unredacted),
            format!("redact {:?} -> {:?}", old.redact, new.redact),
        );
    }
    if old.record_arguments != new.record_arguments {
        push(
            widened_or_changed(new.record_arguments),
            format!(
                "record_arguments {} -> {}",
                old.record_arguments, new.record_arguments
            ),
        );
    }
    if old.source != new.source {
        push(
            ChangeKind::Changed,
            format!(
                "source.module_path {:?} -> {:?}",
                old.source.module_path, new.source.module_path
            ),
        );
    }
}

/// The changes from `old` to `new`, both sorted, in display order: by kind, then id.
fn diff(old: &[Entry], new: &[Entry]) -> Vec<Change> {
    let mut by_id: BTreeMap<&str, (Vec<&Entry>, Vec<&Entry>)> = BTreeMap::new();
    for e in old {
        by_id.entry(&e.id).or_default().0.push(e);
    }
    for e in new {
        by_id.entry(&e.id).or_default().1.push(e);
    }
    let mut changes = Vec::new();
    for (id, (olds, news)) in by_id {
        for i in 0..olds.len().max(news.len()) {
            match (olds.get(i), news.get(i)) {
                (Some(o), Some(n)) => compare(o, n, &mut changes),
                (None, Some(n)) => changes.push(Change {
                    kind: ChangeKind::NewTool,
                    id: id.to_owned(),
                    detail: format!("(absent) -> {}", summary(n)),
                }),
                (Some(o), None) => changes.push(Change {
                    kind: ChangeKind::RemovedTool,
                    id: id.to_owned(),
                    detail: format!("{} -> (absent)", summary(o)),
                }),
                (None, None) => {}
            }
        }
    }
    // Stable: within a kind, ids stay sorted and a tool's fields stay in field order.
    changes.sort_by_key(|c| c.kind);
    changes
}

/// Why a lockfile check failed.
///
/// `Debug` shows the same text as `Display`, so that `.unwrap()` and a test returning `Result` print the
/// list of changes readably.
#[non_exhaustive]
pub enum LockfileError {
    /// There is no lockfile at `path`.
    Missing {
        /// The resolved path.
        path: PathBuf,
    },
    /// Reading or writing the lockfile failed.
    Io {
        /// The resolved path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The file is not a lockfile: not JSON, a missing or unknown key, a bad value.
    Invalid {
        /// The resolved path.
        path: PathBuf,
        /// The error.
        source: serde_json::Error,
    },
    /// The current manifests differ from the lockfile.
    Mismatch {
        /// The resolved path.
        path: PathBuf,
        /// Every difference, in display order: risk escalations and newly allowed modes first.
        changes: Vec<Change>,
    },
    /// There is no tool to lock: the check (or the rewrite) would pass on an empty lockfile.
    NothingToLock {
        /// The resolved path.
        path: PathBuf,
    },
    /// [`LOCKFILE_ENV_VAR`] is set to something other than `overwrite` or `check`.
    BadEnv {
        /// The value found.
        value: String,
    },
}

impl LockfileError {
    /// The differences, if the lockfile did not match; empty otherwise.
    pub fn changes(&self) -> &[Change] {
        match self {
            LockfileError::Mismatch { changes, .. } => changes,
            _ => &[],
        }
    }
}

const HOW_TO_OVERWRITE: &str = "run the tests once with TOOLGATE_LOCKFILE=overwrite \
                                (`TOOLGATE_LOCKFILE=overwrite cargo test`)";

impl fmt::Display for LockfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockfileError::Missing { path } => write!(
                f,
                "tool lockfile {} does not exist; to create it, {HOW_TO_OVERWRITE}, then review and \
                 commit it",
                path.display()
            ),
            LockfileError::Io { path, source } => {
                write!(f, "tool lockfile {}: {source}", path.display())
            }
            LockfileError::Invalid { path, source } => write!(
                f,
                "tool lockfile {} is not a valid lockfile: {source}; to rewrite it, {HOW_TO_OVERWRITE}",
                path.display()
            ),
            LockfileError::Mismatch { path, changes } => {
                let s = if changes.len() == 1 { "" } else { "s" };
                writeln!(
                    f,
                    "the tools differ from the lockfile {} ({} change{s}):",
                    path.display(),
                    changes.len()
                )?;
                for change in changes {
                    writeln!(f, "  {change}")?;
                }
                write!(
                    f,
                    "review them; to accept them, {HOW_TO_OVERWRITE} and commit the lockfile"
                )
            }
            LockfileError::NothingToLock { path } => write!(
                f,
                "tool lockfile {}: no tool is linked into this binary, so there is nothing to lock. A \
                 test in `tests/` links a crate only if it uses it: reference the crate that declares \
                 the tools (`use my_tools as _;`), then run the check again",
                path.display()
            ),
            LockfileError::BadEnv { value } => write!(
                f,
                "environment variable {LOCKFILE_ENV_VAR} is `{value}`; expected `overwrite`, `check` \
                 or unset"
            ),
        }
    }
}

impl fmt::Debug for LockfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for LockfileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LockfileError::Io { source, .. } => Some(source),
            LockfileError::Invalid { source, .. } => Some(source),
            _ => None,
        }
    }
}
