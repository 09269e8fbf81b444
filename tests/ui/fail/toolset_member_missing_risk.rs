use toolgate::{Denied, toolset};

pub struct Users;

#[toolset(domain = "users")]
impl Users {
    #[tool(side_effects)]
    pub fn purge(&mut self) -> Result<(), Denied> {
        Ok(())
    }

    #[tool]
    pub fn count(&self) -> Result<usize, Denied> {
        Ok(0)
    }
}

fn main() {}
