//! The `run_output` part of the perf bench (`MIHARI_BENCH_ONLY=run_output`): what it costs
//! that `mihari run` copies a job's output into its log through a pipe, against the same job
//! writing into a file itself, in the same run.
//!
//! The job is Debian's `/usr/bin/python3 -u`, one `write(2)` per line (the worst case for a
//! copier: a line per wake-up), 50-odd bytes a line:
//! - as fast as it can, `MIHARI_BENCH_RUN_LINES` (1,000,000) lines: wall time and CPU time
//!   (user + system of every process, from `getrusage(RUSAGE_CHILDREN)`) of `mihari run`
//!   with its job, against the job alone with its stdout a file; the ratio of the medians;
//! - paced at 100,000 lines a second for 3 s: the CPU time of `mihari run` with its job
//!   against the job's alone, and the difference as a share of one core.
//!
//! Both logs must hold the same number of bytes, or the part fails.

use std::fs::{self, File};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::common::*;
use super::{Knobs, Table};

const PYTHON: &str = "/usr/bin/python3";
/// `mihari run`'s wall time on a job printing as fast as it can: at most this times the same
/// job writing into a file.
const WALL_TARGET_RATIO: f64 = 1.5;
/// Lines a second of the paced job, and for how long.
const PACED_RATE: u64 = 100_000;
const PACED_SECS: u64 = 3;

const WRITER: &str = r#"
import sys, time
n, rate = int(sys.argv[1]), float(sys.argv[2])
write = sys.stdout.write
start = time.monotonic()
for i in range(n):
    write(f"step {i}/{n} loss 0.1234 lr 0.0003 tokens 123456\n")
    if rate and i % 1000 == 999:
        late = start + (i + 1) / rate - time.monotonic()
        if late > 0:
            time.sleep(late)
"#;

/// CPU time (user + system) of every child reaped so far.
fn children_cpu() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// Runs `command` to its end: (wall, CPU of it and everything it waited for).
fn timed(mut command: Command) -> Result<(Duration, Duration), String> {
    let cpu = children_cpu();
    let started = Instant::now();
    let status = command
        .status()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    let wall = started.elapsed();
    if !status.success() {
        return Err(format!("{command:?} failed: {status}"));
    }
    Ok((wall, children_cpu() - cpu))
}

/// One run of each: the job writing into `direct` itself, then under `mihari run` (its log
/// `logs/job.log`). Returns ((wall, cpu) direct, (wall, cpu) under mihari run).
type Pair = ((Duration, Duration), (Duration, Duration));

fn one_pair(exe: &Path, root: &Path, lines: u64, rate: u64) -> Result<Pair, String> {
    let script = root.join("writer.py");
    let direct = root.join("direct.log");
    let log = root.join("logs/job.log");
    let _ = fs::remove_file(&direct);
    let _ = fs::remove_file(&log);
    let file = File::create(&direct).map_err(|e| format!("{}: {e}", direct.display()))?;
    let mut alone = Command::new(PYTHON);
    alone
        .arg("-u")
        .arg(&script)
        .arg(lines.to_string())
        .arg(rate.to_string())
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(Stdio::null());
    let alone = timed(alone)?;
    write(
        &root.join("jobs.yaml"),
        format!(
            "settings:\n  state_dir: state\njobs:\n  - id: job\n    lock: job.lock\n    \
             log: logs/job.log\n    should_run_when: [resource_free]\n    restart:\n      \
             command: ['{PYTHON}', '-u', '{}', '{lines}', '{rate}']\n",
            script.display()
        ),
    )?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(root.join("jobs.yaml"), fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("chmod: {e}"))?;
    let mut under = Command::new(exe);
    under
        .arg("--config")
        .arg(root.join("jobs.yaml"))
        .args(["run", "job"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let under = timed(under)?;
    let sizes = (
        fs::metadata(&direct).map(|m| m.len()).unwrap_or(0),
        fs::metadata(&log).map(|m| m.len()).unwrap_or(0),
    );
    if sizes.0 != sizes.1 || sizes.0 == 0 {
        return Err(format!(
            "the logs differ: {} bytes written directly, {} through mihari run",
            sizes.0, sizes.1
        ));
    }
    Ok((alone, under))
}

pub fn measure_run_output(knobs: &Knobs, exe: &Path, table: &mut Table) -> Result<(), String> {
    if !Path::new(PYTHON).exists() {
        return Err(format!(
            "{PYTHON} is missing: install the Debian package 'python3'"
        ));
    }
    let lines = env_u64("MIHARI_BENCH_RUN_LINES", 1_000_000)?.max(1000);
    let root = knobs.tempdir()?;
    fs::create_dir(root.path().join("logs")).map_err(|e| format!("mkdir logs: {e}"))?;
    write(&root.path().join("writer.py"), WRITER)?;

    let runs = knobs.runs.max(3);
    let (mut alone_wall, mut alone_cpu, mut under_wall, mut under_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut ratios = Vec::new();
    for run in 0..runs {
        let ((aw, ac), (uw, uc)) = one_pair(exe, root.path(), lines, 0)?;
        println!(
            "run_output run {}: {lines} lines as fast as it can: alone {} (cpu {}), under \
             mihari run {} (cpu {})",
            run + 1,
            ms(aw),
            ms(ac),
            ms(uw),
            ms(uc)
        );
        ratios.push((
            uw.as_secs_f64() / aw.as_secs_f64(),
            uc.as_secs_f64() / ac.as_secs_f64(),
        ));
        alone_wall.push(aw);
        alone_cpu.push(ac);
        under_wall.push(uw);
        under_cpu.push(uc);
    }
    let (aw, ac, uw, uc) = (
        median(&mut alone_wall),
        median(&mut alone_cpu),
        median(&mut under_wall),
        median(&mut under_cpu),
    );
    let wall_ratio = uw.as_secs_f64() / aw.as_secs_f64();
    let cpu_ratio = uc.as_secs_f64() / ac.as_secs_f64();
    let rate = lines as f64 / uw.as_secs_f64();
    println!(
        "run_output: medians of {runs}: wall {} alone, {} under mihari run ({wall_ratio:.2}×, \
         {rate:.0} lines/s); cpu {} alone, {} with mihari run ({cpu_ratio:.2}×); per-run \
         ratios (wall, cpu): {ratios:.2?}",
        ms(aw),
        ms(uw),
        ms(ac),
        ms(uc)
    );
    table.add(
        format!(
            "`mihari run`, a job printing {lines} lines as fast as it can (`python3 -u`, a \
             write per line): wall time"
        ),
        format!("≤ {WALL_TARGET_RATIO}× floor"),
        format!("the same job writing into a file itself {}", ms(aw)),
        format!("{} ({rate:.0} lines/s)", ms(uw)),
        format!("{wall_ratio:.2}×"),
        Some(wall_ratio <= WALL_TARGET_RATIO),
    );
    table.add(
        "the same: CPU time of every process (user + system)",
        "—",
        format!("the job alone {}", ms(ac)),
        ms(uc),
        format!("{cpu_ratio:.2}×"),
        None,
    );

    let paced_lines = PACED_RATE * PACED_SECS;
    let (mut paced_alone, mut paced_under) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let ((aw, ac), (uw, uc)) = one_pair(exe, root.path(), paced_lines, PACED_RATE)?;
        println!(
            "run_output paced run {}: {PACED_RATE} lines/s for {PACED_SECS} s: alone {} (cpu \
             {}), under mihari run {} (cpu {})",
            run + 1,
            ms(aw),
            ms(ac),
            ms(uw),
            ms(uc)
        );
        paced_alone.push(ac);
        paced_under.push(uc);
    }
    let (alone, under) = (median(&mut paced_alone), median(&mut paced_under));
    let added = (under.as_secs_f64() - alone.as_secs_f64()) / PACED_SECS as f64 * 100.0;
    table.add(
        format!(
            "`mihari run`, a job printing {PACED_RATE} lines/s for {PACED_SECS} s: CPU time \
             of every process"
        ),
        "—",
        format!("the job alone, writing into a file itself {}", ms(alone)),
        format!("{} ({added:+.1} % of one core)", ms(under)),
        format!("{:.2}×", under.as_secs_f64() / alone.as_secs_f64()),
        None,
    );
    drop(root);
    Ok(())
}
