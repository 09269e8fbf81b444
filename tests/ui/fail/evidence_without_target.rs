use toolgate::{Denied, tool};

fn describe(id: &u64) -> Result<u64, String> {
    Ok(*id)
}

/// Stop a job.
#[tool(risk = "LOW_WRITE", evidence = describe)]
fn stop_job(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
