use toolgate::{Denied, tool};

#[derive(Debug)]
pub enum Failure {
    Refused(Denied),
    Busy,
}

impl From<Denied> for Failure {
    fn from(denied: Denied) -> Self {
        Failure::Refused(denied)
    }
}

/// Restart a service.
#[tool(risk = "LOW_WRITE", callable)]
fn restart(service: String) -> Result<(), Failure> {
    let _ = service;
    Err(Failure::Busy)
}

fn main() {}
