use toolgate::{Denied, tool};

pub trait Store {
    #[tool(risk = "READ_ONLY")]
    fn count(&self) -> Result<usize, Denied>;
}

fn main() {}
