//! What `tools/list` shows a caller, and when it changed: the watch behind `list_changed`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ListToolsResult, PaginatedRequestParams};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use super::builder::ToolgateServer;
use crate::gate::Gate;
use crate::mcp::definition;
use crate::mcp::handler::Undeclared;
use crate::registry::{Tool, manifests, registry};
use toolgate_policy::{Mode, Verdict};

impl ToolgateServer {
    pub(super) fn served(&self, name: &str) -> Option<Tool> {
        // Beside a handler, the registry's tools are served only where `only` selects them.
        if self.handler.is_some() && self.filter.is_none() {
            return None;
        }
        registry()
            .get(name)
            .filter(|tool| tool.is_served_by(&self.instances))
            .filter(|tool| {
                self.filter
                    .as_ref()
                    .is_none_or(|keep| keep(tool.manifest()))
            })
    }

    /// Whether `name` is a tool of this server, whatever the gate's mode: a linked `callable` tool that
    /// the filter of [`only`](ToolgateServer::only) keeps, and, for a method, whose instance the server
    /// holds.
    pub fn serves(&self, name: &str) -> bool {
        self.served(name).is_some()
    }

    /// The `callable` tools `tools/list` shows now, sorted by name; the tools of a
    /// [`handler`](ToolgateServer::handler) are listed by the handler, for a request.
    pub fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.tools_for(&self.gate)
    }

    /// The tools `tools/list` shows now to a caller whose gate is `gate`.
    fn tools_for(&self, gate: &Gate) -> Vec<rmcp::model::Tool> {
        manifests()
            .filter_map(|manifest| self.served(manifest.id))
            .filter_map(|tool| definition::listed(gate, tool, self.visibility))
            .collect()
    }

    /// What `tools/list` answers a caller whose gate is `gate`: the handler's tools it allows (each
    /// with its declaration's hints and `_meta`), then, on the first page, the `callable` tools.
    pub(super) async fn list_for(
        &self,
        gate: &Gate,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let Some(handler) = &self.handler else {
            return Ok(ListToolsResult::with_all_items(self.tools_for(gate)));
        };
        let first_page = request.as_ref().is_none_or(|r| r.cursor.is_none());
        let listed = handler.list_tools(request, context).await?;
        let mut tools: Vec<rmcp::model::Tool> = Vec::with_capacity(listed.tools.len());
        for tool in listed.tools {
            match registry().in_place(handler.owner(), &tool.name) {
                Some(entry) => {
                    let definition = definition::in_place(&entry.manifest, tool);
                    tools.extend(definition::shown(
                        gate,
                        &entry.manifest,
                        definition,
                        self.visibility,
                    ));
                }
                None if self.undeclared == Undeclared::Serve => tools.push(tool),
                None => {}
            }
        }
        if first_page {
            let own: Vec<rmcp::model::Tool> = self
                .tools_for(gate)
                .into_iter()
                .filter(|tool| registry().in_place(handler.owner(), &tool.name).is_none())
                .collect();
            tools.extend(own);
        }
        let mut result = ListToolsResult::with_all_items(tools);
        result.next_cursor = listed.next_cursor;
        Ok(result)
    }

    /// The definition of the tool `name` if this server serves it, whether or not the current mode
    /// lists it, without the mark of a disabled tool.
    pub fn tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.served(name).and_then(definition::definition)
    }
}

/// The lists whose changes a client hears of: tools, and the handler's resources and prompts where
/// their changes are announced.
#[derive(Debug, Clone, Copy)]
pub(super) struct Watched {
    pub(super) tools: bool,
    pub(super) resources: bool,
    pub(super) prompts: bool,
}

impl Watched {
    pub(super) fn any(self) -> bool {
        self.tools || self.resources || self.prompts
    }
}

/// Tells a subscription's client that a list it watches changed whenever the gate's mode or policy
/// moves; returns when the stream is gone.
pub(super) async fn watch_mode(
    gate: Gate,
    sink: rmcp::service::SubscriptionSink,
    every: Duration,
    watched: Watched,
) {
    let mut seen = Sight::of(&gate);
    let mut reads = ReadSight::of(&gate);
    loop {
        tokio::time::sleep(every).await;
        if watched.tools && seen.moved(&gate) && sink.notify_tool_list_changed().await.is_err() {
            return;
        }
        if reads.moved(&gate) {
            if watched.resources && sink.notify_resource_list_changed().await.is_err() {
                return;
            }
            if watched.prompts && sink.notify_prompt_list_changed().await.is_err() {
                return;
            }
        }
    }
}

/// What the lists of the handler's resources and prompts depend on besides the handler: the gate's
/// mode, its session's latch and the operator's policy it follows.
pub(super) struct ReadSight {
    mode: Mode,
    tainted: bool,
    policy: Option<Arc<str>>,
}

impl ReadSight {
    pub(super) fn of(gate: &Gate) -> ReadSight {
        ReadSight {
            mode: gate.mode(),
            tainted: gate.tainted(),
            policy: gate.policy_digest(),
        }
    }

    /// Whether any of it moved since it was last seen.
    pub(super) fn moved(&mut self, gate: &Gate) -> bool {
        let now = ReadSight::of(gate);
        let moved =
            now.mode != self.mode || now.tainted != self.tainted || now.policy != self.policy;
        *self = now;
        moved
    }
}

/// What a client's tool list depends on: the gate's mode, and what the operator's policy it follows
/// lets the client see.
pub(super) struct Sight {
    mode: Mode,
    policy: Option<Arc<str>>,
    /// Per linked tool, whether the gate would allow or ask for it (what `tools/list` shows).
    visible: Vec<bool>,
}

impl Sight {
    pub(super) fn of(gate: &Gate) -> Sight {
        Sight {
            mode: gate.mode(),
            policy: gate.policy_digest(),
            visible: Sight::visible(gate),
        }
    }

    fn visible(gate: &Gate) -> Vec<bool> {
        registry()
            .entries
            .iter()
            .map(|entry| {
                !matches!(
                    gate.verdict(&entry.manifest),
                    Some(Verdict::Refuse(_)) | None
                )
            })
            .collect()
    }

    /// Whether the list the client would get changed since it was last seen: the mode moved, or a
    /// new policy shows or hides a tool.
    pub(super) fn moved(&mut self, gate: &Gate) -> bool {
        let (mode, policy) = (gate.mode(), gate.policy_digest());
        if mode == self.mode && policy == self.policy {
            return false;
        }
        let visible = Sight::visible(gate);
        let moved = mode != self.mode || visible != self.visible;
        *self = Sight {
            mode,
            policy,
            visible,
        };
        moved
    }
}
