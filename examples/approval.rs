//! Approvals for HIGH_WRITE calls, both ways.
//!
//! `cargo run --example approval` first asks on the terminal before each critical call (an interactive
//! approver: answer `y` to approve; anything else, or no terminal, rejects), then shows the two-step flow:
//! the call is refused with a token, an operator approves the token out of band, and the same call runs
//! once.

use std::io::{BufRead, Write};

use toolgate::{Approval, ApprovalRequest, Approver, Denied, Gate, Mode, tool};

/// Wire money to an account.
#[tool(risk = "HIGH_WRITE", domain = "payments", redact = [reference])]
fn wire(account: String, cents: u64, reference: String) -> Result<String, Denied> {
    let _ = reference;
    Ok(format!("wired {cents} cents to {account}"))
}

/// Asks the person at the terminal. No answer (end of input, an I/O error) is a rejection.
struct Prompt;

impl Approver for Prompt {
    fn approve(&self, request: &ApprovalRequest<'_>) -> Approval {
        print!(
            "approve {} ({}) in {} with arguments {}? [y/N] ",
            request.tool.id,
            request.risk,
            request.mode,
            request.arguments.unwrap_or("(not serializable)")
        );
        let _ = std::io::stdout().flush();
        let mut answer = String::new();
        match std::io::stdin().lock().read_line(&mut answer) {
            Ok(0) => Approval::Reject("no answer (end of input)".to_owned()),
            Ok(_) if answer.trim().eq_ignore_ascii_case("y") => Approval::Approve,
            Ok(_) => Approval::Reject(format!("the operator answered {:?}", answer.trim())),
            Err(error) => Approval::Reject(format!("could not read the answer: {error}")),
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("== an interactive approver");
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(Prompt)
        .build()?;
    match gate.run(|| wire("DE44 5001".into(), 12_000, "invoice 17".into())) {
        Ok(done) => println!("\n{done}"),
        Err(denied) => println!("\nrefused {}: {denied}", denied.code()),
    }

    println!("\n== two-step approval");
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()?;
    let call = || wire("DE44 5001".into(), 12_000, "invoice 17".into());

    let refused = gate.run(call).unwrap_err();
    println!("agent sees:    {} {refused}", refused.code());
    let token = refused
        .approval_token()
        .expect("a two-step gate issues a token");
    println!("operator sees: token {token} for {}", refused.tool().id);

    gate.approve(token)?;
    println!("operator approved the token");
    println!("agent retries: {}", gate.run(call)?);

    let again = gate.run(call).unwrap_err();
    println!("agent retries: {} {again}", again.code());
    Ok(())
}
