//! Replaying a log under a candidate policy against verifying it: the issue's bound is that a replay
//! takes at most twice what `toolgate audit verify` takes on the same log.
//!
//! One log of `REPLAY_RECORDS` records (1,000,000 by default) is written once, as gated calls write
//! them: `enter` and `refused` records of four tools by eight principals, under a policy in force,
//! half of them with recorded arguments that an argument rule of the candidate reads. Then:
//!
//! - `verify`: `verify_file`, the chain checked line by line (what `toolgate audit verify` does);
//! - `replay`: `PolicyFile::replay`, the same chain checked and every call decided under the policy
//!   in force and the candidate, in one pass;
//! - `replay_history`: the same with a candidate that also has rules over history, decided on the
//!   calls of each principal before each call.
//!
//! `cargo bench -p toolgate-benches --bench replay`; the ratio is replay's median over verify's.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::OnceLock;

use toolgate::audit::{
    AuditRecord, AuditSink, Decision, Durability, JsonlSink, Stage, verify_file,
};
use toolgate::policy_file::{PolicyFile, ReplayFilter};
use toolgate::{Denied, Mode, Risk, tool};

/// read.
#[tool(risk = "READ_ONLY", domain = "rb", callable)]
fn read(host: String) -> Result<String, Denied> {
    Ok(host)
}

/// refund.
#[tool(risk = "LOW_WRITE", domain = "rb", callable, record_arguments)]
fn refund(amount: u32) -> Result<u32, Denied> {
    Ok(amount)
}

/// restart.
#[tool(risk = "LOW_WRITE", domain = "rb", callable)]
fn restart(host: String) -> Result<String, Denied> {
    Ok(host)
}

/// wipe.
#[tool(risk = "HIGH_WRITE", domain = "rb", callable)]
fn wipe(host: String) -> Result<String, Denied> {
    Ok(host)
}

const IN_FORCE: &str = "format = 1\n[defaults]\nask = [\"rb.wipe\"]\n";
const CANDIDATE: &str = r#"format = 1
[defaults]
deny = ["rb.wipe"]

[[defaults.arguments]]
tool = "rb.refund"
parameter = "amount"
max = 50

[principals.p3]
ceiling = "ADVISORY"
"#;

/// The candidate with rules over history: a wipe only after a restart, a restart never within ten
/// minutes after a read, per principal.
const HISTORY: &str = r#"
[[defaults.history]]
tool = "rb.wipe"
after = "rb.restart"
within = "1h"

[[defaults.history]]
tool = "rb.restart"
not_after = "rb.read"
within = "10m"
"#;

fn main() {
    divan::main();
}

fn with_history() -> &'static PolicyFile {
    static FILE: OnceLock<PolicyFile> = OnceLock::new();
    FILE.get_or_init(|| {
        PolicyFile::parse("candidate.toml", &format!("{CANDIDATE}{HISTORY}"))
            .expect("the candidate with rules over history checks")
    })
}

fn policies() -> &'static (PolicyFile, PolicyFile) {
    static POLICIES: OnceLock<(PolicyFile, PolicyFile)> = OnceLock::new();
    POLICIES.get_or_init(|| {
        (
            PolicyFile::parse("in-force.toml", IN_FORCE).expect("the policy in force checks"),
            PolicyFile::parse("candidate.toml", CANDIDATE).expect("the candidate checks"),
        )
    })
}

fn log() -> &'static PathBuf {
    static LOG: OnceLock<PathBuf> = OnceLock::new();
    LOG.get_or_init(|| {
        let records: u64 = std::env::var("REPLAY_RECORDS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1_000_000);
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replay-bench.jsonl");
        let _ = std::fs::remove_file(&path);
        let sink = JsonlSink::builder(&path)
            .durability(Durability::Buffered)
            .open()
            .expect("the bench's log opens");
        let digest = policies().0.digest().to_owned();
        let tools = [
            ("rb.read", Risk::ReadOnly),
            ("rb.refund", Risk::LowWrite),
            ("rb.restart", Risk::LowWrite),
            ("rb.wipe", Risk::HighWrite),
        ];
        for n in 0..records {
            let (tool, risk) = tools[(n % 4) as usize];
            let refused = tool == "rb.wipe" && n % 3 == 0;
            let stage = if refused {
                Stage::Refused
            } else {
                Stage::Enter
            };
            let mut record = AuditRecord::new(stage, tool, Mode::FullAuto, 1 + n % 8);
            record.call = n;
            record.principal = Some(format!("p{}", n % 8).into());
            record.agent = Some("bench-agent".into());
            record.declared_risk = Some(risk);
            record.effective_risk = Some(risk);
            record.policy_digest = Some(digest.clone());
            record.arguments_digest = Some(format!("{n:064x}"));
            record.decision = Some(match (refused, tool) {
                (true, _) => Decision::Refused,
                (false, "rb.wipe") => Decision::Approved,
                _ => Decision::Allowed,
            });
            if refused {
                record.code = Some("APPROVAL_REJECTED".into());
            }
            if tool == "rb.refund" {
                record.arguments = Some(format!("{{\"amount\":{}}}", n % 100));
            }
            sink.record(&record).expect("a record is written");
        }
        sink.close().expect("the log closes");
        path
    })
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn verify(bencher: divan::Bencher) {
    let path = log();
    bencher.bench(|| {
        let report = verify_file(black_box(path)).expect("the log reads");
        assert!(report.is_intact());
        report
    });
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn replay(bencher: divan::Bencher) {
    let path = log();
    let (in_force, candidate) = policies();
    bencher.bench(|| {
        let file = std::fs::File::open(black_box(path)).expect("the log opens");
        let report = candidate
            .replay(
                std::slice::from_ref(in_force),
                &ReplayFilter::default(),
                file,
            )
            .expect("the log reads");
        assert!(report.is_intact() && report.flips_any());
        report
    });
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn replay_history(bencher: divan::Bencher) {
    let path = log();
    let in_force = &policies().0;
    let candidate = with_history();
    bencher.bench(|| {
        let file = std::fs::File::open(black_box(path)).expect("the log opens");
        let report = candidate
            .replay(
                std::slice::from_ref(in_force),
                &ReplayFilter::default(),
                file,
            )
            .expect("the log reads");
        assert!(report.is_intact() && report.flips_any());
        report
    });
}
