use toolgate::{Denied, tool};

#[tool(risk = "READ_ONLY")]
const fn max_page_size() -> Result<u32, Denied> {
    Ok(100)
}

fn main() {}
