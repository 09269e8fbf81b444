//! The promotion report: what an agent did, and what it would have done with more autonomy.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use crate::audit::record::{AuditRecord, Decision, Outcome, Stage};
use crate::audit::verify::{Line, read_line};
use crate::terminal::escaped;
use toolgate_policy::DenialCode;
use toolgate_policy::Mode;
use toolgate_policy::Risk;

/// Refusal codes that mean "only the mode stood in the way": with a mode that allows the tool, the
/// call would have run (possibly after an approval).
const MODE_ONLY: [DenialCode; 2] = [DenialCode::ModeNotAllowed, DenialCode::AboveCeiling];

/// Decisions counted per mode and declared risk, to judge whether an agent can be promoted to a mode
/// with more autonomy; rendered as Markdown by `Display`.
///
/// Only decisions count: `enter` records (allowed, or approved) and `refused` records; `exit`,
/// `mode_lowered` and `approval_granted` records are skipped. A refusal with code `MODE_NOT_ALLOWED` or
/// `ABOVE_CEILING` **would have run** in a mode that allows the tool; those calls are also listed with
/// their tool and `arguments_digest`, so that an operator can see what an agent in `SHADOW` mode tried
/// to do.
///
/// ```
/// # extern crate toolgate_runtime as toolgate;
/// use toolgate::audit::{AuditRecord, Decision, PromotionReport, Stage};
/// use toolgate::{Mode, Risk};
///
/// let mut refused = AuditRecord::new(Stage::Refused, "users.delete", Mode::Shadow, 1);
/// refused.decision = Some(Decision::Refused);
/// refused.code = Some("ABOVE_CEILING".into());
/// refused.declared_risk = Some(Risk::HighWrite);
///
/// let report = PromotionReport::from_records([refused]);
/// assert_eq!(report.rows().next().unwrap().would_have_run, 1);
/// assert!(report.to_string().contains("| SHADOW | HIGH_WRITE |"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromotionReport {
    rows: BTreeMap<(Mode, RiskKey), PromotionRow>,
    would_have_run: BTreeMap<WouldHaveRun, u64>,
    records: u64,
    unreadable_lines: u64,
}

/// The counts for one mode and one declared risk level.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PromotionRow {
    /// The gate's mode at the decision.
    pub mode: Mode,
    /// The risk the tool declares; `None` where the record has none (an unregistered tool).
    pub risk: Option<Risk>,
    /// Calls allowed, approved ones included.
    pub allowed: u64,
    /// Of the allowed calls, those allowed after an approval.
    pub approved: u64,
    /// Refused calls, by refusal code.
    pub refused: BTreeMap<String, u64>,
    /// Refused calls whose only obstacle was the mode (`MODE_NOT_ALLOWED`, `ABOVE_CEILING`).
    pub would_have_run: u64,
}

/// One distinct call that was refused only because of the mode.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub struct WouldHaveRun {
    /// The gate's mode at the decision.
    pub mode: Mode,
    /// The tool's id.
    pub tool: String,
    /// The digest of the call's arguments, if the record has one.
    pub arguments_digest: Option<String>,
}

/// Orders rows by risk, with rows of unknown risk last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct RiskKey(u8);

impl RiskKey {
    fn of(risk: Option<Risk>) -> RiskKey {
        RiskKey(risk.map_or(u8::MAX, |risk| risk as u8))
    }
}

impl PromotionReport {
    /// An empty report.
    pub fn new() -> PromotionReport {
        PromotionReport::default()
    }

    /// The report of `records`.
    pub fn from_records<R: Borrow<AuditRecord>>(
        records: impl IntoIterator<Item = R>,
    ) -> PromotionReport {
        let mut report = PromotionReport::new();
        for record in records {
            report.add(record.borrow());
        }
        report
    }

    /// The report of a JSONL log read from `reader`. Lines that are not records are counted in
    /// [`unreadable_lines`](PromotionReport::unreadable_lines) and skipped, lines longer than
    /// [`MAX_RECORD_LEN`](crate::audit::MAX_RECORD_LEN) too, without holding them; the chain is not
    /// checked (see [`verify_file`](crate::audit::verify_file)).
    pub fn read_log(reader: impl Read) -> io::Result<PromotionReport> {
        let mut report = PromotionReport::new();
        let mut reader = BufReader::with_capacity(1 << 16, reader);
        let mut line = Vec::new();
        loop {
            match read_line(&mut reader, &mut line)? {
                Line::End => return Ok(report),
                Line::TooLong => {
                    report.unreadable_lines += 1;
                    skip_line(&mut reader)?;
                }
                Line::Read => match serde_json::from_slice::<AuditRecord>(&line) {
                    Ok(record) => report.add(&record),
                    Err(_) => report.unreadable_lines += 1,
                },
            }
        }
    }

    /// The report of the JSONL log at `path`; see [`read_log`](PromotionReport::read_log).
    pub fn from_file(path: impl AsRef<Path>) -> io::Result<PromotionReport> {
        PromotionReport::read_log(File::open(path)?)
    }

    /// Counts one record.
    pub fn add(&mut self, record: &AuditRecord) {
        self.records += 1;
        let refused = match (record.stage, record.decision) {
            (Stage::Enter, decision) => {
                let row = self.row(record);
                row.allowed += 1;
                row.approved += u64::from(matches!(
                    decision,
                    Some(Decision::Approved | Decision::Granted)
                ));
                return;
            }
            (Stage::Refused, _) => record.code.as_deref().unwrap_or("UNKNOWN"),
            // Refused after its `enter` was counted as allowed: it never ran.
            (Stage::Exit, _) if record.outcome == Some(Outcome::Refused) => {
                let row = self.row(record);
                row.allowed = row.allowed.saturating_sub(1);
                record.code.as_deref().unwrap_or("UNKNOWN")
            }
            _ => return,
        };
        let would_have_run = MODE_ONLY.iter().any(|code| *code == refused);
        let row = self.row(record);
        *row.refused.entry(refused.to_owned()).or_default() += 1;
        if would_have_run {
            row.would_have_run += 1;
            let call = WouldHaveRun {
                mode: record.mode,
                tool: record.tool.clone().into_owned(),
                arguments_digest: record.arguments_digest.clone(),
            };
            *self.would_have_run.entry(call).or_default() += 1;
        }
    }

    fn row(&mut self, record: &AuditRecord) -> &mut PromotionRow {
        let risk = record.declared_risk;
        self.rows
            .entry((record.mode, RiskKey::of(risk)))
            .or_insert_with(|| PromotionRow {
                mode: record.mode,
                risk,
                allowed: 0,
                approved: 0,
                refused: BTreeMap::new(),
                would_have_run: 0,
            })
    }

    /// The rows, by mode then risk.
    pub fn rows(&self) -> impl Iterator<Item = &PromotionRow> {
        self.rows.values()
    }

    /// The distinct calls refused only because of the mode, with how many times each was refused; by
    /// mode, tool and digest.
    pub fn would_have_run(&self) -> impl Iterator<Item = (&WouldHaveRun, u64)> {
        self.would_have_run.iter().map(|(call, &n)| (call, n))
    }

    /// How many records were counted or skipped.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// How many lines of a log could not be read as records.
    pub fn unreadable_lines(&self) -> u64 {
        self.unreadable_lines
    }

    /// The report as Markdown (the same as `to_string()`).
    pub fn to_markdown(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for PromotionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "# Promotion report\n")?;
        let decisions: u64 = self
            .rows()
            .map(|row| row.allowed + row.refused.values().sum::<u64>())
            .sum();
        writeln!(
            f,
            "{decisions} decisions (calls allowed or refused) in {} records.",
            self.records
        )?;
        match self.unreadable_lines {
            0 => {}
            1 => writeln!(
                f,
                "\n**1 line could not be read as a record; it is not counted.**"
            )?,
            n => writeln!(
                f,
                "\n**{n} lines could not be read as records; they are not counted.**"
            )?,
        }
        if self.rows.is_empty() {
            return Ok(());
        }

        let mut codes: Vec<&str> = Vec::new();
        for row in self.rows() {
            for code in row.refused.keys() {
                if !codes.contains(&code.as_str()) {
                    codes.push(code);
                }
            }
        }
        let policy_order = |code: &str| {
            DenialCode::ALL
                .iter()
                .position(|known| *known == code)
                .unwrap_or(DenialCode::ALL.len())
        };
        codes.sort_by(|a, b| policy_order(a).cmp(&policy_order(b)).then(a.cmp(b)));

        let mut header = String::from(
            "\n| mode | declared risk | allowed | approved | refused | would have run |",
        );
        let mut rule = String::from("| --- | --- | ---: | ---: | ---: | ---: |");
        for code in &codes {
            let _ = write!(header, " {} |", cell(code));
            rule.push_str(" ---: |");
        }
        writeln!(f, "{header}\n{rule}")?;
        for row in self.rows() {
            write!(
                f,
                "| {} | {} | {} | {} | {} | {} |",
                row.mode,
                row.risk.map_or("unknown", Risk::as_str),
                row.allowed,
                row.approved,
                row.refused.values().sum::<u64>(),
                row.would_have_run,
            )?;
            for code in &codes {
                write!(f, " {} |", row.refused.get(*code).copied().unwrap_or(0))?;
            }
            writeln!(f)?;
        }
        writeln!(
            f,
            "\n*Allowed* includes approved calls. *Would have run*: refused only because of the mode \
             (`MODE_NOT_ALLOWED`, `ABOVE_CEILING`); a mode that allows the tool would have run them."
        )?;

        if self.would_have_run.is_empty() {
            return Ok(());
        }
        writeln!(f, "\n## Calls that would have run\n")?;
        writeln!(f, "| mode | tool | arguments digest | times |")?;
        writeln!(f, "| --- | --- | --- | ---: |")?;
        for (call, times) in self.would_have_run() {
            writeln!(
                f,
                "| {} | {} | {} | {times} |",
                call.mode,
                cell(&call.tool),
                call.arguments_digest
                    .as_deref()
                    .map_or("(none)".into(), cell),
            )?;
        }
        Ok(())
    }
}

/// Reads past the rest of a line, through its newline, holding none of it.
fn skip_line(reader: &mut impl BufRead) -> io::Result<()> {
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(());
        }
        match buffer.iter().position(|&b| b == b'\n') {
            Some(newline) => {
                reader.consume(newline + 1);
                return Ok(());
            }
            None => {
                let all = buffer.len();
                reader.consume(all);
            }
        }
    }
}

/// Text from the log made safe for a Markdown table cell: [`escaped`] (which leaves no line break),
/// then Markdown's own escapes.
fn cell(text: &str) -> String {
    escaped(text).replace('\\', "\\\\").replace('|', "\\|")
}
