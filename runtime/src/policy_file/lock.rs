//! The policy's lock: the text last reviewed, kept beside the tools' lockfile, so that a change to the
//! operator's policy fails a test that lists what it widens first, as a change of a tool's manifest does.

use std::fmt;
use std::path::{Path, PathBuf};

use super::diff::{Diff, Direction};
use super::file::PolicyFile;
use super::model::PolicyErrors;
use crate::report::lockfile::{self, Update};

/// Checks the policy file at `policy` against its lock at `lock` (the text last accepted), in the mode
/// `TOOLGATE_LOCKFILE` says ([`Update::from_env`]): `overwrite` copies the policy to the lock and
/// passes. Both are checked against the linked tools. Relative paths are resolved as the tools'
/// lockfile resolves them ([`lockfile::resolve`]).
///
/// ```no_run
/// # extern crate toolgate_runtime as toolgate;
/// #[test]
/// fn the_policy_matches_its_lock() {
///     toolgate::policy_file::assert_policy_lock("ops.toml", "ops.lock.toml");
/// }
/// ```
pub fn check_policy_lock(
    policy: impl AsRef<Path>,
    lock: impl AsRef<Path>,
) -> Result<(), PolicyLockError> {
    let update = Update::from_env().map_err(|e| PolicyLockError::Lockfile(e.to_string()))?;
    check_with(policy.as_ref(), lock.as_ref(), update)
}

/// [`check_policy_lock`] in the mode given.
fn check_with(policy: &Path, lock: &Path, update: Update) -> Result<(), PolicyLockError> {
    let (policy, lock) = (lockfile::resolve(policy), lockfile::resolve(lock));
    let current = PolicyFile::load(&policy).map_err(PolicyLockError::Policy)?;
    if update == Update::Overwrite {
        let same = std::fs::read(&lock).ok() == std::fs::read(&policy).ok();
        if !same {
            // Never through a link planted at the lock's name.
            std::fs::read(&policy)
                .and_then(|text| crate::files::replace(&lock, &text))
                .map_err(|e| PolicyLockError::Lockfile(format!("{}: {e}", lock.display())))?;
        }
        return Ok(());
    }
    if !lock.exists() {
        return Err(PolicyLockError::Missing { lock });
    }
    let locked = PolicyFile::load(&lock).map_err(PolicyLockError::Policy)?;
    if locked.digest() == current.digest() {
        return Ok(());
    }
    let mut diff = locked.diff(&current);
    // What widens is what a reviewer must see first.
    diff.changes
        .sort_by_key(|c| c.direction != Direction::Widens);
    Err(PolicyLockError::Changed { lock, diff })
}

/// [`check_policy_lock`], panicking with what changed: the one line a test needs.
#[track_caller]
pub fn assert_policy_lock(policy: impl AsRef<Path>, lock: impl AsRef<Path>) {
    if let Err(error) = check_policy_lock(policy, lock) {
        panic!("{error}");
    }
}

/// Why a policy did not match its lock.
#[non_exhaustive]
pub enum PolicyLockError {
    /// The policy or the lock does not check.
    Policy(PolicyErrors),
    /// There is no lock yet.
    Missing {
        /// The resolved path of the lock.
        lock: PathBuf,
    },
    /// The policy differs from its lock: every change, widenings first (a change of the text
    /// alone, such as a comment, has none).
    Changed {
        /// The resolved path of the lock.
        lock: PathBuf,
        /// What changed.
        diff: Diff,
    },
    /// `TOOLGATE_LOCKFILE` is not understood, or the lock cannot be written.
    Lockfile(String),
}

impl fmt::Display for PolicyLockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = "run the tests once with TOOLGATE_LOCKFILE=overwrite to accept the policy";
        match self {
            PolicyLockError::Policy(errors) => write!(f, "{errors}"),
            PolicyLockError::Missing { lock } => {
                write!(f, "no policy lock at {}: {how}", lock.display())
            }
            PolicyLockError::Changed { lock, diff } if diff.changes.is_empty() => write!(
                f,
                "the policy's text differs from its lock at {} (no rule changed): {how}",
                lock.display()
            ),
            PolicyLockError::Changed { lock, diff } => {
                write!(
                    f,
                    "the policy differs from its lock at {}; {how}:\n{diff}",
                    lock.display()
                )
            }
            PolicyLockError::Lockfile(why) => f.write_str(why),
        }
    }
}

impl fmt::Debug for PolicyLockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for PolicyLockError {}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// Accepting a policy never writes its lock through a symbolic link at the lock's name, dangling
    /// or not: it is refused, naming the link, and the link's target is untouched.
    #[test]
    fn the_lock_is_not_written_through_a_link() {
        let dir = std::env::temp_dir().join(format!("toolgate-policy-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let policy = dir.join("ops.toml");
        std::fs::write(&policy, "format = 1\n[defaults]\nceiling = \"ADVISORY\"\n").unwrap();
        for dangling in [true, false] {
            let (lock, target) = (dir.join("ops.lock.toml"), dir.join("target"));
            let _ = std::fs::remove_file(&lock);
            let _ = std::fs::remove_file(&target);
            if !dangling {
                std::fs::write(&target, "the planter's file\n").unwrap();
            }
            std::os::unix::fs::symlink(&target, &lock).unwrap();
            let error = check_with(&policy, &lock, Update::Overwrite).unwrap_err();
            assert!(error.to_string().contains("symbolic link"), "{error}");
            if dangling {
                assert!(std::fs::symlink_metadata(&target).is_err());
            } else {
                assert_eq!(
                    std::fs::read_to_string(&target).unwrap(),
                    "the planter's file\n"
                );
            }
        }
        // Without a link, the lock is written.
        std::fs::remove_file(dir.join("ops.lock.toml")).unwrap();
        check_with(&policy, &dir.join("ops.lock.toml"), Update::Overwrite).unwrap();
        check_with(&policy, &dir.join("ops.lock.toml"), Update::Check).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
