//! `clap` integration: [`Format`] as a [`ValueEnum`] (and, through the policy crate, [`Mode`]
//! and [`Risk`](crate::Risk)), the [`ModeArg`] argument and the [`ListTools`] flag.
//!
//! ```
//! # extern crate toolgate_runtime as toolgate;
//! # extern crate clap;
//! use clap::Parser;
//! use toolgate::Mode;
//! use toolgate::cli::ListTools;
//!
//! #[derive(Parser)]
//! struct Args {
//!     /// The agent's mode.
//!     #[arg(long, value_enum, default_value_t = Mode::Shadow)]
//!     mode: Mode,
//!     #[command(flatten)]
//!     list_tools: ListTools,
//! }
//!
//! let args = Args::parse_from(["app", "--mode", "partial-auto"]);
//! assert_eq!(args.mode, Mode::PartialAuto);
//! assert!(!args.list_tools.run()); // `--list-tools` was not given: nothing printed
//! ```

use std::io;

use clap::ValueEnum;
use clap::builder::PossibleValue;

use crate::report::{self, Format};
use toolgate_policy::{MODE_ENV_VAR, Mode};

/// A `--mode` argument, read from `TOOLGATE_MODE` when not given, `SHADOW` when neither is: flatten it
/// into an application's arguments. A value that is not a mode, from either, is a usage error, never a
/// silent default. It is `global`, so it may follow a subcommand.
///
/// ```
/// # extern crate toolgate_runtime as toolgate;
/// # extern crate clap;
/// use clap::Parser;
/// use toolgate::Mode;
/// use toolgate::cli::ModeArg;
///
/// #[derive(Parser)]
/// struct Args {
///     #[command(flatten)]
///     mode: ModeArg,
/// }
///
/// let args = Args::try_parse_from(["app", "--mode", "full-auto"]).unwrap();
/// assert_eq!(args.mode.mode, Mode::FullAuto);
/// assert!(Args::try_parse_from(["app", "--mode", "yolo"]).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct ModeArg {
    /// The agent's mode: SHADOW, ADVISORY, PARTIAL_AUTO or FULL_AUTO
    #[arg(
        id = "toolgate_mode",
        long = "mode",
        value_enum,
        env = MODE_ENV_VAR,
        default_value_t = Mode::Shadow,
        global = true
    )]
    pub mode: Mode,
}

impl ValueEnum for Format {
    fn value_variants<'a>() -> &'a [Self] {
        &Format::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Format::Json => PossibleValue::new("json").help("a JSON array of manifests"),
            Format::Markdown => PossibleValue::new("md")
                .alias("markdown")
                .help("a Markdown table"),
            Format::Csv => PossibleValue::new("csv").help("CSV with a header row"),
        })
    }
}

/// A `--list-tools [json|md|csv]` flag: flatten it into an application's arguments and call
/// [`run`](ListTools::run) first thing.
///
/// ```ignore
/// if args.list_tools.run() {
///     return Ok(());
/// }
/// ```
///
/// Given without a value, the format is `md`. Since the value is optional, write `--list-tools=csv`
/// where a positional argument follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::Args)]
pub struct ListTools {
    /// Print the manifests of this program's tools (json, md or csv; md if no format is given) and exit
    #[arg(
        id = "list_tools",
        long = "list-tools",
        value_name = "FORMAT",
        value_enum,
        num_args = 0..=1,
        default_missing_value = "md"
    )]
    pub format: Option<Format>,
}

impl ListTools {
    /// If the flag was given, prints the report of every linked tool to standard output and returns
    /// `true`; else does nothing and returns `false`.
    ///
    /// A closed pipe (`app --list-tools | head`) ends the output quietly; any other write error panics,
    /// as `println!` does.
    pub fn run(&self) -> bool {
        match self.try_run() {
            Ok(given) => given,
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => true,
            Err(error) => panic!("failed printing the tool list to stdout: {error}"),
        }
    }

    /// [`run`](ListTools::run), returning a write error instead of panicking.
    pub fn try_run(&self) -> io::Result<bool> {
        match self.format {
            Some(format) => report::print(format).map(|()| true),
            None => Ok(false),
        }
    }
}

/// `policy check FILE`, `policy explain FILE ...`, `policy diff OLD NEW`, `policy test FILE --cases
/// CASES` and `policy replay FILE --log LOG`: the operator's policy file, checked against this
/// program's tools, tested against cases, and replayed over what a log recorded. Add it as a subcommand of an application (the tools
/// live in its binary) and call [`run`](PolicyCommand::run).
///
/// ```
/// # extern crate toolgate_runtime as toolgate;
/// # extern crate clap;
/// use clap::Parser;
/// use toolgate::cli::PolicyCommand;
///
/// #[derive(Parser)]
/// enum Command {
///     /// Check or explain an operator's policy file.
///     #[command(subcommand)]
///     Policy(PolicyCommand),
/// }
///
/// let Command::Policy(command) = Command::parse_from(["app", "policy", "check", "ops.toml"]);
/// assert!(matches!(command, PolicyCommand::Check { .. }));
/// // std::process::exit(command.run());
/// ```
#[cfg(feature = "policy-file")]
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum PolicyCommand {
    /// Check a policy file against this program's tools; exit 0 if it checks, 2 with every error
    /// (file:line:column) if not
    Check {
        /// The policy file (TOML)
        file: std::path::PathBuf,
    },
    /// Print how a gate following FILE decides one call, and the rule that decides it
    Explain {
        /// The policy file (TOML)
        file: std::path::PathBuf,
        /// The principal the gate is built for
        #[arg(long)]
        principal: Option<String>,
        /// The agent label the gate is built with
        #[arg(long)]
        agent: Option<String>,
        /// The gate's mode before the policy's ceiling
        #[arg(long, value_enum, default_value_t = Mode::FullAuto)]
        mode: Mode,
        /// The tool's id
        #[arg(long)]
        tool: String,
        /// The call's arguments, a JSON object
        #[arg(long, default_value = "{}")]
        args: String,
    },
    /// Print what NEW changes relative to OLD; exit 0 if nothing widens, 1 if something does, 2 if a
    /// file does not check
    Diff {
        /// The policy in force
        old: std::path::PathBuf,
        /// The policy to apply
        new: std::path::PathBuf,
    },
    /// Decide each case of CASES under FILE and compare with the decision it expects; exit 0 if
    /// every case passes, 1 if one fails (printed with the rule that decided it), 2 if a file does
    /// not check
    Test {
        /// The policy file (TOML)
        file: std::path::PathBuf,
        /// The cases (TOML: `[[case]]` tables with `tool`, `expect` and the call's gate and
        /// arguments)
        #[arg(long)]
        cases: std::path::PathBuf,
    },
    /// Decide the calls a JSONL audit log (or a PostgreSQL trail) recorded again under FILE, beside
    /// the policy in force when each was recorded, and print those whose decision flips; exit 0 if
    /// none flips, 1 if one does, 2 if a file does not check or the log cannot be read, 3 if the log
    /// or a writer's chain does not verify (what verifies is still replayed and printed) or the
    /// trail cannot be read
    Replay(Box<ReplayArgs>),
    /// Turn on the rule logged only written at PLACE of FILE (FILE:LINE:COLUMN or LINE:COLUMN, as a
    /// record's `rule_in_shadow` and the console name it): it leaves its shadow table for the
    /// enforced table of the same scope, the rest of the file as written; exit 0 once written, 2 if
    /// the file does not check, the place names no rule logged only, or the file cannot be written
    Promote {
        /// The policy file (TOML)
        file: std::path::PathBuf,
        /// The rule's place
        place: String,
        /// Print the new file instead of writing it
        #[arg(long)]
        dry_run: bool,
    },
}

/// The arguments of `policy replay` ([`PolicyCommand::Replay`]).
#[cfg(feature = "policy-file")]
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ReplayArgs {
    /// The candidate policy file (TOML)
    pub file: std::path::PathBuf,
    /// The JSONL audit log
    #[arg(long, required_unless_present = "store", conflicts_with = "store")]
    pub log: Option<std::path::PathBuf>,
    /// The PostgreSQL database whose audit trail to replay (every writer's), instead of a log
    #[cfg(feature = "postgres")]
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// The trail's schema
    #[cfg(feature = "postgres")]
    #[arg(long, default_value = crate::postgres::DEFAULT_SCHEMA, requires = "store")]
    pub schema: String,
    /// A policy file that was in force while the log was written (found by the records'
    /// policy digest); repeat it for each
    #[arg(long = "in-force", value_name = "FILE")]
    pub in_force: Vec<std::path::PathBuf>,
    /// Only calls recorded at or after this UTC date or time (2026-11-22, 2026-11-22T03:00:00Z)
    #[arg(long)]
    pub since: Option<String>,
    /// Only calls recorded before this UTC date or time
    #[arg(long)]
    pub until: Option<String>,
    /// Only calls of gates of this principal (compared as the name reads)
    #[arg(long)]
    pub principal: Option<String>,
    /// Only calls of gates of this agent label (compared as it reads)
    #[arg(long)]
    pub agent: Option<String>,
    /// Only calls of this tool id
    #[arg(long)]
    pub tool: Option<String>,
    /// Only calls recorded with this decision: allowed, approved, granted or refused
    #[arg(long)]
    pub decision: Option<String>,
    /// Print the report as JSON instead of a table (every character that could hide or reorder
    /// text written as its `\uXXXX` escape)
    #[arg(long)]
    pub json: bool,
}

#[cfg(feature = "policy-file")]
impl PolicyCommand {
    /// Runs the command, printing to standard output (errors to standard error), and returns the
    /// process's exit code.
    pub fn run(&self) -> i32 {
        use crate::policy_file::PolicyFile;
        let load = |path: &std::path::Path| {
            PolicyFile::load(path).map_err(|errors| {
                eprintln!("{errors}");
                2
            })
        };
        let outcome = match self {
            PolicyCommand::Check { file } => load(file).map(|policy| {
                println!("{}: checks (policy {})", policy.name(), policy.digest());
                0
            }),
            PolicyCommand::Explain {
                file,
                principal,
                agent,
                mode,
                tool,
                args,
            } => load(file).and_then(|policy| {
                let arguments: serde_json::Value = serde_json::from_str(args).map_err(|e| {
                    eprintln!("--args is not JSON: {e}");
                    2
                })?;
                match policy.explain(
                    principal.as_deref(),
                    agent.as_deref(),
                    *mode,
                    tool,
                    &arguments,
                ) {
                    Ok(explanation) => {
                        print!("{explanation}");
                        Ok(0)
                    }
                    Err(why) => {
                        eprintln!("{why}");
                        Err(2)
                    }
                }
            }),
            PolicyCommand::Diff { old, new } => load(old).and_then(|old| {
                let new = load(new)?;
                let diff = old.diff(&new);
                print!("{diff}");
                Ok(i32::from(diff.widens()))
            }),
            PolicyCommand::Promote {
                file,
                place,
                dry_run,
            } => promote(file, place, *dry_run),
            PolicyCommand::Test { file, cases } => load(file).and_then(|policy| {
                let cases = crate::policy_file::PolicyCases::load(cases).map_err(|errors| {
                    eprintln!("{errors}");
                    2
                })?;
                let results = cases.run(&policy);
                let failed = results.iter().filter(|r| !r.passed()).count();
                for result in &results {
                    println!("{result}");
                }
                println!(
                    "{} cases: {} passed, {failed} failed (policy {})",
                    results.len(),
                    results.len() - failed,
                    policy.digest()
                );
                Ok(i32::from(failed > 0))
            }),
            PolicyCommand::Replay(replay) => {
                let ReplayArgs {
                    file,
                    log,
                    #[cfg(feature = "postgres")]
                    store,
                    #[cfg(feature = "postgres")]
                    schema,
                    in_force,
                    since,
                    until,
                    principal,
                    agent,
                    tool,
                    decision,
                    json,
                } = &**replay;
                load(file).and_then(|candidate| {
                    let in_force = in_force
                        .iter()
                        .map(|path| load(path))
                        .collect::<Result<Vec<_>, _>>()?;
                    let filter = replay_filter(since, until, principal, agent, tool, decision)
                        .map_err(|why| {
                            eprintln!("{why}");
                            2
                        })?;
                    #[cfg(feature = "postgres")]
                    let report = match store {
                        Some(url) => crate::postgres::replay_trail(
                            url, schema, &candidate, &in_force, &filter,
                        )
                        .map_err(|e| {
                            eprintln!("the trail cannot be read: {e}");
                            3
                        })?,
                        None => replay_log(&candidate, &in_force, &filter, log.as_deref())?,
                    };
                    #[cfg(not(feature = "postgres"))]
                    let report = replay_log(&candidate, &in_force, &filter, log.as_deref())?;
                    if *json {
                        println!("{}", report.to_json());
                    } else {
                        print!("{report}");
                    }
                    Ok(if report.is_broken() {
                        3
                    } else {
                        i32::from(report.flips_any())
                    })
                })
            }
        };
        outcome.unwrap_or_else(|code| code)
    }
}

/// The filter of `policy replay`, its times and decision checked.
#[cfg(feature = "policy-file")]
fn replay_filter(
    since: &Option<String>,
    until: &Option<String>,
    principal: &Option<String>,
    agent: &Option<String>,
    tool: &Option<String>,
    decision: &Option<String>,
) -> Result<crate::policy_file::ReplayFilter, String> {
    use crate::audit::Decision;
    use crate::policy_file::ReplayFilter;
    for time in [since, until].into_iter().flatten() {
        ReplayFilter::check_time(time)?;
    }
    let decision = match decision.as_deref() {
        None => None,
        Some("allowed") => Some(Decision::Allowed),
        Some("approved") => Some(Decision::Approved),
        Some("granted") => Some(Decision::Granted),
        Some("refused") => Some(Decision::Refused),
        Some(other) => {
            return Err(format!(
                "--decision `{}` is none of allowed, approved, granted, refused",
                crate::terminal::escaped(other)
            ));
        }
    };
    Ok(ReplayFilter {
        since: since.clone(),
        until: until.clone(),
        principal: principal.clone(),
        agent: agent.clone(),
        tool: tool.clone(),
        decision,
    })
}

/// `policy replay` over a log file.
#[cfg(feature = "policy-file")]
fn replay_log(
    candidate: &crate::policy_file::PolicyFile,
    in_force: &[crate::policy_file::PolicyFile],
    filter: &crate::policy_file::ReplayFilter,
    log: Option<&std::path::Path>,
) -> Result<crate::policy_file::ReplayReport, i32> {
    let Some(log) = log else {
        eprintln!("which log? give --log FILE");
        return Err(2);
    };
    std::fs::File::open(log)
        .and_then(|file| candidate.replay(in_force, filter, file))
        .map_err(|e| {
            eprintln!("{}: cannot read the log: {e}", log.display());
            2
        })
}

/// `policy promote`: the rule at `place` turned on, the file written again (or printed).
#[cfg(feature = "policy-file")]
fn promote(file: &std::path::Path, place: &str, dry_run: bool) -> Result<i32, i32> {
    let name = file.display().to_string();
    let text = crate::policy_file::read_limited(file).map_err(|why| {
        eprintln!("{name}: {why}");
        2
    })?;
    let promoted =
        crate::policy_file::PolicyFile::promote(&name, &text, place).map_err(|error| {
            eprintln!("{error}");
            2
        })?;
    if dry_run {
        print!("{}", promoted.text);
        return Ok(0);
    }
    crate::files::replace(file, promoted.text.as_bytes()).map_err(|e| {
        eprintln!("{name}: cannot write it: {e}");
        2
    })?;
    println!("turned on: {}, now in {}", promoted.rule, promoted.to);
    print!("{}", promoted.diff);
    println!("{name}: checks (policy {})", promoted.file.digest());
    Ok(0)
}
