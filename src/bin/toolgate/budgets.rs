//! `toolgate budgets`: the budgets the gates count in PostgreSQL, listed, reset, and their resets'
//! records listed.

use clap::{Args, Subcommand};
use toolgate::approval::store::StoreError;
use toolgate::postgres::budgets::{self, BudgetFilter, BudgetReset, ResetError, StoredBudget};
use toolgate::terminal::escaped;

use super::{Database, USAGE, age, print};

const DONE: u8 = 0;
const NO_MATCH: u8 = 1;
const REFUSED: u8 = 2;
const UNAVAILABLE: u8 = 3;

pub(super) const BUDGETS_EXIT_STATUS: &str = "\
The budgets are those the gates' `PostgresStore` counts: --store URL, or the environment variable
TOOLGATE_STORE. A budget is selected by the parts of its key: --agent (the gates' agent label),
--principal (the operator's policy table [principals.\"NAME\"]), --scope (tool:PATTERN, risk:LEVEL or
agent, as `list` shows it) or --key (one budget, its key as `list` shows it); given together, all
must hold.

A reset locks the selected budgets as a call's check does, deletes the calls their windows hold, and
records who reset what, when, why and how many calls it cleared, in one transaction (`history` lists
the records; `toolgate audit verify` of the trail names them). From the reset on, each budget counts
afresh: a window that spans a reset may hold N calls before it and N after.

Exit status:
  0   done (`list` and `history` also when nothing matches)
  1   no budget matches what `reset` selects: nothing was reset
  2   the database refused: the role lacks the operators' grants, or the schema is newer than this
      toolgate
  3   the store could not be reached, failed, or did not answer in time
  64  the command line is invalid (no store, `reset` that selects nothing without --all, no --reason,
      or no --by and no name for the operator)";

#[derive(Debug, Args)]
pub(super) struct BudgetsCommand {
    #[command(flatten)]
    database: Database,
    #[command(subcommand)]
    action: Action,
}

/// Which budgets: each part given narrows the selection.
#[derive(Debug, Args)]
struct Selection {
    /// The budgets of gates with this agent label.
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// The budgets of the operator's policy table for this principal ([principals."NAME"]).
    #[arg(long, value_name = "NAME")]
    principal: Option<String>,
    /// The budgets that count this: tool:PATTERN, risk:LEVEL or agent.
    #[arg(long, value_name = "SCOPE")]
    scope: Option<String>,
    /// One budget, by its key as `list` shows it (or as `list --json` prints it).
    #[arg(long, value_name = "KEY", allow_hyphen_values = true)]
    key: Option<String>,
}

impl Selection {
    fn filter(self) -> BudgetFilter {
        let mut filter = BudgetFilter::default();
        filter.agent = self.agent;
        filter.principal = self.principal;
        filter.scope = self.scope;
        filter.key = self.key;
        filter
    }
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Lists the budgets and how many calls each one's window holds now, in the order of their keys.
    #[command(after_help = BUDGETS_EXIT_STATUS)]
    List {
        #[command(flatten)]
        selection: Selection,
        /// Prints a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Resets the selected budgets: the calls their windows hold are cleared, and the reset recorded.
    #[command(after_help = BUDGETS_EXIT_STATUS)]
    Reset {
        #[command(flatten)]
        selection: Selection,
        /// Every budget (and no selection).
        #[arg(long, conflicts_with_all = ["agent", "principal", "scope", "key"])]
        all: bool,
        /// Who resets, for the record [default: USER, then LOGNAME, then the name of the account the
        /// command runs as]
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
        /// Why, for the record.
        #[arg(long, value_name = "TEXT")]
        reason: String,
    },
    /// Lists the recorded resets of the selected budgets, newest first: who, when, why, what.
    #[command(after_help = BUDGETS_EXIT_STATUS)]
    History {
        #[command(flatten)]
        selection: Selection,
        /// At most this many.
        #[arg(long, value_name = "N", default_value_t = 20)]
        limit: usize,
        /// Prints a JSON array instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn run(command: BudgetsCommand) -> u8 {
    let Some(url) = command.database.store.filter(|url| !url.is_empty()) else {
        eprintln!("toolgate: which store? give --store URL or set TOOLGATE_STORE");
        return USAGE;
    };
    let schema = &command.database.schema;
    match command.action {
        Action::List { selection, json } => {
            match budgets::list(&url, schema, &selection.filter()) {
                Ok(list) if json => print(&format!("{}\n", budgets::json_list(&list))),
                Ok(list) => print(&table(&list)),
                Err(error) => return failed(&error),
            }
            DONE
        }
        Action::History {
            selection,
            limit,
            json,
        } => match budgets::resets(&url, schema, &selection.filter(), limit) {
            Ok(history) if json => {
                print(&format!("{}\n", budgets::json_resets(&history.records)));
                DONE
            }
            Ok(history) => {
                if history.records.is_empty() {
                    print("no reset recorded\n");
                }
                for record in &history.records {
                    print(&record_text(record));
                }
                if history.total > history.records.len() as u64 {
                    print(&format!(
                        "({} older: --limit N shows more)\n",
                        history.total - history.records.len() as u64
                    ));
                }
                DONE
            }
            Err(error) => failed(&error),
        },
        Action::Reset {
            selection,
            all,
            by,
            reason,
        } => {
            let mut filter = selection.filter();
            filter.all = all;
            if !filter.is_narrowed() && !filter.all {
                eprintln!(
                    "toolgate: which budgets? select them with --agent, --principal, --scope or \
                     --key (`toolgate budgets list` shows them), or give --all to reset every budget"
                );
                return USAGE;
            }
            if reason.trim().is_empty() {
                eprintln!("toolgate: why? give --reason TEXT, for the record");
                return USAGE;
            }
            let Some(by) = super::operator(by) else {
                eprintln!(
                    "toolgate: who resets the budgets? give --by NAME (USER and LOGNAME are not set, \
                     and the account has no name)"
                );
                return USAGE;
            };
            match budgets::reset(&url, schema, &filter, &by, &reason) {
                Ok(record) => {
                    print(&format!(
                        "reset {} budget(s) selected by {}, {} call(s) cleared, by {}: {}\n",
                        record.budgets.len(),
                        selected_text(&filter),
                        record.cleared(),
                        escaped(&record.by),
                        escaped(&record.reason)
                    ));
                    print(&cleared(&record));
                    print(&format!(
                        "recorded as reset {} (`toolgate budgets history` lists it)\n",
                        record.id
                    ));
                    DONE
                }
                Err(ResetError::NoMatch(_)) => {
                    eprintln!(
                        "toolgate: no budget matches {}: nothing was reset (`toolgate budgets \
                         list` shows them)",
                        selected_text(&filter)
                    );
                    NO_MATCH
                }
                Err(ResetError::Store(error)) => failed(&error),
                Err(error) => {
                    eprintln!("toolgate: {}", escaped(&error.to_string()));
                    USAGE
                }
            }
        }
    }
}

/// The selection as it was given, each value escaped: `--agent `mailer` --scope `agent``, `--all`.
fn selected_text(filter: &BudgetFilter) -> String {
    let parts = [
        ("key", &filter.key),
        ("agent", &filter.agent),
        ("principal", &filter.principal),
        ("scope", &filter.scope),
    ];
    let given: Vec<String> = parts
        .iter()
        .filter_map(|(name, value)| {
            value
                .as_deref()
                .map(|value| format!("--{name} `{}`", escaped(value)))
        })
        .collect();
    if given.is_empty() {
        "--all".to_owned()
    } else {
        given.join(" ")
    }
}

fn failed(error: &StoreError) -> u8 {
    eprintln!("toolgate: the budgets: {}", escaped(&error.to_string()));
    match error {
        StoreError::Unexpected(_) => REFUSED,
        _ => UNAVAILABLE,
    }
}

fn table(list: &[StoredBudget]) -> String {
    if list.is_empty() {
        return "no budget\n".to_owned();
    }
    let rows: Vec<[String; 7]> = list
        .iter()
        .map(|budget| match &budget.parts {
            Some(parts) => [
                match parts.agent.as_str() {
                    "" => "-".to_owned(),
                    agent => escaped(agent).into_owned(),
                },
                escaped(&parts.scope).into_owned(),
                format!("{}/{}", budget.calls, parts.limit),
                parts.window_text(),
                budget
                    .frees_in
                    .map_or_else(|| "-".to_owned(), |d| format!("in {}", age(d))),
                parts
                    .policy
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), |p| escaped(p).into_owned()),
                escaped(&budget.key).into_owned(),
            ],
            // A key no gate makes: its calls are every use kept.
            None => [
                "?".to_owned(),
                "?".to_owned(),
                budget.calls.to_string(),
                "?".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                escaped(&budget.key).into_owned(),
            ],
        })
        .collect();
    let header = [
        "AGENT", "SCOPE", "CALLS", "WINDOW", "FREES", "POLICY", "KEY",
    ];
    crate::table(&header, &rows)
}

/// The budgets a reset cleared, a line each.
fn cleared(record: &BudgetReset) -> String {
    let mut out = String::new();
    for (key, calls) in &record.budgets {
        let what = match budgets::BudgetKey::parse(key) {
            Some(parts) => {
                let agent = match parts.agent.as_str() {
                    "" => "gates without an agent label".to_owned(),
                    agent => format!("agent {}", escaped(agent)),
                };
                let policy = parts.policy.as_deref().map_or_else(String::new, |p| {
                    format!(", the operator's policy {}", escaped(p))
                });
                format!(
                    "{} calls of {} per {} for {agent}{policy}",
                    parts.limit,
                    escaped(&parts.scope),
                    parts.window_text()
                )
            }
            None => format!("the key {}", escaped(key)),
        };
        out.push_str(&format!("  {calls} call(s) cleared: {what}\n"));
    }
    out
}

fn record_text(record: &BudgetReset) -> String {
    format!(
        "reset {} at {} ({} ago) by {} (role {}): {}\n  selected {}\n{}",
        record.id,
        record.at,
        age(record.age),
        escaped(&record.by),
        escaped(&record.role),
        escaped(&record.reason),
        escaped(&record.selected),
        cleared(record)
    )
}
