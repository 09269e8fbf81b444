use toolgate::{Denied, toolset};

macro_rules! purge {
    () => {
        pub fn purge(&self) -> Result<(), Denied> {
            Ok(())
        }
    };
}

macro_rules! wipe {
    () => {
        pub fn wipe(&self) -> Result<(), Denied> {
            Ok(())
        }
    };
}

pub struct Users;

#[toolset(domain = "users")]
impl Users {
    /// Count the users.
    #[toolgate::tool(risk = "READ_ONLY")]
    pub fn count(&self) -> Result<usize, Denied> {
        Ok(3)
    }

    purge!();

    #[toolgate::tool(risk = "HIGH_WRITE")]
    wipe!();
}

fn main() {}
