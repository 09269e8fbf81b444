// A bare #[tool] cannot see the impl around it, and the adapter of a call by name would call whatever
// free function bears the name (here `std::fs::remove_file`, ungated): refused, on `callable`.
use std::fs::remove_file;
use toolgate::tool;

pub struct Files;

impl Files {
    /// Delete a file.
    #[tool(risk = "HIGH_WRITE", domain = "files", callable)]
    pub fn remove_file(path: String) -> std::io::Result<()> {
        remove_file(path)
    }
}

fn main() {}
