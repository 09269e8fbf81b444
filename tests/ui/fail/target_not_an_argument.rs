use toolgate::{Denied, tool};

/// Delete a repository.
#[tool(risk = "HIGH_WRITE", target = repo)]
fn delete_repository(repository: String) -> Result<(), Denied> {
    let _ = repository;
    Ok(())
}

/// Delete a branch.
#[tool(risk = "HIGH_WRITE", target = "branch")]
fn delete_branch(branch: String) -> Result<(), Denied> {
    let _ = branch;
    Ok(())
}

fn main() {}
