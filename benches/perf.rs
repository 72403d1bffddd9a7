//! The performance record: every figure of the performance table (docs/performance.md), each measured
//! side by side with its floor in the same run, as medians of several runs (latencies as p99
//! of many samples), printed with its target and PASS or FAIL.
//!
//! Run with `cargo bench --bench perf` (Cargo builds the binary in release). It is a report:
//! it exits 0 whether or not a target is met, and 1 only when it cannot measure.
//!
//! | measure | target | floor |
//! |---|---|---|
//! | `mihari check --json` over 1,000 jobs (lock, log, 2,000-line progress file each) | at most 1.5x the floor | `wc -l` over the 1,000 progress files, then `stat` over the 2,000 lock and log files: two processes, timed together |
//! | RSS (VmHWM) of `mihari tui` with those 1,000 jobs in a 120x40 pty, after the first full screen and after ~10 s of activity | at most 30 MB | the same dashboard on an empty jobs file, at the same moments |
//! | the last 200 lines of a 10 GiB (sparse) log, `probe::tail::tail_lines` in-process, 256 calls back to back, per call (dropping the lines is the caller's, printed apart) | at most 1.2x `tail -n 200` | `tail`'s own work per file, its process start removed: (`tail -q -n 200 F` x 256 - `tail -q -n 200 F` x 1) / 255; also printed: one `tail` run minus one on a tiny file, and a minimal in-process tail |
//! | idle CPU (schedstat, every thread) of the dashboard and of the watcher, 100 quiet jobs, one 60 s window, side by side (the median of its six slices is printed too) | at most 0.05 % of one core each | a dashboard on an empty jobs file, in the same window |
//! | a holder's death -> DEAD_LOCK_STALE on the 1,000-job dashboard | p99 at most 100 ms | a key -> its redraw on the same dashboard |
//! | a stall deadline (freshest reading + stall_sec 2) -> STALLED on screen | p99 at most 100 ms | how late the bench's own timer wakes for the same deadline |
//! | a change -> the `state-changed` event in a running watcher's store (1,000 jobs) | p99 at most 100 ms | the bench's own inotify on the changed folder, or its own reap of the killed holder |
//! | `mihari check --json` over 1,000 jobs declared by `process.cmdline`, 1,000 more processes running (`procscan`) | at most 1.5x the floor | `ps -e -o pid=,lstart=,args=` in the same run |
//! | the watcher's Prometheus textfile for the 1,000 jobs (`textfile`): the exposition rendered and written (temp file, fsync, rename) | at most 20 ms | the same bytes written the same way by the bench (`fs::write` + fsync + rename) |
//! | `mihari check --json` on one job with `log_progress: tqdm` whose 1 GiB log ends in tqdm frames (`log_progress`) | at most 1.5x the floor | the same check on a 1 MiB log with the same ending, in the same run |
//! | a farm of 10,000 such jobs (`farm`): `mihari check --json`; the dashboard's first full frame (from its start until the header counts every job) and its RSS then and after the activity, and with the jobs file just saved (its YAML read again, no kept parse matching: by the quick reader, and behind a `---` marker the quick reader declines, by serde-saphyr); the idle window with every job quiet, opened once the watcher's first pass has recorded a `state-changed` for every job and every file written is over a minute old (the screen shows a younger age to the second) (the whole window and its median slice are both printed) | check at most 1.0x the floor; first frame at most 0.5 s, the file just saved too; RSS at most 80 MB; idle at most 0.05 % | the same floors as above |
//! | a death on a remote host on the fleet screen (`fleet`): a job's process killed on one of two hosts over a loopback sshd, 20 samples | p99 at most 500 ms | the same death on that host's local dashboard |
//! | a holder killed under a running watcher (`alert`): the death -> the watcher's textfile renamed saying DEAD_LOCK_STALE; the death -> `MihariRestartNeedsHuman` at a webhook through a real node_exporter, Prometheus (1 s scrape and evaluation) and Alertmanager with the shipped rules and example; the watcher stopped -> its textfile, -> `MihariWatcherDown` | textfile at most 1 s; webhook at most 1.1x the floor | the bench's reap of the holder; scrape + evaluation + the rule's `for:` + `group_wait` |
//! | 20 hosts (20 jobs files over one loopback sshd): the fleet screen's first merged frame, from its start until the header counts every host's job, cold and over a ControlMaster, as the bench's user and as a fleet account whose login shell is /bin/sh | at most 2 s | twenty `ssh HOST true` at once, and `mihari fleet check --json` on the same hosts |
//! | `mihari check --json` on one job whose store took a year of heartbeats (`heartbeats`: by default one every 10 s, 3,153,600 rows written by `sqlite3` as a store that grew before heartbeats were pruned holds them, then pruned by the job's next heartbeats, whose count and slowest are printed) | at most 1.2x the floor | the same check on a store with one heartbeat; also printed: `sqlite3` reading the newest row |
//! | a write storm (`storm`): the fleet's 1,000 logs each get a line 10 times a second for 30 s (10,000 writes a second) while a watcher and a dashboard run on the fleet; the CPU of each (schedstat, every thread), the dashboard's frames a second, and 20 deaths of a holder during it | CPU at most 3x the floor each; at most 10 frames a second; a death on screen p99 at most 100 ms | `inotifywait -m -e modify,attrib,close_write,move,create,delete` over the same folders, receiving the same events, output discarded; the bench's own reap of the killed holder |
//! | `mihari run` of a job printing 1,000,000 lines as fast as it can (`python3 -u`, a write per line), its output copied into the log (`run_output`); and of the same job paced at 100,000 lines a second for 3 s | wall time at most 1.5x the floor; CPU time (every process) and the CPU mihari adds to the paced job printed for information | the same job writing into a file itself, in the same run |
//! | `mihari check --json` over 500 jobs Slurm runs, 500 held batch jobs on a one-node cluster of the bench's own (`slurm`) | at most 1.5x the floor, and one `squeue` call | one bare `squeue --json` listing them, in the same run |
//! | a reload of the 1,000-job file while the dashboard is open (`reload`): a job appended, saved in place or by rename, 20 times | p99 at most 100 ms from the save to the screen counting the new job; no unchanged progress file counted again (the bytes the dashboard read per reload, `/proc/PID/io` rchar, against one progress file's size) | — |
//!
//! The fleet is a temporary folder with 1,000 jobs (`job0000`..`job0999`), each with a JSON
//! lock held by a live `sleep`, a one-line log and a progress file of 2,000 JSONL lines, a
//! stall threshold of a day: all RUNNING. A second jobs file adds three measured jobs with the
//! owner `measured`: `held` (a live holder, killed and replaced), `staller` (a live holder and
//! a progress file only, `stall_sec: 2`) and `flip` (no holder; one more progress line makes it
//! COMPLETE, truncating it away makes it SHOULD_BE_RUNNING). The dashboard types the filter
//! `/measured⏎` so the three rows are on screen. The idle window uses its own 100 quiet jobs,
//! like `benches/dashboard.rs`.
//!
//! Knobs (environment), defaults give the performance table's figures:
//! - `MIHARI_BENCH_ONLY`: a comma list of
//!   `check,rss,tail,idle,screen,watcher,procscan,farm,textfile,log_progress,reload,fleet,heartbeats,kernel,run_output,slurm,alert,binary,storm`
//!   (default all).
//! - `MIHARI_BENCH_ALERT_FOR` (unset): `alert` with both alerts' `for:` and Alertmanager's
//!   `group_wait` set to this (e.g. `1s`) instead of as shipped, to try the part quickly.
//! - `MIHARI_BENCH_STORM_SECS` (30), `MIHARI_BENCH_STORM_RATE` (10),
//!   `MIHARI_BENCH_STORM_KILLS` (20): the write storm's length, lines a second per log, and
//!   deaths during it.
//! - `MIHARI_BENCH_HEARTBEATS` (3153600): the heartbeats of `heartbeats` (a year at one every
//!   10 s; 31536000 is a year at one a second).
//! - `MIHARI_BENCH_RUN_LINES` (1000000): the lines of `run_output`'s job.
//! - `MIHARI_BENCH_SLURM_JOBS` (500): the Slurm jobs of `slurm`.
//! - `MIHARI_BENCH_LOG_GIB` (1): the big log of `log_progress`.
//! - `MIHARI_BENCH_FARM_JOBS` (10000): the farm's jobs (its RSS runs, activity and idle
//!   window follow the knobs below).
//! - `MIHARI_BENCH_RUNS` (7): runs per median for check and the in-process refresh.
//! - `MIHARI_BENCH_JOBS` (1000), `MIHARI_BENCH_LINES` (2000): the fleet; procscan's jobs and
//!   processes too.
//! - `MIHARI_BENCH_RSS_RUNS` (3), `MIHARI_BENCH_ACTIVITY_SECS` (10): the RSS runs.
//! - `MIHARI_BENCH_IDLE_SECS` (60): the idle window.
//! - `MIHARI_BENCH_KILLS` (60), `MIHARI_BENCH_STALLS` (30): the dashboard's latencies.
//! - `MIHARI_BENCH_WATCH_FLIPS` (60), `MIHARI_BENCH_WATCH_KILLS` (30): the watcher's.
//! - `MIHARI_BENCH_TAIL_GIB` (10), `MIHARI_BENCH_TAIL_RUNS` (201): the tail.
//! - `MIHARI_BENCH_RELOADS` (20): the saves of the reload part.
//! - `MIHARI_BENCH_DIR`: where the temporary folders go (default: the system's).

use std::collections::HashSet;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime};

use chrono::Utc;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use mihari::core::Reading;
use mihari::engine::Engine;
use mihari::probe::tail::tail_lines;

#[path = "common/mod.rs"]
mod common;
use common::*;

#[path = "parts/alert.rs"]
mod alert_part;
#[path = "../tests/common/alerting.rs"]
mod alerting;
#[path = "parts/fleet.rs"]
mod fleet_part;
#[path = "parts/kernel.rs"]
mod kernel_part;
#[path = "parts/run_output.rs"]
mod run_output_part;
#[path = "parts/storm.rs"]
mod storm_part;

#[path = "parts/slurm.rs"]
mod slurm_part;

/// The owner of the three measured jobs, and the dashboard filter that shows exactly them.
const MEASURED: &str = "measured";
/// Lines in flip's progress file while it should be running; one more completes it.
const FLIP_LINES: u64 = 2000;
const STALL_SEC: u64 = 2;
const QUIET_JOBS: usize = 100;
/// How long one change may take to show before it counts as missed.
const GIVE_UP: Duration = Duration::from_secs(5);
const TAIL_LINES: usize = 200;
/// Copies of the file one `tail` process is given to measure its work per file.
const TAIL_COPIES: usize = 256;

const CHECK_TARGET_RATIO: f64 = 1.5;
/// A farm of 10,000 jobs: `check` at most the floor, the dashboard's first frame in half a
/// second, its memory under 80 MB.
const FARM_CHECK_TARGET_RATIO: f64 = 1.0;
const FARM_FIRST_FRAME_TARGET: Duration = Duration::from_millis(500);
const FARM_RSS_TARGET_BYTES: u64 = 80_000_000;
const PROCSCAN_TARGET_RATIO: f64 = 1.5;
/// `check` on a 1 GiB log ending in tqdm frames: at most 1.5x the same on a 1 MiB log.
const LOG_PROGRESS_TARGET_RATIO: f64 = 1.5;
const RSS_TARGET_BYTES: u64 = 30_000_000;
const TAIL_TARGET_RATIO: f64 = 1.2;
const IDLE_TARGET_PERCENT: f64 = 0.05;
const LATENCY_TARGET: Duration = Duration::from_millis(100);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("perf bench failed: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The knobs, read once.
#[derive(Clone)]
struct Knobs {
    only: Option<HashSet<String>>,
    runs: usize,
    jobs: usize,
    lines: usize,
    rss_runs: usize,
    activity: Duration,
    idle: Duration,
    kills: usize,
    stalls: usize,
    watch_flips: usize,
    watch_kills: usize,
    tail_gib: u64,
    tail_runs: usize,
    farm_jobs: usize,
    dir: Option<PathBuf>,
}

impl Knobs {
    fn read() -> Result<Knobs, String> {
        let only = std::env::var("MIHARI_BENCH_ONLY").ok().map(|text| {
            text.split(',')
                .map(|part| part.trim().to_string())
                .filter(|part| !part.is_empty())
                .collect()
        });
        Ok(Knobs {
            only,
            runs: env_u64("MIHARI_BENCH_RUNS", 7)?.max(1) as usize,
            jobs: env_u64("MIHARI_BENCH_JOBS", 1000)?.max(1) as usize,
            lines: env_u64("MIHARI_BENCH_LINES", 2000)? as usize,
            rss_runs: env_u64("MIHARI_BENCH_RSS_RUNS", 3)?.max(1) as usize,
            activity: Duration::from_secs(env_u64("MIHARI_BENCH_ACTIVITY_SECS", 10)?),
            idle: Duration::from_secs(env_u64("MIHARI_BENCH_IDLE_SECS", 60)?.max(1)),
            kills: env_u64("MIHARI_BENCH_KILLS", 60)? as usize,
            stalls: env_u64("MIHARI_BENCH_STALLS", 30)? as usize,
            watch_flips: env_u64("MIHARI_BENCH_WATCH_FLIPS", 60)? as usize,
            watch_kills: env_u64("MIHARI_BENCH_WATCH_KILLS", 30)? as usize,
            tail_gib: env_u64("MIHARI_BENCH_TAIL_GIB", 10)?.max(1),
            tail_runs: env_u64("MIHARI_BENCH_TAIL_RUNS", 201)?.max(3) as usize,
            farm_jobs: env_u64("MIHARI_BENCH_FARM_JOBS", 10_000)?.max(1) as usize,
            dir: std::env::var_os("MIHARI_BENCH_DIR").map(PathBuf::from),
        })
    }

    fn wants(&self, part: &str) -> bool {
        self.only.as_ref().is_none_or(|only| only.contains(part))
    }

    fn tempdir(&self) -> Result<tempfile::TempDir, String> {
        match &self.dir {
            Some(base) => tempfile::tempdir_in(base),
            None => tempfile::tempdir(),
        }
        .map_err(|e| format!("cannot make a temporary folder: {e}"))
    }
}

fn run() -> Result<(), String> {
    let knobs = Knobs::read()?;
    let exe = Path::new(env!("CARGO_BIN_EXE_mihari"));
    println!("mihari perf bench: {}", exe.display());
    println!("machine: {}", machine());
    let mut table = Table::default();
    if knobs.wants("binary") {
        measure_binary(exe, &mut table)?;
    }

    let fleet_needed = ["check", "rss", "screen", "watcher", "textfile"]
        .iter()
        .any(|part| knobs.wants(part));
    if fleet_needed {
        let mut holders = Holders::default();
        let started = Instant::now();
        let mut fleet = Fleet::create(&knobs, &mut holders)?;
        println!(
            "fleet: {} jobs ({} lines per progress file) in {}, written in {:.1} s",
            knobs.jobs,
            knobs.lines,
            fleet.root.path().display(),
            started.elapsed().as_secs_f64()
        );
        if knobs.wants("check") {
            measure_check(&knobs, exe, &fleet, CHECK_TARGET_RATIO, &mut table)?;
        }
        if knobs.wants("rss") {
            measure_rss(&knobs, exe, &fleet, &mut table)?;
        }
        if knobs.wants("screen") {
            measure_screen(&knobs, exe, &mut fleet, &mut holders, &mut table)?;
        }
        if knobs.wants("watcher") {
            measure_watcher(&knobs, exe, &mut fleet, &mut holders, &mut table)?;
        }
        if knobs.wants("textfile") {
            measure_textfile(&knobs, &fleet, &mut table)?;
        }
        drop(holders);
    }
    if knobs.wants("procscan") {
        measure_procscan(&knobs, exe, &mut table)?;
    }
    if knobs.wants("farm") {
        measure_farm(&knobs, exe, &mut table)?;
    }
    if knobs.wants("log_progress") {
        measure_log_progress(&knobs, exe, &mut table)?;
    }
    if knobs.wants("reload") {
        measure_reload(&knobs, exe, &mut table)?;
    }
    if knobs.wants("heartbeats") {
        measure_heartbeats(&knobs, exe, &mut table)?;
    }
    if knobs.wants("tail") {
        measure_tail(&knobs, &mut table)?;
    }
    if knobs.wants("fleet") {
        fleet_part::measure_fleet(&knobs, exe, &mut table)?;
    }
    if knobs.wants("kernel") {
        kernel_part::measure_kernel(&knobs, exe, &mut table)?;
    }
    if knobs.wants("run_output") {
        run_output_part::measure_run_output(&knobs, exe, &mut table)?;
    }
    if knobs.wants("slurm") {
        slurm_part::measure_slurm(&knobs, exe, &mut table)?;
    }
    if knobs.wants("alert") {
        alert_part::measure_alert(&knobs, exe, &mut table)?;
    }
    if knobs.wants("storm") {
        storm_part::measure_storm(&knobs, exe, &mut table)?;
    }
    if knobs.wants("idle") {
        measure_idle(&knobs, exe, &mut table)?;
    }
    table.print();
    Ok(())
}

/// `nproc` and the CPU model, for the record.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_string())
        .unwrap_or_default();
    format!("{cores} cores, {model}, Linux {kernel}")
}

// ---------------------------------------------------------------------------------------------
// The result table

#[derive(Default)]
struct Table {
    rows: Vec<TableRow>,
}

struct TableRow {
    measure: String,
    target: String,
    floor: String,
    figure: String,
    ratio: String,
    /// `None` for a figure given for information.
    pass: Option<bool>,
}

impl Table {
    fn add(
        &mut self,
        measure: impl Into<String>,
        target: impl Into<String>,
        floor: impl Into<String>,
        figure: impl Into<String>,
        ratio: impl Into<String>,
        pass: Option<bool>,
    ) {
        self.rows.push(TableRow {
            measure: measure.into(),
            target: target.into(),
            floor: floor.into(),
            figure: figure.into(),
            ratio: ratio.into(),
            pass,
        });
    }

    fn print(&self) {
        let verdict = |pass: Option<bool>| match pass {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "info",
        };
        println!("\n== results (medians; latencies are p99 of all samples)\n");
        println!("| measure | target | floor | mihari | ratio | result |");
        println!("|---|---|---|---|---|---|");
        for row in &self.rows {
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                row.measure,
                row.target,
                row.floor,
                row.figure,
                row.ratio,
                verdict(row.pass)
            );
        }
        let failed = self.rows.iter().filter(|r| r.pass == Some(false)).count();
        let judged = self.rows.iter().filter(|r| r.pass.is_some()).count();
        println!("\n{} of {judged} targets met", judged - failed);
    }
}

/// One progress line, as a collector would write it.
fn progress_line(i: u64) -> String {
    format!("{{\"i\":{i},\"file\":\"shard-{i:06}.parquet\",\"rows\":40000,\"ok\":true}}\n")
}

fn progress_lines(n: u64) -> String {
    (0..n).map(progress_line).collect()
}

// ---------------------------------------------------------------------------------------------
// The fleet: 1,000 jobs, and three measured ones in a second jobs file

struct Fleet {
    root: tempfile::TempDir,
    /// The 1,000 jobs.
    jobs_yaml: PathBuf,
    /// The 1,000 jobs and the three measured ones.
    live_yaml: PathBuf,
    /// No jobs at all: the floor of the dashboard's RSS.
    empty_yaml: PathBuf,
    /// Relative to `root`.
    progress: Vec<String>,
    locks: Vec<String>,
    logs: Vec<String>,
    held_lock: PathBuf,
    held_pid: u32,
    staller_progress: PathBuf,
    flip_progress: PathBuf,
    measured_dir: PathBuf,
    /// Where locks are written before they are renamed into place: not a watched folder.
    staging: PathBuf,
}

impl Fleet {
    fn create(knobs: &Knobs, holders: &mut Holders) -> Result<Fleet, String> {
        let root = knobs.tempdir()?;
        let dir = root.path().to_path_buf();
        for sub in ["jobs", "measured", "staging", "empty"] {
            fs::create_dir(dir.join(sub)).map_err(|e| format!("mkdir {sub}: {e}"))?;
        }
        let body = progress_lines(knobs.lines as u64);
        let mut yaml = String::from("settings:\n  state_dir: ./state\njobs:\n");
        let (mut progress, mut locks, mut logs) = (Vec::new(), Vec::new(), Vec::new());
        for n in 0..knobs.jobs {
            let id = format!("job{n:04}");
            let (lock, log, prog) = (
                format!("jobs/{id}.lock"),
                format!("jobs/{id}.log"),
                format!("jobs/{id}.progress"),
            );
            yaml.push_str(&format!(
                "  - id: {id}\n    owner: team{}\n    lock: {lock}\n    log: {log}\n    \
                 progress_file: {prog}\n    stall_sec: 86400\n    expected_total: 100000000\n    \
                 should_run_when: [not_complete]\n",
                n % 7
            ));
            write(&dir.join(&log), b"worker started\n")?;
            write(&dir.join(&prog), body.as_bytes())?;
            let (pid, ticks) = holders.spawn()?;
            write(&dir.join(&lock), json_lock(pid, ticks).as_bytes())?;
            progress.push(prog);
            locks.push(lock);
            logs.push(log);
        }
        let jobs_yaml = dir.join("jobs.yaml");
        write(&jobs_yaml, yaml.as_bytes())?;

        yaml.push_str(&format!(
            "  - id: held\n    owner: {MEASURED}\n    lock: measured/held.lock\n    \
             log: measured/held.log\n    progress_file: measured/held.progress\n    \
             stall_sec: 86400\n    expected_total: 100000000\n    \
             should_run_when: [not_complete]\n\
             \x20 - id: staller\n    owner: {MEASURED}\n    lock: measured/staller.lock\n    \
             progress_file: measured/staller.progress\n    stall_sec: {STALL_SEC}\n    \
             expected_total: 100000000\n    should_run_when: [not_complete]\n\
             \x20 - id: flip\n    owner: {MEASURED}\n    lock: measured/flip.lock\n    \
             progress_file: measured/flip.progress\n    stall_sec: 86400\n    \
             expected_total: {}\n    should_run_when: [not_complete]\n",
            FLIP_LINES + 1
        ));
        let live_yaml = dir.join("live.yaml");
        write(&live_yaml, yaml.as_bytes())?;
        let measured = dir.join("measured");
        write(&measured.join("held.log"), b"worker started\n")?;
        write(&measured.join("held.progress"), body.as_bytes())?;
        let (held_pid, ticks) = holders.spawn()?;
        write(
            &measured.join("held.lock"),
            json_lock(held_pid, ticks).as_bytes(),
        )?;
        write(&measured.join("staller.progress"), body.as_bytes())?;
        let (pid, ticks) = holders.spawn()?;
        write(
            &measured.join("staller.lock"),
            json_lock(pid, ticks).as_bytes(),
        )?;
        write(
            &measured.join("flip.progress"),
            progress_lines(FLIP_LINES).as_bytes(),
        )?;

        let empty_yaml = dir.join("empty/jobs.yaml");
        write(&empty_yaml, b"settings:\n  state_dir: ./state\njobs: []\n")?;
        Ok(Fleet {
            jobs_yaml,
            live_yaml,
            empty_yaml,
            progress,
            locks,
            logs,
            held_lock: measured.join("held.lock"),
            held_pid,
            staller_progress: measured.join("staller.progress"),
            flip_progress: measured.join("flip.progress"),
            staging: dir.join("staging"),
            measured_dir: measured,
            root,
        })
    }

    /// Replaces held's lock atomically (written in the staging folder, then renamed).
    fn replace_held_lock(&mut self, pid: u32, ticks: u64) -> Result<(), String> {
        let temp = self.staging.join("held.lock");
        write(&temp, json_lock(pid, ticks).as_bytes())?;
        fs::rename(&temp, &self.held_lock).map_err(|e| format!("rename held.lock: {e}"))?;
        self.held_pid = pid;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// mihari check over 1,000 jobs

fn measure_check(
    knobs: &Knobs,
    exe: &Path,
    fleet: &Fleet,
    target: f64,
    table: &mut Table,
) -> Result<(), String> {
    let root = fleet.root.path();
    let expected_lines = (knobs.jobs * knobs.lines) as u64;
    // Warm the page cache and check the floor and mihari agree before timing anything.
    let (lines, _) = floor_wc_and_stat(root, fleet)?;
    if lines != expected_lines {
        return Err(format!(
            "wc -l counted {lines} lines, {expected_lines} were written"
        ));
    }
    let (done, code, _) = run_check(exe, &fleet.jobs_yaml)?;
    if done != expected_lines || code != 0 {
        return Err(format!(
            "check saw {done} lines done (exit {code}), {expected_lines} were written"
        ));
    }
    let mut floors = Vec::new();
    let mut checks = Vec::new();
    for _ in 0..knobs.runs {
        floors.push(floor_wc_and_stat(root, fleet)?.1);
        checks.push(run_check(exe, &fleet.jobs_yaml)?.2);
    }
    let floor = median(&mut floors);
    let check = median(&mut checks);
    let ratio = check.as_secs_f64() / floor.as_secs_f64();
    println!(
        "\ncheck over {} jobs, {} runs alternating: floor (wc -l + stat) {}, mihari check --json {}",
        knobs.jobs,
        knobs.runs,
        ms(floor),
        ms(check)
    );
    table.add(
        format!("`mihari check --json`, {} jobs", knobs.jobs),
        format!("≤ {target}× floor"),
        format!("`wc -l` + `stat` {}", ms(floor)),
        ms(check),
        format!("{ratio:.2}×"),
        Some(ratio <= target),
    );

    // The same pass in-process, for information: the first gather, then warm ones.
    let config = mihari::config::load(&fleet.jobs_yaml).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut engine = Engine::new(config);
    let snapshot = engine.refresh(None, Utc::now());
    let first = started.elapsed();
    if snapshot.list.rows().count() != knobs.jobs {
        return Err("the in-process engine lost jobs".to_string());
    }
    let mut warm = Vec::new();
    for _ in 0..knobs.runs {
        let started = Instant::now();
        let snapshot = engine.refresh(None, Utc::now());
        warm.push(started.elapsed());
        drop(snapshot);
    }
    let warm = median(&mut warm);
    println!(
        "in-process Engine: new + first refresh {}, warm refresh (median of {}) {}",
        ms(first),
        knobs.runs,
        ms(warm)
    );
    table.add(
        format!("  in-process `Engine::refresh`, {} jobs", knobs.jobs),
        "—",
        "—",
        format!("first {}; warm {}", ms(first), ms(warm)),
        "—",
        None,
    );
    Ok(())
}

/// The watcher's textfile for the fleet's jobs: what one rewrite costs it (render the
/// exposition, write it to a temp file, fsync, rename), against the same bytes written the
/// same way by the bench.
fn measure_textfile(knobs: &Knobs, fleet: &Fleet, table: &mut Table) -> Result<(), String> {
    use mihari::effect::textfile::Textfile;
    use mihari::render::prometheus::{Writer, exposition};
    let config = mihari::config::load(&fleet.jobs_yaml).map_err(|e| e.to_string())?;
    let jobs = config.jobs.clone();
    let mut engine = Engine::new(config);
    let snapshot = engine.refresh(None, Utc::now());
    let out = knobs.tempdir()?;
    let path = out.path().join("mihari.prom");
    let mut textfile = Textfile::new(&path);
    let floor_path = out.path().join("floor.prom");
    let floor_temp = out.path().join(".floor.prom.tmp");
    let runs = (knobs.runs * 7).max(21);
    let mut writes = Vec::new();
    let mut floors = Vec::new();
    let mut bytes = 0;
    for _ in 0..runs {
        let started = Instant::now();
        let text = exposition(&snapshot, &jobs, Writer::Watcher { at: Utc::now() });
        textfile.write(&text)?;
        writes.push(started.elapsed());
        bytes = text.len();
        let started = Instant::now();
        let mut file = File::create(&floor_temp).map_err(|e| e.to_string())?;
        file.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
        file.sync_data().map_err(|e| e.to_string())?;
        fs::rename(&floor_temp, &floor_path).map_err(|e| e.to_string())?;
        floors.push(started.elapsed());
    }
    let written = fs::read_to_string(&path).map_err(|e| e.to_string())?;
    if written.matches("mihari_job_state{").count() != knobs.jobs * 8 {
        return Err("the textfile does not hold every job's states".to_string());
    }
    let write = median(&mut writes);
    let floor = median(&mut floors);
    println!(
        "\ntextfile for {} jobs ({} KiB), {runs} rewrites: mihari {} (median), floor (write + fsync + rename) {}",
        knobs.jobs,
        bytes / 1024,
        ms(write),
        ms(floor)
    );
    table.add(
        format!(
            "the watcher's textfile, {} jobs ({} KiB)",
            knobs.jobs,
            bytes / 1024
        ),
        "≤ 20 ms",
        format!("write + fsync + rename {}", ms(floor)),
        ms(write),
        format!("{:.2}×", write.as_secs_f64() / floor.as_secs_f64()),
        Some(write <= Duration::from_millis(20)),
    );
    Ok(())
}

/// The floor: `wc -l` over every progress file, then `stat` over every lock and log file, as
/// two processes timed together. Returns the lines `wc` counted and the time.
fn floor_wc_and_stat(root: &Path, fleet: &Fleet) -> Result<(u64, Duration), String> {
    let started = Instant::now();
    let wc = Command::new("wc")
        .arg("-l")
        .args(&fleet.progress)
        .current_dir(root)
        .env("LC_ALL", "C")
        .output()
        .map_err(|e| format!("cannot run wc: {e}"))?;
    let stat = Command::new("stat")
        .args(&fleet.locks)
        .args(&fleet.logs)
        .current_dir(root)
        .env("LC_ALL", "C")
        .output()
        .map_err(|e| format!("cannot run stat: {e}"))?;
    let took = started.elapsed();
    if !wc.status.success() || !stat.status.success() {
        return Err(format!("wc: {}, stat: {}", wc.status, stat.status));
    }
    let text = String::from_utf8_lossy(&wc.stdout);
    let total = text
        .lines()
        .last()
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or("cannot read wc's total")?;
    Ok((total, took))
}

/// One `mihari check --json`: the sum of `done`, its exit code, its wall time.
fn run_check(exe: &Path, config: &Path) -> Result<(u64, i32, Duration), String> {
    let started = Instant::now();
    let output = Command::new(exe)
        .arg("check")
        .arg("--json")
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run mihari check: {e}"))?;
    let took = started.elapsed();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| {
        format!(
            "check's output is not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    let done = report["jobs"].as_array().map_or(0, |jobs| {
        jobs.iter().filter_map(|j| j["done"].as_u64()).sum()
    });
    Ok((done, output.status.code().unwrap_or(-1), took))
}

// ---------------------------------------------------------------------------------------------
// A farm of 10,000 jobs

/// The farm: the fleet at `MIHARI_BENCH_FARM_JOBS` (10,000) jobs. `mihari check --json`
/// against the same coreutils floor (target: at most the floor), the dashboard's first full
/// frame (from its start until the header counts every job) and its RSS then and after the
/// activity of the RSS runs, and an idle window with every job quiet.
fn measure_farm(knobs: &Knobs, exe: &Path, table: &mut Table) -> Result<(), String> {
    let knobs = Knobs {
        jobs: knobs.farm_jobs,
        ..knobs.clone()
    };
    let mut holders = Holders::default();
    let started = Instant::now();
    let fleet = Fleet::create(&knobs, &mut holders)?;
    println!(
        "\nfarm: {} jobs ({} lines per progress file), written in {:.1} s",
        knobs.jobs,
        knobs.lines,
        started.elapsed().as_secs_f64()
    );
    measure_check(&knobs, exe, &fleet, FARM_CHECK_TARGET_RATIO, table)?;

    let header = format!("{} jobs", knobs.jobs);
    // Cold: the jobs file just saved (the same bytes written again), so no kept parse of it
    // matches and the dashboard parses 10,000 jobs of YAML before its first frame. The runs
    // after it start on the file as saved, which that dashboard's load kept.
    // The file is plain YAML, which the loader's quick reader reads; the same jobs behind a
    // `---` document marker are declined to serde-saphyr, and measured too.
    let bytes = fs::read(&fleet.jobs_yaml).map_err(|e| format!("read jobs file: {e}"))?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let quick = mihari::config::quick_reader_reads(&text);
    let declined_text = format!("---\n{text}");
    if mihari::config::quick_reader_reads(&declined_text) {
        return Err("the quick reader read a file with a document marker".to_string());
    }
    let (mut colds, mut cold_rsses, mut declineds) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..knobs.rss_runs {
        for (declined, written) in [(false, &text), (true, &declined_text)] {
            fs::write(&fleet.jobs_yaml, written).map_err(|e| format!("rewrite jobs file: {e}"))?;
            let began = Instant::now();
            let mut cold = Dashboard::spawn(exe, &fleet.jobs_yaml)?;
            cold.wait_until(Duration::from_secs(60), |s| screen_contains(s, &header))?
                .ok_or_else(|| format!("no first screen within 60 s:\n{}", cold.dump()))?;
            let frame = began.elapsed();
            drain_all(&mut [&mut cold], Duration::from_millis(300))?;
            let rss = vm_hwm_bytes(cold.pid())?;
            cold.quit()?;
            println!(
                "farm run {}, jobs file just saved ({}): first full frame {}, RSS {} then",
                run + 1,
                if declined {
                    "behind '---': read by serde-saphyr"
                } else if quick {
                    "plain YAML: read by the quick reader"
                } else {
                    "declined by the quick reader"
                },
                ms(frame),
                mb(rss)
            );
            if declined {
                declineds.push(frame);
            } else {
                colds.push(frame);
                cold_rsses.push(rss);
            }
        }
    }
    // The runs below start on the file as saved, whose load the last dashboard kept.
    fs::write(&fleet.jobs_yaml, &text).map_err(|e| format!("rewrite jobs file: {e}"))?;
    let mut warm_up = Dashboard::spawn(exe, &fleet.jobs_yaml)?;
    warm_up
        .wait_until(Duration::from_secs(60), |s| screen_contains(s, &header))?
        .ok_or_else(|| format!("no first screen within 60 s:\n{}", warm_up.dump()))?;
    warm_up.quit()?;
    let (cold_frame, cold_rss, declined_frame) = (
        median(&mut colds),
        median_u64(&mut cold_rsses),
        median(&mut declineds),
    );
    let (mut frames, mut first, mut after) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..knobs.rss_runs {
        let began = Instant::now();
        let mut dash = Dashboard::spawn(exe, &fleet.jobs_yaml)?;
        let mut floor = Dashboard::spawn(exe, &fleet.empty_yaml)?;
        dash.wait_until(Duration::from_secs(60), |s| screen_contains(s, &header))?
            .ok_or_else(|| format!("no first screen within 60 s:\n{}", dash.dump()))?;
        frames.push(began.elapsed());
        drain_all(&mut [&mut dash, &mut floor], Duration::from_millis(300))?;
        first.push(vm_hwm_bytes(dash.pid())?);
        let stats = activity(&knobs, &fleet, &mut dash, &mut floor, run)?;
        after.push(vm_hwm_bytes(dash.pid())?);
        println!(
            "farm run {}: first full frame {}, RSS {} then, {} after {:.0} s of activity ({stats})",
            run + 1,
            ms(frames[run]),
            mb(first[run]),
            mb(after[run]),
            knobs.activity.as_secs_f64()
        );
        dash.quit()?;
        floor.quit()?;
    }
    let frame = median(&mut frames);
    let (first, after) = (median_u64(&mut first), median_u64(&mut after));
    table.add(
        format!("dashboard's first full frame, {} jobs", knobs.jobs),
        format!("≤ {}", ms(FARM_FIRST_FRAME_TARGET)),
        "—",
        ms(frame),
        "—",
        Some(frame <= FARM_FIRST_FRAME_TARGET),
    );
    table.add(
        format!(
            "  the same, the jobs file just saved (its {} jobs read again{})",
            knobs.jobs,
            if quick {
                " by the quick reader"
            } else {
                ", declined by the quick reader"
            }
        ),
        format!("≤ {}", ms(FARM_FIRST_FRAME_TARGET)),
        "—",
        format!("{}; RSS {} then", ms(cold_frame), mb(cold_rss)),
        "—",
        Some(cold_frame <= FARM_FIRST_FRAME_TARGET),
    );
    table.add(
        "  the same, just saved behind a `---` marker the quick reader declines (serde-saphyr reads it)",
        "—",
        "—",
        ms(declined_frame),
        "—",
        None,
    );
    for (when, bytes) in [
        ("first full frame".to_string(), first),
        (
            format!("after {:.0} s of activity", knobs.activity.as_secs_f64()),
            after,
        ),
    ] {
        table.add(
            format!("dashboard RSS, {} jobs, {when}", knobs.jobs),
            format!("≤ {}", mb(FARM_RSS_TARGET_BYTES)),
            "—",
            mb(bytes),
            "—",
            Some(bytes <= FARM_RSS_TARGET_BYTES),
        );
    }
    // The activity wrote to some of them: the window waits for those to age past the
    // seconds display as well.
    let written = Instant::now();
    let result = idle_window(
        &knobs,
        exe,
        &fleet.jobs_yaml,
        &fleet.empty_yaml,
        knobs.jobs,
        written,
        table,
    );
    drop(holders);
    result
}

// ---------------------------------------------------------------------------------------------
// A reload of the jobs file while the dashboard is open

/// The 1,000-job fleet on a dashboard; `MIHARI_BENCH_RELOADS` (20) times a job with a
/// progress file of its own is appended to the jobs file (saved in place and by rename in
/// turn), and the time from the save to the header counting it is taken. What the dashboard
/// read meanwhile (`rchar` of `/proc/PID/io`) says whether unchanged progress files were
/// counted again: each is `MIHARI_BENCH_LINES` lines, so a full re-count of even one shows as
/// a reload reading more than one progress file's size beyond the jobs file itself.
fn measure_reload(knobs: &Knobs, exe: &Path, table: &mut Table) -> Result<(), String> {
    let reloads = env_u64("MIHARI_BENCH_RELOADS", 20)?.max(1) as usize;
    let mut holders = Holders::default();
    let fleet = Fleet::create(knobs, &mut holders)?;
    let root = fleet.root.path().to_path_buf();
    let mut yaml = fs::read_to_string(&fleet.jobs_yaml).map_err(|e| format!("jobs.yaml: {e}"))?;
    let progress_bytes = fs::metadata(root.join(&fleet.progress[0]))
        .map_err(|e| format!("progress file: {e}"))?
        .len();
    let mut dash = Dashboard::spawn(exe, &fleet.jobs_yaml)?;
    let header = format!("{} jobs", knobs.jobs);
    dash.wait_until(Duration::from_secs(60), |s| screen_contains(s, &header))?
        .ok_or_else(|| format!("no first screen within 60 s:\n{}", dash.dump()))?;
    drain_all(&mut [&mut dash], Duration::from_secs(2))?;
    let mut latencies = Latencies::default();
    let mut read_per_reload = Vec::new();
    for k in 0..reloads {
        let id = format!("reload{k:02}");
        let progress = format!("jobs/{id}.progress");
        write(&root.join(&progress), progress_lines(10).as_bytes())?;
        yaml.push_str(&format!(
            "  - id: {id}\n    owner: reload\n    progress_file: {progress}\n    \
             stall_sec: 86400\n    expected_total: 100\n    should_run_when: [not_complete]\n"
        ));
        let before = read_bytes(dash.pid())?;
        let started = Instant::now();
        if k % 2 == 0 {
            write(&fleet.jobs_yaml, yaml.as_bytes())?;
        } else {
            let temp = fleet.staging.join("jobs.yaml");
            write(&temp, yaml.as_bytes())?;
            {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(&temp, fs::Permissions::from_mode(0o600))
                    .map_err(|e| format!("chmod: {e}"))?;
            }
            fs::rename(&temp, &fleet.jobs_yaml).map_err(|e| format!("rename: {e}"))?;
        }
        let wanted = format!("{} jobs", knobs.jobs + k + 1);
        let seen = dash.wait_until(GIVE_UP, |s| screen_contains(s, &wanted))?;
        latencies.record(started, seen);
        drain_all(&mut [&mut dash], Duration::from_millis(300))?;
        read_per_reload.push(read_bytes(dash.pid())?.saturating_sub(before));
    }
    dash.quit()?;
    drop(holders);
    print_latencies(
        &format!("reload of a {}-job file on the open dashboard", knobs.jobs),
        &[("save -> the new job counted in the header", &latencies)],
    );
    let yaml_bytes = yaml.len() as u64;
    read_per_reload.sort_unstable();
    let most = read_per_reload.last().copied().unwrap_or(0);
    let median = read_per_reload[read_per_reload.len() / 2];
    // Beyond the jobs file itself (read once per load), more than one progress file's worth
    // of bytes would be a progress file counted again from its start.
    let recounted = most.saturating_sub(2 * yaml_bytes) / progress_bytes.max(1);
    println!(
        "  read by the dashboard per reload: median {} KB, most {} KB (jobs file {} KB, one \
         progress file {} KB): at most {recounted} unchanged progress files counted again",
        median / 1000,
        most / 1000,
        yaml_bytes / 1000,
        progress_bytes / 1000
    );
    let p99 = latencies.p99().unwrap_or(GIVE_UP);
    table.add(
        format!("reload of a {}-job file, save -> new screen", knobs.jobs),
        format!("p99 ≤ {}", ms(LATENCY_TARGET)),
        "—",
        ms(p99),
        "—",
        Some(latencies.missed == 0 && p99 <= LATENCY_TARGET),
    );
    table.add(
        "unchanged progress files counted again per reload",
        "0",
        "—",
        recounted.to_string(),
        "—",
        Some(recounted == 0),
    );
    Ok(())
}

/// Bytes the process has read through read(2) and friends (`rchar` of `/proc/PID/io`).
fn read_bytes(pid: u32) -> Result<u64, String> {
    let io = fs::read_to_string(format!("/proc/{pid}/io")).map_err(|e| format!("io: {e}"))?;
    io.lines()
        .find_map(|line| line.strip_prefix("rchar: "))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| "no rchar in /proc/PID/io".to_string())
}

// ---------------------------------------------------------------------------------------------
// mihari check over 1,000 jobs found by their command line

/// `mihari check --json` over jobs declared by `process.cmdline` alone, each matching one of
/// as many running `sleep`s (every argv unique, so every job is RUNNING with its own PID),
/// against `ps -e -o pid=,lstart=,args=`, which reads the same /proc, in the same run. The
/// jobs share one log, so the figure is the process scan's and not 1,000 stat calls.
fn measure_procscan(knobs: &Knobs, exe: &Path, table: &mut Table) -> Result<(), String> {
    let root = knobs.tempdir()?;
    let mut holders = Holders::default();
    let log = root.path().join("shared.log");
    write(&log, "one line\n")?;
    let mut yaml = String::from("settings:\n  state_dir: state\njobs:\n");
    let mut pids = Vec::with_capacity(knobs.jobs);
    for i in 0..knobs.jobs {
        let seconds = format!("360000.{i:06}");
        pids.push(holders.spawn_sleep(&seconds)?);
        yaml.push_str(&format!(
            "  - id: proc{i:04}\n    log: shared.log\n    process: {{cmdline: '^sleep \
             360000\\.{i:06}$'}}\n    stall_sec: 86400\n    should_run_when: [resource_free]\n"
        ));
    }
    let jobs_yaml = root.path().join("jobs.yaml");
    write(&jobs_yaml, &yaml)?;
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&jobs_yaml, fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("chmod: {e}"))?;
    }
    let processes = fs::read_dir("/proc")
        .map_err(|e| format!("/proc: {e}"))?
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .count();
    // Every job must be RUNNING with its own sleep before anything is timed.
    let verify = || -> Result<(), String> {
        let output = Command::new(exe)
            .args(["check", "--json", "--config"])
            .arg(&jobs_yaml)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run mihari check: {e}"))?;
        let report: serde_json::Value = serde_json::from_slice(&output.stdout)
            .map_err(|e| format!("check's output is not JSON: {e}"))?;
        let rows = report["jobs"].as_array().cloned().unwrap_or_default();
        for (i, pid) in pids.iter().enumerate() {
            let id = format!("proc{i:04}");
            let row = rows
                .iter()
                .find(|r| r["id"] == id.as_str())
                .ok_or_else(|| format!("no row for {id}"))?;
            if row["state"] != "RUNNING" || row["pid"].as_u64() != Some(u64::from(*pid)) {
                return Err(format!("{id} is not RUNNING as pid {pid}: {row}"));
            }
        }
        Ok(())
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(error) = verify() {
        if Instant::now() > deadline {
            return Err(error);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let ps = || -> Result<Duration, String> {
        let started = Instant::now();
        let output = Command::new("ps")
            .args(["-e", "-o", "pid=,lstart=,args="])
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run ps: {e}"))?;
        let took = started.elapsed();
        if !output.status.success() {
            return Err(format!("ps: {}", output.status));
        }
        Ok(took)
    };
    let mut floors = Vec::new();
    let mut checks = Vec::new();
    for _ in 0..knobs.runs {
        floors.push(ps()?);
        checks.push(run_check(exe, &jobs_yaml)?.2);
    }
    let floor = median(&mut floors);
    let check = median(&mut checks);
    let ratio = check.as_secs_f64() / floor.as_secs_f64();
    println!(
        "
procscan: {} jobs by process.cmdline, {} sleeps, {processes} processes in /proc, {} \
         runs alternating: ps -e -o pid=,lstart=,args= {}, mihari check --json {}",
        knobs.jobs,
        pids.len(),
        knobs.runs,
        ms(floor),
        ms(check)
    );
    table.add(
        format!(
            "`mihari check --json`, {} jobs by `process.cmdline`, {processes} processes",
            knobs.jobs
        ),
        format!("≤ {PROCSCAN_TARGET_RATIO}× floor"),
        format!("`ps -e -o pid=,lstart=,args=` {}", ms(floor)),
        ms(check),
        format!("{ratio:.2}×"),
        Some(ratio <= PROCSCAN_TARGET_RATIO),
    );
    drop(holders);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// log_progress: the cost is the tail's, not the log's

/// The end both logs share: ordinary lines, then a tqdm bar redrawn 600 times with '\r'
/// (about 45 KiB of frames), then the lines a training script prints after its last step.
fn tqdm_ending() -> String {
    let mut end = String::new();
    for i in 0..200 {
        end.push_str(&format!(
            "2026-12-01 12:00:{:02} INFO batch {i} loaded\n",
            i % 60
        ));
    }
    for step in 0..600u64 {
        let done = 3000 + step;
        let percent = done * 100 / 10_000;
        let bar = "█".repeat((percent / 10) as usize);
        end.push_str(&format!(
            "\r{percent:3}%|{bar:<10}| {done}/10000 [05:00<11:40,  9.99it/s]"
        ));
    }
    end.push_str("\nsaving checkpoint to ckpt/step3599.pt\n");
    end
}

/// `mihari check --json` on a job whose log is 1 GiB (written whole, not sparse) against the
/// same job on a 1 MiB log, both ending in the same tqdm frames; runs alternate, medians.
fn measure_log_progress(knobs: &Knobs, exe: &Path, table: &mut Table) -> Result<(), String> {
    let gib = env_u64("MIHARI_BENCH_LOG_GIB", 1)?.max(1);
    let root = knobs.tempdir()?;
    let ending = tqdm_ending();
    let filler: String = (0..16_384)
        .map(|i| {
            format!(
                "2026-12-01 11:{:02}:{:02} INFO fetched shard {i:06}\n",
                i % 60,
                i % 60
            )
        })
        .collect();
    let write_log = |path: &Path, bytes: u64| -> Result<(), String> {
        let mut file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let body = bytes.saturating_sub(ending.len() as u64);
        let mut written = 0u64;
        while written < body {
            let take = (body - written).min(filler.len() as u64) as usize;
            file.write_all(&filler.as_bytes()[..take])
                .map_err(|e| format!("{}: {e}", path.display()))?;
            written += take as u64;
        }
        file.write_all(ending.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))
    };
    let started = Instant::now();
    let small = root.path().join("small.log");
    let big = root.path().join("big.log");
    write_log(&small, 1 << 20)?;
    write_log(&big, gib << 30)?;
    let written = started.elapsed();
    let jobs_file = |name: &str, log: &Path| -> Result<PathBuf, String> {
        let path = root.path().join(name);
        write(
            &path,
            format!(
                "settings:\n  state_dir: state\njobs:\n  - id: train\n    log: {}\n    \
                 log_progress: {{ preset: tqdm }}\n    stall_sec: 86400\n    \
                 should_run_when: [not_complete]\n",
                log.display()
            ),
        )?;
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("chmod: {e}"))?;
        Ok(path)
    };
    let small_yaml = jobs_file("small.yaml", &small)?;
    let big_yaml = jobs_file("big.yaml", &big)?;
    // Both must read the last frame, 3599 of 10000, before anything is timed.
    for yaml in [&small_yaml, &big_yaml] {
        let (done, _, _) = run_check(exe, yaml)?;
        if done != 3599 {
            return Err(format!(
                "check on {} read done {done}, not 3599",
                yaml.display()
            ));
        }
    }
    let mut smalls = Vec::new();
    let mut bigs = Vec::new();
    for _ in 0..knobs.runs.max(7) {
        smalls.push(run_check(exe, &small_yaml)?.2);
        bigs.push(run_check(exe, &big_yaml)?.2);
    }
    let floor = median(&mut smalls);
    let figure = median(&mut bigs);
    let ratio = figure.as_secs_f64() / floor.as_secs_f64();
    println!(
        "
log_progress: a {gib} GiB log and a 1 MiB log ending in the same 600 tqdm frames (written in \
         {:.1} s), {} runs alternating: 1 MiB {}, {gib} GiB {}",
        written.as_secs_f64(),
        smalls.len(),
        ms(floor),
        ms(figure)
    );
    table.add(
        format!("`mihari check --json`, `log_progress: tqdm` on a {gib} GiB log"),
        format!("≤ {LOG_PROGRESS_TARGET_RATIO}× floor"),
        format!("the same check on a 1 MiB log, same ending {}", ms(floor)),
        ms(figure),
        format!("{ratio:.2}×"),
        Some(ratio <= LOG_PROGRESS_TARGET_RATIO),
    );
    drop(root);
    Ok(())
}

/// The target of `heartbeats`: a year of heartbeats costs `check` at most this much more
/// than one heartbeat.
const HEARTBEATS_TARGET_RATIO: f64 = 1.2;

/// `check --json` on one job whose store holds a year of heartbeats, against the same check
/// on a store with one; `sqlite3` reading the newest row of the year is printed beside.
fn measure_heartbeats(knobs: &Knobs, exe: &Path, table: &mut Table) -> Result<(), String> {
    let rows = env_u64("MIHARI_BENCH_HEARTBEATS", 3_153_600)?.max(1);
    let root = knobs.tempdir()?;
    let jobs_file = |name: &str| -> Result<PathBuf, String> {
        let dir = root.path().join(name);
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        write(&dir.join("train.log"), "epoch 1\n")?;
        let path = dir.join("jobs.yaml");
        write(
            &path,
            "settings:\n  state_dir: state\njobs:\n  - id: train\n    log: train.log\n    \
             stall_sec: 86400\n    should_run_when: [not_succeeded]\n",
        )?;
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("chmod: {e}"))?;
        let beat = Command::new(exe)
            .arg("--config")
            .arg(&path)
            .args(["heartbeat", "train", "--done", "1"])
            .output()
            .map_err(|e| format!("cannot run mihari heartbeat: {e}"))?;
        if !beat.status.success() {
            return Err(format!(
                "mihari heartbeat failed: {}",
                String::from_utf8_lossy(&beat.stderr)
            ));
        }
        Ok(path)
    };
    let one = jobs_file("one")?;
    let year = jobs_file("year")?;
    let db = root.path().join("year/state/mihari.sqlite");
    let sqlite = |sql: &str| -> Result<(String, Duration), String> {
        let started = Instant::now();
        let output = Command::new("sqlite3")
            .arg(&db)
            .arg(sql)
            .output()
            .map_err(|e| format!("cannot run sqlite3 (apt-get install -y sqlite3): {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "sqlite3: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok((
            String::from_utf8_lossy(&output.stdout).trim().to_string(),
            started.elapsed(),
        ))
    };
    // A year's worth, ten seconds apart, then one more heartbeat from mihari: the newest.
    let (_, written) = sqlite(&format!(
        "INSERT INTO heartbeats (job, at_ms, done, note) \
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows}) \
         SELECT 'train', 1700000000000 + i * 10000, i + 1, 'steady' FROM n;"
    ))?;
    // The job goes on sending heartbeats: each prunes its share, until the newest are left
    // (what a store that took a year of heartbeats through mihari holds).
    let mut beats = Vec::new();
    loop {
        let started = Instant::now();
        let beat = Command::new(exe)
            .arg("--config")
            .arg(&year)
            .args(["heartbeat", "train", "--done", "1"])
            .output()
            .map_err(|e| format!("cannot run mihari heartbeat: {e}"))?;
        beats.push(started.elapsed());
        if !beat.status.success() {
            return Err(format!(
                "mihari heartbeat failed: {}",
                String::from_utf8_lossy(&beat.stderr)
            ));
        }
        let (kept, _) = sqlite("SELECT count(*) FROM heartbeats;")?;
        if kept.parse::<u64>().is_ok_and(|kept| kept <= 1440) || beats.len() >= 10_000 {
            break;
        }
    }
    let slowest = beats.iter().max().copied().unwrap_or_default();
    let (kept, _) = sqlite("SELECT count(*) FROM heartbeats;")?;
    let file = fs::metadata(&db).map_or(0, |m| m.len());
    for config in [&one, &year] {
        let (done, _, _) = run_check(exe, config)?;
        if done != 1 {
            return Err(format!(
                "check on {} read done {done}, not the newest heartbeat's 1",
                config.display()
            ));
        }
    }
    let newest = "SELECT done FROM heartbeats WHERE job = 'train' ORDER BY id DESC LIMIT 1;";
    let mut ones = Vec::new();
    let mut years = Vec::new();
    let mut reads = Vec::new();
    for _ in 0..knobs.runs.max(7) {
        ones.push(run_check(exe, &one)?.2);
        years.push(run_check(exe, &year)?.2);
        reads.push(sqlite(newest)?.1);
    }
    let floor = median(&mut ones);
    let figure = median(&mut years);
    let read = median(&mut reads);
    let ratio = figure.as_secs_f64() / floor.as_secs_f64();
    println!(
        "\nheartbeats: {rows} older heartbeats written by sqlite3 in {:.1} s; {} heartbeats \
         from mihari pruned them to {kept} (the slowest {}; the file stays {} MB, its pages \
         free); {} runs alternating: one heartbeat {}, a year {}, sqlite3 reading the newest \
         row {}",
        written.as_secs_f64(),
        beats.len(),
        ms(slowest),
        file >> 20,
        ones.len(),
        ms(floor),
        ms(figure),
        ms(read)
    );
    table.add(
        format!("`mihari check --json`, one job, {rows} heartbeats in its store"),
        format!("≤ {HEARTBEATS_TARGET_RATIO}× floor"),
        format!(
            "the same check with one heartbeat {} (`sqlite3` reading the newest row: {})",
            ms(floor),
            ms(read)
        ),
        ms(figure),
        format!("{ratio:.2}×"),
        Some(ratio <= HEARTBEATS_TARGET_RATIO),
    );
    drop(root);
    Ok(())
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

// ---------------------------------------------------------------------------------------------
// RSS of the dashboard with 1,000 jobs

fn measure_rss(knobs: &Knobs, exe: &Path, fleet: &Fleet, table: &mut Table) -> Result<(), String> {
    let (mut first, mut after, mut floor_first, mut floor_after) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let header = format!("{} jobs", knobs.jobs);
    for run in 0..knobs.rss_runs {
        let mut dash = Dashboard::spawn(exe, &fleet.jobs_yaml)?;
        let mut floor = Dashboard::spawn(exe, &fleet.empty_yaml)?;
        dash.wait_until(Duration::from_secs(30), |s| screen_contains(s, &header))?
            .ok_or_else(|| format!("no first screen within 30 s:\n{}", dash.dump()))?;
        floor
            .wait_until(Duration::from_secs(30), |s| {
                screen_contains(s, "no jobs declared")
            })?
            .ok_or_else(|| format!("the empty dashboard drew nothing:\n{}", floor.dump()))?;
        drain_all(&mut [&mut dash, &mut floor], Duration::from_millis(300))?;
        first.push(vm_hwm_bytes(dash.pid())?);
        floor_first.push(vm_hwm_bytes(floor.pid())?);
        let stats = activity(knobs, fleet, &mut dash, &mut floor, run)?;
        after.push(vm_hwm_bytes(dash.pid())?);
        floor_after.push(vm_hwm_bytes(floor.pid())?);
        println!(
            "rss run {}: first screen {}, after {:.0} s of activity ({stats}) {}; empty jobs file {} / {}",
            run + 1,
            mb(first[run]),
            knobs.activity.as_secs_f64(),
            mb(after[run]),
            mb(floor_first[run]),
            mb(floor_after[run])
        );
        dash.quit()?;
        floor.quit()?;
    }
    let (first, after) = (median_u64(&mut first), median_u64(&mut after));
    let (floor_first, floor_after) = (median_u64(&mut floor_first), median_u64(&mut floor_after));
    table.add(
        format!("dashboard RSS, {} jobs, first full screen", knobs.jobs),
        "≤ 30 MB",
        format!("no jobs: {}", mb(floor_first)),
        mb(first),
        "—",
        Some(first <= RSS_TARGET_BYTES),
    );
    table.add(
        format!(
            "dashboard RSS, {} jobs, after {:.0} s of activity",
            knobs.jobs,
            knobs.activity.as_secs_f64()
        ),
        "≤ 30 MB",
        format!("no jobs: {}", mb(floor_after)),
        mb(after),
        "—",
        Some(after <= RSS_TARGET_BYTES),
    );
    Ok(())
}

/// Activity: progress and log lines appended to random jobs every 25 ms, and a key every
/// 250 ms (pages, detail, log tail, events, help, back). Returns what was done, in words.
fn activity(
    knobs: &Knobs,
    fleet: &Fleet,
    dash: &mut Dashboard,
    floor: &mut Dashboard,
    seed: usize,
) -> Result<String, String> {
    const KEYS: [&[u8]; 14] = [
        b"\x1b[6~", b"j", b"j", b"\r", b"l", b"\x1b", b"\x1b", b"e", b"\x1b", b"G", b"\r", b"\x1b",
        b"g", b"?",
    ];
    let root = fleet.root.path();
    let mut random = 0x9E37_79B9_7F4A_7C15u64 ^ seed as u64;
    let mut next = || {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random
    };
    let until = Instant::now() + knobs.activity;
    let (mut writes, mut keys) = (0usize, 0usize);
    let mut next_key = Instant::now();
    while Instant::now() < until {
        let job = (next() % fleet.progress.len() as u64) as usize;
        append(
            &root.join(&fleet.progress[job]),
            progress_line(1_000_000 + writes as u64).as_bytes(),
        )?;
        append(&root.join(&fleet.logs[job]), b"step done\n")?;
        writes += 1;
        if Instant::now() >= next_key {
            let key = KEYS[keys % KEYS.len()];
            dash.send(key)?;
            floor.send(key)?;
            keys += 1;
            next_key += Duration::from_millis(250);
        }
        drain_all(&mut [&mut *dash, &mut *floor], Duration::from_millis(25))?;
    }
    // Close whatever the keys left open.
    dash.send(b"\x1b\x1b")?;
    floor.send(b"\x1b\x1b")?;
    drain_all(&mut [dash, floor], Duration::from_millis(300))?;
    Ok(format!("{writes} appends, {keys} keys"))
}

// ---------------------------------------------------------------------------------------------
// Latencies

fn print_latencies(title: &str, rows: &[(&str, &Latencies)]) {
    println!("\n{title}");
    println!(
        "  {:<46} {:>7} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "", "samples", "min", "median", "p99", "max", "missed"
    );
    for (name, l) in rows {
        match l.summary() {
            Some([min, median, p99, max]) => println!(
                "  {name:<46} {:>7} {:>9} {:>9} {:>9} {:>9} {:>7}",
                l.count(),
                ms(min),
                ms(median),
                ms(p99),
                ms(max),
                l.missed
            ),
            None => println!("  {name:<46} {:>7}", 0),
        }
    }
}

/// A pause between samples that varies (100-250 ms), so samples do not lock to any period.
fn pause_for(i: usize) -> Duration {
    Duration::from_millis(100 + (i as u64 * 53) % 150)
}

fn latency_row(
    table: &mut Table,
    measure: String,
    floor_name: &str,
    floor: &Latencies,
    figure: &Latencies,
) {
    let floor_text = floor.median().map_or("no samples".to_string(), |median| {
        format!("{floor_name} p50 {}", ms(median))
    });
    let (figure_text, pass) = match (figure.p99(), figure.median()) {
        (Some(p99), Some(p50)) => (
            format!("p99 {} (p50 {})", ms(p99), ms(p50)),
            Some(p99 <= LATENCY_TARGET),
        ),
        _ => ("no samples".to_string(), None),
    };
    table.add(
        measure,
        format!("p99 ≤ {}", ms(LATENCY_TARGET)),
        floor_text,
        figure_text,
        "—",
        pass,
    );
}

// ---------------------------------------------------------------------------------------------
// On screen: a holder's death and a stall deadline, on the 1,000-job dashboard

fn measure_screen(
    knobs: &Knobs,
    exe: &Path,
    fleet: &mut Fleet,
    holders: &mut Holders,
    table: &mut Table,
) -> Result<(), String> {
    let mut dash = Dashboard::spawn(exe, &fleet.live_yaml)?;
    let header = format!("{} jobs", knobs.jobs + 3);
    dash.wait_until(Duration::from_secs(30), |s| screen_contains(s, &header))?
        .ok_or_else(|| format!("no first screen within 30 s:\n{}", dash.dump()))?;
    dash.send(format!("/{MEASURED}\r").as_bytes())?;
    dash.wait_until(Duration::from_secs(10), |s| {
        screen_contains(s, &format!("filter '{MEASURED}'"))
            && row_shows(s, "held", "RUNNING")
            && row_shows(s, "flip", "SHOULD_BE_RUNNING")
            && (row_shows(s, "staller", "STALLED") || row_shows(s, "staller", "RUNNING"))
    })?
    .ok_or_else(|| format!("the filtered screen did not show:\n{}", dash.dump()))?;
    dash.drain_for(Duration::from_secs(2))?;

    // The floor: a key and its redraw (help opens, help closes), on the same dashboard.
    let mut keys = Latencies::default();
    for i in 0..30 {
        dash.drain_for(pause_for(i))?;
        let started = Instant::now();
        dash.send(b"?")?;
        let seen = dash.wait_until(GIVE_UP, |s| {
            screen_contains(s, "this help (any key closes it)")
        })?;
        keys.record(started, seen);
        dash.drain_for(pause_for(i + 1))?;
        let started = Instant::now();
        dash.send(b"?")?;
        let seen = dash.wait_until(GIVE_UP, |s| {
            !screen_contains(s, "this help (any key closes it)")
        })?;
        keys.record(started, seen);
    }

    // A holder's death: SIGKILL and reap held's sleep (timed until DEAD_LOCK_STALE shows), then a
    // new sleep and an atomically replaced lock (timed until RUNNING shows again).
    let (mut dead, mut back, mut reaped) = (
        Latencies::default(),
        Latencies::default(),
        Latencies::default(),
    );
    for i in 0..knobs.kills {
        dash.drain_for(pause_for(i))?;
        let started = Instant::now();
        let reap = holders.kill(fleet.held_pid)?;
        reaped.samples.push(reap);
        let seen = dash.wait_until(GIVE_UP, |s| row_shows(s, "held", "DEAD_LOCK_STALE"))?;
        dead.record(started, seen);
        dash.drain_for(pause_for(i + 1))?;
        let started = Instant::now();
        let (pid, ticks) = holders.spawn()?;
        fleet.replace_held_lock(pid, ticks)?;
        let seen = dash.wait_until(GIVE_UP, |s| row_shows(s, "held", "RUNNING"))?;
        back.record(started, seen);
    }

    // A stall deadline: a progress line makes staller RUNNING; STALL_SEC after that line's
    // mtime (the freshest reading) it must show STALLED. The floor is how late the bench's own
    // timer wakes for the same deadline.
    let (mut stalled, mut timer, mut resumed) = (
        Latencies::default(),
        Latencies::default(),
        Latencies::default(),
    );
    for i in 0..knobs.stalls {
        dash.drain_for(pause_for(i))?;
        let started = Instant::now();
        append(&fleet.staller_progress, progress_line(i as u64).as_bytes())?;
        let seen = dash.wait_until(GIVE_UP, |s| row_shows(s, "staller", "RUNNING"))?;
        resumed.record(started, seen);
        let modified = fs::metadata(&fleet.staller_progress)
            .and_then(|m| m.modified())
            .map_err(|e| format!("stat staller.progress: {e}"))?;
        let deadline_wall = modified + Duration::from_secs(STALL_SEC);
        let deadline = instant_of(deadline_wall);
        // The bench's own timer: pump the screen until the deadline, then see how late it woke.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            dash.pump(left)?;
        }
        timer
            .samples
            .push(Instant::now().saturating_duration_since(deadline));
        let seen = dash.wait_until(GIVE_UP, |s| row_shows(s, "staller", "STALLED"))?;
        stalled.record(deadline, seen);
    }
    let hwm = vm_hwm_bytes(dash.pid())?;
    let exit = dash.quit()?;

    print_latencies(
        &format!(
            "on the {}-job dashboard (filter '{MEASURED}')",
            knobs.jobs + 3
        ),
        &[
            ("key -> redraw (floor)", &keys),
            (
                "holder killed: kill -> reaped by the bench (floor)",
                &reaped,
            ),
            ("holder killed -> DEAD_LOCK_STALE on screen", &dead),
            ("new holder + lock -> RUNNING (info)", &back),
            ("stall deadline: bench timer lateness (floor)", &timer),
            ("stall deadline -> STALLED on screen", &stalled),
            ("progress line -> RUNNING (info)", &resumed),
        ],
    );
    println!(
        "dashboard peak RSS after the latencies: {}; {exit}",
        mb(hwm)
    );
    latency_row(
        table,
        format!(
            "a holder's death → DEAD_LOCK_STALE on screen ({}, {} jobs)",
            dead.count(),
            knobs.jobs + 3
        ),
        "key → redraw",
        &keys,
        &dead,
    );
    latency_row(
        table,
        format!(
            "stall deadline → STALLED on screen ({}, stall_sec {STALL_SEC})",
            stalled.count()
        ),
        "bench timer",
        &timer,
        &stalled,
    );
    Ok(())
}

/// The `Instant` at which the wall clock will read `wall` (or read it already).
fn instant_of(wall: SystemTime) -> Instant {
    let now_wall = SystemTime::now();
    let now = Instant::now();
    match wall.duration_since(now_wall) {
        Ok(ahead) => now + ahead,
        Err(behind) => now.checked_sub(behind.duration()).unwrap_or(now),
    }
}

// ---------------------------------------------------------------------------------------------
// The watcher: a change -> its state-changed event in the store

/// inotify, straight from libc: the bench's own view of a folder.
struct Inotify {
    fd: OwnedFd,
}

impl Inotify {
    fn new() -> Result<Inotify, String> {
        // SAFETY: inotify_init1 takes flags and returns a new descriptor or -1.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return Err(format!("inotify_init1: {}", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a descriptor just returned to us and owned by nothing else.
        Ok(Inotify {
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
        })
    }

    fn watch(&self, folder: &Path) -> Result<(), String> {
        let path = CString::new(folder.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
        let mask = libc::IN_MODIFY | libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_CLOSE_WRITE;
        // SAFETY: the descriptor is open and the path a valid NUL-terminated string.
        let watch = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr(), mask) };
        if watch < 0 {
            return Err(format!(
                "inotify_add_watch '{}': {}",
                folder.display(),
                io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// Drops every queued event.
    fn drain(&self) {
        let mut buf = [0u8; 16 * 1024];
        loop {
            // SAFETY: reads into a buffer we own, at most its length.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            if n <= 0 {
                return;
            }
        }
    }

    /// Waits at most `timeout` for an event; drains what came. True when something did.
    fn wait(&self, timeout: Duration) -> Result<bool, String> {
        let came = wait_readable(&[self.fd.as_fd()], timeout)?;
        if came {
            self.drain();
        }
        Ok(came)
    }
}

/// Reads the watcher's store, read-only.
struct StoreView {
    conn: rusqlite::Connection,
}

impl StoreView {
    fn open(db: &Path) -> Result<StoreView, String> {
        let conn = rusqlite::Connection::open_with_flags(
            db,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| format!("open the store read-only: {e}"))?;
        conn.busy_timeout(Duration::from_millis(50))
            .map_err(|e| e.to_string())?;
        Ok(StoreView { conn })
    }

    /// The newest event id.
    fn last_id(&self) -> i64 {
        self.conn
            .query_row("SELECT coalesce(max(id), 0) FROM events", [], |r| r.get(0))
            .unwrap_or(0)
    }

    fn count_state_changes(&self) -> i64 {
        self.conn
            .query_row(
                "SELECT count(*) FROM events WHERE kind = 'state-changed'",
                [],
                |r| r.get(0),
            )
            .unwrap_or(0)
    }

    /// Whether a `state-changed` event of `job` to `state` came after event `after`.
    fn changed(&self, after: i64, job: &str, state: &str) -> bool {
        self.conn
            .query_row(
                "SELECT count(*) FROM events WHERE id > ?1 AND kind = 'state-changed' \
                 AND job = ?2 AND reason LIKE ?3",
                rusqlite::params![after, job, format!("%-> {state}")],
                |r| r.get::<_, i64>(0),
            )
            .is_ok_and(|n| n > 0)
    }
}

/// Waits for the state-changed event, woken by the -wal file's changes and at least every
/// 2 ms. The moment it is first seen, or `None` after [`GIVE_UP`].
fn wait_for_change(
    store: &StoreView,
    state_dir: &Inotify,
    after: i64,
    job: &str,
    state: &str,
) -> Result<Option<Instant>, String> {
    let deadline = Instant::now() + GIVE_UP;
    loop {
        if store.changed(after, job, state) {
            return Ok(Some(Instant::now()));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        state_dir.wait(Duration::from_millis(2))?;
    }
}

fn measure_watcher(
    knobs: &Knobs,
    exe: &Path,
    fleet: &mut Fleet,
    holders: &mut Holders,
    table: &mut Table,
) -> Result<(), String> {
    let state = fleet.root.path().join("state");
    let log = File::create(fleet.root.path().join("watch.log")).map_err(|e| e.to_string())?;
    let mut watcher = Command::new(exe)
        .arg("watch")
        .arg("--config")
        .arg(&fleet.live_yaml)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start the watcher: {e}"))?;
    let result = watcher_samples(knobs, fleet, holders, &state, watcher.id());
    let _ = kill(Pid::from_raw(watcher.id() as i32), Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while watcher.try_wait().map_err(|e| e.to_string())?.is_none() {
        if Instant::now() > deadline {
            let _ = watcher.kill();
            let _ = watcher.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (floor_write, floor_kill, flips, kills, hwm) = result?;
    print_latencies(
        &format!(
            "the watcher over {} jobs: change -> state-changed event in its store",
            knobs.jobs + 3
        ),
        &[
            (
                "progress write -> the bench's inotify (floor)",
                &floor_write,
            ),
            ("holder killed -> reaped by the bench (floor)", &floor_kill),
            ("  append -> COMPLETE", &flips.0),
            ("  truncate -> SHOULD_BE_RUNNING", &flips.1),
            ("  holder killed -> DEAD_LOCK_STALE", &kills.0),
            ("  new holder + lock -> RUNNING", &kills.1),
        ],
    );
    println!("watcher peak RSS: {}", mb(hwm));
    let all = Latencies::merged(&[&flips.0, &flips.1, &kills.0, &kills.1]);
    let floor = Latencies::merged(&[&floor_write, &floor_kill]);
    latency_row(
        table,
        format!(
            "a change → `state-changed` in the watcher's store ({}, {} jobs)",
            all.count(),
            knobs.jobs + 3
        ),
        "bench inotify/reap",
        &floor,
        &all,
    );
    Ok(())
}

type WatcherSamples = (
    Latencies,
    Latencies,
    (Latencies, Latencies),
    (Latencies, Latencies),
    u64,
);

fn watcher_samples(
    knobs: &Knobs,
    fleet: &mut Fleet,
    holders: &mut Holders,
    state: &Path,
    watcher_pid: u32,
) -> Result<WatcherSamples, String> {
    // The first pass records every job's first state; wait for it, then for quiet.
    let db = state.join("mihari.sqlite");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !db.exists() {
        if Instant::now() > deadline {
            return Err("the watcher made no store within 120 s".to_string());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let store = StoreView::open(&db)?;
    let wanted = (knobs.jobs + 3) as i64;
    let mut last = (0, Instant::now());
    loop {
        let count = store.count_state_changes();
        let now = Instant::now();
        if count != last.0 {
            last = (count, now);
        } else if count >= wanted && now.duration_since(last.1) > Duration::from_secs(2) {
            break;
        }
        if now > deadline {
            return Err(format!(
                "the watcher recorded {count} first states of {wanted} within 120 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let state_dir = Inotify::new()?;
    state_dir.watch(state)?;
    let measured = Inotify::new()?;
    measured.watch(&fleet.measured_dir)?;

    let short_len = progress_lines(FLIP_LINES).len() as u64;
    let last_line = progress_line(FLIP_LINES);
    let (mut complete, mut undone, mut floor_write) = (
        Latencies::default(),
        Latencies::default(),
        Latencies::default(),
    );
    for i in 0..knobs.watch_flips {
        std::thread::sleep(pause_for(i));
        measured.drain();
        state_dir.drain();
        let after = store.last_id();
        let completing = i % 2 == 0;
        let started = Instant::now();
        if completing {
            append(&fleet.flip_progress, last_line.as_bytes())?;
        } else {
            OpenOptions::new()
                .write(true)
                .open(&fleet.flip_progress)
                .and_then(|f| f.set_len(short_len))
                .map_err(|e| format!("truncate flip.progress: {e}"))?;
        }
        if measured.wait(Duration::from_secs(1))? {
            floor_write.samples.push(started.elapsed());
        }
        let (state_name, into) = if completing {
            ("COMPLETE", &mut complete)
        } else {
            ("SHOULD_BE_RUNNING", &mut undone)
        };
        let seen = wait_for_change(&store, &state_dir, after, "flip", state_name)?;
        into.record(started, seen);
    }

    let (mut dead, mut back, mut floor_kill) = (
        Latencies::default(),
        Latencies::default(),
        Latencies::default(),
    );
    for i in 0..knobs.watch_kills {
        std::thread::sleep(pause_for(i));
        state_dir.drain();
        let after = store.last_id();
        let started = Instant::now();
        floor_kill.samples.push(holders.kill(fleet.held_pid)?);
        let seen = wait_for_change(&store, &state_dir, after, "held", "DEAD_LOCK_STALE")?;
        dead.record(started, seen);

        std::thread::sleep(pause_for(i + 1));
        state_dir.drain();
        let after = store.last_id();
        let started = Instant::now();
        let (pid, ticks) = holders.spawn()?;
        fleet.replace_held_lock(pid, ticks)?;
        let seen = wait_for_change(&store, &state_dir, after, "held", "RUNNING")?;
        back.record(started, seen);
    }
    let hwm = vm_hwm_bytes(watcher_pid)?;
    Ok((
        floor_write,
        floor_kill,
        (complete, undone),
        (dead, back),
        hwm,
    ))
}

// ---------------------------------------------------------------------------------------------
// The tail of a 10 GiB log

fn measure_tail(knobs: &Knobs, table: &mut Table) -> Result<(), String> {
    let dir = knobs.tempdir()?;
    let big = dir.path().join("huge.log");
    let tiny = dir.path().join("tiny.log");
    let len = knobs.tail_gib << 30;
    let text: String = (0..1000u64)
        .map(|i| {
            format!(
                "2026-11-29T10:{:02}:{:02}.{:03}Z INFO step {i} loss 0.{:06} lr 0.0003 tokens/s {}\n",
                (i / 60) % 60,
                i % 60,
                i % 1000,
                (i * 7919) % 1_000_000,
                12_000 + i % 997
            )
        })
        .collect();
    let file = File::create(&big).map_err(|e| format!("create the log: {e}"))?;
    file.set_len(len).map_err(|e| format!("set_len: {e}"))?;
    file.write_all_at(text.as_bytes(), len)
        .map_err(|e| format!("write the log's lines: {e}"))?;
    drop(file);
    write(&tiny, b"one line\n")?;
    let expected: Vec<&str> = text.lines().skip(1000 - TAIL_LINES).collect();
    match tail_lines(&big, TAIL_LINES) {
        Reading::Found(lines) if lines == expected => {}
        other => return Err(format!("tail_lines read something else: {other:?}")),
    }
    let floor_bytes = minimal_tail(&big, TAIL_LINES)?;
    if floor_bytes != expected.iter().map(|l| l.len() + 1).sum::<usize>() {
        return Err("the minimal tail found other lines".to_string());
    }

    // Alternating, page cache warm: in-process (mihari, and a minimal floor) and processes.
    let copies: Vec<&Path> = std::iter::repeat_n(big.as_path(), TAIL_COPIES).collect();
    let (mut ours, mut minimal, mut dropped) = (Vec::new(), Vec::new(), Vec::new());
    let (mut tail_one, mut tail_tiny, mut tail_many) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..knobs.tail_runs {
        // In-process, like tail's per-file figure: TAIL_COPIES calls back to back, per call.
        // What the caller does with the lines (dropping them) is not the tail's cost.
        let mut results = Vec::with_capacity(TAIL_COPIES);
        let started = Instant::now();
        for _ in 0..TAIL_COPIES {
            results.push(std::hint::black_box(tail_lines(&big, TAIL_LINES)));
        }
        ours.push(started.elapsed() / TAIL_COPIES as u32);
        let started = Instant::now();
        for _ in 0..TAIL_COPIES {
            std::hint::black_box(minimal_tail(&big, TAIL_LINES)?);
        }
        minimal.push(started.elapsed() / TAIL_COPIES as u32);
        let started = Instant::now();
        drop(results);
        dropped.push(started.elapsed() / TAIL_COPIES as u32);
        // Processes in a rotating order, so none always runs first after the in-process work.
        for k in 0..3 {
            match (i + k) % 3 {
                0 => tail_one.push(time_tail(&[big.as_path()])?),
                1 => tail_tiny.push(time_tail(&[tiny.as_path()])?),
                _ => tail_many.push(time_tail(&copies)?),
            }
        }
    }
    let ours = median(&mut ours);
    let dropped = median(&mut dropped);
    let minimal = median(&mut minimal);
    let (one, tiny_t) = (median(&mut tail_one), median(&mut tail_tiny));
    let many = median(&mut tail_many);
    let per_file = many.saturating_sub(one) / (TAIL_COPIES as u32 - 1);
    let single = one.saturating_sub(tiny_t);
    println!(
        "\ntail of {TAIL_LINES} lines of a {} GiB sparse log, page cache warm, medians of {}, \
         alternating:",
        knobs.tail_gib, knobs.tail_runs
    );
    println!(
        "  mihari tail_lines (in-process, per call of {TAIL_COPIES})     {}",
        us(ours)
    );
    println!(
        "  the caller dropping those lines (not counted)   {}",
        us(dropped)
    );
    println!(
        "  minimal in-process tail (per call of {TAIL_COPIES})        {}",
        us(minimal)
    );
    println!(
        "  tail -n 200 FILE (process)                      {}",
        us(one)
    );
    println!(
        "  tail -n 200 TINY (process start, floor of it)   {}",
        us(tiny_t)
    );
    println!(
        "  tail -q -n 200 FILE x{TAIL_COPIES} (process)               {}",
        us(many)
    );
    println!(
        "  tail's work per file: (x{TAIL_COPIES} - x1) / {}          {}   <- the floor judged",
        TAIL_COPIES - 1,
        us(per_file)
    );
    println!(
        "  tail's work, single run: FILE - TINY            {}",
        us(single)
    );
    let ratio = ours.as_secs_f64() / per_file.as_secs_f64().max(1e-9);
    table.add(
        format!("tail of {TAIL_LINES} lines of a {} GiB log", knobs.tail_gib),
        format!("≤ {TAIL_TARGET_RATIO}× `tail -n 200`"),
        format!(
            "`tail` per file, start removed {} (single run − tiny {}; minimal in-process {})",
            us(per_file),
            us(single),
            us(minimal)
        ),
        format!("`tail_lines` {}", us(ours)),
        format!("{ratio:.2}×"),
        Some(ratio <= TAIL_TARGET_RATIO),
    );
    Ok(())
}

/// What any tail must do: open, stat, read backwards until `n` lines are found, copy them
/// out. No decoding and no making inert. Returns the bytes copied.
fn minimal_tail(path: &Path, n: usize) -> Result<usize, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut pos = len;
    let mut newlines = 0;
    let mut start_in_first = None;
    while pos > 0 {
        let want = 8192u64.min(pos);
        pos -= want;
        let mut chunk = vec![0u8; want as usize];
        file.read_exact_at(&mut chunk, pos)
            .map_err(|e| e.to_string())?;
        // The final newline ends the last line; the (n+1)-th from the end starts the tail.
        let skip_last = chunks.is_empty() && chunk.last() == Some(&b'\n');
        let body = if skip_last {
            &chunk[..chunk.len() - 1]
        } else {
            &chunk[..]
        };
        for at in memchr::memrchr_iter(b'\n', body) {
            newlines += 1;
            if newlines == n {
                start_in_first = Some(at + 1);
                break;
            }
        }
        chunks.push(chunk);
        if start_in_first.is_some() {
            break;
        }
    }
    let start = start_in_first.unwrap_or(0);
    let mut out = Vec::new();
    for (i, chunk) in chunks.iter().rev().enumerate() {
        out.extend_from_slice(if i == 0 { &chunk[start..] } else { chunk });
    }
    Ok(out.len())
}

fn time_tail(files: &[&Path]) -> Result<Duration, String> {
    let started = Instant::now();
    let status = Command::new("tail")
        .arg("-q")
        .arg("-n")
        .arg(TAIL_LINES.to_string())
        .args(files)
        .env("LC_ALL", "C")
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run tail: {e}"))?;
    let took = started.elapsed();
    if !status.success() {
        return Err(format!("tail: {status}"));
    }
    Ok(took)
}

// ---------------------------------------------------------------------------------------------
// Idle CPU: the dashboard and the watcher, 100 quiet jobs, side by side

/// CPU used by every thread of a process: on-CPU nanoseconds (schedstat) of the threads
/// alive now, and utime + stime in clock ticks (which also keeps the time of threads that
/// have exited).
#[derive(Clone, Copy)]
struct CpuUse {
    on_cpu_ns: u64,
    ticks: u64,
}

fn cpu_use(pid: u32) -> Result<CpuUse, String> {
    let ticks = cpu_ticks(pid)?;
    let mut on_cpu_ns = 0;
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            if let Some(ns) = fs::read_to_string(task.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            {
                on_cpu_ns += ns;
            }
        }
    }
    Ok(CpuUse { on_cpu_ns, ticks })
}

/// The share of one core used between two readings over `secs`: from schedstat, and from
/// ticks.
fn percent(before: CpuUse, after: CpuUse, secs: f64, tck: u64) -> (f64, f64) {
    let precise = after.on_cpu_ns.saturating_sub(before.on_cpu_ns) as f64 / 1e9 / secs * 100.0;
    let coarse = after.ticks.saturating_sub(before.ticks) as f64 / tck as f64 / secs * 100.0;
    (precise, coarse)
}

fn measure_idle(knobs: &Knobs, exe: &Path, table: &mut Table) -> Result<(), String> {
    let root = knobs.tempdir()?;
    let dir = root.path();
    for sub in ["quiet", "empty"] {
        fs::create_dir(dir.join(sub)).map_err(|e| format!("mkdir {sub}: {e}"))?;
    }
    let mut holders = Holders::default();
    let mut yaml = String::from("settings:\n  state_dir: ./state\njobs:\n");
    for n in 0..QUIET_JOBS {
        let id = format!("quiet{n:03}");
        yaml.push_str(&format!(
            "  - id: {id}\n    owner: quiet\n    lock: quiet/{id}.lock\n    log: quiet/{id}.log\n    \
             progress_file: quiet/{id}.progress\n    stall_sec: 86400\n    \
             expected_total: 1000000\n    should_run_when: [not_complete]\n"
        ));
        write(&dir.join(format!("quiet/{id}.log")), b"worker started\n")?;
        write(
            &dir.join(format!("quiet/{id}.progress")),
            progress_lines(10).as_bytes(),
        )?;
        let (pid, ticks) = holders.spawn()?;
        write(
            &dir.join(format!("quiet/{id}.lock")),
            json_lock(pid, ticks).as_bytes(),
        )?;
    }
    let config = dir.join("jobs.yaml");
    write(&config, yaml.as_bytes())?;
    let empty = dir.join("empty/jobs.yaml");
    write(&empty, b"settings:\n  state_dir: ./state\njobs: []\n")?;
    let written = Instant::now();

    let result = idle_window(knobs, exe, &config, &empty, QUIET_JOBS, written, table);
    drop(holders);
    result
}

/// Waits until the watcher on `config` has recorded a `state-changed` event for each of its
/// `jobs` (its first pass), reading its store read-only, the dashboards drained meanwhile.
/// How long that took.
fn watcher_first_pass(
    config: &Path,
    jobs: usize,
    dashboards: &mut [&mut Dashboard],
) -> Result<Duration, String> {
    let started = Instant::now();
    let db = config
        .parent()
        .ok_or("the jobs file has no folder")?
        .join("state")
        .join(mihari::store::DB_FILE);
    let mut store = None;
    loop {
        if store.is_none() && db.exists() {
            store = StoreView::open(&db).ok();
        }
        let recorded = store.as_ref().map_or(0, |store| {
            store
                .conn
                .query_row(
                    "SELECT count(DISTINCT job) FROM events WHERE kind = 'state-changed'",
                    [],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap_or(0)
        });
        if recorded >= jobs as i64 {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(300) {
            return Err(format!(
                "the watcher recorded {recorded} of {jobs} jobs in 300 s"
            ));
        }
        drain_all(dashboards, Duration::from_millis(200))?;
    }
}

/// How old the files last written are when an idle window opens: past the first minute, whose
/// ages the screen shows to the second.
const QUIET_AFTER: Duration = Duration::from_secs(61);

/// One idle window: the dashboard and the watcher on `config` (`jobs` quiet jobs, their files
/// last written at `written`) beside a dashboard on the empty `empty`, on-CPU time over
/// `knobs.idle`, opened once those files are [`QUIET_AFTER`] old, as rows of `table`.
fn idle_window(
    knobs: &Knobs,
    exe: &Path,
    config: &Path,
    empty: &Path,
    jobs: usize,
    written: Instant,
    table: &mut Table,
) -> Result<(), String> {
    let tck = mihari::probe::proc::clock_ticks_per_second()?;
    let mut dash = Dashboard::spawn(exe, config)?;
    let mut floor = Dashboard::spawn(exe, empty)?;
    let mut watcher = Command::new(exe)
        .arg("watch")
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the watcher: {e}"))?;
    let result = (|| -> Result<(), String> {
        let header = format!("{jobs} jobs");
        dash.wait_until(Duration::from_secs(60), |s| {
            screen_contains(s, &header) && screen_contains(s, "watcher alive")
        })?
        .ok_or_else(|| {
            format!(
                "no screen with a live watcher within 20 s:\n{}",
                dash.dump()
            )
        })?;
        floor
            .wait_until(Duration::from_secs(60), |s| {
                screen_contains(s, "no jobs declared")
            })?
            .ok_or_else(|| format!("the empty dashboard drew nothing:\n{}", floor.dump()))?;
        // The watcher's first pass records a `state-changed` for every job, and the dashboard
        // reads them: the window opens only once the event log holds one for each job.
        let first_pass = watcher_first_pass(config, jobs, &mut [&mut dash, &mut floor])?;
        drain_all(&mut [&mut dash, &mut floor], Duration::from_secs(5))?;
        // Quiet means nothing moves on screen but the ages, each at its step: a file written
        // less than a minute ago shows its age to the second, and is drawn every second until
        // then. The window opens once every file is older.
        let quiet_at = written + QUIET_AFTER;
        let wait = quiet_at.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            println!(
                "
waiting {:.0} s for the files last written to age past a minute",
                wait.as_secs_f64()
            );
            drain_all(&mut [&mut dash, &mut floor], wait)?;
        }
        println!(
            "\nthe watcher's first pass over {jobs} jobs: {} s after it started",
            first_pass.as_secs()
        );
        println!(
            "\nidle window: {} s from now; dashboard pid {}, watcher pid {}, empty dashboard \
             pid {}; quiet files {:.0} s old",
            knobs.idle.as_secs(),
            dash.pid(),
            watcher.id(),
            floor.pid(),
            written.elapsed().as_secs_f64()
        );
        io::stdout().flush().map_err(|e| e.to_string())?;
        let pids = [dash.pid(), watcher.id(), floor.pid()];
        let slices = 6u32;
        let slice = knobs.idle / slices;
        let start: Vec<CpuUse> = pids.iter().map(|&p| cpu_use(p)).collect::<Result<_, _>>()?;
        let bytes_before = (dash.output_bytes, floor.output_bytes);
        let began = Instant::now();
        let mut slice_percents: [Vec<f64>; 3] = Default::default();
        let mut last = start.clone();
        for _ in 0..slices {
            let slice_start = Instant::now();
            drain_all(&mut [&mut dash, &mut floor], slice)?;
            let now: Vec<CpuUse> = pids.iter().map(|&p| cpu_use(p)).collect::<Result<_, _>>()?;
            let secs = slice_start.elapsed().as_secs_f64();
            for (k, percents) in slice_percents.iter_mut().enumerate() {
                percents.push(percent(last[k], now[k], secs, tck).0);
            }
            last = now;
        }
        let secs = began.elapsed().as_secs_f64();
        let names = ["dashboard", "watcher", "empty dashboard"];
        let (mut whole, mut medians) = (Vec::new(), Vec::new());
        for (k, name) in names.iter().enumerate() {
            let (precise, coarse) = percent(start[k], last[k], secs, tck);
            let mut slices = slice_percents[k].clone();
            slices.sort_by(f64::total_cmp);
            println!(
                "  {name:<16} {precise:.4} % of one core (schedstat), {coarse:.3} % (ticks @ {tck} Hz); \
                 median {:.0} s slice {:.4} %",
                secs / f64::from(6),
                slices[slices.len() / 2]
            );
            whole.push(precise);
            medians.push(slices[slices.len() / 2]);
        }
        println!(
            "  screen output during the window: dashboard {} bytes, empty dashboard {} bytes",
            dash.output_bytes - bytes_before.0,
            floor.output_bytes - bytes_before.1
        );
        for (k, name) in ["dashboard", "watcher"].iter().enumerate() {
            table.add(
                format!(
                    "idle CPU, {name}, {jobs} quiet jobs, {:.0} s",
                    knobs.idle.as_secs_f64()
                ),
                format!("≤ {IDLE_TARGET_PERCENT} % of one core"),
                format!("empty dashboard {:.4} %", whole[2]),
                format!(
                    "{:.4} % over the window; median {:.0} s slice {:.4} %",
                    whole[k],
                    knobs.idle.as_secs_f64() / f64::from(slices),
                    medians[k]
                ),
                "—",
                Some(whole[k] <= IDLE_TARGET_PERCENT),
            );
        }
        Ok(())
    })();
    let _ = kill(Pid::from_raw(watcher.id() as i32), Signal::SIGTERM);
    let _ = watcher.wait();
    dash.quit()?;
    floor.quit()?;
    result
}

/// The size of the binary `cargo install` puts in place: the bench's own release build (the
/// bench profile is the release profile), against what a full `strip` of it would leave.
fn measure_binary(exe: &Path, table: &mut Table) -> Result<(), String> {
    const TARGET_BYTES: u64 = 10_000_000;
    let size = std::fs::metadata(exe)
        .map_err(|error| format!("cannot look at '{}': {error}", exe.display()))?
        .len();
    let stripped =
        std::env::temp_dir().join(format!("mihari-bench-stripped-{}", std::process::id()));
    let floor = match Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(exe)
        .status()
    {
        Ok(status) if status.success() => {
            let bytes = std::fs::metadata(&stripped).map(|m| m.len()).ok();
            let _ = std::fs::remove_file(&stripped);
            bytes
        }
        _ => None,
    };
    let mb = |bytes: u64| format!("{:.1} MB", bytes as f64 / 1e6);
    table.add(
        "the installed binary (`binary`: release profile, no debug info or symbols, fat LTO, one codegen unit, SQLite at -Os)",
        "≤ 10 MB",
        floor.map_or("`strip` not found".to_string(), |f| format!("`strip` of it: {}", mb(f))),
        mb(size),
        floor.map_or("-".to_string(), |f| format!("{:.2}x", size as f64 / f as f64)),
        Some(size <= TARGET_BYTES),
    );
    Ok(())
}
