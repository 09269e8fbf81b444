//! A `callable` tool's parameters keep what its doc comment says of them, in its input schema and
//! in `tools/list`.
#![cfg(feature = "mcp")]

use toolgate::{Denied, tool};

/// Rename a user.
///
/// # Arguments
///
/// * `id` - The user's id, as the directory keeps it.
/// * `name`: The new name,
///   shown to every other user.
/// * `unknown` - Not a parameter: ignored.
#[tool(risk = "LOW_WRITE", domain = "pdocs", callable)]
pub fn rename(id: u64, name: String, quiet: bool) -> Result<String, Denied> {
    let _ = (id, quiet);
    Ok(name)
}

#[test]
fn a_callable_tools_parameters_keep_what_its_doc_comment_says_of_them() {
    let tool = toolgate::registry().get("pdocs.rename").unwrap();
    let schema = tool.input_schema().unwrap();
    let properties = &schema["properties"];
    assert_eq!(
        properties["id"]["description"],
        "The user's id, as the directory keeps it."
    );
    assert_eq!(
        properties["name"]["description"],
        "The new name, shown to every other user."
    );
    assert!(
        properties["quiet"].get("description").is_none(),
        "{schema:#}"
    );
    assert!(properties.get("unknown").is_none());
    let listed = toolgate::mcp::definition(tool).unwrap();
    assert_eq!(
        listed.input_schema["properties"]["id"]["description"],
        "The user's id, as the directory keeps it."
    );
}
