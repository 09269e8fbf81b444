//! An operator's policy file: TOML that narrows what the code declares, checked against the linked
//! tools, followed live by the gates built with it.
//!
//! ```toml
//! format = 1
//!
//! [defaults]
//! ceiling = "PARTIAL_AUTO"          # no gate runs above this mode
//! deny = ["infra.*"]                # tool ids or globs, refused in every mode
//! ask = ["payments.refund"]         # asks for an approval even where the code would allow it
//! ask_at = "LOW_WRITE"              # every call at this risk or above asks
//! out_of_band = ["payments.*"]      # approved by an operator only, never by an MCP client's form
//! out_of_band_at = "HIGH_WRITE"     # so is every call judged at this risk or above
//! taint = "refuse"                  # once tainted, a session refuses writes instead of asking
//!
//! [[defaults.arguments]]
//! tool = "ops.run_shell"
//! parameter = "host"
//! refuse = ["prod-*", "*.prod.*"]   # refused when the text matches a glob
//!
//! [[defaults.arguments]]
//! tool = "payments.refund"
//! parameter = "amount"
//! max = 50                          # refused outside min..=max; `one_of = [..]` lists allowed values
//!
//! [principals.alice]
//! ceiling = "ADVISORY"
//!
//! [[principals.alice.budgets]]
//! tool = "payments.refund"          # at most 50 calls an hour (or `risk = ..`, `agent = true`)
//! calls = 50
//! per = "1h"
//!
//! [shadow.defaults]                # rules logged only: recorded where stricter, never enforced
//! deny = ["payments.*"]
//!
//! [agents."triage-bot"]
//! deny = ["users.delete_user"]
//! deny_resources = ["cloud://inventory*"]  # an MCP server's resources, by URI glob
//! deny_prompts = ["incident-*"]            # and prompts, by name; `record_resources`,
//! record_prompts = ["triage"]              # `record_prompts` write each read to the log first
//! ```
//!
//! A gate follows `[defaults]`, its principal's table and its agent's table together: every rule of
//! each applies, and the lowest ceiling, `ask_at` and `out_of_band_at` win. **Nothing in a file can allow**: there is no key that
//! permits, raises a mode, lifts a deny rule or answers an approval, so a file only ever takes away
//! from what the code's manifests and the gate allow.
//!
//! A file is checked when it is read ([`PolicyFile::parse`]): a key, a mode or a risk that does not
//! exist, a pattern that matches no linked tool, a parameter the tool does not have, a rule whose
//! type is not the parameter's, a rule that another makes dead, a resource or prompt pattern that is
//! empty or holds what a reader cannot see: each is an error with its line and column, and a file with
//! one is not used. [`LivePolicy`] hands a file to gates and replaces it
//! while they run.

mod cases;
mod check;
mod diff;
mod explain;
mod file;
mod live;
mod lock;
mod model;
mod promote;
mod replay;
mod toml_doc;

pub use cases::{CaseResult, Expected, PolicyCase, PolicyCases};
pub use check::ToolDeclaration;
pub use diff::{Change, Diff, Direction};
pub use explain::Explanation;
#[cfg(feature = "clap")]
pub(crate) use file::read_limited;
pub use file::{MAX_POLICY_BYTES, PolicyFile};
pub use live::{LivePolicy, PolicyWatch};
pub use lock::{PolicyLockError, assert_policy_lock, check_policy_lock};
pub use model::{PolicyError, PolicyErrors};
pub use promote::{PromoteError, Promoted};
#[cfg(feature = "postgres")]
pub(crate) use replay::Replaying;
pub use replay::{ChainReport, Flip, FlipRow, Located, MAX_REFERENCES, ReplayFilter, ReplayReport};

pub use crate::gate::builder::PolicySource;
pub use crate::gate::narrowing::{Narrowing, Ruling};
