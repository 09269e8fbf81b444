use toolgate::{Denied, toolset};

pub struct Store<T>(T);

#[toolset(domain = "store")]
impl<T: Default> Store<T> {
    /// Count the items.
    #[tool(risk = "READ_ONLY", callable)]
    pub fn count() -> Result<usize, Denied> {
        Ok(0)
    }
}

fn main() {}
