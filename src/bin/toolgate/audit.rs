//! `toolgate audit`: audit logs verified and reported on, JSONL files and (feature `postgres`) the
//! PostgreSQL trail; keys made to sign their checkpoints.

use std::io;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use toolgate::audit::{
    BreakReason, CheckpointReport, PromotionReport, PublicKey, SigningKey, VerifyReport,
    checkpoints_path, verify_file, verify_signed_file,
};

use super::print;

pub(super) const VERIFY_EXIT_STATUS: &str = "\
Exit status:
  0   the log is intact
  1   the hash chain is broken: a record was changed, deleted, inserted or reordered
  2   only the last line is torn (a write cut short by a crash); every record before it is intact
      (with --public-key: of the log or of its checkpoint file)
  3   the file could not be read (with --public-key: or the key, or the checkpoint file)
  4   the chain's last complete record is not the --expect-last hash: records were cut from its end
      (and a torn line after it does not hide that)
  5   with --public-key: a checkpoint is forged or changed (or the key is not the writer's), names
      another log's writer, or its series has one deleted, inserted or moved
  6   with --public-key: the log was rewritten: a signed checkpoint names a record the log does not
      have, even where every hash after the change was recomputed
  7   with --public-key: the log was cut short: a signed checkpoint covers records past the end of
      an intact chain (past a break, they were edited: 1, reported as LOG EDITED)
  8   a line is longer than any record a sink writes (16 MiB): it is not a record, and the log is not
      read past it, so that a file of any size is read in bounded memory
  9   with --public-key: the log has records and no checkpoint that verifies covers any of them (the
      checkpoint file is empty, or its writer has not signed yet): it is signed by nothing, and could
      have been rewritten whole
  64  the command line is invalid

When several apply, the first of 3, 5, 1, 8, 6, 7, 4, 9, 2 is the status. Records after the last
checkpoint are not covered by any signature: the report says how many, and whether the last checkpoint
is final (written when the writer shut down) or not (still running, crashed, or its tail cut off with
the log's). A log with no record verifies with no checkpoint: there is nothing to sign.";

const KEYGEN_EXIT_STATUS: &str = "\
Writes the private key to KEY (PKCS#8 PEM, readable by its owner only) and the public key to KEY.pub
(SPKI PEM); refuses to overwrite either. `openssl genpkey -algorithm ed25519 -out KEY` and `openssl pkey
-in KEY -pubout -out KEY.pub` make the same files.

Exit status:
  0   written
  3   a file could not be written, or exists already
  64  the command line is invalid";

const PROMOTION_EXIT_STATUS: &str = "\
The log is verified first; the report is printed either way, with a warning on stderr if the log is not
intact.

Exit status: as for `toolgate audit verify`:
  0   the log is intact
  1   the hash chain is broken: the report may not show what happened
  2   only the last line is torn (a write cut short by a crash)
  3   the file could not be read
  8   a line is longer than any record a sink writes (16 MiB); it is skipped
  64  the command line is invalid";

#[derive(Debug, Subcommand)]
pub(super) enum Audit {
    /// Verifies a log's hash chain and prints what it found.
    #[command(after_help = VERIFY_EXIT_STATUS)]
    Verify {
        /// The JSONL audit log, or (feature `postgres`) the PostgreSQL database of a `PostgresSink`
        /// (postgres://user@host/database): every writer's chain is verified.
        file: PathBuf,
        /// The schema of the audit table, for a PostgreSQL trail.
        #[arg(long, default_value = "toolgate", value_name = "SCHEMA")]
        schema: String,
        /// The hash the log must end at, known from elsewhere (the last record's hash an earlier
        /// verification printed): without it, a log whose last records were removed verifies as intact.
        #[arg(long, value_name = "HASH")]
        expect_last: Option<String>,
        /// The public key (SPKI PEM) of the checkpoints' signing key: checks the log against its
        /// signed checkpoints, which shows a rewritten log or one cut short.
        #[arg(long, value_name = "PUB")]
        public_key: Option<PathBuf>,
        /// The checkpoint file; FILE.checkpoints by default.
        #[arg(long, value_name = "SIDECAR", requires = "public_key")]
        checkpoints: Option<PathBuf>,
    },
    /// Makes an Ed25519 key pair to sign a log's checkpoints.
    #[command(after_help = KEYGEN_EXIT_STATUS)]
    Keygen {
        /// Where to write the private key; the public key goes to the same path with `.pub` appended.
        #[arg(long, value_name = "KEY")]
        out: PathBuf,
    },
    /// Prints a Markdown report of the decisions in a log, per mode and risk level: what was allowed,
    /// what was refused and why, and what would have run with more autonomy.
    #[command(after_help = PROMOTION_EXIT_STATUS)]
    Promotion {
        /// The JSONL audit log, or (feature `postgres`) the PostgreSQL database of a `PostgresSink`.
        file: PathBuf,
        /// The schema of the audit table, for a PostgreSQL trail.
        #[arg(long, default_value = "toolgate", value_name = "SCHEMA")]
        schema: String,
    },
}

pub(super) const INTACT: u8 = 0;
const BROKEN: u8 = 1;
const TORN: u8 = 2;
const IO_ERROR: u8 = 3;
const CUT: u8 = 4;
const CHECKPOINTS_TAMPERED: u8 = 5;
const REWRITTEN: u8 = 6;
const CUT_BEFORE_CHECKPOINT: u8 = 7;
const TOO_LONG: u8 = 8;
const SIGNED_BY_NOTHING: u8 = 9;

pub(super) fn run(command: Audit) -> u8 {
    match command {
        Audit::Verify {
            file,
            schema,
            expect_last,
            public_key,
            checkpoints,
        } => match (database(&file), public_key) {
            (Some(url), public_key) => {
                trail::verify(url, &schema, expect_last.is_some(), public_key.as_deref())
            }
            (None, Some(public_key)) => {
                let checkpoints = checkpoints.unwrap_or_else(|| checkpoints_path(&file));
                verify_signed(&file, &checkpoints, &public_key, expect_last.as_deref())
            }
            (None, None) => verify(&file, expect_last.as_deref()),
        },
        Audit::Keygen { out } => keygen(&out),
        Audit::Promotion { file, schema } => match database(&file) {
            Some(url) => trail::promotion(url, &schema),
            None => promotion(&file),
        },
    }
}

/// The PostgreSQL URL a `FILE` argument names instead of a file.
fn database(file: &Path) -> Option<&str> {
    let text = file.to_str()?;
    (text.starts_with("postgres://") || text.starts_with("postgresql://")).then_some(text)
}

/// Audit trails kept in PostgreSQL by `PostgresSink`.
#[cfg(feature = "postgres")]
mod trail {
    use toolgate::audit::PublicKey;
    use toolgate::postgres::{read_trail, verify_signed_trail, verify_trail};
    use toolgate::terminal::escaped;

    use super::{
        BROKEN, CHECKPOINTS_TAMPERED, CUT_BEFORE_CHECKPOINT, INTACT, IO_ERROR, REWRITTEN,
        SIGNED_BY_NOTHING, TOO_LONG, TORN, signed_status, status,
    };
    use crate::{USAGE, print};

    pub(super) fn verify(
        url: &str,
        schema: &str,
        expect_last: bool,
        public_key: Option<&std::path::Path>,
    ) -> u8 {
        if expect_last {
            eprintln!(
                "toolgate: --expect-last names one chain's end; a PostgreSQL trail has one chain per \
                 writer: sign checkpoints and give --public-key"
            );
            return USAGE;
        }
        let key = match public_key.map(PublicKey::read_pem_file).transpose() {
            Ok(key) => key,
            Err(e) => {
                eprintln!("toolgate: cannot read the public key: {e}");
                return IO_ERROR;
            }
        };
        let verified = match &key {
            Some(key) => verify_signed_trail(url, schema, key),
            None => verify_trail(url, schema),
        };
        let report = match verified {
            Ok(report) => report,
            Err(error) => {
                eprintln!(
                    "toolgate: cannot read the audit trail: {}",
                    escaped(&error.to_string())
                );
                return IO_ERROR;
            }
        };
        print(&report.to_string());
        resets(url, schema);
        // The most serious finding of any writer, in the order of the exit status list.
        let codes: Vec<u8> = report
            .writers
            .iter()
            .map(|writer| {
                let chain = if writer.chain.broken.is_some() || writer.columns_differ.is_some() {
                    BROKEN
                } else {
                    status(&writer.chain)
                };
                match &writer.checkpoints {
                    Some(signed) => signed_status(signed, chain),
                    None => chain,
                }
            })
            .collect();
        [
            CHECKPOINTS_TAMPERED,
            BROKEN,
            TOO_LONG,
            REWRITTEN,
            CUT_BEFORE_CHECKPOINT,
            SIGNED_BY_NOTHING,
            TORN,
        ]
        .into_iter()
        .find(|code| codes.contains(code))
        .unwrap_or(INTACT)
    }

    /// Names the operators' resets of budgets, which are recorded beside the writers' chains, not in
    /// them. A role that may not read them (or a schema from before them) is told nothing more.
    fn resets(url: &str, schema: &str) {
        if let Ok((count, Some(last))) = toolgate::postgres::budgets::last_reset(url, schema) {
            print(&format!(
                "\nbudgets reset by operators: {count}, recorded beside the writers' chains (table \
                 budget_resets); the last, reset {}, by {} at {}: {}\n(`toolgate budgets history` \
                 lists them)\n",
                last.id,
                escaped(&last.by),
                last.at,
                escaped(&last.reason)
            ));
        }
    }

    pub(super) fn promotion(url: &str, schema: &str) -> u8 {
        let verified = match verify_trail(url, schema) {
            Ok(report) => report,
            Err(error) => {
                eprintln!(
                    "toolgate: cannot read the audit trail: {}",
                    escaped(&error.to_string())
                );
                return IO_ERROR;
            }
        };
        let records = match read_trail(url, schema) {
            Ok(records) => records,
            Err(error) => {
                eprintln!(
                    "toolgate: cannot read the audit trail: {}",
                    escaped(&error.to_string())
                );
                return IO_ERROR;
            }
        };
        print(&toolgate::audit::PromotionReport::from_records(records).to_markdown());
        if verified.is_intact() {
            INTACT
        } else {
            eprintln!(
                "toolgate: warning: the audit trail is not intact; the report may not show what \
                 happened:\n{verified}"
            );
            BROKEN
        }
    }
}

#[cfg(not(feature = "postgres"))]
mod trail {
    use crate::USAGE;

    pub(super) fn verify(
        _url: &str,
        _schema: &str,
        _expect_last: bool,
        _public_key: Option<&std::path::Path>,
    ) -> u8 {
        unsupported()
    }

    pub(super) fn promotion(_url: &str, _schema: &str) -> u8 {
        unsupported()
    }

    fn unsupported() -> u8 {
        eprintln!("toolgate: this toolgate was built without the `postgres` feature");
        USAGE
    }
}

fn verify(file: &Path, expect_last: Option<&str>) -> u8 {
    let report = match verify_file(file) {
        Ok(report) => report,
        Err(e) => return io_error(file, &e),
    };
    let code = print_verified(&report, expect_last);
    let sidecar = checkpoints_path(file);
    if sidecar.is_file() {
        print(&format!(
            "note: {} holds signed checkpoints of this log, not checked: give --public-key PUB to \
             check them\n",
            sidecar.display()
        ));
    }
    code
}

/// Prints the chain's report, or the cut the expected last hash shows; returns the status.
///
/// The expected hash is looked for at the last complete record, whatever follows it: bytes appended
/// without a newline to a log cut short would otherwise hide the cut behind a torn tail.
fn print_verified(report: &VerifyReport, expect_last: Option<&str>) -> u8 {
    let ends_at =
        |hash: &str| report.records > 0 && report.last_hash.eq_ignore_ascii_case(hash.trim());
    match expect_last {
        Some(hash) if report.broken.is_none() && !ends_at(hash) => {
            let chain = if report.torn_tail.is_some() {
                "the chain is intact up to a torn last line, but its last complete record has hash"
            } else {
                "the chain is intact but ends at hash"
            };
            print(&format!(
                "CUT: {chain} {}, not at the expected {}: records were removed from its end\n{report}",
                report.last_hash, hash
            ));
            CUT
        }
        _ => {
            print(&report.to_string());
            status(report)
        }
    }
}

fn verify_signed(
    file: &Path,
    checkpoints: &Path,
    public_key: &Path,
    expect_last: Option<&str>,
) -> u8 {
    let key = match PublicKey::read_pem_file(public_key) {
        Ok(key) => key,
        Err(e) => {
            eprintln!("toolgate: cannot read the public key: {e}");
            return IO_ERROR;
        }
    };
    let (report, signed) = match verify_signed_file(file, checkpoints, &key) {
        Ok(reports) => reports,
        Err(e) => return io_error(file, &e),
    };
    let chain = print_verified(&report, expect_last);
    print(&signed.to_string());
    if !report.is_intact() {
        print(&format!(
            "the checkpoints were checked against the {} records that verify\n",
            report.records
        ));
    }
    signed_status(&signed, chain)
}

/// The status of a log checked against its checkpoints, from its chain's `chain` status: see
/// `VERIFY_EXIT_STATUS` for the order.
fn signed_status(signed: &CheckpointReport, chain: u8) -> u8 {
    if signed.checkpoints_tampered() {
        CHECKPOINTS_TAMPERED
    } else if chain == BROKEN || chain == TOO_LONG {
        chain
    } else if signed.log_rewritten() {
        REWRITTEN
    } else if signed.log_cut_short() {
        CUT_BEFORE_CHECKPOINT
    } else if chain == CUT {
        CUT
    } else if signed.signed_by_nothing() {
        SIGNED_BY_NOTHING
    } else if chain == INTACT && signed.torn_tail {
        TORN
    } else {
        chain
    }
}

fn keygen(out: &Path) -> u8 {
    let public_path = public_key_path(out);
    for path in [out, public_path.as_path()] {
        // A link, even a dangling one, counts: nothing is written through it.
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            let what = if meta.file_type().is_symlink() {
                "is a symbolic link"
            } else {
                "exists already"
            };
            eprintln!("toolgate: {} {what}; not overwritten", path.display());
            return IO_ERROR;
        }
    }
    let written = SigningKey::generate().and_then(|key| {
        key.write_pem_file(out)?;
        let public = key.public_key();
        public.write_pem_file(&public_path).map(|()| public)
    });
    match written {
        Ok(public) => {
            print(&format!(
                "private key: {} (keep it secret, readable by the writer only)\npublic key: {} ({})\n",
                out.display(),
                public_path.display(),
                public.to_hex()
            ));
            INTACT
        }
        Err(e) => {
            eprintln!("toolgate: cannot write the key: {e}");
            IO_ERROR
        }
    }
}

/// `KEY.pub` beside `KEY`.
fn public_key_path(key: &Path) -> PathBuf {
    let mut name = key.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
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
        (Some(broken), _) if broken.reason == BreakReason::TooLong => TOO_LONG,
        (Some(_), _) => BROKEN,
        (None, Some(_)) => TORN,
        (None, None) => INTACT,
    }
}

fn io_error(file: &Path, e: &io::Error) -> u8 {
    eprintln!("toolgate: cannot read {}: {e}", file.display());
    IO_ERROR
}
