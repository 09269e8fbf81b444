use toolgate::{Denied, toolset};

pub struct Users;

#[toolset(domain = "users")]
impl Users {
    /// Delete every user.
    #[cfg_attr(not(feature = "never"), tool(risk = "HIGH_WRITE"))]
    pub fn purge_all(&self) -> Result<(), Denied> {
        Ok(())
    }

    /// Count the users.
    #[cfg_attr(all(), cfg_attr(all(), toolgate::tool(risk = "READ_ONLY")))]
    fn count(&self) -> Result<usize, Denied> {
        Ok(3)
    }
}

fn main() {}
