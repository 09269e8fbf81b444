//! Two processes of the `mcp_http` example share approvals and the fleet's mode in PostgreSQL
//! (`tests/mcp/http_fleet.py`, the official MCP Python SDK's HTTP client): an in-band form sealed by
//! one is answered at the other, an out-of-band request is approved with `toolgate approvals approve`
//! and runs once in the other process, and `toolgate fleet lower` narrows what both list.

use std::ffi::OsStr;
use std::fs;

use crate::common::example;
use crate::common::mcp::{
    CLIENT_TIMEOUT, Server, assert_client_passed, client_script, python_with_mcp,
};
use crate::common::postgres::database;
use crate::common::run;
use crate::support::scratch_dir as scratch;
#[test]
fn two_processes_behind_one_address_share_approvals_and_the_fleet() {
    let binary = example("mcp_http", "mcp-http,clap,postgres");
    let python = python_with_mcp();
    let url = database("mcp_http");
    let dir = scratch("fleet");
    let principals = dir.join("principals.txt");
    fs::write(&principals, "alice-token alice FULL_AUTO\n").expect("the principals");
    let key = dir.join("state.key");
    fs::write(&key, b"a key of this test, 32 bytes or more, shared").expect("the key");

    let start = |name: &str| {
        let audit = dir.join(format!("{name}.jsonl"));
        let args: Vec<&OsStr> = vec![
            "--state-key-file".as_ref(),
            key.as_os_str(),
            "--principals".as_ref(),
            principals.as_os_str(),
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--store".as_ref(),
            url.as_ref(),
            "--approvals".as_ref(),
            "in-band".as_ref(),
            "--fleet".as_ref(),
            "notes".as_ref(),
            "--audit-log".as_ref(),
            audit.as_os_str(),
        ];
        let server = Server::start(&binary, &args, dir.join(format!("{name}.err")));
        (server, audit)
    };
    let (mut a, audit_a) = start("a");
    let (mut b, audit_b) = start("b");
    let (url_a, url_b) = (a.url(), b.url());

    let mut command = python.command();
    command
        .arg(client_script("http_fleet.py"))
        .args([&url_a, &url_b])
        .arg(env!("CARGO_BIN_EXE_toolgate"))
        .args([url.as_str(), "notes"])
        .arg(&audit_a)
        .arg(&audit_b);
    let output = run(&mut command, CLIENT_TIMEOUT);
    drop((a, b));
    assert_client_passed(&output, "http_fleet.py");
    let _ = fs::remove_dir_all(&dir);
}
