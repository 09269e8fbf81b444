use toolgate::{Denied, toolset};

pub struct Users;

#[toolset(domain = "users")]
impl Users {
    #[tool(risk = "READ_ONLY")]
    pub fn count(&self) -> Result<usize, Denied> {
        Ok(3)
    }

    pub fn purge(&mut self) -> Result<(), Denied> {
        Ok(())
    }

    fn helper(&self) -> usize {
        0
    }
}

fn main() {
    let _ = Users.helper();
}
