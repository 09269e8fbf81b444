//! The flip set of a candidate policy file: the trail's calls decided again under it, beside the
//! policies in force when they were recorded (the fleets' policies the store keeps, and files the
//! operator pastes), as `policy replay --store` decides them.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::html::{Names, Shown, page};
use super::shared::{Operator, Shared, unavailable};
use crate::approval::store::StoreError;
use crate::audit::Decision;
use crate::policy_file::{FlipRow, PolicyErrors, PolicyFile, ReplayFilter, ReplayReport};
use crate::postgres::{StoreReplay, StoredPolicy};

/// How many pasted files in force the form takes.
const IN_FORCE_FIELDS: usize = 3;

const DECISIONS: [(&str, Decision); 4] = [
    ("allowed", Decision::Allowed),
    ("approved", Decision::Approved),
    ("granted", Decision::Granted),
    ("refused", Decision::Refused),
];

/// What the form holds, as posted.
#[derive(Default)]
struct ReplayForm {
    csrf: String,
    candidate: String,
    in_force: Vec<String>,
    since: String,
    until: String,
    principal: String,
    agent: String,
    tool: String,
    decision: String,
}

impl ReplayForm {
    fn of(fields: Vec<(String, String)>) -> ReplayForm {
        let mut form = ReplayForm::default();
        for (key, value) in fields {
            match key.as_str() {
                "csrf" => form.csrf = value,
                "candidate" => form.candidate = value,
                "in_force" if form.in_force.len() < IN_FORCE_FIELDS => form.in_force.push(value),
                "since" => form.since = value,
                "until" => form.until = value,
                "principal" => form.principal = value,
                "agent" => form.agent = value,
                "tool" => form.tool = value,
                "decision" => form.decision = value,
                _ => {}
            }
        }
        form
    }
}

fn given(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// A browser posts a text area's lines ended by CR LF: the file as written had LF alone, which its
/// digest is of.
fn as_written(text: &str) -> String {
    text.replace("\r\n", "\n")
}

pub(super) async fn form(operator: Operator) -> Response {
    let body = html! {
        h1 { "Policy replay" }
        (intro())
        (replay_form(&ReplayForm::default(), operator.csrf()))
    };
    page(
        "Policy replay",
        "/policy/replay",
        Some((&operator.name, operator.csrf())),
        body,
    )
    .into_response()
}

fn intro() -> Markup {
    html! {
        p.muted {
            "The calls of the audit trail decided again under a candidate policy file, beside the policy "
            "in force when each was recorded: the calls whose decision would flip. The policies in force "
            "are the fleets' (applied and accepted, as the store keeps them) and any file pasted below; a "
            "call recorded under a policy the page has no text of is counted apart. What an approver, a "
            "budget or the store did is not replayed."
        }
    }
}

fn replay_form(form: &ReplayForm, csrf: &str) -> Markup {
    let pasted: Vec<&str> = form
        .in_force
        .iter()
        .map(String::as_str)
        .filter(|t| !t.trim().is_empty())
        .collect();
    let empty = IN_FORCE_FIELDS.saturating_sub(pasted.len()).min(1);
    html! {
        form #replay.answer method="post" action="/policy/replay" {
            input type="hidden" name="csrf" value=(csrf);
            label for="candidate" { "The candidate policy file (TOML)" }
            textarea #candidate name="candidate" spellcheck="false" required { (form.candidate) }
            @for (i, text) in pasted.iter().enumerate() {
                label for={ "in-force-" (i) } { "A policy file in force (TOML), if the store does not keep it" }
                textarea id={ "in-force-" (i) } name="in_force" spellcheck="false" { (text) }
            }
            @for i in pasted.len()..pasted.len() + empty {
                label for={ "in-force-" (i) } { "A policy file in force (TOML), if the store does not keep it (optional)" }
                textarea id={ "in-force-" (i) } name="in_force" spellcheck="false" {}
            }
            div.filters {
                label { "Since" input type="text" name="since" value=(form.since) placeholder="2026-11-22"; }
                label { "Until" input type="text" name="until" value=(form.until) placeholder="2026-11-23T08:00Z"; }
                label { "Principal" input type="text" name="principal" value=(form.principal); }
                label { "Agent" input type="text" name="agent" value=(form.agent); }
                label { "Tool" input type="text" name="tool" value=(form.tool); }
                label { "Decision" select name="decision" {
                    option value="" { "any" }
                    @for (d, _) in DECISIONS { option value=(d) selected[form.decision == d] { (d) } }
                } }
            }
            button #run.primary type="submit" { "Replay" }
        }
    }
}

/// What stops a replay before it reads the trail: a file that does not check, a filter that is not
/// one. Every message shown as the page shows text it was given.
enum Refused {
    Policy(&'static str, PolicyErrors),
    Empty,
    Filter(String),
}

pub(super) async fn run(
    State(console): State<Shared>,
    operator: Operator,
    axum::Form(fields): axum::Form<Vec<(String, String)>>,
) -> Response {
    let form = ReplayForm::of(fields);
    if !operator.checks(&form.csrf) {
        return Operator::forged();
    }
    let checked = check(&form);
    let (candidate, in_force, filter) = match checked {
        Ok(checked) => checked,
        Err(refused) => {
            let body = html! {
                h1 { "Policy replay" }
                (refusal(&refused))
                (replay_form(&form, operator.csrf()))
            };
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                page(
                    "Policy replay",
                    "/policy/replay",
                    Some((&operator.name, operator.csrf())),
                    body,
                ),
            )
                .into_response();
        }
    };
    let (url, schema) = (console.url.clone(), console.schema.clone());
    let replayed = tokio::task::spawn_blocking(move || {
        crate::postgres::replay_store(&url, &schema, &candidate, &in_force, &filter)
            .map(|replay| (replay, in_force))
    })
    .await;
    let (replay, in_force) = match replayed {
        Ok(Ok(replayed)) => replayed,
        Ok(Err(error)) => return unavailable(&operator, &error),
        Err(_) => {
            return unavailable(
                &operator,
                &StoreError::Unexpected("the replay stopped".into()),
            );
        }
    };
    let body = html! {
        h1 { "Policy replay" }
        section #result { (result(&replay, &in_force)) }
        h2 { "Replay again" }
        (replay_form(&form, operator.csrf()))
    };
    page(
        "Policy replay",
        "/policy/replay",
        Some((&operator.name, operator.csrf())),
        body,
    )
    .into_response()
}

type Checked = (PolicyFile, Vec<PolicyFile>, ReplayFilter);

fn check(form: &ReplayForm) -> Result<Checked, Refused> {
    if form.candidate.trim().is_empty() {
        return Err(Refused::Empty);
    }
    let candidate = PolicyFile::parse("candidate", &as_written(&form.candidate))
        .map_err(|errors| Refused::Policy("The candidate", errors))?;
    let mut in_force = Vec::new();
    for text in form.in_force.iter().filter(|t| !t.trim().is_empty()) {
        let written = as_written(text);
        let file = PolicyFile::parse("in force", &written)
            .map_err(|errors| Refused::Policy("A policy file in force", errors))?;
        in_force.push(file);
        // A file written with CR LF: the text as posted is the one its records name.
        if written != *text {
            in_force.push(
                PolicyFile::parse("in force", text)
                    .map_err(|errors| Refused::Policy("A policy file in force", errors))?,
            );
        }
    }
    for time in [&form.since, &form.until] {
        if let Some(time) = given(time) {
            ReplayFilter::check_time(&time).map_err(Refused::Filter)?;
        }
    }
    let decision = match form.decision.as_str() {
        "" => None,
        chosen => Some(
            DECISIONS
                .iter()
                .find(|(d, _)| *d == chosen)
                .map(|(_, d)| *d)
                .ok_or_else(|| {
                    Refused::Filter(
                        "the decision is none of allowed, approved, granted, refused".into(),
                    )
                })?,
        ),
    };
    let filter = ReplayFilter {
        since: given(&form.since),
        until: given(&form.until),
        principal: given(&form.principal),
        agent: given(&form.agent),
        tool: given(&form.tool),
        decision,
    };
    Ok((candidate, in_force, filter))
}

fn refusal(refused: &Refused) -> Markup {
    html! {
        div #error.problem role="alert" {
            @match refused {
                Refused::Empty => { "Paste the candidate policy file to replay the trail under it." }
                Refused::Filter(why) => { "Nothing was replayed: " (Shown(why)) "." }
                Refused::Policy(which, errors) => {
                    (which) " policy file does not check against this program's tools; nothing was replayed."
                    ol #policy-errors.errors {
                        @for error in &errors.0 {
                            li.policy-error data-line=(error.line) data-column=(error.column) {
                                "line " (error.line) ", column " (error.column) ": " (Shown(&error.message))
                            }
                        }
                    }
                }
            }
        }
    }
}

fn result(replay: &StoreReplay, in_force: &[PolicyFile]) -> Markup {
    let (report, stored) = (&replay.report, &replay.stored);
    let writers = Names::of(report.chains.iter().filter_map(|c| c.writer.as_deref()));
    let broken: Vec<_> = report
        .chains
        .iter()
        .filter(|c| c.report.broken.is_some())
        .collect();
    let flipped: u64 = report.flips.iter().map(|row| row.calls).sum();
    let pasted: Vec<&str> = {
        let mut digests: Vec<&str> = in_force.iter().map(PolicyFile::digest).collect();
        digests.dedup();
        digests
    };
    html! {
        @if !broken.is_empty() {
            div #chain-broken.alert role="alert" {
                p { "THE TRAIL DOES NOT VERIFY. The counts below are of the records before each break only." }
                @for chain in &broken {
                    @let verified = &chain.report;
                    @if let Some(at) = &verified.broken {
                        pre.break {
                            "writer " (writers.show(chain.writer.as_deref().unwrap_or("")))
                            ": record " (at.line) " of its chain breaks it (" (Shown(&at.reason.to_string()))
                            "); only the " (verified.records) " records before it were replayed"
                        }
                    }
                }
            }
        }
        @if !replay.edited.is_empty() {
            div #rows-edited.alert role="alert" {
                p {
                    "ROWS OF THE TRAIL WERE EDITED: their columns differ from the records they hold. "
                    "The replay reads the records; the trail's searches and the lists the counts link to "
                    "read the columns."
                }
                @for (writer, seq) in &replay.edited {
                    pre.edited { "writer " (writers.show(writer)) ": the row at seq " (seq) " was edited" }
                }
            }
        }
        @if report.chains.is_empty() {
            p #no-chain.muted { "The trail holds no record." }
        }
        ul #chains.muted {
            @for chain in &report.chains {
                @let verified = &chain.report;
                li {
                    "writer " (writers.show(chain.writer.as_deref().unwrap_or(""))) ": "
                    @if verified.broken.is_some() { span.broken { "does not verify" } }
                    @else if let Some(torn) = &verified.torn_tail {
                        "its last record is torn (record " (torn.line) ", a write cut short); the "
                        (verified.records) " before it verify"
                    }
                    @else { span.intact { "verifies" } ", " (verified.records) " records" }
                }
            }
        }
        p #summary {
            "Candidate policy " code { (report.candidate.1) } ": "
            strong #calls { (report.calls) } " calls replayed, "
            strong #decided { (report.decided) } " decided under both policies, "
            strong #flipped { (flipped) } " flip."
        }
        (policies(report, stored, &pasted))
        h2 { "Flips" }
        @if report.flips.is_empty() {
            p #no-flips { "No call's decision flips." }
        } @else {
            (flips(&report.flips))
        }
        (not_replayed(report))
    }
}

fn policies(report: &ReplayReport, stored: &[StoredPolicy], pasted: &[&str]) -> Markup {
    html! {
        h2 { "The policies in force" }
        table #in-force {
            thead { tr { th { "Policy" } th { "Digest" } th { "Used" } } }
            tbody {
                @for policy in stored {
                    tr.fleet {
                        td {
                            "fleet " (Shown(&policy.fleet)) "'s policy"
                            @if policy.accepted && policy.applied { " (applied and in force)" }
                            @else if policy.accepted { " (in force)" }
                            @else { " (applied last, not yet accepted)" }
                        }
                        td.code { (policy.digest) }
                        td {
                            @match &policy.checked {
                                Ok(_) => { "yes" }
                                Err(errors) => {
                                    span.broken { "no: it does not check against this program's tools" }
                                    pre { (Shown(&errors.to_string())) }
                                }
                            }
                        }
                    }
                }
                @for digest in pasted {
                    tr.pasted { td { "pasted" } td.code { (digest) } td { "yes" } }
                }
                tr { td { "the candidate" } td.code { (report.candidate.1) } td { "for calls recorded under it" } }
            }
        }
        @if !report.unknown_policies.is_empty() {
            div #unknown-policies.problem {
                p {
                    "Calls recorded under a policy this page has no text of were not replayed, and are "
                    "counted apart: paste the file whose digest is named to replay them."
                }
                ul {
                    @for (digest, calls) in &report.unknown_policies {
                        li { strong { (calls) } " calls under policy " code { (Shown(digest)) } }
                    }
                }
            }
        }
    }
}

fn flips(rows: &[FlipRow]) -> Markup {
    let tools = Names::of(rows.iter().map(|r| r.tool.as_str()));
    let principals = Names::of(rows.iter().filter_map(|r| r.principal.as_deref()));
    html! {
        table #flips {
            thead { tr { th { "Tool" } th { "Principal" } th { "Flip" } th { "Calls" } } }
            tbody {
                @for row in rows {
                    tr.flip.widens[row.flip.widens()]
                        data-from=(row.flip.from.as_str()) data-to=(row.flip.to.as_str()) {
                        td.code.tool { (tools.show(&row.tool)) }
                        td.principal {
                            @match &row.principal {
                                Some(p) => { (principals.show(p)) }
                                None => { "—" }
                            }
                        }
                        td.flip {
                            (row.flip.from.as_str()) " → " (row.flip.to.as_str())
                            @if row.flip.widens() { " (WIDENS)" }
                        }
                        td.calls {
                            a.records href={ "/trail/records?" (records_query(row)) } { (row.calls) }
                            @if (row.seqs.len() as u64) < row.calls {
                                " " span.muted { "(the first " (row.seqs.len()) " listed)" }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The link to the records behind a row: the writer, then its `seq`s, for each run of one writer.
fn records_query(row: &FlipRow) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    let mut writer: Option<&str> = None;
    for at in &row.seqs {
        let this = at.writer.as_deref().unwrap_or("");
        if writer != Some(this) {
            pairs.push(("w", this.to_owned()));
            pairs.push(("s", String::new()));
            writer = Some(this);
        }
        if let Some((_, seqs)) = pairs.last_mut() {
            if !seqs.is_empty() {
                seqs.push(',');
            }
            seqs.push_str(&at.seq.to_string());
        }
    }
    serde_urlencoded::to_string(&pairs).unwrap_or_default()
}

fn not_replayed(report: &ReplayReport) -> Markup {
    let counted: [(&str, &BTreeMap<String, u64>, &str); 6] = [
        (
            "other-tools",
            &report.other_tools,
            "of a tool this program does not link as recorded (no tool of that id, or one that declares another risk)",
        ),
        (
            "unrecorded-arguments",
            &report.unrecorded_arguments,
            "whose record does not hold the arguments an argument rule reads (the tool does not record them, or the call was refused before they were read)",
        ),
        (
            "raised-ceilings",
            &report.raised_ceilings,
            "recorded at the ceiling of the policy in force, which the candidate raises (the mode the gate was asked for is not in the record)",
        ),
        (
            "escalations",
            &report.escalations,
            "refused before their tool's escalation may have judged them (the record names the declared risk), where the two policies rule otherwise above it",
        ),
        (
            "changed-budgets",
            &report.changed_budgets,
            "counted by budgets that differ between the two policies (what a budget decides depends on the calls before it, which a record does not hold)",
        ),
        (
            "changed-taint",
            &report.changed_taint,
            "made in a session whose taint latch had closed, under a candidate that changes `taint`",
        ),
    ];
    let any = counted.iter().any(|(_, map, _)| !map.is_empty())
        || report.copies > 0
        || report.other_builds > 0;
    html! {
        h2 { "Not replayed, and why" }
        @if !any {
            p #all-replayed.muted { "Every call kept was decided under both policies." }
        }
        ul #not-replayed.counts {
            @for (id, map, why) in counted {
                @for (tool, calls) in map {
                    li class=(id) {
                        strong { (calls) } " calls of " code { (Shown(tool)) } " not replayed: " (why) "."
                    }
                }
            }
            @if report.copies > 0 {
                li.copies {
                    strong { (report.copies) } " records not replayed: read already under another "
                    "writer (rows copied under another name), counted once."
                }
            }
            @if report.other_builds > 0 {
                li.other-builds {
                    strong { (report.other_builds) } " of the calls decided were recorded by a build "
                    "with another set of tools (the same tool, at the same risk)."
                }
            }
        }
    }
}
