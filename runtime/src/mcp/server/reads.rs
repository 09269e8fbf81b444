//! The handler's resources and prompts behind the caller's gate: each read, and each completion of
//! one's arguments, decided before the handler answers it, and each list showing what the gate would
//! let the caller read.

use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, Reference,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use toolgate_policy::Risk;

use super::builder::ToolgateServer;
use super::results::read_refused;
use crate::gate::Gate;
use crate::gate::reads::{ReadKind, ReadName};
use crate::mcp::codes::McpCode;

impl ToolgateServer {
    /// The risk declared for reading `read`: the highest of the declarations that reach it,
    /// READ_ONLY where none does.
    fn read_risk_of(&self, kind: ReadKind, read: &ReadName) -> Risk {
        self.read_risks
            .iter()
            .filter(|declared| declared.kind == kind && declared.pattern.matches(read))
            .map(|declared| declared.risk)
            .max()
            .unwrap_or(Risk::ReadOnly)
    }

    /// The least risk of every URI the template `template` expands to: the highest of the
    /// declarations whose pattern matches all of them, READ_ONLY where none does.
    fn template_risk(&self, template: &str) -> Risk {
        self.read_risks
            .iter()
            .filter(|declared| {
                declared.kind == ReadKind::Resource && declared.pattern.covers_template(template)
            })
            .map(|declared| declared.risk)
            .max()
            .unwrap_or(Risk::ReadOnly)
    }

    /// `name` as a read of `kind`, or the refusal of a name that holds what a reader cannot see
    /// (`UNREADABLE_NAME`), recorded with the name's digest: the text is the caller's, and may be
    /// anything.
    fn readable(gate: &Gate, kind: ReadKind, name: &str) -> Result<ReadName, ErrorData> {
        ReadName::parse(kind, name).map_err(|why| {
            let code = McpCode::UnreadableName;
            let message = format!(
                "{why} (SHA-256 of it: {})",
                crate::canonical::sha256_hex(name.as_bytes())
            );
            gate.record_probe(
                std::borrow::Cow::Owned(kind.label("(unreadable)")),
                None,
                code.as_str(),
                message.clone(),
            );
            read_refused(code, &message)
        })
    }

    /// Decides a request of `kind` on `name` in the caller's gate; `content` where it reads what the
    /// resource or prompt holds.
    fn decide(
        &self,
        gate: &Gate,
        kind: ReadKind,
        name: &str,
        content: bool,
    ) -> Result<(), ErrorData> {
        let read = Self::readable(gate, kind, name)?;
        let risk = self.read_risk_of(kind, &read);
        gate.decide_read(kind, &read, risk, content)
            .map_err(|refusal| read_refused(refusal.code.into(), &refusal.message))
    }

    /// A subscription to the updates of the resource `uri`, decided as a read of it that does not
    /// read what it holds.
    pub(super) fn decide_subscription(&self, gate: &Gate, uri: &str) -> Result<(), ErrorData> {
        self.decide(gate, ReadKind::Resource, uri, false)
    }

    /// `resources/read`: decided by the caller's gate, then read by the handler.
    pub(super) async fn read_gated(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let handler = self.offering(|c| c.resources.is_some(), "resources/read")?;
        let gate = self.caller(&context.extensions).gate;
        self.decide(&gate, ReadKind::Resource, &request.uri, true)?;
        handler.read_resource(request, context).await
    }

    /// `prompts/get`: decided by the caller's gate, then got from the handler.
    pub(super) async fn prompt_gated(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let handler = self.offering(|c| c.prompts.is_some(), "prompts/get")?;
        let gate = self.caller(&context.extensions).gate;
        self.decide(&gate, ReadKind::Prompt, &request.name, true)?;
        handler.get_prompt(request, context).await
    }

    /// `completion/complete`: a completion of a prompt's argument is decided as a `prompts/get` of
    /// it is, one of a resource template's variable as its template is listed (refused where every
    /// URI it expands to would be), each before the handler completes anything; never recorded as a
    /// read.
    pub(super) async fn complete_gated(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let handler = self.offering(|c| c.completions.is_some(), "completion/complete")?;
        let gate = self.caller(&context.extensions).gate;
        match &request.r#ref {
            Reference::Prompt(prompt) => {
                self.decide(&gate, ReadKind::Prompt, &prompt.name, false)?;
            }
            Reference::Resource(resource) => {
                let template = Self::readable(&gate, ReadKind::Resource, &resource.uri)?;
                gate.decide_template(&template, self.template_risk(&resource.uri))
                    .map_err(|refusal| read_refused(refusal.code.into(), &refusal.message))?;
            }
            // A kind of reference no gate can decide is not completed.
            _ => {
                return Err(ErrorData::invalid_params(
                    "a completion of a reference this server cannot decide",
                    None,
                ));
            }
        }
        handler.complete(request, context).await
    }

    /// Whether the caller's gate would let it read `name` now; nothing is recorded.
    fn shows(&self, gate: &Gate, kind: ReadKind, name: &str) -> bool {
        ReadName::parse(kind, name)
            .is_ok_and(|read| gate.shows_read(kind, &read, self.read_risk_of(kind, &read)))
    }

    /// `resources/list`: the handler's page, without what the caller's gate would refuse, with the
    /// handler's cursor (a page may be shorter than the handler's).
    pub(super) async fn resources_for(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let handler = self.offering(|c| c.resources.is_some(), "resources/list")?;
        let gate = self.caller(&context.extensions).gate;
        let mut listed = handler.list_resources(request, context).await?;
        listed
            .resources
            .retain(|resource| self.shows(&gate, ReadKind::Resource, &resource.uri));
        Ok(listed)
    }

    /// `resources/templates/list`: the handler's page, without a template every expansion of which
    /// the caller's gate would refuse (a deny rule or a declared risk whose pattern matches whatever
    /// its variables hold); a template some expansion of which it might allow is shown, and its reads
    /// decided one by one.
    pub(super) async fn templates_for(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let handler = self.offering(|c| c.resources.is_some(), "resources/templates/list")?;
        let gate = self.caller(&context.extensions).gate;
        let mut listed = handler.list_resource_templates(request, context).await?;
        listed.resource_templates.retain(|template| {
            let written = &template.uri_template;
            ReadName::parse(ReadKind::Resource, written)
                .is_ok_and(|read| gate.shows_template(&read, self.template_risk(written)))
        });
        Ok(listed)
    }

    /// `prompts/list`: the handler's page, without what the caller's gate would refuse, with the
    /// handler's cursor.
    pub(super) async fn prompts_for(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let handler = self.offering(|c| c.prompts.is_some(), "prompts/list")?;
        let gate = self.caller(&context.extensions).gate;
        let mut listed = handler.list_prompts(request, context).await?;
        listed
            .prompts
            .retain(|prompt| self.shows(&gate, ReadKind::Prompt, &prompt.name));
        Ok(listed)
    }
}
