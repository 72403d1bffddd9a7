//! The line counts kept between processes: `state_dir/line-counts`.
//!
//! A new `mihari check`, dashboard or watcher would otherwise count every progress file from
//! its first byte (1.3 GB at 10,000 jobs: most of a farm's first frame). This module owns
//! that file's bytes: what each counted file was (device, inode, birth time, size and
//! modification time when it was counted), how many lines it held, and a checksum of the
//! block just before where counting stopped. It decides nothing about whether a count still
//! holds (`probe::count` checks each one against the file before using it) and never trusts
//! a file it did not write for the operator: one that is a link, someone else's, open to
//! group or others, damaged (its closing SHA-256 does not match) or of another format is
//! read as no counts at all. It is written whole through a private temp file renamed into
//! place (`store::files` rules: `O_EXCL | O_NOFOLLOW`, mode 0600), so a reader never sees
//! half of one.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::files;

/// The file's name in `state_dir`.
pub const FILE: &str = "line-counts";

/// The first bytes of the file: its format. A file of another format is not read.
const MAGIC: &[u8] = b"mihari line counts 1\n";

/// Beyond this the file is not read (about 100 bytes a file: a million progress files).
const MAX_BYTES: u64 = 128 << 20;

/// One progress file as it was when its lines were counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptCount {
    pub dev: u64,
    pub ino: u64,
    /// The birth time (seconds, nanoseconds), where the filesystem keeps one.
    pub born: Option<(i64, u32)>,
    /// The modification time (seconds, nanoseconds) read with the size counted to.
    pub mtime: (i64, u32),
    /// The offset counting reached: the file's size then.
    pub offset: u64,
    pub lines: u64,
    /// The checksum of the block just before `offset` (`probe::count::block_sum`).
    pub block: u64,
}

/// Whether `path` is the line-count file of `state_dir` (or the log readings kept beside it,
/// [`super::readings`]) or one of their temp files: what the dashboard and the watcher see
/// change in the folder they watch whenever counts are kept.
pub fn is_counts_file(state_dir: &Path, path: &Path) -> bool {
    let name = path.file_name().map(|name| name.as_encoded_bytes());
    path.parent() == Some(state_dir)
        && name.is_some_and(|name| {
            [FILE, super::readings::FILE].iter().any(|file| {
                name == file.as_bytes()
                    || (name.starts_with(format!(".{file}.").as_bytes()) && name.ends_with(b".tmp"))
            })
        })
}

/// The counts kept in `state_dir`, by path; empty when there are none or the file cannot be
/// trusted (never an error: a count not found is counted again).
pub fn load(state_dir: &Path) -> HashMap<PathBuf, KeptCount> {
    read(&state_dir.join(FILE)).unwrap_or_default()
}

fn read(path: &Path) -> Option<HashMap<PathBuf, KeptCount>> {
    parse(&read_trusted(path, "the line-count cache")?)
}

/// The bytes of a file this module's rules trust: the operator's alone, a regular file (never
/// a link), at most [`MAX_BYTES`]; `None` for anything else. [`super::readings`] keeps its
/// file by the same rules.
pub(super) fn read_trusted(path: &Path, what: &str) -> Option<Vec<u8>> {
    let seen = files::inspect(path, what).ok()??;
    let mut file = files::open_private(path).ok()?;
    let meta = file.metadata().ok()?;
    // The file opened is the one inspected, and still the operator's alone.
    if meta.ino() != seen.ino()
        || meta.dev() != seen.dev()
        || !meta.is_file()
        || meta.uid() != nix::unistd::geteuid().as_raw()
        || meta.mode() & 0o077 != 0
        || meta.len() > MAX_BYTES
    {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// The entries of a whole file's bytes, or `None` when any part of it is not as written.
fn parse(bytes: &[u8]) -> Option<HashMap<PathBuf, KeptCount>> {
    let body_len = bytes.len().checked_sub(32)?;
    let (body, sum) = bytes.split_at(body_len);
    if Sha256::digest(body).as_slice() != sum {
        return None;
    }
    let mut at = Reader(body.strip_prefix(MAGIC)?);
    let entries = at.u64()?;
    let mut kept = HashMap::with_capacity(entries.min(1 << 20) as usize);
    for _ in 0..entries {
        let len = at.u64()? as usize;
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(at.take(len)?));
        let (dev, ino) = (at.u64()?, at.u64()?);
        let has_born = at.take(1)?[0];
        let born = (at.u64()? as i64, at.u64()? as u32);
        let mtime = (at.u64()? as i64, at.u64()? as u32);
        let (offset, lines, block) = (at.u64()?, at.u64()?, at.u64()?);
        kept.insert(
            path,
            KeptCount {
                dev,
                ino,
                born: (has_born == 1).then_some(born),
                mtime,
                offset,
                lines,
                block,
            },
        );
    }
    at.0.is_empty().then_some(kept)
}

/// Reads the little-endian words of a kept file.
pub(super) struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// The bytes of a file holding `entries`.
fn encode<'a>(entries: impl ExactSizeIterator<Item = (&'a Path, &'a KeptCount)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 8 + entries.len() * 128 + 32);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (path, kept) in entries {
        let name = path.as_os_str().as_bytes();
        out.extend_from_slice(&(name.len() as u64).to_le_bytes());
        out.extend_from_slice(name);
        let born = kept.born.unwrap_or_default();
        out.extend_from_slice(&kept.dev.to_le_bytes());
        out.extend_from_slice(&kept.ino.to_le_bytes());
        out.push(u8::from(kept.born.is_some()));
        for word in [
            born.0 as u64,
            u64::from(born.1),
            kept.mtime.0 as u64,
            u64::from(kept.mtime.1),
            kept.offset,
            kept.lines,
            kept.block,
        ] {
            out.extend_from_slice(&word.to_le_bytes());
        }
    }
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// Keeps `entries` in `state_dir`, replacing the file there whole. The error names the file
/// and says what to do; nothing kept before is lost by a failure but the newer counts.
pub fn save<'a>(
    state_dir: &Path,
    entries: impl ExactSizeIterator<Item = (&'a Path, &'a KeptCount)>,
) -> Result<(), String> {
    let path = state_dir.join(FILE);
    let cannot = |error: &dyn std::fmt::Display| {
        format!(
            "cannot keep line counts in '{}' ({error}): a new mihari counts every progress \
             file again; make '{}' a folder only you can write",
            path.display(),
            state_dir.display()
        )
    };
    write_whole(state_dir, FILE, &encode(entries)).map_err(|error| cannot(&error))
}

/// Replaces `state_dir/NAME` whole with `bytes`, through a private temp file renamed into
/// place, so a reader never sees half of one.
pub(super) fn write_whole(state_dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let path = state_dir.join(name);
    files::ensure_private_dir(state_dir)
        .map_err(|error| std::io::Error::other(error.to_string()))?;
    let temp = state_dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut file = match files::create_private(&temp) {
        Ok(file) => file,
        // A temp file a dead process of the same pid left: ours to replace.
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(&temp)?;
            files::create_private(&temp)?
        }
        Err(error) => return Err(error),
    };
    let written = file.write_all(bytes);
    drop(file);
    let renamed = written.and_then(|()| std::fs::rename(&temp, &path));
    if let Err(error) = renamed {
        let _ = std::fs::remove_file(&temp);
        return Err(error);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> KeptCount {
        KeptCount {
            dev: 1,
            ino: 2,
            born: Some((3, 4)),
            mtime: (5, 6),
            offset: 7,
            lines: 8,
            block: 9,
        }
    }

    #[test]
    fn what_is_written_reads_back_and_any_changed_byte_is_refused() {
        let (a, b) = (PathBuf::from("/x/a.progress"), PathBuf::from("/x/b"));
        let other = KeptCount {
            born: None,
            ..sample()
        };
        let bytes = encode([(a.as_path(), &sample()), (b.as_path(), &other)].into_iter());
        let back = parse(&bytes).expect("parses");
        assert_eq!(back.get(&a), Some(&sample()));
        assert_eq!(back.get(&b), Some(&other));
        for at in [0, MAGIC.len() + 3, bytes.len() / 2, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 1;
            assert!(
                parse(&damaged).is_none(),
                "byte {at} changed and still read"
            );
        }
        assert!(parse(&bytes[..bytes.len() - 1]).is_none());
        assert!(parse(b"").is_none());
    }
}
