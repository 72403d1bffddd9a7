//! The kernel's-reading part of the perf bench (`MIHARI_BENCH_ONLY=kernel`): what looking at
//! quiet live holders in `/proc` costs.
//!
//! - 1,000 alive holders (`sleep`s), each with three regular files open (stdin read, stdout
//!   and stderr written): one look at all of them in process (`probe::activity::look`, the
//!   tree, CPU, schedstat, io, wchan, syscall, descriptors, positions and sizes), beside the
//!   floor of `progress -m`'s one-shot read of the same files (each holder's `fd` folder, a
//!   `stat` and a `readlink` per descriptor and its `fdinfo`), medians of several rounds; with
//!   `stall_sec: 300` a holder is looked at once a minute, so one round is the watcher's extra
//!   CPU per minute;
//! - `mihari check --json` over those 1,000 jobs (their logs 200 s old: quiet, looked at), and
//!   the same with `io_progress: false`'s cost left out by a `stall_sec: never` twin (nothing
//!   looked at): what the two reads 500 ms apart add to a one-off check;
//! - the idle CPU of `mihari watch` over 100 of them held and quiet (`stall_sec: 3600`, logs
//!   1,900 s old: looked at every 60 s), over the idle window, at most 0.05 % of one core.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use super::common::*;
use super::{Knobs, Table, cpu_ticks, cpu_use};

const HOLDERS: usize = 1000;
const IDLE_JOBS: usize = 100;
const IDLE_TARGET_PERCENT: f64 = 0.05;

/// Sleeps with three regular files open, killed when dropped.
struct Sleepers(Vec<Child>);

impl Drop for Sleepers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn sleeper(dir: &Path, n: usize) -> Result<Child, String> {
    let input = dir.join(format!("in{n}.dat"));
    write(&input, vec![1u8; 4096])?;
    let open =
        |name: String| fs::File::create(dir.join(name)).map_err(|e| format!("cannot create: {e}"));
    Command::new("sleep")
        .arg("36000")
        .stdin(fs::File::open(&input).map_err(|e| format!("cannot open: {e}"))?)
        .stdout(open(format!("out{n}.dat"))?)
        .stderr(open(format!("err{n}.dat"))?)
        .spawn()
        .map_err(|e| format!("cannot start sleep: {e}"))
}

/// `progress`'s own read of one process: its descriptors, a stat and a readlink of each, and
/// the `fdinfo` of each regular file.
fn progress_style_read(pid: u32) -> usize {
    let mut read = 0;
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    for fd in fds.flatten() {
        let Ok(meta) = fs::metadata(fd.path()) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let _ = fs::read_link(fd.path());
        let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
        read += fs::read_to_string(info).map(|t| t.len()).unwrap_or(0);
    }
    read
}

/// CPU time of this process so far (user + system), from its own stat.
fn own_cpu() -> Result<Duration, String> {
    let tck = mihari::probe::proc::clock_ticks_per_second()?;
    let ticks = cpu_ticks(std::process::id())?;
    Ok(Duration::from_secs_f64(ticks as f64 / tck as f64))
}

/// Sets a file's modification time `secs` into the past.
fn age(path: &Path, secs: u64) -> Result<(), String> {
    let file = fs::File::options()
        .write(true)
        .open(path)
        .map_err(|e| format!("cannot open '{}': {e}", path.display()))?;
    file.set_modified(SystemTime::now() - Duration::from_secs(secs))
        .map_err(|e| format!("cannot age '{}': {e}", path.display()))
}

fn jobs_file(
    dir: &Path,
    holders: &[(u32, u64)],
    stall: &str,
    log_age: u64,
) -> Result<std::path::PathBuf, String> {
    let mut yaml = String::from("settings:\n  state_dir: ./state\njobs:\n");
    for (n, (pid, ticks)) in holders.iter().enumerate() {
        let id = format!("k{n:04}");
        let lock = dir.join(format!("{id}.lock"));
        let log = dir.join(format!("{id}.log"));
        write(&lock, json_lock(*pid, *ticks))?;
        write(&log, b"started\n")?;
        age(&log, log_age)?;
        yaml.push_str(&format!(
            "  - id: {id}\n    lock: {id}.lock\n    log: {id}.log\n    stall_sec: {stall}\n    \
             should_run_when: [resource_free]\n"
        ));
    }
    let config = dir.join(format!("jobs-{stall}.yaml"));
    write(&config, yaml)?;
    Ok(config)
}

pub fn measure_kernel(knobs: &Knobs, exe: &Path, table: &mut Table) -> Result<(), String> {
    let root = knobs.tempdir()?;
    let dir = root.path();
    let mut sleepers = Sleepers(Vec::new());
    let mut holders = Vec::new();
    for n in 0..HOLDERS {
        let child = sleeper(dir, n)?;
        let pid = child.id();
        sleepers.0.push(child);
        let ticks = mihari::probe::proc::start_ticks(pid).ok_or("a sleeper is gone")?;
        holders.push((pid, ticks));
    }

    // One look at every holder, in process, against progress's one-shot read.
    let mut ours = Vec::new();
    let mut ours_cpu = Vec::new();
    let mut floor = Vec::new();
    for _ in 0..knobs.runs {
        let cpu = own_cpu()?;
        let started = Instant::now();
        for (pid, ticks) in &holders {
            let sample = mihari::probe::activity::look(*pid, *ticks, true, &[])?;
            assert_eq!(sample.processes[0].files.len(), 3, "three files each");
        }
        ours.push(started.elapsed());
        ours_cpu.push(own_cpu()?.saturating_sub(cpu));
        let started = Instant::now();
        for (pid, _) in &holders {
            progress_style_read(*pid);
        }
        floor.push(started.elapsed());
    }
    let (look, look_cpu, floor) = (median(&mut ours), median(&mut ours_cpu), median(&mut floor));
    let per_minute = look_cpu.as_secs_f64() / 60.0 * 100.0;
    table.add(
        format!("one look at {HOLDERS} quiet holders, 3 files each (`kernel`)"),
        "≤ 3× floor (it reads io, schedstat, wchan, syscall and the tree too)",
        format!("progress-style read of the same fds: {}", ms(floor)),
        format!(
            "{} wall, {} CPU; at stall_sec 300 (a look a minute) {per_minute:.3} % of a core",
            ms(look),
            ms(look_cpu)
        ),
        format!("{:.2}×", look.as_secs_f64() / floor.as_secs_f64()),
        Some(look.as_secs_f64() <= 3.0 * floor.as_secs_f64()),
    );

    // A one-off check over the same holders: quiet (looked at, two reads) against never.
    let looked = jobs_file(dir, &holders, "300", 200)?;
    let never = jobs_file(dir, &holders, "never", 200)?;
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..knobs.runs.min(5) {
        for (config, into) in [(&looked, &mut with), (&never, &mut without)] {
            let started = Instant::now();
            let output = Command::new(exe)
                .args(["check", "--json", "--config"])
                .arg(config)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("check: {e}"))?;
            into.push(started.elapsed());
            let text = String::from_utf8_lossy(&output.stdout);
            if config == &looked && !text.contains("\"activity\":{\"state\":\"waiting\"") {
                return Err(format!(
                    "the holders were not looked at: {}",
                    &text[..text.len().min(600)]
                ));
            }
        }
    }
    let (with, without) = (median(&mut with), median(&mut without));
    table.add(
        format!("`mihari check --json`, {HOLDERS} quiet holders looked at (`kernel`)"),
        "— (two reads 500 ms apart)",
        format!(
            "the same jobs with stall_sec never (no look): {}",
            ms(without)
        ),
        ms(with),
        format!("+{}", ms(with.saturating_sub(without))),
        None,
    );

    // The watcher's idle CPU with 100 held, quiet jobs looked at every 60 s.
    let idle_dir = dir.join("idle");
    fs::create_dir(&idle_dir).map_err(|e| format!("mkdir: {e}"))?;
    let config = jobs_file(&idle_dir, &holders[..IDLE_JOBS], "3600", 1900)?;
    let mut watcher = Command::new(exe)
        .args(["watch", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the watcher: {e}"))?;
    let result = (|| {
        std::thread::sleep(Duration::from_secs(10));
        let before = cpu_use(watcher.id())?.on_cpu_ns;
        let started = Instant::now();
        std::thread::sleep(knobs.idle);
        let used = cpu_use(watcher.id())?.on_cpu_ns.saturating_sub(before) as f64 / 1e9;
        let percent = used / started.elapsed().as_secs_f64() * 100.0;
        table.add(
            format!(
                "idle CPU, watcher, {IDLE_JOBS} held quiet jobs looked at every 60 s, {} s (`kernel`)",
                knobs.idle.as_secs()
            ),
            format!("≤ {IDLE_TARGET_PERCENT} % of one core"),
            "—",
            format!("{percent:.4} %"),
            "—",
            Some(percent <= IDLE_TARGET_PERCENT),
        );
        Ok::<(), String>(())
    })();
    let _ = watcher.kill();
    let _ = watcher.wait();
    drop(sleepers);
    result
}
