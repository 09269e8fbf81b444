//! A crate whose own root modules are named like the crates the expansion uses.

use toolgate::{Denied, Gate, Mode, tool, toolset};

pub mod inventory {
    pub fn submit() -> &'static str {
        "not the inventory crate"
    }
}

pub mod serde {
    pub struct Serialize;
}

pub mod core {
    pub mod result {
        pub enum Result {
            Ok,
        }
    }
    pub mod convert {}
    pub mod option {}
}

pub mod toolgate_helpers {}

#[tool(risk = "READ_ONLY", domain = "stock")]
fn count_items(shelf: u32) -> Result<u32, Denied> {
    Ok(shelf * 2)
}

pub struct Stock;

#[toolset(domain = "stock")]
impl Stock {
    #[tool(risk = "LOW_WRITE")]
    pub fn restock(&self, shelf: u32) -> Result<u32, Denied> {
        Ok(shelf + 1)
    }
}

fn main() {
    let _ = serde::Serialize;
    let _ = core::result::Result::Ok;
    assert_eq!(inventory::submit(), "not the inventory crate");

    let gate = Gate::new(Mode::PartialAuto).unwrap();
    gate.run(|| {
        assert_eq!(count_items(4).unwrap(), 8);
        assert_eq!(Stock.restock(4).unwrap(), 5);
    });
    assert!(toolgate::registry().manifest("stock.count_items").is_some());
    assert!(toolgate::registry().manifest("stock.restock").is_some());
}
