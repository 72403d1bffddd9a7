//! One ssh connection per destination, shared by everything the fleet asks of a host — its
//! stream, `fleet check`, a log tail, its events, a decision — as Ansible does it:
//! `-o ControlMaster=auto -o ControlPath=DIR/NAME -o ControlPersist=60s`. Without it every ask
//! is a handshake of its own (about 110 ms of CPU on each end), twenty at once for twenty hosts.
//!
//! This owns four things and nothing else. Whether a host's argv is left to mihari: its
//! program is `ssh`, it sets none of ControlMaster, ControlPath, ControlPersist, `-S` or `-M`
//! (the operator's own choice wins, and mihari adds nothing), and the fleet file does not say
//! `share_ssh: false`. The private folder the sockets live in (`$XDG_RUNTIME_DIR/mihari/ssh`
//! when that folder is this user's, else `/tmp/mihari-UID/ssh`: made 0700, refused when it is a link, someone else's, or open to
//! group or others). The order of the connections to one destination: ssh lets only the first
//! of twenty simultaneous connections become the master and the others do a handshake each,
//! so the first goes and the others wait until its master answers (at most the host's
//! timeout, then they go anyway). And closing, when the fleet screen quits, the masters this
//! process started (`ssh -O exit`); ControlPersist covers a crash.
//!
//! It never fails an ask: when anything about sharing is wrong, the host's argv runs as the
//! fleet file wrote it, and [`refusal`] says why once. It does not read the operator's
//! `~/.ssh/config`: an argv that should not share says so, or the fleet file does.

use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::config::Host;

/// How long a master outlives its last session (Ansible's default): the next ask within it
/// pays no handshake, and a crash of this process leaves no master for longer.
pub const PERSIST: &str = "60s";

/// The longest a unix socket's path may be (`sun_path`, with its NUL), less the 17 bytes of
/// the temporary name ssh binds before it links the socket into place (`PATH.` and 16
/// random characters).
const MAX_SOCKET_PATH: usize = 108 - 1 - 17;

/// How a host's asks reach it: its argv as written, or with the shared connection's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The host's own argv: not ssh, its own Control options, or sharing turned off or refused.
    AsWritten,
    /// Through the master at `socket`.
    Shared { socket: PathBuf },
}

/// Whether `ssh` (a host's argv) leaves connection sharing to mihari: its program is `ssh` and
/// it sets none of ControlMaster, ControlPath, ControlPersist (`-o K=V`, `-oK=V`, `-o 'K V'`),
/// `-S` or `-M`, in any place ssh reads an option.
pub fn left_to_us(ssh: &[String]) -> bool {
    let Some(program) = ssh.first() else {
        return false;
    };
    if Path::new(program).file_name().and_then(|n| n.to_str()) != Some("ssh") {
        return false;
    }
    // ssh's options that take an argument (OpenSSH 9's getopt string).
    const WITH_ARGUMENT: &str = "bceilmopBDEFIJLOPQRSwW";
    let control = |option: &str| {
        let key = option
            .trim_start()
            .split(|c: char| c == '=' || c.is_whitespace())
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        matches!(
            key.as_str(),
            "controlmaster" | "controlpath" | "controlpersist"
        )
    };
    let mut words = ssh[1..].iter();
    while let Some(word) = words.next() {
        if word == "--" {
            break;
        }
        let Some(flags) = word.strip_prefix('-') else {
            continue;
        };
        for (at, flag) in flags.char_indices() {
            if flag == 'M' {
                return false;
            }
            if WITH_ARGUMENT.contains(flag) {
                let rest = &flags[at + flag.len_utf8()..];
                let argument = if rest.is_empty() {
                    words.next().map(String::as_str).unwrap_or("")
                } else {
                    rest
                };
                if flag == 'S' || (flag == 'o' && control(argument)) {
                    return false;
                }
                break;
            }
        }
    }
    true
}

/// The socket of the master for `ssh` in `dir`: named by a hash of the whole argv, so that
/// mihari knows the socket to wait for without asking ssh how it would expand `%C`, and two
/// argvs that differ (another key, another SetEnv, a ProxyJump) never share a connection whose
/// options one of them did not ask for.
pub fn socket_for(dir: &Path, ssh: &[String]) -> PathBuf {
    let mut hash = Sha256::new();
    for word in ssh {
        hash.update(word.as_bytes());
        hash.update([0u8]);
    }
    let name: String = hash.finalize()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join(name)
}

/// The host's ssh argv with the shared connection's options after its program.
pub fn with_sharing(ssh: &[String], socket: &Path) -> Vec<String> {
    let mut argv = vec![ssh[0].clone()];
    for option in [
        "ControlMaster=auto".to_string(),
        format!("ControlPath={}", socket.display()),
        format!("ControlPersist={PERSIST}"),
    ] {
        argv.push("-o".to_string());
        argv.push(option);
    }
    argv.extend(ssh[1..].iter().cloned());
    argv
}

/// The private folder the sockets live in, made once per process; why there is none.
fn private_dir() -> &'static Result<PathBuf, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let uid = nix::unistd::geteuid().as_raw();
        // Another user's (a `sudo` that kept the variable) is not this user's to write in.
        let runtime = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.uid() == uid));
        let (top, named) = match runtime {
            Some(runtime) => (runtime.join("mihari"), "$XDG_RUNTIME_DIR/mihari"),
            None => (PathBuf::from(format!("/tmp/mihari-{uid}")), "its folder"),
        };
        let dir = top.join("ssh");
        for folder in [&top, &dir] {
            make_private(folder, uid).map_err(|why| format!("{why} ({named})"))?;
        }
        // ssh reads '%' in ControlPath as a token and splits an option at a space or quote.
        let plain = dir.to_str().is_some_and(|d| {
            d.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/._-+".contains(&b))
        });
        if !plain {
            return Err(format!(
                "'{}' holds characters ssh would read as tokens or quotes: set \
                 XDG_RUNTIME_DIR to a plain path",
                crate::core::text::inert(&dir.display().to_string())
            ));
        }
        Ok(dir)
    })
}

/// Makes `folder` (0700) unless it is there, and accepts it only when it is a real folder of
/// this user that nobody else may enter: a socket in it lets whoever reaches it run commands
/// on the host as the operator.
fn make_private(folder: &Path, uid: u32) -> Result<(), String> {
    let shown = || crate::core::text::inert(&folder.display().to_string());
    match std::fs::DirBuilder::new().mode(0o700).create(folder) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make '{}': {e}", shown())),
    }
    let meta =
        std::fs::symlink_metadata(folder).map_err(|e| format!("cannot read '{}': {e}", shown()))?;
    if meta.file_type().is_symlink() {
        return Err(format!(
            "'{}' is a link: remove it, mihari makes the folder itself",
            shown()
        ));
    }
    if !meta.is_dir() {
        return Err(format!("'{}' is not a folder: remove it", shown()));
    }
    if meta.uid() != uid {
        return Err(format!(
            "'{}' belongs to uid {}, not to this user ({uid}): remove it",
            shown(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "'{}' is open to group or others (mode {:o}): chmod 700 it",
            shown(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Why some of these hosts do not share connections though their argvs leave it to mihari:
/// the private folder was refused, or its socket paths are too long. Said once, by the
/// front-end, as a note.
pub fn refusal(hosts: &[Host]) -> Option<String> {
    let left: Vec<&Host> = hosts
        .iter()
        .filter(|h| h.share_ssh && left_to_us(&h.ssh))
        .collect();
    let first = left.first()?;
    let why = match private_dir() {
        Err(why) => why.clone(),
        Ok(dir) if socket_for(dir, &first.ssh).as_os_str().len() > MAX_SOCKET_PATH => format!(
            "a socket in '{}' would be longer than a unix socket's path may be: set \
             XDG_RUNTIME_DIR to a shorter path",
            crate::core::text::inert(&dir.display().to_string())
        ),
        Ok(_) => return None,
    };
    Some(format!(
        "ssh connections are not shared, each ask makes its own: {why}"
    ))
}

/// How `host`'s asks reach it.
pub fn route(host: &Host) -> Route {
    if !host.share_ssh || !left_to_us(&host.ssh) {
        return Route::AsWritten;
    }
    let Ok(dir) = private_dir() else {
        return Route::AsWritten;
    };
    let socket = socket_for(dir, &host.ssh);
    if socket.as_os_str().len() > MAX_SOCKET_PATH {
        return Route::AsWritten;
    }
    Route::Shared { socket }
}

/// Whether a master answers at `socket`: something accepts a connection there.
fn answers(socket: &Path) -> bool {
    UnixStream::connect(socket).is_ok()
}

/// One destination as this process knows it.
struct Destination {
    /// The opening under way (its number), while the first ask's ssh makes the master.
    opening: Option<u64>,
    openings: u64,
    /// A master answered when this process first came, and has not been seen gone since:
    /// someone else's (another `fleet check`), which quitting leaves alone.
    inherited: bool,
    /// The argv that closes its master (`ssh -O exit`).
    close: Vec<String>,
}

struct Registry {
    destinations: Mutex<HashMap<PathBuf, Destination>>,
    changed: Condvar,
}

static REGISTRY: LazyLock<Registry> = LazyLock::new(|| Registry {
    destinations: Mutex::new(HashMap::new()),
    changed: Condvar::new(),
});

/// The ask that makes a destination's master: while it lives, the others to the same
/// destination wait for the master to answer; once it is dropped, they go.
pub struct Opening {
    done: Arc<AtomicBool>,
}

impl Drop for Opening {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
    }
}

/// The argv prefix for one ask of `host`, after waiting (at most the host's timeout) for
/// another ask's master to the same destination; the [`Opening`] to keep while the ask runs
/// when this ask makes the master.
pub fn reach(host: &Host) -> (Vec<String>, Option<Opening>) {
    let Route::Shared { socket } = route(host) else {
        return (host.ssh.clone(), None);
    };
    let argv = with_sharing(&host.ssh, &socket);
    let deadline = Instant::now() + host.timeout;
    let registry = &*REGISTRY;
    let Ok(mut destinations) = registry.destinations.lock() else {
        return (argv, None);
    };
    let mut waited_for = None;
    loop {
        let up = answers(&socket);
        let destination = destinations
            .entry(socket.clone())
            .or_insert_with(|| Destination {
                opening: None,
                openings: 0,
                inherited: up,
                close: closing(&host.ssh, &socket),
            });
        if !up {
            destination.inherited = false;
        }
        if up {
            return (argv, None);
        }
        match destination.opening {
            None if waited_for.is_some() => return (argv, None),
            None => {
                destination.openings += 1;
                let number = destination.openings;
                destination.opening = Some(number);
                let done = Arc::new(AtomicBool::new(false));
                watch_opening(socket.clone(), number, done.clone(), deadline);
                return (argv, Some(Opening { done }));
            }
            // The opening this ask waited for is over (its master answers, or it failed):
            // go, and let ssh make its own connection if there is still no master.
            Some(number) if waited_for.is_some_and(|w| w != number) => return (argv, None),
            Some(number) => {
                waited_for = Some(number);
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return (argv, None);
                }
                destinations = match registry.changed.wait_timeout(destinations, left) {
                    Ok((guard, _)) => guard,
                    Err(_) => return (argv, None),
                };
            }
        }
    }
}

/// Watches an opening until its master answers, its ask ends, or the host's timeout passes,
/// then lets the asks waiting for it go.
fn watch_opening(socket: PathBuf, number: u64, done: Arc<AtomicBool>, deadline: Instant) {
    std::thread::spawn(move || {
        while !answers(&socket) && !done.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let registry = &*REGISTRY;
        if let Ok(mut destinations) = registry.destinations.lock() {
            if let Some(destination) = destinations.get_mut(&socket)
                && destination.opening == Some(number)
            {
                destination.opening = None;
            }
            registry.changed.notify_all();
        }
    });
}

/// `ssh -o ControlPath=SOCKET -O exit` with the host's own options and destination.
fn closing(ssh: &[String], socket: &Path) -> Vec<String> {
    let mut argv = vec![
        ssh[0].clone(),
        "-o".to_string(),
        format!("ControlPath={}", socket.display()),
        "-O".to_string(),
        "exit".to_string(),
    ];
    argv.extend(ssh[1..].iter().cloned());
    argv
}

/// Closes every master this process started (or found gone and made again): the fleet
/// screen's asks are over. Masters someone else made are left to their ControlPersist.
pub fn close_ours() {
    let closes: Vec<Vec<String>> = match REGISTRY.destinations.lock() {
        Ok(destinations) => destinations
            .iter()
            .filter(|(socket, d)| !d.inherited && answers(socket))
            .map(|(_, d)| d.close.clone())
            .collect(),
        Err(_) => return,
    };
    let running: Vec<_> = closes
        .iter()
        .filter_map(|argv| {
            Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .ok()
        })
        .collect();
    // `-O exit` only asks the local master to go: no network, done at once.
    let deadline = Instant::now() + Duration::from_secs(5);
    for mut child in running {
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(argv: &[&str]) -> Vec<String> {
        argv.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn an_argv_is_left_to_us_unless_it_is_not_ssh_or_says_how_to_share_itself() {
        for (argv, left) in [
            (&["ssh", "ops@gpu1"][..], true),
            (
                &["/usr/bin/ssh", "-p", "2222", "-o", "BatchMode=yes", "gpu1"],
                true,
            ),
            // An argument that merely looks like an option is an argument.
            (&["ssh", "-l", "-M", "gpu1"], true),
            (&["ssh", "-i", "/k/ControlPath=x", "gpu1"], true),
            (&["autossh", "gpu1"], false),
            (&["sh", "-c", "ssh gpu1"], false),
            (&["ssh", "-o", "ControlMaster=no", "gpu1"], false),
            (&["ssh", "-oControlPath=/tmp/x", "gpu1"], false),
            (&["ssh", "-o", "controlpersist 10m", "gpu1"], false),
            (&["ssh", "-S", "/tmp/sock", "gpu1"], false),
            (&["ssh", "-S/tmp/sock", "gpu1"], false),
            (&["ssh", "-M", "gpu1"], false),
            (&["ssh", "-vM", "gpu1"], false),
            // ssh reads options after the destination too.
            (&["ssh", "gpu1", "-o", "ControlMaster=no"], false),
        ] {
            assert_eq!(left_to_us(&words(argv)), left, "{argv:?}");
        }
    }

    #[test]
    fn the_shared_options_follow_the_program_and_the_socket_is_named_by_the_whole_argv() {
        let ssh = words(&["ssh", "-p", "2222", "ops@gpu1"]);
        let socket = socket_for(Path::new("/run/user/1000/mihari/ssh"), &ssh);
        assert_eq!(
            with_sharing(&ssh, &socket),
            words(&[
                "ssh",
                "-o",
                "ControlMaster=auto",
                "-o",
                &format!("ControlPath={}", socket.display()),
                "-o",
                "ControlPersist=60s",
                "-p",
                "2222",
                "ops@gpu1"
            ])
        );
        assert_eq!(
            socket,
            socket_for(Path::new("/run/user/1000/mihari/ssh"), &ssh)
        );
        assert_ne!(
            socket,
            socket_for(
                Path::new("/run/user/1000/mihari/ssh"),
                &words(&["ssh", "-p", "2223", "ops@gpu1"])
            )
        );
        assert_eq!(
            closing(&ssh, &socket)[..5],
            words(&[
                "ssh",
                "-o",
                &format!("ControlPath={}", socket.display()),
                "-O",
                "exit"
            ])
        );
    }

    #[test]
    fn a_folder_that_is_a_link_or_open_to_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().expect("tempdir");
        let uid = nix::unistd::geteuid().as_raw();
        let made = root.path().join("made");
        assert_eq!(make_private(&made, uid), Ok(()));
        assert_eq!(
            std::fs::metadata(&made).expect("made").mode() & 0o777,
            0o700
        );
        let open = root.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(
            make_private(&open, uid)
                .expect_err("open")
                .contains("open to group or others (mode 755)")
        );
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&made, &link).expect("symlink");
        assert!(
            make_private(&link, uid)
                .expect_err("link")
                .contains("is a link")
        );
        assert!(
            make_private(&made, uid + 1)
                .expect_err("not ours")
                .contains("belongs to uid")
        );
    }
}
