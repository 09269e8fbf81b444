//! The MCP benches' rmcp handlers: the same trivial tool `sum` (`a + b`, as `add` elsewhere: toolgate
//! names a tool gated in place by its rmcp name, and `add` is a `callable` tool's id) in an rmcp
//! `#[tool_router]` server as rmcp users write one, and in its twin gated in place (`#[toolgate::toolset]` above the router,
//! `#[toolgate(risk = "READ_ONLY")]` beside rmcp's `#[tool]`), served through `ToolgateServer::handler`.
//! Both keep their router in a field, built once (rmcp's best case), and answer with the same text.
//! And what the MCP benches share to run a server in a child process and read its CPU time.

use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};

use crate::by_name::AddArgs;

/// rmcp alone: the baseline.
#[derive(Debug, Clone)]
pub struct Plain {
    tool_router: ToolRouter<Plain>,
}

#[tool_router]
impl Plain {
    /// A server whose router is built now.
    pub fn new() -> Plain {
        Plain {
            tool_router: Self::tool_router(),
        }
    }

    /// Adds two numbers.
    #[tool]
    fn sum(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> Result<String, ErrorData> {
        Ok((a + b).to_string())
    }
}

impl Default for Plain {
    fn default() -> Plain {
        Plain::new()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Plain {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// The same server gated in place: its `sum` is the tool `sum` of toolgate's registry.
#[derive(Debug, Clone)]
pub struct Gated {
    tool_router: ToolRouter<Gated>,
}

#[toolgate::toolset(domain = "inplace")]
#[tool_router]
impl Gated {
    /// A server whose router is built now.
    pub fn new() -> Gated {
        Gated {
            tool_router: Self::tool_router(),
        }
    }

    /// Adds two numbers.
    #[tool]
    #[toolgate(risk = "READ_ONLY")]
    fn sum(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> Result<String, ErrorData> {
        Ok((a + b).to_string())
    }
}

impl Default for Gated {
    fn default() -> Gated {
        Gated::new()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Gated {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// This bench binary, to be run again in a server role; under `SERVER_WRAPPER` if that is set (a
/// command and its arguments, split at spaces, e.g. `valgrind --tool=callgrind`), to profile the server.
pub fn server_command() -> tokio::process::Command {
    let exe = std::env::current_exe().expect("this binary");
    let wrapper = std::env::var("SERVER_WRAPPER").unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut command = tokio::process::Command::new(program);
            command.args(words).arg(exe);
            command
        }
        None => tokio::process::Command::new(exe),
    }
}

/// User and system time of a process so far, from `/proc/PID/stat` (Linux), in its ticks of 10 ms.
///
/// # Panics
///
/// Where `/proc/PID/stat` cannot be read or parsed.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("a process's stat");
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("a command name") + 2..]
        .split(' ')
        .collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}
