use toolgate::{Denied, toolset};

#[toolset(domain = "billing")]
mod billing {
    use super::*;

    #[tool(risk = "READ_ONLY")]
    pub fn balance(account: u64) -> Result<u64, Denied> {
        let _ = account;
        Ok(0)
    }

    pub(crate) fn refund(account: u64, cents: u64) -> Result<(), Denied> {
        let _ = (account, cents);
        Ok(())
    }
}

fn main() {
    let _ = billing::refund;
}
