//! Locks and the liveness of their holders. Stub: the real probe replaces it.

use std::path::Path;

use crate::core::{LockHolder, Reading};

/// Reads the lock at `path` and judges its holder's liveness.
pub fn read_lock(path: &Path) -> Reading<LockHolder> {
    let _ = path;
    Reading::Empty
}
