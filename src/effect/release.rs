//! Releasing a lock whose holder is dead.
//!
//! The file is removed only if it is still exactly the file the operator saw: right before
//! removing, its holder's liveness is judged again (alive or unknown: refused) and its
//! identity — device, inode, modification time, length and content — is compared with the
//! one taken when the dialog opened. To close the window between that check and the removal,
//! the file is first renamed aside, the renamed file is checked, and only then unlinked; a
//! file that changed in between is put back and nothing is removed.

use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{Outcome, OutcomeKind};
use crate::core::decision::{FileIdentity, ReleasePlan};
use crate::core::{Liveness, Reading};
use crate::probe::lock::read_lock;
use crate::store::{Kind, NewEvent, Store};

/// A lock is a PID and a little JSON; reading more to hash it is pointless.
const IDENTITY_READ_LIMIT: u64 = 64 * 1024;

/// The identity of the file at `path` now.
pub fn identity(path: &Path) -> Result<FileIdentity, String> {
    let mut file =
        fs::File::open(path).map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat '{}': {e}", path.display()))?;
    let mut content = Vec::new();
    file.by_ref()
        .take(IDENTITY_READ_LIMIT)
        .read_to_end(&mut content)
        .map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
    Ok(FileIdentity {
        dev: meta.dev(),
        ino: meta.ino(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        len: meta.len(),
        content: crate::store::hex(&Sha256::digest(&content)),
    })
}

pub(super) fn release(plan: &ReleasePlan, store: &mut Store) -> Outcome {
    let refuse = |store: &mut Store, why: String| {
        let _ = store.append(
            NewEvent::new(Kind::Refused)
                .job(&plan.job)
                .key(&plan.key)
                .reason(format!("release refused: {why}")),
        );
        Outcome {
            result: OutcomeKind::Refused,
            message: format!(
                "release of '{}' refused: {why}; nothing was removed",
                plan.job
            ),
        }
    };
    match read_lock(&plan.path) {
        Reading::Found(holder) if holder.liveness == Liveness::Dead => {}
        Reading::Found(holder) => {
            let who = holder
                .pid
                .map_or("its holder".to_string(), |p| format!("pid {p}"));
            return refuse(store, format!("{who} is {} now", holder.liveness.as_str()));
        }
        Reading::Empty => return refuse(store, "the lock is already gone".to_string()),
        Reading::Fault(error) => return refuse(store, format!("the lock cannot be read: {error}")),
    }
    match identity(&plan.path) {
        Ok(now) if now == plan.identity => {}
        Ok(_) => {
            return refuse(
                store,
                "the lock changed since the dialog opened".to_string(),
            );
        }
        Err(error) => return refuse(store, error),
    }
    // Rename aside, check what was renamed, then unlink: the path can be replaced between a
    // check and an unlink, but not between a rename and a check of the renamed file.
    let aside = aside_path(&plan.path);
    if let Err(error) = fs::rename(&plan.path, &aside) {
        return refuse(store, format!("cannot move the lock aside: {error}"));
    }
    match identity(&aside) {
        Ok(moved) if moved == plan.identity => {}
        other => {
            // Someone replaced the file just now: put theirs back, untouched.
            let _ = fs::hard_link(&aside, &plan.path);
            let _ = fs::remove_file(&aside);
            let why = match other {
                Ok(_) => "the lock changed as it was being removed".to_string(),
                Err(error) => error,
            };
            return refuse(store, why);
        }
    }
    if let Err(error) = fs::remove_file(&aside) {
        let _ = fs::rename(&aside, &plan.path);
        return refuse(store, format!("cannot remove the lock: {error}"));
    }
    let who = plan
        .holder
        .pid
        .map_or("a dead holder".to_string(), |p| format!("dead pid {p}"));
    let _ = store.append(
        NewEvent::new(Kind::Released)
            .job(&plan.job)
            .key(&plan.key)
            .reason(format!("lock of {who} removed")),
    );
    Outcome {
        result: OutcomeKind::Released,
        message: format!("lock of '{}' ({who}) released", plan.job),
    }
}

fn aside_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".mihari-release-{}", std::process::id()));
    PathBuf::from(name)
}
