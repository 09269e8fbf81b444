use toolgate::{Denied, tool};

/// Has no JSON form.
pub struct Handle {
    pub fd: i32,
}

/// Open a file.
#[tool(risk = "READ_ONLY", callable)]
fn open(path: String) -> Result<Handle, Denied> {
    let _ = path;
    Ok(Handle { fd: 3 })
}

fn main() {}
