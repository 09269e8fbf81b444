use toolgate::{Denied, toolset};

pub struct Users;

#[toolset(domain = "users")]
impl Users {
    #[tool(risk = "HIGH_WRITE")]
    pub fn delete(&self, id: u64) -> Result<(), Denied> {
        let _ = id;
        Ok(())
    }

    #[tool(risk = "HIGH_WRITE", id = "users.delete")]
    pub fn delete_by_email(&self, email: &str) -> Result<(), Denied> {
        let _ = email;
        Ok(())
    }
}

fn main() {}
