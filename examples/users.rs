//! The README's quickstart: tools declared in a `#[toolset]`, a gate built once, calls made inside it.
//!
//! `TOOLGATE_MODE=full_auto cargo run --example users` lets the delete run, after its approval.

use std::fmt;

use toolgate::{Approval, ApprovalRequest, Denied, Gate, Mode, toolset};

#[derive(Debug)]
enum ToolError {
    Refused(Denied),
    NotFound(u64),
}

impl From<Denied> for ToolError {
    fn from(denied: Denied) -> Self {
        ToolError::Refused(denied)
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::Refused(denied) => write!(f, "{}: {denied}", denied.code()),
            ToolError::NotFound(id) => write!(f, "no user {id}"),
        }
    }
}

impl std::error::Error for ToolError {}

struct Users;

#[toolset(domain = "users")]
impl Users {
    /// Look a user up by id.
    #[tool(risk = "READ_ONLY", idempotent)]
    pub fn get(&self, id: u64) -> Result<String, ToolError> {
        if id == 0 {
            return Err(ToolError::NotFound(id));
        }
        Ok(format!("user {id}"))
    }

    /// Delete a user account and all its data.
    #[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO])]
    pub fn delete(&self, id: u64) -> Result<(), ToolError> {
        println!("deleted user {id}");
        Ok(())
    }

    /// Purge every deleted account's backups.
    #[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO])]
    pub fn purge_deleted(&self) -> Result<(), ToolError> {
        Ok(())
    }

    // Every pub fn of a #[toolset] must declare itself: this one is not a tool.
    #[tool(skip)]
    pub fn cache_size(&self) -> usize {
        0
    }
}

/// Asks whoever operates the agent; here, says what was asked and approves it.
fn ask_operator(request: &ApprovalRequest<'_>) -> Approval {
    println!("approving {} ({})", request.tool.id, request.risk);
    Approval::Approve
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let users = Users;
    let gate = Gate::builder()
        .mode(Mode::from_env()?) // TOOLGATE_MODE; unset means SHADOW
        .deny("users.purge_*") // refused in every mode, whatever an approver says
        .approver(ask_operator) // HIGH_WRITE in FULL_AUTO runs only once approved
        .build()?;

    println!("{}", gate.run(|| users.get(7))?); // sync code
    let refusals = [
        gate.scope(async { users.delete(7) }).await.err(), // async code, on any executor
        gate.run(|| users.purge_deleted()).err(),
    ];
    for refused in refusals.into_iter().flatten() {
        println!("{refused}");
    }
    println!("cache: {}", users.cache_size()); // not a tool: no gate is asked
    gate.lower(Mode::Shadow)?; // the kill switch: every thread, at once; never raised again
    Ok(())
}
