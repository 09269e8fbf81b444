//! Budgets: at most so many calls over a sliding window, per tool (an id or a glob), per risk level
//! or per agent, checked after the policy's mode checks and before any approval is asked for.
//!
//! A gate's budgets are fixed when it is built ([`GateBuilder::budget`](crate::GateBuilder::budget)).
//! Each has a key that names what it counts (the gate's agent label, the scope, the limit and the
//! window), so that gates and processes configured alike share it through a shared [`BudgetStore`]. A call is charged to every budget that
//! covers it at once: it takes a unit of each only if each has one left, so a refused call takes
//! nothing.
//!
//! The window slides: a call allowed at `t` counts until `t + window`, and at no instant have more
//! than `limit` calls been allowed in the window before it. A fixed window (a counter reset every
//! hour) would let `2 × limit` calls through across a boundary. The price is one instant kept per
//! allowed call, at most `limit` per budget ([`MAX_BUDGET_CALLS`]).
//!
//! A unit is reserved when the budget is checked, and kept only by a call that runs: a call refused at
//! any later step (an approval still pending, a rejection, an audit sink that fails, a gate lowered
//! meanwhile, a decision dropped unfinished) gives it back ([`BudgetStore::release`]). So a budget counts
//! the calls that ran, and "at most `limit` in any window" still holds across processes: a reserved unit
//! counts from the check on, and is given back only once the call can no longer run.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::approval::store::{StoreError, StoreFuture};
use crate::gate::denylist::{DenyRule, DenyRuleError};
use crate::registry::registry;
use toolgate_policy::Risk;

/// The most calls a budget may count: a sliding window keeps one instant per call it counts.
pub const MAX_BUDGET_CALLS: u32 = 100_000;

/// The longest window of a budget.
pub const MAX_BUDGET_WINDOW: Duration = Duration::from_secs(31 * 24 * 3600);

/// What a budget counts: the calls of some tools, of a risk level, or all of the agent's calls.
///
/// `Risk` converts into a scope: `Gate::builder().budget(Risk::HighWrite, 10, hour)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BudgetScope {
    /// The calls of the tools whose id matches: an id or a glob, as a deny rule (`users.*`, `*.delete`).
    /// Every matching tool draws on one budget.
    Tool(String),
    /// The calls judged at exactly this risk (escalation included). Not named `Risk`: a second public
    /// item of that name would make the compiler spell `toolgate::Risk` in full in users' errors.
    RiskLevel(Risk),
    /// Every call of the gate's agent (its agent label).
    Agent,
}

impl BudgetScope {
    /// The calls of the tools whose id matches `pattern` (an id or a glob).
    pub fn tool(pattern: impl Into<String>) -> BudgetScope {
        BudgetScope::Tool(pattern.into())
    }
}

impl From<Risk> for BudgetScope {
    fn from(risk: Risk) -> BudgetScope {
        BudgetScope::RiskLevel(risk)
    }
}

impl fmt::Display for BudgetScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetScope::Tool(pattern) => write!(f, "tool:{pattern}"),
            BudgetScope::RiskLevel(risk) => write!(f, "risk:{risk}"),
            BudgetScope::Agent => f.write_str("agent"),
        }
    }
}

/// One unit asked of one budget, as the gate hands it to a [`BudgetStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BudgetCharge {
    /// What the budget counts: the gate's agent label, the scope, the limit and the window. Budgets
    /// with equal keys are one budget, in one store.
    pub key: Arc<str>,
    /// At most this many calls in any window.
    pub limit: u32,
    /// The window's length.
    pub window: Duration,
    /// What the charge asks of the budget: a unit within the limit, for the budgets of
    /// [`GateBuilder::budget`](crate::GateBuilder::budget).
    pub kind: ChargeKind,
}

/// What a charge asks of its budget. Every kind but [`ChargeKind::Count`] comes of the operator's
/// rules over history, and a store that keeps none of them says so
/// ([`BudgetStore::keeps_history`]): the gate then refuses the calls those rules decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ChargeKind {
    /// A unit, within the limit.
    Count,
    /// A unit whatever the budget holds, never refused (the oldest one leaves past the limit): a
    /// call that a rule over history looks back at.
    Mark,
    /// No unit; refused unless the budget holds one taken within its window.
    Require,
    /// No unit; refused while the budget holds one taken within its window, until it leaves.
    Forbid,
}

/// What a store says of a call's charges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Taken {
    /// Each budget had a unit left; one was taken of each.
    Taken,
    /// A budget has none left; nothing was taken of any.
    Exhausted {
        /// The index, in the charges, of the budget that is out (the one to wait longest for where
        /// several are).
        charge: usize,
        /// How long until it has a unit again.
        retry_after: Duration,
    },
}

/// A budget store's answer to come, independent of the store's borrow: the gate may hold it across an
/// await of an async tool.
pub type BudgetFuture = StoreFuture<'static, Result<Taken, StoreError>>;

/// A release to come: it resolves once the store has given the units back, or has given up.
pub type ReleaseFuture = StoreFuture<'static, ()>;

/// Counts the calls of budgets, in memory or shared by several processes.
///
/// Implementations guarantee, whatever number of gates and processes share them, for every budget
/// key: in any window of its length, at most `limit` calls are taken; a call's charges are taken all
/// or none, atomically. A store that fails refuses the call with `BUDGET_STORE_UNAVAILABLE`.
///
/// [`MemoryBudgets`] is the default (one per gate and its clones); `PostgresStore` (feature
/// `postgres`) shares budgets between processes.
pub trait BudgetStore: Send + Sync + 'static {
    /// Takes one unit of each budget in `charges` (sorted by key, each key once) under `reservation`,
    /// or none when one is exhausted. The store works from the call on: the future only brings the
    /// answer, and a store may have taken the units even when it is dropped unanswered.
    fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture;

    /// Gives back the units that `reservation` took of `charges`: its call was refused after its
    /// budget check and did not run. Nothing where it took none.
    ///
    /// The store works from the call on. The gate awaits the future before it returns the refusal, so
    /// that a unit is back before the caller (or anyone it tells) can ask again; a decision dropped
    /// unfinished drops the future and the release still lands. The future must resolve, as
    /// [`take`](BudgetStore::take)'s must: a release that fails, or does not finish within the store's
    /// own timeout, resolves and leaves the units counted (the budget errs towards fewer calls, never
    /// more). A call whose check failed is refused at once, its release not awaited.
    fn release(&self, charges: &[BudgetCharge], reservation: Reservation) -> ReleaseFuture;

    /// Makes sure, at the commit point of a call that waited for its approver, that `reservation`
    /// still holds a unit of each budget in `charges`: while the approver thought, the unit may have
    /// left its window, or an operator may have reset the budget. A unit still held is kept and
    /// charged nothing more; the units lost are taken again, all or none, within the limits as they
    /// are now. `Exhausted` refuses the call, which then gives back what `reservation` still holds. So
    /// a call that waited is counted in the window it runs in, and after a reset that came while it
    /// waited.
    ///
    /// A store whose units only their windows and releases remove may answer as
    /// [`take`](BudgetStore::take) does, skipping the budgets `reservation` holds a unit of.
    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture;

    /// Whether the store decides every [`ChargeKind`], those of the operator's rules over history
    /// included. A store that does not (the default) is never handed one: the calls such a rule
    /// decides are refused `BUDGET_STORE_UNAVAILABLE`.
    fn keeps_history(&self) -> bool {
        false
    }
}

/// Names the units one call took of its budgets, so that a call refused after its budget check gives
/// back exactly its own: unique across processes (64 random bits of the process, then a counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reservation(u128);

impl Reservation {
    /// A reservation no other call of any process has.
    pub(crate) fn next() -> Reservation {
        static PROCESS: OnceLock<u64> = OnceLock::new();
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let process = *PROCESS.get_or_init(|| {
            let mut bytes = [0u8; 8];
            if getrandom::fill(&mut bytes).is_err() {
                // No randomness: the clock and the process id still tell processes apart.
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                bytes = (nanos ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes();
            }
            u64::from_le_bytes(bytes)
        });
        let count = COUNTER.fetch_add(1, Ordering::Relaxed);
        Reservation(u128::from(process) << 64 | u128::from(count))
    }

    /// The reservation as 16 bytes, big-endian: how a shared store keeps it.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }
}

/// Units of a call's budgets taken under one reservation: given back when dropped, unless committed
/// (the call runs). A decision dropped unfinished, a refusal at any later step and an unwind all give
/// them back.
pub(crate) struct Reserved {
    store: Arc<dyn BudgetStore>,
    charges: Vec<BudgetCharge>,
    id: Reservation,
    armed: bool,
}

impl Reserved {
    /// Whether this reservation holds `charge` in `store` (the same store, not one alike).
    pub(crate) fn holds_in(&self, store: &Arc<dyn BudgetStore>, charge: &BudgetCharge) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.store), Arc::as_ptr(store))
            && self.charges.contains(charge)
    }

    /// Units about to be asked for under `id`: given back when dropped, unless committed.
    pub(crate) fn new(
        store: Arc<dyn BudgetStore>,
        charges: Vec<BudgetCharge>,
        id: Reservation,
    ) -> Reserved {
        Reserved {
            store,
            charges,
            id,
            armed: true,
        }
    }

    /// Asks the store for the units.
    pub(crate) fn take(&self) -> BudgetFuture {
        self.store.take(&self.charges, self.id)
    }

    /// Asks the store whether the units are still held, and for those lost again.
    pub(crate) fn hold(&self) -> BudgetFuture {
        self.store.hold(&self.charges, self.id)
    }

    pub(crate) fn charges(&self) -> &[BudgetCharge] {
        &self.charges
    }

    /// The call runs: its units stay counted.
    pub(crate) fn commit(mut self) {
        self.armed = false;
    }

    /// The call is refused: the units are given back, and the future says when.
    pub(crate) fn give_back(mut self) -> Option<ReleaseFuture> {
        self.armed = false;
        // A store that panics in its release has kept the units.
        catch_unwind(AssertUnwindSafe(|| {
            self.store.release(&self.charges, self.id)
        }))
        .ok()
    }

    /// Nothing was taken: nothing to give back.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl std::fmt::Debug for Reserved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reserved")
            .field("charges", &self.charges.len())
            .field("armed", &self.armed)
            .finish_non_exhaustive()
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if self.armed {
            // Unwaited: the store works from the call on. A store that panics in its release has kept
            // the units: the budget errs towards fewer calls.
            let _ = catch_unwind(AssertUnwindSafe(|| {
                drop(self.store.release(&self.charges, self.id));
            }));
        }
    }
}

/// The releases a refusal waits for: ready once each has landed, failed or panicked (a store that
/// panics has kept the units, as one that fails). One word, so that what a decision waits for stays
/// two.
pub(crate) struct Releases(Box<Pending>);

struct Pending(Vec<ReleaseFuture>);

impl Releases {
    pub(crate) fn new(releases: Vec<ReleaseFuture>) -> Releases {
        Releases(Box::new(Pending(releases)))
    }
}

impl std::future::Future for Releases {
    type Output = ();

    // Only refusals wait for releases: kept out of the decision's own code.
    #[cold]
    #[inline(never)]
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        self.0.0.retain_mut(|release| {
            catch_unwind(AssertUnwindSafe(|| release.as_mut().poll(cx)))
                .is_ok_and(|polled| polled.is_pending())
        });
        if self.0.0.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }
}

/// The calls one budget counts: when each was taken, and under which reservation.
type Uses = VecDeque<(Instant, Reservation)>;

/// Budgets in this process's memory, by [`Instant`]s: shared by the gates given the same store (and by
/// a gate's clones), not by other processes.
#[derive(Default)]
pub struct MemoryBudgets {
    uses: Mutex<HashMap<Arc<str>, Uses, BuildHasherDefault<KeyHasher>>>,
}

/// Hashes budget keys a word at a time. The keys are the application's own configuration, never the
/// agent's input, so the map needs no defence against chosen collisions, and SipHash was a fifth of a
/// counted call's instructions.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut eight = [0u8; 8];
            eight.copy_from_slice(word);
            self.add(u64::from_le_bytes(eight));
        }
        let mut rest = [0u8; 8];
        rest[..words.remainder().len()].copy_from_slice(words.remainder());
        self.add(u64::from_le_bytes(rest));
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl KeyHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl MemoryBudgets {
    /// An empty store.
    pub fn new() -> MemoryBudgets {
        MemoryBudgets::default()
    }

    /// [`BudgetStore::take`] at the instant `now`.
    pub(crate) fn take_at(
        &self,
        charges: &[BudgetCharge],
        reservation: Reservation,
        now: Instant,
    ) -> Taken {
        self.charge(charges, reservation, now, false)
    }

    /// [`BudgetStore::hold`] at the instant `now`.
    pub(crate) fn hold_at(
        &self,
        charges: &[BudgetCharge],
        reservation: Reservation,
        now: Instant,
    ) -> Taken {
        self.charge(charges, reservation, now, true)
    }

    /// Takes a unit of each of `charges`, all or none; with `again`, a budget `reservation` holds a
    /// unit of still is charged nothing.
    fn charge(
        &self,
        charges: &[BudgetCharge],
        reservation: Reservation,
        now: Instant,
        again: bool,
    ) -> Taken {
        // Each update below is complete before the next: a poisoned lock holds consistent logs.
        let mut uses = self.uses.lock().unwrap_or_else(PoisonError::into_inner);
        let mut exhausted: Option<(usize, Duration)> = None;
        for (i, charge) in charges.iter().enumerate() {
            let Some(log) = uses.get_mut(&charge.key) else {
                match charge.kind {
                    ChargeKind::Count if charge.limit == 0 => {
                        exhausted = exhausted.max_by_retry(i, charge.window);
                    }
                    ChargeKind::Require => exhausted = exhausted.max_by_retry(i, Duration::ZERO),
                    _ => {}
                }
                continue;
            };
            // What a requirement or a prohibition reads: the units of others within its window.
            // Several rules read one history over windows of their own: only a unit's own window
            // (a mark's is the longest) takes it out.
            let others_within = |log: &Uses| {
                let start = now.checked_sub(charge.window);
                log.iter()
                    .rev()
                    .take_while(|&&(at, _)| start.is_none_or(|start| at > start))
                    .filter(|&&(_, r)| r != reservation)
                    .map(|&(at, _)| at)
                    .next()
            };
            match charge.kind {
                ChargeKind::Require => {
                    if others_within(log).is_none() {
                        exhausted = exhausted.max_by_retry(i, Duration::ZERO);
                    }
                    continue;
                }
                ChargeKind::Forbid => {
                    if let Some(at) = others_within(log) {
                        let retry = (at + charge.window).saturating_duration_since(now);
                        exhausted = exhausted.max_by_retry(i, retry);
                    }
                    continue;
                }
                ChargeKind::Mark | ChargeKind::Count => {}
            }
            if let Some(start) = now.checked_sub(charge.window) {
                while log.front().is_some_and(|&(at, _)| at <= start) {
                    log.pop_front();
                }
            }
            if again && log.iter().any(|&(_, r)| r == reservation) {
                continue;
            }
            let limit = charge.limit as usize;
            if charge.kind == ChargeKind::Count && log.len() >= limit {
                // The call that must leave the window for one more to fit.
                let retry = match log.len().checked_sub(limit).and_then(|i| log.get(i)) {
                    Some(&(at, _)) => (at + charge.window).saturating_duration_since(now),
                    None => charge.window,
                };
                exhausted = exhausted.max_by_retry(i, retry);
            }
        }
        if let Some((charge, retry_after)) = exhausted {
            return Taken::Exhausted {
                charge,
                retry_after,
            };
        }
        for charge in charges {
            if !matches!(charge.kind, ChargeKind::Count | ChargeKind::Mark) {
                continue;
            }
            match uses.get_mut(&charge.key) {
                // Read as the check above read it: nothing changed under the lock.
                Some(log) if again && log.iter().any(|&(_, r)| r == reservation) => {}
                Some(log) => {
                    // A mark is never refused: past its bound, the oldest leaves.
                    while charge.kind == ChargeKind::Mark && log.len() >= charge.limit as usize {
                        log.pop_front();
                    }
                    log.push_back((now, reservation));
                }
                None => {
                    uses.insert(charge.key.clone(), VecDeque::from([(now, reservation)]));
                }
            }
        }
        Taken::Taken
    }

    /// [`BudgetStore::release`].
    pub(crate) fn release_now(&self, charges: &[BudgetCharge], reservation: Reservation) {
        let mut uses = self.uses.lock().unwrap_or_else(PoisonError::into_inner);
        for charge in charges {
            if let Some(log) = uses.get_mut(&charge.key)
                // The newest first: a call is released soon after it was taken.
                && let Some(at) = log.iter().rposition(|&(_, r)| r == reservation)
            {
                log.remove(at);
            }
        }
    }
}

trait Longest {
    fn max_by_retry(self, charge: usize, retry: Duration) -> Self;
}

impl Longest for Option<(usize, Duration)> {
    fn max_by_retry(self, charge: usize, retry: Duration) -> Self {
        match self {
            Some((_, longest)) if longest >= retry => self,
            _ => Some((charge, retry)),
        }
    }
}

impl BudgetStore for MemoryBudgets {
    fn take(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        Box::pin(std::future::ready(Ok(self.take_at(
            charges,
            reservation,
            Instant::now(),
        ))))
    }

    fn release(&self, charges: &[BudgetCharge], reservation: Reservation) -> ReleaseFuture {
        self.release_now(charges, reservation);
        Box::pin(std::future::ready(()))
    }

    fn hold(&self, charges: &[BudgetCharge], reservation: Reservation) -> BudgetFuture {
        Box::pin(std::future::ready(Ok(self.hold_at(
            charges,
            reservation,
            Instant::now(),
        ))))
    }

    fn keeps_history(&self) -> bool {
        true
    }
}

impl fmt::Debug for MemoryBudgets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.uses.lock().map_or(0, |uses| uses.len());
        f.debug_struct("MemoryBudgets")
            .field("keys", &keys)
            .finish_non_exhaustive()
    }
}

/// A budget as [`GateBuilder::budget`](crate::GateBuilder::budget) received it.
#[derive(Debug, Clone)]
pub(crate) struct BudgetSpec {
    pub(crate) scope: BudgetScope,
    pub(crate) limit: u32,
    pub(crate) window: Duration,
    /// For a budget of an operator's policy, the table it is written in (`[principals."alice"]`),
    /// part of its key, and the rule's place, which refusals name: `None` for the code's budgets.
    pub(crate) owner: Option<(Arc<str>, Arc<str>)>,
}

/// Whether a rule over history requires the other call, or forbids it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    not(feature = "policy-file"),
    expect(dead_code, reason = "the policy file writes them")
)]
pub(crate) enum HistoryOrder {
    /// `after`: only within the window after a call of the other tools ended without an error.
    After,
    /// `not_after`: never within the window after a call of the other tools ran.
    NotAfter,
}

/// Whose calls a rule over history looks back at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    not(feature = "policy-file"),
    expect(dead_code, reason = "the policy file writes them")
)]
pub(crate) enum HistoryPer {
    /// Every gate of the same principal that shares the budget store, across processes.
    Principal,
    /// The gate's own session: its calls, and its clones'.
    Session,
}

/// A rule of the operator's policy over the calls before a call, as the gate builds it.
#[derive(Debug, Clone)]
pub(crate) struct HistorySpec {
    pub(crate) tool: String,
    pub(crate) order: HistoryOrder,
    pub(crate) other: String,
    pub(crate) within: Duration,
    pub(crate) per: HistoryPer,
    /// The table it is written in, and the rule's place.
    pub(crate) owner: (Arc<str>, Arc<str>),
}

/// Whose history a gate's rules over history read: its principal's, or its session's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HistoryOwners<'a> {
    pub(crate) principal: Option<&'a str>,
    pub(crate) session: &'a str,
}

/// A budget that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BudgetError {
    /// A limit of no call: that is a deny rule (`Gate::builder().deny(..)`).
    ZeroLimit(BudgetScope),
    /// More calls than [`MAX_BUDGET_CALLS`].
    TooManyCalls(BudgetScope, u32),
    /// A window of zero, or longer than [`MAX_BUDGET_WINDOW`].
    Window(BudgetScope, Duration),
    /// A tool pattern that is not valid or matches no linked tool.
    Pattern(DenyRuleError),
    /// The gate's agent label, part of every budget's key, is not one name a person reads (the rule
    /// of [`names::refusal`](crate::names::refusal)): a label that reads as another's would count
    /// under a key of its own, and one holding a control character could spell another's key (the
    /// key's fields are kept apart by U+001F). The label, and why.
    AgentLabel(String, String),
    /// The gate's principal, part of the key of every rule over history per principal, is not one
    /// name a person reads. The name, and why.
    Principal(String, String),
}

impl fmt::Display for BudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetError::ZeroLimit(scope) => write!(
                f,
                "the budget of {scope} allows no call: refuse the tools with a deny rule instead"
            ),
            BudgetError::TooManyCalls(scope, limit) => write!(
                f,
                "the budget of {scope} counts {limit} calls, more than {MAX_BUDGET_CALLS}"
            ),
            BudgetError::Window(scope, window) => write!(
                f,
                "the budget of {scope} has a window of {} s: it must be more than zero and at most \
                 {} s",
                window.as_secs_f64(),
                MAX_BUDGET_WINDOW.as_secs()
            ),
            BudgetError::Pattern(error) => write!(f, "a budget's tool pattern: {error}"),
            BudgetError::AgentLabel(label, why) => write!(
                f,
                "the agent label {}, part of every budget's key, is refused: {why}",
                crate::terminal::escaped(&format!("{label:?}"))
            ),
            BudgetError::Principal(name, why) => write!(
                f,
                "the principal {}, part of the key of every rule over history, is refused: {why}",
                crate::terminal::escaped(&format!("{name:?}"))
            ),
        }
    }
}

impl std::error::Error for BudgetError {}

/// One budget of a gate.
#[derive(Debug)]
struct Budget {
    charge: BudgetCharge,
    /// What a refusal names: "10 calls of HIGH_WRITE per 3600 s".
    label: Arc<str>,
    /// A rule over history, whose refusals are `HISTORY_REFUSED`.
    history: bool,
}

/// Which calls a budget covers.
enum Covers {
    Rule(DenyRule),
    Risk(Risk),
    Agent,
    /// Per registry slot.
    Slots(Vec<bool>),
}

/// A gate's budgets, and which calls each covers.
pub(crate) struct Budgets {
    /// Sorted by key, then kind and window: the charges of a call, taken in index order, are sorted
    /// too. A key is charged once per call, but for the rules over history, which may check one
    /// history over several windows and mark it too.
    list: Box<[Budget]>,
    /// Per registry slot, the tool and agent budgets that cover it (indices into `list`, ascending).
    by_slot: Box<[Box<[u32]>]>,
    /// Per risk level, the budgets of that level.
    by_risk: [Box<[u32]>; 4],
    /// Per registry slot, the marks a call of the tool leaves once it ends without an error: the
    /// calls that rules over history (`after`) look back at.
    marks: Box<[Box<[BudgetCharge]>]>,
    pub(crate) store: Arc<dyn BudgetStore>,
}

impl Budgets {
    /// A gate's budgets, from the builder's specs. `agent` is the gate's agent label, part of every key.
    pub(crate) fn build(
        specs: Vec<BudgetSpec>,
        store: Option<Arc<dyn BudgetStore>>,
        agent: Option<&str>,
    ) -> Result<Option<Budgets>, Vec<BudgetError>> {
        let owners = HistoryOwners {
            principal: None,
            session: "",
        };
        Budgets::build_with_history(specs, Vec::new(), store, agent, owners)
    }

    /// A gate's budgets and rules over history. The history of a rule per principal is kept under
    /// the principal's name, that of a rule per session under the gate's session.
    pub(crate) fn build_with_history(
        specs: Vec<BudgetSpec>,
        history: Vec<HistorySpec>,
        store: Option<Arc<dyn BudgetStore>>,
        agent: Option<&str>,
        owners: HistoryOwners<'_>,
    ) -> Result<Option<Budgets>, Vec<BudgetError>> {
        if specs.is_empty() && history.is_empty() {
            return Ok(None);
        }
        let entries = &registry().entries;
        let mut errors = Vec::new();
        if let Some((agent, why)) = agent.and_then(|a| Some((a, crate::names::refusal(a)?))) {
            errors.push(BudgetError::AgentLabel(agent.to_owned(), why));
        }
        let mut built: Vec<(Budget, Covers)> = Vec::new();
        for spec in specs {
            let scope = spec.scope.clone();
            if spec.limit == 0 {
                errors.push(BudgetError::ZeroLimit(scope));
                continue;
            }
            if spec.limit > MAX_BUDGET_CALLS {
                errors.push(BudgetError::TooManyCalls(scope, spec.limit));
                continue;
            }
            if spec.window.is_zero() || spec.window > MAX_BUDGET_WINDOW {
                errors.push(BudgetError::Window(scope, spec.window));
                continue;
            }
            let (covers, what) = match &spec.scope {
                BudgetScope::Tool(pattern) => match reaching(pattern) {
                    Ok(rule) => (Covers::Rule(rule), format!("`{pattern}`")),
                    Err(error) => {
                        errors.push(BudgetError::Pattern(error));
                        continue;
                    }
                },
                BudgetScope::RiskLevel(risk) => (Covers::Risk(*risk), format!("{risk}")),
                BudgetScope::Agent => (Covers::Agent, "any tool".to_owned()),
            };
            let window = window_text(spec.window);
            let mut label = match agent {
                Some(agent) => format!(
                    "{} calls of {what} per {window} for agent `{agent}`",
                    spec.limit
                ),
                None => format!("{} calls of {what} per {window}", spec.limit),
            };
            // Fields apart by a separator that no label (refused above), id or risk holds.
            let mut key = format!(
                "{}\u{1f}{}\u{1f}{}\u{1f}{}",
                agent.unwrap_or(""),
                spec.scope,
                spec.limit,
                spec.window.as_nanos()
            );
            if let Some((table, rule)) = &spec.owner {
                label = format!("{label}, the operator's policy {table} ({rule})");
                key = format!("policy {table}\u{1f}{key}");
            }
            let charge = BudgetCharge {
                key: key.into(),
                limit: spec.limit,
                window: spec.window,
                kind: ChargeKind::Count,
            };
            let label = label.into();
            let budget = Budget {
                charge,
                label,
                history: false,
            };
            built.push((budget, covers));
        }
        let mut marks: Vec<Vec<BudgetCharge>> = vec![Vec::new(); entries.len()];
        if !history.is_empty()
            && let Some(principal) = owners.principal
            && let Some(why) = crate::names::refusal(principal)
        {
            errors.push(BudgetError::Principal(principal.to_owned(), why));
        }
        for rule in history {
            if rule.within.is_zero() || rule.within > MAX_BUDGET_WINDOW {
                errors.push(BudgetError::Window(
                    BudgetScope::Tool(rule.tool.clone()),
                    rule.within,
                ));
                continue;
            }
            let (tool, other) = match (reaching(&rule.tool), reaching(&rule.other)) {
                (Ok(tool), Ok(other)) => (tool, other),
                (Err(error), _) | (_, Err(error)) => {
                    errors.push(BudgetError::Pattern(error));
                    continue;
                }
            };
            let (order, what) = match rule.order {
                HistoryOrder::After => ("after", "only within"),
                HistoryOrder::NotAfter => ("not_after", "not within"),
            };
            let (who, whose) = match (rule.per, owners.principal) {
                (HistoryPer::Principal, Some(principal)) => (
                    format!("principal {principal}"),
                    format!("for principal `{principal}`"),
                ),
                (HistoryPer::Principal, None) => (
                    "principal".to_owned(),
                    "for gates without a principal".to_owned(),
                ),
                (HistoryPer::Session, _) => (
                    format!("session {}", owners.session),
                    "in this session".to_owned(),
                ),
            };
            let (table, place) = &rule.owner;
            // The history is what happened, whichever rule reads it: the calls of the tools it
            // looks back at, for whom. A rule moved to another table, or given another window,
            // reads the same history; so do two rules over the same calls.
            let key: Arc<str> = format!(
                "policy history\u{1f}\u{1f}history {order}:{} per {who}\u{1f}0\u{1f}{}",
                rule.other,
                MAX_BUDGET_WINDOW.as_nanos()
            )
            .into();
            let ended = match rule.order {
                HistoryOrder::After => " ended without an error",
                HistoryOrder::NotAfter => " ran",
            };
            let label: Arc<str> = format!(
                "{what} {} after a call of `{}`{ended} {whose}, the operator's policy {table} \
                 ({place})",
                window_text(rule.within),
                rule.other
            )
            .into();
            let check = |kind| BudgetCharge {
                key: key.clone(),
                limit: 0,
                window: rule.within,
                kind,
            };
            // A mark is kept as long as any rule may read it.
            let mark = BudgetCharge {
                key: key.clone(),
                limit: MAX_BUDGET_CALLS,
                window: MAX_BUDGET_WINDOW,
                kind: ChargeKind::Mark,
            };
            let mut by_kind: Vec<(BudgetCharge, Vec<bool>)> = Vec::new();
            let mut cover = |charge: BudgetCharge, slot: usize| {
                let at = match by_kind.iter().position(|(c, _)| *c == charge) {
                    Some(at) => at,
                    None => {
                        by_kind.push((charge, vec![false; entries.len()]));
                        by_kind.len() - 1
                    }
                };
                by_kind[at].1[slot] = true;
            };
            for (slot, entry) in entries.iter().enumerate() {
                let (is_tool, is_other) = (tool.matches_entry(entry), other.matches_entry(entry));
                match rule.order {
                    HistoryOrder::After => {
                        if is_tool {
                            cover(check(ChargeKind::Require), slot);
                        } else if is_other && !marks[slot].contains(&mark) {
                            marks[slot].push(mark.clone());
                        }
                    }
                    // Where the tool is one of the others too, the check and the mark are taken
                    // together: of calls that race, one runs.
                    HistoryOrder::NotAfter => {
                        if is_tool {
                            cover(check(ChargeKind::Forbid), slot);
                        }
                        if is_other {
                            cover(mark.clone(), slot);
                        }
                    }
                }
            }
            for (charge, slots) in by_kind {
                let budget = Budget {
                    charge,
                    label: label.clone(),
                    history: true,
                };
                built.push((budget, Covers::Slots(slots)));
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        // Two rules may check one history over windows of their own: each is a charge.
        let order = |b: &Budget| (b.charge.key.clone(), b.charge.kind, b.charge.window);
        built.sort_by_key(|b| order(&b.0));
        built.dedup_by(|a, b| order(&a.0) == order(&b.0));
        let by_slot = entries
            .iter()
            .enumerate()
            .map(|(slot, entry)| {
                (0u32..)
                    .zip(&built)
                    .filter(|(_, (_, covers))| match covers {
                        Covers::Rule(rule) => rule.matches_entry(entry),
                        Covers::Agent => true,
                        Covers::Risk(_) => false,
                        Covers::Slots(slots) => slots[slot],
                    })
                    .map(|(i, _)| i)
                    .collect()
            })
            .collect();
        let by_risk = Risk::ALL.map(|level| {
            (0u32..)
                .zip(&built)
                .filter(|(_, (_, covers))| matches!(covers, Covers::Risk(risk) if *risk == level))
                .map(|(i, _)| i)
                .collect()
        });
        Ok(Some(Budgets {
            list: built.into_iter().map(|(budget, _)| budget).collect(),
            by_slot,
            by_risk,
            marks: marks.into_iter().map(Vec::into_boxed_slice).collect(),
            store: store.unwrap_or_else(|| Arc::new(MemoryBudgets::new())),
        }))
    }

    /// The marks a call of the tool in `slot` leaves once it ends without an error.
    pub(crate) fn marks(&self, slot: usize) -> &[BudgetCharge] {
        self.marks.get(slot).map_or(&[][..], |m| &m[..])
    }

    /// Whether a budget covers some call of the tool in `slot` at its declared risk: such calls leave
    /// the inlined check.
    pub(crate) fn covers(&self, slot: usize, declared: Risk) -> bool {
        self.by_slot.get(slot).is_none_or(|b| !b.is_empty())
            || !self.marks(slot).is_empty()
            || !self.by_risk[declared as usize].is_empty()
    }

    /// The charges of a call of the tool in `slot` judged at `risk`, sorted by key; empty where no
    /// budget covers it.
    pub(crate) fn charges(&self, slot: usize, risk: Risk) -> Vec<BudgetCharge> {
        let tool = self.by_slot.get(slot).map_or(&[][..], |b| &b[..]);
        let level = &self.by_risk[risk as usize][..];
        let mut charges = Vec::with_capacity(tool.len() + level.len());
        let (mut i, mut j) = (0, 0);
        while i < tool.len() || j < level.len() {
            let next = match (tool.get(i), level.get(j)) {
                (Some(&a), Some(&b)) if a <= b => {
                    i += 1;
                    a
                }
                (_, Some(&b)) => {
                    j += 1;
                    b
                }
                (Some(&a), None) => {
                    i += 1;
                    a
                }
                (None, None) => break,
            };
            charges.push(self.list[next as usize].charge.clone());
        }
        charges
    }

    /// Whether a budget of this list is charged as `charge`.
    pub(crate) fn has(&self, charge: &BudgetCharge) -> bool {
        self.list.iter().any(|budget| budget.charge == *charge)
    }

    /// Whether the budget charged as `charge` is a rule over history.
    pub(crate) fn is_history(&self, charge: &BudgetCharge) -> bool {
        self.list
            .iter()
            .any(|budget| budget.charge == *charge && budget.history)
    }

    /// What a refusal names of the budget charged as `charge`.
    pub(crate) fn label(&self, charge: &BudgetCharge) -> Arc<str> {
        self.list
            .iter()
            .find(|budget| budget.charge == *charge)
            .map_or_else(|| Arc::from("a budget"), |budget| budget.label.clone())
    }
}

/// The rule of `pattern`, where it is valid and reaches a linked tool.
fn reaching(pattern: &str) -> Result<DenyRule, DenyRuleError> {
    let rule = DenyRule::parse(pattern)?;
    if registry().entries.iter().any(|e| rule.matches_entry(e)) {
        Ok(rule)
    } else {
        Err(DenyRuleError::MatchesNothing {
            pattern: pattern.to_owned(),
        })
    }
}

fn window_text(window: Duration) -> String {
    if window.subsec_nanos() == 0 {
        format!("{} s", window.as_secs())
    } else {
        format!("{} s", window.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(key: &str, limit: u32, window: Duration) -> BudgetCharge {
        BudgetCharge {
            key: key.into(),
            limit,
            window,
            kind: ChargeKind::Count,
        }
    }

    // The edge of the sliding window: a call allowed at `t` still counts at `t + window - 1 ns` and
    // no longer at `t + window`; the refusal says exactly how long is left.
    #[test]
    fn a_call_counts_until_its_window_has_passed_and_not_an_instant_longer() {
        let store = MemoryBudgets::new();
        let window = Duration::from_secs(60);
        let one = [charge("k", 2, window)];
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(10);
        assert_eq!(store.take_at(&one, Reservation::next(), t0), Taken::Taken);
        assert_eq!(store.take_at(&one, Reservation::next(), t1), Taken::Taken);
        let just_before = t0 + window - Duration::from_nanos(1);
        assert_eq!(
            store.take_at(&one, Reservation::next(), just_before),
            Taken::Exhausted {
                charge: 0,
                retry_after: Duration::from_nanos(1)
            }
        );
        assert_eq!(
            store.take_at(&one, Reservation::next(), t0 + window),
            Taken::Taken
        );
        // Now t1 is the oldest in the window, and two are in it.
        assert_eq!(
            store.take_at(&one, Reservation::next(), t0 + window),
            Taken::Exhausted {
                charge: 0,
                retry_after: Duration::from_secs(10)
            }
        );
    }

    #[test]
    fn charges_are_taken_all_or_none_and_the_longest_wait_is_told() {
        let store = MemoryBudgets::new();
        let t0 = Instant::now();
        let short = charge("a", 1, Duration::from_secs(5));
        let long = charge("b", 3, Duration::from_secs(50));
        assert_eq!(
            store.take_at(std::slice::from_ref(&short), Reservation::next(), t0),
            Taken::Taken
        );
        // `a` is out: `b` is not charged.
        let both = [short.clone(), long.clone()];
        assert!(matches!(
            store.take_at(&both, Reservation::next(), t0),
            Taken::Exhausted { charge: 0, .. }
        ));
        for _ in 0..3 {
            assert_eq!(
                store.take_at(std::slice::from_ref(&long), Reservation::next(), t0),
                Taken::Taken
            );
        }
        assert_eq!(
            store.take_at(&both, Reservation::next(), t0 + Duration::from_secs(1)),
            Taken::Exhausted {
                charge: 1,
                retry_after: Duration::from_secs(49)
            }
        );
    }

    // Every sequence of up to 6 calls at instants 0..4 s, against every limit of 1..=3 and window of
    // 1..=3 s: the store agrees with counting the allowed calls in the window by hand.
    #[test]
    fn the_store_agrees_with_counting_by_hand_on_every_short_schedule() {
        let t0 = Instant::now();
        for limit in 1..=3u32 {
            for window_s in 1..=3u64 {
                let window = Duration::from_secs(window_s);
                for length in 0..=6u32 {
                    for schedule in 0..5u32.pow(length) {
                        let store = MemoryBudgets::new();
                        let one = [charge("k", limit, window)];
                        let mut allowed: Vec<u64> = Vec::new();
                        let mut at = 0;
                        let mut code = schedule;
                        for _ in 0..length {
                            at += u64::from(code % 5) * 1000 / 2;
                            code /= 5;
                            let in_window = allowed
                                .iter()
                                .filter(|&&t| t + window_s * 1000 > at)
                                .count();
                            let expected = in_window < limit as usize;
                            let got = store.take_at(
                                &one,
                                Reservation::next(),
                                t0 + Duration::from_millis(at),
                            );
                            assert_eq!(
                                got == Taken::Taken,
                                expected,
                                "limit {limit}, window {window_s} s, schedule {schedule}/{length}"
                            );
                            if expected {
                                allowed.push(at);
                            }
                        }
                    }
                }
            }
        }
    }

    proptest::proptest! {
        // The invariant, over random schedules of calls charged to one or two budgets: in no window
        // of a budget's length were more than its limit allowed, and a call was refused only when a
        // budget it is charged to was full.
        #[test]
        fn never_more_than_the_limit_in_any_window(
            limits in (1u32..6, 1u32..6),
            windows in (1u64..2000, 1u64..2000),
            calls in proptest::collection::vec((0u64..700, 0u8..3), 1..120),
        ) {
            let store = MemoryBudgets::new();
            let t0 = Instant::now();
            let budgets = [
                charge("a", limits.0, Duration::from_millis(windows.0)),
                charge("b", limits.1, Duration::from_millis(windows.1)),
            ];
            let mut allowed: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
            let mut at = 0u64;
            for (gap, which) in calls {
                at += gap;
                let charged: &[usize] = match which {
                    0 => &[0],
                    1 => &[1],
                    _ => &[0, 1],
                };
                let charges: Vec<BudgetCharge> =
                    charged.iter().map(|&b| budgets[b].clone()).collect();
                let full = |b: usize| {
                    let window = budgets[b].window.as_millis() as u64;
                    allowed[b].iter().filter(|&&t| t + window > at).count()
                        >= budgets[b].limit as usize
                };
                let any_full = charged.iter().any(|&b| full(b));
                let taken = store.take_at(&charges, Reservation::next(), t0 + Duration::from_millis(at));
                proptest::prop_assert_eq!(taken == Taken::Taken, !any_full);
                if let Taken::Exhausted { charge, retry_after } = taken {
                    proptest::prop_assert!(full(charged[charge]));
                    proptest::prop_assert!(retry_after <= budgets[charged[charge]].window);
                } else {
                    for &b in charged {
                        allowed[b].push(at);
                    }
                }
            }
            for b in 0..2 {
                let window = budgets[b].window.as_millis() as u64;
                for &end in &allowed[b] {
                    let in_window =
                        allowed[b].iter().filter(|&&t| t <= end && t + window > end).count();
                    proptest::prop_assert!(in_window <= budgets[b].limit as usize);
                }
            }
        }
    }
}
