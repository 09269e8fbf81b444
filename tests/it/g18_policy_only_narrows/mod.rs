//! Guarantee 18: an operator's policy file only narrows. `policy_file`: the file checked, folded into
//! the gate, replaced live, shared by a fleet's processes in `tests/postgres`, and an exhaustive test
//! that no file widens any call; `attacks`: the attacks from outside, where the policy meets approvals,
//! grants, budgets, the latch, slow sinks and argument values; `rules_off_the_call`: the argument rules
//! read off the call, on a lone gate's check and by name, while reading an argument waits;
//! `commit_point`: the commit point's reads while the gate is lowered, tainted, revoked or re-policied;
//! `out_of_band`: the approval channel the file keeps for an operator, over an MCP server in band.

mod attacks;
mod attacks_names;
mod attacks_stateful;
mod commit_point;
mod history;
mod out_of_band;
mod policy_file;
pub(crate) mod replay;
mod rules_off_the_call;
mod shadow;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use toolgate::audit::{AuditError, AuditRecord, AuditSink, MemorySink, Stage};
use toolgate::gate::GateBuilder;
use toolgate::policy_file::LivePolicy;
use toolgate::{Gate, Mode};

/// A gate in `mode` following `live`, with what `then` adds to its builder.
fn following(mode: Mode, live: &LivePolicy, then: impl FnOnce(GateBuilder) -> GateBuilder) -> Gate {
    then(Gate::builder().mode(mode).policy(live.clone()))
        .build()
        .unwrap()
}

/// A point where the code under test waits until the test releases it.
#[derive(Clone, Default)]
pub struct Hold(Arc<(Mutex<(usize, bool)>, Condvar)>);

impl Hold {
    /// Called by the code under test: says it is here, then waits for `release` (30 s at most).
    fn arrive_and_wait(&self) {
        let (lock, cv) = &*self.0;
        let mut state = lock.lock().unwrap();
        state.0 += 1;
        cv.notify_all();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !state.1 {
            let (s, _) = cv.wait_timeout(state, Duration::from_millis(20)).unwrap();
            state = s;
            assert!(Instant::now() < deadline, "never released");
        }
    }

    /// Whether some thread arrived within `limit`.
    fn arrived_within(&self, limit: Duration) -> bool {
        let (lock, cv) = &*self.0;
        let mut state = lock.lock().unwrap();
        let deadline = Instant::now() + limit;
        while state.0 == 0 {
            if Instant::now() >= deadline {
                return false;
            }
            let (s, _) = cv.wait_timeout(state, Duration::from_millis(20)).unwrap();
            state = s;
        }
        true
    }

    /// Waits until some thread has arrived (30 s at most).
    fn wait_arrived(&self) {
        assert!(
            self.arrived_within(Duration::from_secs(30)),
            "nothing arrived"
        );
    }

    fn release(&self) {
        let (lock, cv) = &*self.0;
        lock.lock().unwrap().1 = true;
        cv.notify_all();
    }
}

/// A budget store that holds the decision until the test releases it.
struct HoldingBudgets(Hold);

impl toolgate::gate::budget::BudgetStore for HoldingBudgets {
    // Its units are never lost: held at once.
    fn hold(
        &self,
        _: &[toolgate::gate::budget::BudgetCharge],
        _: toolgate::gate::budget::Reservation,
    ) -> toolgate::gate::budget::BudgetFuture {
        Box::pin(async { Ok(toolgate::gate::budget::Taken::Taken) })
    }

    fn take(
        &self,
        _: &[toolgate::gate::budget::BudgetCharge],
        _: toolgate::gate::budget::Reservation,
    ) -> toolgate::gate::budget::BudgetFuture {
        self.0.arrive_and_wait();
        Box::pin(async { Ok(toolgate::gate::budget::Taken::Taken) })
    }

    fn release(
        &self,
        _: &[toolgate::gate::budget::BudgetCharge],
        _: toolgate::gate::budget::Reservation,
    ) -> toolgate::gate::budget::ReleaseFuture {
        Box::pin(async {})
    }
}

/// A sink that holds the `enter` record of one tool until the test releases it; records into `inner`.
struct SlowSink {
    tool: &'static str,
    hold: Hold,
    inner: MemorySink,
}

impl AuditSink for SlowSink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if matches!(record.stage, Stage::Enter) && record.tool == self.tool {
            self.hold.arrive_and_wait();
        }
        self.inner.record(record)
    }
}

/// A sink that takes records asynchronously, holding the `enter` of one tool until released.
struct AsyncSlowSink {
    tool: &'static str,
    arrived: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
    inner: MemorySink,
}

impl AuditSink for AsyncSlowSink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        self.inner.record(record)
    }
    fn record_async(
        &self,
        record: &AuditRecord,
    ) -> Option<std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), AuditError>> + Send>>>
    {
        if !(matches!(record.stage, Stage::Enter) && record.tool == self.tool) {
            return None;
        }
        self.inner.record(record).ok()?;
        let (arrived, release) = (self.arrived.clone(), self.release.clone());
        Some(Box::pin(async move {
            arrived.notify_one();
            release.notified().await;
            Ok(())
        }))
    }
}
