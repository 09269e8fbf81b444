use std::sync::Arc;

use toolgate::{Denied, toolset};

pub struct Users;

#[toolset(domain = "users")]
impl Users {
    /// Rename a user.
    #[tool(risk = "LOW_WRITE", callable)]
    pub fn rename(&mut self, name: String) -> Result<String, Denied> {
        Ok(name)
    }

    /// Consume the directory.
    #[tool(risk = "LOW_WRITE", callable)]
    pub fn close(self) -> Result<(), Denied> {
        Ok(())
    }

    /// Count through a box.
    #[tool(risk = "READ_ONLY", callable)]
    pub fn boxed(self: Box<Self>) -> Result<usize, Denied> {
        Ok(0)
    }

    /// Count through an `Arc`.
    #[tool(risk = "READ_ONLY", callable)]
    pub fn shared(self: Arc<Self>) -> Result<usize, Denied> {
        Ok(0)
    }
}

fn main() {}
