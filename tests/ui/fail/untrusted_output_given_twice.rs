use toolgate::{Denied, tool};

/// Fetch a web page.
#[tool(risk = "READ_ONLY", untrusted_output, open_world, untrusted_output = true)]
fn fetch(url: String) -> Result<String, Denied> {
    Ok(url)
}

fn main() {}
