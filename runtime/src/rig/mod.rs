//! `callable` tools as [rig](https://crates.io/crates/rig-core) tools (feature `rig`, rig-core 0.44).
//!
//! Each tool becomes a rig [`DynamicTool`]: its function name (the id with `.` written `-`, see
//! [`provider::function_name`](crate::provider::function_name)), its description and its input
//! schema, and a callback that calls it through [`Registry::call_with`](crate::Registry::call_with),
//! so the gate, its deny list, approvals and audit decide every call the agent makes, as they decide a
//! direct one. Hand them to a rig agent with `AgentBuilder::dynamic_tools`:
//!
//! ```
//! # extern crate toolgate_runtime as toolgate;
//! # fn agent(model: rig_core::DynModel<rig_core::operation::Completion>) -> Result<(), toolgate::GateError> {
//! let gate = toolgate::Gate::from_env()?;
//! let tools = toolgate::rig::tools(&gate); // Vec<rig_core::tool::DynamicTool>
//! // let agent = rig_agent::AgentBuilder::new(model).dynamic_tools(tools).build();
//! # let _ = (model, tools);
//! # Ok(())
//! # }
//! ```
//!
//! # What the model reads
//!
//! A string result is the tool's text output, any other result its JSON. An error is a failed tool
//! result whose text, the one the model reads, is `"<CODE>: <message>"`, as over MCP and as
//! [`provider::result_text`](crate::provider::result_text) writes it:
//!
//! | toolgate | rig |
//! | --- | --- |
//! | a refusal of the gate (`MODE_NOT_ALLOWED`, `DENY_LISTED`, `APPROVAL_REQUIRED`, ...) | [`ToolExecutionError::refused`], a refusal |
//! | `INVALID_PARAMS` | [`ToolExecutionError::invalid_args`] |
//! | `UNKNOWN_TOOL`, `NOT_CALLABLE`, `NO_INSTANCE` | [`ToolExecutionError::not_found`] |
//! | `HANDLER_ERROR`, `OUTPUT_ERROR` | [`ToolExecutionError::other`] |
//!
//! Each carries the code as its [`code`](ToolExecutionError::code).
//!
//! # Which tools
//!
//! [`tools`] gives every linked `callable` function, whatever the gate's mode: the agent is usually
//! built once, and the gate decides each call when it is made. [`RigTools`] narrows them: to what the
//! gate would allow now ([`RigTools::allowed_now`]), to some tools ([`RigTools::only`]), and adds the
//! `callable` methods of the instances it is given.

use std::fmt;
use std::sync::Arc;

use rig_core::message::ToolName;
use rig_core::tool::{DynamicTool, ToolExecutionError, ToolOutput};
use serde_json::Value;

/// The `rig-core` crate this module is built on, for naming its types with the version toolgate uses.
pub use rig_core;

use crate::by_name::provider::function_name;
use crate::by_name::{CallError, Instances};
use crate::gate::Gate;
use crate::registry::{Tool, ToolManifest, manifests, registry};
use toolgate_policy::Verdict;

type Filter = Arc<dyn Fn(&ToolManifest) -> bool + Send + Sync>;

/// Every linked `callable` function as a rig tool whose calls `gate` decides.
pub fn tools(gate: &Gate) -> Vec<DynamicTool> {
    RigTools::new(gate.clone()).tools()
}

/// The rig tools of the registry's `callable` tools, every call decided by one [`Gate`].
#[derive(Clone)]
pub struct RigTools {
    gate: Gate,
    instances: Instances,
    filter: Option<Filter>,
    allowed_now: bool,
}

impl fmt::Debug for RigTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RigTools")
            .field("mode", &self.gate.mode())
            .field("instances", &self.instances)
            .field("filtered", &self.filter.is_some())
            .field("allowed_now", &self.allowed_now)
            .finish()
    }
}

impl RigTools {
    /// Every linked `callable` function, each call decided by `gate`.
    pub fn new(gate: Gate) -> RigTools {
        RigTools {
            gate,
            instances: Instances::new(),
            filter: None,
            allowed_now: false,
        }
    }

    /// Adds the `callable` methods of `instance`'s type (a `#[toolset]` impl's `&self` tools), each
    /// call running on this instance.
    #[must_use]
    pub fn instance<T: Send + Sync + 'static>(mut self, instance: T) -> RigTools {
        self.instances = self.instances.with(instance);
        self
    }

    /// Adds the `callable` methods of every type in `instances`, replacing those given before.
    #[must_use]
    pub fn instances(mut self, instances: Instances) -> RigTools {
        self.instances = instances;
        self
    }

    /// Keeps only the tools whose manifest `keep` accepts, e.g. `|m| m.domain == Some("tickets")`.
    #[must_use]
    pub fn only(
        mut self,
        keep: impl Fn(&ToolManifest) -> bool + Send + Sync + 'static,
    ) -> RigTools {
        self.filter = Some(Arc::new(keep));
        self
    }

    /// Leaves out the tools the gate would refuse in its current mode (a tool that needs an approval
    /// stays: the approval is asked for when it is called). This is advice to the model; a call is
    /// decided by the gate whatever it was shown.
    #[must_use]
    pub fn allowed_now(mut self) -> RigTools {
        self.allowed_now = true;
        self
    }

    fn kept(&self, tool: Tool) -> bool {
        tool.is_served_by(&self.instances)
            && self
                .filter
                .as_ref()
                .is_none_or(|keep| keep(tool.manifest()))
            && (!self.allowed_now
                || matches!(
                    self.gate.verdict(tool.manifest()),
                    Some(Verdict::Allow | Verdict::NeedsApproval)
                ))
    }

    /// The rig tool of the tool `id`, if it is one of these.
    pub fn tool(&self, id: &str) -> Option<DynamicTool> {
        let tool = registry().get(id).filter(|&tool| self.kept(tool))?;
        Some(self.dynamic(tool))
    }

    /// The rig tools, sorted by id.
    pub fn tools(&self) -> Vec<DynamicTool> {
        manifests()
            .filter_map(|manifest| registry().get(manifest.id))
            .filter(|&tool| self.kept(tool))
            .map(|tool| self.dynamic(tool))
            .collect()
    }

    fn dynamic(&self, tool: Tool) -> DynamicTool {
        let manifest = tool.manifest();
        let id = manifest.id;
        let mut schema = tool
            .input_schema()
            .unwrap_or_else(|| Value::Object(Default::default()));
        if let Value::Object(root) = &mut schema {
            root.remove("$schema");
        }
        let name = ToolName::new(function_name(id)).expect("a tool id is never empty");
        let gate = self.gate.clone();
        let instances = self.instances.clone();
        DynamicTool::new(name, manifest.description, schema, move |arguments| {
            let call = registry().call_with(&gate, &instances, id, arguments);
            Box::pin(async move { output(call.await) })
        })
    }
}

/// A call's result as rig's: the value, or a failure whose model-facing text is `"<CODE>: <message>"`.
fn output(result: Result<Value, CallError>) -> Result<ToolOutput, ToolExecutionError> {
    let error = match result {
        Ok(Value::String(text)) => return Ok(ToolOutput::text(text)),
        Ok(value) => return Ok(ToolOutput::json(value)),
        Err(error) => error,
    };
    let text = format!("{}: {error}", error.code());
    let failure = match &error {
        CallError::Denied(_) => ToolExecutionError::refused(text),
        CallError::InvalidParams { .. } => ToolExecutionError::invalid_args(text),
        CallError::UnknownTool { .. }
        | CallError::NotCallable { .. }
        | CallError::NoInstance { .. } => ToolExecutionError::not_found(text),
        _ => ToolExecutionError::other(text),
    };
    Err(failure.with_code(error.code()).with_source(error))
}
