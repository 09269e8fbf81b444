//! The server that the official MCP conformance suite tests (`tests/it/conformance.rs`): the tools,
//! prompts, resources and completions its server scenarios call for, served over rmcp's streamable
//! HTTP transport on loopback, without authentication.
//!
//! ```text
//! cargo run --example conformance --features mcp-http -- [PORT]
//! ```
//!
//! The port is the argument, else `PORT` from the environment, else any free one; the endpoint is
//! printed on stdout as one line, `http://127.0.0.1:PORT/mcp`, once the server accepts connections.
//! Then `tests/conformance/install.sh && target/conformance/conformance server --url URL
//! --spec-version 2026-07-28` runs the suite against it.
//!
//! Every tool is a method of one `#[tool_router]` impl. A tool that asks the client for input (an
//! `InputRequiredResult`, protocol 2026-07-28) answers a `CallToolResponse`; the others a
//! `CallToolResult`.

// The scenarios still exercise sampling, roots and logging, which rmcp marks deprecated (SEP-2577).
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rmcp::handler::server::router::prompt::PromptRouter;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{InputResponses, RequestState};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResponse, CallToolResult, ClientCapabilities, CompleteRequestParams, CompleteResult,
    CompletionInfo, ContentBlock, CreateMessageRequest, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
    InputRequest, InputRequests, InputRequiredResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListRootsRequest, ListRootsResult,
    LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam, Prompt,
    PromptArgument, PromptMessage, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Reference, RequestStateCodec, Resource, ResourceContents, ResourceTemplate,
    Role, SamplingMessage, ServerCapabilities, ServerConfig, SubscriptionFilter,
};
use rmcp::service::{RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::{ErrorData, RoleServer, ServerHandler, prompt, prompt_router, tool, tool_handler};
use rmcp::{schemars, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate::mcp::ToolgateServer;
use toolgate::mcp::http::{HttpService, Principals};

/// A 1x1 PNG, one green pixel.
const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR42mPQ6w4HAAH7ARFK28dFAAAAAElFTkSuQmCC";
/// A WAV of eight samples of silence, 8 kHz mono.
const WAV: &str = "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==";

/// The prompt that asks the client for input before it answers. It is served by
/// [`Fixtures::get_prompt`], not the prompt router: the router hands a prompt neither the
/// request's `inputResponses` nor `requestState`.
const INPUT_PROMPT: &str = "test_input_required_result_prompt";

#[derive(Clone)]
struct Fixtures {
    tool_router: ToolRouter<Fixtures>,
    prompt_router: PromptRouter<Fixtures>,
    /// Seals the `requestState` of the tools that ask in several rounds.
    states: RequestStateCodec,
    listeners: Listeners,
}

/// The open `subscriptions/listen` streams, which the trigger tools notify.
#[derive(Clone, Default)]
struct Listeners {
    next: Arc<AtomicU64>,
    sinks: Arc<Mutex<BTreeMap<u64, SubscriptionSink>>>,
}

impl Listeners {
    fn add(&self, sink: SubscriptionSink) -> u64 {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(key, sink);
        key
    }

    fn remove(&self, key: u64) {
        self.lock().remove(&key);
    }

    fn all(&self) -> Vec<SubscriptionSink> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, SubscriptionSink>> {
        self.sinks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The arguments of `json_schema_2020_12_tool`, whose schema uses JSON Schema 2020-12's
/// composition, conditional and anchor keywords.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend(
    "allOf" = [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if" = {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then" = {"required": ["phone"]},
    "else" = {"required": ["email"]}
))]
struct Contact {
    name: Option<String>,
    address: Option<Address>,
    contact_method: Option<ContactMethod>,
    phone: Option<String>,
    email: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "address", extend("$anchor" = "addressDef"))]
struct Address {
    street: Option<String>,
    city: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
enum ContactMethod {
    Phone,
    Email,
}

/// The argument of `test_custom_header`, which a client also sends as the `Mcp-Param-Value` header.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct HeaderValue {
    #[schemars(extend("x-mcp-header" = "Value"))]
    value: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct TwoArguments {
    /// The first argument.
    arg1: String,
    /// The second argument.
    arg2: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ResourceArgument {
    /// The URI of the resource to embed.
    resource_uri: String,
}

#[toolgate::toolset(domain = "conformance")]
#[tool_router]
impl Fixtures {
    /// Answers one text block.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_simple_text(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            "This is a simple text response for testing.",
        )]))
    }

    /// Answers one PNG image.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_image_content(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::image(
            PNG,
            "image/png",
        )]))
    }

    /// Answers one WAV clip.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_audio_content(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::audio(
            WAV,
            "audio/wav",
        )]))
    }

    /// Answers a text resource, embedded.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_embedded_resource(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::resource(
            ResourceContents::text(
                "This is an embedded resource content.",
                "test://embedded-resource",
            )
            .with_mime_type("text/plain"),
        )]))
    }

    /// Answers text, an image and an embedded resource.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_multiple_content_types(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![
            ContentBlock::text("Multiple content types test:"),
            ContentBlock::image(PNG, "image/png"),
            ContentBlock::resource(
                ResourceContents::text(
                    r#"{"test":"data","value":123}"#,
                    "test://mixed-content-resource",
                )
                .with_mime_type("application/json"),
            ),
        ]))
    }

    /// Fails, always, as a tool fails: a result marked as an error.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_error_handling(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::error(vec![ContentBlock::text(
            "This tool intentionally returns an error for testing",
        )]))
    }

    /// Reports its progress, 0, 50 and 100 of 100, to a caller that gave a progress token.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_tool_with_progress(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let token = context.meta.get_progress_token();
        for (step, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
            if step > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if let Some(token) = &token {
                let update =
                    ProgressNotificationParam::new(token.clone(), progress).with_total(100.0);
                context
                    .peer
                    .notify_progress(update)
                    .await
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(
            "progress reported: 0, 50, 100 of 100",
        )]))
    }

    /// Greets a contact; its arguments' schema uses JSON Schema 2020-12 keywords.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn json_schema_2020_12_tool(
        &self,
        Parameters(contact): Parameters<Contact>,
    ) -> Result<CallToolResult, ErrorData> {
        let name = contact.name.as_deref().unwrap_or("world");
        let how = match contact.contact_method {
            Some(ContactMethod::Phone) => contact.phone,
            Some(ContactMethod::Email) | None => contact.email,
        };
        let city = contact.address.and_then(|a| a.city.or(a.street));
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "Hello, {name}! (reached at {}, in {})",
            how.as_deref().unwrap_or("nowhere"),
            city.as_deref().unwrap_or("no city")
        ))]))
    }

    /// Echoes its argument, which a client also sends as the `Mcp-Param-Value` header.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_custom_header(
        &self,
        Parameters(HeaderValue { value }): Parameters<HeaderValue>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(value)]))
    }

    /// Needs the client's sampling capability, and refuses a client that did not declare it.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_missing_capability(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let declared = context.meta.client_capabilities().unwrap_or_default();
        if declared.sampling.is_none() {
            return Err(ErrorData::missing_required_client_capability(
                ClientCapabilities::builder().enable_sampling().build(),
            ));
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(
            "the client can sample",
        )]))
    }

    /// Asks the client for a value, in its answer: never as a request of its own.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_streaming_elicitation(&self) -> Result<CallToolResponse, ErrorData> {
        let ask = ask_string("Provide a value", "value")?;
        Ok(InputRequiredResult::from_input_requests(requests([("value", ask)])).into())
    }

    /// Logs a line at the level the request asked for, and nothing when it asked for none.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_logging_tool(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        if let Some(level) = context.meta.log_level() {
            let line =
                LoggingMessageNotificationParam::new(level, json!("the request asked for logs"))
                    .with_logger("conformance");
            context
                .peer
                .notify_logging_message(line)
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        }
        Ok(CallToolResult::success(vec![ContentBlock::text("done")]))
    }

    /// Tells every open subscription that the tool list changed.
    #[tool]
    #[toolgate(risk = "LOW_WRITE")]
    async fn test_trigger_tool_change(&self) -> Result<CallToolResult, ErrorData> {
        let mut told = 0;
        for sink in self.listeners.all() {
            // A stream that did not ask for tool-list changes refuses the notification.
            if sink.notify_tool_list_changed().await.is_ok() {
                told += 1;
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "{told} subscriptions told that the tool list changed"
        ))]))
    }

    /// Tells every open subscription that the prompt list changed.
    #[tool]
    #[toolgate(risk = "LOW_WRITE")]
    async fn test_trigger_prompt_change(&self) -> Result<CallToolResult, ErrorData> {
        let mut told = 0;
        for sink in self.listeners.all() {
            if sink.notify_prompt_list_changed().await.is_ok() {
                told += 1;
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "{told} subscriptions told that the prompt list changed"
        ))]))
    }

    /// Asks the user's name, then greets them.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_input_required_result_elicitation(
        &self,
        InputResponses(answers): InputResponses,
    ) -> Result<CallToolResponse, ErrorData> {
        match accepted_field(answers.as_ref(), "user_name", "name") {
            Some(name) => Ok(text_response(format!("Hello, {name}!"))),
            None => {
                let ask = ask_string("What is your name?", "name")?;
                Ok(InputRequiredResult::from_input_requests(requests([("user_name", ask)])).into())
            }
        }
    }

    /// Asks the client's model a question, then answers what it said.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_input_required_result_sampling(
        &self,
        InputResponses(answers): InputResponses,
    ) -> Result<CallToolResponse, ErrorData> {
        match sampled_text(answers.as_ref(), "capital_question") {
            Some(text) => Ok(text_response(format!("The model said: {text}"))),
            None => {
                let ask = ask_model("What is the capital of France?", 100);
                Ok(
                    InputRequiredResult::from_input_requests(requests([("capital_question", ask)]))
                        .into(),
                )
            }
        }
    }

    /// Asks the client's roots, then lists them.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_input_required_result_list_roots(
        &self,
        InputResponses(answers): InputResponses,
    ) -> Result<CallToolResponse, ErrorData> {
        match roots(answers.as_ref(), "client_roots") {
            Some(roots) => Ok(text_response(format!("Client roots: {}", roots.join(", ")))),
            None => {
                let ask = InputRequest::ListRoots(ListRootsRequest::default());
                Ok(
                    InputRequiredResult::from_input_requests(requests([("client_roots", ask)]))
                        .into(),
                )
            }
        }
    }

    /// Asks for a confirmation, with a sealed request state that it checks on the way back.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_input_required_result_request_state(
        &self,
        InputResponses(answers): InputResponses,
        RequestState(state): RequestState,
    ) -> Result<CallToolResponse, ErrorData> {
        self.confirm(answers, state)
    }

    /// As `test_input_required_result_request_state`: a client that alters the state is refused.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_input_required_result_tampered_state(
        &self,
        InputResponses(answers): InputResponses,
        RequestState(state): RequestState,
    ) -> Result<CallToolResponse, ErrorData> {
        self.confirm(answers, state)
    }

    /// Asks three things at once (the user, the model, the roots), then sums up.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_input_required_result_multiple_inputs(
        &self,
        InputResponses(answers): InputResponses,
        RequestState(state): RequestState,
    ) -> Result<CallToolResponse, ErrorData> {
        let opened: Option<Value> = state.as_deref().map(|s| self.open(s)).transpose()?;
        let answers = answers.as_ref();
        let name = accepted_field(answers, "user_name", "name");
        let greeting = sampled_text(answers, "greeting");
        let roots = roots(answers, "client_roots");
        if let (Some(_), Some(name), Some(greeting), Some(roots)) = (opened, name, greeting, roots)
        {
            return Ok(text_response(format!(
                "{greeting} {name}, your roots are {}",
                roots.join(", ")
            )));
        }
        let asks = requests([
            ("user_name", ask_string("What is your name?", "name")?),
            ("greeting", ask_model("Generate a greeting", 50)),
            (
                "client_roots",
                InputRequest::ListRoots(ListRootsRequest::default()),
            ),
        ]);
        let state = self.seal(&json!({"asked": "name, greeting, roots"}))?;
        Ok(InputRequiredResult::new(Some(asks), Some(state)).into())
    }

    /// Asks a name, then a colour, each round with a new sealed state, then answers.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_input_required_result_multi_round(
        &self,
        InputResponses(answers): InputResponses,
        RequestState(state): RequestState,
    ) -> Result<CallToolResponse, ErrorData> {
        let (round, name) = match state.as_deref() {
            None => (0, None),
            Some(sealed) => {
                let state = self.open(sealed)?;
                let round = state["round"].as_u64().unwrap_or(0);
                (round, state["name"].as_str().map(str::to_owned))
            }
        };
        let answers = answers.as_ref();
        match round {
            0 => self.ask_round(1, None, "step1", "Step 1: What is your name?", "name"),
            1 => match accepted_field(answers, "step1", "name") {
                Some(name) => self.ask_round(
                    2,
                    Some(&name),
                    "step2",
                    "Step 2: What is your favorite color?",
                    "color",
                ),
                None => self.ask_round(1, None, "step1", "Step 1: What is your name?", "name"),
            },
            _ => match accepted_field(answers, "step2", "color") {
                Some(color) => Ok(text_response(format!(
                    "{} likes {color}",
                    name.as_deref().unwrap_or("someone")
                ))),
                None => self.ask_round(
                    2,
                    name.as_deref(),
                    "step2",
                    "Step 2: What is your favorite color?",
                    "color",
                ),
            },
        }
    }

    /// Asks for what the client declared it can give, and for nothing else.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    async fn test_input_required_result_capabilities(
        &self,
        InputResponses(answers): InputResponses,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if answers.is_some_and(|answers| !answers.is_empty()) {
            return Ok(text_response("thanks for the answers"));
        }
        let declared = context.meta.client_capabilities().unwrap_or_default();
        let mut asks = InputRequests::new();
        if declared.elicitation.is_some() {
            asks.insert(
                "user_name".into(),
                ask_string("What is your name?", "name")?,
            );
        }
        if declared.sampling.is_some() {
            asks.insert("greeting".into(), ask_model("Generate a greeting", 50));
        }
        if declared.roots.is_some() {
            asks.insert(
                "client_roots".into(),
                InputRequest::ListRoots(ListRootsRequest::default()),
            );
        }
        if asks.is_empty() {
            return Ok(text_response("the client declared nothing to ask for"));
        }
        Ok(InputRequiredResult::from_input_requests(asks).into())
    }
}

impl Fixtures {
    fn new(state_key: Vec<u8>) -> Fixtures {
        Fixtures {
            tool_router: Self::tool_router(),
            prompt_router: Self::prompt_router(),
            states: RequestStateCodec::new_unchecked(state_key),
            listeners: Listeners::default(),
        }
    }

    fn seal(&self, state: &Value) -> Result<String, ErrorData> {
        self.states
            .seal_json(state)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    /// The state a client echoed, if it is one this server sealed.
    fn open(&self, sealed: &str) -> Result<Value, ErrorData> {
        self.states.open_json(sealed).map_err(|_| {
            ErrorData::invalid_params("requestState is not one this server issued", None)
        })
    }

    fn confirm(
        &self,
        answers: Option<rmcp::model::InputResponses>,
        state: Option<String>,
    ) -> Result<CallToolResponse, ErrorData> {
        let opened = state.as_deref().map(|s| self.open(s)).transpose()?;
        let ok = accepted(answers.as_ref(), "confirm").and_then(|content| content["ok"].as_bool());
        match (opened, ok) {
            (Some(_), Some(ok)) => Ok(text_response(format!("state-ok: confirmed {ok}"))),
            _ => {
                let schema = ElicitationSchema::builder()
                    .required_bool("ok")
                    .build()
                    .map_err(|e| ErrorData::internal_error(e, None))?;
                let asks = requests([("confirm", ask_form("Please confirm", schema))]);
                let state = self.seal(&json!({"asked": "confirm"}))?;
                Ok(InputRequiredResult::new(Some(asks), Some(state)).into())
            }
        }
    }

    fn ask_round(
        &self,
        round: u64,
        name: Option<&str>,
        key: &str,
        message: &str,
        field: &str,
    ) -> Result<CallToolResponse, ErrorData> {
        let asks = requests([(key, ask_string(message, field)?)]);
        let state = self.seal(&json!({"round": round, "name": name}))?;
        Ok(InputRequiredResult::new(Some(asks), Some(state)).into())
    }

    fn input_prompt(&self, request: GetPromptRequestParams) -> GetPromptResponse {
        match accepted_field(request.input_responses.as_ref(), "user_context", "context") {
            Some(context) => GetPromptResult::new(vec![PromptMessage::new_text(
                Role::User,
                format!("Answer with this context in mind: {context}"),
            )])
            .into(),
            None => match ask_string("What context should the prompt use?", "context") {
                Ok(ask) => {
                    InputRequiredResult::from_input_requests(requests([("user_context", ask)]))
                        .into()
                }
                Err(_) => GetPromptResult::new(vec![]).into(),
            },
        }
    }
}

#[prompt_router]
impl Fixtures {
    /// A prompt without arguments.
    #[prompt]
    async fn test_simple_prompt(&self) -> Vec<PromptMessage> {
        vec![PromptMessage::new_text(
            Role::User,
            "This is a simple prompt for testing.",
        )]
    }

    /// A prompt with two arguments, both written into it.
    #[prompt]
    async fn test_prompt_with_arguments(
        &self,
        Parameters(TwoArguments { arg1, arg2 }): Parameters<TwoArguments>,
    ) -> Vec<PromptMessage> {
        vec![PromptMessage::new_text(
            Role::User,
            format!("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"),
        )]
    }

    /// A prompt that embeds the resource it is given.
    #[prompt]
    async fn test_prompt_with_embedded_resource(
        &self,
        Parameters(ResourceArgument { resource_uri }): Parameters<ResourceArgument>,
    ) -> Vec<PromptMessage> {
        vec![
            PromptMessage::new(
                Role::User,
                ContentBlock::resource(
                    ResourceContents::text("Embedded resource content for testing.", resource_uri)
                        .with_mime_type("text/plain"),
                ),
            ),
            PromptMessage::new_text(Role::User, "Please process the embedded resource above."),
        ]
    }

    /// A prompt with an image.
    #[prompt]
    async fn test_prompt_with_image(&self) -> Vec<PromptMessage> {
        vec![
            PromptMessage::new(Role::User, ContentBlock::image(PNG, "image/png")),
            PromptMessage::new_text(Role::User, "Please analyze the image above."),
        ]
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Fixtures {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_completions()
                .build(),
        )
        .with_server_info(Implementation::new(
            "toolgate-conformance",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions("The fixtures of the MCP conformance suite's server scenarios.")
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let mut prompts = self.prompt_router.list_all();
        prompts.push(Prompt::new(
            INPUT_PROMPT,
            Some("A prompt that asks the client for context before it answers."),
            None::<Vec<PromptArgument>>,
        ));
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name == INPUT_PROMPT {
            return Ok(self.input_prompt(request));
        }
        let prompt = rmcp::handler::server::prompt::PromptContext::new(
            self,
            request.name,
            request.arguments,
            context,
        );
        self.prompt_router.get_prompt(prompt).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new("test://static-text", "static-text")
                .with_description("A text resource that never changes.")
                .with_mime_type("text/plain"),
            Resource::new("test://static-binary", "static-binary")
                .with_description("A PNG image that never changes.")
                .with_mime_type("image/png"),
        ]))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("test://template/{id}/data", "template-data")
                .with_description("The data of one id, as JSON.")
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let contents = match uri.as_str() {
            "test://static-text" => ResourceContents::text(
                "This is the content of the static text resource.",
                uri.clone(),
            )
            .with_mime_type("text/plain"),
            "test://static-binary" => {
                ResourceContents::blob(PNG, uri.clone()).with_mime_type("image/png")
            }
            other => match template_id(other) {
                Some(id) => ResourceContents::text(
                    json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")})
                        .to_string(),
                    uri.clone(),
                )
                .with_mime_type("application/json"),
                None => {
                    return Err(ErrorData::resource_not_found(
                        "Resource not found",
                        Some(json!({"uri": uri})),
                    ));
                }
            },
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let candidates: &[&str] = match &request.r#ref {
            Reference::Prompt(prompt) if prompt.name == "test_prompt_with_arguments" => {
                &["paris", "park", "party", "test", "testing"]
            }
            _ => &[],
        };
        let typed = request.argument.value.as_str();
        let values = candidates
            .iter()
            .filter(|candidate| candidate.starts_with(typed))
            .map(|candidate| (*candidate).to_owned())
            .collect();
        let completion =
            CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(CompleteResult::new(completion))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        let key = self.listeners.add(subscription.sink().clone());
        subscription.cancelled().await;
        self.listeners.remove(key);
        Ok(())
    }
}

/// The `{id}` of `test://template/{id}/data`.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri
        .strip_prefix("test://template/")?
        .strip_suffix("/data")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

fn text_response(text: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text)]).into()
}

fn requests<const N: usize>(asks: [(&str, InputRequest); N]) -> InputRequests {
    asks.into_iter()
        .map(|(key, ask)| (key.to_owned(), ask))
        .collect()
}

fn ask_form(message: &str, schema: ElicitationSchema) -> InputRequest {
    InputRequest::Elicitation(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message.to_owned(),
            requested_schema: schema,
        },
    ))
}

/// Asks the user for one string, `field`.
fn ask_string(message: &str, field: &str) -> Result<InputRequest, ErrorData> {
    let schema = ElicitationSchema::builder()
        .required_string(field)
        .build()
        .map_err(|e| ErrorData::internal_error(e, None))?;
    Ok(ask_form(message, schema))
}

fn ask_model(question: &str, max_tokens: u32) -> InputRequest {
    InputRequest::CreateMessage(CreateMessageRequest::new(CreateMessageRequestParams::new(
        vec![SamplingMessage::user_text(question)],
        max_tokens,
    )))
}

/// The content of the elicitation answered under `key`, if the user accepted it.
fn accepted(answers: Option<&rmcp::model::InputResponses>, key: &str) -> Option<Value> {
    let answer: ElicitResult = serde_json::from_value(answers?.get(key)?.clone()).ok()?;
    match answer.action {
        ElicitationAction::Accept => answer.content,
        _ => None,
    }
}

/// The string `field` of the elicitation answered under `key`.
fn accepted_field(
    answers: Option<&rmcp::model::InputResponses>,
    key: &str,
    field: &str,
) -> Option<String> {
    accepted(answers, key)?[field].as_str().map(str::to_owned)
}

/// The text the client's model answered under `key`.
fn sampled_text(answers: Option<&rmcp::model::InputResponses>, key: &str) -> Option<String> {
    let answer: CreateMessageResult = serde_json::from_value(answers?.get(key)?.clone()).ok()?;
    let text = answer.message.content.first()?.as_text()?;
    Some(text.text.clone())
}

/// The URIs of the roots the client answered under `key`.
fn roots(answers: Option<&rmcp::model::InputResponses>, key: &str) -> Option<Vec<String>> {
    let answer: ListRootsResult = serde_json::from_value(answers?.get(key)?.clone()).ok()?;
    Some(answer.roots.into_iter().map(|root| root.uri).collect())
}

/// The port to listen on: the first argument, else `PORT`, else 0 (any free port).
fn port() -> Result<u16, String> {
    let given = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("PORT").ok());
    match given {
        None => Ok(0),
        Some(port) => port
            .parse()
            .map_err(|_| format!("`{port}` is not a port number")),
    }
}

async fn serve(port: u16) -> Result<(), Box<dyn std::error::Error>> {
    let mut key = vec![0; RequestStateCodec::MIN_KEY_LENGTH];
    getrandom::fill(&mut key)?;
    let fixtures = Fixtures::new(key);
    // Every tool of the fixtures is decided by this gate before rmcp's router runs it.
    let gate = toolgate::Gate::builder()
        .mode(toolgate::Mode::PartialAuto)
        .principal("conformance")
        .build()?;
    let server = ToolgateServer::new(gate.clone()).handler(fixtures);
    // The suite sends no token: every request is the one anonymous principal.
    let principals = Principals::new().anonymous("conformance", gate);
    let service = HttpService::new(server, principals, StreamableHttpServerConfig::default());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "http://{}/mcp", listener.local_addr()?)?;
    stdout.flush()?;
    loop {
        let (stream, _) = listener.accept().await?;
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let served = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                eprintln!("conformance: a connection failed: {error}");
            }
        });
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let served = match port() {
        Ok(port) => serve(port).await,
        Err(error) => Err(error.into()),
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("conformance: {error}");
            ExitCode::FAILURE
        }
    }
}
