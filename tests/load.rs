//! Load: many threads through one gate into one hash-chained log, and long sessions that must not grow.
//!
//! This binary counts every byte allocated and freed (a global allocator wrapping the system's), so that
//! a test can tell how much memory is live, and each thread's allocations, so that a test can tell that a
//! call allocates nothing. The tests hold one lock: the live count is process-wide.
//!
//! The full-size load test is ignored by default; run it in release mode:
//!
//! ```text
//! cargo test --release --test load -- --ignored --nocapture
//! ```

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use common::{Scratch, serial};
use toolgate::audit::{AuditError, AuditRecord, AuditSink, JsonlSink, verify_file};
use toolgate::{AllowAllApprover, DenialCode, Denied, Gate, Mode, tool};

// ---------------------------------------------------------------------------------------------------------
// Counting live bytes
// ---------------------------------------------------------------------------------------------------------

/// The system allocator, counting the bytes it has handed out and not yet taken back.
struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// How many allocations this thread has made (a `const` thread-local without a destructor: reading it
    /// from the allocator allocates nothing).
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count_allocation() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

/// `ptr`, a new allocation of `layout` (or null), counted if it was made.
fn counted(ptr: *mut u8, layout: Layout) -> *mut u8 {
    if !ptr.is_null() {
        LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        count_allocation();
    }
    ptr
}

// SAFETY: every method forwards to `System` with the arguments it was given, under the same contract,
// and returns what `System` returned; the only addition is arithmetic on an atomic counter, which neither
// allocates nor touches the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which is `System.alloc`'s.
        counted(unsafe { System.alloc(layout) }, layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        counted(unsafe { System.alloc_zeroed(layout) }, layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator, that is by `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was allocated by `System` with `layout`; the caller upholds the rest.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
            count_allocation();
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// How many allocations this thread makes while running `f`.
fn allocations_in<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = ALLOCATIONS.with(Cell::get);
    let result = f();
    (result, ALLOCATIONS.with(Cell::get) - before)
}

fn live_bytes() -> usize {
    LIVE_BYTES.load(Ordering::SeqCst)
}

/// Live bytes may differ by this much between two measurements of the same state: the test harness
/// starting a thread for a test that then waits for the lock, and the like. A leak of one byte per
/// audited call over the sessions below is more.
const NOISE: usize = 16 * 1024;

// ---------------------------------------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------------------------------------

static TICKS: AtomicUsize = AtomicUsize::new(0);
static RESETS: AtomicUsize = AtomicUsize::new(0);

/// Counts one event.
#[tool(risk = "LOW_WRITE", domain = "counter")]
fn tick(n: u64) -> Result<u64, Denied> {
    TICKS.fetch_add(1, Ordering::Relaxed);
    Ok(n)
}

/// Resets the counter: needs FULL_AUTO and an approval.
#[tool(risk = "HIGH_WRITE", domain = "counter")]
fn reset(n: u64) -> Result<u64, Denied> {
    RESETS.fetch_add(1, Ordering::Relaxed);
    Ok(n)
}

// ---------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------

/// Aborts the process if it is not dropped within `limit`: a deadlock fails the run instead of hanging it.
struct Watchdog(#[allow(dead_code)] mpsc::Sender<()>);

impl Watchdog {
    fn start(limit: Duration, what: &'static str) -> Watchdog {
        let (done, wait) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
                eprintln!("{what} did not finish within {limit:?}: a deadlock? aborting");
                std::process::abort();
            }
        });
        Watchdog(done)
    }
}

/// A sink that counts records and keeps none: what stays live is the gate's, not the log's.
#[derive(Clone, Default)]
struct Counted(Arc<AtomicUsize>);

impl AuditSink for Counted {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        assert!(!record.tool.is_empty());
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------------------
// Many threads, one gate, one log
// ---------------------------------------------------------------------------------------------------------

/// What `hammer` saw.
struct Hammered {
    /// Calls made, allowed and refused.
    calls: u64,
    records: u64,
    elapsed: Duration,
    bytes: u64,
}

/// `threads` threads make `calls` allowed calls each through one gate into one JSONL log, and one refused
/// call every ten; checks the log holds exactly the records of those calls, in one verified chain.
fn hammer(threads: u64, calls: u64, limit: Duration) -> Hammered {
    let scratch = Scratch::new(&format!("hammer-{threads}x{calls}"));
    let path = scratch.path("audit.jsonl");
    let sink = Arc::new(JsonlSink::open(&path).unwrap());
    let gate = Gate::builder()
        .mode(Mode::PartialAuto)
        .audit_shared(Arc::clone(&sink) as Arc<dyn AuditSink>)
        .build()
        .unwrap();
    let (ticks, resets) = (TICKS.load(Ordering::SeqCst), RESETS.load(Ordering::SeqCst));
    let watchdog = Watchdog::start(limit, "the load test");
    let started = Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let gate = &gate;
            scope.spawn(move || {
                gate.run(|| {
                    for i in 0..calls {
                        let n = thread * calls + i;
                        assert_eq!(tick(n).unwrap(), n);
                        if i.is_multiple_of(10) {
                            let denied = reset(n).unwrap_err();
                            assert_eq!(denied.code(), DenialCode::ModeNotAllowed);
                        }
                    }
                });
            });
        }
    });
    let elapsed = started.elapsed();
    drop(watchdog);

    let allowed = threads * calls;
    let refused = threads * calls.div_ceil(10);
    let expected = 2 * allowed + refused;
    assert_eq!(TICKS.load(Ordering::SeqCst) - ticks, allowed as usize);
    assert_eq!(RESETS.load(Ordering::SeqCst), resets, "no refused body ran");
    assert_eq!(sink.last_seq(), expected);
    drop(gate);
    drop(sink);

    let watchdog = Watchdog::start(limit, "verifying the load test's log");
    let report = verify_file(&path).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.records, expected);
    check_stages(&fs::read(&path).unwrap(), allowed, refused);
    drop(watchdog);
    Hammered {
        calls: allowed + refused,
        records: expected,
        elapsed,
        bytes: fs::metadata(&path).unwrap().len(),
    }
}

/// Each allowed call has one `enter` record and then one `exit` record with the same call number, and
/// each refusal one `refused` record.
fn check_stages(log: &[u8], allowed: u64, refused: u64) {
    // Per call number: 1 once entered, 2 once exited, 3 for a refusal.
    let mut seen = vec![0u8; (2 * allowed + refused + 1) as usize];
    let (mut enters, mut exits, mut refusals) = (0, 0, 0);
    for line in log.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let call = number_after(line, b"\"call\":") as usize;
        let state = &mut seen[call];
        if contains(line, b"\"stage\":\"enter\"") {
            assert_eq!(*state, 0, "call {call} entered twice");
            *state = 1;
            enters += 1;
        } else if contains(line, b"\"stage\":\"exit\"") {
            assert_eq!(*state, 1, "call {call} exited without entering first");
            *state = 2;
            exits += 1;
        } else {
            assert!(contains(line, b"\"stage\":\"refused\""));
            assert_eq!(*state, 0, "call {call} refused after a record");
            *state = 3;
            refusals += 1;
        }
    }
    assert_eq!((enters, exits, refusals), (allowed, allowed, refused));
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The integer that follows `key` in `line`.
fn number_after(line: &[u8], key: &[u8]) -> u64 {
    let start = line
        .windows(key.len())
        .position(|w| w == key)
        .expect("key present")
        + key.len();
    let digits = line[start..].iter().take_while(|b| b.is_ascii_digit());
    digits.fold(0, |n, &d| n * 10 + u64::from(d - b'0'))
}

fn report(what: &str, hammered: &Hammered) {
    let seconds = hammered.elapsed.as_secs_f64();
    eprintln!(
        "{what}: {} records ({} bytes) in {:.2?}: {:.0} records/s, {:.0} calls/s",
        hammered.records,
        hammered.bytes,
        hammered.elapsed,
        hammered.records as f64 / seconds,
        hammered.calls as f64 / seconds,
    );
}

#[test]
fn eight_threads_share_one_gate_and_one_log() {
    let _serial = serial();
    let hammered = hammer(8, 2_000, Duration::from_secs(120));
    report("8 x 2,000 calls", &hammered);
}

/// 880,000 calls, 1.68 million records, a log of about 1 GB (removed after); half a minute in release
/// mode, much longer in debug.
#[test]
#[ignore = "slow in debug builds: run with --release --ignored"]
fn eight_threads_times_a_hundred_thousand_calls() {
    let _serial = serial();
    let hammered = hammer(8, 100_000, Duration::from_secs(600));
    report("8 x 100,000 calls", &hammered);
}

// ---------------------------------------------------------------------------------------------------------
// Long sessions
// ---------------------------------------------------------------------------------------------------------

/// One gated call of one of several kinds, by `i`: allowed outright, refused, approved and audited, and
/// through nested gates.
fn one_call(i: u64, plain: &Gate, audited: &Gate) {
    match i % 8 {
        0..=3 => assert_eq!(plain.run(|| tick(i)).unwrap(), i),
        4 => assert_eq!(
            plain.run(|| reset(i)).unwrap_err().code(),
            DenialCode::ModeNotAllowed
        ),
        5 => assert_eq!(audited.run(|| reset(i)).unwrap(), i),
        6 => assert_eq!(audited.run(|| plain.run(|| tick(i))).unwrap(), i),
        _ => assert_eq!(
            tick(i).unwrap_err().code(),
            DenialCode::NoGate,
            "outside every gate"
        ),
    }
}

/// Makes `calls` gated calls of every kind after a warm-up, and checks that no memory stayed behind.
fn session(calls: u64) {
    let plain = Gate::new(Mode::PartialAuto).unwrap();
    let counted = Counted::default();
    let audited = Gate::builder()
        .mode(Mode::FullAuto)
        .approver(AllowAllApprover)
        .audit(counted.clone())
        .build()
        .unwrap();
    const WARM_UP: u64 = 10_000;
    for i in 0..WARM_UP {
        one_call(i, &plain, &audited);
    }
    let warm = live_bytes();
    let started = Instant::now();
    for i in 0..calls {
        one_call(i, &plain, &audited);
    }
    let after = live_bytes();
    eprintln!(
        "live bytes after warm-up {warm}, after {calls} calls {after} ({:+}); {:.2?}",
        after as i64 - warm as i64,
        started.elapsed()
    );
    assert!(
        after <= warm + NOISE,
        "live memory grew by {} bytes over {calls} calls",
        after - warm
    );
    // Two records for each approved call and two for each nested one (the audited gate records them),
    // so four in every eight calls.
    let records = counted.0.load(Ordering::SeqCst) as u64;
    assert_eq!(records, 4 * (WARM_UP / 8 + calls / 8));
}

/// The gate's common cases allocate nothing: a call its table allows outright, and a call its table
/// refuses (a lone gate that keeps no record, no approver to ask). The first `Gate::run` and call warm
/// the thread-locals and the registry up.
#[test]
fn allowed_calls_and_table_refusals_allocate_nothing() {
    let _serial = serial();
    let gate = Gate::new(Mode::PartialAuto).unwrap();
    gate.run(|| {
        let _ = (tick(0), reset(0));
        let (ticked, allocations) =
            allocations_in(|| (1..=1_000).map(|n| tick(n).unwrap()).sum::<u64>());
        assert_eq!(ticked, 500_500);
        assert_eq!(allocations, 0, "1,000 allowed calls");
        let (refused, allocations) = allocations_in(|| {
            (1..=1_000)
                .filter(|&n| reset(n).unwrap_err().code() == DenialCode::ModeNotAllowed)
                .count()
        });
        assert_eq!(refused, 1_000);
        assert_eq!(allocations, 0, "1,000 refused calls");
    });
    // Entering the gate again allocates nothing either: the thread keeps its stack of gates.
    let (_, allocations) = allocations_in(|| gate.run(|| tick(7).unwrap()));
    assert_eq!(allocations, 0, "entering the gate and one allowed call");
}

#[test]
fn a_long_session_leaves_no_memory_behind() {
    let _serial = serial();
    session(100_000);
}

/// A million calls; about ten seconds in a debug build.
#[test]
#[ignore = "slow in debug builds: run with --release --ignored"]
fn a_million_gated_calls_leave_no_memory_behind() {
    let _serial = serial();
    session(1_000_000);
}

/// The approval store is bounded: past its capacity (10,000 requests) a refusal leaves no new request
/// behind, and takes no memory.
///
/// Filling the store is slow in a debug build: each refusal looks at every request in it.
#[test]
#[ignore = "slow in debug builds: run with --release --ignored"]
fn two_step_refusals_past_the_capacity_take_no_memory() {
    let _serial = serial();
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .two_step_approvals()
        .build()
        .unwrap();
    let refuse = |n: u64| gate.run(|| reset(n)).unwrap_err();
    let resets = RESETS.load(Ordering::SeqCst);
    let before = live_bytes();
    // Each call has new arguments, so each leaves a request of its own, up to the capacity.
    let started = Instant::now();
    let mut n = 0;
    while refuse(n).approval_token().is_some() {
        n += 1;
        assert!(n <= 100_000, "the store never filled up");
    }
    assert_eq!(n, 10_000, "the capacity");
    let filled = live_bytes();
    let fill_time = started.elapsed();
    let started = Instant::now();
    const MORE: u64 = 2_000;
    for more in 1..=MORE {
        let denied = refuse(n + more);
        assert_eq!(denied.code(), DenialCode::ApprovalRequired);
        assert!(denied.approval_token().is_none(), "the store is full");
    }
    let after = live_bytes();
    eprintln!(
        "the store filled after {n} requests in {fill_time:.2?}, holding {} bytes; {MORE} more \
         refusals in {:.2?}: {:+} bytes",
        filled - before,
        started.elapsed(),
        after as i64 - filled as i64
    );
    assert!(after <= filled + NOISE, "grew by {}", after - filled);
    assert_eq!(RESETS.load(Ordering::SeqCst), resets);
    drop(gate);
    assert!(
        live_bytes() <= before + NOISE,
        "dropping the gate frees its store"
    );
}

/// Requests are forgotten one time-to-live after they expire: a session that keeps asking for approvals
/// that nobody gives stays at the size of one time-to-live's worth of requests.
#[test]
fn expired_two_step_requests_are_forgotten() {
    let _serial = serial();
    const TTL: Duration = Duration::from_millis(200);
    const EACH: u64 = 500;
    let gate = Gate::builder()
        .mode(Mode::FullAuto)
        .approval_ttl(TTL)
        .build()
        .unwrap();
    let refuse = |n: u64| gate.run(|| reset(n)).unwrap_err();
    let start = live_bytes();
    let (mut peaks, mut lows) = (Vec::new(), Vec::new());
    for round in 0..4 {
        // New arguments each round: without pruning, every round would add its requests to the last.
        for n in 0..EACH {
            assert!(refuse(round * EACH + n).approval_token().is_some());
        }
        peaks.push(live_bytes());
        std::thread::sleep(3 * TTL);
        // Any refusal prunes the requests past expiry and one more time-to-live.
        refuse(u64::MAX - round);
        lows.push(live_bytes());
    }
    eprintln!("from {start} live bytes: peaks {peaks:?}, after pruning {lows:?}");
    assert!(
        peaks[0] > lows[0] + EACH as usize * 64,
        "each request holds memory"
    );
    for round in 1..4 {
        assert!(peaks[round] <= peaks[0] + NOISE, "round {round}: {peaks:?}");
        assert!(lows[round] <= lows[0] + NOISE, "round {round}: {lows:?}");
    }
}
