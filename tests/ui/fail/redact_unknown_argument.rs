use toolgate::{Denied, tool};

/// Log in to the mail server.
#[tool(risk = "LOW_WRITE", redact = [pasword])]
fn login(user: String, password: String) -> Result<(), Denied> {
    let _ = (user, password);
    Ok(())
}

fn main() {}
