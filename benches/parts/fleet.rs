//! The fleet part of the perf bench (`MIHARI_BENCH_ONLY=fleet`): a real `sshd` on 127.0.0.1
//! with keys made here (Debian's `openssh-server`), and the fleet screen in a pty.
//!
//! - a death on a remote host: a job under `mihari run` on one of two hosts, its process
//!   killed, timed until the fleet screen's row for it leaves RUNNING (20 samples, p99 at
//!   most 500 ms), beside the same death on the local dashboard of that host's jobs file;
//! - 20 hosts (20 jobs files over one sshd): the fleet screen's first merged frame, from its
//!   start until the header counts every host's job (median of 3, at most 2 s): mihari
//!   sharing one connection per destination, `-o ControlMaster=no` (a connection per ask), and
//!   over the operator's own ControlMaster already up, as the bench's own user and as a fleet
//!   account whose login shell is /bin/sh, beside twenty `ssh HOST true` at once and `mihari fleet check --json` on the
//!   same hosts as the floors.

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
        // sshd reads authorized_keys as the user logging in: the fleet account must reach it.
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(root, fs::Permissions::from_mode(0o755))
                .map_err(|e| e.to_string())?;
            fs::set_permissions(
                root.join("authorized_keys"),
                fs::Permissions::from_mode(0o644),
            )
            .map_err(|e| e.to_string())?;
        }
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
        self.ssh_as(&whoami())
    }

    fn ssh_as(&self, user: &str) -> Vec<String> {
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

    // Twenty hosts: the first merged frame. Once as the bench's own user, and once as a
    // fleet account whose login shell is /bin/sh: ssh runs every remote command through the
    // account's shell, and root's ~/.bashrc here runs `pyenv init` (about 0.2 s of CPU per
    // session, 4 s for twenty) — the remote account's start-up, not mihari's nor ssh's.
    let mut accounts = vec![(whoami(), None)];
    match FleetUser::ensure() {
        Ok(user) => accounts.push((FLEET_USER.to_string(), Some(user))),
        Err(why) => println!("  (no '{FLEET_USER}' account: {why}; its rows are skipped)"),
    }
    // mihari's sockets for the shared connections in a folder of the bench's own, so that
    // the masters `fleet check` leaves (ControlPersist) are found and closed between samples.
    let runtime = knobs.tempdir()?;
    let runtime_var = format!("XDG_RUNTIME_DIR={}", runtime.path().display());
    let close_masters = || {
        for pid in masters_under(runtime.path()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    for (user, owner) in accounts {
        let many = knobs.tempdir()?;
        let (configs, remote_exe) = many_hosts(many.path(), exe, owner.as_ref())?;
        let cold = sshd.ssh_as(&user);
        let mut unshared = cold.clone();
        unshared.splice(1..1, ["-o".to_string(), "ControlMaster=no".to_string()]);
        let multiplexed = multiplexed(&sshd, &cold);
        let warm = quiet(&multiplexed, &["true"])?;
        if !warm.success() {
            return Err(format!(
                "the ssh master connection as '{user}' could not be made"
            ));
        }
        let shell = match owner {
            Some(_) => "login shell /bin/sh".to_string(),
            None => format!("'{user}', whose ~/.bashrc runs at every session"),
        };
        for (how, ssh) in [
            (
                "each host its own ssh argv, mihari sharing connections",
                cold.clone(),
            ),
            (
                "`-o ControlMaster=no` (a connection per ask)",
                unshared.clone(),
            ),
            (
                "the operator's own ControlMaster already up",
                multiplexed.clone(),
            ),
        ] {
            let fleet = fleet_file(many.path(), &ssh, &remote_exe, &configs);
            let fleet_text = fleet.display().to_string();
            let exe_text = exe.display().to_string();
            let wanted = format!("RESTART {HOSTS}");
            let mut frames = Vec::new();
            for _ in 0..3 {
                close_masters();
                let started = Instant::now();
                let mut screen = Dashboard::spawn_args(
                    Path::new("/usr/bin/env"),
                    &[&runtime_var, &exe_text, "fleet", "--fleet", &fleet_text],
                )?;
                let seen =
                    screen.wait_until(Duration::from_secs(30), |s| screen_contains(s, &wanted))?;
                match seen {
                    Some(at) => frames.push(at - started),
                    None => return Err(format!("20 hosts never all showed:\n{}", screen.dump())),
                }
                let _ = screen.quit();
            }
            // The floors: twenty `ssh HOST true` at once, each its own connection (ssh and
            // the account's shell alone), and the same twenty asks `fleet check` makes (cold:
            // the connection a check keeps a minute is closed first).
            let mut bare = Vec::new();
            let mut floors = Vec::new();
            for _ in 0..3 {
                let started = Instant::now();
                let children: Vec<Child> = (0..HOSTS)
                    .map(|_| spawn_quiet(&ssh, &["true"]))
                    .collect::<Result<_, _>>()?;
                for mut child in children {
                    let _ = child.wait();
                }
                bare.push(started.elapsed());
                close_masters();
                let started = Instant::now();
                let _ = Command::new(exe)
                    .args(["fleet", "--fleet", &fleet_text, "check", "--json"])
                    .env("XDG_RUNTIME_DIR", runtime.path())
                    .output()
                    .map_err(|e| e.to_string())?;
                floors.push(started.elapsed());
            }
            close_masters();
            let frame = median(&mut frames);
            let floor = median(&mut floors);
            let bare = median(&mut bare);
            println!(
                "  20 hosts, {how}, {shell}: first merged frame median {} (floors: 20 x ssh true {}, \
                 fleet check --json {})",
                ms(frame),
                ms(bare),
                ms(floor)
            );
            table.add(
                format!(
                    "{HOSTS} hosts over one loopback sshd, {how}, {shell}: the fleet screen's first merged frame (median of 3)"
                ),
                format!("≤ {}", ms(FIRST_FRAME_TARGET)),
                format!(
                    "20 x `ssh HOST true` at once {}; `mihari fleet check --json` {}",
                    ms(bare),
                    ms(floor)
                ),
                ms(frame),
                format!("{:.2}x ssh true", frame.as_secs_f64() / bare.as_secs_f64().max(1e-9)),
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
    }
    drop(sshd);
    Ok(())
}

/// The account the 20-host rows also run as: a login shell that starts nothing.
const FLEET_USER: &str = "mihari-fleet";

/// The fleet account's uid and gid, made when missing (the bench runs as root).
struct FleetUser {
    uid: u32,
    gid: u32,
}

impl FleetUser {
    fn ensure() -> Result<FleetUser, String> {
        if !nix::unistd::Uid::effective().is_root() {
            return Err("the bench is not root".into());
        }
        let made = Command::new("useradd")
            .args(["--system", "--no-create-home", "--home-dir", "/nonexistent"])
            .args(["--shell", "/bin/sh", FLEET_USER])
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("useradd: {e}"))?;
        // 9: it exists already (another run made it).
        if !made.success() && made.code() != Some(9) {
            return Err(format!("useradd failed ({made})"));
        }
        // sshd without PAM refuses a locked account ('!'): '*' has no password, and no lock.
        let _ = Command::new("usermod")
            .args(["-p", "*", FLEET_USER])
            .status();
        let user = nix::unistd::User::from_name(FLEET_USER)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no user '{FLEET_USER}' after useradd"))?;
        Ok(FleetUser {
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
        })
    }
}

fn whoami() -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::effective())
        .ok()
        .flatten()
        .map_or_else(|| "root".to_string(), |user| user.name)
}

/// Twenty hosts' jobs files under `root`, each job's lock naming a dead PID (RESTART), owned
/// by `owner` when given, with a copy of the binary that account may run (a fresh clone's
/// folder is private to its user).
fn many_hosts(
    root: &Path,
    exe: &Path,
    owner: Option<&FleetUser>,
) -> Result<(Vec<PathBuf>, PathBuf), String> {
    use std::os::unix::fs::PermissionsExt;
    let configs: Vec<PathBuf> = (0..HOSTS)
        .map(|i| host_dir(root, &format!("many{i:02}")))
        .collect::<Result<_, _>>()?;
    for config in &configs {
        fs::write(
            config.with_file_name("work.lock"),
            "{\"pid\": 999999, \"start_time\": 1}",
        )
        .map_err(|e| e.to_string())?;
    }
    let Some(owner) = owner else {
        return Ok((configs, exe.to_path_buf()));
    };
    let remote_exe = root.join("mihari");
    fs::copy(exe, &remote_exe).map_err(|e| e.to_string())?;
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    fs::set_permissions(&remote_exe, fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    for config in &configs {
        let dir = config.parent().ok_or("a host folder")?;
        for path in [
            dir.to_path_buf(),
            config.clone(),
            dir.join("work.log"),
            dir.join("work.lock"),
        ] {
            std::os::unix::fs::chown(&path, Some(owner.uid), Some(owner.gid))
                .map_err(|e| format!("chown '{}': {e}", path.display()))?;
        }
    }
    Ok((configs, remote_exe))
}

/// `ssh` with a ControlMaster that stays up (as an operator's ~/.ssh/config would set it),
/// its socket in the sshd's folder.
fn multiplexed(sshd: &Sshd, ssh: &[String]) -> Vec<String> {
    let mut multiplexed = ssh.to_vec();
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
    multiplexed
}

/// The ssh connection masters mihari made with its sockets under `runtime` (a master names
/// itself `ssh: SOCKET [mux]`).
fn masters_under(runtime: &Path) -> Vec<i32> {
    let needle = runtime.display().to_string();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c);
                c.starts_with("ssh: ") && c.contains(&needle) && c.contains("[mux]")
            })
        })
        .collect()
}

fn spawn_quiet(argv: &[String], args: &[&str]) -> Result<Child, String> {
    Command::new(&argv[0])
        .args(&argv[1..])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())
}

fn quiet(argv: &[String], args: &[&str]) -> Result<std::process::ExitStatus, String> {
    spawn_quiet(argv, args)?.wait().map_err(|e| e.to_string())
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
