//! Verified tokens' outcomes, kept by the SHA-256 of the token until its `exp`, in a bounded map.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::mcp::http::{Principal, Refusal};

/// What a token verified to: its principal, or the refusal of a valid token that maps to none.
#[cfg(feature = "mcp-http")]
pub(super) type Outcome = Result<Principal, Refusal>;

/// Verified tokens' outcomes, by the SHA-256 of the token.
#[cfg(feature = "mcp-http")]
pub(super) struct Cache {
    capacity: usize,
    entries: Mutex<HashMap<[u8; 32], Entry>>,
}

#[cfg(feature = "mcp-http")]
pub(super) struct Entry {
    pub(super) outcome: Outcome,
    /// The token's `exp`: the entry serves no later.
    pub(super) expires: u64,
    pub(super) generation: u64,
}

#[cfg(feature = "mcp-http")]
impl Cache {
    pub(super) fn new(capacity: usize) -> Cache {
        Cache {
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<[u8; 32], Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn get(&self, token: &[u8; 32], now: u64, generation: u64) -> Option<Outcome> {
        let mut entries = self.lock();
        let entry = entries.get(token)?;
        if entry.expires > now && entry.generation == generation {
            return Some(entry.outcome.clone());
        }
        entries.remove(token);
        None
    }

    pub(super) fn put(&self, token: [u8; 32], entry: Entry, now: u64) {
        if self.capacity == 0 || entry.expires <= now {
            return;
        }
        let mut entries = self.lock();
        if entries.len() >= self.capacity && !entries.contains_key(&token) {
            entries.retain(|_, kept| kept.expires > now && kept.generation == entry.generation);
            if entries.len() >= self.capacity
                && let Some(evicted) = entries.keys().next().copied()
            {
                entries.remove(&evicted);
            }
        }
        entries.insert(token, entry);
    }
}
