//! rmcp's `annotations(..)` on a `callable` tool: what a tool moved out of an rmcp router keeps.

#![cfg(feature = "mcp")]

use serde_json::json;
use toolgate::mcp::definition;
use toolgate::{Denied, tool};

/// Archive a page.
#[tool(
    risk = "HIGH_WRITE",
    domain = "annot",
    callable,
    annotations(
        title = "Archive a page",
        destructive_hint = true,
        read_only_hint = false,
        idempotent_hint = true,
        open_world_hint = false
    )
)]
fn archive(title: String) -> Result<String, Denied> {
    Ok(title)
}

/// Label a page.
#[tool(risk = "LOW_WRITE", domain = "annot", callable)]
fn label(title: String) -> Result<String, Denied> {
    Ok(title)
}

fn listed(id: &str) -> serde_json::Value {
    let tool = toolgate::registry().get(id).expect("a linked tool");
    serde_json::to_value(definition(tool).expect("a callable tool")).expect("serializes")
}

/// Its title is the definition's and its hints', and the hints are those the declaration makes
/// (`idempotent_hint` as the key `idempotent`). Broken: the title is dropped, or a hint written is not
/// the one listed.
#[test]
fn annotations_written_as_rmcp_writes_them_pass_through() {
    let archive = listed("annot.archive");
    assert_eq!(archive["title"], "Archive a page", "{archive}");
    assert_eq!(
        archive["annotations"],
        json!({
            "title": "Archive a page",
            "readOnlyHint": false,
            "destructiveHint": true,
            "idempotentHint": true,
            "openWorldHint": false,
        })
    );
    let manifest = toolgate::manifests()
        .find(|m| m.id == "annot.archive")
        .expect("its manifest");
    assert!(manifest.idempotent);
    assert_eq!(manifest.title, Some("Archive a page"));
    let label = listed("annot.label");
    assert!(label.get("title").is_none(), "{label}");
    assert!(label["annotations"].get("title").is_none(), "{label}");
}
