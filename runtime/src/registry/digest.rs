//! The manifest digest: one SHA-256 over the canonical JSON of every linked tool's manifest, stamped
//! into every audit record, so that a record says which set of tools decided it.

use std::borrow::Borrow;
use std::sync::OnceLock;

use crate::canonical;
use crate::registry::manifest::ToolManifest;
use crate::registry::manifests;

fn canonical_one(manifest: &ToolManifest) -> String {
    let value = serde_json::to_value(manifest).expect("a manifest serializes");
    canonical::to_string(&value)
}

/// The canonical JSON text of `manifests` that [`digest_of`] hashes: see [the module
/// documentation](crate::report#the-manifest-digest).
pub fn canonical_json<I>(manifests: I) -> String
where
    I: IntoIterator,
    I::Item: Borrow<ToolManifest>,
{
    let mut items: Vec<(&'static str, String)> = manifests
        .into_iter()
        .map(|m| {
            let m = m.borrow();
            (m.id, canonical_one(m))
        })
        .collect();
    items.sort_unstable();
    let mut out = String::from("[");
    for (i, (_, text)) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(text);
    }
    out.push(']');
    out
}

/// The lowercase hex SHA-256 of [`canonical_json`]`(manifests)`: 64 characters, the same for the same
/// set of manifests in any order.
pub fn digest_of<I>(manifests: I) -> String
where
    I: IntoIterator,
    I::Item: Borrow<ToolManifest>,
{
    canonical::sha256_hex(canonical_json(manifests).as_bytes())
}

/// [`digest_of`] every linked tool, computed on first use and cached for the life of the process.
pub fn manifest_digest() -> &'static str {
    static DIGEST: OnceLock<String> = OnceLock::new();
    DIGEST.get_or_init(|| digest_of(manifests()))
}
