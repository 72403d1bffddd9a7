//! `mihari fleet check` over a real `sshd` on 127.0.0.1 (Debian's `openssh-server`, which
//! `.ci/run` installs), with host and user keys made by the test: hosts merged in the fixed
//! order with a host on every job, a host whose port refuses, one that never answers, one
//! with no mihari, and a jobs-file path that needs quoting for the remote shell.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

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
        fs::write(
            root.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {r}/host_key\n\
                 AuthorizedKeysFile {r}/authorized_keys\nPidFile {r}/sshd.pid\n\
                 StrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
                 LogLevel ERROR\n",
                r = root.display()
            ),
        )
        .expect("sshd_config");
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(root.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sshd runs (apt-get install -y openssh-server)");
        let sshd = Sshd { dir, port, child };
        let start = Instant::now();
        loop {
            let argv = sshd.ssh();
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
                "sshd on 127.0.0.1:{port} never answered: {}",
                String::from_utf8_lossy(&probe.stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        sshd
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

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

fn fleet_check(fleet: &Path, json: bool) -> Output {
    let mut command = Command::cargo_bin("mihari").expect("binary");
    command
        .arg("fleet")
        .arg("--fleet")
        .arg(fleet)
        .arg("check")
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
