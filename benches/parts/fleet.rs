//! The fleet part of the perf bench (`MIHARI_BENCH_ONLY=fleet`): a real `sshd` on 127.0.0.1
//! with keys made here (Debian's `openssh-server`), and the fleet screen in a pty.
//!
//! - a death on a remote host: a job under `mihari run` on one of two hosts, its process
//!   killed, timed until the fleet screen's row for it leaves RUNNING (20 samples, p99 at
//!   most 500 ms), beside the same death on the local dashboard of that host's jobs file;
//! - 20 hosts (20 jobs files over one sshd): the fleet screen's first merged frame, from its
//!   start until the header counts every host's job (median of 3, at most 2 s), beside
//!   `mihari fleet check --json` on the same hosts (twenty asks at once) as the floor.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::common::*;
use super::{Knobs, Table};

const DEATH_TARGET: Duration = Duration::from_millis(500);
const FIRST_FRAME_TARGET: Duration = Duration::from_secs(2);
const SAMPLES: usize = 20;
const HOSTS: usize = 20;

struct Sshd {
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) -> Result<(), String> {
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()
        .map_err(|e| format!("ssh-keygen (apt-get install -y openssh-client): {e}"))?;
    made.success()
        .then_some(())
        .ok_or_else(|| "ssh-keygen failed".to_string())
}

impl Sshd {
    fn start(knobs: &Knobs) -> Result<Sshd, String> {
        let dir = knobs.tempdir()?;
        let root = dir.path();
        keygen(&root.join("host_key"))?;
        keygen(&root.join("user_key"))?;
        fs::copy(root.join("user_key.pub"), root.join("authorized_keys"))
            .map_err(|e| e.to_string())?;
        let _ = fs::create_dir_all("/run/sshd");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        // Twenty streams at once: sshd's default MaxStartups (10:30:100) would refuse some.
        fs::write(
            root.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {r}/host_key\n\
                 AuthorizedKeysFile {r}/authorized_keys\nPidFile {r}/sshd.pid\n\
                 StrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
                 MaxStartups 100\nMaxSessions 100\nLogLevel ERROR\n",
                r = root.display()
            ),
        )
        .map_err(|e| e.to_string())?;
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(root.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("sshd (apt-get install -y openssh-server): {e}"))?;
        let sshd = Sshd { dir, port, child };
        let started = Instant::now();
        loop {
            let argv = sshd.ssh();
            let probe = Command::new(&argv[0])
                .args(&argv[1..])
                .arg("true")
                .stdin(Stdio::null())
                .output()
                .map_err(|e| e.to_string())?;
            if probe.status.success() {
                return Ok(sshd);
            }
            if started.elapsed() > Duration::from_secs(20) {
                return Err(format!(
                    "sshd on 127.0.0.1:{port} never answered: {}",
                    String::from_utf8_lossy(&probe.stderr)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn ssh(&self) -> Vec<String> {
        let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
        [
            "ssh",
            "-F",
            "/dev/null",
            "-i",
            &self.dir.path().join("user_key").display().to_string(),
            "-p",
            &self.port.to_string(),
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
}

/// A host's jobs file: one job `work` under a lock, its restart a long `sleep`.
fn host_dir(root: &Path, name: &str) -> Result<PathBuf, String> {
    let dir = root.join(name);
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    fs::write(dir.join("work.log"), "epoch 1\n").map_err(|e| e.to_string())?;
    fs::write(
        dir.join("jobs.yaml"),
        format!(
            "settings:\n  state_dir: {d}/state\njobs:\n  - id: work\n    lock: {d}/work.lock\n\
             \x20   log: {d}/work.log\n    should_run_when: [not_succeeded]\n\
             \x20   restart:\n      command: [sleep, \"600\"]\n",
            d = dir.display()
        ),
    )
    .map_err(|e| e.to_string())?;
    Ok(dir.join("jobs.yaml"))
}

fn fleet_file(root: &Path, ssh: &[String], exe: &Path, configs: &[PathBuf]) -> PathBuf {
    let ssh = serde_json::to_string(ssh).unwrap_or_default();
    let mut text = String::from("hosts:\n");
    for (i, config) in configs.iter().enumerate() {
        text.push_str(&format!(
            "  - name: h{i:02}\n    ssh: {ssh}\n    config: {}\n    mihari: {}\n",
            serde_json::to_string(&config.display().to_string()).unwrap_or_default(),
            serde_json::to_string(&exe.display().to_string()).unwrap_or_default()
        ));
    }
    let path = root.join("fleet.yaml");
    let _ = fs::write(&path, text);
    path
}

/// `mihari run work` on a host, in its own process group.
fn start_job(exe: &Path, config: &Path) -> Result<Child, String> {
    Command::new(exe)
        .arg("--config")
        .arg(config)
        .args(["run", "work"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("mihari run: {e}"))
}

/// The job's own process: the child of the `mihari run` wrapper.
fn job_process(wrapper: u32) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        for entry in fs::read_dir("/proc").ok()?.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let parent = fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    stat.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse::<u32>()
                        .ok()
                });
            if parent == Some(wrapper) {
                return Some(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Whether the row of `host`'s job `work` shows `state` (the fleet screen's host column).
fn fleet_row(screen: &vt100::Screen, host: &str, state: &str) -> bool {
    screen.rows(0, COLS).any(|row| {
        let w: Vec<&str> = row.split_whitespace().collect();
        w.len() > 3 && w[1] == host && w[2] == "work" && w[3] == state
    })
}

/// One death: the job started and seen RUNNING, its process killed, timed until the screen
/// shows it gone from RUNNING.
fn one_death(
    exe: &Path,
    config: &Path,
    screen: &mut Dashboard,
    shows: &dyn Fn(&vt100::Screen, &str) -> bool,
    latencies: &mut Latencies,
) -> Result<(), String> {
    let mut wrapper = start_job(exe, config)?;
    let running = screen.wait_until(Duration::from_secs(20), |s| shows(s, "RUNNING"))?;
    if running.is_none() {
        let _ = wrapper.kill();
        return Err(format!("the job never showed RUNNING:\n{}", screen.dump()));
    }
    screen.drain_for(Duration::from_millis(300))?;
    let Some(pid) = job_process(wrapper.id()) else {
        let _ = wrapper.kill();
        return Err("the job's process under mihari run never appeared".into());
    };
    let killed = Instant::now();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    let seen = screen.wait_until(Duration::from_secs(5), |s| shows(s, "SHOULD_BE_RUNNING"))?;
    latencies.record(killed, seen);
    let _ = wrapper.wait();
    screen.drain_for(Duration::from_millis(200))?;
    Ok(())
}

pub fn measure_fleet(knobs: &Knobs, exe: &Path, table: &mut Table) -> Result<(), String> {
    let sshd = Sshd::start(knobs)?;
    let root = knobs.tempdir()?;
    println!(
        "\nfleet: sshd on 127.0.0.1:{}, hosts in {}",
        sshd.port,
        root.path().display()
    );

    // A death on a remote host, on the fleet screen (two hosts), and on the local dashboard.
    let configs: Vec<PathBuf> = (0..2)
        .map(|i| host_dir(root.path(), &format!("two{i}")))
        .collect::<Result<_, _>>()?;
    let fleet = fleet_file(root.path(), &sshd.ssh(), exe, &configs);
    let fleet_text = fleet.display().to_string();
    let mut screen = Dashboard::spawn_args(exe, &["fleet", "--fleet", &fleet_text])?;
    let mut over_ssh = Latencies::default();
    for _ in 0..SAMPLES {
        one_death(
            exe,
            &configs[1],
            &mut screen,
            &|s, state| fleet_row(s, "h01", state),
            &mut over_ssh,
        )?;
    }
    let _ = screen.quit();
    let mut local = Latencies::default();
    let mut dashboard = Dashboard::spawn(exe, &configs[1])?;
    for _ in 0..SAMPLES {
        one_death(
            exe,
            &configs[1],
            &mut dashboard,
            &|s, state| row_shows(s, "work", state),
            &mut local,
        )?;
    }
    let _ = dashboard.quit();
    print_latency("a death on a remote host -> the fleet screen", &over_ssh);
    print_latency("the same death -> that host's local dashboard", &local);
    let floor = local.median().map_or("no samples".into(), |m| {
        format!("local dashboard p50 {}", ms(m))
    });
    let (figure, pass) = match (over_ssh.p99(), over_ssh.median()) {
        (Some(p99), Some(p50)) => (
            format!(
                "p99 {} (p50 {}, {} missed)",
                ms(p99),
                ms(p50),
                over_ssh.missed
            ),
            Some(over_ssh.missed == 0 && p99 <= DEATH_TARGET),
        ),
        _ => ("no samples".into(), None),
    };
    table.add(
        format!(
            "a death on a remote host -> the fleet screen, over loopback ssh ({SAMPLES} samples)"
        ),
        format!("p99 ≤ {}", ms(DEATH_TARGET)),
        floor,
        figure,
        "—",
        pass,
    );

    // Twenty hosts: the first merged frame.
    let configs: Vec<PathBuf> = (0..HOSTS)
        .map(|i| host_dir(root.path(), &format!("many{i:02}")))
        .collect::<Result<_, _>>()?;
    for config in &configs {
        fs::write(
            config.with_file_name("work.lock"),
            "{\"pid\": 999999, \"start_time\": 1}",
        )
        .map_err(|e| e.to_string())?;
    }
    // Cold: twenty ssh connections at once, each with its own handshake. Then multiplexed, as
    // an operator's ~/.ssh/config would set it: one master connection (already up, as after
    // the first use with ControlPersist), twenty sessions over it.
    let mut multiplexed = sshd.ssh();
    let at = multiplexed.len() - 1;
    let control = sshd.dir.path().join("cm-%r@%h:%p").display().to_string();
    for option in [
        "ControlMaster=auto".to_string(),
        format!("ControlPath={control}"),
        "ControlPersist=120".to_string(),
    ] {
        multiplexed.insert(at, option);
        multiplexed.insert(at, "-o".to_string());
    }
    let warm = Command::new(&multiplexed[0])
        .args(&multiplexed[1..])
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| e.to_string())?;
    if !warm.success() {
        return Err("the ssh master connection could not be made".into());
    }
    for (how, ssh) in [
        ("cold ssh", sshd.ssh()),
        ("ssh ControlMaster", multiplexed.clone()),
    ] {
        let fleet = fleet_file(root.path(), &ssh, exe, &configs);
        let fleet_text = fleet.display().to_string();
        let wanted = format!("RESTART {HOSTS}");
        let mut frames = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            let mut screen = Dashboard::spawn_args(exe, &["fleet", "--fleet", &fleet_text])?;
            let seen =
                screen.wait_until(Duration::from_secs(30), |s| screen_contains(s, &wanted))?;
            match seen {
                Some(at) => frames.push(at - started),
                None => return Err(format!("20 hosts never all showed:\n{}", screen.dump())),
            }
            let _ = screen.quit();
        }
        // The floor: the same twenty asks, at once, as `fleet check` makes them.
        let mut floors = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            let _ = Command::new(exe)
                .args(["fleet", "--fleet", &fleet_text, "check", "--json"])
                .output()
                .map_err(|e| e.to_string())?;
            floors.push(started.elapsed());
        }
        let frame = median(&mut frames);
        let floor = median(&mut floors);
        println!(
            "  20 hosts, {how}: first merged frame median {} (floor: fleet check --json {})",
            ms(frame),
            ms(floor)
        );
        table.add(
            format!(
                "{HOSTS} hosts over one loopback sshd, {how}: the fleet screen's first merged frame (median of 3)"
            ),
            format!("≤ {}", ms(FIRST_FRAME_TARGET)),
            format!("mihari fleet check --json on the same hosts {}", ms(floor)),
            ms(frame),
            format!("{:.2}x", frame.as_secs_f64() / floor.as_secs_f64().max(1e-9)),
            Some(frame <= FIRST_FRAME_TARGET),
        );
    }
    // The master connection goes with the sshd; `-O exit` ends it now.
    let _ = Command::new(&multiplexed[0])
        .args(&multiplexed[1..multiplexed.len() - 1])
        .args(["-O", "exit"])
        .arg(&multiplexed[multiplexed.len() - 1])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    drop(sshd);
    Ok(())
}

fn print_latency(title: &str, l: &Latencies) {
    match l.summary() {
        Some([min, median, p99, max]) => println!(
            "  {title:<50} n {} min {} p50 {} p99 {} max {} missed {}",
            l.count(),
            ms(min),
            ms(median),
            ms(p99),
            ms(max),
            l.missed
        ),
        None => println!("  {title:<50} no samples"),
    }
}
