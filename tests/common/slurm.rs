//! A real one-node Slurm cluster for the tests: Debian's `munged`, `slurmctld` and `slurmd`
//! (packages munge and slurm-wlm, which `.ci/run` installs), started as root with a
//! `slurm.conf` of the test's own — one node named as this machine with its CPUs,
//! `select/cons_tres`, free ports picked for the controller and the node, and every state,
//! spool, log, pid file and the munge socket and key in a temp dir — so that another test
//! binary, or another engineer, can run a cluster of their own at the same time. Nothing uses
//! /etc/slurm, the default munge socket or a fixed port: the client commands mihari runs find
//! this cluster through `SLURM_CONF`, as Slurm's own tools do.
//!
//! [`Cluster::shared`] starts one cluster per test binary (stopped when the binary exits,
//! whether its tests passed or panicked); [`Cluster::start`] one of a test's own, stopped when
//! dropped. Stopping cancels every job first and waits for their processes, so no daemon and
//! no job is left behind. Tests in one binary share the shared cluster and must filter by
//! their own job names.
#![allow(dead_code)]

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One cluster: its folder, its `slurm.conf`, and its three daemons.
pub struct Cluster {
    dir: tempfile::TempDir,
    pub conf: PathBuf,
    daemons: Mutex<Daemons>,
}

struct Daemons {
    munged: Option<Child>,
    slurmctld: Option<Child>,
    slurmd: Option<Child>,
}

static SHARED: OnceLock<Cluster> = OnceLock::new();

extern "C" fn stop_shared() {
    if let Some(cluster) = SHARED.get() {
        cluster.stop();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port on 127.0.0.1")
}

fn need(program: &str, package: &str) {
    let found = Path::new(program).exists()
        || Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .output()
            .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "'{program}' is needed for the Slurm tests: apt-get install -y {package} (.ci/run does)"
    );
}

impl Cluster {
    /// The cluster of this test binary, started on first use and stopped when it exits.
    pub fn shared() -> &'static Cluster {
        SHARED.get_or_init(|| {
            let cluster = Cluster::start();
            // SAFETY: registers a plain function to run at exit; it touches only the static.
            unsafe {
                libc::atexit(stop_shared);
            }
            cluster
        })
    }

    /// A cluster of the caller's own, stopped when dropped.
    pub fn start() -> Cluster {
        need("/usr/sbin/munged", "munge");
        need("/usr/sbin/slurmctld", "slurmctld (slurm-wlm)");
        need("/usr/sbin/slurmd", "slurmd (slurm-wlm)");
        need("squeue", "slurm-client (slurm-wlm)");
        let dir = tempfile::Builder::new()
            .prefix("mihari-slurm-")
            .tempdir()
            .expect("temp dir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let d = dir.path();
        for sub in ["munge", "state", "spool", "log", "jobs"] {
            fs::create_dir_all(d.join(sub)).unwrap();
        }
        fs::set_permissions(d.join("munge"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(d.join("jobs"), fs::Permissions::from_mode(0o777)).unwrap();
        // A key of this cluster's own.
        let key = d.join("munge/munge.key");
        let mut bytes = vec![0u8; 1024];
        fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
            .expect("random bytes for the munge key");
        fs::write(&key, &bytes).unwrap();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o400)).unwrap();
        let socket = d.join("munge/munge.socket");
        let host = hostname();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let conf = d.join("slurm.conf");
        let text = format!(
            "ClusterName=mihari{pid}\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctld}\n\
             SlurmdPort={slurmd}\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={socket}\n\
             CryptoType=crypto/munge\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             SchedulerType=sched/backfill\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             KillWait=2\n\
             SlurmctldTimeout=30\n\
             SlurmdTimeout=60\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
             PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
            pid = std::process::id(),
            ctld = free_port(),
            slurmd = free_port(),
            socket = socket.display(),
            d = d.display(),
        );
        fs::write(&conf, text).unwrap();
        let cluster = Cluster {
            dir,
            conf,
            daemons: Mutex::new(Daemons {
                munged: None,
                slurmctld: None,
                slurmd: None,
            }),
        };
        cluster.start_munged();
        cluster.start_controller();
        {
            let mut daemons = cluster.daemons.lock().unwrap();
            daemons.slurmd = Some(cluster.daemon("/usr/sbin/slurmd", &["-D"]));
        }
        cluster.wait_for_node();
        cluster
    }

    fn daemon(&self, program: &str, args: &[&str]) -> Child {
        Command::new(program)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(self.dir.path().join("log/daemons.err")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"))
    }

    /// Starts munged in the foreground, with its socket, key, log, pid and seed here.
    pub fn start_munged(&self) {
        let d = self.dir.path();
        let child = Command::new("/usr/sbin/munged")
            .arg("--foreground")
            .arg("--force")
            .arg(format!(
                "--socket={}",
                d.join("munge/munge.socket").display()
            ))
            .arg(format!(
                "--key-file={}",
                d.join("munge/munge.key").display()
            ))
            .arg(format!(
                "--log-file={}",
                d.join("munge/munged.log").display()
            ))
            .arg(format!(
                "--pid-file={}",
                d.join("munge/munged.pid").display()
            ))
            .arg(format!(
                "--seed-file={}",
                d.join("munge/munged.seed").display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("munged starts");
        self.daemons.lock().unwrap().munged = Some(child);
        let socket = d.join("munge/munge.socket");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "munged made no socket: {}",
                fs::read_to_string(d.join("munge/munged.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops munged (Slurm's commands then fail with a munge error).
    pub fn stop_munged(&self) {
        let child = self.daemons.lock().unwrap().munged.take();
        stop_child(child);
    }

    /// Starts slurmctld in the foreground (`-i`: its state folder may be empty).
    pub fn start_controller(&self) {
        let child = self.daemon("/usr/sbin/slurmctld", &["-D", "-i"]);
        self.daemons.lock().unwrap().slurmctld = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.command("scontrol").arg("ping").output().unwrap();
            if String::from_utf8_lossy(&out.stdout).contains("is UP") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "slurmctld did not come up: {}",
                self.log("slurmctld.log")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops slurmctld: the controller cannot be reached.
    pub fn stop_controller(&self) {
        let child = self.daemons.lock().unwrap().slurmctld.take();
        stop_child(child);
    }

    fn wait_for_node(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self
                .command("sinfo")
                .args(["-h", "-o", "%T"])
                .output()
                .unwrap();
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if state == "idle" || state == "mixed" || state == "allocated" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the node did not come up (state '{state}'): {}",
                self.log("slurmd.log")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A daemon's log, for a failure message.
    pub fn log(&self, name: &str) -> String {
        fs::read_to_string(self.dir.path().join("log").join(name)).unwrap_or_default()
    }

    /// A Slurm client command pointed at this cluster.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", &self.conf);
        command
    }

    /// A folder jobs may write in (their StdOut, scripts).
    pub fn jobs_dir(&self) -> PathBuf {
        self.dir.path().join("jobs")
    }

    /// `sbatch --parsable ARGS`: the new job's id.
    pub fn sbatch(&self, args: &[&str]) -> u64 {
        let out = self
            .command("sbatch")
            .arg("--parsable")
            .args(args)
            .current_dir(self.jobs_dir())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        said.trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "sbatch {args:?} failed: {} {}",
                    said,
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    }

    /// Runs a client command, asserting that it succeeded.
    pub fn run(&self, program: &str, args: &[&str]) -> Output {
        let out = self.command(program).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Slurm's own word on job `id` (from `squeue --json`), if it lists it.
    pub fn job(&self, id: u64) -> Option<Value> {
        let out = self.command("squeue").arg("--json").output().unwrap();
        let value: Value = serde_json::from_slice(&out.stdout).ok()?;
        value["jobs"]
            .as_array()?
            .iter()
            .find(|job| job["job_id"].as_u64() == Some(id))
            .cloned()
    }

    /// Waits until Slurm lists job `id` in one of `states`, at most `within`.
    pub fn wait_for_state(&self, id: u64, states: &[&str], within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            if let Some(job) = self.job(id)
                && states.contains(&job["job_state"].as_str().unwrap_or(""))
            {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "Slurm job {id} never reached {states:?}: {:?}\n{}",
                self.job(id),
                self.log("slurmctld.log")
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Cancels every job, waits for their processes to end, and stops the daemons.
    pub fn stop(&self) {
        let has_controller = self.daemons.lock().unwrap().slurmctld.is_some();
        if has_controller {
            let out = self.command("squeue").args(["-h", "-o", "%A"]).output();
            let ids: Vec<String> = out
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .split_whitespace()
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            if !ids.is_empty() {
                let _ = self.command("scancel").args(&ids).output();
                let deadline = Instant::now() + Duration::from_secs(20);
                while Instant::now() < deadline {
                    let left = self
                        .command("squeue")
                        .args(["-h", "-t", "RUNNING,COMPLETING,SUSPENDED", "-o", "%A"])
                        .output()
                        .map(|o| !o.stdout.is_empty())
                        .unwrap_or(false);
                    if !left {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        let mut daemons = self.daemons.lock().unwrap();
        stop_child(daemons.slurmd.take());
        stop_child(daemons.slurmctld.take());
        stop_child(daemons.munged.take());
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// SIGTERM, then SIGKILL after a few seconds; always reaped.
fn stop_child(child: Option<Child>) {
    let Some(mut child) = child else {
        return;
    };
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// This machine's short host name: slurmd takes it as its node name.
fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().split('.').next().unwrap_or_default().to_string())
        .expect("this machine's host name")
}
