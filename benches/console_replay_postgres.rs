//! The console's policy replay page over a trail of 10,000 calls (BENCHMARKS.md, §18, "The console's
//! page"): `POST /policy/replay` timed end to end, HTTP request to the whole page, on loopback.
//!
//! `cargo bench --features console,policy-file --bench console_replay_postgres` starts a throwaway cluster (as
//! `tests/common/postgres.rs` does; `fsync=off`), migrates it, and writes `CALLS` calls (10,000 unless
//! set) through real gates, each with a `PostgresSink` of its own writer: four writers, eight
//! principals, two tools. The console then serves in-process; a candidate that flips a part of the
//! calls is posted `ROUNDS` times (20 unless set), and each page is checked to show the flips.
//! `TOOLGATE_TEST_POSTGRES` names a server to use instead.

#[path = "../tests/common/postgres.rs"]
#[allow(dead_code)]
mod postgres;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolgate::console::{Console, Operators};
use toolgate::policy_file::{LivePolicy, PolicyFile, ReplayFilter};
use toolgate::postgres::PostgresSink;
use toolgate::{Denied, Gate, Mode, tool};

const WRITERS: usize = 4;
const PRINCIPALS: usize = 8;
const IN_FORCE: &str = "format = 1\n";
/// Half the principals' writes ask, one principal's reads are refused.
const CANDIDATE: &str = "format = 1\n\
[principals.user-1]\nask = [\"bench.write\"]\n\
[principals.user-3]\nask = [\"bench.write\"]\n\
[principals.user-5]\nask = [\"bench.write\"]\n\
[principals.user-7]\nask = [\"bench.write\"]\n\
[principals.user-2]\ndeny = [\"bench.read\"]\n";

/// A write.
#[tool(risk = "LOW_WRITE", domain = "bench", record_arguments)]
fn write(key: String) -> Result<(), Denied> {
    let _ = key;
    Ok(())
}

/// A read.
#[tool(risk = "READ_ONLY", domain = "bench", record_arguments)]
fn read(key: String) -> Result<(), Denied> {
    let _ = key;
    Ok(())
}

fn fill(url: &str, calls: usize) {
    let in_force = PolicyFile::parse("in force", IN_FORCE).expect("the file in force checks");
    let started = Instant::now();
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let in_force = in_force.clone();
            scope.spawn(move || {
                let sink: std::sync::Arc<dyn toolgate::audit::AuditSink> = std::sync::Arc::new(
                    PostgresSink::builder()
                        .writer(format!("bench-{w}"))
                        .timeout(Duration::from_secs(30))
                        .connect(url)
                        .expect("the sink connects"),
                );
                let gates: Vec<Gate> = (0..PRINCIPALS)
                    .map(|p| {
                        Gate::builder()
                            .mode(Mode::PartialAuto)
                            .principal(format!("user-{p}"))
                            .policy(LivePolicy::new(in_force.clone()))
                            .audit_shared(sink.clone())
                            .build()
                            .expect("a gate")
                    })
                    .collect();
                for i in (w..calls).step_by(WRITERS) {
                    let gate = &gates[i % PRINCIPALS];
                    let key = format!("k-{i}");
                    if i % 3 == 0 {
                        gate.run(|| read(key)).expect("a read runs");
                    } else {
                        gate.run(|| write(key)).expect("a write runs");
                    }
                }
            });
        }
    });
    println!(
        "wrote {calls} calls ({} records) in {:.1} s",
        2 * calls,
        started.elapsed().as_secs_f64()
    );
}

async fn http(addr: SocketAddr, request: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("the request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("the answer");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn post(addr: SocketAddr, path: &str, cookie: Option<&str>, body: &str) -> String {
    let cookie = cookie.map_or(String::new(), |c| {
        format!("Cookie: toolgate_console={c}\r\n")
    });
    format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{cookie}\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

async fn measure(url: &str, calls: usize, rounds: usize) {
    let console = Console::builder()
        .operators(Operators::new().token("bench-token", "bench"))
        .connect(url)
        .await
        .expect("the console connects");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address");
    let server = tokio::spawn(console.serve(listener));
    let (status, head, _) = http(addr, &post(addr, "/login", None, "token=bench-token")).await;
    assert_eq!(status, 303, "logged in: {head}");
    let cookie = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| name.eq_ignore_ascii_case("set-cookie"))
        .find_map(|(_, value)| value.trim().strip_prefix("toolgate_console="))
        .and_then(|value| value.split(';').next())
        .expect("the session's cookie")
        .to_owned();
    let request = format!(
        "GET /policy/replay HTTP/1.1\r\nHost: {addr}\r\nCookie: toolgate_console={cookie}\r\n\
         Connection: close\r\n\r\n"
    );
    let (_, _, form) = http(addr, &request).await;
    let at = form.find("name=\"csrf\" value=\"").expect("a form") + 19;
    let csrf = &form[at..at + 64];
    let body = format!(
        "csrf={csrf}&candidate={}&in_force={}",
        encoded(CANDIDATE),
        encoded(IN_FORCE)
    );
    let request = post(addr, "/policy/replay", Some(&cookie), &body);

    // What the page's replay costs without HTTP and HTML: the library's, on the same trail.
    let candidate = PolicyFile::parse("candidate", CANDIDATE).expect("the candidate checks");
    let in_force = [PolicyFile::parse("in force", IN_FORCE).expect("checks")];
    let library = {
        let url = url.to_owned();
        let started = Instant::now();
        let report = tokio::task::spawn_blocking(move || {
            toolgate::postgres::replay_trail(
                &url,
                "toolgate",
                &candidate,
                &in_force,
                &ReplayFilter::default(),
            )
        })
        .await
        .expect("the replay ends")
        .expect("the trail is read");
        assert_eq!(report.calls, calls as u64, "{report}");
        started.elapsed()
    };

    let mut times = Vec::with_capacity(rounds);
    let mut size = 0;
    for round in 0..rounds + 2 {
        let started = Instant::now();
        let (status, _, page) = http(addr, &request).await;
        let took = started.elapsed();
        assert_eq!(status, 200, "{page}");
        assert!(
            page.contains("<table id=\"flips\">") && !page.contains("chain-broken"),
            "{page}"
        );
        assert!(
            page.contains(&format!("<strong id=\"calls\">{calls}</strong>")),
            "{page}"
        );
        size = page.len();
        // Two rounds of warm-up.
        if round >= 2 {
            times.push(took);
        }
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "POST /policy/replay, {calls} calls: n={} min {:.1} ms  p50 {:.1} ms  max {:.1} ms  ({} bytes); \
         replay_trail alone {:.1} ms",
        times.len(),
        ms(times[0]),
        ms(times[times.len() / 2]),
        ms(*times.last().expect("a round")),
        size,
        ms(library),
    );
    server.abort();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let number = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(default)
    };
    let (calls, rounds) = (number("CALLS", 10_000), number("ROUNDS", 20));
    let given = std::env::var(postgres::SERVER_ENV)
        .ok()
        .filter(|u| !u.is_empty());
    let cluster = given
        .is_none()
        .then(|| postgres::Cluster::new(&["fsync=off"]));
    let url = match &cluster {
        Some(cluster) => cluster.database("console_replay_bench"),
        None => postgres::database("console_replay_bench"),
    };
    let version = postgres::query(&url, "SHOW server_version");
    println!(
        "PostgreSQL {}, {} cores",
        version[0][0].as_deref().unwrap_or("?"),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    fill(&url, calls);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(measure(&url, calls, rounds));
    if let Some(server) = given {
        let database = url.rsplit('/').next().unwrap_or_default();
        postgres::execute(
            &server,
            &format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"),
        );
    }
}
