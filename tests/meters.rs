//! The meters real tools print, read by their `log_progress` presets, on the real tools: curl
//! and wget downloading from a server on 127.0.0.1 that is then frozen with SIGSTOP, rsync
//! (`--info=progress2`, and `--progress` killed half way), `pv -n`, `dd status=progress`, and
//! the compression ratios of `gzip -v` and `zstd -v`; and the captures in
//! `tests/fixtures/meters/`, taken from the same tools, read frame by frame.
//!
//! The incidents: curl's meter and wget's bar redraw every second while not one byte arrives,
//! so the log's modification time kept a download frozen by its server RUNNING "progress 1 s
//! ago" for ever; and `preset: percent` read rsync `--progress`'s per-file 100 % of a copy
//! killed at file 20 of 60 as COMPLETE, and gzip's ratios as how far a job was.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use mihari::config::LogProgress;
use mihari::core::{Figure, LogProgressReading, Reading};
use mihari::probe::log_progress::LogProgressReader;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/meters");

/// Debian's python, for the server.
const PYTHON: &str = "/usr/bin/python3";

/// How long any wait in these tests may take before it is a failure (never a timing asserted).
const PATIENCE: Duration = Duration::from_secs(90);

struct Sandbox {
    dir: tempfile::TempDir,
    jobs: String,
}

impl Sandbox {
    fn new(jobs: &str) -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
        let sandbox = Sandbox {
            dir,
            jobs: jobs.to_string(),
        };
        sandbox.write_jobs("jobs.yaml", "state");
        sandbox
    }

    fn write_jobs(&self, name: &str, state_dir: &str) -> PathBuf {
        let path = self.path(name);
        fs::write(
            &path,
            format!("settings:\n  state_dir: {state_dir}\njobs:\n{}", self.jobs),
        )
        .expect("write jobs");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        path
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, config: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .arg("--config")
            .arg(config)
            .args(args)
            .stdin(Stdio::null());
        command
    }

    /// `mihari run JOB`, its job's output going to the job's log.
    fn run(&self, id: &str) -> Running {
        let child = self
            .command(&self.path("jobs.yaml"), &["run", id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mihari run starts");
        Running(child)
    }

    /// The job as a one-shot `check --json` reads it, with the memory kept in `state`.
    fn job(&self, id: &str) -> Value {
        job_of(
            &self
                .command(&self.path("jobs.yaml"), &["check", "--json"])
                .output()
                .expect("mihari check runs"),
            id,
        )
    }

    /// The job as a one-shot `check --json` reads it with the state folder `state_dir`: a
    /// new name is a first look, with nothing kept of earlier ones.
    fn job_in(&self, id: &str, state_dir: &str) -> Value {
        let config = self.write_jobs(&format!("jobs-{state_dir}.yaml"), state_dir);
        job_of(
            &self
                .command(&config, &["check", "--json"])
                .output()
                .expect("mihari check runs"),
            id,
        )
    }

    /// A long-running engine (`check --json --follow`), as the watcher and the dashboard run
    /// one.
    fn follow(&self) -> Follow {
        let mut child = self
            .command(&self.path("jobs.yaml"), &["check", "--json", "--follow"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("check --follow starts");
        let stdout: ChildStdout = child.stdout.take().expect("its stdout");
        let (send, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Follow { child, lines }
    }
}

fn job_of(output: &Output, id: &str) -> Value {
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "check --json is JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    find_job(&report, id)
}

fn find_job(report: &Value, id: &str) -> Value {
    report["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no job {id}: {report:#}"))
}

fn reasons(job: &Value) -> String {
    job["reasons"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_default()
}

/// Waits until `ready` holds for the job's one-shot check, and returns it.
fn wait_for(sandbox: &Sandbox, id: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let job = sandbox.job(id);
        if ready(&job) {
            return job;
        }
        assert!(Instant::now() < deadline, "never {what}: {job:#}");
        thread::sleep(Duration::from_millis(200));
    }
}

/// `mihari run`, stopped (SIGTERM: it ends the job's tree) and reaped when dropped.
struct Running(Child);

impl Running {
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }

    fn wait(&mut self) -> bool {
        self.0.wait().is_ok_and(|status| status.success())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}

/// A `check --json --follow`: one snapshot a line, whenever anything shown changes.
struct Follow {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Follow {
    /// The first snapshot of the job for which `ready` holds.
    fn until(&self, id: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        let mut last = Value::Null;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let report: Value = serde_json::from_str(&line).expect("a JSON line");
                    last = find_job(&report, id);
                    if ready(&last) {
                        return last;
                    }
                }
                Err(_) => panic!("check --follow never {what}; last: {last:#}"),
            }
        }
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A web server on 127.0.0.1 that sends `size` bytes 20,000 at a time, one piece every 50 ms
/// (about 400 KB/s), so a download takes long enough to be watched and frozen.
struct Server {
    child: Child,
    port: u16,
}

const SERVER: &str = r#"
import http.server, socketserver, sys, time
size = int(sys.argv[1])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        sent = 0
        try:
            while sent < size:
                n = min(20000, size - sent)
                self.wfile.write(b"x" * n)
                self.wfile.flush()
                sent += n
                time.sleep(0.05)
        except OSError:
            pass
    def log_message(self, *args):
        pass
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

impl Server {
    fn start(size: u64) -> Server {
        assert!(Path::new(PYTHON).exists(), "this test needs '{PYTHON}'");
        let mut child = Command::new(PYTHON)
            .args(["-c", SERVER, &size.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the server starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("its stdout"))
            .read_line(&mut line)
            .expect("the server says its port");
        let port = line.trim().parse().expect("a port");
        Server { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/big.bin", self.port)
    }

    fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.signal("-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tool(name: &str) -> &str {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(found, "this test needs '{name}' on PATH");
    name
}

/// A download job under `mihari run` reading `preset` from its log.
fn download_job(preset: &str, argv: &[&str]) -> String {
    let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "  - id: fetch\n    lock: fetch.lock\n    log: fetch.log\n    \
         log_progress: {{ preset: {preset} }}\n    stall_sec: 4\n    \
         should_run_when: [not_complete]\n    restart:\n      command: [{}]\n",
        argv.join(", ")
    )
}

/// Runs a download of `argv` from a server that is frozen once it is under way: the
/// long-running engine must call it STALLED, and a first one-shot look must not call it
/// fresh. Returns that first look, and the sandbox for more.
fn frozen_download(preset: &str, argv: impl Fn(&str) -> Vec<String>) -> (Value, Sandbox) {
    let server = Server::start(400_000_000);
    let argv = argv(&server.url());
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let sandbox = Sandbox::new(&download_job(preset, &argv));
    let follow = sandbox.follow();
    let mut run = sandbox.run("fetch");
    let moving = follow.until("fetch", "RUNNING with bytes read", |job| {
        job["state"] == "RUNNING" && job["done"].as_u64().is_some_and(|d| d > 100_000)
    });
    assert!(
        moving["rate_per_sec"].as_f64().is_some_and(|r| r > 0.0),
        "the rate the tool prints: {moving:#}"
    );
    // A first look at a meter that moves calls it RUNNING (each look with a state folder of
    // its own, so none remembers another; a loaded machine may hold a frame back once).
    let deadline = Instant::now() + PATIENCE;
    for look in 0.. {
        let first = sandbox.job_in("fetch", &format!("look-while-moving-{look}"));
        if first["state"] == "RUNNING" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never RUNNING at a first look: {first:#}"
        );
    }

    server.signal("-STOP");
    let stalled = follow.until("fetch", "STALLED", |job| job["state"] == "STALLED");
    let words = reasons(&stalled);
    assert!(words.contains("its meter redraws"), "{stalled:#}");
    assert!(words.contains("bytes for"), "{stalled:#}");
    // The meter goes on redrawing: the log is written while the reading stands.
    let log = sandbox.path("fetch.log");
    let written = fs::metadata(&log)
        .and_then(|m| m.modified())
        .expect("mtime");
    thread::sleep(Duration::from_millis(2500));
    let rewritten = fs::metadata(&log)
        .and_then(|m| m.modified())
        .expect("mtime");
    assert!(rewritten > written, "the meter redraws while frozen");

    let first_look = sandbox.job_in("fetch", "first-look");
    assert_ne!(first_look["state"], "RUNNING", "{first_look:#}");
    drop(follow);
    run.stop();
    (first_look, sandbox)
}

/// The last frames of the log at `path`, one a line, for a failure's message.
fn last_frames(path: &Path) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let tail = &bytes[bytes.len().saturating_sub(1500)..];
    String::from_utf8_lossy(tail).replace('\r', "\n")
}

#[test]
fn curls_meter_redrawn_while_its_server_is_frozen_is_stalled_not_fresh() {
    let curl = tool("curl");
    let (first_look, sandbox) = frozen_download("curl", |url| {
        vec![curl.into(), "-o".into(), "/dev/null".into(), url.into()]
    });
    // curl prints the time it has spent in each frame: one look is enough to know.
    assert_eq!(
        first_look["state"],
        "STALLED",
        "{first_look:#}\nthe log's last frames:\n{}",
        last_frames(&sandbox.path("fetch.log"))
    );
    assert!(
        reasons(&first_look).contains("its meter redraws"),
        "{first_look:#}"
    );
    // curl prints 400,000,000 bytes as "381M", in steps of 1024.
    assert_eq!(
        first_look["expected_total"],
        381 * 1_048_576,
        "{first_look:#}"
    );
}

/// The server frozen within curl's first second: the frozen figure was first drawn in a frame
/// whose time spent is `--:--:--` (seen in CI: a first look said it could not tell, where
/// curl's later frames said the figure had stood for 5 s).
#[test]
fn curls_download_frozen_in_its_first_second_is_stalled_at_a_first_look() {
    let curl = tool("curl");
    let server = Server::start(400_000_000);
    let url = server.url();
    let sandbox = Sandbox::new(&download_job("curl", &[curl, "-o", "/dev/null", &url]));
    let mut run = sandbox.run("fetch");
    // The first bytes, well inside curl's first second.
    let log = sandbox.path("fetch.log");
    let deadline = Instant::now() + PATIENCE;
    while fs::read_to_string(&log).map_or(true, |text| !text.contains("381M")) {
        assert!(Instant::now() < deadline, "curl never drew a frame");
        thread::sleep(Duration::from_millis(20));
    }
    server.signal("-STOP");
    // stall_sec is 4: six frames of curl's clock later, one look knows.
    thread::sleep(Duration::from_millis(6500));
    let first_look = sandbox.job_in("fetch", "first-look");
    assert_eq!(
        first_look["state"],
        "STALLED",
        "{first_look:#}\nthe log's last frames:\n{}",
        last_frames(&log)
    );
    run.stop();
}

#[test]
fn wgets_bar_redrawn_while_its_server_is_frozen_is_never_called_fresh() {
    let wget = tool("wget");
    let (first_look, _sandbox) = frozen_download("wget", |url| {
        vec![
            wget.into(),
            "--progress=bar:force".into(),
            "-O".into(),
            "/dev/null".into(),
            url.into(),
        ]
    });
    // wget's bar prints no clock: a first look cannot tell how long its figure has stood,
    // and says so rather than guess.
    assert_eq!(first_look["state"], "UNKNOWN", "{first_look:#}");
    assert!(
        reasons(&first_look).contains("cannot tell a stall from a slow meter"),
        "{first_look:#}"
    );
}

#[test]
fn a_second_one_shot_look_at_a_frozen_wget_knows_it_stalled() {
    let wget = tool("wget");
    let server = Server::start(400_000_000);
    let sandbox = Sandbox::new(&download_job(
        "wget",
        &[
            wget,
            "--progress=bar:force",
            "-O",
            "/dev/null",
            &server.url(),
        ],
    ));
    let mut run = sandbox.run("fetch");
    wait_for(&sandbox, "fetch", "RUNNING with bytes read", |job| {
        job["state"] == "RUNNING" && job["done"].as_u64().is_some_and(|d| d > 100_000)
    });
    server.signal("-STOP");
    // Two one-shot looks stall_sec apart, the second with what the first kept in state_dir;
    // the first once the bar has been drawn again over the same bytes.
    thread::sleep(Duration::from_secs(4));
    let first = sandbox.job_in("fetch", "later");
    assert_ne!(first["state"], "RUNNING", "{first:#}");
    thread::sleep(Duration::from_secs(5));
    let second = sandbox.job_in("fetch", "later");
    assert_eq!(second["state"], "STALLED", "{second:#}");
    assert!(reasons(&second).contains("has read"), "{second:#}");
    run.stop();
}

/// `count` files of `size` random bytes in `folder`.
fn files(folder: &Path, count: usize, size: usize) {
    fs::create_dir_all(folder).expect("mkdir");
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    for n in 0..count {
        let mut bytes = Vec::with_capacity(size);
        while bytes.len() < size {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            bytes.extend_from_slice(&seed.to_le_bytes());
        }
        bytes.truncate(size);
        fs::write(folder.join(format!("f{n:03}.bin")), bytes).expect("write");
    }
}

#[test]
fn rsync_progress2_reads_the_whole_transfer_then_completes() {
    let rsync = tool("rsync");
    let sandbox = Sandbox::new("");
    let (from, to) = (sandbox.path("from"), sandbox.path("to"));
    files(&from, 40, 100_000);
    let sandbox = Sandbox {
        jobs: format!(
            "  - id: copy\n    lock: copy.lock\n    log: copy.log\n    \
             log_progress: {{ preset: rsync }}\n    should_run_when: [not_complete]\n    \
             restart:\n      command: [{rsync}, -a, --info=progress2, --bwlimit=800, '{}/', '{}/']\n",
            from.display(),
            to.display()
        ),
        ..sandbox
    };
    sandbox.write_jobs("jobs.yaml", "state");
    let mut run = sandbox.run("copy");
    let moving = wait_for(&sandbox, "copy", "RUNNING part way", |job| {
        job["state"] == "RUNNING" && job["percent"].as_f64().is_some_and(|p| p > 0.0 && p < 90.0)
    });
    assert!(moving["done"].as_u64().is_some_and(|d| d > 0), "{moving:#}");
    assert!(moving["rate_per_sec"].as_f64().is_some(), "{moving:#}");
    assert!(run.wait(), "rsync copies");
    let done = sandbox.job("copy");
    assert_eq!(done["state"], "COMPLETE", "{done:#}");
    assert_eq!(done["done"], 4_000_000, "{done:#}");
    assert_eq!(done["percent"], 100.0, "{done:#}");
}

#[test]
fn rsync_progress_killed_half_way_is_never_complete_by_its_per_file_100() {
    let rsync = tool("rsync");
    let sandbox = Sandbox::new("");
    let (from, to) = (sandbox.path("from"), sandbox.path("to"));
    files(&from, 60, 100_000);
    let sandbox = Sandbox {
        jobs: format!(
            "  - id: copy\n    lock: copy.lock\n    log: copy.log\n    \
             log_progress: {{ preset: percent }}\n    should_run_when: [not_complete]\n    \
             restart:\n      command: [{rsync}, -a, --progress, --bwlimit=600, '{}/', '{}/']\n\
             \x20 - id: same_log_as_rsync\n    lock: other.lock\n    log: copy.log\n    \
             log_progress: {{ preset: rsync }}\n    should_run_when: [not_complete]\n",
            from.display(),
            to.display()
        ),
        ..sandbox
    };
    sandbox.write_jobs("jobs.yaml", "state");
    let mut run = sandbox.run("copy");
    let deadline = Instant::now() + PATIENCE;
    while fs::read_dir(&to).map_or(0, |d| d.count()) < 21 {
        assert!(Instant::now() < deadline, "rsync never copied 20 files");
        thread::sleep(Duration::from_millis(50));
    }
    run.stop();
    let log = fs::read_to_string(sandbox.path("copy.log")).expect("the log");
    assert!(log.contains("100%"), "the per-file 100 % is printed: {log}");
    for id in ["copy", "same_log_as_rsync"] {
        let job = sandbox.job(id);
        assert_ne!(job["state"], "COMPLETE", "{id}: {job:#}");
        assert_eq!(job["state"], "UNKNOWN", "{id}: {job:#}");
        let words = reasons(&job);
        assert!(words.contains("fell from"), "{id}: {job:#}");
        assert!(words.contains("--info=progress2"), "{id}: {job:#}");
    }
}

#[test]
fn pv_n_prints_bare_percents_read_as_progress_to_complete() {
    let pv = tool("pv");
    let sandbox = Sandbox::new("");
    let input = sandbox.path("input.bin");
    files(&sandbox.path("in"), 1, 1_200_000);
    fs::rename(sandbox.path("in/f000.bin"), &input).expect("move");
    let sandbox = Sandbox {
        jobs: format!(
            "  - id: feed\n    lock: feed.lock\n    log: feed.log\n    \
             log_progress: {{ preset: pv }}\n    should_run_when: [not_complete]\n    \
             restart:\n      command: [sh, -c, '{pv} -n -L 300k \"$0\" > /dev/null', '{}']\n",
            input.display()
        ),
        ..sandbox
    };
    sandbox.write_jobs("jobs.yaml", "state");
    let mut run = sandbox.run("feed");
    let moving = wait_for(&sandbox, "feed", "RUNNING part way", |job| {
        job["state"] == "RUNNING"
            && job["percent"]
                .as_f64()
                .is_some_and(|p| p > 0.0 && p < 100.0)
    });
    assert_eq!(
        moving["done"],
        Value::Null,
        "a percent counts nothing: {moving:#}"
    );
    assert!(run.wait(), "pv ends");
    let log = fs::read_to_string(sandbox.path("feed.log")).expect("the log");
    assert!(
        log.lines().all(|l| l.trim().parse::<u32>().is_ok()),
        "{log}"
    );
    let done = sandbox.job("feed");
    assert_eq!(done["state"], "COMPLETE", "{done:#}");
    assert_eq!(done["percent"], 100.0, "{done:#}");
}

#[test]
fn dd_status_progress_reads_bytes_and_rate_to_its_expected_total() {
    let (pv, dd) = (tool("pv"), tool("dd"));
    let sandbox = Sandbox::new(&format!(
        "  - id: image\n    lock: image.lock\n    log: image.log\n    \
         log_progress: {{ preset: dd }}\n    expected_total: 3000000\n    \
         should_run_when: [not_complete]\n    \
         restart:\n      command: [sh, -c, 'head -c 3000000 /dev/zero | {pv} -q -L 700k | \
         {dd} of=/dev/null bs=64k iflag=fullblock status=progress']\n"
    ));
    let mut run = sandbox.run("image");
    let moving = wait_for(&sandbox, "image", "RUNNING with bytes copied", |job| {
        job["state"] == "RUNNING" && job["done"].as_u64().is_some_and(|d| d > 0 && d < 3_000_000)
    });
    assert!(
        moving["rate_per_sec"].as_f64().is_some_and(|r| r > 0.0),
        "dd's rate: {moving:#}"
    );
    assert!(moving["eta_sec"].as_f64().is_some(), "{moving:#}");
    assert!(run.wait(), "dd ends");
    let done = sandbox.job("image");
    assert_eq!(done["state"], "COMPLETE", "{done:#}");
    assert_eq!(done["done"], 3_000_000, "{done:#}");
}

#[test]
fn gzip_and_zstd_compression_ratios_are_not_read_as_progress() {
    let (gzip, zstd) = (tool("gzip"), tool("zstd"));
    let sandbox = Sandbox::new(
        "  - id: pack\n    lock: pack.lock\n    log: pack.log\n    \
         log_progress: { preset: percent }\n    should_run_when: [not_complete]\n\
         \x20 - id: squeeze\n    lock: squeeze.lock\n    log: squeeze.log\n    \
         log_progress: { preset: percent }\n    should_run_when: [not_complete]\n",
    );
    for folder in ["a", "b"] {
        let dir = sandbox.path(folder);
        fs::create_dir(&dir).expect("mkdir");
        for n in 0..3 {
            let text: String = (0..20_000 * (n + 1)).map(|i| format!("{i}\n")).collect();
            fs::write(dir.join(format!("part{n}.csv")), text).expect("write");
        }
    }
    let run = |argv: Vec<String>, log: &str| {
        let stderr = fs::File::create(sandbox.path(log)).expect("the log");
        let ran = Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(sandbox.dir.path())
            .stderr(stderr)
            .status()
            .expect("it runs");
        assert!(ran.success(), "{argv:?}");
    };
    let parts = |folder: &'static str| (0..3).map(move |n| format!("{folder}/part{n}.csv"));
    run(
        std::iter::once(gzip.to_string())
            .chain(["-v".into()])
            .chain(parts("a"))
            .collect(),
        "pack.log",
    );
    run(
        std::iter::once(zstd.to_string())
            .chain(["-v".into(), "--rm".into()])
            .chain(parts("b"))
            .collect(),
        "squeeze.log",
    );
    let pack = fs::read_to_string(sandbox.path("pack.log")).expect("log");
    assert!(pack.contains("% -- replaced with"), "{pack}");
    for id in ["pack", "squeeze"] {
        let job = sandbox.job(id);
        assert_eq!(
            job["percent"],
            Value::Null,
            "{id}: a ratio is no percent done: {job:#}"
        );
        assert!(
            !reasons(&job).contains("done, as its log prints"),
            "{id}: {job:#}"
        );
    }
}

/// Reads a capture of a real tool with `preset`, as a look at a log written just now.
fn fixture(name: &str, preset: LogProgress) -> (LogProgressReading, chrono::DateTime<chrono::Utc>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join(name);
    fs::copy(Path::new(FIXTURES).join(name), &log).expect("copy the capture");
    let written: chrono::DateTime<chrono::Utc> = fs::metadata(&log)
        .and_then(|m| m.modified())
        .expect("mtime")
        .into();
    match LogProgressReader::default().read(&log, &preset) {
        Reading::Found(found) => (found, written),
        other => panic!("{name} read with {}: {other:?}", preset.as_str()),
    }
}

fn seconds_before(
    later: chrono::DateTime<chrono::Utc>,
    then: chrono::DateTime<chrono::Utc>,
) -> f64 {
    (later - then).num_milliseconds() as f64 / 1000.0
}

#[test]
fn captured_curl_meters_read_bytes_total_rate_time_left_and_how_long_they_stood() {
    let (stalled, written) = fixture("curl-meter-stalled.log", LogProgress::Curl);
    assert_eq!(stalled.figure, Figure::Bytes);
    assert_eq!(stalled.done, Some(1542 * 1024));
    assert_eq!(stalled.total, Some(4882 * 1024));
    assert_eq!(stalled.rate_per_sec, Some(0.0), "its current speed");
    assert_eq!(stalled.remaining_sec, Some(31.0));
    // 1542k from "Time Spent" 0:00:04 to 0:00:13; 1386k at 0:00:03.
    let moved = stalled.moved.expect("when it moved");
    assert_eq!(seconds_before(written, moved.latest), 9.0);
    assert_eq!(
        moved.earliest.map(|e| seconds_before(written, e)),
        Some(10.0)
    );
    assert_eq!(moved.redrawn_at, Some(written));

    let (complete, _) = fixture("curl-meter-complete.log", LogProgress::Curl);
    assert_eq!(complete.done, complete.total);
    assert_eq!(complete.percent, Some(100.0));
    let (unknown, _) = fixture("curl-meter-nolength.log", LogProgress::Curl);
    assert_eq!((unknown.done, unknown.total), (Some(2929 * 1024), None));
    // An upload (curl -T) receives nothing: its figure is what it sent.
    let (upload, _) = fixture("curl-meter-upload.log", LogProgress::Curl);
    assert_eq!(
        (upload.done, upload.total),
        (Some(2929 * 1024), Some(2929 * 1024))
    );
    let (bar, _) = fixture("curl-bar-complete.log", LogProgress::Curl);
    assert_eq!((bar.percent, bar.figure), (Some(100.0), Figure::Percent));
    let (bar, _) = fixture("curl-bar-stalled.log", LogProgress::Curl);
    assert_eq!(bar.percent, Some(23.6));
}

#[test]
fn captured_wget_bars_and_dots_read_bytes_percent_rate_and_eta() {
    let (stalled, written) = fixture("wget-bar-stalled.log", LogProgress::Wget);
    assert_eq!(stalled.percent, Some(31.0));
    assert_eq!(stalled.done, Some((1.51f64 * 1_048_576.0).round() as u64));
    assert_eq!(stalled.rate_per_sec, None, "'--.-KB/s': nothing of late");
    assert_eq!(stalled.remaining_sec, Some(27.0));
    let moved = stalled.moved.expect("when it moved");
    // Redrawn with no clock: when it moved is not known from the frames alone.
    assert_eq!((moved.latest, moved.earliest), (written, None));

    let (complete, _) = fixture("wget-bar-complete.log", LogProgress::Wget);
    assert_eq!(
        (complete.percent, complete.remaining_sec),
        (Some(100.0), Some(0.0))
    );
    let (unknown, _) = fixture("wget-bar-nolength.log", LogProgress::Wget);
    assert_eq!(unknown.percent, None);
    assert_eq!(unknown.done, Some((2.86f64 * 1_048_576.0).round() as u64));
    let (dots, _) = fixture("wget-dot-complete.log", LogProgress::Wget);
    assert_eq!(dots.percent, Some(100.0));
    assert_eq!(dots.done, Some((4850 + 32) * 1024));
    assert_eq!(dots.rate_per_sec, Some(653.0 * 1024.0));
    let (mega, _) = fixture("wget-dot-mega.log", LogProgress::Wget);
    assert_eq!(mega.done, Some((3072 + 28 * 64) * 1024));
}

#[test]
fn captured_rsync_pv_and_dd_meters_are_read_in_their_own_units() {
    let (whole, _) = fixture("rsync-progress2-complete.log", LogProgress::Rsync);
    assert_eq!((whole.done, whole.percent), (Some(12_000_000), Some(100.0)));
    assert_eq!(whole.rate_per_sec, Some(3.97 * 1_048_576.0));
    assert_eq!(whole.fell, None);
    let (killed, _) = fixture("rsync-progress2-killed.log", LogProgress::Rsync);
    assert_eq!((killed.done, killed.percent), (Some(4_200_000), Some(35.0)));

    let (per_file, _) = fixture("rsync-progress-killed.log", LogProgress::Rsync);
    let fell = per_file.fell.expect("the bytes fall with each file");
    assert_eq!((fell.from, fell.to), (200_000.0, 32_768.0));
    let (per_file, _) = fixture("rsync-progress-killed.log", LogProgress::Percent);
    assert_eq!(per_file.percent, Some(100.0));
    let fell = per_file.fell.expect("the percent falls with each file");
    assert_eq!((fell.from, fell.to), (100.0, 16.0));

    let (percent, _) = fixture("pv-n-complete.log", LogProgress::Pv);
    assert_eq!(
        (percent.percent, percent.figure),
        (Some(100.0), Figure::Percent)
    );
    let (bytes, _) = fixture("pv-n-bytes.log", LogProgress::Pv);
    assert_eq!((bytes.done, bytes.figure), (Some(3_000_000), Figure::Bytes));
    let (timed, _) = fixture("pv-n-timer.log", LogProgress::Pv);
    assert_eq!(timed.percent, Some(100.0));
    let (meter, _) = fixture("pv-f-stalled.log", LogProgress::Pv);
    assert_eq!(meter.percent, Some(66.0));
    assert_eq!(meter.rate_per_sec, Some(487.0 * 1024.0));

    let (dd, _) = fixture("dd-progress.log", LogProgress::Dd);
    assert_eq!(dd.done, Some(6_000_000));
    assert!(
        dd.rate_per_sec.is_some_and(|r| (r - 1.7e6).abs() < 1.0),
        "{dd:?}"
    );
    assert_eq!(dd.total, None);
}

#[test]
fn captured_compression_ratios_hold_no_frame_of_progress() {
    for name in ["gzip-v.log", "zstd-v.log", "zstd-progress.log"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join(name);
        fs::copy(Path::new(FIXTURES).join(name), &log).expect("copy");
        let read = LogProgressReader::default().read(&log, &LogProgress::Percent);
        assert_eq!(read, Reading::Empty, "{name}");
    }
}

#[test]
fn a_redrawn_figure_is_known_stood_since_the_look_that_first_saw_it() {
    // A long-running reader: the frames carry no clock, but the first look is remembered.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("pv.log");
    let mut file = fs::File::create(&log).expect("create");
    writeln!(file, "10\n20\n33").expect("write");
    let mut reader = LogProgressReader::default();
    let first = match reader.read(&log, &LogProgress::Pv) {
        Reading::Found(found) => found.moved.expect("moved"),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        first.earliest,
        Some(first.latest),
        "the newest line moved it"
    );
    thread::sleep(Duration::from_millis(50));
    writeln!(file, "33\n33").expect("write");
    let later = match reader.read(&log, &LogProgress::Pv) {
        Reading::Found(found) => found.moved.expect("moved"),
        other => panic!("{other:?}"),
    };
    assert_eq!(later.latest, first.latest, "{later:?}");
    assert!(
        later.redrawn_at.is_some_and(|at| at > later.latest),
        "{later:?}"
    );
}
