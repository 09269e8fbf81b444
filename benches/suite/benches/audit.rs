//! Records per second of the hash-chained JSONL audit sink, on 1, 4 and 8 threads, with the default
//! durability (`Flush`: each record reaches the OS before the call's body runs) and with fsync batching
//! (`FsyncEvery(n)`), through `AuditSink::record` directly and through real gated calls.
//!
//! `Durability::Buffered` (one write per ~64 KiB) is printed too, as the cost of encoding and hashing
//! without a system call per record.
//!
//! Besides records per second of wall time, it prints records per second of CPU time of the writing
//! threads (from `/proc/thread-self/schedstat`): on a machine whose cores are busy with other work, that
//! is what one idle core would do.
//!
//! `cargo bench -p toolgate-benches --bench audit`; `AUDIT_SECONDS` sets the length of one run (1 by
//! default), `AUDIT_RUNS` the runs per configuration (3 by default, the median is printed) and
//! `AUDIT_DURABILITIES` which rows to run (a comma-separated list of names such as `FsyncEach`; all
//! by default). The logs are written under cargo's target `tmp` folder.

use std::path::Path;
use std::time::Duration;

use toolgate::audit::{Durability, verify_file};
use toolgate_benches::audit::{Run, Through, run};

fn main() {
    let seconds: f64 = env_or("AUDIT_SECONDS", 1.0);
    let runs: usize = env_or("AUDIT_RUNS", 3);
    let duration = Duration::from_secs_f64(seconds);
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit-throughput.jsonl");

    let durabilities = [
        ("Flush (default)", Durability::Flush),
        ("FsyncEach", Durability::FsyncEach),
        ("FsyncEvery(100)", Durability::FsyncEvery(100)),
        ("FsyncEvery(1000)", Durability::FsyncEvery(1000)),
        // For reference, not a goal: batches of about 64 KiB per write, so this is the cost of encoding
        // and chaining records without a system call per record.
        ("Buffered", Durability::Buffered),
    ];
    println!(
        "audit throughput: hash-chained JSONL sink, {runs} runs of {seconds} s each, median; \
         log at {}",
        path.display()
    );
    println!(
        "{:<18} {:<24} {:>7} {:>12} {:>17} {:>18}",
        "durability", "through", "threads", "records/s", "µs/record (wall)", "records/CPU-second"
    );
    let only: Option<String> = std::env::var("AUDIT_DURABILITIES").ok();
    let chosen = |name: &str| {
        only.as_deref()
            .is_none_or(|only| only.split(',').any(|o| name.starts_with(o.trim())))
    };
    for (name, durability) in durabilities.into_iter().filter(|(name, _)| chosen(name)) {
        for through in [Through::Record, Through::GatedCalls] {
            for threads in [1, 4, 8] {
                let mut results: Vec<Run> = (0..runs)
                    .map(|_| {
                        let result = run(&path, durability, threads, through, duration)
                            .unwrap_or_else(|e| panic!("audit run failed: {e}"));
                        let report = verify_file(&path).expect("read the log back");
                        assert!(report.broken.is_none() && report.torn_tail.is_none());
                        assert_eq!(report.last_seq, result.records);
                        result
                    })
                    .collect();
                results.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
                let median = results[results.len() / 2];
                let how = match through {
                    Through::Record => "AuditSink::record",
                    Through::GatedCalls => "gated calls (2 records)",
                };
                let per_cpu = median
                    .rate_per_cpu_second()
                    .map_or_else(|| "-".to_owned(), |rate| format!("{rate:.0}"));
                println!(
                    "{name:<18} {how:<24} {threads:>7} {:>12.0} {:>17.2} {per_cpu:>18}",
                    median.rate(),
                    1e6 / median.rate()
                );
            }
        }
    }
    let _ = std::fs::remove_file(&path);
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value} is not a number")),
        Err(_) => default,
    }
}
