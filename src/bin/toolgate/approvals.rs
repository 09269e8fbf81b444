//! `toolgate approvals`: two-step approval requests kept in PostgreSQL, listed, shown and answered by
//! id.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use clap::{Args, Subcommand};
use toolgate::approval::store::{Answer, ApproveError, StoreError};
use toolgate::postgres::{PostgresStore, RequestState, StoredRequest};

use toolgate::terminal::escaped;

use super::{Database, age, print};

const DONE: u8 = 0;
const REFUSED: u8 = 1;
const UNAVAILABLE: u8 = 3;
const USAGE: u8 = super::USAGE;

pub(super) const APPROVALS_EXIT_STATUS: &str = "\
The store is the PostgreSQL database that the gates' `PostgresStore` connects to: --store URL, or the
environment variable TOOLGATE_STORE.

Exit status:
  0   done
  1   no such request, or it cannot be answered: expired, answered already, or its answer used; or
      an irreversible request approved without its target typed back exactly (--confirm), or for the
      session (--for-session): it still waits
  3   the store could not be reached, failed, or did not answer in time
  64  the command line is invalid (no store, or no --by and no name for the operator)";

#[derive(Debug, Args)]
pub(super) struct Approvals {
    #[command(flatten)]
    database: Database,
    #[command(subcommand)]
    command: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Lists the requests waiting for an answer, oldest first.
    #[command(after_help = APPROVALS_EXIT_STATUS)]
    List,
    /// Shows one request: the tool's manifest, the mode, the risk, the arguments (redacted ones as
    /// "[REDACTED]"), the call's target, what its evidence probe read of it and how the call would
    /// be undone, and where it stands; for an irreversible request, how to approve it.
    #[command(after_help = APPROVALS_EXIT_STATUS)]
    Show {
        /// The request's id, as `list` shows it.
        id: i64,
    },
    /// Approves a request: the same call, with the same arguments, then runs once. An irreversible
    /// request is approved only with its target typed back (--confirm).
    #[command(after_help = APPROVALS_EXIT_STATUS)]
    Approve {
        /// The request's id, as `list` shows it.
        id: i64,
        /// Also grant the same call for the rest of the session of the gate that runs it (not for
        /// an irreversible request, whose calls ask every time).
        #[arg(long)]
        for_session: bool,
        /// The call's target, typed back exactly: approving an irreversible request takes it
        /// (`show` says what to type).
        #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
        confirm: Option<String>,
        /// Who approves, for the audit log [default: USER, then LOGNAME, then the name of the
        /// account the command runs as]
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Rejects a request, with a reason the agent reads when it makes the call again.
    #[command(after_help = APPROVALS_EXIT_STATUS)]
    Reject {
        /// The request's id, as `list` shows it.
        id: i64,
        /// Why, for the agent.
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// Also stop the agent: the gate that reads the rejection lowers itself to SHADOW.
        #[arg(long)]
        stop: bool,
        /// Who rejects, for the audit log [default: USER, then LOGNAME, then the name of the
        /// account the command runs as]
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
}

pub(super) fn run(approvals: Approvals) -> u8 {
    let Some(url) = approvals.database.store.filter(|url| !url.is_empty()) else {
        eprintln!("toolgate: which store? give --store URL or set TOOLGATE_STORE");
        return USAGE;
    };
    let answer = match &approvals.command {
        Action::List | Action::Show { .. } => None,
        Action::Approve {
            id,
            for_session,
            confirm,
            by,
        } => {
            let Some(by) = who(by) else { return USAGE };
            Some((
                *id,
                Answer::Approve {
                    by,
                    for_session: *for_session,
                    confirmation: confirm.clone(),
                },
            ))
        }
        Action::Reject {
            id,
            reason,
            stop,
            by,
        } => {
            let Some(by) = who(by) else { return USAGE };
            Some((
                *id,
                Answer::Reject {
                    by,
                    reason: reason.clone(),
                    stop: *stop,
                },
            ))
        }
    };
    let store = match PostgresStore::builder()
        .schema(&approvals.database.schema)
        .connect(&url)
    {
        Ok(store) => store,
        Err(e) => return unavailable(&e),
    };
    match (approvals.command, answer) {
        (Action::List, _) => match block_on(store.list()) {
            Ok(requests) => {
                print(&table(&requests));
                DONE
            }
            Err(e) => unavailable(&e),
        },
        (Action::Show { id }, _) => match block_on(store.show(id)) {
            Ok(Some(request)) => {
                print(&details(&request));
                DONE
            }
            Ok(None) => {
                eprintln!("toolgate: no request {id}");
                REFUSED
            }
            Err(e) => unavailable(&e),
        },
        (_, Some((id, answer))) => {
            let approved = matches!(answer, Answer::Approve { .. });
            // An irreversible call asks every time: no approval of one is for the session.
            if let Answer::Approve {
                for_session: true, ..
            } = answer
            {
                match block_on(store.show(id)) {
                    Ok(Some(request)) if request.irreversible => {
                        eprintln!(
                            "toolgate: request {id} was not approved: `{}` is irreversible, and \
                             its calls ask every time: approve this call alone, without \
                             --for-session; the request still waits",
                            escaped(&request.binding.tool)
                        );
                        return REFUSED;
                    }
                    Ok(_) => {}
                    Err(e) => return unavailable(&e),
                }
            }
            let typed = match &answer {
                Answer::Approve { confirmation, .. } => confirmation.clone(),
                _ => None,
            };
            match block_on(store.answer_id(id, answer)) {
                Ok(request) => {
                    let verb = if approved { "approved" } else { "rejected" };
                    let on = request
                        .target
                        .as_deref()
                        .map_or_else(String::new, |target| format!(" on `{}`", escaped(target)));
                    print(&format!(
                        "{verb} request {id}: {} ({}){on} with arguments {}\n",
                        escaped(&request.binding.tool),
                        request.binding.risk,
                        request
                            .arguments
                            .as_deref()
                            .map_or("(not shown)".into(), escaped)
                    ));
                    DONE
                }
                Err(ApproveError::Store(e)) => unavailable(&e),
                Err(ApproveError::UnknownToken) => {
                    eprintln!("toolgate: no request {id}");
                    REFUSED
                }
                Err(ApproveError::ConfirmationMismatch) => {
                    not_confirmed(&store, id, typed.as_deref())
                }
                Err(e) => {
                    eprintln!("toolgate: request {id} cannot be answered: {e}");
                    REFUSED
                }
            }
        }
        // Only `approve` and `reject` carry an answer.
        (_, None) => USAGE,
    }
}

/// An approval of an irreversible request that did not carry its target typed back (`typed`, as
/// given): says what to type. The request still waits.
fn not_confirmed(store: &PostgresStore, id: i64, typed: Option<&str>) -> u8 {
    let request = match block_on(store.show(id)) {
        Ok(Some(request)) => request,
        Ok(None) => {
            eprintln!("toolgate: no request {id}");
            return REFUSED;
        }
        Err(e) => return unavailable(&e),
    };
    let tool = escaped(&request.binding.tool);
    let what = match (typed, request.target.as_deref()) {
        (_, None) => format!(
            "`{tool}` is irreversible, and the request names no target to type back: it cannot \
             be approved"
        ),
        (None, Some(target)) => format!(
            "`{tool}` is irreversible, and is approved only with its target `{}` typed back \
             exactly: {}",
            escaped(target),
            how_to_approve(id, target)
        ),
        (Some(typed), Some(target)) => format!(
            "--confirm `{}` is not its target `{}`; type the target exactly: {}",
            escaped(typed),
            escaped(target),
            how_to_approve(id, target)
        ),
    };
    eprintln!("toolgate: request {id} was not approved: {what}; the request still waits");
    REFUSED
}

/// The command that approves the irreversible request `id` on `target`, for an operator to type.
fn how_to_approve(id: i64, target: &str) -> String {
    let shown = escaped(target);
    if shown != target {
        // What the target holds is shown escaped: the command line says where to look.
        return format!(
            "`toolgate approvals approve {id} --confirm TARGET`, TARGET the target as shown \
             escaped above (`\\\\` is one backslash, `\\u{{..}}` one character)"
        );
    }
    let safe = |c: char| c.is_alphanumeric() || "._-/:@+=".contains(c);
    let word = if target.chars().all(safe) {
        target.to_owned()
    } else {
        format!("'{}'", target.replace('\'', r"'\''"))
    };
    format!("`toolgate approvals approve {id} --confirm {word}`")
}

fn who(by: &Option<String>) -> Option<String> {
    let by = super::operator(by.clone());
    if by.is_none() {
        eprintln!(
            "toolgate: who answers? give --by NAME (USER and LOGNAME are not set, and the \
             account has no name)"
        );
    }
    by
}

fn unavailable(error: &StoreError) -> u8 {
    eprintln!(
        "toolgate: the approval store: {}",
        escaped(&error.to_string())
    );
    UNAVAILABLE
}

fn table(requests: &[StoredRequest]) -> String {
    if requests.is_empty() {
        return "no request waits for an answer\n".to_owned();
    }
    let rows: Vec<[String; 8]> = requests
        .iter()
        .map(|r| {
            [
                r.id.to_string(),
                age(r.age),
                if r.irreversible {
                    format!("{} (irreversible)", escaped(&r.binding.tool))
                } else {
                    escaped(&r.binding.tool).into_owned()
                },
                r.binding.risk.to_string(),
                r.mode.to_string(),
                r.agent
                    .as_deref()
                    .map_or_else(|| "-".into(), |t| escaped(t).into_owned()),
                r.principal
                    .as_deref()
                    .map_or_else(|| "-".into(), |t| escaped(t).into_owned()),
                r.arguments
                    .as_deref()
                    .map_or_else(|| "(not shown)".into(), |t| escaped(t).into_owned()),
            ]
        })
        .collect();
    let header = [
        "ID",
        "AGE",
        "TOOL",
        "RISK",
        "MODE",
        "AGENT",
        "PRINCIPAL",
        "ARGUMENTS",
    ];
    let mut out = crate::table(&header, &rows);
    if requests.iter().any(|r| r.irreversible) {
        out.push_str(
            "(irreversible): approved only with the call's target typed back, `approve ID \
             --confirm TARGET`; `show ID` shows the target\n",
        );
    }
    out
}

fn details(r: &StoredRequest) -> String {
    let state = match &r.state {
        RequestState::Pending if r.expired => "expired, never answered".to_owned(),
        RequestState::Pending => format!("pending, expires in {}", age(r.expires_in)),
        RequestState::Answered(answer) => format!("{}, not used yet", answered(answer)),
        RequestState::Used(answer) => format!("{}, used by its call", answered(answer)),
        _ => "unknown".to_owned(),
    };
    let manifest = r
        .manifest
        .as_deref()
        .map_or_else(|| "(none)".into(), |t| escaped(t).into_owned());
    let effects = effects(r);
    let approve = match (&r.state, r.expired, r.target.as_deref()) {
        (RequestState::Pending, false, Some(target)) if r.irreversible => format!(
            "approve   {} (its target, typed exactly; no --for-session)\n",
            how_to_approve(r.id, target)
        ),
        _ => String::new(),
    };
    format!(
        "request   {}\n\
         tool      {}\n\
         risk      {} (effective, policy version {})\n\
         mode      {}\n\
         agent     {}\n\
         principal {}\n\
         tainted   {}\n\
         arguments {}\n\
         {effects}\
         made      {} ({} ago)\n\
         state     {state}\n\
         {approve}\
         manifest  {manifest}\n",
        r.id,
        escaped(&r.binding.tool),
        r.binding.risk,
        r.binding.policy_version,
        r.mode,
        r.agent
            .as_deref()
            .map_or_else(|| "-".into(), |t| escaped(t).into_owned()),
        r.principal
            .as_deref()
            .map_or_else(|| "-".into(), |t| escaped(t).into_owned()),
        r.tainted.as_ref().map_or_else(
            || "no".into(),
            |(tool, at)| format!(
                "yes: `{}`, whose output is untrusted, ran at {}",
                escaped(tool),
                escaped(at)
            )
        ),
        r.arguments
            .as_deref()
            .map_or_else(|| "(not shown)".into(), |t| escaped(t).into_owned()),
        r.created_at,
        age(r.age),
    )
}

/// The lines of what a call with lasting effects shows: its target (and whether the call can be
/// undone), what its evidence probe read of the target, and how the call would be undone.
fn effects(r: &StoredRequest) -> String {
    let mut lines = String::new();
    match (r.target.as_deref(), r.irreversible) {
        (Some(target), true) => lines.push_str(&format!(
            "target    {} (irreversible: the call cannot be undone)\n",
            escaped(target)
        )),
        (Some(target), false) => lines.push_str(&format!("target    {}\n", escaped(target))),
        (None, true) => lines.push_str("target    (none: irreversible, and nothing to confirm)\n"),
        (None, false) => {}
    }
    if let Some(evidence) = r.evidence.as_deref() {
        lines.push_str(&format!(
            "evidence  {} (the target when the call was made: the approval is for this state)\n",
            escaped(evidence)
        ));
    }
    match (r.rollback_plan(), r.rollback.as_deref()) {
        (Some(plan), _) => {
            // A plan's Display escapes what the agent wrote into it already.
            lines.push_str(&format!("rollback  {plan}\n"));
        }
        (None, Some(json)) => lines.push_str(&format!("rollback  {}\n", escaped(json))),
        (None, None) => {}
    }
    lines
}

fn answered(answer: &Answer) -> String {
    match answer {
        Answer::Approve {
            by,
            for_session,
            confirmation,
        } => {
            let session = if *for_session { " for the session" } else { "" };
            let typed = confirmation.as_deref().map_or_else(String::new, |typed| {
                format!(" (confirmed `{}`)", escaped(typed))
            });
            format!("approved{session} by {}{typed}", escaped(by))
        }
        Answer::Reject {
            by,
            reason,
            stop: true,
        } => {
            let (by, reason) = (escaped(by), escaped(reason));
            format!("rejected by {by}, and the agent stopped: {reason}")
        }
        Answer::Reject { by, reason, .. } => {
            format!("rejected by {}: {}", escaped(by), escaped(reason))
        }
        _ => "answered".to_owned(),
    }
}

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Waits for one of the store's futures, which complete on the store's own thread.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::park();
    }
}
