//! A policy that changes while gates run: replaced by a call, or by a watch on its file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::file::PolicyFile;
use super::model::PolicyErrors;
use crate::canonical::sha256_hex;
use crate::gate::builder::PolicySource;
use crate::gate::narrowing::Narrowing;
use crate::gate::{Gate, WeakGate};

/// A policy file that gates follow while it changes: build gates with
/// [`GateBuilder::policy`](crate::GateBuilder::policy)`(live.clone())`, then replace the file
/// ([`LivePolicy::replace`], [`LivePolicy::reload`], or a [`PolicyWatch`] on its path).
///
/// A replacement reaches every gate built with it before `replace` returns, each gate writing a
/// `policy_changed` record. A file that does not check is refused: every gate keeps the policy it
/// follows and writes a `policy_refused` record, and the caller gets the errors.
///
/// ```
/// # extern crate toolgate_runtime as toolgate;
/// use toolgate::policy_file::{LivePolicy, PolicyFile};
/// use toolgate::{Gate, Mode};
///
/// let live = LivePolicy::new(PolicyFile::parse("policy.toml", "format = 1\n[defaults]\nceiling = \"ADVISORY\"\n")?);
/// let gate = Gate::builder().mode(Mode::FullAuto).policy(live.clone()).build()?;
/// assert_eq!(gate.mode(), Mode::Advisory);
///
/// live.replace(PolicyFile::parse("policy.toml", "format = 1\n[defaults]\nceiling = \"SHADOW\"\n")?, "ops");
/// assert_eq!(gate.mode(), Mode::Shadow);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct LivePolicy {
    inner: Arc<Live>,
}

struct Live {
    /// The file every gate follows, and the gates; one lock, so that a gate joining while the file
    /// is replaced follows the new one.
    state: Mutex<State>,
    path: Option<PathBuf>,
}

struct State {
    /// `None`: no file yet (a fleet's policy before one is applied); the gates are not narrowed.
    current: Option<Arc<PolicyFile>>,
    gates: Vec<WeakGate>,
}

impl LivePolicy {
    /// A live policy, starting with `file`.
    pub fn new(file: PolicyFile) -> LivePolicy {
        LivePolicy::with_path(Some(file), None)
    }

    /// A live policy with no file yet: gates built with it are not narrowed until one replaces it.
    pub fn none() -> LivePolicy {
        LivePolicy::with_path(None, None)
    }

    /// Reads and checks the policy file at `path`; [`LivePolicy::reload`] reads it again.
    pub fn load(path: impl AsRef<Path>) -> Result<LivePolicy, PolicyErrors> {
        let path = path.as_ref();
        Ok(LivePolicy::with_path(
            Some(PolicyFile::load(path)?),
            Some(path.to_owned()),
        ))
    }

    fn with_path(file: Option<PolicyFile>, path: Option<PathBuf>) -> LivePolicy {
        LivePolicy {
            inner: Arc::new(Live {
                state: Mutex::new(State {
                    current: file.map(Arc::new),
                    gates: Vec::new(),
                }),
                path,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The file the gates follow now (`None` before the first one).
    pub fn current(&self) -> Option<Arc<PolicyFile>> {
        self.state().current.clone()
    }

    /// Makes every gate built with this policy follow `file` (checked, since a [`PolicyFile`] only
    /// exists checked), `by` naming who changed it in their `policy_changed` records. Returns whether
    /// the file differs from the one they followed.
    pub fn replace(&self, file: PolicyFile, by: &str) -> bool {
        self.set(Some(file), by)
    }

    /// Makes every gate built with this policy follow no file: nothing narrows them any more (a
    /// widening back to what the code allows). Returns whether they followed one.
    pub fn clear(&self, by: &str) -> bool {
        self.set(None, by)
    }

    fn set(&self, file: Option<PolicyFile>, by: &str) -> bool {
        let mut state = self.state();
        let digest = |f: Option<&PolicyFile>| f.map(|f| f.digest().to_owned());
        if digest(state.current.as_deref()) == digest(file.as_ref()) {
            return false;
        }
        state.current = file.map(Arc::new);
        let current = state.current.clone();
        state.gates.retain(|gate| match gate.upgrade() {
            Some(gate) => {
                gate.follow_policy(narrowing_of(current.as_deref(), &gate), by);
                true
            }
            None => false,
        });
        true
    }

    /// Reads the file again from the path it was loaded from and replaces the policy with it
    /// (`Ok(false)` when its text did not change). A file that cannot be read or does not check is
    /// refused: the gates keep their policy and each records `policy_refused`.
    pub fn reload(&self, by: &str) -> Result<bool, PolicyErrors> {
        let Some(path) = self.inner.path.clone() else {
            return Ok(false);
        };
        match PolicyFile::load(&path) {
            Ok(file) => Ok(self.replace(file, by)),
            Err(errors) => {
                self.refused(&errors, by);
                Err(errors)
            }
        }
    }

    /// Every gate records that a policy was refused and the one it follows is kept.
    pub(crate) fn refused(&self, errors: &PolicyErrors, by: &str) {
        let state = self.state();
        let why = format!(
            "policy refused, policy {} kept: {}",
            state.current.as_deref().map_or("none", PolicyFile::digest),
            errors
                .0
                .first()
                .map_or_else(String::new, ToString::to_string)
        );
        for gate in state.gates.iter().filter_map(WeakGate::upgrade) {
            gate.note_policy_refused(&why, by);
        }
    }

    /// Watches the file this policy was loaded from, reading it every `every` and replacing the
    /// policy when its text changed (as [`LivePolicy::reload`] does, `by` "policy watch"). A file that
    /// does not check is refused once per text. The watch ends when the [`PolicyWatch`] is dropped.
    ///
    /// Returns `None` for a policy not loaded from a file.
    pub fn watch(&self, every: Duration) -> Option<PolicyWatch> {
        let path = self.inner.path.clone()?;
        let stop = Arc::new(AtomicBool::new(false));
        let live = self.clone();
        let stopping = stop.clone();
        // What the gates follow, not what the file holds when the thread starts: a text written
        // between this call and the thread's first read is still a change.
        let followed = self.current().map(|file| file.digest().to_owned());
        let thread = std::thread::Builder::new()
            .name("toolgate-policy-watch".into())
            .spawn(move || {
                let mut seen = followed;
                while !stopping.load(Ordering::Acquire) {
                    std::thread::park_timeout(every);
                    if stopping.load(Ordering::Acquire) {
                        break;
                    }
                    let now = std::fs::read(&path).ok().map(|t| sha256_hex(&t));
                    if now != seen {
                        seen = now;
                        if let Err(errors) = live.reload("policy watch") {
                            report_refused(&path, &errors, live.current().as_deref());
                        }
                    }
                }
            })
            .ok()?;
        Some(PolicyWatch {
            stop,
            thread: Some(thread),
        })
    }
}

impl PolicySource for LivePolicy {
    fn narrowing(&self, principal: Option<&str>, agent: Option<&str>) -> Narrowing {
        match self.current() {
            Some(file) => file.narrowing(principal, agent),
            None => Narrowing::none(),
        }
    }

    fn follow(&self, gate: &Gate) {
        let mut state = self.state();
        // Replaced between the gate's build and now: it follows the file in force.
        if gate.policy_digest().as_deref() != state.current.as_deref().map(PolicyFile::digest) {
            gate.follow_policy(narrowing_of(state.current.as_deref(), gate), "policy watch");
        }
        state.gates.retain(|g| g.upgrade().is_some());
        state.gates.push(gate.downgrade());
    }
}

impl std::fmt::Debug for LivePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("LivePolicy")
            .field("current", &state.current.as_deref().map(PolicyFile::digest))
            .field("path", &self.inner.path)
            .field("gates", &state.gates.len())
            .finish()
    }
}

/// Tells the operator who saved a file that it was refused: a `tracing` error, and, where the
/// application set no `tracing` subscriber, the same on stderr, since the audit log's
/// `policy_refused` record is not where whoever edits the file looks.
fn report_refused(path: &std::path::Path, errors: &PolicyErrors, kept: Option<&PolicyFile>) {
    let kept = kept.map_or("none", PolicyFile::digest);
    tracing::error!(
        target: "toolgate::policy",
        path = %path.display(),
        kept,
        %errors,
        "policy file refused; the policy in force is kept"
    );
    if !tracing::dispatcher::has_been_set() {
        let text = format!(
            "toolgate: the policy file {} was refused; the policy in force ({kept}) is kept:\n{errors}",
            path.display()
        );
        // Each line as a terminal shows it: a path or a rule may hold what would hide or reorder it.
        let shown: Vec<_> = text.lines().map(crate::terminal::escaped).collect();
        eprintln!("{}", shown.join("\n"));
    }
}

/// What `file` (or no file) takes away from `gate`.
fn narrowing_of(file: Option<&PolicyFile>, gate: &Gate) -> Narrowing {
    match file {
        Some(file) => file.narrowing(gate.principal(), gate.agent()),
        None => Narrowing::none(),
    }
}

/// A watch on a policy file ([`LivePolicy::watch`]); dropping it ends the watch.
#[derive(Debug)]
pub struct PolicyWatch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for PolicyWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}
