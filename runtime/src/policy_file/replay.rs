//! Replay: the calls a JSONL log recorded, decided again under a candidate policy file beside the
//! policy that was in force when each was recorded, and the calls whose decision would flip.
//!
//! Each call is decided twice by the function [`PolicyFile::explain`] uses, in the mode and at the
//! risk its record names: once under the file in force (found by the record's `policy_digest` among
//! the files given; a record of a gate that followed none is decided under no file) and once under
//! the candidate. What the approver, a budget or the store did is not replayed: both sides assume
//! an approver that can be asked, so that a flip is the policy's doing alone.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::io::{self, BufReader, Read};
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::file::PolicyFile;
use crate::audit::time::micros_of_rfc3339;
use crate::audit::verify::{Line, Verifier, read_line};
use crate::audit::{AuditRecord, Decision, Outcome, Stage, VerifyReport};
use crate::gate::budget::{HistoryOrder, HistoryPer};
use crate::gate::denylist::DenyRule;
use crate::gate::narrowing::Narrowing;
use crate::gate::narrowing::{Judged, Ruling, json_arguments};
use crate::registry::registry;
use crate::terminal::escaped;
use toolgate_policy::{DenialCode, Mode, Risk};

/// How many records a row of flips keeps the references of; its count is exact beyond them.
pub const MAX_REFERENCES: usize = 1000;

/// Which recorded calls to replay. Empty, every call of the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayFilter {
    /// Calls recorded at or after this time: a UTC date (`2026-11-22`, its midnight) or a time
    /// (`2026-11-22T03:11Z`, `2026-11-22T03:11:01.5Z`), the parts left out zero. A time
    /// [`check_time`](Self::check_time) refuses keeps no call.
    pub since: Option<String>,
    /// Calls recorded before this time, written as `since` is.
    pub until: Option<String>,
    /// Calls of a gate of this principal, compared as the name reads (SECURITY.md, names that read
    /// alike).
    pub principal: Option<String>,
    /// Calls of a gate of this agent label, compared as it reads.
    pub agent: Option<String>,
    /// Calls of this tool id, exactly.
    pub tool: Option<String>,
    /// Calls recorded with this decision.
    pub decision: Option<Decision>,
}

impl ReplayFilter {
    /// Whether `time` is a UTC date or time as `since` and `until` take it; `Err` says what is
    /// wrong.
    pub fn check_time(time: &str) -> Result<(), String> {
        Self::instant(time).map(drop)
    }

    /// `time` written as the log writes its times (`2026-11-22T03:11:00.000000Z`), the parts it
    /// leaves out zero: compared as text with a record's, it compares as the times do.
    fn instant(time: &str) -> Result<String, String> {
        let wrong = || {
            format!(
                "`{}` is not a UTC date or time: write 2026-11-22 or 2026-11-22T03:11:01Z \
                 (seconds to six decimals at most)",
                escaped(time)
            )
        };
        let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
        let (date, rest) = match time.split_once('T') {
            Some((date, rest)) => (date, Some(rest)),
            None => (time, None),
        };
        let mut parts = date.split('-');
        let (Some(y), Some(m), Some(d), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(wrong());
        };
        if !(digits(y, 4) && digits(m, 2) && digits(d, 2)) {
            return Err(wrong());
        }
        let (mut hms, mut fraction) = (vec!["00", "00", "00"], String::new());
        if let Some(rest) = rest {
            let rest = rest.strip_suffix('Z').unwrap_or(rest);
            let (clock, frac) = match rest.split_once('.') {
                Some((clock, frac)) => (clock, Some(frac)),
                None => (rest, None),
            };
            let given: Vec<&str> = clock.split(':').collect();
            if !(2..=3).contains(&given.len()) || !given.iter().all(|p| digits(p, 2)) {
                return Err(wrong());
            }
            if let Some(frac) = frac {
                if given.len() != 3
                    || frac.is_empty()
                    || frac.len() > 6
                    || !digits(frac, frac.len())
                {
                    return Err(wrong());
                }
                fraction.push_str(frac);
            }
            hms[..given.len()].copy_from_slice(&given);
        } else if time.ends_with('Z') {
            return Err(wrong());
        }
        while fraction.len() < 6 {
            fraction.push('0');
        }
        Ok(format!(
            "{y}-{m}-{d}T{}:{}:{}.{fraction}Z",
            hms[0], hms[1], hms[2]
        ))
    }

    /// The bounds of time as the log writes its times; a bound [`check_time`](Self::check_time)
    /// refuses keeps no call.
    fn bounds(&self) -> Bounds {
        let bound = |time: &Option<String>| time.as_deref().map(|t| Self::instant(t).ok());
        Bounds {
            since: bound(&self.since),
            until: bound(&self.until),
        }
    }

    fn keeps(&self, bounds: &Bounds, line: &RecordLine<'_>) -> bool {
        let same = |name: &Option<String>, recorded: &Option<Cow<'_, str>>| match name {
            None => true,
            Some(name) => recorded
                .as_deref()
                .is_some_and(|r| crate::names::same(name, r)),
        };
        let at = &*line.timestamp;
        let within = |bound: &Option<Option<String>>, keeps: fn(&str, &str) -> bool| match bound {
            None => true,
            Some(None) => false,
            Some(Some(time)) => keeps(at, time),
        };
        within(&bounds.since, |at, t| at >= t)
            && within(&bounds.until, |at, t| at < t)
            && self.tool.as_deref().is_none_or(|t| line.tool == t)
            && self.decision.is_none_or(|d| line.decision == Some(d))
            && same(&self.principal, &line.principal)
            && same(&self.agent, &line.agent)
    }
}

/// The members of a log's line that a replay reads; the rest are the chain's and the verifier's.
/// A filter's times as the log writes its times: `Some(None)` for one that is not a time.
struct Bounds {
    since: Option<Option<String>>,
    until: Option<Option<String>>,
}

#[derive(Deserialize)]
struct RecordLine<'a> {
    seq: u64,
    stage: Stage,
    #[serde(borrow)]
    tool: Cow<'a, str>,
    #[serde(borrow, default)]
    principal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    agent: Option<Cow<'a, str>>,
    mode: Mode,
    #[serde(borrow, default)]
    policy_digest: Option<Cow<'a, str>>,
    #[serde(borrow)]
    manifest_digest: Cow<'a, str>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    declared_risk: Option<Risk>,
    #[serde(default)]
    effective_risk: Option<Risk>,
    #[serde(default)]
    decision: Option<Decision>,
    #[serde(borrow, default)]
    code: Option<Cow<'a, str>>,
    #[serde(borrow)]
    timestamp: Cow<'a, str>,
    #[serde(borrow)]
    hash: Cow<'a, str>,
    gate: u64,
    call: u64,
    #[serde(default)]
    outcome: Option<Outcome>,
}

/// A change of decision: what a call came to under the policy in force, and under the candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Flip {
    /// Under the policy in force.
    pub from: Ruling,
    /// Under the candidate.
    pub to: Ruling,
}

impl Flip {
    /// Whether the candidate lets the call do more than the policy in force did (refused to asks or
    /// allowed, asks to allowed): a candidate that widens.
    pub fn widens(self) -> bool {
        self.to < self.from
    }
}

impl fmt::Display for Flip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.from, self.to)
    }
}

impl Serialize for Ruling {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The calls of one tool and principal whose decision flips one way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlipRow {
    /// The tool's id.
    pub tool: String,
    /// The gate's principal, as recorded.
    pub principal: Option<String>,
    /// The flip.
    #[serde(flatten)]
    pub flip: Flip,
    /// How many calls.
    pub calls: u64,
    /// Where each call's record is, up to [`MAX_REFERENCES`].
    pub seqs: Vec<Located>,
    /// Each call's record reference ([`AuditRecord::reference`]), up to [`MAX_REFERENCES`].
    pub records: Vec<String>,
}

/// What a replay found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReplayReport {
    /// Each chain read (a log's, or each writer's of a trail), as `toolgate audit verify` reports it:
    /// only the records before a break are replayed.
    pub chains: Vec<ChainReport>,
    /// The candidate's name and digest.
    pub candidate: (String, String),
    /// The calls the filter kept, among the records that verified.
    pub calls: u64,
    /// Those decided under both policies.
    pub decided: u64,
    /// The calls whose decision flips, by tool, principal and flip.
    pub flips: Vec<FlipRow>,
    /// Calls not decided because the policy in force when they were recorded was not given, by its
    /// digest.
    pub unknown_policies: BTreeMap<String, u64>,
    /// Calls not decided because the tool as recorded is not the linked one (no linked tool has its
    /// id, or the linked one declares another risk), by tool id.
    pub other_tools: BTreeMap<String, u64>,
    /// Calls not decided because an argument rule of either policy reads arguments the record does
    /// not hold (the tool does not `record_arguments`, or the call was refused before its arguments
    /// were read), by tool id.
    pub unrecorded_arguments: BTreeMap<String, u64>,
    /// Calls not decided because they were recorded in the mode of the ceiling in force, which the
    /// candidate raises: a gate records its mode under its policy's ceiling, so the mode it was
    /// asked for, and what the candidate would let it run, is not in the record. By tool id.
    pub raised_ceilings: BTreeMap<String, u64>,
    /// Calls not decided because their tool escalates its risk by its arguments, the record is a
    /// refusal that may have come before the escalation (it names the declared risk), and the two
    /// policies rule otherwise at some risk above it. By tool id.
    pub escalations: BTreeMap<String, u64>,
    /// Calls not decided because the budgets that count them differ between the policy in force and
    /// the candidate: what a budget decides is the calls before it, which a record does not hold. By
    /// tool id.
    pub changed_budgets: BTreeMap<String, u64>,
    /// Calls not decided because they were made in a session whose taint latch had closed and the
    /// two policies' `taint` differs. By tool id.
    pub changed_taint: BTreeMap<String, u64>,
    /// Records of a trail read under one writer and again, the same, under another (rows copied
    /// under another name): replayed once.
    pub copies: u64,
    /// Calls decided that were recorded by a build whose set of tools differs from this program's
    /// (their manifest digest), with the same tool and risk.
    pub other_builds: u64,
}

impl ReplayReport {
    /// Whether every chain verified to its end: nothing broken, nothing torn.
    pub fn is_intact(&self) -> bool {
        self.chains.iter().all(|c| c.report.is_intact())
    }

    /// Whether a chain has a record that does not verify (a torn last line aside).
    pub fn is_broken(&self) -> bool {
        self.chains.iter().any(|c| c.report.broken.is_some())
    }

    /// Whether any call's decision flips.
    pub fn flips_any(&self) -> bool {
        !self.flips.is_empty()
    }

    /// Whether the candidate widens any call's decision.
    pub fn widens(&self) -> bool {
        self.flips.iter().any(|row| row.flip.widens())
    }
}

impl PolicyFile {
    /// Replays the calls of the JSONL log read from `log` (as [`JsonlSink`](crate::audit::JsonlSink)
    /// writes it) that `filter` keeps: each decided under the file in force when it was recorded
    /// (`in_force`, matched by digest; this file too) and under this one. The chain is verified in
    /// the same pass; the records after a break are not replayed. `Err` only if reading fails.
    pub fn replay(
        &self,
        in_force: &[PolicyFile],
        filter: &ReplayFilter,
        log: impl Read,
    ) -> io::Result<ReplayReport> {
        let mut replaying = Replaying::new(self, in_force, filter);
        let chain = replaying.begin(None);
        let mut reader = BufReader::with_capacity(1 << 16, log);
        let mut line = Vec::new();
        loop {
            match read_line(&mut reader, &mut line)? {
                Line::End => break,
                Line::TooLong => {
                    replaying.too_long(chain);
                    break;
                }
                Line::Read => replaying.line_in(chain, &line),
            }
            // A line without its newline is the end of the input as it was: a log being written
            // may grow past it, and what follows would start mid-record.
            if !line.ends_with(b"\n") {
                break;
            }
        }
        Ok(replaying.finish())
    }
}

/// A replay fed one chain after another, a line at a time: a JSONL log is one chain, a PostgreSQL
/// trail one per writer.
pub(crate) struct Replaying<'p> {
    replayer: Replayer<'p>,
    filter: &'p ReplayFilter,
    bounds: Bounds,
    /// The gates whose taint latch has closed (a `session_tainted` record), by chain.
    tainted: std::collections::HashSet<(usize, u64)>,
    /// The hashes of the records of a trail read so far (their first half).
    hashes: std::collections::HashSet<u128>,
    /// Every chain begun, each with its writer, verified as its lines come.
    chains: Vec<(Option<String>, Verifier)>,
    /// What the rules over history of each side would have seen.
    histories: Histories,
    rows: BTreeMap<(String, Option<String>, Flip), FlipRow>,
    report: ReplayReport,
}

impl<'p> Replaying<'p> {
    pub(crate) fn new(
        candidate: &'p PolicyFile,
        in_force: &'p [PolicyFile],
        filter: &'p ReplayFilter,
    ) -> Replaying<'p> {
        Replaying {
            replayer: Replayer::new(candidate, in_force),
            filter,
            bounds: filter.bounds(),
            tainted: std::collections::HashSet::new(),
            hashes: std::collections::HashSet::new(),
            chains: Vec::new(),
            histories: Histories::default(),
            rows: BTreeMap::new(),
            report: ReplayReport {
                chains: Vec::new(),
                candidate: (candidate.name().to_owned(), candidate.digest().to_owned()),
                calls: 0,
                decided: 0,
                flips: Vec::new(),
                unknown_policies: BTreeMap::new(),
                other_tools: BTreeMap::new(),
                unrecorded_arguments: BTreeMap::new(),
                raised_ceilings: BTreeMap::new(),
                escalations: BTreeMap::new(),
                changed_budgets: BTreeMap::new(),
                changed_taint: BTreeMap::new(),
                other_builds: 0,
                copies: 0,
            },
        }
    }

    /// Begins the chain of `writer` (`None`: a log file): its lines are given to
    /// [`line_in`](Self::line_in) with the number this returns, in its order, and may come between
    /// the lines of other chains (a trail's writers, by the time of their records).
    pub(crate) fn begin(&mut self, writer: Option<String>) -> usize {
        self.chains.push((writer, Verifier::new()));
        self.chains.len() - 1
    }

    /// The next line of `chain` is longer than a record may be: nothing after it is read.
    pub(crate) fn too_long(&mut self, chain: usize) {
        if let Some((_, verifier)) = self.chains.get_mut(chain) {
            verifier.too_long();
        }
    }

    /// The next line of `chain`, with its newline if it has one: verified, then replayed if it did.
    pub(crate) fn line_in(&mut self, chain: usize, line: &[u8]) {
        let Some((writer, verifier)) = self.chains.get_mut(chain) else {
            return;
        };
        let before = verifier.verified();
        verifier.line(line);
        if verifier.verified() == before {
            return;
        }
        let named = writer.is_some();
        let text = line.strip_suffix(b"\n").unwrap_or(line);
        let Ok(record) = serde_json::from_slice::<RecordLine<'_>>(text) else {
            return;
        };
        // Only the rules over history read a record's time.
        let time = match self.replayer.any_history {
            true => micros_of_rfc3339(&record.timestamp),
            false => None,
        };
        match record.stage {
            Stage::SessionTainted => {
                self.tainted.insert((chain, record.gate));
                return;
            }
            Stage::Exit => {
                if self.replayer.any_history {
                    let key = (chain, record.gate, record.call);
                    self.histories
                        .ended(key, time.filter(|_| record.outcome == Some(Outcome::Ok)));
                }
                return;
            }
            _ => {}
        }
        // A call by name stopped at the door (an unknown id, arguments that do not parse) was never
        // decided: its code is none of the refusals'.
        let decided = match record.stage {
            Stage::Enter => true,
            Stage::Refused => record
                .code
                .as_deref()
                .is_some_and(|code| DenialCode::ALL.iter().any(|d| d.as_str() == code)),
            _ => false,
        };
        if !decided || record.tool.is_empty() {
            return;
        }
        // A trail's rows copied under another writer's name verify as a chain of their own: the
        // same record (its hash, which chains its content) read again is not another call.
        let copy = named && {
            let key = u128::from_str_radix(record.hash.get(..32).unwrap_or_default(), 16).ok();
            key.is_some_and(|key| !self.hashes.insert(key))
        };
        if !self.filter.keeps(&self.bounds, &record) {
            // Outside the filter, a call is history as it happened.
            if !copy {
                self.histories
                    .as_it_ran(&mut self.replayer, chain, &record, time);
            }
            return;
        }
        if copy {
            self.report.copies += 1;
            return;
        }
        let tainted = self.tainted.contains(&(chain, record.gate));
        let flip = match self.replayer.decide(&record, tainted) {
            Ok(flip) => self
                .histories
                .judge(&mut self.replayer, chain, &record, time, flip),
            Err(not) => {
                self.histories
                    .as_it_ran(&mut self.replayer, chain, &record, time);
                return self.not_decided(not, &record);
            }
        };
        let report = &mut self.report;
        report.calls += 1;
        report.decided += 1;
        if record.manifest_digest != self.replayer.manifest_digest {
            report.other_builds += 1;
        }
        if flip.from == flip.to {
            return;
        }
        let principal = record.principal.as_deref().map(str::to_owned);
        let row = self
            .rows
            .entry((record.tool.to_string(), principal.clone(), flip))
            .or_insert_with(|| FlipRow {
                tool: record.tool.to_string(),
                principal,
                flip,
                calls: 0,
                seqs: Vec::new(),
                records: Vec::new(),
            });
        row.calls += 1;
        if row.seqs.len() < MAX_REFERENCES {
            row.seqs.push(Located {
                writer: self.chains[chain].0.clone(),
                seq: record.seq,
            });
            if let Ok(whole) = serde_json::from_slice::<AuditRecord>(text) {
                row.records.push(whole.reference());
            }
        }
    }

    /// Counts a call that was not decided, by why.
    fn not_decided(&mut self, not: NotDecided, record: &RecordLine<'_>) {
        let report = &mut self.report;
        report.calls += 1;
        match not {
            NotDecided::Policy(digest) => {
                *report.unknown_policies.entry(digest).or_default() += 1;
            }
            NotDecided::Tool => {
                *report
                    .other_tools
                    .entry(record.tool.to_string())
                    .or_default() += 1;
            }
            NotDecided::Ceiling => {
                *report
                    .raised_ceilings
                    .entry(record.tool.to_string())
                    .or_default() += 1;
            }
            NotDecided::Arguments => {
                *report
                    .unrecorded_arguments
                    .entry(record.tool.to_string())
                    .or_default() += 1;
            }
            NotDecided::Escalation => {
                *report
                    .escalations
                    .entry(record.tool.to_string())
                    .or_default() += 1;
            }
            NotDecided::Budget => {
                *report
                    .changed_budgets
                    .entry(record.tool.to_string())
                    .or_default() += 1;
            }
            NotDecided::Taint => {
                *report
                    .changed_taint
                    .entry(record.tool.to_string())
                    .or_default() += 1;
            }
        }
    }

    pub(crate) fn finish(mut self) -> ReplayReport {
        for (writer, verifier) in self.chains {
            self.report.chains.push(ChainReport {
                writer,
                report: verifier.finish(),
            });
        }
        self.report.flips = self.rows.into_values().collect();
        self.report
    }
}

/// The budgets of `narrowing` that count a call of `entry` judged at `risk`, as (scope, limit,
/// window in seconds), sorted.
fn budgets_of(
    narrowing: &Narrowing,
    entry: &crate::registry::ToolEntry,
    risk: Risk,
    record: &RecordLine<'_>,
) -> Vec<(String, u32, u64)> {
    use crate::gate::budget::BudgetScope;
    let mut covering: Vec<(String, u32, u64)> = narrowing
        .budgets
        .iter()
        .filter(|spec| match &spec.scope {
            BudgetScope::Tool(pattern) => crate::gate::denylist::DenyRule::parse(pattern)
                .is_ok_and(|rule| rule.matches_entry(entry)),
            BudgetScope::RiskLevel(level) => *level == risk,
            BudgetScope::Agent => record.agent.is_some(),
        })
        .map(|spec| {
            let table = spec.owner.as_ref().map_or("", |(table, _)| &**table);
            (
                format!("{table} {}", spec.scope),
                spec.limit,
                spec.window.as_secs(),
            )
        })
        .collect();
    covering.sort();
    covering
}

/// Where a record is: its `seq` in a log, or in a writer's chain of a trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Located {
    /// The writer of a PostgreSQL trail; `None` for a log file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer: Option<String>,
    /// The record's `seq`.
    pub seq: u64,
}

impl fmt::Display for Located {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.writer {
            None => write!(f, "{}", self.seq),
            Some(writer) => write!(f, "{}#{}", escaped(writer), self.seq),
        }
    }
}

/// One chain's verification: a log's, or a trail writer's.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ChainReport {
    /// The writer of a PostgreSQL trail; `None` for a log file.
    pub writer: Option<String>,
    /// What verification found, as `toolgate audit verify` reports it.
    pub report: VerifyReport,
}

enum NotDecided {
    Policy(String),
    Tool,
    Arguments,
    Ceiling,
    Escalation,
    Budget,
    Taint,
}

/// The policies of a replay, with what they make of a gate's principal and agent kept once.
struct Replayer<'p> {
    /// The candidate first, then the files given as in force.
    policies: Vec<&'p PolicyFile>,
    /// The narrowings built, no policy's first.
    built: Vec<Narrowing>,
    narrowings: HashMap<String, usize>,
    rulings: HashMap<(usize, usize, u8, u8), Ruling>,
    key: String,
    manifest_digest: &'static str,
    /// The rules over history of each narrowing built, compiled when first needed.
    history: Vec<Option<std::sync::Arc<[HistoryRule]>>>,
    /// The narrowings the last call decided was decided by: the policy in force's, the candidate's.
    sides: (usize, usize),
    /// Whether any policy of the replay has a rule over history.
    any_history: bool,
}

impl<'p> Replayer<'p> {
    fn new(candidate: &'p PolicyFile, in_force: &'p [PolicyFile]) -> Replayer<'p> {
        let mut policies = vec![candidate];
        policies.extend(in_force.iter());
        Replayer {
            policies: policies.clone(),
            built: vec![Narrowing::none()],
            narrowings: HashMap::new(),
            rulings: HashMap::new(),
            key: String::new(),
            manifest_digest: crate::registry::digest::manifest_digest(),
            history: Vec::new(),
            sides: (0, 0),
            any_history: policies
                .iter()
                .flat_map(|p| &p.sections)
                .any(|s| !s.rules.history.is_empty()),
        }
    }

    fn decide(&mut self, record: &RecordLine<'_>, tainted: bool) -> Result<Flip, NotDecided> {
        let registry = registry();
        let entry = registry.get(&record.tool).ok_or(NotDecided::Tool)?.entry;
        let manifest = &entry.manifest;
        if record
            .declared_risk
            .is_some_and(|risk| risk != manifest.risk_level)
        {
            return Err(NotDecided::Tool);
        }
        let in_force = match record.policy_digest.as_deref() {
            None => None,
            Some(digest) => Some(
                self.policies
                    .iter()
                    .position(|p| p.digest() == digest)
                    .ok_or_else(|| NotDecided::Policy(digest.to_owned()))?,
            ),
        };
        let from = self.narrowing(in_force, record);
        let to = self.narrowing(Some(0), record);
        self.sides = (from, to);
        // A gate records its mode under its policy's ceiling: where that ceiling may have lowered
        // it and the candidate's is higher, the mode the gate was asked for is not in the record.
        let (was, will) = (self.built[from].ceiling(), self.built[to].ceiling());
        if was == record.mode && will > was {
            return Err(NotDecided::Ceiling);
        }
        let slot = entry.slot.load(Ordering::Relaxed) as usize;
        let risk = record.effective_risk.unwrap_or(manifest.risk_level);
        // A refusal may come before the tool's `escalate` judged the arguments, and its record then
        // names the declared risk: the call's true risk is that or above. Decided only where the two
        // policies agree at every such risk.
        if entry.behaviour.escalate.is_some()
            && record.stage == Stage::Refused
            && risk == manifest.risk_level
            && from != to
        {
            let mut agreed = None;
            for at in Risk::ALL.into_iter().filter(|r| *r >= risk) {
                let was = self.ruling(from, record, manifest, slot, at)?;
                let will = self.ruling(to, record, manifest, slot, at)?;
                if was != will {
                    return Err(NotDecided::Escalation);
                }
                agreed.get_or_insert(Flip {
                    from: was,
                    to: will,
                });
            }
            return agreed.ok_or(NotDecided::Escalation);
        }
        // Budgets and the latch's rule decide on state the record does not hold: where the two
        // policies differ in them for this call, it is not decided.
        if from != to
            && budgets_of(&self.built[from], entry, risk, record)
                != budgets_of(&self.built[to], entry, risk, record)
        {
            return Err(NotDecided::Budget);
        }
        if tainted
            && from != to
            && toolgate_policy::latched(risk)
            && self.built[from].taint_refuses.is_some() != self.built[to].taint_refuses.is_some()
        {
            return Err(NotDecided::Taint);
        }
        let from = self.ruling(from, record, manifest, slot, risk)?;
        let to = self.ruling(to, record, manifest, slot, risk)?;
        Ok(Flip { from, to })
    }

    /// The narrowing of the policy at `index` (`None`: no policy) for `record`'s gate, built once
    /// per principal and agent: its place in `built`.
    fn narrowing(&mut self, index: Option<usize>, record: &RecordLine<'_>) -> usize {
        let key = &mut self.key;
        key.clear();
        let Some(index) = index else {
            return 0;
        };
        // Each name with its length, so that no two pairs of names make one key.
        let _ = write!(key, "{index}");
        for name in [record.principal.as_deref(), record.agent.as_deref()] {
            match name {
                None => key.push_str(";-"),
                Some(name) => {
                    let _ = write!(key, ";{}:{name}", name.len());
                }
            }
        }
        if let Some(&at) = self.narrowings.get(key.as_str()) {
            return at;
        }
        let built =
            self.policies[index].narrowing(record.principal.as_deref(), record.agent.as_deref());
        self.built.push(built);
        self.narrowings.insert(key.clone(), self.built.len() - 1);
        self.built.len() - 1
    }

    /// The narrowings of the policy in force (where the files given hold it) and of the candidate for
    /// `record`'s gate.
    fn sides_of(&mut self, record: &RecordLine<'_>) -> (Option<usize>, usize) {
        let in_force = match record.policy_digest.as_deref() {
            None => Some(None),
            Some(digest) => self
                .policies
                .iter()
                .position(|p| p.digest() == digest)
                .map(Some),
        };
        let from = in_force.map(|index| self.narrowing(index, record));
        (from, self.narrowing(Some(0), record))
    }

    /// The rules over history of the narrowing at `at`.
    fn history_rules(&mut self, at: usize) -> std::sync::Arc<[HistoryRule]> {
        if self.history.len() < self.built.len() {
            self.history.resize(self.built.len(), None);
        }
        let built = &self.built[at];
        let rules = self.history[at].get_or_insert_with(|| {
            built
                .history
                .iter()
                .filter_map(|spec| {
                    Some(HistoryRule {
                        tool: DenyRule::parse(&spec.tool).ok()?,
                        other: DenyRule::parse(&spec.other).ok()?,
                        order: spec.order,
                        per: spec.per,
                        within: i64::try_from(spec.within.as_micros()).unwrap_or(i64::MAX),
                        // As a gate keeps it: the calls looked back at, whichever rule reads them.
                        key: format!("{:?}|{}", spec.order, spec.other),
                    })
                })
                .collect()
        });
        rules.clone()
    }

    /// The ruling of the narrowing at `at` on `record`'s call.
    fn ruling(
        &mut self,
        at: usize,
        record: &RecordLine<'_>,
        manifest: &crate::registry::ToolManifest,
        slot: usize,
        risk: Risk,
    ) -> Result<Ruling, NotDecided> {
        let narrowing = &self.built[at];
        if narrowing.has_argument_rules(slot) {
            // A refusal before the argument rules needs no arguments; anything else does.
            let parsed = record
                .arguments
                .as_deref()
                .map(|json| serde_json::from_str::<Value>(json).unwrap_or(Value::Null));
            let judged = Judged::new(
                narrowing,
                manifest,
                slot,
                record.mode,
                risk,
                json_arguments(&parsed),
            );
            return match judged.verdict {
                toolgate_policy::Verdict::Refuse(_) => Ok(Ruling::Refused),
                _ if parsed.is_none() => Err(NotDecided::Arguments),
                _ => Ok(judged.ruling()),
            };
        }
        let key = (at, slot, record.mode as u8, risk as u8);
        if let Some(&ruling) = self.rulings.get(&key) {
            return Ok(ruling);
        }
        let ruling = Judged::new(narrowing, manifest, slot, record.mode, risk, |_| None).ruling();
        self.rulings.insert(key, ruling);
        Ok(ruling)
    }
}

/// The longest window of a rule over history, in microseconds.
const MAX_WINDOW_MICROS: i64 = crate::gate::budget::MAX_BUDGET_WINDOW.as_micros() as i64;

/// A rule over history as replay decides it.
#[derive(Clone)]
struct HistoryRule {
    tool: DenyRule,
    other: DenyRule,
    order: HistoryOrder,
    per: HistoryPer,
    /// The window, in microseconds.
    within: i64,
    /// What names the rule, whoever's history it reads.
    key: String,
}

impl HistoryRule {
    /// The key of the history this rule reads for `record`'s call on `chain`.
    fn history_of(&self, chain: usize, record: &RecordLine<'_>) -> String {
        match (self.per, record.principal.as_deref()) {
            (HistoryPer::Principal, Some(principal)) => {
                format!("{}|p{}:{principal}", self.key, principal.len())
            }
            (HistoryPer::Principal, None) => format!("{}|p-", self.key),
            (HistoryPer::Session, _) => format!("{}|s{chain}:{}", self.key, record.gate),
        }
    }
}

/// What the rules over history of each side would have seen, as a gate keeps it: per side (the
/// policy in force, the candidate), the instants of the calls each rule looks back at.
#[derive(Default)]
struct Histories {
    sides: [HashMap<String, std::collections::VecDeque<i64>>; 2],
    /// The marks a call leaves once it ends without an error, per side: by chain, gate and call.
    pending: HashMap<(usize, u64, u64), [Vec<String>; 2]>,
}

impl Histories {
    /// The rulings of `flip` with the rules over history of each side applied to `record`'s call at
    /// `time`; the calls a side lets run are its history from then on.
    fn judge(
        &mut self,
        replayer: &mut Replayer<'_>,
        chain: usize,
        record: &RecordLine<'_>,
        time: Option<i64>,
        flip: Flip,
    ) -> Flip {
        if !replayer.any_history {
            return flip;
        }
        let (from, to) = replayer.sides;
        let mut rulings = [flip.from, flip.to];
        for (side, at) in [(0, from), (1, to)] {
            if replayer.built[at].history.is_empty() {
                continue;
            }
            let Some(entry) = registry().get(&record.tool).map(|tool| tool.entry) else {
                continue;
            };
            let rules = replayer.history_rules(at);
            let state = &mut self.sides[side];
            if rulings[side] != Ruling::Refused
                && rules.iter().any(|rule| {
                    rule.tool.matches_entry(entry)
                        && refuses(rule, state, &rule.history_of(chain, record), time)
                })
            {
                rulings[side] = Ruling::Refused;
            }
            if rulings[side] != Ruling::Refused {
                self.mark(side, &rules, entry, chain, record, time);
            }
        }
        Flip {
            from: rulings[0],
            to: rulings[1],
        }
    }

    /// A call not replayed (outside the filter, or not decided) is history as it happened: one that
    /// ran is each side's.
    fn as_it_ran(
        &mut self,
        replayer: &mut Replayer<'_>,
        chain: usize,
        record: &RecordLine<'_>,
        time: Option<i64>,
    ) {
        if record.stage != Stage::Enter || !replayer.any_history {
            return;
        }
        let Some(entry) = registry().get(&record.tool).map(|tool| tool.entry) else {
            return;
        };
        let (from, to) = replayer.sides_of(record);
        for (side, at) in [(0, from), (1, Some(to))] {
            let Some(at) = at.filter(|&at| !replayer.built[at].history.is_empty()) else {
                continue;
            };
            let rules = replayer.history_rules(at);
            self.mark(side, &rules, entry, chain, record, time);
        }
    }

    /// The marks of a call `side` lets run: at once for the rules that forbid a call after it, once
    /// it ends without an error for those that require it.
    fn mark(
        &mut self,
        side: usize,
        rules: &[HistoryRule],
        entry: &crate::registry::ToolEntry,
        chain: usize,
        record: &RecordLine<'_>,
        time: Option<i64>,
    ) {
        let Some(time) = time else { return };
        for rule in rules.iter().filter(|rule| rule.other.matches_entry(entry)) {
            let key = rule.history_of(chain, record);
            match rule.order {
                HistoryOrder::NotAfter => self.sides[side].entry(key).or_default().push_back(time),
                HistoryOrder::After => self
                    .pending
                    .entry((chain, record.gate, record.call))
                    .or_default()[side]
                    .push(key),
            }
        }
    }

    /// The call on `chain` of (gate, call) ended: without an error at `Some(time)`, else `None`.
    fn ended(&mut self, call: (usize, u64, u64), time: Option<i64>) {
        let Some(pending) = self.pending.remove(&call) else {
            return;
        };
        let Some(time) = time else { return };
        for (side, keys) in pending.into_iter().enumerate() {
            for key in keys {
                self.sides[side].entry(key).or_default().push_back(time);
            }
        }
    }
}

/// Whether `rule` refuses a call at `time` given the history under `key`: a time that cannot be
/// read refuses.
fn refuses(
    rule: &HistoryRule,
    state: &mut HashMap<String, std::collections::VecDeque<i64>>,
    key: &str,
    time: Option<i64>,
) -> bool {
    let Some(time) = time else { return true };
    let start = time.saturating_sub(rule.within);
    // Rules over the same calls read one history over windows of their own: none takes out more
    // than the longest may read.
    let oldest = time.saturating_sub(MAX_WINDOW_MICROS);
    let within = state.get_mut(key).is_some_and(|times| {
        while times.front().is_some_and(|&at| at <= oldest) {
            times.pop_front();
        }
        times
            .iter()
            .rev()
            .take_while(|&&at| at > start)
            .any(|&at| at <= time)
    });
    match rule.order {
        HistoryOrder::After => !within,
        HistoryOrder::NotAfter => within,
    }
}

/// Names from a log as a report shows them: escaped, and where two of them read alike (a look-alike
/// letter, a space around one), each of those quoted with every character but printable ASCII
/// written as its code point, so that no two shown names look the same.
struct Names(BTreeMap<String, usize>);

impl Names {
    fn of<'n>(names: impl Iterator<Item = &'n str>) -> Names {
        let mut readings: BTreeMap<String, usize> = BTreeMap::new();
        let mut seen = std::collections::BTreeSet::new();
        for name in names {
            if seen.insert(name) {
                *readings.entry(crate::names::reading(name)).or_default() += 1;
            }
        }
        Names(readings)
    }

    fn show(&self, name: &str) -> String {
        let alike = self
            .0
            .get(&crate::names::reading(name))
            .is_some_and(|n| *n > 1);
        if !alike {
            return escaped(name).into_owned();
        }
        let mut shown = String::from("\"");
        for c in name.chars() {
            if c == ' ' || (c.is_ascii_graphic() && c != '"' && c != '\\') {
                shown.push(c);
            } else {
                shown.push_str(&format!("\\u{{{:04x}}}", u32::from(c)));
            }
        }
        shown.push('"');
        shown
    }
}

impl ReplayReport {
    /// The report as JSON (as its `Serialize` writes it, pretty), with every character that could
    /// hide or reorder text written as its `\uXXXX` escape: the same value, shown safely.
    pub fn to_json(&self) -> String {
        crate::terminal::escaped_json(
            serde_json::to_string_pretty(self).expect("a replay's report serializes"),
        )
    }
}

impl fmt::Display for ReplayReport {
    /// The chain first, then the counts, each flip a row, and what was not replayed and why; every
    /// text the log holds escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.chains.is_empty() {
            writeln!(f, "no chain was read")?;
        }
        let writers = Names::of(self.chains.iter().filter_map(|c| c.writer.as_deref()));
        let principals = Names::of(self.flips.iter().filter_map(|r| r.principal.as_deref()));
        for chain in &self.chains {
            let report = &chain.report;
            let (whose, loud) = match &chain.writer {
                None => ("the log".to_owned(), "THE LOG".to_owned()),
                Some(writer) => {
                    let whose = format!("writer {}", writers.show(writer));
                    (whose.clone(), whose)
                }
            };
            if let Some(broken) = &report.broken {
                writeln!(
                    f,
                    "{loud} DOES NOT VERIFY: line {} breaks the chain ({}); only the {} records before it are replayed",
                    broken.line, broken.reason, report.records
                )?;
            } else if let Some(torn) = &report.torn_tail {
                writeln!(
                    f,
                    "{whose}: the last line is torn (line {}, a write cut short); the {} records before it verify and are replayed",
                    torn.line, report.records
                )?;
            } else {
                writeln!(f, "{whose} verifies: {} records", report.records)?;
            }
        }
        writeln!(
            f,
            "candidate: {} (policy {})",
            escaped(&self.candidate.0),
            self.candidate.1
        )?;
        let flipped: u64 = self.flips.iter().map(|row| row.calls).sum();
        writeln!(
            f,
            "{} calls replayed, {} decided under both policies, {} flip",
            self.calls, self.decided, flipped
        )?;
        if !self.flips.is_empty() {
            writeln!(f)?;
            let rows: Vec<[String; 5]> = self
                .flips
                .iter()
                .map(|row| {
                    let shown: Vec<String> =
                        row.seqs.iter().take(5).map(Located::to_string).collect();
                    let more = row.calls as usize - shown.len().min(row.calls as usize);
                    let mut seqs = shown.join(", ");
                    if more > 0 {
                        seqs.push_str(&format!(" and {more} more"));
                    }
                    [
                        escaped(&row.tool).into_owned(),
                        row.principal
                            .as_deref()
                            .map_or_else(|| "-".to_owned(), |p| principals.show(p)),
                        format!(
                            "{}{}",
                            row.flip,
                            if row.flip.widens() { " (WIDENS)" } else { "" }
                        ),
                        row.calls.to_string(),
                        seqs,
                    ]
                })
                .collect();
            let header = ["tool", "principal", "flip", "calls", "seq"];
            let mut widths = header.map(|h| h.chars().count());
            for row in &rows {
                for (width, cell) in widths.iter_mut().zip(row) {
                    *width = (*width).max(cell.chars().count());
                }
            }
            let line = |f: &mut fmt::Formatter<'_>, cells: [&str; 5]| {
                let mut text = String::new();
                for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
                    if i + 1 == cells.len() {
                        text.push_str(cell);
                    } else {
                        let pad = width - cell.chars().count();
                        text.push_str(cell);
                        text.push_str(&" ".repeat(pad + 2));
                    }
                }
                writeln!(f, "{}", text.trim_end())
            };
            line(f, header)?;
            for row in &rows {
                line(f, [&row[0], &row[1], &row[2], &row[3], &row[4]])?;
            }
        }
        let not_decided = |f: &mut fmt::Formatter<'_>, map: &BTreeMap<String, u64>, why: &str| {
            for (what, calls) in map {
                writeln!(f, "not replayed: {calls} calls {why} `{}`", escaped(what))?;
            }
            fmt::Result::Ok(())
        };
        if !(self.unknown_policies.is_empty()
            && self.other_tools.is_empty()
            && self.unrecorded_arguments.is_empty()
            && self.raised_ceilings.is_empty()
            && self.escalations.is_empty()
            && self.changed_budgets.is_empty()
            && self.changed_taint.is_empty())
        {
            writeln!(f)?;
        }
        not_decided(
            f,
            &self.unknown_policies,
            "recorded under a policy not given (--in-force FILE), digest",
        )?;
        not_decided(
            f,
            &self.other_tools,
            "of a tool this program does not link as recorded (no such id, or another risk):",
        )?;
        not_decided(
            f,
            &self.unrecorded_arguments,
            "whose record does not hold the arguments an argument rule reads (the tool does not record them, or the call was refused before they were read):",
        )?;
        not_decided(
            f,
            &self.raised_ceilings,
            "recorded at the ceiling in force, which the candidate raises (the mode asked for is not recorded):",
        )?;
        not_decided(
            f,
            &self.escalations,
            "refused before their tool's escalation may have judged them (the record names the declared risk):",
        )?;
        not_decided(
            f,
            &self.changed_budgets,
            "counted by budgets that differ between the two policies (what a budget decides is not in the record):",
        )?;
        not_decided(
            f,
            &self.changed_taint,
            "in a session whose taint latch had closed, under a candidate that changes `taint`:",
        )?;
        if self.copies > 0 {
            writeln!(
                f,
                "not replayed: {} records read already under another writer (rows copied under another name)",
                self.copies
            )?;
        }
        if self.other_builds > 0 {
            writeln!(
                f,
                "{} of the calls decided were recorded by a build with another set of tools (same tool and risk)",
                self.other_builds
            )?;
        }
        Ok(())
    }
}

/// The report as JSON: `chain`, `candidate`, the counts, `flips` (each row with its `seqs` and
/// `records`), and what was not replayed.
impl Serialize for ReplayReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(Some(14))?;
        let chains: Vec<Value> = self
            .chains
            .iter()
            .map(|chain| {
                let report = &chain.report;
                serde_json::json!({
                    "writer": chain.writer,
                    "records": report.records,
                    "intact": report.is_intact(),
                    "broken_at_line": report.broken.as_ref().map(|b| b.line),
                    "broken_because": report.broken.as_ref().map(|b| b.reason.to_string()),
                    "torn_at_line": report.torn_tail.as_ref().map(|t| t.line),
                })
            })
            .collect();
        map.serialize_entry("chains", &chains)?;
        map.serialize_entry(
            "candidate",
            &serde_json::json!({ "name": self.candidate.0, "digest": self.candidate.1 }),
        )?;
        map.serialize_entry("calls", &self.calls)?;
        map.serialize_entry("decided", &self.decided)?;
        map.serialize_entry("flips", &self.flips)?;
        map.serialize_entry("unknown_policies", &self.unknown_policies)?;
        map.serialize_entry("other_tools", &self.other_tools)?;
        map.serialize_entry("unrecorded_arguments", &self.unrecorded_arguments)?;
        map.serialize_entry("raised_ceilings", &self.raised_ceilings)?;
        map.serialize_entry("escalations", &self.escalations)?;
        map.serialize_entry("changed_budgets", &self.changed_budgets)?;
        map.serialize_entry("changed_taint", &self.changed_taint)?;
        map.serialize_entry("other_builds", &self.other_builds)?;
        map.serialize_entry("copies", &self.copies)?;
        map.end()
    }
}
