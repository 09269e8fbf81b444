//! The shadow-mode promotion report, drawn: for gates in SHADOW, the calls of each risk level over
//! time, and how many each higher mode would have run (its ceiling covers their risk, and the mode
//! was their only obstacle); and for the operator's rules logged only, the calls each would have
//! asked for or refused, per bucket.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::html::{Shown, page};
use super::shared::Operator;
use super::shared::{Shared, unavailable};
use crate::postgres::{Bucket, PromotionPoint};
use toolgate_policy::{Mode, Risk, ceiling};

#[derive(serde::Deserialize, Default)]
pub(super) struct ChartQuery {
    #[serde(default)]
    agent: String,
    #[serde(default)]
    bucket: String,
    days: Option<u32>,
}

const HIGHER: [Mode; 3] = [Mode::Advisory, Mode::PartialAuto, Mode::FullAuto];

pub(super) async fn chart(
    State(console): State<Shared>,
    operator: Operator,
    Query(query): Query<ChartQuery>,
) -> Response {
    let bucket = if query.bucket == "day" {
        Bucket::Day
    } else {
        Bucket::Hour
    };
    let days = query
        .days
        .unwrap_or(if bucket == Bucket::Day { 30 } else { 2 })
        .clamp(1, 366);
    let agent = query.agent.trim();
    let points = console
        .reader
        .promotion(
            (!agent.is_empty()).then_some(agent),
            bucket,
            Duration::from_secs(u64::from(days) * 86_400),
        )
        .await;
    let points = match points {
        Ok(points) => points,
        Err(error) => return unavailable(&operator, &error),
    };
    let shadow = console
        .reader
        .shadow_rulings(
            (!agent.is_empty()).then_some(agent),
            bucket,
            Duration::from_secs(u64::from(days) * 86_400),
        )
        .await;
    let shadow = match shadow {
        Ok(shadow) => shadow,
        Err(error) => return unavailable(&operator, &error),
    };
    // Per rule logged only: its calls in each bucket, and in all.
    let mut buckets: Vec<&str> = shadow.iter().map(|p| p.bucket.as_str()).collect();
    buckets.sort_unstable();
    buckets.dedup();
    let mut rules: BTreeMap<&str, (u64, BTreeMap<&str, u64>)> = BTreeMap::new();
    for point in &shadow {
        let (total, per) = rules.entry(point.rule.as_str()).or_default();
        *total += point.calls;
        *per.entry(point.bucket.as_str()).or_default() += point.calls;
    }
    let mut totals: BTreeMap<Mode, u64> = BTreeMap::new();
    for point in &points {
        for mode in HIGHER {
            if point.risk.is_some_and(|risk| risk <= ceiling(mode)) {
                *totals.entry(mode).or_default() += point.allowed + point.would_have_run;
            }
        }
    }
    let body = html! {
        h1 { "Promotion" }
        form #search method="get" action="/promotion" {
            label { "Agent" input type="text" name="agent" value=(agent) placeholder="every agent"; }
            label { "Bucket" select name="bucket" {
                option value="hour" selected[bucket == Bucket::Hour] { "hour" }
                option value="day" selected[bucket == Bucket::Day] { "day" }
            } }
            label { "Days" input type="number" name="days" min="1" max="366" value=(days); }
            button.primary type="submit" { "Draw" }
        }
        p.muted {
            "Calls decided in SHADOW mode, per risk level the tool declares: run (allowed in SHADOW), "
            "and refused only for the mode (a mode whose ceiling covers the risk would have run them; "
            "HIGH_WRITE only in FULL_AUTO, with an approval)."
        }
        (svg(&points))
        h2 { "What each higher mode would have run" }
        table #would-run {
            thead { tr { th { "Mode" } th { "Ceiling" } th { "Calls it would have run" } } }
            tbody {
                @for mode in HIGHER {
                    tr { td { (mode.to_string()) } td { (ceiling(mode).to_string()) } td { (totals.get(&mode).copied().unwrap_or(0)) } }
                }
            }
        }
        h2 { "Rules logged only" }
        p.muted {
            "Calls in every mode that a rule of a [shadow] table would have asked for or refused, "
            "while the enforced rules let them through: per rule, per bucket."
        }
        @if rules.is_empty() {
            p #no-shadow { "No rule logged only ruled otherwise in this time." }
        } @else {
            table #shadow-rules {
                thead { tr {
                    th { "Rule" } th { "Calls" }
                    @for bucket in &buckets { th { (bucket) } }
                } }
                tbody {
                    @for (rule, (total, per)) in &rules {
                        tr {
                            td { code { (Shown(rule)) } }
                            td { (total) }
                            @for bucket in &buckets { td { (per.get(bucket).copied().unwrap_or(0)) } }
                        }
                    }
                }
            }
        }
    };
    page(
        "Promotion",
        "/promotion",
        Some((&operator.name, operator.csrf())),
        body,
    )
    .into_response()
}

/// One panel per risk level, a bar per bucket: its run calls and, above them, those refused only for
/// the mode.
fn svg(points: &[PromotionPoint]) -> Markup {
    let mut buckets: Vec<&str> = points.iter().map(|p| p.bucket.as_str()).collect();
    buckets.dedup();
    let risks = Risk::ALL;
    let (width, panel, gap, left) = (960.0f64, 80.0f64, 30.0f64, 190.0f64);
    let height = (panel + gap) * risks.len() as f64 + 30.0;
    let plot = width - left - 20.0;
    let slot = plot / buckets.len().max(1) as f64;
    let bar = (slot * 0.7).clamp(1.0, 36.0);
    let highest = points
        .iter()
        .map(|p| p.allowed + p.would_have_run)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let label_every = (buckets.len() / 8).max(1);
    html! {
        svg #chart xmlns="http://www.w3.org/2000/svg" width=(width) height=(height)
            viewBox={ "0 0 " (width) " " (height) } role="img"
            aria-label="Calls in SHADOW mode per risk level over time" {
            @for (row, risk) in risks.iter().enumerate() {
                @let top = row as f64 * (panel + gap) + 10.0;
                @let mode = HIGHER.iter().find(|m| *risk <= ceiling(**m)).copied().unwrap_or(Mode::FullAuto);
                text x="0" y=(top + 14.0) font-weight="600" { (risk.to_string()) }
                text x="0" y=(top + 30.0) { "runs from " (mode.to_string()) }
                line x1=(left) y1=(top + panel) x2=(left + plot) y2=(top + panel) stroke="#8792a0" {}
                line x1=(left) y1=(top + 10.0) x2=(left) y2=(top + panel) stroke="#d8dde3" {}
                text x=(left - 4.0) y=(top + 14.0) text-anchor="end" { (highest as u64) }
                @for point in points.iter().filter(|p| p.risk == Some(*risk)) {
                    @let at = buckets.iter().position(|b| *b == point.bucket).unwrap_or(0) as f64;
                    @let x = left + at * slot + (slot - bar) / 2.0;
                    @let run = point.allowed as f64 / highest * (panel - 10.0);
                    @let would = point.would_have_run as f64 / highest * (panel - 10.0);
                    rect.run x=(x) y=(top + panel - run) width=(bar) height=(run) fill="#8792a0" {
                        title { (point.bucket) ": " (point.allowed) " run" }
                    }
                    rect.would x=(x) y=(top + panel - run - would) width=(bar) height=(would) fill="#2458c6" {
                        title { (point.bucket) ": " (point.would_have_run) " refused only for the mode" }
                    }
                }
            }
            @for (i, bucket) in buckets.iter().enumerate() {
                @if i % label_every == 0 {
                    text x=(left + i as f64 * slot + slot / 2.0) y=(height - 8.0) text-anchor="middle" { (Shown(bucket)) }
                }
            }
            rect x=(width - 330.0) y="2" width="10" height="10" fill="#8792a0" {}
            text x=(width - 315.0) y="11" { "run in SHADOW" }
            rect x=(width - 220.0) y="2" width="10" height="10" fill="#2458c6" {}
            text x=(width - 205.0) y="11" { "refused only for the mode" }
        }
    }
}
