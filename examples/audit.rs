//! An agent session in SHADOW mode, written to a hash-chained audit log, verified, then summarised as a
//! promotion report: what the agent did, what it was refused, and what it would have done in a higher
//! mode.
//!
//! `cargo run --example audit` writes the log to the system's temporary directory, or to the path given
//! as the first argument.

use std::path::PathBuf;

use toolgate::audit::{JsonlSink, PromotionReport, verify_file};
use toolgate::{Denied, Gate, Mode, Risk, tool};

/// Look an invoice up.
#[tool(risk = "READ_ONLY", domain = "billing", idempotent)]
fn invoice(number: u32) -> Result<String, Denied> {
    Ok(format!("invoice {number}: 120.00 EUR, unpaid"))
}

/// Draft a reminder to the customer; nothing is sent.
#[tool(risk = "PROPOSE_ONLY", domain = "billing")]
fn draft_reminder(number: u32) -> Result<String, Denied> {
    Ok(format!("Dear customer, invoice {number} is overdue."))
}

/// Send the reminder by email.
#[tool(risk = "LOW_WRITE", domain = "billing", open_world)]
fn send_reminder(number: u32, to: String) -> Result<String, Denied> {
    Ok(format!("reminder for {number} sent to {to}"))
}

/// Decide the risk of a refund from its amount: large refunds are critical.
fn refund_risk(_number: &u32, cents: &u64) -> Risk {
    if *cents > 10_000 {
        Risk::HighWrite
    } else {
        Risk::LowWrite
    }
}

/// Refund part of an invoice.
#[tool(risk = "LOW_WRITE", domain = "billing", escalate = refund_risk)]
fn refund(number: u32, cents: u64) -> Result<String, Denied> {
    Ok(format!("refunded {cents} cents on invoice {number}"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("toolgate-audit-{}.jsonl", std::process::id()))
        });
    // A fresh log for the demo; a real application appends, and `JsonlSink::open` continues the chain.
    let _ = std::fs::remove_file(&path);

    let gate = Gate::builder()
        .mode(Mode::Shadow)
        .agent("billing-assistant")
        .audit(JsonlSink::open(&path)?)
        .build()?;

    println!("Session in {} mode:", gate.mode());
    gate.run(|| {
        let steps: [(&str, Result<String, Denied>); 6] = [
            ("invoice 1042", invoice(1042)),
            ("draft_reminder 1042", draft_reminder(1042)),
            (
                "send_reminder 1042",
                send_reminder(1042, "ap@example.com".into()),
            ),
            ("refund 1042, 20.00", refund(1042, 2_000)),
            ("refund 1042, 900.00", refund(1042, 90_000)),
            ("invoice 1043", invoice(1043)),
        ];
        for (name, result) in steps {
            match result {
                Ok(output) => println!("  allowed  {name:<22} {output}"),
                Err(denied) => println!("  refused  {name:<22} {}", denied.code()),
            }
        }
    });
    gate.lower_by(Mode::Shadow, "the demo, on its way out")?;
    drop(gate);

    let report = verify_file(&path)?;
    println!("\nThe log at {}:\n  {report}", path.display());
    if !report.is_intact() {
        return Err("the audit log does not verify".into());
    }

    println!("\n{}", PromotionReport::from_file(&path)?.to_markdown());
    Ok(())
}
