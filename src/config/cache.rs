//! A cache of a large jobs file's validated form, so that a farm of thousands of jobs is not
//! parsed again by every `mihari check`, `mihari heartbeat` and `mihari run`.
//!
//! Parsing YAML is the one cost of loading that grows with the farm and does not change
//! between two loads of the same file: 10,000 jobs take a quarter of a second to parse, more
//! than probing all of them. So when a jobs file of at least [`MIN_BYTES`] has been loaded
//! and validated, its [`Config`] is kept as JSON in `$XDG_CACHE_HOME/mihari/` (else
//! `~/.cache/mihari/`), keyed by everything the validated form depends on: the file's path,
//! device, inode, size, modification and change times to the nanosecond (any write to the
//! file, a `chmod` or a `mv` over it changes one of them; the change time cannot be set back
//! by `touch`) and the SHA-256 of its bytes (a save within one timestamp tick that keeps the
//! size changes nothing else), `$HOME` and `$XDG_STATE_HOME` (paths are resolved against them), and the
//! mihari binary itself (a rebuilt or upgraded mihari never reads what another one wrote).
//! A cache that does not match, cannot be read, or is not safe — its folder or file not the
//! operator's own, open to group or others, a link — is never used: the file is parsed as if
//! there were none. The jobs file's own checks (its permissions and its folders') run on
//! every load whatever the cache holds; only a file that loaded is ever cached. Nothing
//! here decides anything about jobs.

use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Config;

/// Jobs files smaller than this are parsed every time: they take a millisecond or two, and
/// a cache file for every small jobs file (every test's, every demo's) would only litter.
/// About 2,000 jobs. `MIHARI_CONFIG_CACHE_MIN_BYTES` changes it (the tests use 0).
pub const MIN_BYTES: u64 = 256 * 1024;

/// What the cached form depends on. Written as the first line of the cache file, so that a
/// cache that does not match is found without reading the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    /// The format of the cache file itself.
    format: u32,
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    home: Option<OsString>,
    xdg_state_home: Option<OsString>,
    /// The mihari binary that wrote it: device, inode, size and modification time.
    binary: (u64, u64, u64, i64, i64),
    /// The SHA-256 of the file's bytes, in hex: a save that keeps the size and lands in the
    /// same timestamp tick as the one before changes nothing else above.
    content: String,
}

/// The key for the jobs file at `path` (absolute), as `meta` (of the open file) describes
/// it; `None` when it is too small to be worth caching, caching is off, or this binary
/// cannot be told apart from another one.
pub fn key(path: &Path, meta: &Metadata, bytes: &[u8]) -> Option<Key> {
    let min = std::env::var("MIHARI_CONFIG_CACHE_MIN_BYTES")
        .ok()
        .and_then(|text| text.parse::<u64>().ok())
        .unwrap_or(MIN_BYTES);
    key_from(path, meta, bytes, min)
}

/// [`key`] with the size floor passed in.
fn key_from(path: &Path, meta: &Metadata, bytes: &[u8], min: u64) -> Option<Key> {
    if meta.len() < min {
        return None;
    }
    let binary = std::fs::metadata("/proc/self/exe").ok()?;
    let content = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Some(Key {
        content,
        format: 2,
        path: std::path::absolute(path).ok()?,
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.len(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ctime: (meta.ctime(), meta.ctime_nsec()),
        home: std::env::var_os("HOME").filter(|home| !home.is_empty()),
        xdg_state_home: std::env::var_os("XDG_STATE_HOME"),
        binary: (
            binary.dev(),
            binary.ino(),
            binary.len(),
            binary.mtime(),
            binary.mtime_nsec(),
        ),
    })
}

/// The cached form for `key`, when there is one that matches and is safe to trust.
pub fn lookup(key: &Key) -> Option<Config> {
    let folder = open_folder(&folder()?)?;
    let fd = nix::fcntl::openat(
        &folder,
        file_name(key).as_str(),
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let file = File::from(fd);
    let meta = file.metadata().ok()?;
    if !meta.is_file() || !private(&meta) {
        return None;
    }
    let mut reader = BufReader::new(file);
    let mut first = String::new();
    reader.read_line(&mut first).ok()?;
    let written: Key = serde_json::from_str(&first).ok()?;
    if written != *key {
        return None;
    }
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).ok()?;
    serde_json::from_slice(&rest).ok()
}

/// Keeps `config` for `key`, replacing what was there atomically (a temp file in the same
/// folder, then a rename), so a reader never sees half a cache. Failing to keep it costs
/// only the next load's parse: nothing is reported.
pub fn store(key: &Key, config: &Config) {
    let Some(dir) = folder() else { return };
    if std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .is_err()
    {
        return;
    }
    let Some(folder) = open_folder(&dir) else {
        return;
    };
    let (Ok(first), Ok(body)) = (serde_json::to_string(key), serde_json::to_vec(config)) else {
        return;
    };
    let name = file_name(key);
    let temp = format!("{name}.{}.tmp", std::process::id());
    let Ok(fd) = nix::fcntl::openat(
        &folder,
        temp.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    ) else {
        return;
    };
    let mut file = File::from(fd);
    let written = file
        .write_all(first.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .and_then(|()| file.write_all(&body));
    drop(file);
    let renamed = written.is_ok()
        && nix::fcntl::renameat(&folder, temp.as_str(), &folder, name.as_str()).is_ok();
    if !renamed {
        remove(&folder, &temp);
        return;
    }
    prune(&dir, &folder, &name);
}

/// The most cache files kept: a few jobs files, each for the mihari binaries in use.
pub const KEPT: usize = 8;

/// Removes the caches no load will ask for again, after `kept` was written: those of jobs
/// files that are gone (a test's or a bench's temporary farm), all but the [`KEPT`] newest,
/// and a temp file a writer that died left behind for an hour. Without this, every farm ever
/// loaded from a temporary folder left its megabytes here for good.
fn prune(dir: &Path, folder: &OwnedFd, kept: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    let mut caches = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() || !private(&meta) || !name.starts_with("jobs-") || name == kept {
            continue;
        }
        let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        if name.ends_with(".tmp") {
            let old = now
                .duration_since(modified)
                .is_ok_and(|age| age.as_secs() >= 3600);
            if old {
                remove(folder, name);
            }
            continue;
        }
        if !name.ends_with(".json") {
            continue;
        }
        let gone = written_key(folder, name).is_some_and(|key| {
            std::fs::symlink_metadata(&key.path)
                .is_err_and(|error| error.kind() == std::io::ErrorKind::NotFound)
        });
        if gone {
            remove(folder, name);
        } else {
            caches.push((modified, name.to_string()));
        }
    }
    // The one just written counts among the kept.
    caches.sort_by(|a, b| b.cmp(a));
    for (_, name) in caches.iter().skip(KEPT.saturating_sub(1)) {
        remove(folder, name);
    }
}

/// The key a cache file says it was written for (its first line).
fn written_key(folder: &OwnedFd, name: &str) -> Option<Key> {
    let fd = nix::fcntl::openat(
        folder,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let mut first = String::new();
    BufReader::new(File::from(fd).take(64 * 1024))
        .read_line(&mut first)
        .ok()?;
    serde_json::from_str(&first).ok()
}

fn remove(folder: &OwnedFd, name: &str) {
    let _ = nix::unistd::unlinkat(folder, name, nix::unistd::UnlinkatFlags::NoRemoveDir);
}

/// `$XDG_CACHE_HOME/mihari` (when absolute), else `$HOME/.cache/mihari`.
fn folder() -> Option<PathBuf> {
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|path| path.is_absolute())
    {
        return Some(xdg.join("mihari"));
    }
    let home = std::env::var_os("HOME").filter(|home| !home.is_empty())?;
    Some(PathBuf::from(home).join(".cache").join("mihari"))
}

/// The cache folder, opened without following a link, when it is the operator's own and
/// closed to group and others.
fn open_folder(dir: &Path) -> Option<OwnedFd> {
    let fd = nix::fcntl::open(
        dir,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let stat = nix::sys::stat::fstatat(&fd, "", AtFlags::AT_EMPTY_PATH).ok()?;
    let operator = nix::unistd::geteuid().as_raw();
    (stat.st_uid == operator && stat.st_mode & 0o077 == 0).then_some(fd)
}

/// Whether a cache file is the operator's own and closed to group and others.
fn private(meta: &Metadata) -> bool {
    meta.uid() == nix::unistd::geteuid().as_raw() && meta.mode() & 0o077 == 0
}

/// One cache file per jobs file path and mihari binary: `jobs-<first 16 hex of their
/// sha256>.json`. Two binaries that load the same file (a watcher not yet restarted after an
/// upgrade, a bench linking mihari) would otherwise replace each other's cache at every load,
/// and each would parse the file every time.
fn file_name(key: &Key) -> String {
    let mut hasher = Sha256::new();
    hasher.update(key.path.as_os_str().as_encoded_bytes());
    let (dev, ino, size, secs, nanos) = key.binary;
    for part in [dev, ino, size, secs as u64, nanos as u64] {
        hasher.update(part.to_le_bytes());
    }
    let digest = hasher.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("jobs-{hex}.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A save that keeps the size and lands in the same timestamp tick as the one before (the
    /// change time is only as fine as the filesystem's clock tick) has the same metadata: only
    /// the bytes tell the two files apart, and the cache must not serve the first for the
    /// second.
    #[test]
    fn two_saves_with_the_same_metadata_but_other_bytes_have_other_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.yaml");
        std::fs::write(&path, "stall_sec: 100\n").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let first = key_from(&path, &meta, b"stall_sec: 100\n", 0).unwrap();
        let second = key_from(&path, &meta, b"stall_sec: 200\n", 0).unwrap();
        assert_ne!(first, second);
        assert_eq!(
            first,
            key_from(&path, &meta, b"stall_sec: 100\n", 0).unwrap()
        );
    }
}
