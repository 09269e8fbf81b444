//! A small tool suite for a support agent, and one agent plan run under each mode.
//!
//! `cargo run --example quickstart` prints the manifest table, then shows every call of the plan allowed
//! or refused, with the refusal's code and reason. With `TOOLGATE_MODE` set
//! (`TOOLGATE_MODE=partial_auto cargo run --example quickstart`), it runs the plan in that mode alone;
//! a value that is not a mode ends it with the message.

use std::fmt;

use toolgate::{Approval, ApprovalRequest, Denied, Gate, Mode, toolset};

/// The error every tool of the suite returns: a refusal, or a failure of the tool itself.
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
            ToolError::Refused(denied) => write!(f, "refused {}: {denied}", denied.code()),
            ToolError::NotFound(id) => write!(f, "no user {id}"),
        }
    }
}

/// The support desk's tools.
struct Desk;

#[toolset(domain = "users")]
impl Desk {
    /// Look a user up by id.
    #[tool(risk = "READ_ONLY", idempotent)]
    pub fn get(&self, id: u64) -> Result<String, ToolError> {
        match id {
            1..=99 => Ok(format!("user {id} <user{id}@example.com>")),
            _ => Err(ToolError::NotFound(id)),
        }
    }

    /// Draft a reply to a user; nothing is sent.
    #[tool(risk = "PROPOSE_ONLY")]
    pub fn draft_reply(&self, id: u64, text: &str) -> Result<String, ToolError> {
        Ok(format!("draft to user {id}: {text:?}"))
    }

    /// Add a label to a user's ticket.
    #[tool(risk = "LOW_WRITE", idempotent)]
    pub fn label(&self, id: u64, label: &str) -> Result<String, ToolError> {
        Ok(format!("user {id} labelled {label:?}"))
    }

    /// Delete a user account and all its data.
    #[tool(risk = "HIGH_WRITE", modes = [FULL_AUTO])]
    pub fn delete(&self, id: u64) -> Result<String, ToolError> {
        Ok(format!("user {id} deleted"))
    }

    #[tool(skip)]
    pub fn name(&self) -> &'static str {
        "support desk"
    }
}

/// Stands in for an operator: approves what it is asked, and says so.
fn operator(request: &ApprovalRequest<'_>) -> Approval {
    println!(
        "  (approval asked for {} ({}) in {}: approved)",
        request.tool.id, request.risk, request.mode
    );
    Approval::Approve
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let desk = Desk;
    println!("Tools of the {}:\n", desk.name());
    println!("| id | risk | side effects | allowed modes | description |");
    println!("| --- | --- | --- | --- | --- |");
    for m in toolgate::manifests() {
        println!(
            "| {} | {} | {} | {} | {} |",
            m.id, m.risk_level, m.side_effects, m.allowed_modes, m.description
        );
    }

    type Step = (&'static str, fn(&Desk) -> Result<String, ToolError>);
    let plan: [Step; 4] = [
        ("users.get 7", |d| d.get(7)),
        ("users.draft_reply 7", |d| d.draft_reply(7, "We are on it.")),
        ("users.label 7", |d| d.label(7, "priority")),
        ("users.delete 7", |d| d.delete(7)),
    ];
    let run_plan = |gate: &Gate| {
        for (name, step) in &plan {
            match gate.run(|| step(&desk)) {
                Ok(output) => println!("  allowed  {name:<20} -> {output}"),
                Err(error) => println!("  {error}"),
            }
        }
    };

    // A mode from the environment: `?` prints what is wrong with it, and the exit status is 1.
    if std::env::var_os(toolgate::policy::MODE_ENV_VAR).is_some() {
        let mode = Mode::from_env()?;
        println!("\nMode {mode} (from {}):", toolgate::policy::MODE_ENV_VAR);
        run_plan(&Gate::builder().mode(mode).approver(operator).build()?);
        return Ok(());
    }

    for mode in Mode::ALL {
        println!("\nMode {mode}:");
        run_plan(&Gate::builder().mode(mode).approver(operator).build()?);
    }

    println!("\nMode FULL_AUTO without an approver:");
    run_plan(&Gate::new(Mode::FullAuto)?);

    println!("\nMode FULL_AUTO with `users.delete` on the deny list:");
    run_plan(
        &Gate::builder()
            .mode(Mode::FullAuto)
            .deny("users.delete")
            .approver(operator)
            .build()?,
    );

    println!("\nNo gate at all:");
    match desk.get(7) {
        Ok(output) => println!("  allowed  users.get 7 -> {output}"),
        Err(error) => println!("  {error}"),
    }
    Ok(())
}
