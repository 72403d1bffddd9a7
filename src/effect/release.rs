//! Releasing a lock whose holder is dead, and a stale marker.
//!
//! The file is removed only if it is still exactly the file the operator saw: right before
//! removing, its holder's liveness is judged again (alive or unknown: refused) and its
//! identity — device, inode, modification time, length and content — is compared with the
//! one taken when the dialog opened. To close the window between that check and the removal,
//! the lock is taken (a non-blocking `flock`: a run that holds it means nothing is removed),
//! the file is renamed aside, the renamed file is checked, and only then unlinked, still
//! locked; a file that changed in between is put back and nothing is removed. Every step goes through
//! the lock's folder, opened and judged once ([`crate::probe::safe_open`]): a link at the
//! lock's path is refused, never followed, and a folder someone else can change is refused.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use sha2::{Digest, Sha256};

use crate::core::decision::{FileIdentity, MarkerPlan, Outcome, OutcomeKind, ReleasePlan};
use crate::core::marker::{MarkerState, judge_marker};
use crate::core::{Liveness, MarkerKind, Reading};
use crate::probe::lock::read_lock;
use crate::probe::marker;
use crate::probe::safe_open::{self, Entry, OpenError, Purpose, Role};
use crate::store::{Kind, NewEvent, Store};

/// A lock is a PID and a little JSON; reading more to hash it is pointless.
const IDENTITY_READ_LIMIT: u64 = 64 * 1024;

/// The identity of the lock at `path` now, read through the one safe open: a link, a named
/// pipe or a folder someone else can change is refused, never followed or read.
pub fn identity(path: &Path) -> Result<FileIdentity, String> {
    let entry =
        safe_open::locate(path, Role::Lock, Purpose::Write).map_err(|e| words(path, e, "lock"))?;
    identity_of(&entry, "lock")
}

/// The identity of the file `entry` names now (a lock, or a marker: `noun`).
fn identity_of(entry: &Entry, noun: &str) -> Result<FileIdentity, String> {
    let path = entry.path();
    let safe_open::Opened { file, meta } = entry.open_read().map_err(|e| words(path, e, noun))?;
    let mut content = Vec::new();
    file.take(IDENTITY_READ_LIMIT)
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

fn words(path: &Path, error: OpenError, noun: &str) -> String {
    match error {
        OpenError::Missing => format!("the {noun} '{}' is gone", path.display()),
        OpenError::Refused(why) => why,
    }
}

pub fn release(plan: &ReleasePlan, store: &mut Store) -> Outcome {
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
    // Take the lock before anything moves: a `mihari run` that starts now either got it
    // first (then it holds the file, and nothing is removed) or finds it taken and the name
    // gone (then it makes a lock of its own). Without it, a run that locked the file after
    // the holder was judged dead would write its PID into a file with no name, and the next
    // run would start a twin beside it.
    let entry = match safe_open::locate(&plan.path, Role::Lock, Purpose::Write) {
        Ok(entry) => entry,
        Err(error) => return refuse(store, words(&plan.path, error, "lock")),
    };
    let held = match entry.open_read() {
        Ok(opened) => opened.file,
        Err(error) => return refuse(store, words(&plan.path, error, "lock")),
    };
    let held = match Flock::lock(held, FlockArg::LockExclusiveNonblock) {
        Ok(held) => held,
        Err((_, Errno::EWOULDBLOCK)) => {
            return refuse(
                store,
                "a process holds the lock now (a run may just have started)".to_string(),
            );
        }
        Err((_, errno)) => {
            return refuse(
                store,
                format!("cannot lock '{}': {errno}", plan.path.display()),
            );
        }
    };
    // Rename aside, check what was renamed, then unlink: the path can be replaced between a
    // check and an unlink, but not between a rename and a check of the renamed file. Every
    // step goes through the folder judged safe, so none can be sent elsewhere by a link.
    let aside = match entry.sibling(&format!(".mihari-release-{}", std::process::id())) {
        Ok(aside) => aside,
        Err(error) => return refuse(store, format!("cannot hold the lock's folder: {error}")),
    };
    if let Err(error) = entry.rename_to(&aside) {
        return refuse(store, format!("cannot move the lock aside: {error}"));
    }
    let unchanged = match identity_of(&aside, "lock") {
        // The very file locked above, still as the dialog saw it.
        Ok(moved) if moved == plan.identity && aside.names(&held) => Ok(()),
        Ok(_) => Err("the lock changed as it was being removed".to_string()),
        Err(error) => Err(error),
    };
    if let Err(why) = unchanged {
        // Someone replaced the file just now: put theirs back, untouched, unless a new lock
        // took the name meanwhile (then theirs stays aside, named in the refusal).
        if aside.rename_noreplace(&entry).is_err() {
            return refuse(
                store,
                format!(
                    "{why}, and a new lock took its name meanwhile: the file moved aside is \
                     '{}'",
                    aside.path().display()
                ),
            );
        }
        return refuse(store, why);
    }
    if let Err(error) = aside.unlink() {
        let _ = aside.rename_noreplace(&entry);
        return refuse(store, format!("cannot remove the lock: {error}"));
    }
    // Unlocked only now, with no name left: a run that opened it meanwhile finds its name
    // gone once it locks it, and makes a lock of its own.
    drop(held);
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

/// The identity of the marker at `path` now, and what it is: a file's as a lock's (its bytes
/// hashed), a folder's by its inode, its modification time and how many entries it holds.
/// Through the one safe open, its folder judged as for writing: a link, a named pipe, or a
/// folder someone else can change is refused.
pub fn marker_identity(path: &Path) -> Result<(FileIdentity, MarkerKind), String> {
    let entry = safe_open::locate(path, Role::Marker, Purpose::Write)
        .map_err(|e| marker::refusal_words(e, path))?;
    marker_identity_of(&entry)
}

fn marker_identity_of(entry: &Entry) -> Result<(FileIdentity, MarkerKind), String> {
    let path = entry.path();
    let stat = entry
        .stat_nofollow()
        .map_err(|e| marker::refusal_words(e, path))?;
    match stat.st_mode & libc::S_IFMT {
        libc::S_IFDIR => {
            let (_, count) = entry
                .folder_names(0)
                .map_err(|e| marker::refusal_words(e, path))?;
            Ok((
                FileIdentity {
                    dev: stat.st_dev,
                    ino: stat.st_ino,
                    mtime_ns: i128::from(stat.st_mtime) * 1_000_000_000
                        + i128::from(stat.st_mtime_nsec),
                    len: count,
                    content: String::new(),
                },
                MarkerKind::Folder,
            ))
        }
        libc::S_IFREG => identity_of(entry, "marker").map(|identity| (identity, MarkerKind::File)),
        mode => Err(marker::refusal_words(
            safe_open::not_regular(path, Role::Marker, mode),
            path,
        )),
    }
}

/// Removes a stale marker: judged again right before (its holder must still be gone, or it
/// must still be bare and past `stale_after_sec`), then renamed aside, checked to be exactly
/// what the dialog showed, and removed — a folder only when empty. Anything else puts it back
/// untouched. Every refusal and the release itself are recorded.
pub fn release_marker(
    plan: &MarkerPlan,
    config: &crate::config::Config,
    store: &mut Store,
) -> Outcome {
    let named = format!("marker '{}'", plan.path.display());
    let refuse = |store: &mut Store, why: String| {
        let _ = store.append(
            NewEvent::new(Kind::Refused)
                .job(&plan.job)
                .key(&plan.key)
                .reason(format!("release marker refused: {why}")),
        );
        Outcome {
            result: OutcomeKind::Refused,
            message: format!(
                "release of the {named} of '{}' refused: {why}; nothing was removed",
                plan.job
            ),
        }
    };
    let Some(spec) = config
        .jobs
        .iter()
        .find(|job| job.id == plan.job)
        .and_then(|job| job.markers.iter().find(|m| m.path == plan.path))
    else {
        return refuse(store, format!("the {named} is no longer in the jobs file"));
    };
    let reading = marker::read_marker(&plan.path);
    let judged = judge_marker(plan.index, spec, Some(&reading), chrono::Utc::now());
    if judged.state != MarkerState::Stale {
        return refuse(store, format!("it is not stale now: {}", judged.words));
    }
    let entry = match safe_open::locate(&plan.path, Role::Marker, Purpose::Write) {
        Ok(entry) => entry,
        Err(error) => return refuse(store, marker::refusal_words(error, &plan.path)),
    };
    match marker_identity_of(&entry) {
        Ok((now, _)) if now == plan.identity => {}
        Ok(_) => return refuse(store, "it changed since the dialog opened".to_string()),
        Err(error) => return refuse(store, error),
    }
    if plan.kind == MarkerKind::Folder && plan.identity.len > 0 {
        return refuse(
            store,
            format!(
                "the folder holds {} entries: a folder is removed only when empty",
                plan.identity.len
            ),
        );
    }
    let aside = match entry.sibling(&format!(".mihari-release-{}", std::process::id())) {
        Ok(aside) => aside,
        Err(error) => return refuse(store, format!("cannot hold the marker's folder: {error}")),
    };
    if let Err(error) = entry.rename_to(&aside) {
        return refuse(store, format!("cannot move the marker aside: {error}"));
    }
    let put_back = |why: String, store: &mut Store| {
        // Someone replaced or filled it just now: put it back, untouched.
        let _ = aside.rename_to(&entry);
        refuse(store, why)
    };
    match marker_identity_of(&aside) {
        Ok((moved, _)) if moved == plan.identity => {}
        Ok(_) => return put_back("it changed as it was being removed".to_string(), store),
        Err(error) => return put_back(error, store),
    }
    let removed = match plan.kind {
        MarkerKind::File => aside.unlink(),
        MarkerKind::Folder => aside.remove_folder(),
    };
    if let Err(error) = removed {
        return put_back(format!("cannot remove it: {error}"), store);
    }
    let _ = store.append(
        NewEvent::new(Kind::Released)
            .job(&plan.job)
            .key(&plan.key)
            .reason(format!("{named} removed: {}", plan.why)),
    );
    Outcome {
        result: OutcomeKind::Released,
        message: format!("the {named} of '{}' was removed: {}", plan.job, plan.why),
    }
}
