//! The fleets: each one's mode, its members, and a form to lower it. Raising stays a command
//! (`toolgate fleet raise`): the page cannot widen what agents may do.

use std::str::FromStr;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use super::html::{OrDash, Shown, page, problem, problem_named};
use super::shared::Operator;
use super::shared::{Shared, unavailable};
use toolgate_policy::Mode;

const MODES: [Mode; 4] = [
    Mode::Shadow,
    Mode::Advisory,
    Mode::PartialAuto,
    Mode::FullAuto,
];

#[derive(serde::Deserialize)]
pub(super) struct FleetQuery {
    problem: Option<String>,
    lowered: Option<String>,
}

const PROBLEMS: [(&str, &str); 4] = [
    (
        "raise",
        "Not changed: the console only lowers a fleet. Raise it with `toolgate fleet raise`.",
    ),
    (
        "reason",
        "Lowering a fleet needs a reason, which the trail and its members keep.",
    ),
    ("mode", "That is not a mode."),
    (
        "store",
        "The fleet could not be changed: the store refused or could not be reached.",
    ),
];

pub(super) async fn list(
    State(console): State<Shared>,
    operator: Operator,
    Query(query): Query<FleetQuery>,
) -> Response {
    let fleets = match console.reader.fleets().await {
        Ok(fleets) => fleets,
        Err(error) => return unavailable(&operator, &error),
    };
    let refused = match console
        .reader
        .refused_policies(REFUSED_DAYS, REFUSED_SHOWN)
        .await
    {
        Ok(refused) => refused,
        Err(error) => return unavailable(&operator, &error),
    };
    let problem_text = problem_named(query.problem.as_deref(), &PROBLEMS);
    let body = html! {
        h1 { "Fleets" }
        (problem(problem_text))
        @if query.lowered.is_some() {
            p.notice #lowered { "Lowered: every member holds its gates under the new mode within its bound." }
        }
        table #fleets {
            thead { tr { th { "Fleet" } th { "Mode" } th { "Set by" } th { "Members" } th { "Lower to" } } }
            tbody {
                @for fleet in &fleets {
                    tr.fleet data-fleet=(fleet.name) {
                        td.code { (Shown(&fleet.name)) }
                        td.mode { (fleet.mode.to_string()) }
                        td { (Shown(&fleet.changed_by)) ": " (Shown(&fleet.reason)) br; span.muted { (ago(fleet.changed_secs_ago)) " ago" } }
                        td { (fleet.members.len()) }
                        td {
                            @let lower: Vec<Mode> = MODES.into_iter().filter(|m| *m < fleet.mode).collect();
                            @if lower.is_empty() {
                                span.muted { "lowest already" }
                            } @else {
                                form.lower.inline data-fleet=(fleet.name) method="post" action="/fleet/lower" {
                                    input type="hidden" name="csrf" value=(operator.csrf());
                                    input type="hidden" name="fleet" value=(fleet.name);
                                    select name="mode" {
                                        @for mode in &lower { option value=(mode.to_string()) { (mode.to_string()) } }
                                    }
                                    input type="text" name="reason" placeholder="reason" required;
                                    button.danger type="submit" { "Lower" }
                                }
                            }
                        }
                    }
                }
                @if fleets.is_empty() { tr { td colspan="5" .muted { "No gate has joined a fleet." } } }
            }
        }
        @for fleet in &fleets {
            @if fleet.policy.is_some() || fleet.in_force.is_some() {
                p.policy data-fleet=(fleet.name) {
                    "Policy of " (Shown(&fleet.name)) ": applied "
                    (policy_of(fleet.policy.as_ref()))
                    "; in force " (policy_of(fleet.in_force.as_ref()))
                }
            }
        }
        h2 { "Policies refused" }
        p.muted { "What a gate could not follow in the last " (REFUSED_DAYS) " days: it kept the policy it followed." }
        table #refused {
            thead { tr { th { "When" } th { "Writer" } th { "By" } th { "Why" } } }
            tbody {
                @for record in &refused {
                    @let said = said_in(&record.line);
                    tr.refused {
                        td { (Shown(&record.written_at)) }
                        td.code { (Shown(&record.writer)) }
                        td { (OrDash(said.by.as_deref())) }
                        td { (OrDash(said.message.as_deref())) }
                    }
                }
                @if refused.is_empty() { tr { td colspan="4" .muted { "None." } } }
            }
        }
        @for fleet in &fleets {
            h2 { "Members of " (Shown(&fleet.name)) }
            table.members data-fleet=(fleet.name) {
                thead { tr { th { "Process" } th { "Gate" } th { "Agent" } th { "Mode" } th { "Last read the fleet" } th { "Policy" } } }
                tbody {
                    @for member in &fleet.members {
                        tr.member {
                            td.code { (Shown(&member.member)) }
                            td { (member.gate) }
                            td { (OrDash(member.agent.as_deref())) }
                            td { (member.mode.to_string()) @if member.partitioned { " " span.broken { "(lost the fleet: acts as SHADOW)" } } }
                            td { (ago(member.last_contact_ms as f64 / 1000.0)) " ago" }
                            td.code { (OrDash(member.policy_digest.as_deref().map(|d| d.char_indices().nth(12).map_or(d, |(at, _)| &d[..at])))) }
                        }
                    }
                }
            }
        }
    };
    page(
        "Fleet",
        "/fleet",
        Some((&operator.name, operator.csrf())),
        body,
    )
    .into_response()
}

/// How far back, and how many, refused policies the page shows.
const REFUSED_DAYS: u32 = 7;
const REFUSED_SHOWN: u32 = 20;

/// A policy's digest, shortened, and who applied it.
fn policy_of(policy: Option<&(String, String)>) -> maud::Markup {
    match policy {
        None => html! { "none" },
        Some((digest, by)) => {
            let short = digest
                .char_indices()
                .nth(12)
                .map_or(&digest[..], |(at, _)| &digest[..at]);
            html! { span.code { (Shown(short)) } " by " (Shown(by)) }
        }
    }
}

/// What a `policy_refused` record says: who changed the policy, and why it was refused.
struct Said {
    by: Option<String>,
    message: Option<String>,
}

fn said_in(line: &str) -> Said {
    let record: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
    let text = |key: &str| record.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    Said {
        by: text("by"),
        message: text("message"),
    }
}

fn ago(secs: f64) -> String {
    let secs = Duration::from_secs_f64(secs.max(0.0)).as_secs();
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs / 60),
        _ => format!("{} h", secs / 3600),
    }
}

#[derive(serde::Deserialize)]
pub(super) struct LowerForm {
    csrf: String,
    fleet: String,
    mode: String,
    #[serde(default)]
    reason: String,
}

pub(super) async fn lower(
    State(console): State<Shared>,
    operator: Operator,
    axum::Form(form): axum::Form<LowerForm>,
) -> Response {
    if !operator.checks(&form.csrf) {
        return Operator::forged();
    }
    let back = |key: &str| Redirect::to(&format!("/fleet?{key}")).into_response();
    let Ok(to) = Mode::from_str(&form.mode) else {
        return back("problem=mode");
    };
    let reason = form.reason.trim().to_owned();
    if reason.is_empty() {
        return back("problem=reason");
    }
    // The fleet's mode now: a mode above it is a raise, which the page refuses before asking.
    let current = console
        .reader
        .fleets()
        .await
        .ok()
        .and_then(|fleets| fleets.into_iter().find(|f| f.name == form.fleet))
        .map(|f| f.mode);
    match current {
        Some(mode) if to > mode => return back("problem=raise"),
        Some(_) => {}
        None => return back("problem=store"),
    }
    let (url, schema, by) = (
        console.url.clone(),
        console.schema.clone(),
        operator.name.to_string(),
    );
    let lowered = tokio::task::spawn_blocking(move || {
        crate::postgres::fleet::lower(&url, &schema, &form.fleet, to, &by, &reason)
    })
    .await;
    match lowered {
        Ok(Ok(_)) => back("lowered=1"),
        _ => back("problem=store"),
    }
}
