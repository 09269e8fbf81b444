//! Runs fuzzed sequences of calls, approvals and mode changes against a gate with two-step approvals, and
//! checks each step against a model of the approval store written out here.
//!
//! Checked after every step:
//! - no panic;
//! - an approved call runs at most once per approval, and exactly when the model says it does;
//! - `approve` with a string that is not an issued token approves nothing;
//! - a refusal carries the code and the token the model predicts (asking twice for the same call gives the
//!   same token; a new request gets a new one);
//! - with an audit sink, one `approval_granted` record per approval and one `enter` record per run.

#![no_main]

use std::collections::HashMap;
use std::fmt;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use serde_json::json;
use toolgate::approval::ApproveError;
use toolgate::audit::{MemorySink, Stage};
use toolgate::{CallError, Denied, Gate, Mode, registry, tool};

#[derive(Debug)]
enum FzError {
    Refused(Denied),
}

impl From<Denied> for FzError {
    fn from(denied: Denied) -> Self {
        FzError::Refused(denied)
    }
}

impl fmt::Display for FzError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("refused")
    }
}

static RUNS: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];

/// Sync, needs an approval.
#[tool(risk = "HIGH_WRITE", domain = "fz", callable)]
fn delete(ids: Vec<u64>) -> Result<usize, FzError> {
    RUNS[0].fetch_add(1, Ordering::SeqCst);
    Ok(ids.len())
}

/// Async, needs an approval; the same arguments as `delete`, so that an approval of one must not let the
/// other run.
#[tool(risk = "HIGH_WRITE", domain = "fz", callable)]
async fn wipe(ids: Vec<u64>) -> Result<usize, FzError> {
    RUNS[1].fetch_add(1, Ordering::SeqCst);
    Ok(ids.len())
}

const IDS: [&str; 2] = ["fz.delete", "fz.wipe"];

fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..64 {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
    panic!("a tool's future stayed pending, though nothing it awaits can block");
}

// ---------------------------------------------------------------------------------------------------
// The input
// ---------------------------------------------------------------------------------------------------

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ModeSel {
    Shadow,
    Advisory,
    PartialAuto,
    FullAuto,
}

impl ModeSel {
    fn mode(self) -> Mode {
        match self {
            ModeSel::Shadow => Mode::Shadow,
            ModeSel::Advisory => Mode::Advisory,
            ModeSel::PartialAuto => Mode::PartialAuto,
            ModeSel::FullAuto => Mode::FullAuto,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Args {
    A,
    B,
    Ids(Vec<u8>),
}

impl Args {
    fn ids(&self) -> Vec<u64> {
        match self {
            Args::A => vec![1, 2],
            Args::B => vec![3],
            Args::Ids(ids) => ids.iter().take(8).map(|&i| u64::from(i)).collect(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Path {
    ByName,
    Direct,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Call {
        /// `wipe` rather than `delete`.
        second: bool,
        args: Args,
        path: Path,
    },
    CallMany {
        second: bool,
        args: Args,
        path: Path,
        times: u8,
    },
    /// Approve a token some refusal carried (by its index among the tokens seen so far).
    Approve(u8),
    /// Approve with a string of the fuzzer's.
    ApproveArbitrary(String),
    Lower(ModeSel),
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Biased towards FULL_AUTO, where HIGH_WRITE calls ask for approvals.
    mode: Option<ModeSel>,
    /// Requests that expire at once.
    expire_at_once: bool,
    audit: bool,
    ops: Vec<Op>,
}

// ---------------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Pending,
    Approved,
    Used,
}

type Key = (usize, Vec<u64>);

struct Token {
    value: String,
    key: Key,
    state: State,
}

#[derive(Default)]
struct Model {
    full_auto: bool,
    expire_at_once: bool,
    tokens: Vec<Token>,
    granted: HashMap<Key, usize>,
    runs: HashMap<Key, usize>,
    approvals: usize,
}

#[derive(Debug)]
enum Outcome {
    Ran,
    Refused {
        code: &'static str,
        token: Option<String>,
    },
}

impl Model {
    /// Checks one call's outcome against the model, and takes it in.
    fn call(&mut self, key: Key, outcome: Outcome) {
        let Outcome::Refused { code, token } = outcome else {
            assert!(self.full_auto && !self.expire_at_once, "{key:?} ran");
            let approved = self
                .tokens
                .iter_mut()
                .find(|t| t.key == key && t.state == State::Approved)
                .unwrap_or_else(|| panic!("{key:?} ran without an approval"));
            approved.state = State::Used;
            *self.runs.entry(key).or_default() += 1;
            return;
        };
        if !self.full_auto {
            assert_eq!(code, "MODE_NOT_ALLOWED");
            assert_eq!(token, None);
            return;
        }
        let token = token.unwrap_or_else(|| panic!("{code}: a two-step refusal carries a token"));
        if self.expire_at_once {
            assert_eq!(code, "APPROVAL_PENDING");
            assert!(
                self.tokens.iter().all(|t| t.value != token),
                "a fresh token"
            );
            self.tokens.push(Token {
                value: token,
                key,
                state: State::Pending,
            });
            return;
        }
        assert!(
            !self
                .tokens
                .iter()
                .any(|t| t.key == key && t.state == State::Approved),
            "{key:?} was approved, yet refused with {code}"
        );
        let reused = self
            .tokens
            .iter()
            .any(|t| t.key == key && t.state == State::Used);
        // A call with its own request pending says so, whatever another call's approval of the tool.
        let expected = if reused {
            "APPROVAL_REUSED"
        } else {
            "APPROVAL_PENDING"
        };
        assert_eq!(code, expected, "{key:?}");
        match self
            .tokens
            .iter()
            .find(|t| t.key == key && t.state == State::Pending)
        {
            Some(pending) => assert_eq!(pending.value, token, "asking again gives the same token"),
            None => {
                assert!(self.tokens.iter().all(|t| t.value != token), "a new token");
                self.tokens.push(Token {
                    value: token,
                    key,
                    state: State::Pending,
                });
            }
        }
    }

    /// Checks the answer to `approve(value)`, and takes it in.
    fn approve(&mut self, value: &str, answer: Result<(), ApproveError>) {
        let Some(token) = self.tokens.iter_mut().find(|t| t.value == value) else {
            assert_eq!(answer, Err(ApproveError::UnknownToken), "{value:?}");
            return;
        };
        if self.expire_at_once {
            assert!(
                matches!(
                    answer,
                    Err(ApproveError::Expired | ApproveError::UnknownToken)
                ),
                "{answer:?}"
            );
            return;
        }
        let expected = match token.state {
            State::Pending => Ok(()),
            State::Approved => Err(ApproveError::AlreadyApproved),
            State::Used => Err(ApproveError::AlreadyUsed),
        };
        assert_eq!(answer, expected);
        if answer.is_ok() {
            token.state = State::Approved;
            *self.granted.entry(token.key.clone()).or_default() += 1;
            self.approvals += 1;
        }
    }
}

fn outcome_of_name(result: Result<serde_json::Value, CallError>) -> Outcome {
    match result {
        Ok(_) => Outcome::Ran,
        Err(CallError::Denied(denied)) => refused(&denied),
        Err(other) => panic!("a call with good arguments failed otherwise: {other}"),
    }
}

fn outcome_of_direct(result: Result<usize, FzError>) -> Outcome {
    match result {
        Ok(_) => Outcome::Ran,
        Err(FzError::Refused(denied)) => refused(&denied),
    }
}

fn refused(denied: &Denied) -> Outcome {
    Outcome::Refused {
        code: denied.code().as_str(),
        token: denied.approval_token().map(str::to_owned),
    }
}

fn runs() -> [usize; 2] {
    [0, 1].map(|i| RUNS[i].load(Ordering::SeqCst))
}

fuzz_target!(|input: Input| {
    let start = input.mode.unwrap_or(ModeSel::FullAuto);
    let ttl = match input.expire_at_once {
        // The shortest time to live a gate takes: every request has expired by the time it is used.
        true => Duration::from_nanos(1),
        false => Duration::from_secs(3600),
    };
    let sink = MemorySink::new();
    let mut builder = Gate::builder().mode(start.mode()).approval_ttl(ttl);
    if input.audit {
        builder = builder.audit(sink.clone());
    }
    let gate = builder.build().expect("a gate");
    let mut mode = start;
    let mut model = Model {
        full_auto: mode == ModeSel::FullAuto,
        expire_at_once: input.expire_at_once,
        ..Model::default()
    };
    let before = runs();
    let mut calls = 0usize;
    for op in input.ops.iter().take(64) {
        match op {
            Op::Call { second, args, path }
            | Op::CallMany {
                second, args, path, ..
            } => {
                let times = match op {
                    Op::CallMany { times, .. } => usize::from(*times % 8) + 1,
                    _ => 1,
                };
                let tool = usize::from(*second);
                let ids = args.ids();
                for _ in 0..times {
                    calls += 1;
                    let ran_before = runs();
                    let outcome = match (path, tool) {
                        (Path::ByName, _) => outcome_of_name(block_on(registry().call(
                            &gate,
                            IDS[tool],
                            json!({ "ids": ids }),
                        ))),
                        (Path::Direct, 0) => outcome_of_direct(gate.run(|| delete(ids.clone()))),
                        (Path::Direct, _) => {
                            outcome_of_direct(block_on(gate.scope(wipe(ids.clone()))))
                        }
                    };
                    let ran = matches!(outcome, Outcome::Ran);
                    let mut expected_runs = ran_before;
                    expected_runs[tool] += usize::from(ran);
                    assert_eq!(
                        runs(),
                        expected_runs,
                        "a body runs exactly when its call is allowed"
                    );
                    model.call((tool, ids.clone()), outcome);
                }
            }
            Op::Approve(index) => {
                if model.tokens.is_empty() {
                    continue;
                }
                let value = model.tokens[usize::from(*index) % model.tokens.len()]
                    .value
                    .clone();
                let answer = gate.approve(&value);
                model.approve(&value, answer);
            }
            Op::ApproveArbitrary(value) => {
                let answer = gate.approve(value);
                model.approve(value, answer);
            }
            Op::Lower(to) => {
                let lowered = gate.lower(to.mode());
                assert_eq!(lowered.is_err(), *to > mode, "only a lower mode is taken");
                mode = mode.min(*to);
                model.full_auto = mode == ModeSel::FullAuto;
                assert_eq!(gate.mode(), mode.mode());
            }
        }
        for (key, runs) in &model.runs {
            let granted = model.granted.get(key).copied().unwrap_or(0);
            assert!(
                *runs <= granted,
                "{key:?} ran {runs} times on {granted} approvals"
            );
        }
    }
    let ran = runs();
    let by_tool = |tool: usize| -> usize {
        model
            .runs
            .iter()
            .filter(|((t, _), _)| *t == tool)
            .map(|(_, n)| n)
            .sum()
    };
    assert_eq!(ran[0] - before[0], by_tool(0));
    assert_eq!(ran[1] - before[1], by_tool(1));
    assert!(ran[0] + ran[1] - before[0] - before[1] <= calls);
    if input.audit {
        let records = sink.records();
        let count = |stage: Stage| records.iter().filter(|r| r.stage == stage).count();
        assert_eq!(count(Stage::ApprovalGranted), model.approvals);
        assert_eq!(count(Stage::Enter), by_tool(0) + by_tool(1));
        assert_eq!(count(Stage::Exit), by_tool(0) + by_tool(1));
    }
});
