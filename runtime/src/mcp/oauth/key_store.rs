//! The keys held, and their loads again: on an unknown key, when grown old, never more often than
//! the refresh interval.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::algorithms::Algorithm;
use super::jwks::Loader;
use super::keys::Key;

/// The keys of one load: loaded when, and the generation of tokens they verified. The generation
/// moves on when a load removes or changes a key, which ends every cached outcome of before.
pub(super) struct KeySet {
    pub(super) keys: Vec<Key>,
    pub(super) generation: u64,
    loaded: Instant,
}

/// The JWKS held, and its loads again.
pub(super) struct KeyStore {
    loader: Loader,
    set: RwLock<Arc<KeySet>>,
    /// One load at a time: the requests that wait for keys wait for that one.
    flight: tokio::sync::Mutex<()>,
    /// When the last load after the first began.
    last_refresh: Mutex<Option<Instant>>,
    /// Whether a request is loading a set grown old; the others go on with it meanwhile.
    refreshing_stale: AtomicBool,
    refresh_interval: Duration,
    max_age: Duration,
    algorithms: Vec<Algorithm>,
}

impl KeyStore {
    /// The keys of the first load, loaded again as `refresh_interval` and `max_age` say.
    pub(super) fn new(
        loader: Loader,
        keys: Vec<Key>,
        refresh_interval: Duration,
        max_age: Duration,
        algorithms: Vec<Algorithm>,
    ) -> KeyStore {
        KeyStore {
            loader,
            set: RwLock::new(Arc::new(KeySet {
                keys,
                generation: 0,
                loaded: Instant::now(),
            })),
            flight: tokio::sync::Mutex::new(()),
            last_refresh: Mutex::new(None),
            refreshing_stale: AtomicBool::new(false),
            refresh_interval,
            max_age,
            algorithms,
        }
    }

    pub(super) fn current(&self) -> Arc<KeySet> {
        Arc::clone(&self.set.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn last_refresh(&self) -> MutexGuard<'_, Option<Instant>> {
        self.last_refresh
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a load now would keep to the interval.
    pub(super) fn may_refresh(&self) -> bool {
        self.loader.refreshable()
            && self
                .last_refresh()
                .is_none_or(|at| at.elapsed() >= self.refresh_interval)
    }

    /// Whether `set` has grown old, and this request is the one to load it again: then it holds the
    /// claim until the verifier's `StaleClaim`, dropped, releases it
    /// ([`release_stale`](KeyStore::release_stale)).
    pub(super) fn claim_stale(&self, set: &KeySet) -> bool {
        set.loaded.elapsed() >= self.max_age
            && self.may_refresh()
            && self
                .refreshing_stale
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// Releases the claim of [`claim_stale`](KeyStore::claim_stale).
    pub(super) fn release_stale(&self) {
        self.refreshing_stale.store(false, Ordering::Release);
    }

    /// Loads the JWKS again, unless a load began less than the interval ago (then waits for it, if it
    /// is under way). Returns the keys held afterwards.
    pub(super) async fn refresh(&self) -> Arc<KeySet> {
        let _flight = self.flight.lock().await;
        {
            let mut last = self.last_refresh();
            if last.is_some_and(|at| at.elapsed() < self.refresh_interval) {
                return self.current();
            }
            *last = Some(Instant::now());
        }
        match self.loader.load(&self.algorithms).await {
            Ok(keys) => {
                let mut held = self.set.write().unwrap_or_else(PoisonError::into_inner);
                let kept = held
                    .keys
                    .iter()
                    .all(|old| keys.iter().any(|new| new.id == old.id));
                *held = Arc::new(KeySet {
                    keys,
                    generation: held.generation + u64::from(!kept),
                    loaded: Instant::now(),
                });
            }
            Err(error) => {
                tracing::warn!(%error, "the JWKS could not be loaded again; the keys held stay");
            }
        }
        self.current()
    }
}
