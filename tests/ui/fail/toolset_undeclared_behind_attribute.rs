// An attribute the toolset cannot read might be `tool` under another name: the toolset leaves a marker,
// and a public function that no `tool` took is refused as undeclared.
use toolgate::{Denied, toolset};

pub struct Users;

#[toolset(domain = "users")]
impl Users {
    #[cfg_attr(all(), inline)]
    pub fn purge_all(&self) -> Result<(), Denied> {
        Ok(())
    }
}

fn main() {}
