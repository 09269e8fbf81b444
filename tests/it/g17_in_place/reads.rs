//! The resources and prompts of an rmcp handler served by a `ToolgateServer`: each `resources/read`
//! and `prompts/get` decided by the caller's gate before the handler reads it (a risk declared on
//! the server, the operator's `deny_resources` and `deny_prompts` by principal and defaults), the
//! reads the policy asks for recorded first, and every list showing only what the gate would allow,
//! a page at a time with the handler's cursor.

#![cfg(all(feature = "mcp", feature = "policy-file"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::model::{
    ArgumentInfo, CompleteRequestParams, CompleteResult, CompletionInfo, GetPromptRequestParams,
    GetPromptResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, Prompt, PromptMessage, ReadResourceRequestParams, ReadResourceResult,
    Reference, Resource, ResourceContents, ResourceTemplate, Role, ServerCapabilities,
    ServerConfig, SubscriptionFilter,
};
use rmcp::service::{
    RequestContext, RoleClient, RunningService, ServiceError, SubscriptionContext,
};
use rmcp::{ClientHandler, ErrorData, RoleServer, ServerHandler, ServiceExt};
use toolgate::audit::{AuditRecord, Decision, MemorySink, Stage};
use toolgate::mcp::{REFUSED, ToolgateServer};
use toolgate::policy_file::{LivePolicy, PolicyFile};
use toolgate::{Gate, Mode, Risk};

use super::rmcp_handler::{connect, runtime};

/// A cloud's inventory, runbook, secrets and status as resources, in two pages; templates; and two
/// prompts. It counts what it was asked to read.
#[derive(Clone, Default)]
struct Cloud {
    reads: Arc<AtomicUsize>,
    gets: Arc<AtomicUsize>,
    completions: Arc<AtomicUsize>,
}

impl ServerHandler for Cloud {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_completions()
                .build(),
        )
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.completions.fetch_add(1, Ordering::SeqCst);
        Ok(CompleteResult::new(
            CompletionInfo::new(vec!["eu".into()]).expect("one value"),
        ))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let second = request.and_then(|r| r.cursor).as_deref() == Some("2");
        let (uris, next) = if second {
            (["cloud://secrets/db", "cloud://status"], None)
        } else {
            (
                ["cloud://inventory", "cloud://runbook"],
                Some("2".to_owned()),
            )
        };
        let mut page = ListResourcesResult::with_all_items(
            uris.iter().map(|uri| Resource::new(*uri, *uri)).collect(),
        );
        page.next_cursor = next;
        Ok(page)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            [
                "cloud://inventory/{region}",
                "cloud://logs/{id}",
                "cloud://secrets/{name}",
                "cloud://{anything}",
            ]
            .iter()
            .map(|t| ResourceTemplate::new(*t, *t))
            .collect(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(ReadResourceResult::new(vec![ResourceContents::text(
            "web-1, web-2, db-1",
            request.uri,
        )])
        .into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![
            Prompt::new("triage", Some("Triage an incident."), None),
            Prompt::new("incident-report", Some("Write the report."), None),
        ]))
    }

    async fn get_prompt(
        &self,
        _request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, "What broke?")]).into())
    }
}

fn policy(text: &str) -> PolicyFile {
    PolicyFile::parse("ops.toml", text).unwrap_or_else(|e| panic!("{e}"))
}

/// A gate in `mode` for `principal`, following `live`, recording into `sink`.
fn gate(mode: Mode, principal: &str, live: &LivePolicy, sink: &MemorySink) -> Gate {
    Gate::builder()
        .mode(mode)
        .principal(principal)
        .policy(live.clone())
        .audit(sink.clone())
        .two_step_approvals()
        .build()
        .expect("a gate")
}

/// `Ok` where the handler's content came back, else the refusal's code, checked to be shaped as a
/// refusal is: `REFUSED`, `"<CODE>: <message>"`, `{"code", "message"}`.
async fn read(client: &RunningService<RoleClient, ()>, uri: &str) -> Result<(), String> {
    match client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
    {
        Ok(result) => {
            assert_eq!(result.contents.len(), 1);
            Ok(())
        }
        Err(error) => Err(refusal_code(error)),
    }
}

async fn get(client: &RunningService<RoleClient, ()>, name: &str) -> Result<(), String> {
    match client.get_prompt(GetPromptRequestParams::new(name)).await {
        Ok(_) => Ok(()),
        Err(error) => Err(refusal_code(error)),
    }
}

fn refusal_code(error: ServiceError) -> String {
    let ServiceError::McpError(error) = error else {
        panic!("a protocol error, not {error:?}");
    };
    assert_eq!(error.code, REFUSED, "{error:?}");
    let data = error.data.expect("the refusal's data");
    let code = data["code"].as_str().expect("a code").to_owned();
    let message = data["message"].as_str().expect("a message");
    assert_eq!(error.message, format!("{code}: {message}"));
    code
}

fn sha256(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn refused_records(sink: &MemorySink) -> Vec<AuditRecord> {
    sink.records()
        .into_iter()
        .filter(|r| r.stage == Stage::Refused)
        .collect()
}

const DENIES: &str = r#"format = 1

[defaults]
deny_prompts = ["incident-*"]

[principals.alice]
deny_resources = ["cloud://inventory*"]
deny_prompts = ["triage"]
"#;

#[test]
fn what_the_policy_denies_a_principal_is_refused_before_the_handler_reads_it() {
    runtime().block_on(async {
        let live = LivePolicy::new(policy(DENIES));
        let cloud = Cloud::default();
        let alice_log = MemorySink::new();
        let alice = gate(Mode::FullAuto, "alice", &live, &alice_log);
        let client = connect(ToolgateServer::new(alice).handler(cloud.clone())).await;

        assert_eq!(
            read(&client, "cloud://inventory").await,
            Err("DENY_LISTED".into())
        );
        assert_eq!(
            read(&client, "cloud://inventory/eu").await,
            Err("DENY_LISTED".into())
        );
        // The same resource spelled otherwise, and a look-alike of the denied prompt.
        for uri in [
            "CLOUD://inventory",
            "cloud://%69nventory",
            "cloud://runbook/../inventory",
            "cloud://\u{456}nventory",
        ] {
            assert_eq!(read(&client, uri).await, Err("DENY_LISTED".into()), "{uri}");
        }
        assert_eq!(get(&client, "triage").await, Err("DENY_LISTED".into()));
        assert_eq!(
            get(&client, "tri\u{430}ge").await,
            Err("DENY_LISTED".into())
        );
        // `[defaults]` reaches every gate.
        assert_eq!(
            get(&client, "incident-report").await,
            Err("DENY_LISTED".into())
        );
        assert_eq!(
            cloud.reads.load(Ordering::SeqCst),
            0,
            "the handler never read"
        );
        assert_eq!(
            cloud.gets.load(Ordering::SeqCst),
            0,
            "the handler never got"
        );
        assert_eq!(read(&client, "cloud://runbook").await, Ok(()));
        assert_eq!(cloud.reads.load(Ordering::SeqCst), 1);

        // Each refusal is recorded as a tool's is, naming the rule.
        let refused = refused_records(&alice_log);
        assert_eq!(refused.len(), 9, "{refused:#?}");
        let first = &refused[0];
        assert_eq!(first.tool, "resource:cloud://inventory");
        assert_eq!(first.code.as_deref(), Some("DENY_LISTED"));
        assert_eq!(first.decision, Some(Decision::Refused));
        assert_eq!(first.principal.as_deref(), Some("alice"));
        let message = first.message.as_deref().unwrap();
        assert!(
            message.contains("deny_resources \"cloud://inventory*\" (ops.toml:7:19)"),
            "{message}"
        );

        // Bob has no table of his own: only `[defaults]` narrows him.
        let bob_log = MemorySink::new();
        let bob = gate(Mode::FullAuto, "bob", &live, &bob_log);
        let client = connect(ToolgateServer::new(bob).handler(cloud.clone())).await;
        assert_eq!(read(&client, "cloud://inventory").await, Ok(()));
        assert_eq!(get(&client, "triage").await, Ok(()));
        assert_eq!(
            get(&client, "incident-report").await,
            Err("DENY_LISTED".into())
        );
        assert_eq!(cloud.reads.load(Ordering::SeqCst), 2);
        assert_eq!(cloud.gets.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_read_above_the_mode_s_ceiling_or_needing_an_approval_is_refused() {
    runtime().block_on(async {
        let cloud = Cloud::default();
        let server = |mode: Mode, sink: &MemorySink| {
            ToolgateServer::new(gate(mode, "ops", &LivePolicy::none(), sink))
                .handler(cloud.clone())
                .resource_risk("cloud://*", Risk::LowWrite)
                .resource_risk("cloud://secrets/*", Risk::HighWrite)
                .resource_risk("cloud://runbook", Risk::ReadOnly)
                .prompt_risk("incident-*", Risk::LowWrite)
        };
        let log = MemorySink::new();
        let client = connect(server(Mode::Shadow, &log)).await;
        // The highest declared risk that reaches a URI is its risk: `cloud://runbook` is LOW_WRITE.
        assert_eq!(
            read(&client, "cloud://runbook").await,
            Err("ABOVE_CEILING".into())
        );
        assert_eq!(
            get(&client, "incident-report").await,
            Err("ABOVE_CEILING".into())
        );
        // An undeclared prompt is READ_ONLY.
        assert_eq!(get(&client, "triage").await, Ok(()));
        let refused = refused_records(&log);
        assert_eq!(refused[0].declared_risk, Some(Risk::LowWrite));
        assert_eq!(refused[0].code.as_deref(), Some("ABOVE_CEILING"));

        let client = connect(server(Mode::PartialAuto, &MemorySink::new())).await;
        assert_eq!(read(&client, "cloud://runbook").await, Ok(()));
        assert_eq!(get(&client, "incident-report").await, Ok(()));
        assert_eq!(
            read(&client, "cloud://secrets/db").await,
            Err("ABOVE_CEILING".into())
        );

        // In FULL_AUTO a HIGH_WRITE read needs an approval, and reads have no approval flow, even for
        // a gate that takes two-step approvals.
        let client = connect(server(Mode::FullAuto, &MemorySink::new())).await;
        assert_eq!(
            read(&client, "cloud://secrets/db").await,
            Err("APPROVAL_REQUIRED".into())
        );
        assert_eq!(
            cloud.reads.load(Ordering::SeqCst),
            1,
            "only the allowed read ran"
        );
        assert_eq!(cloud.gets.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn a_uri_or_name_with_what_a_reader_cannot_see_is_refused_unread() {
    runtime().block_on(async {
        let cloud = Cloud::default();
        let log = MemorySink::new();
        let gate = gate(Mode::FullAuto, "ops", &LivePolicy::none(), &log);
        let client = connect(ToolgateServer::new(gate).handler(cloud.clone())).await;
        for uri in [
            "cloud://inven\u{200b}tory",
            "cloud://inventory\u{202e}",
            "cloud://inventory%E2%80%8B",
        ] {
            assert_eq!(
                read(&client, uri).await,
                Err("UNREADABLE_NAME".into()),
                "{uri:?}"
            );
        }
        assert_eq!(
            get(&client, "tri\u{2066}age").await,
            Err("UNREADABLE_NAME".into())
        );
        assert_eq!(cloud.reads.load(Ordering::SeqCst), 0);
        assert_eq!(cloud.gets.load(Ordering::SeqCst), 0);
        // The record has the text's digest, never the text.
        let refused = refused_records(&log);
        assert_eq!(refused.len(), 4);
        assert_eq!(refused[0].tool, "resource:(unreadable)");
        assert!(!refused[0].message.as_deref().unwrap().contains("inven"));
    });
}

#[test]
fn a_read_the_policy_records_is_written_first_and_refused_where_the_log_cannot() {
    runtime().block_on(async {
        let live = LivePolicy::new(policy(
            "format = 1\n[defaults]\nrecord_resources = [\"cloud://inventory*\"]\nrecord_prompts = [\"triage\"]\n",
        ));
        let cloud = Cloud::default();
        let log = MemorySink::new();
        let gate = gate(Mode::Shadow, "ops", &live, &log);
        let client = connect(ToolgateServer::new(gate).handler(cloud.clone())).await;

        assert_eq!(read(&client, "cloud://inventory").await, Ok(()));
        assert_eq!(get(&client, "triage").await, Ok(()));
        assert_eq!(read(&client, "cloud://runbook").await, Ok(()));
        let reads: Vec<AuditRecord> = log
            .records()
            .into_iter()
            .filter(|r| r.stage == Stage::Read)
            .collect();
        assert_eq!(reads.len(), 2, "only what the policy asks for: {reads:#?}");
        assert_eq!(reads[0].tool, "resource:cloud://inventory");
        assert_eq!(reads[0].decision, Some(Decision::Allowed));
        assert_eq!(reads[0].declared_risk, Some(Risk::ReadOnly));
        assert!(reads[0].policy_digest.is_some());
        assert_eq!(
            reads[0].arguments_digest.as_deref(),
            Some(sha256("cloud://inventory").as_str())
        );
        assert_eq!(reads[1].tool, "prompt:triage");

        // A URI's query and fragment may carry what a log must not hold: the record names the URI
        // without them, with the whole URI's digest.
        let uri = "cloud://inventory/eu?token=s3cr3t#top";
        assert_eq!(read(&client, uri).await, Ok(()));
        let last = log.records().pop().expect("a record");
        assert_eq!(last.stage, Stage::Read);
        assert_eq!(last.tool, "resource:cloud://inventory/eu");
        assert!(!format!("{last:?}").contains("s3cr3t"), "{last:?}");
        assert_eq!(last.arguments_digest.as_deref(), Some(sha256(uri).as_str()));

        // A log that cannot write the record stops the read; a read it need not record still runs.
        log.fail(true);
        assert_eq!(
            read(&client, "cloud://inventory").await,
            Err("AUDIT_UNAVAILABLE".into())
        );
        assert_eq!(get(&client, "triage").await, Err("AUDIT_UNAVAILABLE".into()));
        assert_eq!(cloud.reads.load(Ordering::SeqCst), 3);
        assert_eq!(cloud.gets.load(Ordering::SeqCst), 1);
        assert_eq!(read(&client, "cloud://runbook").await, Ok(()));
        assert_eq!(cloud.reads.load(Ordering::SeqCst), 4);
    });
}

fn uris(resources: &[Resource]) -> Vec<&str> {
    resources.iter().map(|r| r.uri.as_str()).collect()
}

#[test]
fn lists_hide_what_the_gate_would_refuse_a_page_at_a_time() {
    runtime().block_on(async {
        let live = LivePolicy::new(policy(
            "format = 1\n[principals.alice]\ndeny_resources = [\"cloud://inventory*\"]\n",
        ));
        let gate = gate(Mode::PartialAuto, "alice", &live, &MemorySink::new());
        let server = ToolgateServer::new(gate)
            .handler(Cloud::default())
            .resource_risk("cloud://secrets/*", Risk::HighWrite)
            .prompt_risk("incident-*", Risk::HighWrite);
        let client = connect(server).await;

        let first = client.list_resources(None).await.expect("a page");
        assert_eq!(uris(&first.resources), ["cloud://runbook"]);
        assert_eq!(
            first.next_cursor.as_deref(),
            Some("2"),
            "the handler's cursor"
        );
        let second = client
            .list_resources(Some(
                PaginatedRequestParams::default().with_cursor(first.next_cursor),
            ))
            .await
            .expect("a page");
        assert_eq!(uris(&second.resources), ["cloud://status"]);
        assert_eq!(second.next_cursor, None);

        // A template is hidden only where every expansion would be refused.
        let templates = client.list_all_resource_templates().await.expect("a list");
        let shown: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
        assert_eq!(shown, ["cloud://logs/{id}", "cloud://{anything}"]);

        let prompts = client.list_all_prompts().await.expect("a list");
        let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["triage"]);
    });
}

#[test]
fn a_policy_replaced_live_decides_the_next_read_and_list() {
    runtime().block_on(async {
        let live = LivePolicy::new(policy("format = 1\n[defaults]\nceiling = \"FULL_AUTO\"\n"));
        let cloud = Cloud::default();
        let gate = gate(Mode::FullAuto, "alice", &live, &MemorySink::new());
        let client = connect(ToolgateServer::new(gate).handler(cloud.clone())).await;
        assert_eq!(read(&client, "cloud://inventory").await, Ok(()));

        live.replace(
            policy("format = 1\n[principals.alice]\ndeny_resources = [\"cloud://inventory\"]\n"),
            "ops",
        );
        assert_eq!(
            read(&client, "cloud://inventory").await,
            Err("DENY_LISTED".into())
        );
        let listed = client.list_all_resources().await.expect("a list");
        assert!(!uris(&listed).contains(&"cloud://inventory"), "{listed:?}");

        live.replace(policy("format = 1\n"), "ops");
        assert_eq!(read(&client, "cloud://inventory").await, Ok(()));
        assert_eq!(cloud.reads.load(Ordering::SeqCst), 2);
    });
}

/// A client that hears which lists changed.
struct Heard(tokio::sync::mpsc::UnboundedSender<&'static str>);

impl ClientHandler for Heard {
    async fn on_resource_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send("resources");
    }

    async fn on_prompt_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send("prompts");
    }
}

#[test]
fn a_new_policy_tells_the_client_that_the_lists_of_resources_and_prompts_changed() {
    runtime().block_on(async {
        let live = LivePolicy::new(policy("format = 1\n"));
        let gate = gate(Mode::FullAuto, "alice", &live, &MemorySink::new());
        let server = ToolgateServer::new(gate)
            .handler(Cloud::default())
            .mode_poll(Duration::from_millis(10));
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            if let Ok(running) = server.serve(tokio::io::split(server_io)).await {
                let _ = running.waiting().await;
            }
        });
        let (tx, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let client = Heard(tx)
            .serve(tokio::io::split(client_io))
            .await
            .expect("connects");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(heard.try_recv().is_err(), "nothing changed yet");

        live.replace(
            policy("format = 1\n[principals.alice]\ndeny_resources = [\"cloud://inventory\"]\n"),
            "ops",
        );
        let mut lists = Vec::new();
        while lists.len() < 2 {
            let list = tokio::time::timeout(Duration::from_secs(5), heard.recv())
                .await
                .expect("told in time")
                .expect("a list");
            lists.push(list);
        }
        lists.sort_unstable();
        assert_eq!(lists, ["prompts", "resources"]);
        let listed = client.list_all_resources().await.expect("a list");
        assert!(!uris(&listed).contains(&"cloud://inventory"));
    });
}

#[test]
fn a_completion_of_a_refused_prompt_or_template_is_refused_before_the_handler_completes() {
    runtime().block_on(async {
        let live = LivePolicy::new(policy(DENIES));
        let cloud = Cloud::default();
        let log = MemorySink::new();
        let gate = gate(Mode::PartialAuto, "alice", &live, &log);
        let server = ToolgateServer::new(gate)
            .handler(cloud.clone())
            .resource_risk("cloud://secrets/*", Risk::HighWrite);
        let client = connect(server).await;
        let complete = |reference: Reference| {
            let client = &client;
            async move {
                let params =
                    CompleteRequestParams::new(reference, ArgumentInfo::new("region", "e"));
                client
                    .complete(params)
                    .await
                    .map(drop)
                    .map_err(refusal_code)
            }
        };
        assert_eq!(
            complete(Reference::for_prompt("triage")).await,
            Err("DENY_LISTED".into())
        );
        assert_eq!(
            complete(Reference::for_resource("cloud://inventory/{region}")).await,
            Err("DENY_LISTED".into())
        );
        assert_eq!(
            complete(Reference::for_resource("cloud://secrets/{name}")).await,
            Err("ABOVE_CEILING".into())
        );
        assert_eq!(cloud.completions.load(Ordering::SeqCst), 0);
        assert_eq!(
            complete(Reference::for_resource("cloud://{anything}")).await,
            Ok(())
        );
        assert_eq!(complete(Reference::for_prompt("summary")).await, Ok(()));
        assert_eq!(cloud.completions.load(Ordering::SeqCst), 2);
        assert_eq!(refused_records(&log).len(), 3);
        assert!(log.records().iter().all(|r| r.stage != Stage::Read));
    });
}

/// A handler that accepts subscriptions to resource updates and counts the ones it was handed.
#[derive(Clone, Default)]
struct Watcher {
    listens: Arc<AtomicUsize>,
}

impl ServerHandler for Watcher {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.listens.fetch_add(1, Ordering::SeqCst);
        context.cancelled().await;
        Ok(())
    }
}

/// Updates of a resource say when it changes: a subscription naming a resource the caller's gate would
/// not let it read is refused, with the read's code, before the handler listens; one naming only
/// resources it may read reaches the handler.
#[test]
fn a_subscription_to_a_resource_the_gate_refuses_is_refused_before_the_handler_listens() {
    runtime().block_on(async {
        let watcher = Watcher::default();
        let server = ToolgateServer::new(Gate::new(Mode::PartialAuto).unwrap())
            .handler(watcher.clone())
            .resource_risk("cloud://secrets/*", Risk::HighWrite);
        // Subscriptions are of the 2026-07-28 protocol.
        let client = crate::fixtures::handlers::connect(server).await;
        let refused = SubscriptionFilter::builder()
            .resource_subscriptions(["cloud://runbook", "cloud://secrets/db"])
            .build();
        let mut subscription = client.listen(refused).await.expect("acknowledged");
        let ended = tokio::time::timeout(Duration::from_secs(10), subscription.next())
            .await
            .expect("ended in time");
        assert_eq!(refusal_code(ended.expect_err("refused")), "ABOVE_CEILING");
        assert_eq!(watcher.listens.load(Ordering::SeqCst), 0);

        let allowed = SubscriptionFilter::builder()
            .resource_subscriptions(["cloud://runbook"])
            .build();
        let _subscription = client.listen(allowed).await.expect("acknowledged");
        for _ in 0..200 {
            if watcher.listens.load(Ordering::SeqCst) == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the handler never listened to an allowed subscription");
    });
}
