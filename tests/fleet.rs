//! `mihari fleet check` over a real `sshd` on 127.0.0.1 (Debian's `openssh-server`, which
//! `.ci/run` installs), with host and user keys made by the test: hosts merged in the fixed
//! order with a host on every job, a host whose port refuses, one that never answers, one
//! with no mihari, and a jobs-file path that needs quoting for the remote shell; and the fleet
//! screen (`mihari fleet`) in a real tmux over the same sshd: two hosts merged with a host
//! column, a remote death shown, a stream that dies or goes silent shown RED and back, an
//! unreachable host RED from the start, a remote restart confirmed in the dialog recorded in
//! that host's own log with the operator and this machine, and a remote log tail kept inert.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

mod common;
use common::tmux::Tmux;

/// A real sshd on 127.0.0.1, killed when dropped.
struct Sshd {
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn keygen(path: &Path) {
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()
        .expect("ssh-keygen runs (apt-get install -y openssh-client)");
    assert!(made.success());
}

impl Sshd {
    fn start() -> Sshd {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        keygen(&root.join("host_key"));
        keygen(&root.join("user_key"));
        fs::copy(root.join("user_key.pub"), root.join("authorized_keys")).expect("keys");
        // sshd's privilege separation folder, which a machine without a running sshd lacks.
        let _ = fs::create_dir_all("/run/sshd");
        let port = free_port();
        // LogLevel INFO: every login is an "Accepted publickey" line in sshd.log, which is how
        // the tests count ssh handshakes.
        fs::write(
            root.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {r}/host_key\n\
                 AuthorizedKeysFile {r}/authorized_keys\nPidFile {r}/sshd.pid\n\
                 StrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
                 AcceptEnv MIHARI_FOLLOW_HEARTBEAT_MS\nMaxStartups 100\nMaxSessions 100\n\
                 LogLevel INFO\n",
                r = root.display()
            ),
        )
        .expect("sshd_config");
        let child = spawn_sshd(root);
        let sshd = Sshd { dir, port, child };
        sshd.wait_answering();
        sshd
    }

    fn wait_answering(&self) {
        let start = Instant::now();
        loop {
            let argv = self.ssh();
            let probe = Command::new(&argv[0])
                .args(&argv[1..])
                .arg("true")
                .stdin(Stdio::null())
                .output()
                .expect("ssh");
            if probe.status.success() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "sshd on 127.0.0.1:{} never answered: {}",
                self.port,
                String::from_utf8_lossy(&probe.stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// How many logins (ssh handshakes) this sshd has accepted so far.
    fn logins(&self) -> usize {
        fs::read_to_string(self.dir.path().join("sshd.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("Accepted publickey"))
            .count()
    }

    /// Kills this sshd and every connection it serves (each a process of its own under it),
    /// as a crash or a reboot of the host would: every ssh connection to it breaks.
    fn kill_with_connections(&mut self) {
        let listener = self.child.id() as i32;
        let mut all = vec![listener];
        let mut at = 0;
        while at < all.len() {
            all.extend(children_of(all[at]));
            at += 1;
        }
        for pid in all {
            signal(pid, nix::sys::signal::Signal::SIGKILL);
        }
        let _ = self.child.wait();
    }

    /// Starts this sshd again on its port, with its keys, after [`Sshd::kill_with_connections`].
    fn restart(&mut self) {
        self.child = spawn_sshd(self.dir.path());
        self.wait_answering();
    }

    /// The ssh argv that reaches this sshd, as a fleet file writes it.
    fn ssh(&self) -> Vec<String> {
        ssh_to(self.port, &self.dir.path().join("user_key"))
    }
}

fn ssh_to(port: u16, key: &Path) -> Vec<String> {
    let user = std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::geteuid())
                .ok()
                .flatten()
                .map_or_else(|| "root".to_string(), |u| u.name)
        });
    [
        "ssh",
        "-F",
        "/dev/null",
        "-i",
        &key.display().to_string(),
        "-p",
        &port.to_string(),
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        &format!("{user}@127.0.0.1"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn spawn_sshd(root: &Path) -> Child {
    Command::new("/usr/sbin/sshd")
        .args(["-D", "-E"])
        .arg(root.join("sshd.log"))
        .arg("-f")
        .arg(root.join("sshd_config"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sshd runs (apt-get install -y openssh-server)")
}

/// Killing the sshd with its connections also ends the ssh connection masters the tests'
/// fleets made to it (they see their connection close), so no test leaves one running.
impl Drop for Sshd {
    fn drop(&mut self) {
        self.kill_with_connections();
    }
}

fn mihari_binary() -> PathBuf {
    Command::cargo_bin("mihari")
        .expect("binary")
        .get_program()
        .into()
}

/// A host's folder: a jobs file (at a path with a space and a `$`, which only quoting for
/// the remote shell gets there intact) and its jobs.
fn host_dir(root: &Path, name: &str, dead: bool) -> PathBuf {
    let dir = root.join(format!("{name} $HOME"));
    fs::create_dir_all(&dir).expect("host dir");
    fs::write(dir.join("work.log"), "step 1\n").expect("log");
    let lock = if dead {
        fs::write(
            dir.join("work.lock"),
            "{\"pid\": 999999, \"start_time\": 1}",
        )
        .expect("lock");
        format!("    lock: {}/work.lock\n", dir.display())
    } else {
        String::new()
    };
    fs::write(
        dir.join("jobs.yaml"),
        format!(
            "settings:\n  state_dir: {d}/state\njobs:\n  - id: work\n{lock}\
             \x20   log: {d}/work.log\n    should_run_when: [not_succeeded]\n",
            d = dir.display()
        ),
    )
    .expect("jobs");
    dir.join("jobs.yaml")
}

fn yaml_list(words: &[String]) -> String {
    let quoted: Vec<String> = words
        .iter()
        .map(|w| serde_json::to_string(w).expect("json string"))
        .collect();
    format!("[{}]", quoted.join(", "))
}

fn fleet(root: &Path, hosts: &[String]) -> PathBuf {
    let path = root.join("fleet.yaml");
    fs::write(&path, format!("hosts:\n{}", hosts.concat())).expect("fleet file");
    path
}

/// A host stanza; no `ssh` line for this machine (an empty `ssh` is refused).
fn host(name: &str, ssh: &[String], config: &Path, mihari: &str, timeout: u64) -> String {
    let ssh = if ssh.is_empty() {
        String::new()
    } else {
        format!("    ssh: {}\n", yaml_list(ssh))
    };
    format!(
        "  - name: {name}\n{}    config: {}\n    mihari: {}\n    timeout_sec: {timeout}\n",
        ssh,
        serde_json::to_string(&config.display().to_string()).expect("json"),
        serde_json::to_string(mihari).expect("json")
    )
}

/// The `XDG_RUNTIME_DIR` the test's mihari runs with, beside its fleet file (0700, as
/// systemd makes it): its ssh connection sockets are the test's own.
fn runtime_dir(fleet: &Path) -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let dir = fleet.with_file_name("run");
    let _ = fs::DirBuilder::new().mode(0o700).create(&dir);
    dir
}

fn fleet_check(fleet: &Path, json: bool) -> Output {
    let mut command = Command::cargo_bin("mihari").expect("binary");
    command
        .arg("fleet")
        .arg("--fleet")
        .arg(fleet)
        .arg("check")
        .env("XDG_RUNTIME_DIR", runtime_dir(fleet))
        .env_remove("MIHARI_FLEET");
    if json {
        command.arg("--json");
    }
    command.output().expect("fleet check")
}

#[test]
fn fleet_check_merges_hosts_over_sshd_and_an_unreachable_host_is_red() {
    let sshd = Sshd::start();
    let root = tempfile::tempdir().expect("tempdir");
    let mihari = mihari_binary().display().to_string();
    let quiet = host_dir(root.path(), "gpu1", false);
    let dead = host_dir(root.path(), "gpu2", true);
    // A port nothing listens on: ssh is refused at once.
    let closed = free_port();
    let fleet = fleet(
        root.path(),
        &[
            host("gpu1", &sshd.ssh(), &quiet, &mihari, 20),
            host("gpu2", &sshd.ssh(), &dead, &mihari, 20),
            host(
                "gpu3",
                &ssh_to(closed, &sshd.dir.path().join("user_key")),
                &quiet,
                &mihari,
                20,
            ),
        ],
    );
    let output = fleet_check(&fleet, true);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let merged: Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    let jobs: Vec<(String, String, String)> = merged["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|job| {
            (
                job["host"].as_str().expect("host").to_string(),
                job["id"].as_str().expect("id").to_string(),
                job["state"].as_str().expect("state").to_string(),
            )
        })
        .collect();
    assert_eq!(
        jobs,
        [
            ("gpu2".into(), "work".into(), "DEAD_LOCK_STALE".into()),
            ("gpu1".into(), "work".into(), "RUNNING".into()),
        ],
        "the dead job first (RESTART), each with its host"
    );
    let hosts = merged["hosts"].as_array().expect("hosts");
    assert_eq!(
        hosts.len(),
        3,
        "an unreachable host is listed, never dropped"
    );
    assert_eq!(hosts[0]["reachable"], Value::Bool(true));
    assert_eq!(hosts[1]["exit"], Value::from(2));
    assert_eq!(hosts[2]["reachable"], Value::Bool(false));
    let rules = merged["rules"].as_array().expect("rules");
    assert!(
        rules.iter().any(|rule| {
            let rule = rule.as_str().unwrap_or("");
            rule.starts_with("gpu3 unreachable: ssh said: ") && rule.contains("refused")
        }),
        "{rules:?}"
    );
    assert_eq!(merged["dispatch_held"], Value::Bool(true));

    let table = fleet_check(&fleet, false);
    assert_eq!(table.status.code(), Some(2));
    let table = String::from_utf8(table.stdout).expect("utf-8");
    assert!(table.contains("3 hosts (2 reachable)"), "{table}");
    assert!(table.contains("RESTART (1)\n  gpu2  work"), "{table}");
    assert!(table.contains("  ✖ gpu3 unreachable: ssh said:"), "{table}");
}

#[test]
fn a_host_that_never_answers_is_red_after_its_timeout_and_one_without_mihari_is_named() {
    let sshd = Sshd::start();
    let root = tempfile::tempdir().expect("tempdir");
    let quiet = host_dir(root.path(), "gpu1", false);
    // A port that accepts and never says a word: ssh waits for a banner that never comes.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_port = silent.local_addr().expect("addr").port();
    let fleet = fleet(
        root.path(),
        &[
            host(
                "mute",
                &ssh_to(silent_port, &sshd.dir.path().join("user_key")),
                &quiet,
                "mihari",
                2,
            ),
            host("bare", &sshd.ssh(), &quiet, "/nonexistent/bin/mihari", 20),
        ],
    );
    let started = Instant::now();
    let output = fleet_check(&fleet, true);
    let took = started.elapsed();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        took < Duration::from_secs(15),
        "bounded by the timeout: {took:?}"
    );
    let merged: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let rules: Vec<&str> = merged["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        rules.contains(&"mute unreachable: no answer within 2 s"),
        "{rules:?}"
    );
    assert!(
        rules
            .iter()
            .any(|rule| rule
                .starts_with("bare: mihari not found there as '/nonexistent/bin/mihari'")),
        "{rules:?}"
    );
    drop(silent);
}

#[test]
fn a_bad_fleet_file_is_refused_with_its_place() {
    let root = tempfile::tempdir().expect("tempdir");
    let path = root.path().join("fleet.yaml");
    fs::write(&path, "hosts:\n  - name: a\n    ssh: []\n").expect("write");
    let output = fleet_check(&path, true);
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("fleet.yaml:3:10: ssh of host 'a' is empty"),
        "{stderr}"
    );
}

/// A host that answers but cannot assess (its jobs file refused, its store unusable) is
/// reachable, named with why — the refusal's own first line — and UNKNOWN.
#[test]
fn a_host_whose_jobs_file_or_store_is_refused_says_why_and_is_unknown() {
    let root = tempfile::tempdir().expect("tempdir");
    let mihari = mihari_binary().display().to_string();
    let bad = host_dir(root.path(), "badcfg", false);
    let text = fs::read_to_string(&bad)
        .expect("read")
        .replace("not_succeeded", "bogus");
    fs::write(&bad, text).expect("write");
    let damaged = host_dir(root.path(), "sf", false);
    let made = Command::new(mihari_binary())
        .arg("--config")
        .arg(&damaged)
        .arg("check")
        .output()
        .expect("a first check makes the store");
    assert!(made.status.code().is_some());
    let state = damaged.parent().expect("dir").join("state");
    let store = fs::read_dir(&state)
        .expect("state")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sqlite"))
        .expect("the store file");
    fs::set_permissions(&store, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let fleet = fleet(
        root.path(),
        &[
            host("badcfg", &[], &bad, &mihari, 20),
            host("sf", &[], &damaged, &mihari, 20),
        ],
    );
    let output = fleet_check(&fleet, true);
    assert_eq!(output.status.code(), Some(3));
    let merged: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let rules: Vec<&str> = merged["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        rules.iter().any(
            |rule| rule.starts_with("badcfg: mihari there cannot assess its jobs: ")
                && rule.contains("jobs.yaml:")
                && rule.contains("bogus")
        ),
        "the refusal's first line, file:line:col and all: {rules:?}"
    );
    assert!(
        rules
            .iter()
            .any(|rule| rule.starts_with("sf: UNKNOWN: its state store cannot be used: ")),
        "{rules:?}"
    );
    let hosts = merged["hosts"].as_array().expect("hosts");
    assert_eq!(hosts[0]["reachable"], Value::Bool(true), "it answered");
    assert_eq!(hosts[0]["exit"], Value::from(3));
    assert_eq!(hosts[1]["store"]["state"], "fault", "{}", hosts[1]);
}

/// The pids of the processes whose command line holds `needle` (the test's own temp paths,
/// which no other process names), for killing exactly the test's own.
fn pids_mentioning(needle: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == std::process::id() as i32 {
            continue;
        }
        if let Ok(cmdline) = fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// The remote side of a host's stream: the `mihari --config=C check --json --follow` that
/// sshd started (its command line holds the config path, not the ssh's quoting of it).
fn remote_followers(config: &Path) -> Vec<i32> {
    let config = format!("--config={}", config.display());
    pids_mentioning(&config)
        .into_iter()
        .filter(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let words: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect();
            words.first().is_some_and(|w| w.ends_with("mihari"))
                && words.iter().any(|w| w == "--follow")
                && words.contains(&config)
        })
        .collect()
}

fn signal(pid: i32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
}

/// A job that really runs on a host: `mihari run` under its lock, in a process group of its
/// own so the test kills it whole.
fn start_running_job(config: &Path) -> Child {
    use std::os::unix::process::CommandExt;
    Command::new(mihari_binary())
        .arg("--config")
        .arg(config)
        .args(["run", "work"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("mihari run")
}

/// A host whose job runs `sleep` under a lock, logging a line with escape sequences that
/// would retitle and clear a terminal.
fn running_host_dir(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(format!("{name} $HOME"));
    fs::create_dir_all(&dir).expect("host dir");
    fs::write(
        dir.join("work.log"),
        "epoch 1\n\x1b]0;pwned-by-log\x07\x1b[2Jafter-the-escapes\n",
    )
    .expect("log");
    fs::write(
        dir.join("jobs.yaml"),
        format!(
            "settings:\n  state_dir: {d}/state\njobs:\n  - id: work\n    lock: {d}/work.lock\n\
             \x20   log: {d}/work.log\n    should_run_when: [not_succeeded]\n\
             \x20   restart:\n      command: [sleep, \"600\"]\n",
            d = dir.display()
        ),
    )
    .expect("jobs");
    dir.join("jobs.yaml")
}

/// Whether `line` is the list row of `host`'s job `id`: symbol, host, id, state...
fn is_row(line: &str, host: &str, id: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    words.len() > 3 && words[1] == host && words[2] == id
}

fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn fleet_screen(name: &str, fleet: &Path) -> Tmux {
    Tmux::start(
        name,
        160,
        40,
        &format!(
            "TZ=UTC XDG_RUNTIME_DIR='{}' {} fleet --fleet '{}'; sleep 60",
            runtime_dir(fleet).display(),
            mihari_binary().display(),
            fleet.display()
        ),
    )
}

#[test]
fn the_fleet_screen_merges_hosts_shows_a_remote_death_keeps_the_log_inert_and_restarts_there() {
    let sshd = Sshd::start();
    let root = tempfile::tempdir().expect("tempdir");
    let one = running_host_dir(root.path(), "one");
    fs::write(
        one.with_file_name("work.lock"),
        "{\"pid\": 999999, \"start_time\": 1}",
    )
    .expect("a dead holder's lock");
    let two = running_host_dir(root.path(), "two");
    let mut job = start_running_job(&two);
    let binary = mihari_binary().display().to_string();
    let refused = ssh_to(free_port(), &sshd.dir.path().join("user_key"));
    let fleet = fleet(
        root.path(),
        &[
            host("one", &sshd.ssh(), &one, &binary, 20),
            host("two", &sshd.ssh(), &two, &binary, 20),
            host("down", &refused, &one, &binary, 20),
        ],
    );
    let tmux = fleet_screen("fleet-screen", &fleet);
    // Both hosts' jobs, each with its host, in the fixed order; the unreachable host RED.
    let screen = tmux.wait_for(
        &[
            "one",
            "DEAD_LOCK_STALE",
            "RUNNING",
            "down: stream ended: ssh said:",
            "RESTART 1",
        ],
        Duration::from_secs(30),
    );
    let row_of = |screen: &str, find: &dyn Fn(&str) -> bool| -> usize {
        screen
            .lines()
            .position(find)
            .unwrap_or_else(|| panic!("no such row:\n{screen}"))
    };
    let down = |l: &str| l.contains("down: stream ended");
    assert!(
        row_of(&screen, &|l| is_row(l, "one", "work")) < row_of(&screen, &down)
            && row_of(&screen, &down) < row_of(&screen, &|l| is_row(l, "two", "work")),
        "RESTART, then RED, then the rest:\n{screen}"
    );

    // The job on host two dies (its process, under `mihari run`): the fleet screen shows
    // it, from the host's own stream.
    let children = children_of(job.id() as i32);
    assert!(!children.is_empty(), "the job's process under mihari run");
    for pid in children {
        signal(pid, nix::sys::signal::Signal::SIGKILL);
    }
    let _ = job.wait();
    let mut screen = String::new();
    wait_until(
        "the death on host two shows",
        Duration::from_secs(30),
        || {
            screen = tmux.capture();
            screen
                .lines()
                .any(|l| is_row(l, "two", "work") && l.split_whitespace().nth(3) != Some("RUNNING"))
        },
    );
    assert!(
        screen.lines().any(|l| is_row(l, "two", "work")
            && l.contains("SHOULD_BE_RUNNING")
            && l.contains("killed by SIGKILL")),
        "{screen}"
    );

    // The log tail of a job on host two, asked of that host: its escapes arrive inert.
    tmux.keys(&["j", "Enter"]);
    let screen = tmux.wait_for(
        &["work on two", "after-the-escapes"],
        Duration::from_secs(20),
    );
    assert!(!screen.contains('\u{1b}'), "{screen}");
    assert_ne!(tmux.title(), "pwned-by-log");

    // A restart of host one's job, confirmed in the dialog, carried out by host one's mihari.
    tmux.keys(&["Escape", "g", "r"]);
    tmux.wait_for(
        &["restart 'work'?", "host      one", "[ Restart ]"],
        Duration::from_secs(10),
    );
    tmux.keys(&["Tab", "Enter"]);
    let screen = tmux.wait_for(&["one: restart 'work'"], Duration::from_secs(60));
    assert!(screen.contains("one: restart 'work': done"), "{screen}");
    let events = Command::new(mihari_binary())
        .arg("--config")
        .arg(&one)
        .args(["events", "--json", "--kind", "confirmed"])
        .output()
        .expect("events");
    let events = String::from_utf8_lossy(&events.stdout);
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    let here = fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let confirmed: Vec<Value> = events
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        confirmed.iter().any(|e| e["actor"] == "operator"
            && e["reason"].as_str().is_some_and(|r| r.contains(&format!(
                "from the fleet: operator '{user}' on '{}'",
                here.trim()
            )))),
        "host one's log names the operator and this machine: {events}"
    );
    // Host two's log holds no such decision: it went to host one only.
    let two_events = Command::new(mihari_binary())
        .arg("--config")
        .arg(&two)
        .args(["events", "--json", "--kind", "confirmed"])
        .output()
        .expect("events");
    assert!(
        String::from_utf8_lossy(&two_events.stdout)
            .trim()
            .is_empty()
    );
    tmux.keys(&["q"]);
    kill_runs_under(root.path());
}

/// Ends the `mihari run` wrappers the test's restarts started (their command lines name the
/// test's folder) and the jobs under them.
fn kill_runs_under(root: &Path) {
    for pid in pids_mentioning(&root.display().to_string()) {
        for child in children_of(pid) {
            signal(child, nix::sys::signal::Signal::SIGKILL);
        }
        signal(pid, nix::sys::signal::Signal::SIGKILL);
    }
}

/// The pids whose parent is `parent` (a job runs in a session of its own under `mihari run`).
fn children_of(parent: i32) -> Vec<i32> {
    pids_mentioning("")
        .into_iter()
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = stat.rsplit_once(')')?.1.to_string();
                    after.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

#[test]
fn a_host_whose_stream_dies_or_goes_silent_is_red_and_comes_back() {
    let sshd = Sshd::start();
    let root = tempfile::tempdir().expect("tempdir");
    let one = host_dir(root.path(), "one", false);
    let two = host_dir(root.path(), "two", true);
    let binary = mihari_binary().display().to_string();
    // Host two's mihari keeps a 400 ms heartbeat (sent through ssh's SetEnv, which the test's
    // sshd accepts): its lines say so, and the screen learns it from them.
    let mut quick = sshd.ssh();
    let at = quick.len() - 1;
    quick.insert(at, "-o".into());
    quick.insert(at + 1, "SetEnv=MIHARI_FOLLOW_HEARTBEAT_MS=400".into());
    let fleet = fleet(
        root.path(),
        &[
            host("one", &sshd.ssh(), &one, &binary, 20),
            host("two", &quick, &two, &binary, 20),
        ],
    );
    let tmux = fleet_screen("fleet-streams", &fleet);
    tmux.wait_for(
        &["one", "two", "DEAD_LOCK_STALE", "RED 0"],
        Duration::from_secs(30),
    );

    // Its remote mihari killed: host one is RED, "stream ended", then back with its jobs.
    let mut followers = Vec::new();
    wait_until(
        "host one's remote follower starts",
        Duration::from_secs(10),
        || {
            followers = remote_followers(&one);
            !followers.is_empty()
        },
    );
    for pid in &followers {
        signal(*pid, nix::sys::signal::Signal::SIGKILL);
    }
    tmux.wait_for(&["one: stream ended"], Duration::from_secs(20));
    tmux.wait_for(&["RED 0"], Duration::from_secs(30));
    let screen = tmux.capture();
    assert!(screen.lines().any(|l| is_row(l, "one", "work")), "{screen}");

    // Its remote mihari stopped (alive, silent): host two is RED "silent for", then back.
    let mut followers = Vec::new();
    wait_until(
        "host two's remote follower starts",
        Duration::from_secs(10),
        || {
            followers = remote_followers(&two);
            !followers.is_empty()
        },
    );
    for pid in &followers {
        signal(*pid, nix::sys::signal::Signal::SIGSTOP);
    }
    let screen = tmux.wait_for(&["two: silent for"], Duration::from_secs(20));
    assert!(
        !screen.lines().any(|l| is_row(l, "two", "work")),
        "{screen}"
    );
    for pid in &followers {
        signal(*pid, nix::sys::signal::Signal::SIGCONT);
        signal(*pid, nix::sys::signal::Signal::SIGKILL);
    }
    tmux.wait_for(&["RED 0"], Duration::from_secs(30));
    let screen = tmux.capture();
    assert!(screen.lines().any(|l| is_row(l, "two", "work")), "{screen}");
    tmux.keys(&["q"]);
}

/// The ssh processes of the test's fleet: the connection masters (`ssh: SOCKET [mux]`, as a
/// master names itself) and any ssh still running through a socket under `runtime`.
fn ssh_under(runtime: &Path) -> Vec<i32> {
    pids_mentioning(&runtime.display().to_string())
        .into_iter()
        .filter(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let first = cmdline.split(|b| *b == 0).next().unwrap_or_default();
            let first = String::from_utf8_lossy(first);
            first == "ssh" || first.ends_with("/ssh") || first.starts_with("ssh: ")
        })
        .collect()
}

/// Quits the fleet screen in `tmux` and waits until no ssh of it is left under `runtime`.
fn quit_and_see_its_connections_closed(tmux: &Tmux, runtime: &Path) {
    tmux.keys(&["q"]);
    wait_until(
        "the screen's ssh connection is closed once it quits",
        Duration::from_secs(15),
        || ssh_under(runtime).is_empty(),
    );
}

/// The masters alone: what is left of a connection once no ask runs through it.
fn masters_under(runtime: &Path) -> Vec<i32> {
    ssh_under(runtime)
        .into_iter()
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.contains("[mux]"))
        })
        .collect()
}

/// Ansible's way: twenty hosts behind one sshd (one destination, one argv) make one ssh
/// handshake between them, not twenty at once, and the screen closes that connection when
/// it quits.
#[test]
fn twenty_hosts_over_one_sshd_share_one_ssh_connection_closed_when_the_screen_quits() {
    let sshd = Sshd::start();
    let root = tempfile::tempdir().expect("tempdir");
    let binary = mihari_binary().display().to_string();
    let stanzas: Vec<String> = (0..20)
        .map(|i| {
            let name = format!("h{i:02}");
            let config = host_dir(root.path(), &name, true);
            host(&name, &sshd.ssh(), &config, &binary, 20)
        })
        .collect();
    let fleet = fleet(root.path(), &stanzas);
    let runtime = runtime_dir(&fleet);
    let before = sshd.logins();
    let tmux = fleet_screen("fleet-shared", &fleet);
    tmux.wait_for(&["RESTART 20", "RED 0"], Duration::from_secs(60));
    assert_eq!(
        sshd.logins() - before,
        1,
        "twenty streams over one sshd: one handshake"
    );
    // A log tail asked of one host goes over the same connection.
    tmux.keys(&["Enter"]);
    tmux.wait_for(&["log (from the host)", "step 1"], Duration::from_secs(20));
    assert_eq!(sshd.logins() - before, 1, "the log tail too");
    assert_eq!(masters_under(&runtime).len(), 1, "one master");
    quit_and_see_its_connections_closed(&tmux, &runtime);
}

/// `fleet check` shares too; an argv that says `-o ControlMaster=no` is obeyed, and the fleet
/// file turns sharing off for the file or for one host.
#[test]
fn fleet_check_shares_one_connection_unless_the_argv_or_the_fleet_file_says_no() {
    let sshd = Sshd::start();
    let root = tempfile::tempdir().expect("tempdir");
    let binary = mihari_binary().display().to_string();
    let configs: Vec<PathBuf> = (0..3)
        .map(|i| host_dir(root.path(), &format!("c{i}"), true))
        .collect();
    let stanzas = |ssh: &[String], off: &[usize]| -> Vec<String> {
        configs
            .iter()
            .enumerate()
            .map(|(i, config)| {
                let mut stanza = host(&format!("c{i}"), ssh, config, &binary, 20);
                if off.contains(&i) {
                    stanza.push_str("    share_ssh: false\n");
                }
                stanza
            })
            .collect()
    };
    let logins_for = |text: String| -> usize {
        let path = root.path().join("fleet.yaml");
        fs::write(&path, text).expect("fleet file");
        let before = sshd.logins();
        let output = fleet_check(&path, true);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let merged: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        assert_eq!(merged["jobs"].as_array().map(Vec::len), Some(3), "{merged}");
        sshd.logins() - before
    };
    let mut no = sshd.ssh();
    no.insert(1, "-o".into());
    no.insert(2, "ControlMaster=no".into());
    assert_eq!(
        logins_for(format!("hosts:\n{}", stanzas(&no, &[]).concat())),
        3,
        "the argv's own ControlMaster=no: a connection each"
    );
    assert_eq!(
        logins_for(format!(
            "share_ssh: false\nhosts:\n{}",
            stanzas(&sshd.ssh(), &[]).concat()
        )),
        3,
        "share_ssh: false for the file"
    );
    assert_eq!(
        logins_for(format!("hosts:\n{}", stanzas(&sshd.ssh(), &[]).concat())),
        1,
        "three hosts over one sshd, shared: one handshake"
    );
    // The connection the last check made is kept a minute (ControlPersist), so the next
    // check pays no handshake for its shared hosts: only the host that says no pays one.
    assert_eq!(
        masters_under(&runtime_dir(&root.path().join("fleet.yaml"))).len(),
        1
    );
    assert_eq!(
        logins_for(format!("hosts:\n{}", stanzas(&sshd.ssh(), &[1]).concat())),
        1,
        "share_ssh: false for one host; the others over the kept connection"
    );
}

/// A shared connection that breaks — its master killed outright (its socket left behind),
/// then the sshd itself killed with its connections and started again — makes the hosts RED
/// as a connection of their own would, and the next asks make one new shared connection.
#[test]
fn a_broken_shared_connection_makes_its_hosts_red_and_the_next_is_a_new_one() {
    let mut sshd = Sshd::start();
    let root = tempfile::tempdir().expect("tempdir");
    let binary = mihari_binary().display().to_string();
    let one = host_dir(root.path(), "one", true);
    let two = host_dir(root.path(), "two", true);
    let fleet = fleet(
        root.path(),
        &[
            host("one", &sshd.ssh(), &one, &binary, 20),
            host("two", &sshd.ssh(), &two, &binary, 20),
        ],
    );
    let runtime = runtime_dir(&fleet);
    let before = sshd.logins();
    let tmux = fleet_screen("fleet-broken", &fleet);
    tmux.wait_for(&["RESTART 2", "RED 0"], Duration::from_secs(30));
    assert_eq!(sshd.logins() - before, 1);

    // The master killed: its streams end, both hosts RED; its socket is stale, which the
    // next ssh finds refused and replaces with a master of its own.
    let masters = masters_under(&runtime);
    assert_eq!(masters.len(), 1, "one master");
    signal(masters[0], nix::sys::signal::Signal::SIGKILL);
    tmux.wait_for(&["RED 2", "stream ended"], Duration::from_secs(20));
    tmux.wait_for(&["RESTART 2", "RED 0"], Duration::from_secs(30));
    assert_eq!(sshd.logins() - before, 2, "one new connection for both");

    // The sshd gone with every connection, then back on its port.
    sshd.kill_with_connections();
    tmux.wait_for(&["RED 2", "stream ended"], Duration::from_secs(20));
    let logins = sshd.logins();
    sshd.restart();
    tmux.wait_for(&["RESTART 2", "RED 0"], Duration::from_secs(60));
    // The restart's own probe is one login; the hosts' streams one more between them.
    assert_eq!(sshd.logins() - logins, 2, "one new connection for both");
    assert_eq!(masters_under(&runtime).len(), 1, "one master");
    quit_and_see_its_connections_closed(&tmux, &runtime);
}

/// The sockets' folder is refused when it is open to others or a link (a socket there lets
/// whoever reaches it run commands on the hosts as the operator): mihari says so, and every
/// ask makes its own connection — the fleet is asked all the same.
#[test]
fn a_socket_folder_open_to_others_or_a_link_is_refused_and_the_fleet_still_answers() {
    use std::os::unix::fs::PermissionsExt;
    let sshd = Sshd::start();
    let root = tempfile::tempdir().expect("tempdir");
    let binary = mihari_binary().display().to_string();
    let stanzas: Vec<String> = (0..2)
        .map(|i| {
            let config = host_dir(root.path(), &format!("f{i}"), true);
            host(&format!("f{i}"), &sshd.ssh(), &config, &binary, 20)
        })
        .collect();
    let fleet = fleet(root.path(), &stanzas);
    let folder = runtime_dir(&fleet).join("mihari");
    fs::create_dir(&folder).expect("mkdir");
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o755)).expect("chmod");
    let elsewhere = tempfile::tempdir().expect("tempdir");
    for (case, words) in [("open", "open to group or others"), ("link", "is a link")] {
        if case == "link" {
            fs::remove_dir(&folder).expect("rmdir");
            std::os::unix::fs::symlink(elsewhere.path(), &folder).expect("symlink");
        }
        let before = sshd.logins();
        let output = fleet_check(&fleet, true);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{case}: {stderr}");
        assert!(
            stderr.contains("mihari: note: ssh connections are not shared")
                && stderr.contains(words),
            "{case}: {stderr}"
        );
        let merged: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        assert_eq!(merged["jobs"].as_array().map(Vec::len), Some(2), "{merged}");
        assert_eq!(sshd.logins() - before, 2, "{case}: a connection each");
    }
    assert!(
        fs::read_dir(elsewhere.path())
            .expect("read")
            .next()
            .is_none(),
        "nothing made through the link"
    );
}

/// A remote job with two stale markers (each names a PID that is gone): `M` on the fleet
/// screen asks which, the operator picks the second, and the host's own mihari releases that
/// one alone — the first stays — recording the operator and this machine in its event log.
#[test]
fn the_fleet_screen_asks_which_of_two_stale_markers_and_releases_the_one_picked() {
    let sshd = Sshd::start();
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("one $HOME");
    fs::create_dir_all(&dir).expect("host dir");
    fs::write(dir.join("work.log"), "step 1\n").expect("log");
    let (first, second) = (dir.join("first.marker"), dir.join("second.marker"));
    for marker in [&first, &second] {
        fs::write(marker, "999999\n").expect("a marker naming a dead pid");
    }
    let config = dir.join("jobs.yaml");
    fs::write(
        &config,
        format!(
            "settings:\n  state_dir: {d}/state\njobs:\n  - id: work\n    log: {d}/work.log\n\
             \x20   should_run_when: [not_succeeded]\n    markers:\n\
             \x20     - {{path: {d}/first.marker, stale_after_sec: 3600}}\n\
             \x20     - {{path: {d}/second.marker, stale_after_sec: 3600}}\n",
            d = dir.display()
        ),
    )
    .expect("jobs");
    // The host lists both stale markers in its check --json, for the fleet to offer.
    let check = Command::new(mihari_binary())
        .arg("--config")
        .arg(&config)
        .args(["check", "--json"])
        .output()
        .expect("check");
    let report: Value = serde_json::from_slice(&check.stdout).expect("JSON");
    let listed: Vec<&str> = report["jobs"][0]["stale_markers"]
        .as_array()
        .expect("stale_markers")
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(listed, ["first.marker", "second.marker"], "{report}");
    assert_eq!(
        report["jobs"][0]["stale_markers"][1]["holder"]["pid"],
        999999
    );

    let binary = mihari_binary().display().to_string();
    let fleet = fleet(
        root.path(),
        &[host("one", &sshd.ssh(), &config, &binary, 20)],
    );
    let tmux = fleet_screen("fleet-markers", &fleet);
    tmux.wait_for(&["STALE 1"], Duration::from_secs(30));
    tmux.keys(&["M"]);
    tmux.wait_for(
        &[
            "release: which marker of 'work' on 'one'?",
            "2 markers are stale",
            "second.marker",
        ],
        Duration::from_secs(10),
    );
    tmux.keys(&["2"]);
    tmux.wait_for(&["release marker 'work'?"], Duration::from_secs(10));
    tmux.keys(&["Tab", "Enter"]);
    let screen = tmux.wait_for(&["one: release marker 'work'"], Duration::from_secs(60));
    assert!(
        screen.contains("one: release marker 'work': done"),
        "{screen}"
    );
    assert!(!second.exists(), "the marker picked is released");
    assert!(first.exists(), "the other stays");
    let events = Command::new(mihari_binary())
        .arg("--config")
        .arg(&config)
        .args(["events", "--json", "--job", "work"])
        .output()
        .expect("events");
    let events = String::from_utf8_lossy(&events.stdout);
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    let here = fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let from = format!("from the fleet: operator '{user}' on '{}'", here.trim());
    assert!(
        events
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|e| e["actor"] == "operator"
                && e["reason"].as_str().is_some_and(|r| r.contains(&from))),
        "the host's log names the operator and this machine: {events}"
    );
    tmux.keys(&["q"]);
}

/// A hostile or broken host's `mihari`: a script the fleet file's `mihari:` points at, run
/// directly (a host with no `ssh` is this machine), whatever words it is given.
fn fake_mihari(root: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = root.join(format!("fake-mihari-{name}"));
    fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("script");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// A `check --json --follow` line of one running job, with `heartbeat_sec` as written.
fn follow_line(heartbeat: &str) -> String {
    format!(
        "{{\"jobs\":[{{\"id\":\"work\",\"state\":\"RUNNING\",\"bucket\":null,\"reasons\":[]}}],\
         \"rules\":[],\"heartbeat_sec\":{heartbeat}}}"
    )
}

/// The fleet screen's own process (the mihari under the pane's shell), found by its fleet file.
fn fleet_process(fleet: &Path) -> i32 {
    let mut found = Vec::new();
    wait_until("the fleet screen runs", Duration::from_secs(10), || {
        found = pids_mentioning(&fleet.display().to_string())
            .into_iter()
            .filter(|pid| {
                let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let first = cmdline.split(|b| *b == 0).next().unwrap_or_default();
                String::from_utf8_lossy(first).ends_with("mihari")
            })
            .collect();
        !found.is_empty()
    });
    found[0]
}

/// The peak resident memory of `pid` so far, in MB (`VmHWM`), or `None` once it is gone.
fn peak_rss_mb(pid: i32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

/// Round three, item 5: a host sending `"heartbeat_sec": 1e13` (or 1e300, or a negative, or
/// no number) made the fleet screen panic (exit 101, `DateTime + TimeDelta overflowed`) and
/// left every host's stream running; 1e9 meant a stalled host was never RED. Each value is
/// bounded, said on the host's row with what was used, and the screen goes on.
#[test]
fn a_host_sending_an_unbounded_heartbeat_neither_ends_the_screen_nor_escapes_its_bounds() {
    let root = tempfile::tempdir().expect("tempdir");
    let config = root.path().join("jobs.yaml");
    let values = [
        ("huge", "1e13"),
        ("vast", "1e300"),
        ("ages", "1e9"),
        ("back", "-5"),
        ("word", "\"NaN\""),
    ];
    let stanzas: Vec<String> = values
        .iter()
        .map(|(name, value)| {
            let script = fake_mihari(
                root.path(),
                name,
                &format!(
                    "while :; do printf '%s\\n' '{}'; sleep 1; done",
                    follow_line(value)
                ),
            );
            host(name, &[], &config, &script.display().to_string(), 20)
        })
        .collect();
    let fleet = fleet(root.path(), &stanzas);
    let tmux = fleet_screen("fleet-bounds", &fleet);
    let screen = tmux.wait_for(
        &[
            "HOSTS 5",
            "huge: heartbeat_sec '10000000000000.0' is out of bounds (0.25 to 300 s): 300 s used",
            "vast: heartbeat_sec '1e+300' is out of bounds (0.25 to 300 s): 300 s used",
            "ages: heartbeat_sec '1000000000.0' is out of bounds (0.25 to 300 s): 300 s used",
            "back: heartbeat_sec '-5' is out of bounds (0.25 to 300 s): 0.25 s used",
            "word: heartbeat_sec '\"NaN\"' is not a number of seconds (0.25 to 300 s): 30 s used",
        ],
        Duration::from_secs(30),
    );
    for (name, _) in values {
        assert!(screen.lines().any(|l| is_row(l, name, "work")), "{screen}");
    }
    // Still the screen, a few lines later.
    std::thread::sleep(Duration::from_secs(3));
    let screen = tmux.capture();
    assert!(screen.contains("mihari fleet"), "{screen}");
    assert!(!screen.contains("panicked"), "{screen}");
    // Quit: no host's stream is left behind.
    tmux.keys(&["q"]);
    wait_until(
        "every host's stream ends with the screen",
        Duration::from_secs(10),
        || {
            pids_mentioning("fake-mihari-").iter().all(|pid| {
                fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| !c.contains(&root.path().display().to_string()))
            })
        },
    );
}

/// Round three, item 6: a stream with no newline grew the fleet screen to 2 GB in 40 s, and a
/// stderr flood beside healthy lines to 1.5 GB in 17 s. A line longer than the bound ends the
/// stream (RED, "line longer than 32 MB: cut off"), only the head and tail of stderr are
/// kept (said on the host's row), and the screen's peak memory stays small.
#[test]
fn an_endless_line_or_a_stderr_flood_from_a_host_is_cut_off_and_memory_stays_bounded() {
    let root = tempfile::tempdir().expect("tempdir");
    let config = root.path().join("jobs.yaml");
    let endless = fake_mihari(root.path(), "endless", "exec tr '\\000' x < /dev/zero");
    let noisy = fake_mihari(
        root.path(),
        "noisy",
        &format!(
            "yes 'ssh: noise on stderr' >&2 &\nwhile :; do printf '%s\\n' '{}'; sleep 0.5; done",
            follow_line("2")
        ),
    );
    let fleet = fleet(
        root.path(),
        &[
            host("endless", &[], &config, &endless.display().to_string(), 20),
            host("noisy", &[], &config, &noisy.display().to_string(), 20),
        ],
    );
    let tmux = fleet_screen("fleet-floods", &fleet);
    let pid = fleet_process(&fleet);
    let screen = tmux.wait_for(
        &[
            "endless: stream ended: line longer than 32 MB: cut off",
            "noisy: stderr longer than 64 KB",
            "only its first and last 32 KB kept",
        ],
        Duration::from_secs(60),
    );
    assert!(
        screen.lines().any(|l| is_row(l, "noisy", "work")),
        "{screen}"
    );
    // The endless stream is started again (after its backoff) and cut off again; the
    // flood goes on all the while.
    std::thread::sleep(Duration::from_secs(8));
    let peak = peak_rss_mb(pid).expect("the screen still runs");
    eprintln!("fleet screen peak RSS with an endless line and a stderr flood: {peak} MB");
    assert!(peak < 300, "peak RSS {peak} MB");
    tmux.keys(&["q"]);
    wait_until(
        "the streams end with the screen",
        Duration::from_secs(10),
        || {
            pids_mentioning(&root.path().display().to_string())
                .iter()
                .all(|p| {
                    fs::read_to_string(format!("/proc/{p}/cmdline"))
                        .is_ok_and(|c| !c.contains("fake-mihari-"))
                })
        },
    );
}

/// Round three, item 6: `fleet check` read 824 MB of a host's answer in its 10 s. An answer
/// longer than the bound is cut off and the host named for it; the peak memory stays small.
#[test]
fn fleet_check_cuts_off_an_answer_longer_than_the_bound() {
    let root = tempfile::tempdir().expect("tempdir");
    let config = root.path().join("jobs.yaml");
    let endless = fake_mihari(
        root.path(),
        "flood",
        "yes 'stderr flood' >&2 &\nexec tr '\\000' x < /dev/zero",
    );
    let fleet = fleet(
        root.path(),
        &[host(
            "flood",
            &[],
            &config,
            &endless.display().to_string(),
            10,
        )],
    );
    let mut child = Command::cargo_bin("mihari")
        .expect("binary")
        .arg("fleet")
        .arg("--fleet")
        .arg(&fleet)
        .args(["check", "--json"])
        .env("XDG_RUNTIME_DIR", runtime_dir(&fleet))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fleet check");
    let pid = child.id() as i32;
    let mut peak = 0;
    while child.try_wait().expect("wait").is_none() {
        peak = peak.max(peak_rss_mb(pid).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("output");
    eprintln!("fleet check peak RSS with an endless answer: {peak} MB");
    assert_eq!(output.status.code(), Some(2));
    let merged: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        merged["hosts"][0]["error"], "flood: answer longer than 64 MB: cut off",
        "{merged}"
    );
    assert!(peak < 300, "peak RSS {peak} MB");
    wait_until("the host's run is gone", Duration::from_secs(10), || {
        pids_mentioning("fake-mihari-flood").iter().all(|p| {
            fs::read_to_string(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| !c.contains(&root.path().display().to_string()))
        })
    });
}

/// Round three, item 7: approving a key that starts with `-` (`--help`) from the fleet sent
/// `approval approve --help --yes`: the host's mihari printed its help with exit 0, the screen
/// said "done" and the approval stayed pending. The key now follows `--`, and "done" is said
/// only when the host's mihari took the decision up.
#[test]
fn approving_a_key_that_looks_like_an_option_from_the_fleet_approves_that_key() {
    let sshd = Sshd::start();
    let root = tempfile::tempdir().expect("tempdir");
    let config = host_dir(root.path(), "one", false);
    let asked = Command::new(mihari_binary())
        .arg("--config")
        .arg(&config)
        .args([
            "approval",
            "request",
            "work",
            "--step",
            "publish",
            "--key=--help",
            "--summary",
            "push v2",
        ])
        .output()
        .expect("approval request");
    assert_eq!(
        asked.status.code(),
        Some(10),
        "pending: {}",
        String::from_utf8_lossy(&asked.stderr)
    );
    let binary = mihari_binary().display().to_string();
    let fleet = fleet(
        root.path(),
        &[host("one", &sshd.ssh(), &config, &binary, 20)],
    );
    let tmux = fleet_screen("fleet-dash-key", &fleet);
    tmux.wait_for(&["APPROVALS 1"], Duration::from_secs(30));
    tmux.keys(&["a"]);
    tmux.wait_for(&["approve 'work'?"], Duration::from_secs(10));
    tmux.keys(&["w", "o", "r", "k", "Tab", "Tab", "Tab", "Tab", "Enter"]);
    let screen = tmux.wait_for(&["one: approve 'work'"], Duration::from_secs(60));
    assert!(screen.contains("one: approve 'work': done"), "{screen}");
    let listed = Command::new(mihari_binary())
        .arg("--config")
        .arg(&config)
        .args(["approval", "list", "--json", "--all"])
        .output()
        .expect("approval list");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("\"--help\"") && listed.contains("approved") && !listed.contains("pending"),
        "{listed}"
    );
    tmux.keys(&["q"]);
}
