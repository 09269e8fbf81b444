use toolgate::{Denied, toolset};

pub struct Users;

#[toolset(domain = "users")]
impl Users {
    #[tool(risk = "READ_ONLY", modes = [FULL_AUTO, FULL_AUTO])]
    pub fn count(&self) -> Result<usize, Denied> {
        Ok(0)
    }

    #[tool(risk = "HIGH_WRITE")]
    pub fn purge(&mut self) -> usize {
        0
    }

    pub fn reset(&mut self) {}
}

fn main() {
    let mut users = Users;
    let _ = users.count();
    let _ = users.purge();
    users.reset();
}
