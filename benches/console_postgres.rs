//! What the operator console's reads cost on a store of realistic size (BENCHMARKS.md, "The operator
//! console"): a page of 10,000 pending requests among 100,000 answered ones, and searches of a trail of
//! 1,000,000 records over 30 days, each p50, p99 and max, through `toolgate::postgres::Reader` and as
//! whole pages of the console over HTTP on loopback. Each search is also explained (`EXPLAIN ANALYZE`
//! of the same SQL), to show which index PostgreSQL took.
//!
//! `cargo bench --features console --bench console_postgres` starts a throwaway cluster (as
//! `tests/common/postgres.rs` does; `fsync=off`, which only speeds the fill), migrates it, fills it
//! with SQL and measures. `TOOLGATE_TEST_POSTGRES` names a server to use instead (a database is made
//! on it and dropped at the end); `ROUNDS` sets the number of timed rounds of each read (200).

#[path = "../tests/common/postgres.rs"]
#[allow(dead_code)]
mod postgres;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};
use toolgate::console::{Console, Operators};
use toolgate::postgres::{Reader, TrailQuery, TrailRecord};

const SCHEMA: &str = "toolgate";
const PENDING: i64 = 10_000;
const REQUESTS: i64 = 110_000;
const WRITERS: i64 = 20;
const PER_WRITER: i64 = 50_000;
const PAGE: usize = 50;
/// A code in one call of 10,000: 0.01% of the records.
const RARE_CODE: &str = "EVIDENCE_CHANGED";
/// Stop timing a read after this long, once it has at least `MIN_ROUNDS` rounds.
const TIME_BUDGET: Duration = Duration::from_secs(30);
const MIN_ROUNDS: usize = 10;

/// The requests: every 11th one pending and live (10,000), the others answered an hour before they
/// expired, most of them used, one in ten rejected.
const FILL_APPROVALS: &str = "
INSERT INTO toolgate.approvals (token_sha256, tool, arguments_digest, shown_digest, risk,
    policy_version, agent, mode, manifest, arguments, created_at, expires_at, answered_at, answer,
    answered_by, reason, consumed_at, principal)
SELECT ARRAY[md5('token-' || g) || md5(g || '-token')], tool,
    md5('a' || g) || md5(g || 'a'), md5('s' || g) || md5(g || 's'), risk, 1,
    'agent-' || lpad((g % 60)::text, 2, '0'),
    CASE WHEN g % 3 = 0 THEN 'PARTIAL_AUTO' ELSE 'FULL_AUTO' END,
    jsonb_build_object('id', tool, 'risk', risk, 'domain', 'payments'),
    jsonb_build_object('amount', g % 10000, 'to', 'account-' || g % 977)::text,
    created,
    CASE WHEN pending THEN created + interval '30 days' ELSE created + interval '1 hour' END,
    CASE WHEN NOT pending THEN created + interval '90 seconds' END,
    CASE WHEN pending THEN NULL WHEN g % 10 = 3 THEN 'reject' ELSE 'approve' END,
    CASE WHEN NOT pending THEN 'operator-' || g % 7 END,
    CASE WHEN NOT pending AND g % 10 = 3 THEN 'not this account' END,
    CASE WHEN NOT pending AND g % 10 <> 3 AND g % 5 <> 1 THEN created + interval '100 seconds' END,
    'user-' || lpad((g % 5000)::text, 4, '0')
FROM generate_series(1, 110000) g,
    LATERAL (SELECT g % 11 = 0 AS pending,
        now() - (110000 - g) * interval '20 seconds' AS created,
        'tool-' || lpad((g % 300)::text, 3, '0') AS tool,
        (ARRAY['LOW_WRITE', 'HIGH_WRITE'])[1 + g % 2] AS risk) AS d
ORDER BY g";

/// The records of writers `{from}` to `{to}`, 50,000 each over the last 30 days, as a gate writes
/// them: an allowed call is an `enter` and an `exit` record, a refused one a `refused` record (here
/// two: the call and the agent's retry). What a call is (tool, principal, agent, mode, decision,
/// code) is drawn from hashes of its slot: 300 tools and 5,000 principals, a few of them far more
/// often than the rest; 60 agents, three per writer; mostly SHADOW and FULL_AUTO; 7% of calls
/// refused, 3% approved or granted; the rare code on one record in 10,000.
const FILL_AUDIT: &str = "
INSERT INTO toolgate.audit (writer, seq, prev_hash, hash, stage, tool, gate, call, line, written_at)
SELECT writer, s, prev_hash, hash, stage, tool, 1, call,
    jsonb_strip_nulls(jsonb_build_object(
        'agent', agent,
        'arguments_digest', md5('arguments' || writer || slot) || md5(slot || writer || 'arguments'),
        'call', call,
        'code', code,
        'decision', CASE WHEN stage <> 'exit' THEN decision END,
        'declared_risk', risk,
        'duration_us', CASE WHEN stage = 'exit' THEN
            CASE WHEN outcome = 'refused' THEN 0 ELSE floor(200 + 50000 * u_outcome ^ 3)::bigint END
            END,
        'effective_risk', risk,
        'gate', 1,
        'manifest_digest', '9f2c4e1a7b3d5f60812a4c6e8b0d2f4a6c8e0b2d4f6a8c0e2b4d6f8a0c2e4b6d',
        'message', CASE WHEN code IS NOT NULL THEN 'refused: ' || code END,
        'mode', mode,
        'outcome', outcome,
        'policy_version', 1,
        'prev_hash', prev_hash,
        'principal', principal,
        'stage', stage,
        'timestamp', to_char(written_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
        'tool', tool))::text,
    written_at
FROM (
    SELECT *,
        CASE WHEN stage = 'exit' THEN s - 1 ELSE s END AS call,
        CASE WHEN stage = 'refused' AND first THEN first_code
             WHEN stage = 'refused' THEN retry_code
             WHEN outcome = 'refused' THEN 'BUDGET_EXHAUSTED' END AS code
    FROM (
        SELECT *,
            CASE WHEN decision = 'refused' THEN 'refused' WHEN first THEN 'enter'
                 ELSE 'exit' END AS stage,
            CASE WHEN decision = 'refused' OR first THEN NULL
                 WHEN u_outcome < 0.97 THEN 'ok'
                 WHEN u_outcome < 0.995 THEN 'error'
                 WHEN u_outcome < 0.998 THEN 'cancelled'
                 WHEN u_outcome < 0.999 THEN 'panic'
                 ELSE 'refused' END AS outcome
        FROM (
            SELECT *,
                'tool-' || lpad(tool_i::text, 3, '0') AS tool,
                'user-' || lpad(floor(5000 * u_principal ^ 2)::int::text, 4, '0') AS principal,
                'agent-' || lpad((w * 3 + floor(3 * u_agent))::int::text, 2, '0') AS agent,
                CASE WHEN u_mode < 0.55 THEN 'SHADOW' WHEN u_mode < 0.95 THEN 'FULL_AUTO'
                     WHEN u_mode < 0.98 THEN 'PARTIAL_AUTO' ELSE 'ADVISORY' END AS mode,
                (ARRAY['READ_ONLY', 'PROPOSE_ONLY', 'LOW_WRITE', 'HIGH_WRITE'])[tool_i % 4 + 1] AS risk,
                CASE WHEN u_decision < 0.07 THEN 'refused' WHEN u_decision < 0.09 THEN 'approved'
                     WHEN u_decision < 0.10 THEN 'granted' ELSE 'allowed' END AS decision,
                CASE WHEN u_decision < 0.0002 THEN 'EVIDENCE_CHANGED'
                     ELSE (ARRAY['APPROVAL_REQUIRED', 'APPROVAL_REQUIRED', 'APPROVAL_REQUIRED',
                         'MODE_NOT_ALLOWED', 'MODE_NOT_ALLOWED', 'ABOVE_CEILING', 'BUDGET_EXHAUSTED',
                         'DENY_LISTED', 'TAINTED_SESSION', 'ARGUMENT_REFUSED'])[1 + floor(10 * u_code)::int]
                     END AS first_code,
                (ARRAY['APPROVAL_PENDING', 'APPROVAL_PENDING', 'APPROVAL_REQUIRED', 'MODE_NOT_ALLOWED',
                     'BUDGET_EXHAUSTED'])[1 + floor(5 * u_retry)::int] AS retry_code
            FROM (
                SELECT *, floor(300 * u_tool ^ 2)::int AS tool_i
                FROM (
                    SELECT w, s, writer, slot, first, written_at,
                        md5(writer || s) || md5(s || writer) AS hash,
                        CASE WHEN s = 1 THEN repeat('0', 64)
                             ELSE md5(writer || (s - 1)) || md5((s - 1) || writer) END AS prev_hash,
                        (hashint8extended(k, 1) & 16777215)::float8 / 16777216 AS u_tool,
                        (hashint8extended(k, 2) & 16777215)::float8 / 16777216 AS u_principal,
                        (hashint8extended(k, 3) & 16777215)::float8 / 16777216 AS u_agent,
                        (hashint8extended(k, 4) & 16777215)::float8 / 16777216 AS u_mode,
                        (hashint8extended(k, 5) & 16777215)::float8 / 16777216 AS u_decision,
                        (hashint8extended(k, 6) & 16777215)::float8 / 16777216 AS u_code,
                        (hashint8extended(k, 7) & 16777215)::float8 / 16777216 AS u_outcome,
                        (hashint8extended(k, 8) & 16777215)::float8 / 16777216 AS u_retry
                    FROM (
                        SELECT w, s, 'writer-' || lpad(w::text, 2, '0') AS writer,
                            (s + 1) / 2 AS slot, s % 2 = 1 AS first,
                            now() - interval '30 days' + (s - 1) * (interval '30 days' / 50000)
                                + w * interval '41 milliseconds' AS written_at,
                            w::bigint * 1000000 + (s + 1) / 2 AS k
                        FROM generate_series({from}, {to}) w, generate_series(1, 50000) s
                    ) AS numbered
                ) AS drawn
            ) AS tools
        ) AS slots
    ) AS records
) AS coded";

/// The columns `Reader::search` selects.
const RECORD: &str = "writer, seq, stage, tool, gate, call,
    to_char(written_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
    principal, agent, mode, decision, outcome, code, risk, line";

fn fill(url: &str) {
    let started = Instant::now();
    postgres::execute(url, FILL_APPROVALS);
    println!(
        "fill: {REQUESTS} requests ({PENDING} pending) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let per_statement = 5;
    for from in (0..WRITERS).step_by(per_statement) {
        let at = Instant::now();
        let to = (from + per_statement as i64 - 1).min(WRITERS - 1);
        postgres::execute(
            url,
            &FILL_AUDIT
                .replace("{from}", &from.to_string())
                .replace("{to}", &to.to_string()),
        );
        println!(
            "fill: audit records of writers {from} to {to} ({} records) in {:.1} s",
            (to - from + 1) * PER_WRITER,
            at.elapsed().as_secs_f64()
        );
    }
    // A trail written over 30 days has been vacuumed by autovacuum; vacuuming here also keeps
    // autovacuum from starting on the new rows while they are read.
    let at = Instant::now();
    for statement in [
        "VACUUM (ANALYZE) toolgate.approvals",
        "VACUUM (ANALYZE) toolgate.audit",
    ] {
        postgres::execute(url, statement);
    }
    println!(
        "fill: VACUUM (ANALYZE) in {:.1} s; in all {:.1} s",
        at.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    for row in postgres::query(
        url,
        "SELECT c.relname, pg_size_pretty(pg_table_size(c.oid)),
             pg_size_pretty(pg_indexes_size(c.oid)), c.reltuples::bigint
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'toolgate' AND c.relname IN ('approvals', 'audit') ORDER BY 1",
    ) {
        let text = |i: usize| row[i].clone().unwrap_or_default();
        println!(
            "table {}: {} rows, {} of rows, {} of indexes",
            text(0),
            text(3),
            text(1),
            text(2)
        );
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Times `read` `rounds` times after a tenth as many of warm-up (fewer, at least `MIN_ROUNDS`, once
/// the timed rounds took `TIME_BUDGET`), and prints p50, p99 and max; returns what its last round
/// answered.
async fn time<T>(label: &str, rounds: usize, mut read: impl AsyncFnMut() -> T) -> T {
    let mut answer = read().await;
    for _ in 1..(rounds / 10).max(2) {
        answer = read().await;
    }
    let started = Instant::now();
    let mut times = Vec::with_capacity(rounds);
    while times.len() < rounds && (times.len() < MIN_ROUNDS || started.elapsed() < TIME_BUDGET) {
        let at = Instant::now();
        answer = read().await;
        times.push(at.elapsed());
    }
    times.sort();
    let p99 = percentile(&times, 0.99);
    println!(
        "{label:<58} n={:<4} p50 {:>8.3} ms   p99 {:>8.3} ms   max {:>8.3} ms   {}",
        times.len(),
        ms(percentile(&times, 0.50)),
        ms(p99),
        ms(*times.last().expect("a round")),
        if p99 <= Duration::from_millis(100) {
            "within 100 ms"
        } else {
            "OVER 100 ms"
        },
    );
    answer
}

/// `text` as an SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The statement `Reader::search` sends for `query`, its parameters written in.
fn search_sql(query: &TrailQuery) -> String {
    let mut conditions = Vec::new();
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
            conditions.push(format!("{column} = {}", literal(value)));
        }
    }
    if let Some(since) = &query.since {
        conditions.push(format!("written_at >= {}::timestamptz", literal(since)));
    }
    if let Some(until) = &query.until {
        conditions.push(format!("written_at < {}::timestamptz", literal(until)));
    }
    if let Some(before) = &query.before {
        conditions.push(format!(
            "(written_at, writer, seq) < ({}::timestamptz, {}, {})",
            literal(&before.written_at),
            literal(&before.writer),
            before.seq
        ));
    }
    let filter = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    format!(
        "SELECT {RECORD} FROM toolgate.audit {filter}
         ORDER BY written_at DESC, writer DESC, seq DESC LIMIT {}",
        query.limit.unwrap_or(50)
    )
}

async fn rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    let mut rows = Vec::new();
    for message in client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
    {
        if let SimpleQueryMessage::Row(row) = message {
            rows.push(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_owned))
                    .collect(),
            );
        }
    }
    rows
}

async fn one(client: &Client, sql: &str) -> String {
    rows(client, sql).await[0][0].clone().unwrap_or_default()
}

/// One plan node and its children, compactly: `Limit(Index Scan Backward audit_tool rows=50)`.
fn node(plan: &Value) -> String {
    let mut text = plan["Node Type"].as_str().unwrap_or("?").to_owned();
    if plan["Scan Direction"] == "Backward" {
        text.push_str(" Backward");
    }
    if let Some(index) = plan["Index Name"].as_str() {
        text.push_str(&format!(" {index}"));
    } else if let Some(relation) = plan["Relation Name"].as_str() {
        text.push_str(&format!(" {relation}"));
    }
    let scan = plan["Node Type"]
        .as_str()
        .is_some_and(|t| t.contains("Scan"));
    if scan {
        let rows = plan["Actual Rows"].as_f64().unwrap_or(0.0)
            * plan["Actual Loops"].as_f64().unwrap_or(1.0);
        text.push_str(&format!(" rows={rows}"));
        for key in ["Rows Removed by Filter", "Rows Removed by Index Recheck"] {
            if let Some(removed) = plan[key].as_f64().filter(|r| *r > 0.0) {
                text.push_str(&format!(" removed={removed}"));
            }
        }
    }
    if let Some(children) = plan["Plans"].as_array() {
        let inner: Vec<String> = children.iter().map(node).collect();
        text.push_str(&format!("({})", inner.join(", ")));
    }
    text
}

/// `EXPLAIN ANALYZE` of `sql`: its plan compactly, and the server's execution time.
async fn explain(client: &Client, sql: &str) {
    let json = one(
        client,
        &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}"),
    )
    .await;
    let explained: Value = serde_json::from_str(&json).expect("EXPLAIN's JSON");
    let top = &explained[0];
    let buffers = |key: &str| top["Plan"][key].as_i64().unwrap_or(0);
    println!(
        "    plan: {}; execution {:.3} ms, planning {:.3} ms, buffers hit {} read {}",
        node(&top["Plan"]),
        top["Execution Time"].as_f64().unwrap_or(0.0),
        top["Planning Time"].as_f64().unwrap_or(0.0),
        buffers("Shared Hit Blocks"),
        buffers("Shared Read Blocks"),
    );
}

/// The key a search orders by, newest first.
fn order_key(record: &TrailRecord) -> (&str, &str, i64) {
    (&record.written_at, &record.writer, record.seq)
}

/// Whether `record` is one `query` asks for. Times compare as text: the bench writes them in the
/// format the trail answers with.
fn matches(query: &TrailQuery, record: &TrailRecord) -> bool {
    let same = |wanted: &Option<String>, found: Option<&str>| {
        wanted.as_deref().is_none_or(|w| found == Some(w))
    };
    same(&query.tool, Some(record.tool.as_str()))
        && same(&query.principal, record.principal.as_deref())
        && same(&query.agent, record.agent.as_deref())
        && same(&query.decision, record.decision.as_deref())
        && same(&query.outcome, record.outcome.as_deref())
        && same(&query.code, record.code.as_deref())
        && same(&query.writer, Some(record.writer.as_str()))
        && query
            .since
            .as_deref()
            .is_none_or(|since| record.written_at.as_str() >= since)
        && query
            .until
            .as_deref()
            .is_none_or(|until| record.written_at.as_str() < until)
        && query.before.as_ref().is_none_or(|before| {
            order_key(record)
                < (
                    before.written_at.as_str(),
                    before.writer.as_str(),
                    before.seq,
                )
        })
}

/// Checks a search's answer: every record matches, newest first, and the page is the one the same SQL
/// finds (the same records, in the same order).
async fn check(client: &Client, label: &str, query: &TrailQuery, found: &[TrailRecord]) {
    for record in found {
        assert!(matches(query, record), "{label}: {record:?} does not match");
        assert!(record.line.starts_with('{'), "{label}: a JSON line");
    }
    for pair in found.windows(2) {
        assert!(
            order_key(&pair[0]) > order_key(&pair[1]),
            "{label}: not newest first: {:?} then {:?}",
            order_key(&pair[0]),
            order_key(&pair[1])
        );
    }
    let expected: Vec<(String, i64)> = rows(client, &search_sql(query))
        .await
        .into_iter()
        .map(|row| {
            (
                row[0].clone().unwrap_or_default(),
                row[1].as_deref().unwrap_or("0").parse().expect("a seq"),
            )
        })
        .collect();
    let got: Vec<(String, i64)> = found.iter().map(|r| (r.writer.clone(), r.seq)).collect();
    assert_eq!(got, expected, "{label}: not the page the SQL finds");
}

/// Times `Reader::search` of `query`, checks its answer and explains it; where the reader refuses
/// the search, times the statement it would send instead, its values written in, and says so.
async fn search(
    client: &Client,
    reader: &Reader,
    label: &str,
    query: &TrailQuery,
    rounds: usize,
) -> Option<Vec<TrailRecord>> {
    let sql = search_sql(query);
    let matching: usize = one(
        client,
        &format!(
            "SELECT count(*) FROM ({}) AS found",
            sql.replace(&format!(" LIMIT {PAGE}"), "")
        ),
    )
    .await
    .parse()
    .expect("a count");
    let label = format!("{label} ({matching} match)");
    let found = match reader.search(query).await {
        Ok(_) => {
            let found = time(&label, rounds, async || {
                reader.search(query).await.expect("a search")
            })
            .await;
            check(client, &label, query, &found).await;
            assert_eq!(found.len(), matching.min(PAGE), "{label}: the page's size");
            Some(found)
        }
        Err(error) => {
            println!(
                "{label}: Reader::search fails ({error}); timed instead: its statement, the values \
                 written in"
            );
            let found = time(&label, rounds, async || rows(client, &sql).await).await;
            assert_eq!(found.len(), matching.min(PAGE), "{label}: the page's size");
            None
        }
    };
    explain(client, &sql).await;
    found
}

/// One HTTP/1.1 exchange on a connection of its own: the status, the head and the body.
async fn http(addr: SocketAddr, request: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("the request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("the answer");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

fn get(addr: SocketAddr, path: &str, cookie: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nCookie: toolgate_console={cookie}\r\n\
         Connection: close\r\n\r\n"
    )
}

async fn pages(url: &str, rounds: usize, mid: i64, tool: &str) {
    let console = Console::builder()
        .operators(Operators::new().token("bench-token", "bench"))
        .connect(url)
        .await
        .expect("the console connects");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address");
    let server = tokio::spawn(console.serve(listener));
    let body = "token=bench-token";
    let (status, head, _) = http(
        addr,
        &format!(
            "POST /login HTTP/1.1\r\nHost: {addr}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert_eq!(status, 303, "logged in: {head}");
    let cookie = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| name.eq_ignore_ascii_case("set-cookie"))
        .find_map(|(_, value)| value.trim().strip_prefix("toolgate_console="))
        .and_then(|value| value.split(';').next())
        .expect("the session's cookie")
        .to_owned();
    let cases = [
        ("GET /approvals", "/approvals".to_owned(), "10000 pending"),
        (
            "GET /approvals?after=<middle>",
            format!("/approvals?after={mid}"),
            "10000 pending",
        ),
        (
            "GET /trail?tool=..",
            format!("/trail?tool={tool}"),
            "id=\"results\"",
        ),
        (
            "GET /trail?code=<rare>",
            format!("/trail?code={RARE_CODE}"),
            RARE_CODE,
        ),
    ];
    for (label, path, shown) in cases {
        let request = get(addr, &path, &cookie);
        let (status, _, body) = time(label, rounds, async || http(addr, &request).await).await;
        assert_eq!(status, 200, "{label}: {body}");
        assert!(body.contains(shown), "{label}: the page shows {shown:?}");
        assert!(!body.contains("search failed"), "{label}: {body}");
        let rows = body.matches("<tr").count().saturating_sub(1);
        println!("    {} bytes, {rows} rows", body.len());
    }
    server.abort();
}

async fn measure(url: &str, rounds: usize) {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("a connection");
    tokio::spawn(connection);
    let reader = Reader::connect(url, SCHEMA, Duration::from_secs(60))
        .await
        .expect("the reader connects");

    println!(
        "\ntimes are round trips on loopback, the answer decoded; a plan's execution is the \
         server's own time, under EXPLAIN ANALYZE"
    );
    println!("\npending requests, through Reader::pending (two statements: the page, the count)");
    let mid: i64 = one(
        &client,
        "SELECT id FROM toolgate.approvals WHERE answered_at IS NULL ORDER BY id OFFSET 4999 LIMIT 1",
    )
    .await
    .parse()
    .expect("an id");
    for (label, after) in [
        ("pending(None, 50): the first page", None),
        ("pending(Some(middle), 50): page 101 of 200", Some(mid)),
    ] {
        let page = time(label, rounds, async || {
            reader.pending(after, 50).await.expect("a page")
        })
        .await;
        assert_eq!(page.requests.len(), PAGE, "{label}: a full page");
        assert_eq!(page.total, PENDING as u64, "{label}: every pending request");
        assert!(
            page.requests.windows(2).all(|p| p[0].id < p[1].id),
            "{label}: oldest first"
        );
        assert!(
            page.requests
                .iter()
                .all(|r| r.state == toolgate::postgres::RequestState::Pending
                    && r.id > after.unwrap_or(0)),
            "{label}: pending requests after {after:?}"
        );
        assert_eq!(page.next, page.requests.last().map(|r| r.id), "{label}");
        explain(
            &client,
            &format!(
                "SELECT * FROM toolgate.approvals
                 WHERE answered_at IS NULL AND expires_at > now() AND id > {}
                 ORDER BY id LIMIT 51",
                after.unwrap_or(0)
            ),
        )
        .await;
    }
    println!("    the count:");
    explain(
        &client,
        "SELECT count(*) FROM toolgate.approvals WHERE answered_at IS NULL AND expires_at > now()",
    )
    .await;

    println!("\ntrail searches, through Reader::search (pages of 50, newest first)");
    let tool = "tool-007".to_owned();
    let day = |days: i64| {
        format!(
            "SELECT to_char((min(written_at) + interval '{days} days') AT TIME ZONE 'UTC',
                 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM toolgate.audit"
        )
    };
    let since = one(&client, &day(15)).await;
    let until = one(&client, &day(16)).await;
    let query = |fill: &dyn Fn(&mut TrailQuery)| {
        let mut query = TrailQuery::default();
        query.limit = Some(PAGE as u32);
        fill(&mut query);
        query
    };
    let cases: Vec<(String, TrailQuery)> = vec![
        ("no filter".into(), query(&|_| {})),
        (
            format!("tool = {tool}"),
            query(&|q| q.tool = Some(tool.clone())),
        ),
        (
            "principal = user-0042".into(),
            query(&|q| q.principal = Some("user-0042".into())),
        ),
        (
            "agent = agent-07".into(),
            query(&|q| q.agent = Some("agent-07".into())),
        ),
        (
            "decision = refused".into(),
            query(&|q| q.decision = Some("refused".into())),
        ),
        (
            format!("code = {RARE_CODE} (0.01% of records)"),
            query(&|q| q.code = Some(RARE_CODE.into())),
        ),
        (
            "one day (since, until)".into(),
            query(&|q| {
                q.since = Some(since.clone());
                q.until = Some(until.clone());
            }),
        ),
        (
            "tool-000 + user-0000 + one day".into(),
            query(&|q| {
                q.tool = Some("tool-000".into());
                q.principal = Some("user-0000".into());
                q.since = Some(since.clone());
                q.until = Some(until.clone());
            }),
        ),
        (
            "nothing: a tool no record has".into(),
            query(&|q| q.tool = Some("no-such-tool".into())),
        ),
        // `decision` is on `enter` and `refused` records, `outcome` on `exit` records: no record
        // has both, and a search for both reads, at worst, every record of the filter PostgreSQL
        // starts from.
        (
            "nothing: decision = approved + outcome = error".into(),
            query(&|q| {
                q.decision = Some("approved".into());
                q.outcome = Some("error".into());
            }),
        ),
        (
            "nothing: decision = refused + outcome = ok".into(),
            query(&|q| {
                q.decision = Some("refused".into());
                q.outcome = Some("ok".into());
            }),
        ),
        (
            "nothing: decision = allowed + outcome = ok".into(),
            query(&|q| {
                q.decision = Some("allowed".into());
                q.outcome = Some("ok".into());
            }),
        ),
    ];
    let mut first_pages = Vec::new();
    for (label, query) in &cases {
        first_pages.push(search(&client, &reader, label, query, rounds).await);
    }
    for (at, label) in [(0, "no filter, page 2"), (1, "tool, page 2")] {
        let first = first_pages[at].as_ref().expect("the first page");
        let last = first.last().expect("a full first page");
        let mut query = cases[at].1.clone();
        query.before = Some(last.cursor());
        if let Some(found) = search(&client, &reader, label, &query, rounds).await {
            assert_eq!(found.len(), PAGE, "{label}: a full page");
            assert!(
                order_key(&found[0]) < order_key(last),
                "{label}: after the first page"
            );
        }
    }

    println!("\nwhole pages of the console, HTTP/1.1 on loopback (a connection per request)");
    pages(url, rounds, mid, &tool).await;
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing else to run.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(200);
    let given = std::env::var(postgres::SERVER_ENV)
        .ok()
        .filter(|u| !u.is_empty());
    let cluster = given
        .is_none()
        .then(|| postgres::Cluster::new(&["fsync=off"]));
    let url = match &cluster {
        Some(cluster) => cluster.database("console_bench"),
        None => postgres::database("console_bench"),
    };
    let version = postgres::query(&url, "SHOW server_version");
    println!(
        "PostgreSQL {}, {} cores",
        version[0][0].as_deref().unwrap_or("?"),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    fill(&url);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(measure(&url, rounds));
    if let Some(server) = given {
        let database = url.rsplit('/').next().unwrap_or_default();
        postgres::execute(
            &server,
            &format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"),
        );
    }
}
