//! Budgets shared through PostgreSQL, for operators: how many calls each budget's window holds now
//! ([`list`]), a reset of the budgets a [`BudgetFilter`] selects ([`reset`]), and the record every
//! reset leaves ([`resets`]). The `toolgate budgets` command is a shell over them.
//!
//! ```no_run
//! # extern crate toolgate_runtime as toolgate;
//! use toolgate::postgres::budgets::{self, BudgetFilter};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let url = "postgres://operator@db.internal/agents";
//! let billing = BudgetFilter::default().agent("billing-assistant");
//! for budget in budgets::list(url, "toolgate", &billing)? {
//!     println!("{}: {} calls", budget.key, budget.calls);
//! }
//! let done = budgets::reset(url, "toolgate", &billing, "ana", "the migration replayed its mail")?;
//! println!("reset {} budgets, {} calls cleared", done.budgets.len(), done.cleared());
//! # Ok(())
//! # }
//! ```
//!
//! # A budget's key
//!
//! A gate counts each budget under a key that names what it counts
//! ([`BudgetCharge::key`](crate::budget::BudgetCharge::key)), so that gates configured alike share it: the
//! gate's agent label, the scope (`tool:PATTERN`, `risk:LEVEL` or `agent`), the limit and the window
//! in nanoseconds, apart by U+001F; a budget of an operator's policy file starts with the table it is
//! written in (`policy [principals."alice"]`). [`BudgetKey`] reads one back. A principal is part of a
//! key only through such a table: the application's own budgets count per agent label, whoever the
//! agent acts for.
//!
//! # What a reset does
//!
//! [`reset`] reads the keys, keeps those the filter selects, and hands them to one statement,
//! `SELECT toolgate.budget_reset(keys, by, reason, selection)` (migration 13), which in
//! one transaction locks each budget's row in the order of the keys' bytes, as `budget_take` does
//! (so that a call's check in any process waits for the reset or the reset for it, and neither
//! deadlocks), deletes every use of those budgets, sets what each holds to zero, and inserts a row of
//! `budget_resets`: who (`--by`, and the database role that ran it), when (the database's clock, once
//! every lock is held), why, what was selected, and how many calls each budget's window held. The
//! reset and its record commit together or not at all.
//!
//! A reset starts each budget's window afresh: from the reset on, a budget again allows its N calls
//! in any window. A window that spans a reset may so hold N calls from before it and N after: a
//! budget guarantees at most N calls in any window since its last reset. A call checked before the
//! reset and still running is not refused: its unit was cleared with the others.
//!
//! # Why a table of its own, not the trail
//!
//! The audit trail (`toolgate.audit`) is the gates' records, each writer a sink's hash chain, bound
//! to the role that first wrote it and signed by its key; the operators' role may not write into it.
//! An operator's command holds no writer and no signing key: a chain of its own would be signed by
//! nothing (which `toolgate audit verify --public-key` rightly reports) and would open the trail to
//! the operators' role. A reset is recorded as a lowering of a fleet is (`fleet_changes`): in a table
//! of operators' changes, in the transaction that makes the change. The function runs as the schema's
//! owner, so that the operators' role needs `EXECUTE` on it and no right on `budget_uses` or
//! `budget_resets` but reading: through its grants, a budget is cleared only with its record.
//! `toolgate audit verify` of the trail names the resets beside the writers' chains.
//!
//! ```sql
//! CREATE TABLE toolgate.budget_resets (
//!     id       bigserial PRIMARY KEY,
//!     reset_at timestamptz NOT NULL,       -- the database's clock, once the budgets were locked
//!     reset_by text NOT NULL,              -- the operator, as `--by` named them
//!     role     text NOT NULL,              -- the database role that ran the reset
//!     reason   text NOT NULL,
//!     selected text NOT NULL,              -- the selection, as `toolgate budgets reset` was given it
//!     keys     text[] NOT NULL,            -- the budgets reset, in the order of their bytes
//!     cleared  integer[] NOT NULL          -- how many calls each one's window held
//! );
//! ```
//!
//! Every value here was written by gates' processes or operators: show it escaped ([`escaped`] on a
//! terminal, [`json_list`] and [`json_resets`] for machines).

use std::fmt;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_postgres::Client;

use super::link;
use super::schema::{self, store_error};
use crate::approval::store::StoreError;
use crate::terminal::{escaped, escaped_json, push_shown};

/// How long an operator's command may take, connecting included.
const OPERATOR_TIMEOUT: Duration = Duration::from_secs(10);

/// What apart the fields of a budget's key: a character no label, id or risk holds.
const SEPARATOR: char = '\u{1f}';

/// What a budget's key names, as a gate makes it (see [the module](self#a-budgets-key)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BudgetKey {
    /// The table of the operator's policy file the budget is written in (`[defaults]`,
    /// `[principals."alice"]`, `[agents."bot"]`); `None` for a budget of the application's code.
    pub policy: Option<String>,
    /// The agent label of the gates that count it (empty for gates without one).
    pub agent: String,
    /// What it counts: `tool:PATTERN`, `risk:LEVEL` or `agent`.
    pub scope: String,
    /// At most this many calls in any window.
    pub limit: u32,
    /// The window's length.
    pub window: Duration,
}

impl BudgetKey {
    /// The parts of `key`, or `None` for a key no gate makes (written by another program).
    pub fn parse(key: &str) -> Option<BudgetKey> {
        let mut fields: Vec<&str> = key.split(SEPARATOR).collect();
        let policy = match fields.len() {
            4 => None,
            5 => Some(fields.remove(0).strip_prefix("policy ")?.to_owned()),
            _ => return None,
        };
        let [agent, scope, limit, window] = fields[..] else {
            return None;
        };
        let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        if !digits(limit) || !digits(window) || scope.is_empty() {
            return None;
        }
        Some(BudgetKey {
            policy,
            agent: agent.to_owned(),
            scope: scope.to_owned(),
            limit: limit.parse().ok()?,
            window: Duration::from_nanos(window.parse().ok()?),
        })
    }

    /// The window as a budget's refusal names it: `3600 s`, `1.5 s`.
    pub fn window_text(&self) -> String {
        if self.window.subsec_nanos() == 0 {
            format!("{} s", self.window.as_secs())
        } else {
            format!("{} s", self.window.as_secs_f64())
        }
    }
}

/// Which budgets an operator means: each part given narrows the selection, and all must hold.
///
/// `BudgetFilter::default()` selects every budget for [`list`] and [`resets`]; [`reset`] refuses it
/// unless it is [`BudgetFilter::all`], so that no budget is cleared by a selection left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BudgetFilter {
    /// One budget by its key: as stored, or as [`escaped`] shows it (`toolgate budgets list`).
    pub key: Option<String>,
    /// The budgets of gates with this agent label, exactly (empty: gates without one).
    pub agent: Option<String>,
    /// The budgets of the operator's policy table `[principals."NAME"]` for this principal.
    pub principal: Option<String>,
    /// The budgets that count this, exactly as the key writes it: `tool:PATTERN`, `risk:LEVEL`,
    /// `agent`.
    pub scope: Option<String>,
    /// Every budget, for [`reset`]: asked for by name, never by a selection left empty.
    pub all: bool,
}

impl BudgetFilter {
    /// Every budget: what [`reset`] takes to clear them all.
    pub fn all() -> BudgetFilter {
        BudgetFilter {
            all: true,
            ..BudgetFilter::default()
        }
    }

    /// Only the budget with this key (as stored, or as [`escaped`] shows it).
    pub fn key(mut self, key: impl Into<String>) -> BudgetFilter {
        self.key = Some(key.into());
        self
    }

    /// Only the budgets of gates with this agent label.
    pub fn agent(mut self, agent: impl Into<String>) -> BudgetFilter {
        self.agent = Some(agent.into());
        self
    }

    /// Only the budgets of the operator's policy table for this principal.
    pub fn principal(mut self, principal: impl Into<String>) -> BudgetFilter {
        self.principal = Some(principal.into());
        self
    }

    /// Only the budgets that count `scope` (`tool:mail.*`, `risk:HIGH_WRITE`, `agent`).
    pub fn scope(mut self, scope: impl Into<String>) -> BudgetFilter {
        self.scope = Some(scope.into());
        self
    }

    /// Whether a part of the key narrows the selection.
    pub fn is_narrowed(&self) -> bool {
        self.key.is_some()
            || self.agent.is_some()
            || self.principal.is_some()
            || self.scope.is_some()
    }

    /// Whether the budget with this key is selected. A key no gate makes is selected only by
    /// [`BudgetFilter::key`], or by a filter narrowed by nothing.
    pub fn matches(&self, key: &str) -> bool {
        if let Some(wanted) = &self.key
            && key != wanted
            && escaped(key) != wanted.as_str()
        {
            return false;
        }
        if self.agent.is_none() && self.principal.is_none() && self.scope.is_none() {
            return true;
        }
        let Some(parts) = BudgetKey::parse(key) else {
            return false;
        };
        self.agent.as_ref().is_none_or(|a| *a == parts.agent)
            && self.scope.as_ref().is_none_or(|s| *s == parts.scope)
            && self
                .principal
                .as_ref()
                .is_none_or(|p| parts.policy.as_deref() == Some(principal_table(p).as_str()))
    }
}

/// The selection as the command line gives it: `--agent "mailer" --scope "risk:LOW_WRITE"`, `--all`.
impl fmt::Display for BudgetFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = [
            ("key", &self.key),
            ("agent", &self.agent),
            ("principal", &self.principal),
            ("scope", &self.scope),
        ];
        let mut first = true;
        for (name, value) in parts {
            if let Some(value) = value {
                if !first {
                    f.write_str(" ")?;
                }
                write!(f, "--{name} {value:?}")?;
                first = false;
            }
        }
        if first {
            f.write_str(if self.all { "--all" } else { "(every budget)" })?;
        }
        Ok(())
    }
}

/// The name of the policy file's table for `principal`, as a budget's key writes it: quoted as Rust
/// quotes a string, with every character a reader cannot see drawn too (the policy file's own way).
fn principal_table(principal: &str) -> String {
    let mut table = String::from("[principals.");
    for c in format!("{principal:?}").chars() {
        push_shown(&mut table, c);
    }
    table.push(']');
    table
}

/// A budget as the store holds it now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredBudget {
    /// Its key, as stored.
    pub key: String,
    /// What the key names; `None` for a key no gate makes.
    pub parts: Option<BudgetKey>,
    /// How many calls its window holds now (uses that left the window are not counted; for a key
    /// no gate makes, whose window is not known, every use kept).
    pub calls: u64,
    /// When the oldest of those calls leaves the window, giving a unit back; `None` when it holds
    /// none, or its window is not known.
    pub frees_in: Option<Duration>,
}

/// A reset of budgets, as `budget_resets` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BudgetReset {
    /// The record's id.
    pub id: i64,
    /// When the reset took effect, by the database's clock (RFC 3339, UTC, microseconds).
    pub at: String,
    /// How long ago.
    pub age: Duration,
    /// Who reset, as the operator named themselves (`--by`).
    pub by: String,
    /// The database role that ran the reset.
    pub role: String,
    /// Why.
    pub reason: String,
    /// What the operator selected, as [`BudgetFilter`]'s `Display` writes it.
    pub selected: String,
    /// Each budget reset, by key, and how many calls its window held.
    pub budgets: Vec<(String, u32)>,
}

impl BudgetReset {
    /// How many calls the reset cleared, of every budget.
    pub fn cleared(&self) -> u64 {
        self.budgets.iter().map(|(_, n)| u64::from(*n)).sum()
    }
}

/// The resets [`resets`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResetHistory {
    /// The newest of them, newest first.
    pub records: Vec<BudgetReset>,
    /// How many there are in all.
    pub total: u64,
}

/// Why [`reset`] reset nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResetError {
    /// The filter is narrowed by nothing and is not [`BudgetFilter::all`].
    Unscoped,
    /// Who resets, or why, is missing, or the name is one the rule of names refuses.
    Invalid(String),
    /// No budget matches the filter.
    NoMatch(BudgetFilter),
    /// The database could not be reached, failed, or refused the statement.
    Store(StoreError),
}

impl fmt::Display for ResetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResetError::Unscoped => f.write_str(
                "a reset names the budgets it clears (a key, an agent, a principal or a scope); \
                 clearing every budget takes `all`",
            ),
            ResetError::Invalid(why) => f.write_str(why),
            ResetError::NoMatch(filter) => {
                write!(f, "no budget matches {filter}: nothing was reset")
            }
            ResetError::Store(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for ResetError {}

impl From<StoreError> for ResetError {
    fn from(error: StoreError) -> ResetError {
        ResetError::Store(error)
    }
}

/// The budgets of the store at `url` (schema `schema`) that `filter` selects, in the order of their
/// keys' bytes, each with the calls its window holds now: one snapshot, by the database's clock.
pub fn list(
    url: &str,
    schema: &str,
    filter: &BudgetFilter,
) -> Result<Vec<StoredBudget>, StoreError> {
    link::one_shot(url, schema, OPERATOR_TIMEOUT, true, async |client| {
        client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(|e| store_error(&e))?;
        let keys = selected(client, schema, filter).await?;
        let windows = windows_us(&keys);
        let rows = client
            .query(
                &schema::sql(
                    "SELECT k.key, count(u.used_at),
                         extract(epoch FROM min(u.used_at) + k.window_us * interval '1 microsecond'
                             - c.now_at)::float8
                     FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS k(key, window_us, n)
                     CROSS JOIN (SELECT clock_timestamp() AS now_at) AS c
                     LEFT JOIN {s}.budget_uses u ON u.key = k.key AND (k.window_us IS NULL
                         OR u.used_at > c.now_at - k.window_us * interval '1 microsecond')
                     GROUP BY k.key, k.window_us, k.n, c.now_at
                     ORDER BY k.n",
                    schema,
                ),
                &[&keys, &windows],
            )
            .await
            .map_err(|e| store_error(&e))?;
        client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| store_error(&e))?;
        let column = |e: tokio_postgres::Error| StoreError::Unexpected(e.to_string());
        rows.iter()
            .map(|row| {
                let key: String = row.try_get(0).map_err(column)?;
                let calls: i64 = row.try_get(1).map_err(column)?;
                let frees_in: Option<f64> = row.try_get(2).map_err(column)?;
                Ok(StoredBudget {
                    parts: BudgetKey::parse(&key),
                    key,
                    calls: u64::try_from(calls).unwrap_or(0),
                    frees_in: frees_in.map(|s| Duration::from_secs_f64(s.max(0.0))),
                })
            })
            .collect()
    })
}

/// Resets the budgets of the store at `url` that `filter` selects, as `by` (an operator's name, which
/// the rule of names must not refuse) for `reason`, and records it: see [what a reset
/// does](self#what-a-reset-does). A filter narrowed by nothing is refused ([`ResetError::Unscoped`])
/// unless it is [`BudgetFilter::all`]; one that selects no budget resets nothing
/// ([`ResetError::NoMatch`]). Returns the record.
pub fn reset(
    url: &str,
    schema: &str,
    filter: &BudgetFilter,
    by: &str,
    reason: &str,
) -> Result<BudgetReset, ResetError> {
    if !filter.is_narrowed() && !filter.all {
        return Err(ResetError::Unscoped);
    }
    if by.trim().is_empty() || reason.trim().is_empty() {
        return Err(ResetError::Invalid(
            "a reset of budgets names who makes it and why".into(),
        ));
    }
    // A name that reads as another's would record the reset under a name a person takes for
    // someone else's (SECURITY.md, names that read alike).
    if let Some(why) = crate::names::refusal(by) {
        return Err(ResetError::Invalid(format!(
            "the operator's name is refused: {why}"
        )));
    }
    let selection = filter.to_string();
    let done =
        link::one_shot(url, schema, OPERATOR_TIMEOUT, true, async |client| {
            let keys = selected(client, schema, filter).await?;
            if keys.is_empty() {
                return Ok(None);
            }
            let row = client
                .query_one(
                    &schema::sql("SELECT {s}.budget_reset($1::text[], $2, $3, $4)", schema),
                    &[&keys, &by, &reason, &selection],
                )
                .await
                .map_err(|e| store_error(&e))?;
            let id: i64 = row
                .try_get(0)
                .map_err(|e| StoreError::Unexpected(e.to_string()))?;
            let records = read_resets(client, schema, Some(id)).await?;
            records.into_iter().next().map(Some).ok_or_else(|| {
                StoreError::Unexpected(format!("the reset's record {id} is missing"))
            })
        })?;
    done.ok_or_else(|| ResetError::NoMatch(filter.clone()))
}

/// The resets recorded in the store at `url` that reset a budget `filter` selects, newest first: at
/// most `limit`, and how many there are.
pub fn resets(
    url: &str,
    schema: &str,
    filter: &BudgetFilter,
    limit: usize,
) -> Result<ResetHistory, StoreError> {
    link::one_shot(url, schema, OPERATOR_TIMEOUT, true, async |client| {
        let all = read_resets(client, schema, None).await?;
        let mut matching: Vec<BudgetReset> = all
            .into_iter()
            .filter(|reset| reset.budgets.iter().any(|(key, _)| filter.matches(key)))
            .collect();
        let total = matching.len() as u64;
        matching.truncate(limit);
        Ok(ResetHistory {
            records: matching,
            total,
        })
    })
}

/// How many resets the store at `url` records, and the newest: what `toolgate audit verify` names
/// beside the trail's chains. It checks no schema version, as reading the trail does not.
pub fn last_reset(url: &str, schema: &str) -> Result<(u64, Option<BudgetReset>), StoreError> {
    link::one_shot(url, schema, OPERATOR_TIMEOUT, false, async |client| {
        let count = client
            .query_one(
                &schema::sql("SELECT count(*) FROM {s}.budget_resets", schema),
                &[],
            )
            .await
            .map_err(|e| store_error(&e))?;
        let count: i64 = count
            .try_get(0)
            .map_err(|e| StoreError::Unexpected(e.to_string()))?;
        let newest = read_resets_limited(client, schema, None, 1).await?;
        Ok((u64::try_from(count).unwrap_or(0), newest.into_iter().next()))
    })
}

/// The keys of the budgets `filter` selects, in the order of their bytes.
async fn selected(
    client: &Client,
    schema: &str,
    filter: &BudgetFilter,
) -> Result<Vec<String>, StoreError> {
    let rows = client
        .query(
            &schema::sql(
                "SELECT key FROM {s}.budgets ORDER BY key COLLATE \"C\"",
                schema,
            ),
            &[],
        )
        .await
        .map_err(|e| store_error(&e))?;
    let mut keys = Vec::with_capacity(rows.len());
    for row in &rows {
        let key: String = row
            .try_get(0)
            .map_err(|e| StoreError::Unexpected(e.to_string()))?;
        if filter.matches(&key) {
            keys.push(key);
        }
    }
    Ok(keys)
}

/// Each key's window in microseconds, as `budget_take` is given it; NULL for a key no gate makes.
fn windows_us(keys: &[String]) -> Vec<Option<i64>> {
    keys.iter()
        .map(|key| {
            BudgetKey::parse(key)
                .map(|parts| i64::try_from(parts.window.as_micros()).unwrap_or(i64::MAX))
        })
        .collect()
}

/// The records of `budget_resets`, newest first: the one with `id`, or all of them.
async fn read_resets(
    client: &Client,
    schema: &str,
    id: Option<i64>,
) -> Result<Vec<BudgetReset>, StoreError> {
    read_resets_limited(client, schema, id, i64::MAX).await
}

async fn read_resets_limited(
    client: &Client,
    schema: &str,
    id: Option<i64>,
    limit: i64,
) -> Result<Vec<BudgetReset>, StoreError> {
    let rows = client
        .query(
            &schema::sql(
                "SELECT id, to_char(reset_at AT TIME ZONE 'UTC',
                        'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
                     extract(epoch FROM clock_timestamp() - reset_at)::float8,
                     reset_by, role, reason, selected, keys, cleared
                 FROM {s}.budget_resets WHERE $1::bigint IS NULL OR id = $1
                 ORDER BY id DESC LIMIT $2",
                schema,
            ),
            &[&id, &limit],
        )
        .await
        .map_err(|e| store_error(&e))?;
    let column = |e: tokio_postgres::Error| StoreError::Unexpected(e.to_string());
    rows.iter()
        .map(|row| {
            let keys: Vec<String> = row.try_get(7).map_err(column)?;
            let cleared: Vec<i32> = row.try_get(8).map_err(column)?;
            let age: f64 = row.try_get(2).map_err(column)?;
            Ok(BudgetReset {
                id: row.try_get(0).map_err(column)?,
                at: row.try_get(1).map_err(column)?,
                age: Duration::from_secs_f64(age.max(0.0)),
                by: row.try_get(3).map_err(column)?,
                role: row.try_get(4).map_err(column)?,
                reason: row.try_get(5).map_err(column)?,
                selected: row.try_get(6).map_err(column)?,
                budgets: keys
                    .into_iter()
                    .zip(cleared)
                    .map(|(key, n)| (key, u32::try_from(n).unwrap_or(0)))
                    .collect(),
            })
        })
        .collect()
}

/// The budgets as a JSON array, one object each (`key`, `policy`, `agent`, `scope`, `limit`,
/// `window_us`, `calls`, `frees_in_us`; the parts `null` for a key no gate makes), every character
/// that hides on a terminal written as its `\uXXXX` escape: the value parses the same.
pub fn json_list(budgets: &[StoredBudget]) -> String {
    let list: Vec<Value> = budgets
        .iter()
        .map(|budget| {
            let parts = budget.parts.as_ref();
            json!({
                "key": budget.key,
                "policy": parts.and_then(|p| p.policy.clone()),
                "agent": parts.map(|p| p.agent.clone()),
                "scope": parts.map(|p| p.scope.clone()),
                "limit": parts.map(|p| p.limit),
                "window_us": parts.map(|p| u64::try_from(p.window.as_micros()).unwrap_or(u64::MAX)),
                "calls": budget.calls,
                "frees_in_us": budget.frees_in.map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            })
        })
        .collect();
    escaped_json(Value::Array(list).to_string())
}

/// The resets as a JSON array, one object each (`id`, `at`, `by`, `role`, `reason`, `selected`,
/// `cleared`, and `budgets`: `key` and `cleared` of each), escaped as [`json_list`] escapes.
pub fn json_resets(resets: &[BudgetReset]) -> String {
    let list: Vec<Value> = resets
        .iter()
        .map(|reset| {
            json!({
                "id": reset.id,
                "at": reset.at,
                "by": reset.by,
                "role": reset.role,
                "reason": reset.reason,
                "selected": reset.selected,
                "cleared": reset.cleared(),
                "budgets": reset.budgets.iter().map(|(key, cleared)| {
                    json!({"key": key, "cleared": cleared})
                }).collect::<Vec<Value>>(),
            })
        })
        .collect();
    escaped_json(Value::Array(list).to_string())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::gate::budget::{BudgetScope, BudgetSpec, Budgets};
    use toolgate_policy::Risk;

    /// The keys of a gate's budgets of `risk` (the scope that needs no linked tool).
    fn keys(specs: Vec<BudgetSpec>, agent: Option<&str>, risk: Risk) -> Vec<String> {
        let budgets = Budgets::build(specs, None, agent).unwrap().unwrap();
        budgets
            .charges(usize::MAX, risk)
            .into_iter()
            .map(|charge| charge.key.to_string())
            .collect()
    }

    fn spec(limit: u32, window: Duration, owner: Option<&str>) -> BudgetSpec {
        BudgetSpec {
            scope: BudgetScope::RiskLevel(Risk::HighWrite),
            limit,
            window,
            owner: owner.map(|table| (Arc::from(table), Arc::from("policy.toml:3:1"))),
        }
    }

    #[test]
    fn a_key_is_read_as_the_gate_makes_it() {
        let hour = Duration::from_secs(3600);
        let [code] = &keys(vec![spec(10, hour, None)], Some("billing"), Risk::HighWrite)[..] else {
            panic!("one key");
        };
        let parts = BudgetKey::parse(code).unwrap();
        assert_eq!(parts.policy, None);
        assert_eq!(parts.agent, "billing");
        assert_eq!(parts.scope, "risk:HIGH_WRITE");
        assert_eq!((parts.limit, parts.window), (10, hour));
        assert_eq!(parts.window_text(), "3600 s");

        let table = principal_table("al\u{202e}ice \"x\"");
        let half = Duration::from_millis(1500);
        let [owned] = &keys(vec![spec(3, half, Some(&table))], None, Risk::HighWrite)[..] else {
            panic!("one key");
        };
        let parts = BudgetKey::parse(owned).unwrap();
        assert_eq!(parts.policy.as_deref(), Some(table.as_str()));
        assert_eq!(parts.agent, "");
        assert_eq!((parts.limit, parts.window), (3, half));
        assert_eq!(parts.window_text(), "1.5 s");
        assert!(
            BudgetFilter::default()
                .principal("al\u{202e}ice \"x\"")
                .matches(owned)
        );
        assert!(!BudgetFilter::default().principal("alice").matches(owned));
        assert!(!BudgetFilter::default().principal("alice").matches(code));
    }

    #[test]
    fn a_filter_narrows_by_every_part_given_and_reads_a_key_as_shown() {
        let key = "mailer\u{1f}tool:mail.*\u{1f}2\u{1f}3600000000000";
        let shown = escaped(key).into_owned();
        assert_ne!(shown, key);
        for filter in [
            BudgetFilter::default(),
            BudgetFilter::all(),
            BudgetFilter::default().key(key),
            BudgetFilter::default().key(shown.clone()),
            BudgetFilter::default().agent("mailer"),
            BudgetFilter::default().agent("mailer").scope("tool:mail.*"),
        ] {
            assert!(filter.matches(key), "{filter}");
        }
        for filter in [
            BudgetFilter::default().key("mailer"),
            BudgetFilter::default().agent("mailer2"),
            BudgetFilter::default().agent("mailer").scope("agent"),
            BudgetFilter::default().principal("mailer"),
        ] {
            assert!(!filter.matches(key), "{filter}");
        }
        // A key no gate makes: only by itself.
        let other = "written\u{1f}by hand";
        assert_eq!(BudgetKey::parse(other), None);
        assert!(BudgetFilter::default().key(other).matches(other));
        assert!(!BudgetFilter::default().agent("written").matches(other));
        for malformed in [
            "a\u{1f}agent\u{1f}x\u{1f}1",
            "a\u{1f}agent\u{1f}1\u{1f}",
            "a\u{1f}\u{1f}1\u{1f}1",
            "not-policy\u{1f}a\u{1f}agent\u{1f}1\u{1f}1",
            "a\u{1f}agent\u{1f}99999999999\u{1f}1",
        ] {
            assert_eq!(BudgetKey::parse(malformed), None, "{malformed:?}");
        }
        assert_eq!(
            BudgetFilter::default()
                .agent("m")
                .scope("risk:LOW_WRITE")
                .to_string(),
            r#"--agent "m" --scope "risk:LOW_WRITE""#
        );
        assert_eq!(BudgetFilter::all().to_string(), "--all");
    }
}
