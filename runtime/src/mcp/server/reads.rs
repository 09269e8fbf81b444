//! The handler's resources and prompts behind the caller's gate: each read decided before the handler
//! reads it, and each list showing what the gate would let the caller read.

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

impl ToolgateServer {
    /// The risk declared for reading `name`: the highest of the declarations that reach it,
    /// READ_ONLY where none does (or where the name cannot be read, which the gate refuses anyway).
    fn read_risk_of(&self, kind: ReadKind, name: &str) -> Risk {
        let Ok(read) = ReadName::parse(kind, name) else {
            return Risk::ReadOnly;
        };
        self.read_risks
            .iter()
            .filter(|declared| declared.kind == kind && declared.pattern.matches(&read))
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
        let decided = match &request.r#ref {
            Reference::Prompt(prompt) => {
                let risk = self.read_risk_of(ReadKind::Prompt, &prompt.name);
                gate.decide_read(ReadKind::Prompt, &prompt.name, risk, false)
            }
            Reference::Resource(resource) => {
                gate.decide_template(&resource.uri, self.template_risk(&resource.uri))
            }
            // A kind of reference no gate can decide is not completed.
            _ => {
                return Err(ErrorData::invalid_params(
                    "a completion of a reference this server cannot decide",
                    None,
                ));
            }
        };
        decided.map_err(|refusal| read_refused(&refusal))?;
        handler.complete(request, context).await
    }

    /// Whether the caller's gate would let it read `name` now; nothing is recorded.
    fn shows(&self, gate: &Gate, kind: ReadKind, name: &str) -> bool {
        gate.shows_read(kind, name, self.read_risk_of(kind, name))
    }

    /// `resources/read`: decided by the caller's gate, then read by the handler.
    pub(super) async fn read_gated(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let handler = self.offering(|c| c.resources.is_some(), "resources/read")?;
        let gate = self.caller(&context.extensions).gate;
        let risk = self.read_risk_of(ReadKind::Resource, &request.uri);
        gate.decide_read(ReadKind::Resource, &request.uri, risk, true)
            .map_err(|refusal| read_refused(&refusal))?;
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
        let risk = self.read_risk_of(ReadKind::Prompt, &request.name);
        gate.decide_read(ReadKind::Prompt, &request.name, risk, true)
            .map_err(|refusal| read_refused(&refusal))?;
        handler.get_prompt(request, context).await
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
            let template = &template.uri_template;
            gate.shows_template(template, self.template_risk(template))
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
