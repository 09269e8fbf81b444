//! Reading the audit trail back: every writer's chain verified, the calls a writer left interrupted,
//! and the records for reports.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::link;
use super::schema::{self, store_error};
use crate::approval::store::StoreError;
use crate::audit::checkpoint::{Checkpoint, SeriesVerifier};
use crate::audit::verify::Verifier;
use crate::audit::{AuditRecord, CheckpointReport, PublicKey, Stage, VerifyReport};
use crate::policy_file::{PolicyFile, ReplayFilter, ReplayReport, Replaying};

/// What [`verify_trail`] found in the audit table: one report per writer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrailReport {
    /// Every writer's chain, by name.
    pub writers: Vec<WriterReport>,
}

/// One writer's chain in the audit table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriterReport {
    /// The writer's name.
    pub writer: String,
    /// Its chain, verified as a JSONL log is, line by line in `seq` order.
    pub chain: VerifyReport,
    /// The first row whose columns (`seq`, `prev_hash`, `hash`, `stage`, `tool`, `gate`, `call`, and
    /// what searches read: `principal`, `agent`, `mode`, `decision`, `outcome`, `code`, `risk`) differ
    /// from its line: the row was edited. Its `seq` column.
    pub columns_differ: Option<i64>,
    /// Calls whose `enter` was committed with no `exit` after it: the writer stopped (was killed, lost
    /// its server) while the call ran, or the last group's reply was lost. Not tampering.
    pub interrupted: Vec<Interrupted>,
    /// Its signed checkpoints checked against the chain, by [`verify_signed_trail`].
    pub checkpoints: Option<CheckpointReport>,
}

/// A call left without its `exit` record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Interrupted {
    /// The `seq` of its `enter` record.
    pub seq: u64,
    /// The tool.
    pub tool: String,
    /// The gate and call numbers that pair its records.
    pub gate: u64,
    /// See `gate`.
    pub call: u64,
}

impl WriterReport {
    /// Whether the chain verified to its end, with every row's columns matching its line, and its
    /// checkpoints, where they were checked, verified against it.
    pub fn is_intact(&self) -> bool {
        self.chain.is_intact()
            && self.columns_differ.is_none()
            && self
                .checkpoints
                .as_ref()
                .is_none_or(CheckpointReport::is_intact)
    }
}

impl TrailReport {
    /// Whether every writer's chain is intact.
    pub fn is_intact(&self) -> bool {
        self.writers.iter().all(WriterReport::is_intact)
    }

    /// The writer with this name.
    pub fn writer(&self, name: &str) -> Option<&WriterReport> {
        self.writers.iter().find(|w| w.writer == name)
    }
}

impl fmt::Display for TrailReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let broken = self.writers.iter().filter(|w| !w.is_intact()).count();
        let status = if broken == 0 { "INTACT" } else { "BROKEN" };
        writeln!(
            f,
            "{status}: {} writer(s), {broken} broken",
            self.writers.len()
        )?;
        for writer in &self.writers {
            writeln!(f, "\nwriter {}:", Shown(&writer.writer))?;
            for line in writer.chain.to_string().lines() {
                writeln!(f, "  {line}")?;
            }
            if let Some(seq) = writer.columns_differ {
                writeln!(
                    f,
                    "  the row at seq {seq} has columns that differ from its line: it was edited"
                )?;
            }
            if let Some(checkpoints) = &writer.checkpoints {
                for line in checkpoints.to_string().lines() {
                    writeln!(f, "  {line}")?;
                }
            }
            for call in &writer.interrupted {
                writeln!(
                    f,
                    "  interrupted: call {} of gate {} ({}), entered at seq {}, has no exit",
                    call.call,
                    call.gate,
                    Shown(&call.tool),
                    call.seq
                )?;
            }
        }
        Ok(())
    }
}

/// Text from the table, as a report prints it ([`escaped`](crate::terminal::escaped)): a name holding
/// a line break, or a character that hides or reorders text, could otherwise forge a line of the report.
struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::terminal::escaped(self.0))
    }
}

/// Verifies every writer's chain in the audit table at `url` (schema `schema`); `Err` only when the
/// table cannot be read.
pub fn verify_trail(url: &str, schema: &str) -> Result<TrailReport, StoreError> {
    let (rows, _) = read(url, schema, false)?;
    Ok(report(rows, Vec::new(), |_| None))
}

/// [`verify_trail`], and every writer's signed checkpoints (`audit_checkpoints`) checked against its
/// chain with the public key alone: a chain rewritten with recomputed hashes, a chain cut short before
/// its last checkpoint, a checkpoint copied from another writer, or a writer whose records are gone
/// but whose checkpoints remain, each shows.
pub fn verify_signed_trail(
    url: &str,
    schema: &str,
    key: &PublicKey,
) -> Result<TrailReport, StoreError> {
    let (rows, checkpoints) = read(url, schema, true)?;
    Ok(report(rows, checkpoints, |_| Some(key.clone())))
}

/// [`verify_trail`], and the checkpoints of every writer that signs them checked against the public
/// key bound to its name at its first use (`audit_writers`, which only the schema's owner may change).
/// Unlike [`verify_signed_trail`], the key comes from the database: it shows a chain rewritten or cut
/// by a writer's role, not by the owner. A writer bound without a key has no checkpoints checked
/// (`checkpoints` is `None`).
pub fn verify_trail_with_bound_keys(url: &str, schema: &str) -> Result<TrailReport, StoreError> {
    let (rows, checkpoints) = read(url, schema, true)?;
    let keys = link::one_shot(
        url,
        schema,
        Duration::from_secs(60),
        false,
        async |client| {
            let rows = client
            .query(
                &schema::sql(
                    "SELECT writer, public_key FROM {s}.audit_writers WHERE public_key IS NOT NULL",
                    schema,
                ),
                &[],
            )
            .await
            .map_err(|e| store_error(&e))?;
            let column = |e: tokio_postgres::Error| StoreError::Unexpected(e.to_string());
            rows.iter()
                .map(|row| {
                    Ok((
                        row.try_get(0).map_err(column)?,
                        row.try_get(1).map_err(column)?,
                    ))
                })
                .collect::<Result<BTreeMap<String, String>, StoreError>>()
        },
    )?;
    let keys: BTreeMap<String, Option<PublicKey>> = keys
        .into_iter()
        .map(|(writer, pem)| (writer, PublicKey::from_public_key_pem(&pem).ok()))
        .collect();
    Ok(report(rows, checkpoints, |writer| {
        keys.get(writer).cloned().flatten()
    }))
}

/// Every writer's report, its checkpoints checked with the key `key_of` gives for its name, if any.
fn report(
    rows: Vec<Row>,
    checkpoints: Vec<CheckpointRow>,
    key_of: impl Fn(&str) -> Option<PublicKey>,
) -> TrailReport {
    let mut writers: BTreeMap<String, (Vec<Row>, Vec<CheckpointRow>)> = BTreeMap::new();
    for row in rows {
        writers.entry(row.writer.clone()).or_default().0.push(row);
    }
    for checkpoint in checkpoints {
        writers
            .entry(checkpoint.writer.clone())
            .or_default()
            .1
            .push(checkpoint);
    }
    let writers = writers
        .into_iter()
        .map(|(writer, (rows, checkpoints))| {
            let key = key_of(&writer);
            verify_writer(writer, &rows, &checkpoints, key.as_ref())
        })
        .collect();
    TrailReport { writers }
}

/// The records of the audit table at `url`, writer by writer, each in `seq` order: for reports such
/// as [`PromotionReport`](crate::audit::PromotionReport). Verify the trail first: this reads what is
/// there.
pub fn read_trail(url: &str, schema: &str) -> Result<Vec<AuditRecord>, StoreError> {
    read(url, schema, false)?
        .0
        .iter()
        .map(|row| {
            serde_json::from_str(&row.line).map_err(|e| {
                StoreError::Unexpected(format!(
                    "writer {:?}, seq {}: not an audit record: {e}",
                    row.writer, row.seq
                ))
            })
        })
        .collect()
}

/// Replays the calls of the audit table at `url` that `filter` keeps, as
/// [`PolicyFile::replay`](crate::policy_file::PolicyFile::replay) replays a log's: each writer's chain
/// verified in the same pass (its records after a break not replayed), each call decided under the
/// file in force when it was recorded (`in_force`, by digest; `candidate` too) and under `candidate`.
/// The records are read in one snapshot.
pub fn replay_trail(
    url: &str,
    schema: &str,
    candidate: &PolicyFile,
    in_force: &[PolicyFile],
    filter: &ReplayFilter,
) -> Result<ReplayReport, StoreError> {
    let (rows, _) = read(url, schema, false)?;
    Ok(replay_rows(&rows, candidate, in_force, filter))
}

fn replay_rows(
    rows: &[Row],
    candidate: &PolicyFile,
    in_force: &[PolicyFile],
    filter: &ReplayFilter,
) -> ReplayReport {
    let mut replaying = Replaying::new(candidate, in_force, filter);
    // Each writer's rows in their order, its chain begun; then every row in the order of the
    // records' times, so that a rule over history sees the calls of every writer before a call.
    let mut writers: Vec<(usize, &[Row])> = Vec::new();
    let mut rest = rows;
    while let Some(first) = rest.first() {
        let length = rest
            .iter()
            .position(|row| row.writer != first.writer)
            .unwrap_or(rest.len());
        let (own, after) = rest.split_at(length);
        writers.push((replaying.begin(Some(first.writer.clone())), own));
        rest = after;
    }
    let mut next: std::collections::BinaryHeap<std::cmp::Reverse<(&str, usize)>> = writers
        .iter()
        .enumerate()
        .filter_map(|(i, (_, own))| Some(std::cmp::Reverse((time_of(own.first()?), i))))
        .collect();
    let mut read = vec![0usize; writers.len()];
    let mut line = Vec::new();
    while let Some(std::cmp::Reverse((_, i))) = next.pop() {
        let (chain, own) = writers[i];
        let row = &own[read[i]];
        read[i] += 1;
        line.clear();
        line.extend_from_slice(row.line.as_bytes());
        line.push(b'\n');
        replaying.line_in(chain, &line);
        if let Some(row) = own.get(read[i]) {
            next.push(std::cmp::Reverse((time_of(row), i)));
        }
    }
    replaying.finish()
}

/// A fleet's policy as the store keeps it (`toolgate policy apply`): the one applied last, and the
/// one in force, the last a member accepted.
#[cfg(feature = "console")]
pub(crate) struct StoredPolicy {
    /// The fleet's name.
    pub(crate) fleet: String,
    /// Whether it is the policy in force (accepted by a member), the one applied last, or both.
    pub(crate) applied: bool,
    pub(crate) accepted: bool,
    pub(crate) digest: String,
    /// The text checked against this process's tools, as a member checks it: `Err` where it does not
    /// check here, and was not used.
    pub(crate) checked: Result<PolicyFile, crate::policy_file::PolicyErrors>,
}

/// [`replay_trail`] with the policies in force taken from the store as well: every fleet's policy
/// applied last and in force, read in the same snapshot as the records, beside `in_force`. The
/// fleets' policies come back with the report, each checked.
#[cfg(feature = "console")]
pub(crate) fn replay_store(
    url: &str,
    schema: &str,
    candidate: &PolicyFile,
    in_force: &[PolicyFile],
    filter: &ReplayFilter,
) -> Result<StoreReplay, StoreError> {
    let (rows, _, fleets) = read_with(url, schema, false, true)?;
    let mut stored: Vec<StoredPolicy> = Vec::new();
    for (fleet, applied, accepted) in fleets {
        for (text, is_applied) in [(applied, true), (accepted, false)] {
            let Some(text) = text else { continue };
            let digest = crate::canonical::sha256_hex(text.as_bytes());
            if let Some(same) = stored
                .iter_mut()
                .find(|p| p.fleet == fleet && p.digest == digest)
            {
                same.applied |= is_applied;
                same.accepted |= !is_applied;
                continue;
            }
            // The name a member gives it.
            let checked = PolicyFile::parse(&format!("fleet {fleet} policy"), &text);
            stored.push(StoredPolicy {
                fleet: fleet.clone(),
                applied: is_applied,
                accepted: !is_applied,
                digest,
                checked,
            });
        }
    }
    // The replay reads each row's line; the trail's searches and lists read its columns, which an
    // edit may have changed alone.
    let mut edited = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let writer = &rows[start].writer;
        let end = start + rows[start..].partition_point(|row| row.writer == *writer);
        let report = verify_writer(writer.clone(), &rows[start..end], &[], None);
        if let Some(seq) = report.columns_differ {
            edited.push((report.writer, seq));
        }
        start = end;
    }
    let mut policies: Vec<PolicyFile> = in_force.to_vec();
    for policy in &stored {
        if let Ok(file) = &policy.checked
            && !policies.iter().any(|p| p.digest() == file.digest())
        {
            policies.push(file.clone());
        }
    }
    Ok(StoreReplay {
        report: replay_rows(&rows, candidate, &policies, filter),
        stored,
        edited,
    })
}

/// What [`replay_store`] found.
#[cfg(feature = "console")]
pub(crate) struct StoreReplay {
    pub(crate) report: ReplayReport,
    /// Every fleet's policy the store keeps, checked.
    pub(crate) stored: Vec<StoredPolicy>,
    /// The writers whose rows have columns that differ from their lines, with the first such row's
    /// `seq`: edited.
    pub(crate) edited: Vec<(String, i64)>,
}

/// The time a row's record names, as written (its text orders as the times do); empty where it
/// names none.
fn time_of(row: &Row) -> &str {
    const FIELD: &str = "\"timestamp\":\"";
    row.line
        .find(FIELD)
        .and_then(|at| row.line.get(at + FIELD.len()..))
        .and_then(|rest| rest.get(..rest.find('"')?))
        .unwrap_or("")
}

struct CheckpointRow {
    writer: String,
    seq: i64,
    head_seq: i64,
    text: String,
}

struct Row {
    writer: String,
    seq: i64,
    prev_hash: String,
    hash: String,
    stage: String,
    tool: String,
    gate: i64,
    call: i64,
    line: String,
    /// `principal`, `agent`, `mode`, `decision`, `outcome`, `code` and `risk`: what searches read.
    searched: [Option<String>; 7],
}

fn verify_writer(
    writer: String,
    rows: &[Row],
    checkpoints: &[CheckpointRow],
    key: Option<&PublicKey>,
) -> WriterReport {
    let mut verifier = Verifier::new();
    let mut hashes = Vec::with_capacity(rows.len());
    let mut columns_differ = None;
    let mut open: BTreeMap<(u64, u64), Interrupted> = BTreeMap::new();
    let mut line = Vec::new();
    for row in rows {
        line.clear();
        line.extend_from_slice(row.line.as_bytes());
        line.push(b'\n');
        verifier.line(&line);
        let Ok(members) = serde_json::from_str::<Members>(&row.line) else {
            hashes.push(String::new());
            continue;
        };
        hashes.push(members.hash.clone());
        let same = Some(row.seq) == i64::try_from(members.seq).ok()
            && row.prev_hash == members.prev_hash
            && row.hash == members.hash
            && serde_json::to_value(members.stage).ok() == Some(row.stage.as_str().into())
            && row.tool == members.tool
            && Some(row.gate) == i64::try_from(members.gate).ok()
            && Some(row.call) == i64::try_from(members.call).ok()
            && row.searched
                == [
                    members.principal,
                    members.agent,
                    members.mode,
                    members.decision,
                    members.outcome,
                    members.code,
                    members.declared_risk,
                ];
        if columns_differ.is_none() && !same {
            columns_differ = Some(row.seq);
        }
        match members.stage {
            Stage::Enter => {
                open.insert(
                    (members.gate, members.call),
                    Interrupted {
                        seq: members.seq,
                        tool: members.tool,
                        gate: members.gate,
                        call: members.call,
                    },
                );
            }
            Stage::Exit => {
                open.remove(&(members.gate, members.call));
            }
            _ => {}
        }
    }
    let mut interrupted: Vec<Interrupted> = open.into_values().collect();
    interrupted.sort_by_key(|call| call.seq);
    let chain = verifier.finish();
    let checkpoints = key.map(|key| {
        let mut series = SeriesVerifier::new(key, &writer, chain.last_seq);
        // Records `1..=last_seq` verified, in order from the first row.
        let mut hash_at = |seq: u64| {
            let at = usize::try_from(seq.checked_sub(1)?).ok()?;
            hashes.get(at).cloned()
        };
        for row in checkpoints {
            match Checkpoint::from_canonical_json(row.text.as_bytes()) {
                Ok(checkpoint)
                    if Some(row.seq) != i64::try_from(checkpoint.seq).ok()
                        || Some(row.head_seq) != i64::try_from(checkpoint.head_seq).ok() =>
                {
                    series.unreadable(format!(
                        "the row's seq {} and head_seq {} are not the signed checkpoint's ({} and {}): \
                         the row was edited",
                        row.seq, row.head_seq, checkpoint.seq, checkpoint.head_seq
                    ));
                }
                Ok(checkpoint) => series.checkpoint(&checkpoint, &mut hash_at),
                Err(error) => series.unreadable(error),
            }
        }
        series.finish()
    });
    WriterReport {
        writer,
        chain,
        columns_differ,
        interrupted,
        checkpoints,
    }
}

/// The members of a line that pair calls and check the columns.
#[derive(serde::Deserialize)]
struct Members {
    seq: u64,
    prev_hash: String,
    hash: String,
    stage: Stage,
    tool: String,
    gate: u64,
    call: u64,
    principal: Option<String>,
    agent: Option<String>,
    mode: Option<String>,
    decision: Option<String>,
    outcome: Option<String>,
    code: Option<String>,
    declared_risk: Option<String>,
}

fn read(
    url: &str,
    schema: &str,
    with_checkpoints: bool,
) -> Result<(Vec<Row>, Vec<CheckpointRow>), StoreError> {
    read_with(url, schema, with_checkpoints, false)
        .map(|(rows, checkpoints, _)| (rows, checkpoints))
}

/// A fleet's name, its policy applied last and its policy in force.
type FleetPolicies = Vec<(String, Option<String>, Option<String>)>;

fn read_with(
    url: &str,
    schema: &str,
    with_checkpoints: bool,
    with_fleet_policies: bool,
) -> Result<(Vec<Row>, Vec<CheckpointRow>, FleetPolicies), StoreError> {
    // Reading a large trail takes its time: a minute, rather than an operation's seconds.
    link::one_shot(
        url,
        schema,
        Duration::from_secs(60),
        false,
        async |client| {
            let column = |e: tokio_postgres::Error| StoreError::Unexpected(e.to_string());
            // One snapshot for both tables: a checkpoint is never read without the records it covers.
            client
                .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .await
                .map_err(|e| store_error(&e))?;
            let rows = client
                .query(
                    &schema::sql(
                        "SELECT writer, seq, prev_hash, hash, stage, tool, gate, call, line,
                         principal, agent, mode, decision, outcome, code, risk
                     FROM {s}.audit ORDER BY writer, seq",
                        schema,
                    ),
                    &[],
                )
                .await
                .map_err(|e| store_error(&e))?;
            let rows = rows
                .iter()
                .map(|row| {
                    Ok(Row {
                        writer: row.try_get(0).map_err(column)?,
                        seq: row.try_get(1).map_err(column)?,
                        prev_hash: row.try_get(2).map_err(column)?,
                        hash: row.try_get(3).map_err(column)?,
                        stage: row.try_get(4).map_err(column)?,
                        tool: row.try_get(5).map_err(column)?,
                        gate: row.try_get(6).map_err(column)?,
                        call: row.try_get(7).map_err(column)?,
                        line: row.try_get(8).map_err(column)?,
                        searched: [
                            row.try_get(9).map_err(column)?,
                            row.try_get(10).map_err(column)?,
                            row.try_get(11).map_err(column)?,
                            row.try_get(12).map_err(column)?,
                            row.try_get(13).map_err(column)?,
                            row.try_get(14).map_err(column)?,
                            row.try_get(15).map_err(column)?,
                        ],
                    })
                })
                .collect::<Result<Vec<Row>, StoreError>>()?;
            let mut checkpoints = Vec::new();
            if with_checkpoints {
                let stored = client
                    .query(
                        &schema::sql(
                            "SELECT writer, seq, head_seq, checkpoint FROM {s}.audit_checkpoints
                         ORDER BY writer, seq",
                            schema,
                        ),
                        &[],
                    )
                    .await
                    .map_err(|e| store_error(&e))?;
                for row in &stored {
                    checkpoints.push(CheckpointRow {
                        writer: row.try_get(0).map_err(column)?,
                        seq: row.try_get(1).map_err(column)?,
                        head_seq: row.try_get(2).map_err(column)?,
                        text: row.try_get(3).map_err(column)?,
                    });
                }
            }
            let mut fleets = Vec::new();
            if with_fleet_policies {
                let stored = client
                    .query(
                        &schema::sql(
                            "SELECT name, policy, accepted_policy FROM {s}.fleets ORDER BY name",
                            schema,
                        ),
                        &[],
                    )
                    .await
                    .map_err(|e| store_error(&e))?;
                for row in &stored {
                    fleets.push((
                        row.try_get(0).map_err(column)?,
                        row.try_get(1).map_err(column)?,
                        row.try_get(2).map_err(column)?,
                    ));
                }
            }
            client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| store_error(&e))?;
            Ok((rows, checkpoints, fleets))
        },
    )
}
