use toolgate::{Gate, Mode, Risk, toolset};

#[toolset(domain = "billing")]
pub mod billing {
    use toolgate::Denied;

    /// Current balance, in cents.
    #[tool(risk = "READ_ONLY")]
    pub fn balance(account: u64) -> Result<u64, Denied> {
        Ok(cents(account))
    }

    /// Propose a refund for a human to apply.
    #[tool(risk = "PROPOSE_ONLY", id = "billing.refund.propose")]
    pub fn propose_refund(account: u64) -> Result<String, Denied> {
        Ok(format!("refund {} to {account}", cents(account)))
    }

    #[tool(skip)]
    pub fn currency() -> &'static str {
        "EUR"
    }

    /// A private tool is a tool too.
    #[tool(risk = "READ_ONLY")]
    fn audit_log() -> Result<Vec<String>, Denied> {
        Ok(Vec::new())
    }

    #[tool(skip)]
    pub fn audit_len() -> usize {
        audit_log().map_or(0, |log| log.len())
    }

    fn cents(account: u64) -> u64 {
        account * 100
    }

    pub struct Invoice;

    pub const LIMIT: u64 = 10;
}

fn main() {
    let gate = Gate::new(Mode::Advisory).unwrap();
    gate.run(|| {
        assert_eq!(billing::balance(2).unwrap(), 200);
        assert_eq!(billing::propose_refund(1).unwrap(), "refund 100 to 1");
        assert_eq!(billing::audit_len(), 0);
    });
    assert_eq!(billing::currency(), "EUR");
    let _ = billing::Invoice;
    assert_eq!(billing::LIMIT, 10);

    let ids: Vec<&str> = toolgate::manifests().map(|m| m.id).collect();
    assert_eq!(
        ids,
        [
            "billing.audit_log",
            "billing.balance",
            "billing.refund.propose"
        ]
    );
    let refund = toolgate::registry().manifest("billing.refund.propose").unwrap();
    assert_eq!(refund.risk_level, Risk::ProposeOnly);
    assert_eq!(refund.domain, Some("billing"));
    assert!(!refund.side_effects);
}
