//! Evidence from the kernel, on real processes: a job that prints nothing reads RUNNING while
//! the positions of the files it reads move (`sha256sum` over a large sparse file, with the
//! coreutils `progress` tool agreeing on `sha256sum`, `cp`, `gzip` and `dd`), and a quiet
//! holder's STALLED row says what it is doing — spinning (`python3 -c 'while True: pass'`),
//! waiting on a pipe (a reader of a FIFO nobody writes), stopped (SIGSTOP), blocked in D state
//! (a reader of a FUSE file system that does not answer) — or that it is another user's and
//! cannot be read. Before, every one of them read the same "no progress for N s", and the
//! `sha256sum` burning a core read STALLED.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

#[path = "common/users.rs"]
mod users;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// A folder with a jobs file of jobs found by their command line.
struct Sandbox {
    dir: tempfile::TempDir,
    jobs: Vec<String>,
}

impl Sandbox {
    fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().expect("tempdir"),
            jobs: Vec::new(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The regex of a file of this sandbox: tests run at once, each with files of its own.
    fn here(&self, name: &str) -> String {
        regex::escape(&self.path(name).display().to_string())
    }

    /// A job `id` found by the regex `cmdline`, with `extra` YAML lines under it.
    fn job(&mut self, id: &str, cmdline: &str, extra: &str) -> &mut Self {
        self.jobs.push(format!(
            "  - id: {id}\n    process: {{cmdline: '{cmdline}'}}\n    stall_sec: 2\n    \
             should_run_when: [resource_free]\n{extra}"
        ));
        self
    }

    fn write(&self) -> PathBuf {
        let text = format!(
            "settings:\n  state_dir: state\njobs:\n{}",
            self.jobs.concat()
        );
        let path = self.path("jobs.yaml");
        fs::write(&path, text).expect("write jobs file");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        path
    }

    fn command(&self, args: &[&str]) -> Command {
        self.command_of(Path::new(BIN), args)
    }

    /// [`Sandbox::command`] with the binary at `bin`.
    fn command_of(&self, bin: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(bin);
        command
            .arg("--config")
            .arg(self.write())
            .args(args)
            .stdin(Stdio::null());
        command
    }

    fn output(command: &mut Command) -> String {
        let output = command.output().expect("mihari runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `mihari check --json`'s row of `id`.
    fn row(&self, id: &str) -> Value {
        row_of(&Self::output(&mut self.command(&["check", "--json"])), id)
    }
}

fn row_of(report: &str, id: &str) -> Value {
    let report: Value =
        serde_json::from_str(report).unwrap_or_else(|e| panic!("not JSON ({e}): {report}"));
    report["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|row| row["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no row for {id}: {report:#}"))
}

/// Processes the test started: killed and reaped when it ends (continued first, so a stopped
/// one dies too).
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A number no other process on the machine has in its argv.
fn unique() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(
        "{}",
        2_000_000_000u64 + u64::from(std::process::id()) * 1000 + u64::from(n)
    )
}

fn spawn(command: &mut Command) -> Child {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the tool starts")
}

/// A sparse file of `gib` GiB: read as zeros, at the speed of memory, holding no disk.
fn sparse(path: &Path, gib: u64) {
    let file = fs::File::create(path).expect("create");
    file.set_len(gib << 30).expect("set_len");
}

/// Waits until `pid` has moved its position in a file named `name` past 0, and returns it.
fn wait_for_position(pid: u32, name: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) {
            for fd in fds.flatten() {
                let target = fs::read_link(fd.path()).unwrap_or_default();
                if !target.to_string_lossy().ends_with(name) {
                    continue;
                }
                let info = fs::read_to_string(format!(
                    "/proc/{pid}/fdinfo/{}",
                    fd.file_name().to_string_lossy()
                ))
                .unwrap_or_default();
                let pos: u64 = info
                    .lines()
                    .find_map(|l| l.strip_prefix("pos:"))
                    .and_then(|p| p.trim().parse().ok())
                    .unwrap_or(0);
                if pos > 0 {
                    return pos;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "pid {pid} never moved its position in '{name}'"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for_state(pid: u32, want: char) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let state = fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()?
                    .split_whitespace()
                    .next()?
                    .chars()
                    .next()
            });
        if state == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pid {pid} never reached state {want}: {state:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The holder must have been quiet for half of `stall_sec` (2 s) before the kernel is asked.
fn past_half_of_stall_sec() {
    std::thread::sleep(Duration::from_millis(1200));
}

/// `progress -p PID`'s percent and file, as it prints them ("\t43.2% (1.7 GiB / 4 GiB)").
fn progress_tool(pid: u32) -> (f64, String) {
    let output = Command::new("progress")
        .args(["-p", &pid.to_string()])
        .output()
        .expect("the progress tool runs (Debian package 'progress')");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut lines = text.lines();
    let head = lines
        .next()
        .unwrap_or_else(|| panic!("progress printed nothing: {text}"));
    let file = head
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string();
    let percent = lines
        .next()
        .and_then(|l| l.trim().split('%').next())
        .and_then(|p| p.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no percent in: {text}"));
    (percent, file)
}

fn first_reason(row: &Value) -> String {
    row["reasons"][0].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_silent_sha256sum_reads_running_with_a_moving_percent_not_stalled() {
    let mut sandbox = Sandbox::new();
    let big = sandbox.path("big.img");
    sparse(&big, 64);
    let procs = Procs(vec![spawn(Command::new("sha256sum").arg(&big))]);
    let pid = procs.0[0].id();
    let pattern = format!("^sha256sum {}$", sandbox.here("big.img"));
    sandbox.job("hash", &pattern, "");
    wait_for_position(pid, "big.img");
    past_half_of_stall_sec();
    let first = sandbox.row("hash");
    assert_eq!(first["state"], "RUNNING", "{first:#}");
    assert_eq!(first["progress_source"], "io", "{first:#}");
    assert_eq!(first["activity"]["state"], "progressing", "{first:#}");
    let said = first_reason(&first);
    assert!(said.contains("reading 'big.img' at "), "{said}");
    assert!(first["percent"].as_f64().is_some(), "{first:#}");
    let position = |row: &Value| row["activity"]["file"]["position"].as_u64().unwrap_or(0);
    std::thread::sleep(Duration::from_millis(2500));
    let later = sandbox.row("hash");
    assert_eq!(later["state"], "RUNNING", "{later:#}");
    assert!(position(&later) > position(&first), "{first:#}\n{later:#}");
    assert!(
        later["activity"]["file"]["bytes_per_sec"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0,
        "{later:#}"
    );
    assert!(later["eta_sec"].as_f64().is_some(), "{later:#}");
}

/// The same figures as `progress -p PID`, on the tools it was made for: each is stopped with
/// SIGSTOP partway, so both read the one position the kernel holds.
#[test]
fn the_position_and_percent_agree_with_the_progress_tool_on_sha256sum_cp_gzip_and_dd() {
    let mut sandbox = Sandbox::new();
    let big = sandbox.path("big.img");
    sparse(&big, 64);
    // cp copies a sparse file's holes without reading them: it reads a real file, into a FIFO
    // whose reader takes 8 MB/s, as a slow destination would.
    let data = sandbox.path("data.bin");
    fs::write(&data, vec![7u8; 64 << 20]).expect("data");
    let fifo = sandbox.path("slow.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let mut procs = Procs(vec![spawn(
        Command::new("pv")
            .args(["-q", "-L", "8m"])
            .arg(&fifo)
            .stdout(Stdio::null()),
    )]);
    let tools: Vec<(&str, Command, String)> = vec![
        (
            "sha",
            {
                let mut c = Command::new("sha256sum");
                c.arg(&big);
                c
            },
            format!("^sha256sum {}$", sandbox.here("big.img")),
        ),
        (
            "cp",
            {
                let mut c = Command::new("cp");
                c.arg(&data).arg(&fifo);
                c
            },
            format!("^cp {} ", sandbox.here("data.bin")),
        ),
        (
            "gzip",
            {
                let mut c = Command::new("gzip");
                c.arg("-c").arg(&big);
                c
            },
            format!("^gzip -c {}$", sandbox.here("big.img")),
        ),
        (
            "dd",
            {
                let mut c = Command::new("dd");
                c.arg(format!("if={}", big.display())).args([
                    "of=/dev/null",
                    "bs=64k",
                    "status=none",
                ]);
                c
            },
            format!("^dd if={} ", sandbox.here("big.img")),
        ),
    ];
    let mut started = Vec::new();
    for (id, mut command, pattern) in tools {
        sandbox.job(id, &pattern, "");
        let child = spawn(&mut command);
        started.push((id, child.id()));
        procs.0.push(child);
    }
    for (id, pid) in &started {
        let name = if *id == "cp" { "data.bin" } else { "big.img" };
        wait_for_position(*pid, name);
        kill(Pid::from_raw(*pid as i32), Signal::SIGSTOP).expect("stop");
        wait_for_state(*pid, 'T');
    }
    past_half_of_stall_sec();
    let report = Sandbox::output(&mut sandbox.command(&["check", "--json"]));
    for (id, pid) in &started {
        let row = row_of(&report, id);
        let file = &row["activity"]["file"];
        let (percent, path) = progress_tool(*pid);
        assert_eq!(file["path"].as_str(), Some(path.as_str()), "{id}: {row:#}");
        let ours = file["percent"].as_f64().unwrap_or(-1.0);
        assert!(
            (ours - percent).abs() <= 0.1,
            "{id}: mihari says {ours} %, progress says {percent} %: {row:#}"
        );
        assert!(file["position"].as_u64().unwrap_or(0) > 0, "{id}: {row:#}");
        // Stopped: the position does not move, and the row says why.
        assert_eq!(row["activity"]["state"], "stopped", "{id}: {row:#}");
    }
}

#[test]
fn a_loop_spinning_on_a_bug_is_stalled_and_said_to_be_spinning() {
    let mut sandbox = Sandbox::new();
    let tag = unique();
    let _procs = Procs(vec![spawn(Command::new("python3").args([
        "-c",
        "while True: pass",
        &tag,
    ]))]);
    sandbox.job("spin", &format!("python3 -c while True: pass {tag}$"), "");
    std::thread::sleep(Duration::from_millis(2500));
    let row = sandbox.row("spin");
    assert_eq!(row["state"], "STALLED", "{row:#}");
    assert_eq!(row["activity"]["state"], "spinning", "{row:#}");
    let said = first_reason(&row);
    assert!(said.contains("spinning: "), "{said}");
    assert!(said.contains("no file moved"), "{said}");
    assert!(row["activity"]["cpu_percent"].as_f64().is_some(), "{row:#}");
}

#[test]
fn a_reader_of_a_fifo_nobody_writes_is_waiting_on_a_pipe() {
    let mut sandbox = Sandbox::new();
    let fifo = sandbox.path("quiet.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    // A writer that opened the FIFO and never writes: the reader waits in its read.
    let writer = spawn(Command::new("sh").arg("-c").arg(format!(
        "exec sleep {} > '{}'",
        unique(),
        fifo.display()
    )));
    let reader = spawn(Command::new("cat").arg(&fifo));
    let pid = reader.id();
    let _procs = Procs(vec![reader, writer]);
    let pattern = format!("^cat {}$", sandbox.here("quiet.fifo"));
    sandbox.job("reader", &pattern, "");
    wait_for_state(pid, 'S');
    std::thread::sleep(Duration::from_millis(2500));
    let row = sandbox.row("reader");
    assert_eq!(row["state"], "STALLED", "{row:#}");
    assert_eq!(row["activity"]["state"], "waiting", "{row:#}");
    let said = first_reason(&row);
    assert!(said.contains("a read on a pipe"), "{said}");
    assert!(said.contains("quiet.fifo"), "{said}");
}

#[test]
fn a_process_stopped_with_sigstop_is_said_stopped() {
    let mut sandbox = Sandbox::new();
    let seconds = unique();
    let procs = Procs(vec![spawn(Command::new("sleep").arg(&seconds))]);
    let pid = procs.0[0].id();
    kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).expect("stop");
    wait_for_state(pid, 'T');
    sandbox.job("paused", &format!("^sleep {seconds}$"), "");
    std::thread::sleep(Duration::from_millis(2500));
    let row = sandbox.row("paused");
    assert_eq!(row["state"], "STALLED", "{row:#}");
    assert_eq!(row["activity"]["state"], "stopped", "{row:#}");
    assert!(
        first_reason(&row).contains(&format!("kill -CONT {pid}")),
        "{row:#}"
    );
}

#[test]
fn another_users_process_is_said_unreadable_never_guessed() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to run mihari as another user");
        return;
    }
    let Some((uid, gid)) = users::other_user() else {
        return;
    };
    let mut sandbox = Sandbox::new();
    let seconds = unique();
    // root's process; mihari runs as the other user, who may read its stat but not its files.
    let _procs = Procs(vec![spawn(Command::new("sleep").arg(&seconds))]);
    sandbox.job("roots", &format!("^sleep {seconds}$"), "");
    sandbox.write();
    std::os::unix::fs::chown(sandbox.dir.path(), Some(uid), Some(gid)).expect("chown");
    fs::set_permissions(sandbox.dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    // A copy the other user can reach: the build's own folder may be closed to them (a clone
    // in a 0700 temp folder).
    let bin = sandbox.path("mihari");
    fs::copy(BIN, &bin).expect("copy the binary");
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).expect("chmod the binary");
    std::thread::sleep(Duration::from_millis(2500));
    let mut command = sandbox.command_of(&bin, &["check", "--json"]);
    command.uid(uid).gid(gid);
    let row = row_of(&Sandbox::output(&mut command), "roots");
    assert_eq!(row["activity"]["state"], "unreadable", "{row:#}");
    // Whether a file moves cannot be told: not STALLED, which would guess that none does.
    assert_eq!(row["state"], "UNKNOWN", "{row:#}");
    let said = row["reasons"].to_string();
    assert!(said.contains("another user's process"), "{said}");
    assert!(said.contains("io_progress: false"), "{said}");
}

#[test]
fn with_io_progress_off_a_reader_is_judged_by_its_log_and_still_diagnosed() {
    let mut sandbox = Sandbox::new();
    let big = sandbox.path("big.img");
    sparse(&big, 64);
    let log = sandbox.path("hash.log");
    fs::write(&log, "started\n").expect("log");
    let procs = Procs(vec![spawn(Command::new("sha256sum").arg(&big))]);
    let pattern = format!("^sha256sum {}$", sandbox.here("big.img"));
    sandbox.job(
        "hash",
        &pattern,
        &format!("    log: {}\n    io_progress: false\n", log.display()),
    );
    wait_for_position(procs.0[0].id(), "big.img");
    std::thread::sleep(Duration::from_millis(2500));
    let row = sandbox.row("hash");
    assert_eq!(row["state"], "STALLED", "{row:#}");
    assert_eq!(row["progress_source"], "log", "{row:#}");
    assert_eq!(row["activity"]["file"], Value::Null, "{row:#}");
    let state = row["activity"]["state"].as_str().unwrap_or_default();
    assert!(["busy", "spinning"].contains(&state), "{row:#}");
}

/// The watcher's and the dashboard's engine keeps its looks across passes: a reader whose
/// position keeps moving never turns STALLED between them, and a spinner is found spinning.
#[test]
fn the_long_running_engine_keeps_a_moving_reader_running_across_its_looks() {
    let mut sandbox = Sandbox::new();
    let big = sandbox.path("big.img");
    sparse(&big, 64);
    let tag = unique();
    let hasher = spawn(Command::new("sha256sum").arg(&big));
    let hasher_pid = hasher.id();
    let _procs = Procs(vec![
        hasher,
        spawn(Command::new("python3").args(["-c", "while True: pass", &tag])),
    ]);
    let pattern = format!("^sha256sum {}$", sandbox.here("big.img"));
    sandbox.job("hash", &pattern, "");
    sandbox.job("spin", &format!("python3 -c while True: pass {tag}$"), "");
    wait_for_position(hasher_pid, "big.img");
    let mut follow = sandbox
        .command(&["check", "--json", "--follow"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("follow starts");
    let lines = BufReader::new(follow.stdout.take().expect("stdout"));
    let until = Instant::now() + Duration::from_secs(7);
    let mut hash_states = Vec::new();
    let mut spin_activity = Vec::new();
    for line in lines.lines() {
        let Ok(line) = line else { break };
        hash_states.push(
            row_of(&line, "hash")["state"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
        spin_activity.push(
            row_of(&line, "spin")["activity"]["state"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
        if Instant::now() > until {
            break;
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(hash_states.len() >= 3, "{hash_states:?}");
    assert!(
        hash_states.iter().all(|s| s == "RUNNING"),
        "{hash_states:?}"
    );
    assert_eq!(
        spin_activity.last().map(String::as_str),
        Some("spinning"),
        "{spin_activity:?}"
    );
}

#[test]
fn the_prometheus_textfile_names_the_activity_state_and_passes_promtool() {
    let mut sandbox = Sandbox::new();
    let seconds = unique();
    let procs = Procs(vec![spawn(Command::new("sleep").arg(&seconds))]);
    kill(Pid::from_raw(procs.0[0].id() as i32), Signal::SIGSTOP).expect("stop");
    sandbox.job("paused", &format!("^sleep {seconds}$"), "");
    std::thread::sleep(Duration::from_millis(2500));
    let text = Sandbox::output(&mut sandbox.command(&["check", "--prometheus"]));
    assert!(
        text.contains("mihari_job_activity_state{job_id=\"paused\",state=\"stopped\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("mihari_job_activity_state{job_id=\"paused\",state=\"spinning\"} 0"),
        "{text}"
    );
    let file = sandbox.path("metrics.prom");
    fs::write(&file, &text).expect("write");
    let checked = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(fs::File::open(&file).expect("open"))
        .output()
        .expect("promtool runs");
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// A FUSE file system whose server takes requests and never answers a read, as a dead NFS
/// server does: a reader of it waits in D state. Written for the test in Python on
/// `/dev/fuse` (no FUSE library is installed); it answers INTERRUPT with ENOSYS, so the
/// kernel stops interrupting and waits uninterruptibly.
const STUCK_FS: &str = r#"
import ctypes, os, struct, sys
target = sys.argv[1]
fd = os.open("/dev/fuse", os.O_RDWR)
libc = ctypes.CDLL(None, use_errno=True)
opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
if libc.mount(b"mihari-stuck", target.encode(), b"fuse", 6, opts) != 0:
    print("mount failed:", os.strerror(ctypes.get_errno()), flush=True)
    sys.exit(1)
print("mounted", flush=True)
SIZE = 1 << 30
def attr(ino, mode, size):
    return struct.pack("<QQQQQQIIIIIIIIII", ino, size, size // 512, 0, 0, 0, 0, 0, 0, mode, 1, 0, 0, 0, 4096, 0)
def reply(unique, err=0, payload=b""):
    os.write(fd, struct.pack("<IiQ", 16 + len(payload), err, unique) + payload)
while True:
    try:
        buf = os.read(fd, 1 << 20)
    except OSError:
        break
    length, opcode, unique, nodeid = struct.unpack_from("<IIQQ", buf, 0)
    body = buf[40:]
    if opcode == 26:
        major, minor, ra, flags = struct.unpack_from("<IIII", body)
        reply(unique, 0, struct.pack("<IIIIHHIIHHII", 7, 31, ra, 0, 16, 12, 1 << 17, 1, 32, 0, 0, 0) + b"\0" * 24)
    elif opcode == 1:
        if body.split(b"\0")[0] == b"big.img":
            reply(unique, 0, struct.pack("<QQQQII", 2, 1, 3600, 3600, 0, 0) + attr(2, 0o100644, SIZE))
        else:
            reply(unique, -2)
    elif opcode == 3:
        a = attr(1, 0o40755, 0) if nodeid == 1 else attr(2, 0o100644, SIZE)
        reply(unique, 0, struct.pack("<QII", 3600, 0, 0) + a)
    elif opcode in (14, 27):
        reply(unique, 0, struct.pack("<QIi", 1, 0, 0))
    elif opcode in (2, 15, 42):
        pass
    else:
        reply(unique, -38)
"#;

/// The mount and its server: the server is killed first (that aborts the connection and
/// frees every reader stuck on it), then the mount is taken away.
struct StuckMount {
    server: Child,
    target: PathBuf,
}

impl Drop for StuckMount {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.target).status();
    }
}

#[test]
fn a_reader_of_a_file_system_that_does_not_answer_is_blocked_in_d_state() {
    if !nix::unistd::geteuid().is_root() || !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: needs root and /dev/fuse to mount a FUSE file system");
        return;
    }
    let mut sandbox = Sandbox::new();
    let target = sandbox.path("mnt");
    fs::create_dir(&target).expect("mountpoint");
    let script = sandbox.path("stuckfs.py");
    fs::write(&script, STUCK_FS).expect("script");
    let mut server = Command::new("python3")
        .arg(&script)
        .arg(&target)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the FUSE server starts");
    let mut said = String::new();
    BufReader::new(server.stdout.take().expect("stdout"))
        .read_line(&mut said)
        .expect("the server says whether it mounted");
    let mount = StuckMount {
        server,
        target: target.clone(),
    };
    if said.trim() != "mounted" {
        eprintln!("skipped: the FUSE file system could not be mounted here: {said}");
        return;
    }
    let file = target.join("big.img");
    // A first reader is interrupted: the server answers ENOSYS, and from then on the kernel
    // waits for it uninterruptibly.
    let mut first = spawn(Command::new("cat").arg(&file));
    std::thread::sleep(Duration::from_millis(500));
    let _ = first.kill();
    let tag = unique();
    let reader = spawn(
        Command::new("sh")
            .arg("-c")
            .arg(format!("exec cat '{}' {tag}", file.display())),
    );
    let pid = reader.id();
    sandbox.job("stuck", &format!("^cat .*/big\\.img {tag}$"), "");
    wait_for_state(pid, 'D');
    std::thread::sleep(Duration::from_millis(2000));
    let row = sandbox.row("stuck");
    drop(mount);
    let _procs = Procs(vec![reader, first]);
    assert_eq!(row["state"], "STALLED", "{row:#}");
    assert_eq!(row["activity"]["state"], "blocked", "{row:#}");
    let said = first_reason(&row);
    assert!(said.contains("in D state"), "{said}");
    assert!(said.contains("wchan "), "{said}");
}
