//! The dashboard, measured from the outside: the real `mihari tui` binary in a real
//! pseudo-terminal, its screen read back through a terminal emulator (`vt100`).
//!
//! Run with `cargo bench --bench dashboard` (Cargo builds the binary in release). It reports
//! three figures, each against its target, and exits 0 whether or not a target is met (it is
//! a report; setup failures exit 1):
//!
//! | measure | target |
//! |---|---|
//! | idle CPU over 60 s with 100 quiet jobs | at most 0.05 % of one core |
//! | a progress write that changes a state -> new screen | at most 100 ms p99 |
//! | a lock holder killed -> DEAD_LOCK_STALE on screen | at most 100 ms p99 |
//!
//! The sandbox is a temporary folder (removed at the end) with a jobs file of 102 jobs:
//!
//! - 100 quiet jobs (`quiet000`..`quiet099`), each with a JSON lock held by a live
//!   `sleep 3600`, a log and a progress file written once and never again, a stall threshold
//!   of a day and a large expected total: RUNNING, and nothing about them changes.
//! - `flip`: no process, a lock that never exists, a progress file of `FLIP_LINES` lines and
//!   an expected total of one more. It is SHOULD_BE_RUNNING; appending a line makes it
//!   COMPLETE, truncating the line away makes it SHOULD_BE_RUNNING again.
//! - `held`: a lock held by a `sleep`, RUNNING. Killing the holder (SIGKILL, reaped) makes it
//!   DEAD_LOCK_STALE; a new `sleep` and an atomically replaced lock make it RUNNING again.
//!
//! The dashboard runs in a 120x40 pty with TERM=xterm-256color. Both measured jobs have the
//! owner `measured` and the bench types the filter `/measured⏎`, so their rows are on screen
//! whatever the order of the other 100. "The screen shows state S for job J" means some
//! screen row holds both J and S as whole words.
//!
//! Order: first screen, filter, 5 s to settle, then the idle window (nothing is written;
//! utime+stime of the dashboard from `/proc/<pid>/stat`, plus on-CPU time and context
//! switches per thread from `/proc/<pid>/task`), then the flips, then the kills. Each latency
//! runs from just before the write (or the kill) to the moment the new state is on screen.
//!
//! Knobs (environment):
//! - `MIHARI_BENCH_IDLE_SECS` (default 60): the idle window, shorter for a quick run.
//! - `MIHARI_BENCH_FLIPS` (default 100): progress writes, alternating both directions.
//! - `MIHARI_BENCH_KILLS` (default 60): holder kills.
//! - `MIHARI_BENCH_QUIET_AGE_SECS` (default 0): back-date the quiet files' mtimes by this
//!   much, to measure a dashboard whose jobs have been quiet for a while (ages in minutes)
//!   rather than since the bench wrote them.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use mihari::probe::proc::clock_ticks_per_second;

#[path = "common/mod.rs"]
mod common;
use common::*;

const QUIET_JOBS: usize = 100;
/// Lines in flip's progress file while it should be running; one more completes it.
const FLIP_LINES: u64 = 1000;
/// Time for everything to settle between the filter and the idle window.
const SETTLE: Duration = Duration::from_secs(5);
/// How long one state change may take to show before it counts as missed.
const GIVE_UP: Duration = Duration::from_secs(5);
/// The owner both measured jobs share, and the filter that shows exactly them.
const MEASURED: &str = "measured";

const IDLE_TARGET_PERCENT: f64 = 0.05;
const LATENCY_TARGET: Duration = Duration::from_millis(100);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("dashboard bench failed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let idle_secs = env_u64("MIHARI_BENCH_IDLE_SECS", 60)?;
    let flips = env_u64("MIHARI_BENCH_FLIPS", 100)? as usize;
    let kills = env_u64("MIHARI_BENCH_KILLS", 60)? as usize;
    let quiet_age = env_u64("MIHARI_BENCH_QUIET_AGE_SECS", 0)?;
    let exe = Path::new(env!("CARGO_BIN_EXE_mihari"));
    let tck = clock_ticks_per_second()?;

    let mut holders = Holders::default();
    let mut sandbox = Sandbox::create(&mut holders, quiet_age)?;
    println!(
        "mihari dashboard bench: {} in a {COLS}x{ROWS} pty, {} jobs ({QUIET_JOBS} quiet), \
         quiet files {}",
        exe.display(),
        QUIET_JOBS + 2,
        if quiet_age == 0 {
            "written at setup".to_string()
        } else {
            format!("back-dated {quiet_age} s")
        }
    );

    let mut dash = Dashboard::spawn(exe, &sandbox.config)?;
    let total = format!("{} jobs", QUIET_JOBS + 2);
    dash.wait_until(Duration::from_secs(20), |s| screen_contains(s, &total))?
        .ok_or_else(|| format!("no first screen within 20 s:\n{}", dash.dump()))?;
    dash.send(format!("/{MEASURED}\r").as_bytes())?;
    dash.wait_until(Duration::from_secs(10), |s| {
        screen_contains(s, &format!("filter '{MEASURED}'"))
            && row_shows(s, "flip", "SHOULD_BE_RUNNING")
            && row_shows(s, "held", "RUNNING")
    })?
    .ok_or_else(|| format!("the filtered screen did not show:\n{}", dash.dump()))?;
    dash.drain_for(SETTLE)?;
    // Said before the window opens, so a tracer (strace -c -f -p PID) can be attached to it.
    println!(
        "idle window: {idle_secs} s from now, dashboard pid {}, quiet files {:.1} s old",
        dash.pid(),
        sandbox.written.elapsed().as_secs_f64() + quiet_age as f64
    );
    io::stdout().flush().map_err(|e| e.to_string())?;

    let idle = measure_idle(&mut dash, Duration::from_secs(idle_secs), tck)?;
    let flip = measure_flips(&mut dash, &sandbox, flips)?;
    let held = measure_kills(&mut dash, &mut sandbox, &mut holders, kills)?;
    let hwm_kib = vm_hwm_bytes(dash.pid())? / 1024;
    let exit = dash.quit()?;
    drop(holders);
    let sandbox_path = sandbox.root.path().to_path_buf();
    drop(sandbox);

    report(&idle, &flip, &held, hwm_kib);
    println!(
        "\ndashboard exit: {exit}; sleeps killed; {} removed",
        sandbox_path.display()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The sandbox

/// The temporary folder with the jobs file and every job's files.
struct Sandbox {
    root: tempfile::TempDir,
    config: PathBuf,
    flip_progress: PathBuf,
    held_lock: PathBuf,
    /// Where lock files are written before being renamed into place: not a watched folder.
    staging: PathBuf,
    held_pid: u32,
    /// When the quiet files were written (their mtime, unless back-dated).
    written: Instant,
}

impl Sandbox {
    /// Writes the jobs file and every job's files, starting a holder for each lock.
    fn create(holders: &mut Holders, quiet_age: u64) -> Result<Sandbox, String> {
        let root = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
        let dir = root.path();
        for sub in ["quiet", "measured", "staging", "state"] {
            fs::create_dir(dir.join(sub)).map_err(|e| format!("mkdir {sub}: {e}"))?;
        }
        let back_date = SystemTime::now() - Duration::from_secs(quiet_age);
        let written = Instant::now();
        let quiet_file = |path: &Path, text: &str| -> Result<(), String> {
            write(path, text)?;
            if quiet_age > 0 {
                File::options()
                    .write(true)
                    .open(path)
                    .and_then(|f| f.set_modified(back_date))
                    .map_err(|e| format!("cannot back-date '{}': {e}", path.display()))?;
            }
            Ok(())
        };

        let mut yaml = String::from(
            "# mihari dashboard bench: 100 quiet jobs and two measured ones.\n\
             settings:\n  state_dir: ./state\njobs:\n",
        );
        yaml.push_str(&format!(
            "  - id: flip\n    owner: {MEASURED}\n    lock: measured/flip.lock\n    \
             progress_file: measured/flip.progress\n    stall_sec: 86400\n    \
             expected_total: {}\n    should_run_when: [not_complete]\n",
            FLIP_LINES + 1
        ));
        quiet_file(&dir.join("measured/flip.progress"), &lines(FLIP_LINES))?;

        yaml.push_str(&format!(
            "  - id: held\n    owner: {MEASURED}\n    lock: measured/held.lock\n    \
             log: measured/held.log\n    progress_file: measured/held.progress\n    \
             stall_sec: 86400\n    expected_total: 1000000\n    \
             should_run_when: [not_complete]\n"
        ));
        quiet_file(&dir.join("measured/held.log"), "worker started\n")?;
        quiet_file(&dir.join("measured/held.progress"), &lines(10))?;
        let (held_pid, ticks) = holders.spawn()?;
        write(&dir.join("measured/held.lock"), json_lock(held_pid, ticks))?;

        for n in 0..QUIET_JOBS {
            let id = format!("quiet{n:03}");
            yaml.push_str(&format!(
                "  - id: {id}\n    owner: quiet\n    lock: quiet/{id}.lock\n    \
                 log: quiet/{id}.log\n    progress_file: quiet/{id}.progress\n    \
                 stall_sec: 86400\n    expected_total: 1000000\n    \
                 should_run_when: [not_complete]\n"
            ));
            quiet_file(&dir.join(format!("quiet/{id}.log")), "worker started\n")?;
            quiet_file(&dir.join(format!("quiet/{id}.progress")), &lines(10))?;
            let (pid, ticks) = holders.spawn()?;
            write(&dir.join(format!("quiet/{id}.lock")), json_lock(pid, ticks))?;
        }
        let config = dir.join("jobs.yaml");
        write(&config, &yaml)?;
        Ok(Sandbox {
            config,
            flip_progress: dir.join("measured/flip.progress"),
            held_lock: dir.join("measured/held.lock"),
            staging: dir.join("staging"),
            held_pid,
            written,
            root,
        })
    }

    /// Replaces held's lock atomically (write in the staging folder, then rename).
    fn replace_held_lock(&mut self, pid: u32, ticks: u64) -> Result<(), String> {
        let temp = self.staging.join("held.lock");
        write(&temp, json_lock(pid, ticks))?;
        fs::rename(&temp, &self.held_lock).map_err(|e| format!("rename held.lock: {e}"))?;
        self.held_pid = pid;
        Ok(())
    }
}

/// `n` newline-terminated JSONL progress lines.
fn lines(n: u64) -> String {
    (0..n).map(|i| format!("{{\"item\":{i}}}\n")).collect()
}

// ---------------------------------------------------------------------------------------------
// The measurements

/// One thread of the dashboard as `/proc/<pid>/task/<tid>` shows it.
#[derive(Debug, Clone, Default)]
struct ThreadStat {
    tid: u32,
    name: String,
    /// Time on a CPU (first field of `schedstat`), when the kernel keeps it.
    on_cpu_ns: Option<u64>,
    /// Voluntary context switches: each is a sleep, so each later wake-up is one.
    voluntary: u64,
    involuntary: u64,
}

/// What the idle window found.
struct Idle {
    secs: f64,
    ticks: u64,
    tck: u64,
    percent: f64,
    threads_before: Vec<ThreadStat>,
    threads_after: Vec<ThreadStat>,
    /// Bursts of screen output during the window: (seconds into it, bytes).
    bursts: Vec<(f64, usize)>,
}

/// Every thread of `pid` with its on-CPU time and context switches.
fn thread_stats(pid: u32) -> Vec<ThreadStat> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut threads: Vec<ThreadStat> = tasks
        .flatten()
        .filter_map(|entry| {
            let tid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let dir = entry.path();
            let status = fs::read_to_string(dir.join("status")).ok()?;
            let value = |key: &str| -> u64 {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0)
            };
            Some(ThreadStat {
                tid,
                name: fs::read_to_string(dir.join("comm"))
                    .map(|c| c.trim().to_string())
                    .unwrap_or_default(),
                on_cpu_ns: fs::read_to_string(dir.join("schedstat"))
                    .ok()
                    .and_then(|s| s.split_whitespace().next()?.parse().ok()),
                voluntary: value("voluntary_ctxt_switches:"),
                involuntary: value("nonvoluntary_ctxt_switches:"),
            })
        })
        .collect();
    threads.sort_by_key(|t| t.tid);
    threads
}

/// Idle CPU: nothing is written for `window`; the dashboard's CPU time is read before and
/// after while its output keeps being drained.
fn measure_idle(dash: &mut Dashboard, window: Duration, tck: u64) -> Result<Idle, String> {
    let pid = dash.pid();
    let first_burst = dash.bursts.len();
    let threads_before = thread_stats(pid);
    let start = Instant::now();
    let before = cpu_ticks(pid)?;
    dash.drain_for(window)?;
    let after = cpu_ticks(pid)?;
    let secs = start.elapsed().as_secs_f64();
    let threads_after = thread_stats(pid);
    let ticks = after - before;
    Ok(Idle {
        secs,
        ticks,
        tck,
        percent: ticks as f64 / (secs * tck as f64) * 100.0,
        threads_before,
        threads_after,
        bursts: dash.bursts[first_burst..]
            .iter()
            .map(|&(at, bytes)| (at.duration_since(start).as_secs_f64(), bytes))
            .collect(),
    })
}

/// A pause between samples that varies (100-250 ms), so samples do not lock to any period
/// of the dashboard; the output keeps being drained meanwhile.
fn pause(dash: &mut Dashboard, i: usize) -> Result<(), String> {
    dash.drain_for(Duration::from_millis(100 + (i as u64 * 53) % 150))
}

/// Progress writes that change flip's state, alternating: append the completing line
/// (COMPLETE), truncate it away (SHOULD_BE_RUNNING).
fn measure_flips(
    dash: &mut Dashboard,
    sandbox: &Sandbox,
    count: usize,
) -> Result<(Latencies, Latencies), String> {
    let short_len = lines(FLIP_LINES).len() as u64;
    let last_line = format!("{{\"item\":{FLIP_LINES}}}\n");
    let mut complete = Latencies::default();
    let mut undone = Latencies::default();
    for i in 0..count {
        pause(dash, i)?;
        let completing = i % 2 == 0;
        let started = Instant::now();
        if completing {
            let mut file = OpenOptions::new()
                .append(true)
                .open(&sandbox.flip_progress)
                .map_err(|e| format!("open flip.progress: {e}"))?;
            file.write_all(last_line.as_bytes())
                .map_err(|e| format!("append to flip.progress: {e}"))?;
        } else {
            OpenOptions::new()
                .write(true)
                .open(&sandbox.flip_progress)
                .and_then(|f| f.set_len(short_len))
                .map_err(|e| format!("truncate flip.progress: {e}"))?;
        }
        let (state, into) = if completing {
            ("COMPLETE", &mut complete)
        } else {
            ("SHOULD_BE_RUNNING", &mut undone)
        };
        let seen = dash.wait_until(GIVE_UP, |s| row_shows(s, "flip", state))?;
        into.record(started, seen);
    }
    Ok((complete, undone))
}

/// Holder kills: SIGKILL and reap held's `sleep` (timed until DEAD_LOCK_STALE shows), then a
/// new `sleep` and an atomically replaced lock (timed until RUNNING shows again).
fn measure_kills(
    dash: &mut Dashboard,
    sandbox: &mut Sandbox,
    holders: &mut Holders,
    count: usize,
) -> Result<(Latencies, Latencies), String> {
    let mut dead = Latencies::default();
    let mut back = Latencies::default();
    for i in 0..count {
        pause(dash, i)?;
        let started = Instant::now();
        holders.kill(sandbox.held_pid)?;
        let seen = dash.wait_until(GIVE_UP, |s| row_shows(s, "held", "DEAD_LOCK_STALE"))?;
        dead.record(started, seen);

        pause(dash, i + 1)?;
        let started = Instant::now();
        let (pid, ticks) = holders.spawn()?;
        sandbox.replace_held_lock(pid, ticks)?;
        let seen = dash.wait_until(GIVE_UP, |s| row_shows(s, "held", "RUNNING"))?;
        back.record(started, seen);
    }
    Ok((dead, back))
}

// ---------------------------------------------------------------------------------------------
// The report

fn report(
    idle: &Idle,
    flips: &(Latencies, Latencies),
    kills: &(Latencies, Latencies),
    hwm_kib: u64,
) {
    let mut both = Latencies::default();
    for part in [&flips.0, &flips.1] {
        both.samples.extend(&part.samples);
        both.missed += part.missed;
    }
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    let p99_ok = |l: &Latencies| l.summary().is_some_and(|s| s[2] <= LATENCY_TARGET);
    let p99_text = |l: &Latencies| {
        l.summary()
            .map_or("no samples".to_string(), |s| format!("p99 {}", ms(s[2])))
    };

    println!();
    println!("{:<40} {:<16} {:<27} result", "measure", "target", "figure");
    println!(
        "{:<40} {:<16} {:<27} {}",
        format!("idle CPU, {:.0} s, {QUIET_JOBS} quiet jobs", idle.secs),
        format!("<= {IDLE_TARGET_PERCENT:.3} %"),
        format!(
            "{:.3} % ({} ticks @ {} Hz)",
            idle.percent, idle.ticks, idle.tck
        ),
        verdict(idle.percent <= IDLE_TARGET_PERCENT)
    );
    println!(
        "{:<40} {:<16} {:<27} {}",
        format!("progress write -> new state ({})", both.count()),
        format!("p99 <= {}", ms(LATENCY_TARGET)),
        p99_text(&both),
        verdict(p99_ok(&both))
    );
    println!(
        "{:<40} {:<16} {:<27} {}",
        format!("holder killed -> DEAD_LOCK_STALE ({})", kills.0.count()),
        format!("p99 <= {}", ms(LATENCY_TARGET)),
        p99_text(&kills.0),
        verdict(p99_ok(&kills.0))
    );

    println!();
    println!(
        "{:<40} {:>7} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "latency", "samples", "min", "median", "p99", "max", "missed"
    );
    for (name, l) in [
        ("progress write, both directions", &both),
        ("  append -> COMPLETE", &flips.0),
        ("  truncate -> SHOULD_BE_RUNNING", &flips.1),
        ("holder killed -> DEAD_LOCK_STALE", &kills.0),
        ("new holder + lock -> RUNNING (info)", &kills.1),
    ] {
        match l.summary() {
            Some([min, median, p99, max]) => println!(
                "{name:<40} {:>7} {:>9} {:>9} {:>9} {:>9} {:>7}",
                l.count(),
                ms(min),
                ms(median),
                ms(p99),
                ms(max),
                l.missed
            ),
            None => println!("{name:<40} {:>7}", 0),
        }
    }

    println!();
    println!("idle window detail ({:.1} s):", idle.secs);
    let on_cpu: u64 = idle
        .threads_after
        .iter()
        .filter_map(|after| {
            let before = idle.threads_before.iter().find(|b| b.tid == after.tid);
            Some(after.on_cpu_ns? - before.map_or(Some(0), |b| b.on_cpu_ns)?)
        })
        .sum();
    println!(
        "  on-CPU time (schedstat, all threads): {:.2} ms = {:.4} % of one core",
        on_cpu as f64 / 1e6,
        on_cpu as f64 / 1e9 / idle.secs * 100.0
    );
    println!(
        "  {:<7} {:<18} {:>10} {:>12} {:>12}",
        "tid", "thread", "wake-ups", "preempted", "on-CPU"
    );
    for after in &idle.threads_after {
        let before = idle
            .threads_before
            .iter()
            .find(|b| b.tid == after.tid)
            .cloned()
            .unwrap_or_default();
        let cpu = match (after.on_cpu_ns, before.on_cpu_ns) {
            (Some(a), Some(b)) => format!("{:.3} ms", (a - b) as f64 / 1e6),
            (Some(a), None) => format!("{:.3} ms", a as f64 / 1e6),
            _ => "-".to_string(),
        };
        println!(
            "  {:<7} {:<18} {:>10} {:>12} {:>12}",
            after.tid,
            after.name,
            after.voluntary - before.voluntary,
            after.involuntary - before.involuntary,
            cpu
        );
    }
    let bytes: usize = idle.bursts.iter().map(|b| b.1).sum();
    let shown: Vec<String> = idle
        .bursts
        .iter()
        .take(24)
        .map(|(at, bytes)| format!("{at:.2}s:{bytes}B"))
        .collect();
    println!(
        "  screen output: {} bursts, {bytes} bytes{}{}",
        idle.bursts.len(),
        if shown.is_empty() { "" } else { " — " },
        shown.join(" ")
    );
    if idle.bursts.len() > shown.len() {
        println!(
            "  ({} more bursts not listed)",
            idle.bursts.len() - shown.len()
        );
    }
    println!(
        "dashboard peak RSS (VmHWM): {:.1} MiB",
        hwm_kib as f64 / 1024.0
    );
}
