use toolgate::{Denied, tool};

pub struct Users;

impl Users {
    #[tool(risk = "READ_ONLY")]
    pub fn count(&self) -> Result<usize, Denied> {
        Ok(3)
    }
}

fn main() {}
