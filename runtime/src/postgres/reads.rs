//! What an operator reads of the approval store, the audit trail and the fleets, on one connection in
//! the caller's tokio runtime, opened again when it is lost: [`Reader`]. Pages of pending requests,
//! searches of the trail by the columns migration 10 keeps beside each line, a call's `enter` and
//! `exit` side by side, every fleet, and the shadow-mode promotion over time. The operator console
//! shows them; an application's own tools may read them too.
//!
//! Every value here comes from the database as written by agents' processes: show it escaped
//! ([`escaped`](crate::terminal::escaped) on a terminal).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, watch};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};

use super::fleet::{self, FleetStatus};
use super::link::{self, Held, Link, Opened, Schema, Session};
use super::requests::StoredRequest;
use super::schema::{self, store_error};
use super::{sql, worker};
use crate::approval::store::StoreError;
use toolgate_policy::Risk;

/// The channel migration 10's trigger notifies, with the schema's name as payload, whenever requests
/// change.
const CHANNEL: &str = "toolgate_approvals";

/// The most rows one page or search answers.
pub const MAX_PAGE: u32 = 500;

/// One connection for reading what operators see: pages of pending requests, searches of the trail,
/// a call's two records, the fleets, the shadow-mode promotion over time. Reads share it at once; one
/// that finds it lost (the server restarted, say) opens another, within the same timeout.
pub struct Reader {
    held: Mutex<Held<Arc<Listening>>>,
    schema: String,
    timeout: Duration,
    changes: watch::Receiver<u64>,
}

/// The reader's session: its connection, whose notifications move the reader's counter of changes.
struct Listening {
    client: Client,
}

/// What a session of the reader needs: the schema whose changes count, and the counter.
struct Changes {
    schema: String,
    count: Arc<watch::Sender<u64>>,
}

impl Session for Listening {
    type Setup = Changes;

    async fn start(mut opened: Opened, changes: &Changes) -> Result<Listening, StoreError> {
        let (ours, count) = (changes.schema.clone(), Arc::clone(&changes.count));
        tokio::spawn(async move {
            while let Some(n) = opened.notifications.recv().await {
                if n.channel() == CHANNEL && n.payload() == ours {
                    count.send_modify(|count| *count += 1);
                }
            }
            // The connection ended: what changed from now until the next one listens is not heard,
            // so those who follow read again (and that read opens the next connection).
            count.send_modify(|count| *count += 1);
        });
        Ok(Listening {
            client: opened.client,
        })
    }

    fn client(&self) -> &Client {
        &self.client
    }
}

/// A page of the pending requests, oldest first.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PendingPage {
    /// The requests of this page.
    pub requests: Vec<StoredRequest>,
    /// How many requests are pending and not expired in all.
    pub total: u64,
    /// The id to page on from (`after`), when there are more.
    pub next: Option<i64>,
}

/// A search of the audit trail: every field given narrows it. Records come newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrailQuery {
    /// The tool's id, exactly.
    pub tool: Option<String>,
    /// The principal, exactly.
    pub principal: Option<String>,
    /// The agent label, exactly.
    pub agent: Option<String>,
    /// An `enter` record's decision: `allowed`, `approved`, `granted`, `refused`.
    pub decision: Option<String>,
    /// An `exit` record's outcome: `ok`, `error`, `panic`, `cancelled`, `refused`.
    pub outcome: Option<String>,
    /// A refusal's code (`APPROVAL_REQUIRED`, ...).
    pub code: Option<String>,
    /// The writer (one chain), exactly.
    pub writer: Option<String>,
    /// Written at or after this time (RFC 3339, or any time PostgreSQL reads).
    pub since: Option<String>,
    /// Written before this time.
    pub until: Option<String>,
    /// Records before this one in the search's order (`written_at`, `writer`, `seq`): the last of the
    /// previous page.
    pub before: Option<TrailCursor>,
    /// At most this many records (50 unless set; at most [`MAX_PAGE`]).
    pub limit: Option<u32>,
}

/// Where a page of a trail search ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrailCursor {
    /// The record's `written_at`, as [`TrailRecord::written_at`] gives it.
    pub written_at: String,
    /// Its writer.
    pub writer: String,
    /// Its sequence number in the writer's chain.
    pub seq: i64,
}

/// A row of the audit trail.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrailRecord {
    /// The writer: whose chain the record is in.
    pub writer: String,
    /// Its sequence number in that chain.
    pub seq: i64,
    /// `enter`, `exit`, ...
    pub stage: String,
    /// The tool's id.
    pub tool: String,
    /// The gate and call numbers that pair a call's records (within one writer).
    pub gate: i64,
    /// See `gate`.
    pub call: i64,
    /// When the database took it, to the microsecond (UTC, RFC 3339).
    pub written_at: String,
    /// The principal the call was made for.
    pub principal: Option<String>,
    /// The agent label.
    pub agent: Option<String>,
    /// The gate's mode.
    pub mode: Option<String>,
    /// An `enter` record's decision.
    pub decision: Option<String>,
    /// An `exit` record's outcome.
    pub outcome: Option<String>,
    /// The refusal's code.
    pub code: Option<String>,
    /// The risk the tool declares.
    pub risk: Option<String>,
    /// The record as the writer wrote it: JSON, one line.
    pub line: String,
}

impl TrailRecord {
    /// Where a search continues after this record.
    pub fn cursor(&self) -> TrailCursor {
        TrailCursor {
            written_at: self.written_at.clone(),
            writer: self.writer.clone(),
            seq: self.seq,
        }
    }
}

/// A call's two records: the one asked for and its partner, where the trail has it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallRecords {
    /// The `enter` record: the decision.
    pub enter: Option<TrailRecord>,
    /// The `exit` record: how the body ended.
    pub exit: Option<TrailRecord>,
    /// The record asked for, when it is neither (`mode_lowered`, `approval_granted`, ...).
    pub other: Option<TrailRecord>,
}

/// How a [`Reader::promotion`] groups time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Bucket {
    /// An hour.
    Hour,
    /// A day (UTC).
    Day,
}

/// The calls of gates in SHADOW mode in one bucket of time, for one declared risk.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PromotionPoint {
    /// The bucket's start, UTC (`YYYY-MM-DDTHH:MMZ`).
    pub bucket: String,
    /// The risk the tools declare (`None`: records without one).
    pub risk: Option<Risk>,
    /// Calls decided.
    pub calls: u64,
    /// Calls SHADOW allowed.
    pub allowed: u64,
    /// Calls refused only for the mode (`MODE_NOT_ALLOWED`, `ABOVE_CEILING`): a mode whose ceiling
    /// covers their risk would have run them.
    pub would_have_run: u64,
}

impl Bucket {
    /// Its unit, as `date_trunc` takes it.
    fn unit(self) -> &'static str {
        match self {
            Bucket::Hour => "hour",
            Bucket::Day => "day",
        }
    }
}

/// The calls a rule logged only (`[shadow]`) would have ruled otherwise, in one bucket of time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShadowPoint {
    /// The bucket's start, UTC (`YYYY-MM-DDTHH:MMZ`).
    pub bucket: String,
    /// What the rule would have done and the rule with its place, as records say it without what
    /// is particular to one call (`refused (DENY_LISTED) by payments.* (ops.toml:9:9)`, `refused
    /// (ARGUMENT_REFUSED) by rule ops.toml:12:1`).
    pub rule: String,
    /// Calls.
    pub calls: u64,
}

/// A record's `rule_in_shadow` without what one call adds: an argument rule's refusal names the value
/// it read after the rule's place (`by rule ops.toml:12:1: `amount` 90 is ...`).
pub(crate) fn shadow_rule(said: &str) -> &str {
    const BY_RULE: &str = " by rule ";
    let Some(at) = said.find(BY_RULE) else {
        return said;
    };
    let start = at + BY_RULE.len();
    let rest = &said.as_bytes()[start..];
    // The place is `FILE:LINE:COLUMN`, then `: ` and the detail: the first `:digits:digits` so
    // followed ends it, whatever colons the file's name holds.
    let digits = |from: usize| {
        rest[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    for (i, &b) in rest.iter().enumerate() {
        if b != b':' {
            continue;
        }
        let line = digits(i + 1);
        if line == 0 || rest.get(i + 1 + line) != Some(&b':') {
            continue;
        }
        let column = digits(i + 2 + line);
        let end = i + 2 + line + column;
        if column > 0 && (end == rest.len() || rest[end..].starts_with(b": ")) {
            return &said[..start + end];
        }
    }
    said
}

const RECORD: &str = "writer, seq, stage, tool, gate, call,
    to_char(written_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
    principal, agent, mode, decision, outcome, code, risk, line";

fn record_of(row: &Row) -> Result<TrailRecord, StoreError> {
    let column = |e: tokio_postgres::Error| StoreError::Unexpected(format!("audit row: {e}"));
    Ok(TrailRecord {
        writer: row.try_get(0).map_err(column)?,
        seq: row.try_get(1).map_err(column)?,
        stage: row.try_get(2).map_err(column)?,
        tool: row.try_get(3).map_err(column)?,
        gate: row.try_get(4).map_err(column)?,
        call: row.try_get(5).map_err(column)?,
        written_at: row.try_get(6).map_err(column)?,
        principal: row.try_get(7).map_err(column)?,
        agent: row.try_get(8).map_err(column)?,
        mode: row.try_get(9).map_err(column)?,
        decision: row.try_get(10).map_err(column)?,
        outcome: row.try_get(11).map_err(column)?,
        code: row.try_get(12).map_err(column)?,
        risk: row.try_get(13).map_err(column)?,
        line: row.try_get(14).map_err(column)?,
    })
}

impl Reader {
    /// Connects to `url` within `timeout` and checks the schema `schema`'s version; listens for
    /// changes of the requests ([`Reader::changes`]). The connection runs on the caller's tokio
    /// runtime, as does the next one a read opens when this one is lost. Each read, opening a
    /// connection included, takes at most `timeout`.
    pub async fn connect(url: &str, schema: &str, timeout: Duration) -> Result<Reader, StoreError> {
        if !schema::valid_schema(schema) {
            return Err(StoreError::Unavailable(format!(
                "not configured: the schema name {schema:?} is not lowercase letters, digits and `_`"
            )));
        }
        let link = Link::new(url, timeout, "toolgate-console")?;
        let (count, changes) = watch::channel(0u64);
        let setup = Changes {
            schema: schema.to_owned(),
            count: Arc::new(count),
        };
        let reader = Reader {
            held: Mutex::new(Held::new(link, schema, Schema::Check, Some(CHANNEL), setup)),
            schema: schema.to_owned(),
            timeout,
            changes,
        };
        reader.with_client(async |_| Ok(())).await?;
        Ok(reader)
    }

    /// A counter that moves whenever requests are made, answered or used (by any process): wait on
    /// it to follow the pending list live. It moves too when the connection is lost, since changes
    /// are not heard until a read opens the next one: read again then. It ends with the reader.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    /// `op` on the connection, opened where it is lost, all within the reader's timeout.
    async fn with_client<T>(
        &self,
        op: impl AsyncFnOnce(&Client) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        link::run_shared(&self.held, self.timeout, async |session| {
            op(&session.client).await
        })
        .await
    }

    async fn query(
        &self,
        text: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let text = schema::sql(text, &self.schema);
        self.with_client(async |client| {
            client
                .query(&text, params)
                .await
                .map_err(|e| store_error(&e))
        })
        .await
    }

    /// Up to `limit` pending requests (at most [`MAX_PAGE`]) after the id `after`, oldest first, and
    /// how many are pending in all.
    pub async fn pending(&self, after: Option<i64>, limit: u32) -> Result<PendingPage, StoreError> {
        let limit = i64::from(limit.clamp(1, MAX_PAGE));
        let rows = self
            .query(
                &format!(
                    "SELECT {} FROM {{s}}.approvals
                     WHERE answered_at IS NULL AND expires_at > now() AND id > $1
                     ORDER BY id LIMIT $2",
                    sql::REQUEST
                ),
                &[&after.unwrap_or(0), &(limit + 1)],
            )
            .await?;
        let total = self
            .query(
                "SELECT count(*) FROM {s}.approvals WHERE answered_at IS NULL AND expires_at > now()",
                &[],
            )
            .await?;
        let total: i64 = total
            .first()
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(|e| StoreError::Unexpected(e.to_string()))?
            .unwrap_or(0);
        let mut requests = rows
            .iter()
            .map(worker::stored_request)
            .collect::<Result<Vec<_>, _>>()?;
        let more = requests.len() as i64 > limit;
        requests.truncate(limit as usize);
        Ok(PendingPage {
            next: more.then(|| requests.last().map(|r| r.id)).flatten(),
            requests,
            total: total.max(0) as u64,
        })
    }

    /// The request `id`, in whatever state.
    pub async fn request(&self, id: i64) -> Result<Option<StoredRequest>, StoreError> {
        let rows = self.query(&sql::show(), &[&id]).await?;
        rows.first().map(worker::stored_request).transpose()
    }

    /// The records the query finds, newest first.
    pub async fn search(&self, query: &TrailQuery) -> Result<Vec<TrailRecord>, StoreError> {
        // A decision is on `enter` and `refused` records, an outcome on `exit` records, a code only
        // where something was refused: a search no record can match is answered without asking,
        // since the server would read every record of one filter looking for the other.
        let refused = |value: &Option<String>| value.as_deref().is_none_or(|v| v == "refused");
        if (query.decision.is_some() && query.outcome.is_some())
            || (query.code.is_some() && !(refused(&query.decision) && refused(&query.outcome)))
        {
            return Ok(Vec::new());
        }
        let mut conditions: Vec<String> = Vec::new();
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::new();
        let exact = [
            ("tool", &query.tool),
            ("principal", &query.principal),
            ("agent", &query.agent),
            ("decision", &query.decision),
            ("outcome", &query.outcome),
            ("code", &query.code),
            ("writer", &query.writer),
        ];
        for (column, value) in exact {
            if let Some(value) = value {
                params.push(value);
                conditions.push(format!("{column} = ${}", params.len()));
            }
        }
        if let Some(since) = &query.since {
            params.push(since);
            conditions.push(format!(
                "written_at >= ${}::text::timestamptz",
                params.len()
            ));
        }
        if let Some(until) = &query.until {
            params.push(until);
            conditions.push(format!("written_at < ${}::text::timestamptz", params.len()));
        }
        if let Some(before) = &query.before {
            params.push(&before.written_at);
            let at = params.len();
            params.push(&before.writer);
            params.push(&before.seq);
            conditions.push(format!(
                "(written_at, writer, seq) < (${at}::text::timestamptz, ${}, ${})",
                at + 1,
                at + 2
            ));
        }
        let limit = i64::from(query.limit.unwrap_or(50).clamp(1, MAX_PAGE));
        params.push(&limit);
        let filter = if conditions.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", conditions.join(" AND "))
        };
        let rows = self
            .query(
                &format!(
                    "SELECT {RECORD} FROM {{s}}.audit {filter}
                     ORDER BY written_at DESC, writer DESC, seq DESC LIMIT ${}",
                    params.len()
                ),
                &params,
            )
            .await?;
        rows.iter().map(record_of).collect()
    }

    /// The record `seq` of `writer`, with its partner: for an `enter`, the `exit` of the same call
    /// after it; for an `exit`, the `enter` before it. `None` when there is no such record.
    pub async fn call(&self, writer: &str, seq: i64) -> Result<Option<CallRecords>, StoreError> {
        let rows = self
            .query(
                &format!("SELECT {RECORD} FROM {{s}}.audit WHERE writer = $1 AND seq = $2"),
                &[&writer, &seq],
            )
            .await?;
        let Some(record) = rows.first().map(record_of).transpose()? else {
            return Ok(None);
        };
        let partner = |stage: &'static str, after: bool| {
            let (comparison, order) = if after { (">", "ASC") } else { ("<", "DESC") };
            format!(
                "SELECT {RECORD} FROM {{s}}.audit
                 WHERE writer = $1 AND gate = $2 AND call = $3 AND stage = '{stage}'
                   AND seq {comparison} $4
                 ORDER BY seq {order} LIMIT 1"
            )
        };
        let find = async |text: String| -> Result<Option<TrailRecord>, StoreError> {
            let rows = self
                .query(&text, &[&writer, &record.gate, &record.call, &seq])
                .await?;
            rows.first().map(record_of).transpose()
        };
        Ok(Some(match record.stage.as_str() {
            "enter" => CallRecords {
                exit: find(partner("exit", true)).await?,
                enter: Some(record),
                other: None,
            },
            "exit" => CallRecords {
                enter: find(partner("enter", false)).await?,
                exit: Some(record),
                other: None,
            },
            _ => CallRecords {
                enter: None,
                exit: None,
                other: Some(record),
            },
        }))
    }

    /// The records at these places (writer and `seq`), in the order of the trail (writer, then
    /// `seq`): a place the trail does not hold is left out. One statement, however many.
    pub async fn records(&self, at: &[(String, i64)]) -> Result<Vec<TrailRecord>, StoreError> {
        let writers: Vec<&str> = at.iter().map(|(w, _)| w.as_str()).collect();
        let seqs: Vec<i64> = at.iter().map(|(_, s)| *s).collect();
        let rows = self
            .query(
                &format!(
                    "SELECT {RECORD} FROM {{s}}.audit
                     WHERE (writer, seq) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))
                     ORDER BY writer, seq"
                ),
                &[&writers, &seqs],
            )
            .await?;
        rows.iter().map(record_of).collect()
    }

    /// The `policy_refused` records of the last `days` days, newest first, `limit` at most: each an
    /// operator's policy that a gate could not follow (a file that did not check or could not be read,
    /// a fleet's policy a member refused), with why.
    pub async fn refused_policies(
        &self,
        days: u32,
        limit: u32,
    ) -> Result<Vec<TrailRecord>, StoreError> {
        let limit = i64::from(limit.clamp(1, MAX_PAGE));
        let days = f64::from(days);
        let rows = self
            .query(
                &format!(
                    "SELECT {RECORD} FROM {{s}}.audit
                     WHERE written_at >= now() - $1::float8 * interval '1 day'
                       AND stage = 'policy_refused'
                     ORDER BY written_at DESC, writer DESC, seq DESC LIMIT $2"
                ),
                &[&days, &limit],
            )
            .await?;
        rows.iter().map(record_of).collect()
    }

    /// Every fleet, by name, with its joined gates.
    pub async fn fleets(&self) -> Result<Vec<FleetStatus>, StoreError> {
        let names = self
            .query("SELECT name FROM {s}.fleets ORDER BY name", &[])
            .await?;
        let mut fleets = Vec::with_capacity(names.len());
        for row in &names {
            let name: String = row
                .try_get(0)
                .map_err(|e| StoreError::Unexpected(e.to_string()))?;
            let status = self
                .with_client(async |client| fleet::status_with(client, &self.schema, &name).await)
                .await?;
            fleets.push(status);
        }
        Ok(fleets)
    }

    /// The decisions of gates in SHADOW mode over the last `span` (their `enter` records, and the
    /// `refused` records of calls refused before them), by `bucket` and declared risk, oldest first;
    /// of the agent `agent` only, when given.
    pub async fn promotion(
        &self,
        agent: Option<&str>,
        bucket: Bucket,
        span: Duration,
    ) -> Result<Vec<PromotionPoint>, StoreError> {
        let (unit, seconds) = (bucket.unit(), span.as_secs_f64());
        let rows = self
            .query(
                "SELECT to_char(date_trunc($1, written_at AT TIME ZONE 'UTC'),
                        'YYYY-MM-DD\"T\"HH24:MI\"Z\"'),
                     risk, count(*),
                     count(*) FILTER (WHERE decision IN ('allowed', 'approved', 'granted')),
                     count(*) FILTER (WHERE code IN ('MODE_NOT_ALLOWED', 'ABOVE_CEILING'))
                 FROM {s}.audit
                 WHERE mode = 'SHADOW' AND stage IN ('enter', 'refused')
                   AND written_at >= now() - $2::float8 * interval '1 second'
                   AND ($3::text IS NULL OR agent = $3)
                 GROUP BY 1, 2 ORDER BY 1, 2",
                &[&unit, &seconds, &agent],
            )
            .await?;
        let column = |e: tokio_postgres::Error| StoreError::Unexpected(e.to_string());
        rows.iter()
            .map(|row| {
                let risk: Option<String> = row.try_get(1).map_err(column)?;
                let count = |at: usize| -> Result<u64, StoreError> {
                    let n: i64 = row.try_get(at).map_err(column)?;
                    Ok(n.max(0) as u64)
                };
                Ok(PromotionPoint {
                    bucket: row.try_get(0).map_err(column)?,
                    risk: risk.and_then(|r| r.parse().ok()),
                    calls: count(2)?,
                    allowed: count(3)?,
                    would_have_run: count(4)?,
                })
            })
            .collect()
    }
}

impl Reader {
    /// What the rules logged only would have ruled otherwise over the last `span` (the `enter` and
    /// `refused` records that say so), by `bucket` and rule, oldest first; of the agent `agent` only,
    /// when given. Read from each line's text without casting it, so that a row that is not JSON
    /// counts for nothing rather than failing the page.
    pub async fn shadow_rulings(
        &self,
        agent: Option<&str>,
        bucket: Bucket,
        span: Duration,
    ) -> Result<Vec<ShadowPoint>, StoreError> {
        let (unit, seconds) = (bucket.unit(), span.as_secs_f64());
        let rows = self
            .query(
                "SELECT to_char(date_trunc($1, written_at AT TIME ZONE 'UTC'),
                        'YYYY-MM-DD\"T\"HH24:MI\"Z\"'),
                     substring(line from '\"rule_in_shadow\":(\"(?:[^\"\\\\]|\\\\.)*\")'),
                     count(*)
                 FROM {s}.audit
                 WHERE stage IN ('enter', 'refused') AND strpos(line, '\"rule_in_shadow\":') > 0
                   AND written_at >= now() - $2::float8 * interval '1 second'
                   AND ($3::text IS NULL OR agent = $3)
                 GROUP BY 1, 2 ORDER BY 1",
                &[&unit, &seconds, &agent],
            )
            .await?;
        let column = |e: tokio_postgres::Error| StoreError::Unexpected(e.to_string());
        let mut points: BTreeMap<(String, String), u64> = BTreeMap::new();
        for row in &rows {
            let quoted: Option<String> = row.try_get(1).map_err(column)?;
            let Some(said) = quoted.and_then(|q| serde_json::from_str::<String>(&q).ok()) else {
                continue;
            };
            let n: i64 = row.try_get(2).map_err(column)?;
            let bucket: String = row.try_get(0).map_err(column)?;
            *points
                .entry((bucket, shadow_rule(&said).to_owned()))
                .or_default() += n.max(0) as u64;
        }
        Ok(points
            .into_iter()
            .map(|((bucket, rule), calls)| ShadowPoint {
                bucket,
                rule,
                calls,
            })
            .collect())
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("schema", &self.schema)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::shadow_rule;

    #[test]
    fn a_shadow_ruling_is_counted_by_its_rule_not_by_what_one_call_held() {
        for (said, rule) in [
            (
                "refused (DENY_LISTED) by payments.* (ops.toml:9:9)",
                "refused (DENY_LISTED) by payments.* (ops.toml:9:9)",
            ),
            (
                "refused (ARGUMENT_REFUSED) by rule ops.toml:12:1: `amount` 90 is outside ..=50",
                "refused (ARGUMENT_REFUSED) by rule ops.toml:12:1",
            ),
            (
                "refused (ARGUMENT_REFUSED) by rule a:b.toml:3:17: `x` \"by rule z:1:2\"",
                "refused (ARGUMENT_REFUSED) by rule a:b.toml:3:17",
            ),
            (
                "asks by ask_at LOW_WRITE (ops.toml:4:10)",
                "asks by ask_at LOW_WRITE (ops.toml:4:10)",
            ),
            (
                "refused (ARGUMENT_REFUSED) by rule x",
                "refused (ARGUMENT_REFUSED) by rule x",
            ),
        ] {
            assert_eq!(shadow_rule(said), rule, "{said}");
        }
    }
}
