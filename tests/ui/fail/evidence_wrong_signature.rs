use toolgate::{Denied, tool};

fn describe(id: &str) -> Result<String, String> {
    Ok(id.to_owned())
}

fn count(id: &u64) -> u64 {
    *id
}

/// Stop a job.
#[tool(risk = "LOW_WRITE", target = id, evidence = describe)]
fn stop_job(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

/// Pause a job.
#[tool(risk = "LOW_WRITE", target = id, evidence = count)]
fn pause_job(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

fn main() {}
