use toolgate::{Denied, toolset};

pub struct Users;

#[toolset(domian = "users")]
impl Users {
    #[tool(risk = "READ_ONLY")]
    pub fn count(&self) -> Result<usize, Denied> {
        Ok(3)
    }
}

fn main() {}
