//! The `toolgate` command: checks audit logs and reports on them.

#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use toolgate::audit::{PromotionReport, VerifyReport, verify_file};

const VERIFY_EXIT_STATUS: &str = "\
Exit status:
  0   the log is intact
  1   the hash chain is broken: a record was changed, deleted, inserted or reordered
  2   only the last line is torn (a write cut short by a crash); every record before it is intact
  3   the file could not be read
  4   the chain is intact but does not end at the --expect-last hash: records were cut from its end
  64  the command line is invalid";

const PROMOTION_EXIT_STATUS: &str = "\
The log is verified first; the report is printed either way, with a warning on stderr if the log is not
intact.

Exit status: as for `toolgate audit verify`:
  0   the log is intact
  1   the hash chain is broken: the report may not show what happened
  2   only the last line is torn (a write cut short by a crash)
  3   the file could not be read
  64  the command line is invalid";

/// Checks toolgate audit logs and reports on them.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, after_help = VERIFY_EXIT_STATUS)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Hash-chained JSONL audit logs, as written by `JsonlSink`.
    #[command(subcommand)]
    Audit(Audit),
}

#[derive(Debug, Subcommand)]
enum Audit {
    /// Verifies a log's hash chain and prints what it found.
    #[command(after_help = VERIFY_EXIT_STATUS)]
    Verify {
        /// The JSONL audit log.
        file: PathBuf,
        /// The hash the log must end at, known from elsewhere (the last record's hash an earlier
        /// verification printed): without it, a log whose last records were removed verifies as intact.
        #[arg(long, value_name = "HASH")]
        expect_last: Option<String>,
    },
    /// Prints a Markdown report of the decisions in a log, per mode and risk level: what was allowed,
    /// what was refused and why, and what would have run with more autonomy.
    #[command(after_help = PROMOTION_EXIT_STATUS)]
    Promotion {
        /// The JSONL audit log.
        file: PathBuf,
    },
}

const INTACT: u8 = 0;
const BROKEN: u8 = 1;
const TORN: u8 = 2;
const IO_ERROR: u8 = 3;
const CUT: u8 = 4;
const USAGE: u8 = 64;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap exits with 2 on a usage error, which here means a torn log.
            return ExitCode::from(if e.use_stderr() { USAGE } else { INTACT });
        }
    };
    let status = match cli.command {
        Command::Audit(Audit::Verify { file, expect_last }) => {
            verify(&file, expect_last.as_deref())
        }
        Command::Audit(Audit::Promotion { file }) => promotion(&file),
    };
    ExitCode::from(status)
}

fn verify(file: &Path, expect_last: Option<&str>) -> u8 {
    let report = match verify_file(file) {
        Ok(report) => report,
        Err(e) => return io_error(file, &e),
    };
    match expect_last {
        Some(hash) if report.is_intact() && !report.ends_at(hash) => {
            print(&format!(
                "CUT: the chain is intact but ends at hash {}, not at the expected {hash}: records \
                 were removed from its end\n{report}",
                report.last_hash
            ));
            CUT
        }
        _ => {
            print(&report.to_string());
            status(&report)
        }
    }
}

fn promotion(file: &Path) -> u8 {
    let verified = match verify_file(file) {
        Ok(report) => report,
        Err(e) => return io_error(file, &e),
    };
    let report = match PromotionReport::from_file(file) {
        Ok(report) => report,
        Err(e) => return io_error(file, &e),
    };
    print(&report.to_markdown());
    if !verified.is_intact() {
        eprintln!(
            "toolgate: warning: {} is not intact; the report may not show what happened:\n{verified}",
            file.display()
        );
    }
    status(&verified)
}

fn status(report: &VerifyReport) -> u8 {
    match (&report.broken, &report.torn_tail) {
        (Some(_), _) => BROKEN,
        (None, Some(_)) => TORN,
        (None, None) => INTACT,
    }
}

fn io_error(file: &Path, e: &io::Error) -> u8 {
    eprintln!("toolgate: cannot read {}: {e}", file.display());
    IO_ERROR
}

/// Prints to stdout, ignoring a closed pipe (`toolgate audit promotion log | head`).
fn print(text: &str) {
    let _ = io::stdout().lock().write_all(text.as_bytes());
}
