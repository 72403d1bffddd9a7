//! Opening a job's lock, log, progress file or manifest, and the watcher's lock, so that what
//! someone else planted at the path can never be turned against the operator.
//!
//! Another user who can write the folder of a job's lock or log can put a symbolic link there
//! (`job.lock -> ~/precious.txt`), a named pipe that hangs whoever opens it, a device, or a
//! hard link to one of the operator's files. This module is the one place that opens those
//! paths. The parent folder is opened first and judged by its own descriptor; the name is
//! looked at in it without following a final link (`fstatat`) before it is opened with
//! `openat(O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)`; only a regular file is ever used.
//! A folder that someone other than the operator or root can change ([`folder_writer`], the
//! rule the jobs file has too) is refused for every file mihari writes or removes, and for
//! the locks it reads; in a shared sticky folder (like `/tmp`) a file mihari writes must be the
//! operator's own with a single name, and a file whose content or time is read as evidence of
//! a job's health (a lock, a log, a marker, a manifest, a progress file) must belong to the
//! operator or root: anyone can plant a file there ([`Role::owner_matters_to_read`]). Removing
//! and renaming go through the folder's
//! descriptor, after checking that the name still names the file held. It must never follow
//! a link at a lock or log path, never read or show what such a link points to, never open
//! anything but a regular file, and never judge what the file says: the callers do.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, FcntlArg, OFlag, fcntl};
use nix::sys::stat::Mode;

/// Which path of a job (or of the state folder) is being opened: it decides the rules, and
/// names the setting to change in a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A job's own `lock`, which `mihari run` writes and removes.
    Lock,
    /// A `resource_lock` another program holds: only ever read.
    ResourceLock,
    /// A job's `log`, which `mihari run` and a restart append to.
    Log,
    /// A `progress_file`: only counted.
    Progress,
    /// A `manifest`: only parsed, but its fields are shown.
    Manifest,
    /// The watcher's `state_dir/watch.lock`.
    WatchLock,
    /// `state_dir/<id>.run.lock`, the lock `mihari run` keeps for a job declared by
    /// `process` alone: mihari's own file, judged as strictly as the watch lock.
    KeptLock,
    /// One of a job's `markers`: a file or a folder that gates its work, judged like a lock
    /// (its holder decides a release), and removed by `release-marker`.
    Marker,
}

impl Role {
    /// The setting in the jobs file that names this path.
    fn setting(self) -> &'static str {
        match self {
            Role::Lock => "lock",
            Role::ResourceLock => "resource_lock",
            Role::Log => "log",
            Role::Progress => "progress_file",
            Role::Manifest => "manifest",
            Role::WatchLock | Role::KeptLock => "settings.state_dir",
            Role::Marker => "markers.path",
        }
    }

    /// What the file is, in the operator's words.
    fn noun(self) -> &'static str {
        match self {
            Role::Lock => "lock",
            Role::ResourceLock => "resource lock",
            Role::Log => "log",
            Role::Progress => "progress file",
            Role::Manifest => "manifest",
            Role::WatchLock => "watch lock",
            Role::KeptLock => "run lock",
            Role::Marker => "marker",
        }
    }

    /// A progress file is only counted, never written and never shown, and is often a link
    /// into a run's output folder: it may be a link. A manifest's content is shown (its
    /// fields, an excerpt when it does not parse), so it may not.
    fn follows_links(self) -> bool {
        self == Role::Progress
    }

    /// The files whose content decides a restart or a release are judged by their folder even
    /// to be read: a lock planted by a neighbour must not make a live job look dead.
    fn folder_matters_to_read(self) -> bool {
        matches!(
            self,
            Role::Lock | Role::WatchLock | Role::KeptLock | Role::Marker
        )
    }

    /// The files read as evidence of a job's health (its holder, its progress, what gates it)
    /// or of the watcher's: in a folder others can write, one that belongs to another user
    /// was planted, and a lock naming a live process or a freshly touched log would make a
    /// dead job look alive. A resource lock is not among them: it is another program's by
    /// nature, and it only ever holds a job back.
    pub fn owner_matters_to_read(self) -> bool {
        self != Role::ResourceLock
    }

    /// What to do instead, said at the end of a refusal.
    fn elsewhere(self) -> String {
        match self {
            Role::WatchLock | Role::KeptLock => {
                "point 'settings.state_dir' to a folder only you can write".to_string()
            }
            _ => format!("point '{}' to a folder only you can write", self.setting()),
        }
    }
}

/// Why a path could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// Nothing is there (nor its folder, when reading): "nothing yet", not a fault.
    Missing,
    /// Refused or unreadable: the message names the path and what to do.
    Refused(String),
}

/// Who other than the operator and root can change a folder, and so replace what is in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FolderWriter {
    /// The folder belongs to this other user, who can rename or remove anything in it,
    /// sticky bit or not.
    Owner(u32),
    /// Group or others may write it, and without the sticky bit they may remove or replace
    /// what others put there.
    GroupOrOthers { mode: u32 },
}

/// The folder rule, shared with the jobs file: a folder is safe to keep mihari's files in when
/// only the operator (`operator`, the effective uid) or root owns it and neither group nor
/// others can write it, or when a sticky bit keeps them to their own files (like `/tmp`).
pub fn folder_writer(owner: u32, mode: u32, operator: u32) -> Option<FolderWriter> {
    if owner != operator && owner != 0 {
        Some(FolderWriter::Owner(owner))
    } else if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        Some(FolderWriter::GroupOrOthers {
            mode: mode & 0o7777,
        })
    } else {
        None
    }
}

impl FolderWriter {
    /// "the folder '/x' belongs to user 'mallory', who can replace anything in it", or "the
    /// folder '/x' can be written by group or others (mode '0777') without the sticky bit".
    pub fn describe(&self, folder: &Path) -> String {
        match self {
            FolderWriter::Owner(uid) => format!(
                "the folder '{}' belongs to user '{}', who can replace anything in it",
                folder.display(),
                user_name(*uid)
            ),
            FolderWriter::GroupOrOthers { mode } => format!(
                "the folder '{}' can be written by group or others (mode '{mode:04o}') without \
                 the sticky bit",
                folder.display()
            ),
        }
    }
}

/// The name of user `uid`, or "uid N" when it has none.
pub fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => user.name,
        _ => format!("uid {uid}"),
    }
}

fn operator() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// What kind of thing a mode says a file is, when it is not a regular file.
pub fn kind_words(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a named pipe",
        libc::S_IFSOCK => "a socket",
        libc::S_IFBLK | libc::S_IFCHR => "a device",
        libc::S_IFLNK => "a symbolic link",
        _ => "something other than a regular file",
    }
}

/// A regular file opened safely, with its metadata from the open descriptor.
#[derive(Debug)]
pub struct Opened {
    pub file: File,
    pub meta: Metadata,
}

/// What a file is opened for; reading needs nothing to exist, writing may create it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Read,
    Write,
}

/// How a file is opened to be written. Neither ever truncates: a file is only emptied by its
/// holder, after it was verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Write-only, appending, created with `mode` when missing (a log).
    Append { mode: u32 },
    /// Read and write, created with `mode` when missing (a lock).
    Update { mode: u32 },
}

/// A name in a folder held open: what every open, rename and removal of one path goes
/// through, so that the folder judged is the folder used.
#[derive(Debug)]
pub struct Entry {
    /// Shared with the other entries of one pass's [`folders_remembered`] scope.
    folder: Arc<OwnedFd>,
    folder_path: PathBuf,
    /// Group or others may add files to the folder (it is sticky, or it would be refused).
    shared: bool,
    name: OsString,
    path: PathBuf,
    role: Role,
}

/// Opens the folder of `path` and judges it: for writing, and for reading a lock, refused
/// when someone other than the operator or root can change it.
pub fn locate(path: &Path, role: Role, purpose: Purpose) -> Result<Entry, OpenError> {
    let Some(name) = path.file_name() else {
        return Err(OpenError::Refused(format!(
            "'{}' does not name a file: point '{}' at a file",
            path.display(),
            role.setting()
        )));
    };
    let folder_path = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (folder, shared) = folder_of(&folder_path, path, role, purpose)?;
    Ok(Entry {
        folder,
        folder_path,
        shared,
        name: name.to_os_string(),
        path: path.to_path_buf(),
        role,
    })
}

/// Opens the folder `folder_path` of `path` and judges it: for writing, and for reading a
/// lock, refused when someone other than the operator or root can change it. Answers the
/// folder and whether group or others may add files to it.
fn open_folder(
    folder_path: &Path,
    path: &Path,
    role: Role,
    purpose: Purpose,
) -> Result<Folder, OpenError> {
    let folder = match nix::fcntl::open(
        folder_path,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(folder) => folder,
        Err(Errno::ENOENT) if purpose == Purpose::Read => return Err(OpenError::Missing),
        Err(Errno::ENOENT) => {
            return Err(OpenError::Refused(format!(
                "cannot open the {} '{}': its folder '{}' does not exist; create it first",
                role.noun(),
                path.display(),
                folder_path.display()
            )));
        }
        Err(errno) => return Err(os_error(path, role, purpose, errno)),
    };
    let stat = nix::sys::stat::fstat(&folder).map_err(|e| os_error(path, role, purpose, e))?;
    let judged = purpose == Purpose::Write || role.folder_matters_to_read();
    if judged && let Some(writer) = folder_writer(stat.st_uid, stat.st_mode, operator()) {
        let fix = match writer {
            FolderWriter::Owner(_) => format!("{} instead", role.elsewhere()),
            FolderWriter::GroupOrOthers { .. } => format!(
                "chmod g-w,o-w '{}', or {}",
                folder_path.display(),
                role.elsewhere()
            ),
        };
        return Err(OpenError::Refused(format!(
            "cannot trust the {} '{}': {}; {fix}",
            role.noun(),
            path.display(),
            writer.describe(folder_path)
        )));
    }
    Ok((Arc::new(folder), stat.st_mode & 0o022 != 0))
}

/// A folder opened and judged: its descriptor, and whether group or others may add files to it.
type Folder = (Arc<OwnedFd>, bool);

/// The folders of one pass, by path and by whether they were judged by the folder rule.
type Remembered = HashMap<(PathBuf, bool), Folder>;

thread_local! {
    /// The folders a probing pass has opened and judged fit to read from so far, while one
    /// runs on this thread (see [`folders_remembered`]); `None` outside a pass.
    static REMEMBERED: RefCell<Option<Remembered>> = const { RefCell::new(None) };
}

/// Runs `pass` remembering, for reading, every folder it opens and judges fit: a farm's locks
/// sit in a few folders, and opening and judging one of them once per pass rather than once
/// per file saves four system calls a lock. What is remembered ends with `pass`, so a folder
/// whose permissions change is judged afresh by the next pass; writing never uses it, and a
/// folder refused is not remembered (each file's refusal names that file).
pub fn folders_remembered<T>(pass: impl FnOnce() -> T) -> T {
    let outer = REMEMBERED.with(|cell| cell.borrow_mut().replace(HashMap::new()));
    let result = pass();
    REMEMBERED.with(|cell| *cell.borrow_mut() = outer);
    result
}

/// The folder of `path`, opened and judged: as this pass already did when reading inside
/// [`folders_remembered`], else now (and remembered when fit).
fn folder_of(
    folder_path: &Path,
    path: &Path,
    role: Role,
    purpose: Purpose,
) -> Result<Folder, OpenError> {
    if purpose != Purpose::Read {
        return open_folder(folder_path, path, role, purpose);
    }
    // Judged or not: the folder rule applies to reading some roles only.
    let key = (folder_path.to_path_buf(), role.folder_matters_to_read());
    let known = REMEMBERED.with(|cell| {
        cell.borrow()
            .as_ref()
            .and_then(|memo| memo.get(&key).cloned())
    });
    if let Some(known) = known {
        return Ok(known);
    }
    let opened = open_folder(folder_path, path, role, purpose)?;
    REMEMBERED.with(|cell| {
        if let Some(memo) = cell.borrow_mut().as_mut() {
            memo.insert(key, opened.clone());
        }
    });
    Ok(opened)
}

/// Opens `path` to read it: a lock or a log never through a link, a progress file or a
/// manifest through one; only ever a regular file, and never waiting on a named pipe.
pub fn read(path: &Path, role: Role) -> Result<Opened, OpenError> {
    if role.follows_links() {
        return read_followed(path, role);
    }
    locate(path, role, Purpose::Read)?.open_read()
}

/// Looks at `path` without opening it (a log's modification time): a link or anything but a
/// regular file is refused, never followed.
pub fn look(path: &Path, role: Role) -> Result<Metadata, OpenError> {
    let looked = if role.follows_links() {
        std::fs::metadata(path)
    } else {
        std::fs::symlink_metadata(path)
    };
    let meta = match looked {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Err(OpenError::Missing),
        Err(error) => return Err(read_error(path, error)),
    };
    if !meta.is_file() {
        return Err(not_regular(path, role, meta.mode()));
    }
    // The folder is looked at only for a file someone else owns: the operator's own files
    // (nearly all) cost nothing more.
    if role.owner_matters_to_read() && foreign(meta.uid()) {
        let folder = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let shared = std::fs::metadata(folder)
            .map_err(|error| read_error(path, error))?
            .mode();
        planted(path, role, meta.uid(), shared)?;
    }
    Ok(meta)
}

/// Whether `uid` is neither the operator nor root.
fn foreign(uid: u32) -> bool {
    uid != operator() && uid != 0
}

/// Refuses a file of evidence that belongs to user `uid` (neither the operator nor root) in
/// a folder of mode `folder_mode` that group or others can write: whoever can add files there
/// can plant one ("'/tmp/x.lock' is owned by 'mallory' (uid 1001) in a folder others can
/// write: not evidence of health; ..."). Anywhere else another user's file is what it seems
/// (a colleague's log in their own folder).
fn planted(path: &Path, role: Role, uid: u32, folder_mode: u32) -> Result<(), OpenError> {
    if !role.owner_matters_to_read() || !foreign(uid) || folder_mode & 0o022 == 0 {
        return Ok(());
    }
    Err(OpenError::Refused(format!(
        "'{}' is owned by '{}' (uid {uid}) in a folder others can write: not evidence of \
         health; move it to a folder only you can write{}",
        path.display(),
        user_name(uid),
        match role {
            Role::WatchLock | Role::KeptLock => " (settings.state_dir)".to_string(),
            role => format!(" and point '{}' there", role.setting()),
        }
    )))
}

fn read_followed(path: &Path, role: Role) -> Result<Opened, OpenError> {
    // Looked at before opening: opening a device can have effects (a tape rewinds).
    look(path, role)?;
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|error| match error.kind() {
            io::ErrorKind::NotFound => OpenError::Missing,
            _ => read_error(path, error),
        })?;
    let meta = file.metadata().map_err(|error| read_error(path, error))?;
    if !meta.is_file() {
        return Err(not_regular(path, role, meta.mode()));
    }
    if role.owner_matters_to_read() && foreign(meta.uid()) {
        // Through a link, the folder that counts is the one the file opened is in.
        let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(|error| read_error(path, error))?;
        let folder = real.parent().unwrap_or(Path::new("/"));
        let shared = std::fs::metadata(folder)
            .map_err(|error| read_error(path, error))?
            .mode();
        planted(path, role, meta.uid(), shared)?;
    }
    Ok(Opened { file, meta })
}

impl Entry {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the file to read it; `Missing` when it does not exist. A file of evidence that
    /// another user planted in a folder others can write is refused ([`planted`]).
    pub fn open_read(&self) -> Result<Opened, OpenError> {
        let opened = self.open_at(OFlag::O_RDONLY, 0, Purpose::Read)?;
        if self.shared {
            planted(&self.path, self.role, opened.meta.uid(), 0o022)?;
        }
        Ok(opened)
    }

    /// Opens the file to write it, creating it when missing. Refused when it is not the
    /// operator's to write: in a shared folder, a file someone else made or that has another
    /// name; the watch lock, whenever it is not the operator's own.
    pub fn open_write(&self, how: Write) -> Result<Opened, OpenError> {
        let (flags, mode) = match how {
            Write::Append { mode } => (OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT, mode),
            Write::Update { mode } => (OFlag::O_RDWR | OFlag::O_CREAT, mode),
        };
        let opened = self.open_at(flags, mode, Purpose::Write)?;
        self.check_owner(&opened.meta)?;
        // Only for the open itself: the descriptor may go to a job as its output, which must
        // block as a file does.
        let flags = fcntl(&opened.file, FcntlArg::F_GETFL)
            .map_err(|e| os_error(&self.path, self.role, Purpose::Write, e))?;
        let flags = OFlag::from_bits_truncate(flags) & !OFlag::O_NONBLOCK;
        fcntl(&opened.file, FcntlArg::F_SETFL(flags))
            .map_err(|e| os_error(&self.path, self.role, Purpose::Write, e))?;
        Ok(opened)
    }

    fn open_at(&self, flags: OFlag, mode: u32, purpose: Purpose) -> Result<Opened, OpenError> {
        // Looked at before opening: a link is refused without being followed, and a device or
        // a named pipe without being opened.
        match nix::sys::stat::fstatat(
            &self.folder,
            self.name.as_os_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(stat) if stat.st_mode & libc::S_IFMT == libc::S_IFREG => {}
            Ok(stat) => return Err(not_regular(&self.path, self.role, stat.st_mode)),
            Err(Errno::ENOENT) if purpose == Purpose::Read => return Err(OpenError::Missing),
            Err(Errno::ENOENT) => {}
            Err(errno) => return Err(os_error(&self.path, self.role, purpose, errno)),
        }
        let opened = nix::fcntl::openat(
            &self.folder,
            self.name.as_os_str(),
            flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        );
        let file = match opened {
            Ok(fd) => File::from(fd),
            // Swapped for a link between the look and the open.
            Err(Errno::ELOOP) => return Err(not_regular(&self.path, self.role, libc::S_IFLNK)),
            Err(Errno::ENOENT) if purpose == Purpose::Read => return Err(OpenError::Missing),
            Err(errno) => return Err(os_error(&self.path, self.role, purpose, errno)),
        };
        let meta = file
            .metadata()
            .map_err(|error| read_error(&self.path, error))?;
        if !meta.is_file() {
            return Err(not_regular(&self.path, self.role, meta.mode()));
        }
        Ok(Opened { file, meta })
    }

    fn check_owner(&self, meta: &Metadata) -> Result<(), OpenError> {
        let strict = matches!(self.role, Role::WatchLock | Role::KeptLock);
        if !(self.shared || strict) {
            return Ok(());
        }
        let you = operator();
        let why = if meta.uid() != you {
            format!(
                "it belongs to user '{}', not to you ('{}')",
                user_name(meta.uid()),
                user_name(you)
            )
        } else if meta.nlink() > 1 {
            format!(
                "it has {} names (hard links), so another of them may be a file of yours",
                meta.nlink()
            )
        } else {
            return Ok(());
        };
        let folder = if self.shared {
            format!(
                ", and anyone may add files to its folder '{}'",
                self.folder_path.display()
            )
        } else {
            String::new()
        };
        let fix = match self.role {
            Role::WatchLock | Role::KeptLock => "remove it (mihari makes its own)".to_string(),
            role => format!("remove it, or {}", role.elsewhere()),
        };
        Err(OpenError::Refused(format!(
            "cannot trust the {} '{}': {why}{folder}; {fix}",
            self.role.noun(),
            self.path.display()
        )))
    }

    /// What the name is, without following a link at it: a marker may be a folder (a `mkdir`
    /// lock), which [`Entry::open_read`] refuses. `Missing` when nothing is there; refused,
    /// as [`Entry::open_read`] refuses a file, when another user planted it in a folder others
    /// can write.
    pub fn stat_nofollow(&self) -> Result<nix::sys::stat::FileStat, OpenError> {
        match nix::sys::stat::fstatat(
            &self.folder,
            self.name.as_os_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(stat) if self.shared => {
                planted(&self.path, self.role, stat.st_uid, 0o022)?;
                Ok(stat)
            }
            Ok(stat) => Ok(stat),
            Err(Errno::ENOENT) => Err(OpenError::Missing),
            Err(errno) => Err(os_error(&self.path, self.role, Purpose::Read, errno)),
        }
    }

    /// The names in the folder this name is (a folder marker), at most `limit` of them, and
    /// how many there are in all; opened through the folder held, never through a link.
    pub fn folder_names(&self, limit: usize) -> Result<(Vec<String>, u64), OpenError> {
        let dir = nix::dir::Dir::openat(
            &self.folder,
            self.name.as_os_str(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| match errno {
            Errno::ENOENT => OpenError::Missing,
            errno => os_error(&self.path, self.role, Purpose::Read, errno),
        })?;
        let mut names = Vec::new();
        let mut count = 0;
        for entry in dir.into_iter().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            count += 1;
            if names.len() < limit {
                names.push(name);
            }
        }
        Ok((names, count))
    }

    /// Removes the name when it is an empty folder (`rmdir`); a folder with anything in it is
    /// left as it is (`ENOTEMPTY`).
    pub fn remove_folder(&self) -> io::Result<()> {
        nix::unistd::unlinkat(
            &self.folder,
            self.name.as_os_str(),
            nix::unistd::UnlinkatFlags::RemoveDir,
        )
        .map_err(io::Error::from)
    }

    /// Whether the name still names `file` (same device and inode), without following a link.
    pub fn names(&self, file: &File) -> bool {
        let Ok(ours) = file.metadata() else {
            return false;
        };
        match nix::sys::stat::fstatat(
            &self.folder,
            self.name.as_os_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(named) => named.st_dev == ours.dev() && named.st_ino == ours.ino(),
            Err(_) => false,
        }
    }

    /// Removes the name if it still names `file`; `false` when it names something else now.
    pub fn remove_if_names(&self, file: &File) -> io::Result<bool> {
        if !self.names(file) {
            return Ok(false);
        }
        self.unlink()?;
        Ok(true)
    }

    /// Removes the name, whatever it names.
    pub fn unlink(&self) -> io::Result<()> {
        nix::unistd::unlinkat(
            &self.folder,
            self.name.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )
        .map_err(io::Error::from)
    }

    /// The name `self`'s name + `suffix` in the same folder, held through the same folder.
    pub fn sibling(&self, suffix: &str) -> io::Result<Entry> {
        let mut name = self.name.clone();
        name.push(suffix);
        let mut path = self.path.clone().into_os_string();
        path.push(suffix);
        Ok(Entry {
            folder: Arc::new(self.folder.as_fd().try_clone_to_owned()?),
            folder_path: self.folder_path.clone(),
            shared: self.shared,
            name,
            path: PathBuf::from(path),
            role: self.role,
        })
    }

    /// Renames this name to `to` (a [`Entry::sibling`]), in the folder held.
    pub fn rename_to(&self, to: &Entry) -> io::Result<()> {
        nix::fcntl::renameat(
            &self.folder,
            self.name.as_os_str(),
            &to.folder,
            to.name.as_os_str(),
        )
        .map_err(io::Error::from)
    }

    /// Renames this name to `to`, unless `to` names something (a file made there meanwhile is
    /// never replaced). Where the filesystem has no `RENAME_NOREPLACE`, a hard link and an
    /// unlink do the same.
    pub fn rename_noreplace(&self, to: &Entry) -> io::Result<()> {
        match nix::fcntl::renameat2(
            &self.folder,
            self.name.as_os_str(),
            &to.folder,
            to.name.as_os_str(),
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        ) {
            Err(Errno::EINVAL | Errno::ENOSYS) => {
                self.link_to(to)?;
                self.unlink()
            }
            other => other.map_err(io::Error::from),
        }
    }

    /// Gives the file named by `self` the name `to` as well (never following a link).
    pub fn link_to(&self, to: &Entry) -> io::Result<()> {
        nix::unistd::linkat(
            &self.folder,
            self.name.as_os_str(),
            &to.folder,
            to.name.as_os_str(),
            AtFlags::empty(),
        )
        .map_err(io::Error::from)
    }
}

/// The refusal of a link, a named pipe, a directory or a device at `path`.
pub(crate) fn not_regular(path: &Path, role: Role, mode: u32) -> OpenError {
    let what = kind_words(mode);
    if mode & libc::S_IFMT == libc::S_IFLNK {
        return OpenError::Refused(match role {
            Role::WatchLock | Role::KeptLock => format!(
                "'{}' is a symbolic link: mihari never follows a link at its {}; remove it \
                 (mihari makes its own) or {}",
                path.display(),
                role.noun(),
                role.elsewhere()
            ),
            _ => format!(
                "'{}' is a symbolic link: mihari never follows a link at a job's lock, log, \
                 manifest or marker path; replace it with a regular file or point '{}' elsewhere",
                path.display(),
                role.setting()
            ),
        });
    }
    let whose = match role {
        Role::WatchLock | Role::KeptLock => format!("its {}", role.noun()),
        role => format!("a job's {}", role.noun()),
    };
    OpenError::Refused(format!(
        "'{}' is {what}, not a file: mihari opens only a regular file at {whose}; remove it or \
         {}",
        path.display(),
        match role {
            Role::WatchLock | Role::KeptLock => role.elsewhere(),
            role => format!("point '{}' elsewhere", role.setting()),
        }
    ))
}

fn read_error(path: &Path, error: io::Error) -> OpenError {
    OpenError::Refused(format!("cannot read '{}': {error}", path.display()))
}

fn os_error(path: &Path, role: Role, purpose: Purpose, errno: Errno) -> OpenError {
    let error = io::Error::from(errno);
    if purpose == Purpose::Read {
        return read_error(path, error);
    }
    let hint = match errno {
        Errno::EACCES | Errno::EPERM => {
            format!("; fix the permissions or the '{}' path", role.setting())
        }
        Errno::ENOTDIR => format!("; fix the '{}' path", role.setting()),
        _ => String::new(),
    };
    OpenError::Refused(format!(
        "cannot open the {} '{}': {error}{hint}",
        role.noun(),
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row per boundary of the folder rule, as the operator (uid 1000) sees it.
    #[test]
    fn the_folder_rule() {
        let me = 1000;
        let rows: &[(u32, u32, Option<FolderWriter>)] = &[
            (me, 0o40700, None),
            (me, 0o40755, None),
            (0, 0o40755, None),
            (0, 0o41777, None),
            (me, 0o41777, None),
            (
                me,
                0o40775,
                Some(FolderWriter::GroupOrOthers { mode: 0o775 }),
            ),
            (
                me,
                0o40757,
                Some(FolderWriter::GroupOrOthers { mode: 0o757 }),
            ),
            (
                0,
                0o40777,
                Some(FolderWriter::GroupOrOthers { mode: 0o777 }),
            ),
            (1001, 0o40700, Some(FolderWriter::Owner(1001))),
            // The sticky bit does not hold back the folder's owner.
            (1001, 0o41777, Some(FolderWriter::Owner(1001))),
        ];
        for &(owner, mode, expected) in rows {
            assert_eq!(
                folder_writer(owner, mode, me),
                expected,
                "owner {owner}, mode {mode:o}"
            );
        }
    }

    #[test]
    fn a_link_a_pipe_and_a_folder_are_refused_and_a_file_is_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("file");
        std::fs::write(&file, "42\n").expect("write");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        let pipe = dir.path().join("pipe");
        nix::unistd::mkfifo(&pipe, Mode::from_bits_truncate(0o600)).expect("mkfifo");
        assert!(read(&file, Role::Lock).is_ok());
        assert_eq!(
            read(&dir.path().join("none"), Role::Lock).err(),
            Some(OpenError::Missing)
        );
        for (path, words) in [
            (&link, "is a symbolic link"),
            (&pipe, "is a named pipe, not a file"),
            (&dir.path().to_path_buf(), "is a directory, not a file"),
        ] {
            for role in [Role::Lock, Role::Log] {
                match read(path, role) {
                    Err(OpenError::Refused(why)) => {
                        assert!(why.contains(words), "{why}");
                        assert!(why.contains(&format!("'{}'", path.display())), "{why}");
                    }
                    other => panic!("{}: {other:?}", path.display()),
                }
            }
        }
        // A progress file may be a link; what it points to is judged.
        assert!(read(&link, Role::Progress).is_ok());
        let entry = locate(&pipe, Role::Log, Purpose::Write).expect("the folder is private");
        assert!(matches!(
            entry.open_write(Write::Append { mode: 0o644 }),
            Err(OpenError::Refused(why)) if why.contains("named pipe")
        ));
    }

    #[test]
    fn a_pass_judges_each_folder_once_and_the_next_pass_afresh() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path().join("locks");
        std::fs::create_dir(&folder).expect("mkdir");
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        for name in ["a.lock", "b.lock"] {
            std::fs::write(folder.join(name), "42\n").expect("write");
        }
        folders_remembered(|| {
            assert!(read(&folder.join("a.lock"), Role::Lock).is_ok());
            // Opened anyone's to write in the middle of the pass: this pass judged it already.
            std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777))
                .expect("chmod");
            assert!(read(&folder.join("b.lock"), Role::Lock).is_ok());
        });
        match read(&folder.join("b.lock"), Role::Lock) {
            Err(OpenError::Refused(why)) => assert!(why.contains("b.lock"), "{why}"),
            other => panic!("the next pass trusted it: {other:?}"),
        }
        // Writing never goes by what a pass remembers.
        folders_remembered(|| {
            std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
            assert!(read(&folder.join("a.lock"), Role::Lock).is_ok());
            std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777))
                .expect("chmod");
            assert!(locate(&folder.join("a.lock"), Role::Lock, Purpose::Write).is_err());
        });
    }

    #[test]
    fn a_name_is_removed_only_while_it_names_the_file_held() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("job.lock");
        let entry = locate(&path, Role::Lock, Purpose::Write).expect("locate");
        let held = entry
            .open_write(Write::Update { mode: 0o644 })
            .expect("create");
        assert!(entry.names(&held.file));
        std::fs::remove_file(&path).expect("remove");
        std::fs::write(&path, "someone else's").expect("recreate");
        assert!(!entry.remove_if_names(&held.file).expect("look"));
        assert!(path.exists(), "another file under the name was removed");
    }
}
