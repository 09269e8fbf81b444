//! Throughput of the hash-chained JSONL audit sink: records written per second, by several threads at
//! once if asked, either through `AuditSink::record` directly or through real gated calls.

use std::hint::black_box;
use std::io;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use toolgate::audit::{AuditRecord, AuditSink, Decision, Durability, JsonlSink, Stage};
use toolgate::{Gate, Risk};

use crate::gate_tools::{self, MODE};

/// How the records reach the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Through {
    /// `AuditSink::record` with a prepared `enter` record, like the one a gate writes.
    Record,
    /// Allowed calls of `gate.add` through a gate with the sink: an `enter` and an `exit` record each.
    GatedCalls,
}

/// What one run wrote, and in how long.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Records written (the chain's last `seq`).
    pub records: u64,
    /// From the moment every thread started to the moment the last one stopped.
    pub elapsed: Duration,
    /// The time the writing threads were on a CPU, added up (Linux only): the run's cost without the
    /// time spent waiting for a core on a busy machine.
    pub cpu: Option<Duration>,
}

impl Run {
    /// Records per second.
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64()
    }

    /// Records per second of CPU time of the writing threads.
    pub fn rate_per_cpu_second(&self) -> Option<f64> {
        self.cpu.map(|cpu| self.records as f64 / cpu.as_secs_f64())
    }
}

/// The time the calling thread has been on a CPU, from `/proc/thread-self/schedstat` (Linux).
fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// The `enter` record a gate writes for an allowed call of `gate.add`, numbered `call`.
pub fn enter_record(call: u64) -> AuditRecord {
    let mut record = AuditRecord::new(Stage::Enter, "gate.add", MODE, 1);
    record.call = call;
    record.decision = Some(Decision::Allowed);
    record.declared_risk = Some(Risk::ReadOnly);
    record.effective_risk = Some(Risk::ReadOnly);
    record.arguments_digest = Some(format!("{:064x}", call.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    record.manifest_digest = toolgate::report::manifest_digest().into();
    record
}

/// Writes to a new log at `path` from `threads` threads for about `duration`.
///
/// # Errors
///
/// When the log cannot be created, or a record cannot be written.
pub fn run(
    path: &Path,
    durability: Durability,
    threads: usize,
    through: Through,
    duration: Duration,
) -> io::Result<Run> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let sink = Arc::new(JsonlSink::builder(path).durability(durability).open()?);
    let gate = match through {
        Through::Record => None,
        Through::GatedCalls => Some(
            Gate::builder()
                .mode(MODE)
                .audit_shared(sink.clone())
                .build()
                .map_err(io::Error::other)?,
        ),
    };
    let start = Barrier::new(threads + 1);
    let started = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let (sink, gate, start) = (&sink, &gate, &start);
                scope.spawn(move || -> io::Result<Option<Duration>> {
                    let record = enter_record(thread as u64);
                    start.wait();
                    let cpu_before = thread_cpu_time();
                    let deadline = Instant::now() + duration;
                    let mut i = 0u64;
                    while Instant::now() < deadline {
                        for _ in 0..32 {
                            match gate {
                                None => sink.record(&record).map_err(io::Error::other)?,
                                Some(gate) => {
                                    let sum = gate.run(|| gate_tools::add(black_box(i), 2));
                                    black_box(sum.map_err(io::Error::other)?);
                                }
                            }
                            i += 1;
                        }
                    }
                    Ok(thread_cpu_time()
                        .zip(cpu_before)
                        .map(|(after, before)| after - before))
                })
            })
            .collect();
        start.wait();
        let started = Instant::now();
        let mut cpu = Some(Duration::ZERO);
        for worker in workers {
            let used = worker.join().expect("a writer panicked")?;
            cpu = cpu.zip(used).map(|(total, used)| total + used);
        }
        io::Result::Ok((started, cpu))
    })?;
    let (started, cpu) = started;
    let elapsed = started.elapsed();
    let records = sink.last_seq();
    drop(gate);
    sink.flush().map_err(io::Error::other)?;
    Ok(Run {
        records,
        elapsed,
        cpu,
    })
}
