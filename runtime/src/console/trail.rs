//! The audit trail: searched, a call's two records side by side, and every writer's chain verified.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::html::{OrDash, Shown, page};
use super::shared::Operator;
use super::shared::{Shared, unavailable};
use crate::approval::store::StoreError;
use crate::postgres::{TrailCursor, TrailQuery, TrailRecord};

/// Records per page of a search.
const PAGE: u32 = 50;

#[derive(serde::Deserialize, serde::Serialize, Default)]
pub(super) struct SearchForm {
    #[serde(default)]
    tool: String,
    #[serde(default)]
    principal: String,
    #[serde(default)]
    agent: String,
    #[serde(default)]
    decision: String,
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    code: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    before_at: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    before_writer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    before_seq: Option<i64>,
}

fn given(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

const DECISIONS: [&str; 4] = ["allowed", "approved", "granted", "refused"];
const OUTCOMES: [&str; 5] = ["ok", "error", "panic", "cancelled", "refused"];

pub(super) async fn search(
    State(console): State<Shared>,
    operator: Operator,
    Query(form): Query<SearchForm>,
) -> Response {
    let mut query = TrailQuery {
        tool: given(&form.tool),
        principal: given(&form.principal),
        agent: given(&form.agent),
        decision: given(&form.decision),
        outcome: given(&form.outcome),
        code: given(&form.code),
        since: given(&form.since),
        until: given(&form.until),
        limit: Some(PAGE),
        ..TrailQuery::default()
    };
    if let (Some(written_at), Some(seq)) = (given(&form.before_at), form.before_seq) {
        query.before = Some(TrailCursor {
            written_at,
            writer: form.before_writer.clone(),
            seq,
        });
    }
    let found = console.reader.search(&query).await;
    let (records, problem) = match found {
        Ok(records) => (records, None),
        // What the server could not read is a time or a cursor of the query, said in the console's
        // words (the server's message would repeat it); an outage is one.
        Err(StoreError::Unexpected(_)) => (
            Vec::new(),
            Some(
                "a time or a page link of this search cannot be read: write times as 2026-11-26T08:00Z",
            ),
        ),
        Err(error) => return unavailable(&operator, &error),
    };
    let next = (records.len() as u32 == PAGE)
        .then(|| records.last().map(TrailRecord::cursor))
        .flatten()
        .map(|cursor| {
            let next = SearchForm {
                before_at: cursor.written_at,
                before_writer: cursor.writer,
                before_seq: Some(cursor.seq),
                ..form_copy(&form)
            };
            serde_urlencoded::to_string(&next).unwrap_or_default()
        });
    let body = html! {
        h1 { "Audit trail" }
        form #search method="get" action="/trail" {
            label { "Tool" input type="text" name="tool" value=(form.tool); }
            label { "Principal" input type="text" name="principal" value=(form.principal); }
            label { "Agent" input type="text" name="agent" value=(form.agent); }
            label { "Decision" select name="decision" {
                option value="" { "any" }
                @for d in DECISIONS { option value=(d) selected[form.decision == d] { (d) } }
            } }
            label { "Outcome" select name="outcome" {
                option value="" { "any" }
                @for o in OUTCOMES { option value=(o) selected[form.outcome == o] { (o) } }
            } }
            label { "Code" input type="text" name="code" value=(form.code) placeholder="APPROVAL_REQUIRED"; }
            label { "Since" input type="text" name="since" value=(form.since) placeholder="2026-11-26T00:00Z"; }
            label { "Until" input type="text" name="until" value=(form.until); }
            button.primary type="submit" { "Search" }
            a href="/trail/verify" { "Verify every chain" }
        }
        @if let Some(problem) = &problem {
            p #error.problem { "The search failed: " (problem) "." }
        }
        (records_table(&records))
        @if let Some(next) = next {
            div.pager { a #next href={ "/trail?" (next) } { "Older records" } }
        }
    };
    page(
        "Audit trail",
        "/trail",
        Some((&operator.name, operator.csrf())),
        body,
    )
    .into_response()
}

/// The records of a search, or of a list, newest or oldest first as given.
fn records_table(records: &[TrailRecord]) -> Markup {
    html! {
        table #results {
            thead { tr {
                th { "Written" } th { "Writer" } th { "Seq" } th { "Stage" } th { "Tool" } th { "Principal" }
                th { "Agent" } th { "Mode" } th { "Decision / outcome" } th { "Code" }
            } }
            tbody {
                @for record in records {
                    tr.record {
                        td.written { a.call href={ "/trail/call?" (call_query(record)) } title=(record.written_at) { (short_time(&record.written_at)) } }
                        td.code { (Shown(&record.writer)) }
                        td { (record.seq) }
                        td { (Shown(&record.stage)) }
                        td.code { (Shown(&record.tool)) }
                        td { (OrDash(record.principal.as_deref())) }
                        td { (OrDash(record.agent.as_deref())) }
                        td { (OrDash(record.mode.as_deref())) }
                        td { (OrDash(record.decision.as_deref().or(record.outcome.as_deref()))) }
                        td.code { (OrDash(record.code.as_deref())) }
                    }
                }
                @if records.is_empty() { tr { td colspan="10" .muted { "No record matches." } } }
            }
        }
    }
}

/// How many places one list of records may name: more than a replay's row keeps
/// ([`MAX_REFERENCES`](crate::policy_file::MAX_REFERENCES)).
const MAX_LISTED: usize = 2 * crate::policy_file::MAX_REFERENCES;

/// The records at the places the query names, as `w=WRITER&s=SEQ,SEQ,..` for each writer, in the
/// trail's order: what a replay's count links to.
pub(super) async fn records(
    State(console): State<Shared>,
    operator: Operator,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let mut at: Vec<(String, i64)> = Vec::new();
    let mut writer: Option<String> = None;
    let mut unreadable = false;
    for (key, value) in pairs {
        match key.as_str() {
            "w" => writer = Some(value),
            "s" => {
                let Some(writer) = &writer else {
                    unreadable = true;
                    continue;
                };
                for seq in value.split(',').filter(|s| !s.is_empty()) {
                    match seq.parse::<i64>() {
                        Ok(seq) => at.push((writer.clone(), seq)),
                        Err(_) => unreadable = true,
                    }
                }
            }
            _ => unreadable = true,
        }
    }
    if at.len() > MAX_LISTED {
        at.truncate(MAX_LISTED);
        unreadable = true;
    }
    let found = console.reader.records(&at).await;
    let records = match found {
        Ok(records) => records,
        Err(error) => return unavailable(&operator, &error),
    };
    let body = html! {
        h1 { "Records of the trail" }
        p #listed { (records.len()) " of the " (at.len()) " records asked for, in each writer's order." }
        @if unreadable {
            p #error.problem { "Part of this link is not a list of records: what could be read is listed." }
        }
        (records_table(&records))
        p { a href="/trail" { "Back to the trail" } }
    };
    page(
        "Records",
        "/trail",
        Some((&operator.name, operator.csrf())),
        body,
    )
    .into_response()
}

/// A record's time to the second, for the table; the title holds it to the microsecond.
fn short_time(written_at: &str) -> String {
    written_at
        .get(..19)
        .unwrap_or(written_at)
        .replacen('T', " ", 1)
}

fn form_copy(form: &SearchForm) -> SearchForm {
    SearchForm {
        tool: form.tool.clone(),
        principal: form.principal.clone(),
        agent: form.agent.clone(),
        decision: form.decision.clone(),
        outcome: form.outcome.clone(),
        code: form.code.clone(),
        since: form.since.clone(),
        until: form.until.clone(),
        ..SearchForm::default()
    }
}

fn call_query(record: &TrailRecord) -> String {
    serde_urlencoded::to_string([
        ("writer", record.writer.as_str()),
        ("seq", &record.seq.to_string()),
    ])
    .unwrap_or_default()
}

#[derive(serde::Deserialize)]
pub(super) struct CallQuery {
    writer: String,
    seq: i64,
}

pub(super) async fn call(
    State(console): State<Shared>,
    operator: Operator,
    Query(query): Query<CallQuery>,
) -> Response {
    let found = console.reader.call(&query.writer, query.seq).await;
    let records = match found {
        Ok(Some(records)) => records,
        Ok(None) => {
            return (
                StatusCode::NOT_FOUND,
                page(
                    "No record",
                    "/trail",
                    Some((&operator.name, operator.csrf())),
                    html! { h1 { "No such record" } p { a href="/trail" { "Back to the trail" } } },
                ),
            )
                .into_response();
        }
        Err(error) => return unavailable(&operator, &error),
    };
    let fields = |record: &Option<TrailRecord>| -> Vec<(String, String)> {
        record
            .as_ref()
            .and_then(|r| {
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&r.line).ok()
            })
            .map(|map| {
                map.into_iter()
                    .map(|(k, v)| {
                        let text = match v {
                            serde_json::Value::String(s) => s,
                            other => other.to_string(),
                        };
                        (k, text)
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let enter = fields(&records.enter);
    let exit = fields(&records.exit);
    let mut names: Vec<&String> = enter.iter().chain(&exit).map(|(k, _)| k).collect();
    names.sort();
    names.dedup();
    let value = |list: &[(String, String)], name: &str| {
        list.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    };
    let first = records
        .enter
        .as_ref()
        .or(records.exit.as_ref())
        .or(records.other.as_ref());
    let body = html! {
        h1 { "A call in the trail" }
        @if let Some(record) = first {
            p { "Tool " code { (Shown(&record.tool)) } ", writer " code { (Shown(&record.writer)) } ", gate " (record.gate) ", call " (record.call) }
        }
        @if let Some(other) = &records.other {
            h2 { "Record" }
            pre #other { (Shown(&other.line)) }
        } @else {
            table #call {
                thead { tr { th { "Field" } th { "enter" } th { "exit" } } }
                tbody {
                    @for name in &names {
                        tr {
                            td.code { (Shown(name)) }
                            td.code { (OrDash(value(&enter, name).as_deref())) }
                            td.code { (OrDash(value(&exit, name).as_deref())) }
                        }
                    }
                }
            }
            div.side {
                div { h2 { "enter" } pre #enter { (OrDash(records.enter.as_ref().map(|r| r.line.as_str()))) } }
                div { h2 { "exit" } pre #exit { (OrDash(records.exit.as_ref().map(|r| r.line.as_str()))) } }
            }
        }
        p { a href="/trail" { "Back to the trail" } }
    };
    page(
        "A call",
        "/trail",
        Some((&operator.name, operator.csrf())),
        body,
    )
    .into_response()
}

pub(super) async fn verify(State(console): State<Shared>, operator: Operator) -> Response {
    let (url, schema) = (console.url.clone(), console.schema.clone());
    let verified = tokio::task::spawn_blocking(move || {
        crate::postgres::verify_trail_with_bound_keys(&url, &schema)
    })
    .await;
    let report = match verified {
        Ok(Ok(report)) => report,
        Ok(Err(error)) => return unavailable(&operator, &error),
        Err(_) => {
            return unavailable(
                &operator,
                &crate::approval::store::StoreError::Unexpected("the verification stopped".into()),
            );
        }
    };
    let body = html! {
        h1 { "The trail, verified" }
        p #verdict class=(if report.is_intact() { "intact" } else { "broken" }) {
            @if report.is_intact() { "INTACT" } @else { "BROKEN" }
            ": " (report.writers.len()) " writer(s)"
        }
        p.muted { "Each writer's hash chain, read from its first record; each row's columns against its line; signed checkpoints against the public key bound to the writer at its first use." }
        table #writers {
            thead { tr { th { "Writer" } th { "Chain" } th { "Records" } th { "Checkpoints" } th { "Calls without exit" } } }
            tbody {
                @for writer in &report.writers {
                    tr.writer class=(if writer.is_intact() { "intact" } else { "broken" }) {
                        td.code { (Shown(&writer.writer)) }
                        td { (chain_status(writer)) }
                        td { (writer.chain.records) }
                        td {
                            @match &writer.checkpoints {
                                None => { span.muted { "no key bound" } }
                                Some(c) if c.is_intact() => { span.intact { (c.verified) " verified" } " (" (c.uncovered()) " records after the last)" }
                                Some(c) => { span.broken { (c.problems.len()) " problem(s)" } pre { (Shown(&c.to_string())) } }
                            }
                        }
                        td { (writer.interrupted.len()) }
                    }
                }
            }
        }
        p { a href="/trail" { "Back to the trail" } }
    };
    page(
        "Verified",
        "/trail",
        Some((&operator.name, operator.csrf())),
        body,
    )
    .into_response()
}

fn chain_status(writer: &crate::postgres::WriterReport) -> Markup {
    html! {
        @if writer.chain.is_intact() && writer.columns_differ.is_none() {
            span.intact { "intact" }
        } @else {
            span.broken { "broken" }
            @if let Some(seq) = writer.columns_differ { " (the row at seq " (seq) " was edited)" }
            pre { (Shown(&writer.chain.to_string())) }
        }
    }
}
