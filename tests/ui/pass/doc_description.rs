use toolgate::{Denied, Gate, Mode, tool};

/// Delete a user account.
///
/// The account and all its sessions are removed.
///   Indented lines keep their indentation.
///
#[tool(risk = "HIGH_WRITE", domain = "users")]
fn delete_user(id: u64) -> Result<(), Denied> {
    let _ = id;
    Ok(())
}

/**
    Block comments are descriptions too.
*/
#[tool(risk = "READ_ONLY", domain = "users")]
fn get_user(id: u64) -> Result<u64, Denied> {
    Ok(id)
}

/// This doc comment is not the description.
#[tool(
    risk = "READ_ONLY",
    domain = "users",
    description = "  Count the users.  "
)]
fn count_users() -> Result<usize, Denied> {
    Ok(0)
}

#[tool(risk = "READ_ONLY", domain = "users")]
fn undocumented() -> Result<(), Denied> {
    Ok(())
}

#[doc = "Attribute docs."]
#[doc = ""]
#[doc = "Second paragraph."]
#[tool(risk = "READ_ONLY", domain = "users")]
fn attribute_docs() -> Result<(), Denied> {
    Ok(())
}

fn main() {
    let description = |id: &str| toolgate::registry().manifest(id).unwrap().description;
    assert_eq!(
        description("users.delete_user"),
        "Delete a user account.\n\nThe account and all its sessions are removed.\n  Indented lines keep their indentation."
    );
    assert_eq!(
        description("users.get_user"),
        "Block comments are descriptions too."
    );
    assert_eq!(description("users.count_users"), "Count the users.");
    assert_eq!(description("users.undocumented"), "");
    assert_eq!(
        description("users.attribute_docs"),
        "Attribute docs.\n\nSecond paragraph."
    );

    let gate = Gate::new(Mode::Shadow).unwrap();
    gate.run(|| {
        assert_eq!(get_user(3).unwrap(), 3);
        assert_eq!(count_users().unwrap(), 0);
        undocumented().unwrap();
        attribute_docs().unwrap();
        assert_eq!(delete_user(1).unwrap_err().code(), "MODE_NOT_ALLOWED");
    });
}
