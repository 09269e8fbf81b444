use toolgate::{Denied, toolset};

pub struct Users;

#[toolset(domain = "users")]
impl Users {
    /// Count the users.
    #[tool(risk = "READ_ONLY", callable)]
    pub fn count(&self) -> Result<usize, Denied> {
        Ok(3)
    }
}

fn main() {}
