//! MCP tool definitions built from manifests: annotations from the declared risk, `_meta` from the
//! policy, and what a gate's current mode shows.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{JsonObject, MetaObject, ToolAnnotations};
use serde_json::Value;

use crate::gate::Gate;
use crate::registry::Tool;
use crate::registry::ToolManifest;
use toolgate_policy::Mode;
use toolgate_policy::Risk;
use toolgate_policy::Verdict;

/// The `_meta` key of a definition that holds the tool's declared risk, e.g. `"HIGH_WRITE"`.
pub const META_RISK_LEVEL: &str = "dev.toolgate/risk_level";

/// The `_meta` key of a definition that holds the modes the tool may run in, e.g. `["FULL_AUTO"]`.
pub const META_ALLOWED_MODES: &str = "dev.toolgate/allowed_modes";

/// The `_meta` key of a definition of an `irreversible` tool: `true` (absent for any other tool).
pub const META_IRREVERSIBLE: &str = "dev.toolgate/irreversible";

/// The `_meta` key of a definition that names the tool's `target` parameter, where it declares one.
pub const META_TARGET: &str = "dev.toolgate/target";

/// The `_meta` key of a definition of a tool with an `evidence` probe: `true` (absent otherwise).
pub const META_EVIDENCE: &str = "dev.toolgate/evidence";

/// The `_meta` key of a definition of a tool that says how its calls are undone: `true` (absent
/// otherwise).
pub const META_ROLLBACK: &str = "dev.toolgate/rollback";

/// What `tools/list` does with a tool the gate would refuse in its current mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Visibility {
    /// Leave it out: the model is not offered a tool it cannot use. The default.
    #[default]
    Hide,
    /// List it, its description led by `[DISABLED in <MODE> mode] `, so the model knows it exists and
    /// why it cannot use it now.
    MarkDisabled,
}

/// The MCP annotations of a tool, derived from its manifest and always written out in full.
///
/// | risk | `readOnlyHint` | `destructiveHint` |
/// | --- | --- | --- |
/// | `READ_ONLY`, `PROPOSE_ONLY` | `true` | `false` |
/// | `LOW_WRITE` | `false` | `false` |
/// | `HIGH_WRITE` | `false` | `true` |
///
/// `idempotentHint` and `openWorldHint` are the manifest's `idempotent` and `open_world`, `false` when
/// not declared. Every hint is written, none left to a client's default (MCP's default for
/// `destructiveHint` is `true`, which would misdescribe a tool that only reads).
pub fn annotations(manifest: &ToolManifest) -> ToolAnnotations {
    let (read_only, destructive) = match manifest.risk_level {
        Risk::ReadOnly | Risk::ProposeOnly => (true, false),
        Risk::LowWrite => (false, false),
        Risk::HighWrite => (false, true),
    };
    ToolAnnotations::from_raw(
        manifest.title.map(str::to_owned),
        Some(read_only),
        Some(destructive),
        Some(manifest.idempotent),
        Some(manifest.open_world),
    )
}

/// The `_meta` object of a tool's definition: its risk under [`META_RISK_LEVEL`] and its allowed modes
/// under [`META_ALLOWED_MODES`]; where it declares them, [`META_IRREVERSIBLE`], [`META_TARGET`],
/// [`META_EVIDENCE`] and [`META_ROLLBACK`].
pub fn meta(manifest: &ToolManifest) -> MetaObject {
    let mut meta = JsonObject::new();
    meta.insert(
        META_RISK_LEVEL.to_owned(),
        Value::from(manifest.risk_level.as_str()),
    );
    let modes = manifest.allowed_modes.iter().map(Mode::as_str);
    meta.insert(
        META_ALLOWED_MODES.to_owned(),
        Value::Array(modes.map(Value::from).collect()),
    );
    let flags = [
        (META_IRREVERSIBLE, manifest.irreversible),
        (META_EVIDENCE, manifest.evidence),
        (META_ROLLBACK, manifest.rollback),
    ];
    for (key, _) in flags.into_iter().filter(|(_, declared)| *declared) {
        meta.insert(key.to_owned(), Value::Bool(true));
    }
    if let Some(target) = manifest.target {
        meta.insert(META_TARGET.to_owned(), Value::from(target));
    }
    MetaObject(meta)
}

/// The MCP definition of a `callable` tool, independent of any gate: its id as the name, its
/// description, its input schema, its output schema where that is a JSON object's, [`annotations`] and
/// [`meta`]. `None` for a tool that is not `callable`.
///
/// MCP only admits output schemas of objects: a tool whose result is a string, a number or a list has
/// none, and its results are sent as text only.
pub fn definition(tool: Tool) -> Option<rmcp::model::Tool> {
    let Some(Value::Object(input)) = tool.input_schema() else {
        return None;
    };
    let manifest = tool.manifest();
    let description =
        (!manifest.description.is_empty()).then_some(Cow::Borrowed(manifest.description));
    let mut definition = rmcp::model::Tool::new_with_raw(manifest.id, description, Arc::new(input))
        .with_annotations(annotations(manifest))
        .with_meta(meta(manifest));
    if let Some(title) = manifest.title {
        definition = definition.with_title(title);
    }
    if let Some(Value::Object(output)) = tool.output_schema()
        && output.get("type").and_then(Value::as_str) == Some("object")
    {
        definition = definition.with_raw_output_schema(Arc::new(output));
    }
    Some(definition)
}

/// The description prefix of a tool listed although the gate would refuse it: `[DISABLED in SHADOW mode] `.
pub fn disabled_prefix(mode: Mode) -> String {
    format!("[DISABLED in {mode} mode] ")
}

/// What `tools/list` shows for `tool` under `gate` now: its [`definition`], `None` when it is not
/// callable or is hidden, and with the [`disabled_prefix`] when the gate would refuse it and
/// `visibility` is [`Visibility::MarkDisabled`].
///
/// A tool that needs an approval is listed as it is: the approval is asked for when it is called.
pub fn listed(gate: &Gate, tool: Tool, visibility: Visibility) -> Option<rmcp::model::Tool> {
    shown(gate, tool.manifest(), definition(tool)?, visibility)
}

/// The definition a handler's tool gated in place is listed with: the handler's own, with the hints
/// and `_meta` of its toolgate declaration, which is what the gate enforces.
pub(crate) fn in_place(
    manifest: &ToolManifest,
    mut definition: rmcp::model::Tool,
) -> rmcp::model::Tool {
    let declared = annotations(manifest);
    let mut merged = definition.annotations.take().unwrap_or_default();
    merged.read_only_hint = declared.read_only_hint;
    merged.destructive_hint = declared.destructive_hint;
    merged.idempotent_hint = declared.idempotent_hint;
    merged.open_world_hint = declared.open_world_hint;
    definition.annotations = Some(merged);
    let mut facts = definition.meta.take().unwrap_or_default();
    facts.0.extend(meta(manifest).0);
    definition.meta = Some(facts);
    definition
}

/// `definition` as `tools/list` shows it under `gate` now: as it is where the gate would allow the call
/// or ask for an approval; otherwise hidden, or marked with the [`disabled_prefix`].
pub(crate) fn shown(
    gate: &Gate,
    manifest: &ToolManifest,
    mut definition: rmcp::model::Tool,
    visibility: Visibility,
) -> Option<rmcp::model::Tool> {
    let mode = gate.mode();
    match gate.verdict(manifest)? {
        Verdict::Allow | Verdict::NeedsApproval => Some(definition),
        Verdict::Refuse(_) => match visibility {
            Visibility::Hide => None,
            Visibility::MarkDisabled => {
                let prefix = disabled_prefix(mode);
                let description = match definition.description.as_deref() {
                    Some(text) => format!("{prefix}{text}"),
                    None => prefix.trim_end().to_owned(),
                };
                definition.description = Some(Cow::Owned(description));
                Some(definition)
            }
        },
    }
}
