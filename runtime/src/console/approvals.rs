//! The pending requests, followed live, and the answer to one.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use futures_util::Stream;
use maud::{Markup, html};

use super::html::{OrDash, Shown, ShownLines, page, problem, problem_named};
use super::operators::cookie_of;
use super::shared::Operator;
use super::shared::{Shared, unavailable};
use crate::approval::store::{Answer, ApproveError};
use crate::postgres::{PendingPage, RequestState, StoredRequest};

/// Requests per page of the list.
const PAGE: u32 = 50;

#[derive(serde::Deserialize)]
pub(super) struct ListQuery {
    after: Option<i64>,
}

pub(super) async fn list(
    State(console): State<Shared>,
    operator: Operator,
    Query(query): Query<ListQuery>,
) -> Response {
    let pending = match read_page(&console, query.after).await {
        Ok(page) => page,
        Err(error) => return unavailable(&operator, &error),
    };
    let body = html! {
        h1 { "Pending approvals" }
        p.muted { "Calls waiting for an operator, oldest first. The list follows the store as requests arrive and are answered." }
        section #pending-section { (pending_table(&pending, query.after)) }
    };
    page(
        "Approvals",
        "/approvals",
        Some((&operator.name, operator.csrf())),
        body,
    )
    .into_response()
}

/// The list's table alone, which the page's script reads again when the store changes.
pub(super) async fn table(
    State(console): State<Shared>,
    operator: Operator,
    Query(query): Query<ListQuery>,
) -> Response {
    match read_page(&console, query.after).await {
        Ok(pending) => pending_table(&pending, query.after).into_response(),
        Err(error) => unavailable(&operator, &error),
    }
}

async fn read_page(
    console: &Shared,
    after: Option<i64>,
) -> Result<PendingPage, crate::approval::store::StoreError> {
    console.reader.pending(after, PAGE).await
}

fn pending_table(pending: &PendingPage, after: Option<i64>) -> Markup {
    html! {
        p #pending-count { (pending.total) " pending" }
        table #pending {
            thead { tr {
                th { "Request" } th { "Waiting" } th { "Principal" } th { "Agent" } th { "Tool" }
                th { "Risk" } th { "Arguments" } th { "Session tainted by" }
            } }
            tbody {
                @for request in &pending.requests {
                    tr.request data-request=(request.id) {
                        td { a.open href={ "/approvals/" (request.id) } { "#" (request.id) } }
                        td { (age(request.age)) }
                        td { (OrDash(request.principal.as_deref())) }
                        td { (OrDash(request.agent.as_deref())) }
                        td.code {
                            (Shown(&request.binding.tool))
                            @if request.irreversible { " " span.irreversible { "irreversible" } }
                        }
                        td { (risk(request)) }
                        td.code { (OrDash(request.arguments.as_deref().map(|a| shorten(a, 160)))) }
                        td { (OrDash(request.tainted.as_ref().map(|(tool, _)| tool.as_str()))) }
                    }
                }
                @if pending.requests.is_empty() {
                    tr { td colspan="8" .muted { "Nothing waits for an operator." } }
                }
            }
        }
        div.pager {
            @if after.is_some() { a href="/approvals" { "First page" } }
            @if let Some(next) = pending.next { a #next href={ "/approvals?after=" (next) } { "Next page" } }
        }
    }
}

/// The risk declared by the tool's manifest and the one the decision worked with, where they differ.
fn risk(request: &StoredRequest) -> Markup {
    let effective = request.binding.risk.to_string();
    let declared = declared_risk(request);
    html! {
        span class={ "risk-" (effective) } { (effective) }
        @if let Some(declared) = declared.filter(|d| *d != effective) {
            " " span.muted { "(declared " (Shown(&declared)) ")" }
        }
    }
}

fn declared_risk(request: &StoredRequest) -> Option<String> {
    let manifest: serde_json::Value = serde_json::from_str(request.manifest.as_deref()?).ok()?;
    manifest.get("risk_level")?.as_str().map(str::to_owned)
}

fn shorten(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

fn age(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs / 60),
        _ => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
    }
}

/// The store's changes as server-sent events: one `changed` event per change (and when the reader's
/// connection is lost, so that the page reads again), and one every 15 seconds, when requests may have
/// expired; the stream ends with its session. Only a session follows it (`_operator`).
pub(super) async fn events(
    State(console): State<Shared>,
    _operator: Operator,
    headers: HeaderMap,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let cookie = cookie_of(&headers).unwrap_or_default().to_owned();
    let mut changes = console.reader.changes();
    // A page follows what changes after it opened.
    changes.borrow_and_update();
    let stream = futures_util::stream::unfold(
        (changes, console, cookie),
        |(mut changes, console, cookie)| async move {
            let changed = tokio::time::timeout(Duration::from_secs(15), changes.changed()).await;
            if matches!(changed, Ok(Err(_))) {
                return None;
            }
            // Nothing is told to a browser whose session has ended since the stream opened.
            console.session(&cookie)?;
            Some((
                Ok(Event::default().data("changed")),
                (changes, console, cookie),
            ))
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[derive(serde::Deserialize)]
pub(super) struct DetailQuery {
    problem: Option<String>,
}

/// The console's own sentences for what stopped an answer; the query names one by its key.
const PROBLEMS: [(&str, &str); 6] = [
    (
        "confirmation",
        "Not approved: this call cannot be undone, and its target must be typed exactly as shown. The request still waits.",
    ),
    (
        "session",
        "Not approved: an irreversible call asks every time, so it cannot be approved for the session. The request still waits.",
    ),
    (
        "answered",
        "This request was answered already, or has expired: nothing was changed.",
    ),
    (
        "reason",
        "A rejection needs a reason, which the agent reads.",
    ),
    ("action", "That is not an answer this page knows."),
    (
        "store",
        "The store could not be reached: nothing was changed. Try again.",
    ),
];

pub(super) async fn detail(
    State(console): State<Shared>,
    operator: Operator,
    Path(id): Path<String>,
    Query(query): Query<DetailQuery>,
) -> Response {
    // An id that is no number names no request; the path is not repeated back.
    let id = id.parse::<i64>().unwrap_or(0);
    let request = console.reader.request(id).await;
    let request = match request {
        Ok(Some(request)) => request,
        Ok(None) => {
            let body = html! {
                h1 { "No such request" }
                p.muted { "It does not exist, or was forgotten a while after it expired." }
                p { a href="/approvals" { "Back to the pending approvals" } }
            };
            return (
                StatusCode::NOT_FOUND,
                page(
                    "No request",
                    "/approvals",
                    Some((&operator.name, operator.csrf())),
                    body,
                ),
            )
                .into_response();
        }
        Err(error) => return unavailable(&operator, &error),
    };
    let problem_text = problem_named(query.problem.as_deref(), &PROBLEMS);
    let body = html! {
        h1 { "Request #" (request.id) }
        (problem(problem_text))
        (facts(&request))
        @if matches!(request.state, RequestState::Pending) && !request.expired {
            (forms(&request, operator.csrf()))
        }
        p { a href="/approvals" { "Back to the pending approvals" } }
    };
    page(
        &format!("Request #{id}"),
        "/approvals",
        Some((&operator.name, operator.csrf())),
        body,
    )
    .into_response()
}

fn state(request: &StoredRequest) -> Markup {
    let answered = |answer: &Answer| match answer {
        Answer::Approve {
            by, for_session, ..
        } => html! {
            "approved by " strong { (Shown(by)) }
            @if *for_session { " for the session" }
        },
        Answer::Reject { by, reason, stop } => html! {
            "rejected by " strong { (Shown(by)) }
            @if *stop { " (and stopped: the gate went to SHADOW)" }
            ": " (Shown(reason))
        },
    };
    html! {
        @match &request.state {
            RequestState::Pending if request.expired => { "expired, never answered" }
            RequestState::Pending => { "pending, expires in " (age(request.expires_in)) }
            RequestState::Answered(answer) => { (answered(answer)) ", not used yet" }
            RequestState::Used(answer) => { (answered(answer)) ", used by its call" }
        }
    }
}

fn facts(request: &StoredRequest) -> Markup {
    let evidence = request.evidence.as_deref().map(pretty);
    // The plan as JSON, so that what the agent wrote in it is shown as every other field is.
    let rollback = request.rollback.as_deref().map(pretty);
    html! {
        dl.facts {
            dt { "State" } dd #state { (state(request)) }
            dt { "Tool" } dd #tool.code {
                (Shown(&request.binding.tool))
                @if request.irreversible { " " span.irreversible { "THIS CANNOT BE UNDONE" } }
            }
            dt { "Principal" } dd #principal { (OrDash(request.principal.as_deref())) }
            dt { "Agent" } dd #agent { (OrDash(request.agent.as_deref())) }
            dt { "Risk" } dd #risk {
                (risk(request))
                " " span.muted { "(effective; declared " (OrDash(declared_risk(request).as_deref())) ", policy version " (request.binding.policy_version) ")" }
            }
            dt { "Mode" } dd { (request.mode.to_string()) }
            dt { "Arguments" } dd {
                pre #arguments { (OrDash(request.arguments.as_deref())) }
                span.muted { "As the audit log writes them: what the tool redacts is not shown." }
            }
            dt { "Session tainted" } dd #tainted {
                @match &request.tainted {
                    Some((tool, at)) => { "by " code { (Shown(tool)) } ", whose output is untrusted, run at " (Shown(at)) }
                    None => { "no" }
                }
            }
            @if let Some(target) = &request.target {
                dt { "Target" } dd #target.code { (Shown(target)) }
            }
            @if let Some(evidence) = &evidence {
                dt { "Target's state" } dd { pre #evidence { (ShownLines(evidence)) } }
            }
            @if request.target.is_some() || request.rollback.is_some() {
                dt { "Rollback" } dd #rollback {
                    @match &rollback {
                        Some(plan) => { pre { (ShownLines(plan)) } }
                        None if request.irreversible => { strong { "none: this call cannot be undone" } }
                        None => { "none declared" }
                    }
                }
            }
            dt { "Made" } dd { (request.created_at) " (" (age(request.age)) " ago)" }
        }
    }
}

fn pretty(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .and_then(|value| serde_json::to_string_pretty(&value))
        .unwrap_or_else(|_| json.to_owned())
}

fn forms(request: &StoredRequest, csrf: &str) -> Markup {
    let action = format!("/approvals/{}/answer", request.id);
    html! {
        form #approve.answer method="post" action=(action) {
            input type="hidden" name="csrf" value=(csrf);
            @if request.irreversible {
                label for="confirmation" {
                    "This call cannot be undone. Type its target exactly to approve it: "
                    code { (OrDash(request.target.as_deref())) }
                }
                input #confirmation type="text" name="confirmation" autocomplete="off" spellcheck="false" required;
                button #approve-once.danger type="submit" name="action" value="approve" { "Approve this call" }
            } @else {
                button #approve-once.primary type="submit" name="action" value="approve" { "Approve once" }
                " "
                button #approve-session type="submit" name="action" value="approve-session" { "Approve for the session" }
            }
        }
        form #reject.answer method="post" action=(action) {
            input type="hidden" name="csrf" value=(csrf);
            label for="reason" { "Reason, which the agent reads" }
            textarea #reason name="reason" required {}
            button #reject type="submit" name="action" value="reject" { "Reject" }
            " "
            button #reject-stop.danger type="submit" name="action" value="reject-stop" { "Reject and stop the agent" }
        }
    }
}

#[derive(serde::Deserialize)]
pub(super) struct AnswerForm {
    csrf: String,
    action: String,
    #[serde(default)]
    reason: String,
    confirmation: Option<String>,
}

pub(super) async fn answer(
    State(console): State<Shared>,
    operator: Operator,
    Path(id): Path<String>,
    axum::Form(form): axum::Form<AnswerForm>,
) -> Response {
    if !operator.checks(&form.csrf) {
        return Operator::forged();
    }
    let Ok(id) = id.parse::<i64>() else {
        return (StatusCode::NOT_FOUND, "no such request").into_response();
    };
    let back = |problem: Option<&str>| {
        let to = match problem {
            Some(key) => format!("/approvals/{id}?problem={key}"),
            None => format!("/approvals/{id}"),
        };
        Redirect::to(&to).into_response()
    };
    let by = operator.name.to_string();
    let answer = match form.action.as_str() {
        "approve" | "approve-session" => Answer::Approve {
            by,
            for_session: form.action == "approve-session",
            confirmation: form.confirmation.filter(|typed| !typed.is_empty()),
        },
        "reject" | "reject-stop" => {
            let reason = form.reason.trim();
            if reason.is_empty() {
                return back(Some("reason"));
            }
            Answer::Reject {
                by,
                reason: reason.to_owned(),
                stop: form.action == "reject-stop",
            }
        }
        _ => return back(Some("action")),
    };
    if let Answer::Approve {
        for_session: true, ..
    } = &answer
    {
        match console.reader.request(id).await {
            Ok(Some(request)) if request.irreversible => return back(Some("session")),
            Ok(_) => {}
            Err(_) => return back(Some("store")),
        }
    }
    match console.store.answer_id(id, answer).await {
        Ok(_) => back(None),
        Err(ApproveError::ConfirmationMismatch) => back(Some("confirmation")),
        Err(ApproveError::Store(_)) => back(Some("store")),
        Err(_) => back(Some("answered")),
    }
}
