//! The store's files in `state_dir`: the folder, the database with its `-wal` and `-shm`
//! files, and what mihari keeps beside them.
//!
//! This module owns what those files must be before SQLite is let near them: owned by the
//! operator (the effective user), out of reach of group and others, regular files and never
//! symbolic links. A neighbour who can plant a file there could otherwise make mihari write
//! its store over a file of the operator's, or read and rewrite the store. It creates files
//! without following links (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600), and every refusal
//! names the path and the command that fixes it. It reads and writes no database content.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{Result, StoreError};

/// `db` with `suffix` appended to its name: SQLite's `-wal` and `-shm` files.
pub fn beside(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Creates `dir` (and its parents) with mode 0700, and refuses one that someone else owns or
/// that group or others can write.
pub fn ensure_private_dir(dir: &Path) -> Result<()> {
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                StoreError::new(format!(
                    "cannot create the state folder '{}': {e}; set settings.state_dir to a \
                     folder you can write",
                    dir.display()
                ))
            })?;
        // DirBuilder's mode is filtered by the umask; say it exactly.
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    }
    let meta = fs::metadata(dir).map_err(|e| {
        StoreError::new(format!(
            "cannot read the state folder '{}': {e}",
            dir.display()
        ))
    })?;
    if !meta.is_dir() {
        return Err(StoreError::new(format!(
            "the state folder '{}' is not a folder",
            dir.display()
        )));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(StoreError::refused(format!(
            "the state folder '{}' is owned by {}, not by you ({}): whoever owns it can put \
             files there for mihari to write through; chown {} '{}' if it is yours, or set \
             settings.state_dir to a folder of your own",
            dir.display(),
            user_words(meta.uid()),
            user_words(me),
            user_name(me),
            dir.display()
        )));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(StoreError::refused(format!(
            "the state folder '{}' is writable by group or others (mode {:o}): \
             chmod 700 '{}'",
            dir.display(),
            meta.permissions().mode() & 0o7777,
            dir.display()
        )));
    }
    Ok(())
}

/// Looks at one of the store's files without following a link: `None` when it does not
/// exist; refused when it is a link, not a regular file, someone else's, or open to group or
/// others. `what` names it for the operator ("the state store", "its WAL file").
pub fn inspect(path: &Path, what: &str) -> Result<Option<fs::Metadata>> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(StoreError::new(format!(
                "cannot look at {what} '{}': {error}",
                path.display()
            )));
        }
    };
    if meta.file_type().is_symlink() {
        return Err(StoreError::refused(format!(
            "{what} '{}' is a symbolic link: mihari never writes its store through a link \
             (someone may have planted it to have a file of yours overwritten); remove the \
             link: rm '{}'",
            path.display(),
            path.display()
        )));
    }
    if !meta.file_type().is_file() {
        return Err(StoreError::refused(format!(
            "{what} '{}' is not a regular file: move it away: mv '{}' '{}.moved'",
            path.display(),
            path.display(),
            path.display()
        )));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(StoreError::refused(format!(
            "{what} '{}' is owned by {}, not by you ({}): mihari keeps its store only in \
             files you own; chown {} '{}' if it is yours",
            path.display(),
            user_words(meta.uid()),
            user_words(me),
            user_name(me),
            path.display()
        )));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(StoreError::refused(format!(
            "{what} '{}' can be read or written by group or others (mode {mode:o}): \
             chmod 600 '{}'",
            path.display(),
            path.display()
        )));
    }
    Ok(Some(meta))
}

/// Creates `path` 0600 for the operator alone: never through a link, never over a file
/// already there (`AlreadyExists` then).
pub fn create_private(path: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Opens one of mihari's own small files beside the store to read it, never through a link.
pub fn open_private(path: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

/// Whether the filesystem holding `dir` has no space left for the operator: a write that
/// failed there is a full disk, whatever error SQLite gave it.
pub fn no_space_left(dir: &Path) -> bool {
    nix::sys::statvfs::statvfs(dir).is_ok_and(|fs| fs.blocks_available() == 0)
}

/// "uid 1001 ('ana')", or "uid 1001" for a uid no user has.
fn user_words(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => format!("uid {uid} ('{}')", user.name),
        _ => format!("uid {uid}"),
    }
}

/// The user name for `chown`, or the uid when there is none.
fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => user.name,
        _ => uid.to_string(),
    }
}
