//! A rig agent whose tools are toolgate tools: rig's agent loop runs, every tool call goes through the
//! gate, and a refusal reaches the model as the tool's result text.
//!
//! `cargo run --example rig_agent --features rig` (the mode from `TOOLGATE_MODE`, SHADOW when unset).
//! The model is rig's scripted completion model, so nothing goes over the network: it asks to read a
//! note and to delete it, then answers. Put a provider's model in its place
//! (`rig_core::providers::openai::OpenAI::from_env()?.completion(..)`, with rig-core's `reqwest`
//! feature) and nothing else changes.

use std::sync::atomic::{AtomicUsize, Ordering};

use rig_agent::AgentBuilder;
use rig_core::completion::{AssistantContent, Message};
use rig_core::message::{ToolCall, ToolFunction, ToolName, ToolResultContent, UserContent};
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use serde_json::json;
use toolgate::{Denied, Gate, tool};

static DELETED: AtomicUsize = AtomicUsize::new(0);

/// Read a note by its id.
#[tool(risk = "READ_ONLY", domain = "notes", callable)]
fn read(id: u64) -> Result<String, Denied> {
    Ok(format!(
        "note {id}: renew the TLS certificate before Friday"
    ))
}

/// Delete a note for good.
#[tool(risk = "HIGH_WRITE", domain = "notes", modes = [FULL_AUTO], callable)]
fn delete(id: u64) -> Result<String, Denied> {
    DELETED.fetch_add(1, Ordering::SeqCst);
    Ok(format!("note {id} deleted"))
}

fn tool_call(id: &str, name: &str, arguments: serde_json::Value) -> AssistantContent {
    let name = ToolName::new(name).expect("a name");
    AssistantContent::ToolCall(ToolCall::from_wire(id, ToolFunction::new(name, arguments)))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gate = Gate::from_env()?;
    let tools = toolgate::rig::tools(&gate);

    let model = MockCompletionModel::from_turns([
        MockTurn::from_contents([
            tool_call("call-1", "notes-read", json!({"id": 12})),
            tool_call("call-2", "notes-delete", json!({"id": 12})),
        ]),
        MockTurn::text("Note 12 reminds you to renew the TLS certificate; I could not delete it."),
    ]);
    let agent = AgentBuilder::new(model.clone())
        .preamble("You keep the team's notes.")
        .dynamic_tools(tools)
        .build();
    let answer = agent
        .prompt("What does note 12 say? Delete it afterwards.")
        .max_turns(3)
        .await?;

    println!("mode: {}", gate.mode());
    let requests = model.requests();
    let offered: Vec<String> = requests[0]
        .tools
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    println!("tools offered: {}", offered.join(", "));
    if let Some(Message::User { content, .. }) = requests.last().and_then(|r| r.chat_history.last())
    {
        for part in content.iter() {
            if let UserContent::ToolResult(result) = part {
                let text: Vec<&str> = result
                    .content
                    .iter()
                    .filter_map(|c| match c {
                        ToolResultContent::Text(text) => Some(text.text.as_str()),
                        _ => None,
                    })
                    .collect();
                println!("the model received for {}: {}", result.name, text.join(" "));
            }
        }
    }
    println!("answer: {}", answer.output());
    println!("notes.delete ran {} times", DELETED.load(Ordering::SeqCst));
    Ok(())
}
