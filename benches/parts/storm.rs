//! The `storm` part of the perf bench (`MIHARI_BENCH_ONLY=storm`): a write storm on the
//! 1,000-job fleet, and what the watcher and the dashboard spend following it.
//!
//! Every job's log gets a line `MIHARI_BENCH_STORM_RATE` (10) times a second for
//! `MIHARI_BENCH_STORM_SECS` (30) s — 10,000 writes a second, spread evenly over each tenth of
//! a second by one writer thread that keeps the 1,000 logs open. Meanwhile a `mihari watch`
//! and a `mihari tui` (in a 120x40 pty, its filter on the three measured jobs) run on the
//! fleet, beside the floor: `inotifywait -m -e modify,attrib,close_write,move,create,delete`
//! over the same two folders, its output thrown away — a process that only receives the same
//! write events. Measured over the storm, in six slices:
//! - the CPU (schedstat of every thread) of the watcher, the dashboard and the floor: the ratio
//!   of each to the floor over the whole storm (judged: at most 3x), and the median slice's;
//! - the dashboard's frames a second (bursts of screen output more than 5 ms apart; judged: at
//!   most 10): so that every pass changes the screen, `staller` (on screen) gets a progress
//!   line every hundredth of a second beside the storm;
//! - `MIHARI_BENCH_STORM_KILLS` (20) deaths during the storm: held's holder killed (and reaped
//!   by the bench), timed until the dashboard shows DEAD_LOCK_STALE (judged: p99 at most
//!   100 ms), then a new holder and lock, until RUNNING again.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::common::*;
use super::{
    Fleet, GIVE_UP, Knobs, LATENCY_TARGET, MEASURED, Table, cpu_use, latency_row, pause_for,
    percent, print_latencies, watcher_first_pass,
};

/// The watcher's and the dashboard's CPU during the storm: at most this times the floor's.
const STORM_TARGET_RATIO: f64 = 3.0;
/// The dashboard's frames a second during the storm: at most this many.
const FRAMES_TARGET: f64 = 10.0;
/// Output closer together than this is one frame.
const FRAME_GAP: Duration = Duration::from_millis(5);
const SLICES: u32 = 6;

/// The storm's knobs.
struct Storm {
    secs: u64,
    rate: u64,
    kills: usize,
}

impl Storm {
    fn read() -> Result<Storm, String> {
        Ok(Storm {
            secs: env_u64("MIHARI_BENCH_STORM_SECS", 30)?.max(SLICES.into()),
            rate: env_u64("MIHARI_BENCH_STORM_RATE", 10)?.max(1),
            kills: env_u64("MIHARI_BENCH_STORM_KILLS", 20)? as usize,
        })
    }
}

/// Kills and reaps a child when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.0.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                let _ = self.0.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.wait();
    }
}

/// The writer: a line to every log `rate` times a second, the logs in ten groups, one group
/// every tenth of the period, and a progress line to `visible` with each group, until `stop`.
/// Counts the log lines written.
fn writer(
    logs: Vec<PathBuf>,
    visible: PathBuf,
    rate: u64,
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
) -> Result<(), String> {
    let mut files: Vec<File> = logs
        .iter()
        .map(|path| {
            OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(|e| format!("cannot open '{}': {e}", path.display()))
        })
        .collect::<Result<_, _>>()?;
    let mut visible = OpenOptions::new()
        .append(true)
        .open(&visible)
        .map_err(|e| format!("cannot open '{}': {e}", visible.display()))?;
    let period = Duration::from_secs(1) / rate as u32;
    let groups = 10usize;
    let per_group = files.len().div_ceil(groups);
    let started = Instant::now();
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for group in 0..groups {
            let at = started + period * round as u32 + period / groups as u32 * group as u32;
            let wait = at.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
            visible
                .write_all(format!("{{\"round\":{round},\"group\":{group}}}\n").as_bytes())
                .map_err(|e| format!("cannot write a progress line: {e}"))?;
            let from = group * per_group;
            for file in files.iter_mut().skip(from).take(per_group) {
                file.write_all(
                    format!("step {round} loss 0.1234 lr 0.0003 tokens 123456\n").as_bytes(),
                )
                .map_err(|e| format!("cannot write a log line: {e}"))?;
                written.fetch_add(1, Ordering::Relaxed);
            }
        }
        round += 1;
    }
    Ok(())
}

/// Frames in `bursts` within `[from, to)`: bursts more than [`FRAME_GAP`] apart.
fn frames(bursts: &[(Instant, usize)], from: Instant, to: Instant) -> usize {
    let mut count = 0;
    let mut last: Option<Instant> = None;
    for &(at, _) in bursts.iter().filter(|(at, _)| *at >= from && *at < to) {
        if last.is_none_or(|last| at.duration_since(last) > FRAME_GAP) {
            count += 1;
        }
        last = Some(at);
    }
    count
}

pub fn measure_storm(knobs: &Knobs, exe: &Path, table: &mut Table) -> Result<(), String> {
    let storm = Storm::read()?;
    let mut holders = Holders::default();
    let mut fleet = Fleet::create(knobs, &mut holders)?;
    let root = fleet.root.path().to_path_buf();
    let tck = mihari::probe::proc::clock_ticks_per_second()?;

    let watcher = Reaped(
        Command::new(exe)
            .arg("watch")
            .arg("--config")
            .arg(&fleet.live_yaml)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start the watcher: {e}"))?,
    );
    let mut dash = Dashboard::spawn(exe, &fleet.live_yaml)?;
    let header = format!("{} jobs", knobs.jobs + 3);
    dash.wait_until(Duration::from_secs(60), |s| screen_contains(s, &header))?
        .ok_or_else(|| format!("no first screen within 60 s:\n{}", dash.dump()))?;
    watcher_first_pass(&fleet.live_yaml, knobs.jobs + 3, &mut [&mut dash])?;
    dash.send(format!("/{MEASURED}\r").as_bytes())?;
    dash.wait_until(Duration::from_secs(10), |s| {
        screen_contains(s, &format!("filter '{MEASURED}'")) && row_shows(s, "held", "RUNNING")
    })?
    .ok_or_else(|| format!("the filtered screen did not show:\n{}", dash.dump()))?;
    let floor = Reaped(
        Command::new("inotifywait")
            .args([
                "-m",
                "-q",
                "-e",
                "modify,attrib,close_write,move,create,delete",
            ])
            .arg(root.join("jobs"))
            .arg(root.join("measured"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start inotifywait (inotify-tools): {e}"))?,
    );
    dash.drain_for(Duration::from_secs(3))?;

    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let logs: Vec<PathBuf> = fleet.logs.iter().map(|log| root.join(log)).collect();
    let writing = std::thread::spawn({
        let (stop, written, rate) = (stop.clone(), written.clone(), storm.rate);
        let visible = fleet.staller_progress.clone();
        move || writer(logs, visible, rate, stop, written)
    });
    // The first second of the storm is not counted: the floor and mihari start from rest.
    dash.drain_for(Duration::from_secs(1))?;

    let pids = [watcher.0.id(), dash.pid(), floor.0.id()];
    let result = (|| -> Result<_, String> {
        let start: Vec<_> = pids.iter().map(|&p| cpu_use(p)).collect::<Result<_, _>>()?;
        let written_before = written.load(Ordering::Relaxed);
        let began = Instant::now();
        let slice = Duration::from_secs(storm.secs) / SLICES;
        let kills_per_slice = storm.kills.div_ceil(SLICES as usize);
        let (mut dead, mut back, mut reaped) = (
            Latencies::default(),
            Latencies::default(),
            Latencies::default(),
        );
        let mut slices: [Vec<f64>; 3] = Default::default();
        let mut last = start.clone();
        let mut killed = 0;
        for n in 0..SLICES {
            let slice_start = Instant::now();
            let slice_end = began + slice * (n + 1);
            while killed < storm.kills && killed < kills_per_slice * (n as usize + 1) {
                dash.drain_for(pause_for(killed))?;
                let started = Instant::now();
                reaped.samples.push(holders.kill(fleet.held_pid)?);
                let seen = dash.wait_until(GIVE_UP, |s| row_shows(s, "held", "DEAD_LOCK_STALE"))?;
                dead.record(started, seen);
                dash.drain_for(pause_for(killed + 1))?;
                let started = Instant::now();
                let (pid, ticks) = holders.spawn()?;
                fleet.replace_held_lock(pid, ticks)?;
                let seen = dash.wait_until(GIVE_UP, |s| row_shows(s, "held", "RUNNING"))?;
                back.record(started, seen);
                killed += 1;
            }
            dash.drain_for(slice_end.saturating_duration_since(Instant::now()))?;
            let now: Vec<_> = pids.iter().map(|&p| cpu_use(p)).collect::<Result<_, _>>()?;
            let secs = slice_start.elapsed().as_secs_f64();
            for (k, percents) in slices.iter_mut().enumerate() {
                percents.push(percent(last[k], now[k], secs, tck).0);
            }
            last = now;
        }
        let secs = began.elapsed().as_secs_f64();
        let writes = written.load(Ordering::Relaxed) - written_before;
        let whole: Vec<f64> = (0..3)
            .map(|k| percent(start[k], last[k], secs, tck).0)
            .collect();
        let frame_count = frames(&dash.bursts, began, Instant::now());
        Ok((whole, slices, writes, secs, frame_count, dead, back, reaped))
    })();
    stop.store(true, Ordering::Relaxed);
    let wrote = writing
        .join()
        .map_err(|_| "the writer panicked".to_string());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let (whole, slices, writes, secs, frame_count, dead, back, reaped) = result?;
    wrote??;
    let _ = dash.quit()?;
    drop(floor);
    drop(watcher);
    drop(holders);

    println!(
        "\nthe storm: {} logs x {} lines a second for {:.0} s: {writes} writes ({:.0} a second); \
         load average then: {}",
        knobs.jobs,
        storm.rate,
        secs,
        writes as f64 / secs,
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let names = ["watcher", "dashboard", "inotifywait (floor)"];
    let mut median_ratio = [0.0f64; 2];
    for (k, name) in names.iter().enumerate() {
        let ratios: Vec<f64> = slices[k]
            .iter()
            .zip(&slices[2])
            .map(|(ours, floor)| ours / floor.max(1e-9))
            .collect();
        let mut sorted = ratios.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        if k < 2 {
            median_ratio[k] = median;
        }
        println!(
            "  {name:<20} {:.2} % of one core over the storm; slices {}; ratio to the floor {:.2}x \
             (median slice {median:.2}x)",
            whole[k],
            slices[k]
                .iter()
                .map(|p| format!("{p:.2}"))
                .collect::<Vec<_>>()
                .join(" "),
            whole[k] / whole[2].max(1e-9),
        );
    }
    let fps = frame_count as f64 / secs;
    println!("  dashboard frames: {frame_count} in {secs:.0} s ({fps:.1} a second)");
    print_latencies(
        &format!(
            "deaths during the storm, on the {}-job dashboard",
            knobs.jobs + 3
        ),
        &[
            (
                "holder killed: kill -> reaped by the bench (floor)",
                &reaped,
            ),
            ("holder killed -> DEAD_LOCK_STALE on screen", &dead),
            ("new holder + lock -> RUNNING (info)", &back),
        ],
    );
    for (k, name) in ["watcher", "dashboard"].iter().enumerate() {
        let ratio = whole[k] / whole[2].max(1e-9);
        table.add(
            format!(
                "CPU of the {name} in a write storm ({} logs x {}/s, {:.0} s)",
                knobs.jobs, storm.rate, secs
            ),
            format!("≤ {STORM_TARGET_RATIO}× the floor"),
            format!("`inotifywait -m` on the same folders {:.2} %", whole[2]),
            format!(
                "{:.2} % of one core (median slice {:.2}×)",
                whole[k], median_ratio[k]
            ),
            format!("{ratio:.2}×"),
            Some(ratio <= STORM_TARGET_RATIO),
        );
    }
    table.add(
        "dashboard frames a second in the storm",
        format!("≤ {FRAMES_TARGET}"),
        "—",
        format!("{frame_count} in {secs:.0} s"),
        format!("{fps:.1}/s"),
        Some(fps <= FRAMES_TARGET),
    );
    latency_row(
        table,
        format!(
            "a holder's death in the storm → DEAD_LOCK_STALE on screen ({})",
            dead.count()
        ),
        "kill → reaped",
        &reaped,
        &dead,
    );
    let _ = LATENCY_TARGET;
    Ok(())
}
