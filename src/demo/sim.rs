//! The simulated jobs of the demo: `mihari sim ...`, hidden from help.
//!
//! A simulated worker is a real process doing what a real long-running job does: it takes a
//! lock (JSON with its PID and start time, as `mihari run` writes it), appends to a log and a
//! progress file, inserts rows into a SQLite table, advances a run manifest phase by phase,
//! crashes or finishes. mihari itself plays every part so the demo needs no Python and no
//! shell. A worker dies with the demo that started it (parent-death signal), so quitting the
//! demo never leaves processes behind. `screen` is the demo's dashboard, run as the demo's
//! child so that the demo reaps and ends whatever the dashboard starts. One part serves the crash tests instead of the demo:
//! `append`, which appends events to the store and acknowledges each one on stdout.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use chrono::{Local, Utc};
use clap::{Args, Subcommand, ValueEnum};

#[derive(Debug, Args)]
pub struct SimArgs {
    #[command(subcommand)]
    pub part: SimPart,
}

#[derive(Debug, Subcommand)]
pub enum SimPart {
    /// A worker: lock, log, progress, table, manifest.
    Worker(WorkerArgs),
    /// The demo's dashboard, run as the demo's child: the dashboard on `config`, with
    /// `greeting` on its status line until the first key.
    Screen {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        greeting: Option<String>,
    },
    /// A check: exit 0, or with `--fail MESSAGE` print it and exit 1.
    Check {
        #[arg(long, value_name = "MESSAGE")]
        fail: Option<String>,
    },
    /// For the crash tests: append `count` events for `job` to the store in `state_dir`, one
    /// transaction each, printing each id on stdout as soon as its commit has returned. A
    /// printed id is an acknowledged event: it must survive a `kill -9` of anything.
    Append {
        #[arg(long)]
        state_dir: PathBuf,
        #[arg(long, default_value_t = 100)]
        count: u64,
        #[arg(long, default_value = "sim-append")]
        job: String,
    },
}

#[derive(Debug, Args, Clone, Default)]
pub struct WorkerArgs {
    /// The lock to take (JSON with pid and start_time).
    #[arg(long)]
    pub lock: Option<PathBuf>,
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Appended with one JSON line per item done.
    #[arg(long)]
    pub progress: Option<PathBuf>,
    /// A SQLite database; one row per item done in table `progress`.
    #[arg(long)]
    pub table: Option<PathBuf>,
    /// A run manifest advanced one phase per item done.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    #[arg(long, default_value_t = 500)]
    pub log_every_ms: u64,
    #[arg(long, default_value_t = 1000)]
    pub progress_every_ms: u64,
    /// Items to do; the worker idles (still logging) once they are done, unless `--finish`.
    #[arg(long, default_value_t = 1000)]
    pub total: u64,
    /// Items already done when it starts (a resumed run).
    #[arg(long, default_value_t = 0)]
    pub start_at: u64,
    /// Remove the lock and exit 0 once every item is done.
    #[arg(long)]
    pub finish: bool,
    /// Write a traceback, remove the lock and exit 1 after this long.
    #[arg(long, value_name = "MS")]
    pub crash_after_ms: Option<u64>,
    /// Log lines full of escape sequences, as a hostile or broken job would write.
    #[arg(long)]
    pub hostile: bool,
    /// Exit when this PID is no longer the parent (set by the demo).
    #[arg(long)]
    pub parent: Option<u32>,
    /// How the log shows progress: plain lines, tqdm's carriage-return frames, or
    /// `epoch E/N step S/M` lines as a training loop prints them.
    #[arg(long, value_enum, default_value_t = LogStyle::Plain)]
    pub style: LogStyle,
}

/// How a worker's log shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogStyle {
    #[default]
    Plain,
    /// One tqdm bar redrawn with `\r`, never a newline until the end: what a tqdm loop's
    /// stderr holds.
    Tqdm,
    /// `epoch 2/5 step 1200/5000 loss 0.412`.
    Steps,
}

/// A tqdm frame as tqdm draws it: `\r 45%|████▌     | 450/1000 [00:07<00:09, 60.00it/s]`.
fn tqdm_frame(done: u64, total: u64, elapsed: Duration) -> String {
    let total = total.max(1);
    let fraction = done.min(total) as f64 / total as f64;
    let filled = (fraction * 10.0).floor() as usize;
    let bar: String = "█".repeat(filled) + &" ".repeat(10 - filled.min(10));
    let secs = elapsed.as_secs_f64().max(0.001);
    let rate = done as f64 / secs;
    let left = if rate > 0.0 {
        (total - done.min(total)) as f64 / rate
    } else {
        0.0
    };
    let mmss = |s: f64| format!("{:02}:{:02}", (s as u64) / 60, (s as u64) % 60);
    format!(
        "\r{:3.0}%|{bar}| {done}/{total} [{}<{}, {rate:.2}it/s]",
        fraction * 100.0,
        mmss(secs),
        mmss(left)
    )
}

/// The phases of a phased pipeline's run manifest.
const PHASES: [&str; 7] = [
    "loading",
    "topic_selection",
    "topic_dedup",
    "article_generation",
    "pre_publish_validate",
    "publish",
    "cleanup",
];

/// Lines a hostile job writes: title changes, screen clears, bidi overrides, 8-bit controls.
const HOSTILE_LINES: [&str; 8] = [
    "\u{1b}]0;YOU HAVE BEEN PWNED\u{7}title change attempt",
    "\u{1b}[2J\u{1b}[Hscreen clear attempt",
    "\u{1b}[31;1mERROR\u{1b}[0m coloured error line",
    "invoice\u{202e}fdp.exe bidi override",
    "\u{9b}2J eight-bit CSI clear",
    "\u{1b}P+q544e\u{1b}\\ DCS request",
    "bell\u{7}\u{7}\u{7} and backspace\u{8}\u{8}",
    "\u{1b}]52;c;cm0gLXJmIH4=\u{7}clipboard write attempt",
];

pub fn run(args: SimArgs) -> ExitCode {
    match args.part {
        SimPart::Worker(worker) => match run_worker(&worker) {
            Ok(code) => code,
            Err(error) => {
                eprintln!("mihari sim worker: {error}");
                ExitCode::from(70)
            }
        },
        SimPart::Screen { config, greeting } => match crate::config::load(&config) {
            Ok(config) => crate::tui::run_greeted(config, greeting),
            Err(error) => {
                eprintln!("mihari sim screen: {error}");
                ExitCode::from(3)
            }
        },
        SimPart::Check { fail: None } => {
            println!("ok");
            ExitCode::SUCCESS
        }
        SimPart::Check {
            fail: Some(message),
        } => {
            println!("{message}");
            ExitCode::from(1)
        }
        SimPart::Append {
            state_dir,
            count,
            job,
        } => match append_events(&state_dir, count, &job) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("mihari sim append: {error}");
                ExitCode::from(70)
            }
        },
    }
}

/// Appends `count` events one by one; each id is printed and flushed only after its commit
/// returned, so every id on stdout is one the store has acknowledged.
fn append_events(state_dir: &Path, count: u64, job: &str) -> Result<(), String> {
    use crate::store::{Actor, Kind, NewEvent, Store};
    let mut store = Store::open(state_dir, Actor::Cli).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    for i in 1..=count {
        let id = store
            .append(
                NewEvent::new(Kind::Detected)
                    .job(job)
                    .reason(format!("sim append {i} of {count}")),
            )
            .map_err(|e| e.to_string())?;
        writeln!(out, "{id}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("cannot print id {id}: {e}"))?;
    }
    Ok(())
}

fn run_worker(args: &WorkerArgs) -> std::io::Result<ExitCode> {
    if let Some(parent) = args.parent {
        // Die with the demo: the kernel sends SIGKILL when the parent goes.
        let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
        if std::os::unix::process::parent_id() != parent {
            return Ok(ExitCode::from(0));
        }
    }
    let pid = std::process::id();
    if let Some(lock) = &args.lock {
        let content = serde_json::json!({
            "pid": pid,
            "start_time": crate::probe::proc::self_start_ticks().unwrap_or(0),
            "cmdline": "mihari sim worker",
            "run_id": format!("demo-{pid}"),
        });
        write_atomically(lock, content.to_string().as_bytes())?;
    }
    let table = match &args.table {
        Some(path) => Some(open_table(path).map_err(std::io::Error::other)?),
        None => None,
    };
    let mut done = args.start_at;
    if let Some(path) = &args.progress
        && fs::metadata(path).map_or(true, |m| m.len() == 0)
    {
        // A resumed run: the items done before it are already in the progress file.
        let earlier: String = (1..=done)
            .map(|i| format!("{{\"i\":{i},\"file\":\"shard-{i:06}.parquet\",\"ok\":true}}\n"))
            .collect();
        fs::write(path, earlier)?;
    }
    let started = Instant::now();
    let mut next_log = Duration::ZERO;
    let mut next_progress = Duration::from_millis(args.progress_every_ms);
    let mut hostile = HOSTILE_LINES.iter().cycle();
    log_line(args, &format!("worker {pid} started at item {done}"))?;
    loop {
        let elapsed = started.elapsed();
        if let Some(after) = args.crash_after_ms
            && elapsed >= Duration::from_millis(after)
        {
            log_line(args, "Traceback (most recent call last):")?;
            log_line(args, "ConnectionError: upstream returned 503 three times")?;
            remove_lock(args);
            return Ok(ExitCode::from(1));
        }
        if elapsed >= next_progress && done < args.total {
            done += 1;
            record_progress(args, table.as_ref(), done)?;
            next_progress += Duration::from_millis(args.progress_every_ms);
        }
        if done >= args.total && args.finish {
            if args.style == LogStyle::Tqdm {
                log_raw(args, &(tqdm_frame(done, args.total, elapsed) + "\n"))?;
            }
            log_line(args, &format!("all {done} items done"))?;
            remove_lock(args);
            return Ok(ExitCode::SUCCESS);
        }
        if elapsed >= next_log && args.style == LogStyle::Tqdm {
            log_raw(args, &tqdm_frame(done, args.total, elapsed))?;
            next_log += Duration::from_millis(args.log_every_ms);
        } else if elapsed >= next_log && args.style == LogStyle::Steps {
            let epochs = 5;
            let per_epoch = args.total.div_ceil(epochs).max(1);
            let line = format!(
                "epoch {}/{epochs} step {done}/{} loss {:.3}",
                (done / per_epoch + 1).min(epochs),
                args.total,
                2.0 / (1.0 + done as f64 / 50.0)
            );
            log_line(args, &line)?;
            next_log += Duration::from_millis(args.log_every_ms);
        } else if elapsed >= next_log {
            let line = if args.hostile {
                hostile.next().copied().unwrap_or_default().to_string()
            } else {
                format!("fetched {done} of {} items", args.total)
            };
            log_line(args, &line)?;
            next_log += Duration::from_millis(args.log_every_ms);
        }
        let wake = next_log.min(next_progress);
        let nap = wake.saturating_sub(started.elapsed());
        thread::sleep(nap.clamp(Duration::from_millis(5), Duration::from_millis(250)));
    }
}

fn record_progress(
    args: &WorkerArgs,
    table: Option<&rusqlite::Connection>,
    done: u64,
) -> std::io::Result<()> {
    if let Some(path) = &args.progress {
        let mut file = OpenOptions::new().create(true).append(true).open(path)?;
        writeln!(
            file,
            "{{\"i\":{done},\"file\":\"shard-{done:06}.parquet\",\"ok\":true}}"
        )?;
    }
    if let Some(db) = table {
        let now = Utc::now().timestamp_millis() as f64 / 1000.0;
        db.execute(
            "INSERT INTO progress (item, updated_at) VALUES (?1, ?2)",
            rusqlite::params![done as i64, now],
        )
        .map_err(std::io::Error::other)?;
    }
    if let Some(path) = &args.manifest {
        let phase = (done as usize).min(PHASES.len() - 1);
        let results: serde_json::Map<String, serde_json::Value> = PHASES[..phase]
            .iter()
            .map(|p| (p.to_string(), serde_json::Value::Bool(true)))
            .collect();
        let manifest = serde_json::json!({
            "run_id": format!("run-{}", std::process::id()),
            "current_phase": PHASES[phase],
            "phase_results": results,
            // Python's datetime.now().isoformat(): naive local time, as in seed 004.
            "updated_at": Local::now().naive_local().format("%Y-%m-%dT%H:%M:%S%.6f").to_string(),
        });
        write_atomically(path, serde_json::to_string_pretty(&manifest)?.as_bytes())?;
    }
    Ok(())
}

fn open_table(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let db = rusqlite::Connection::open(path)?;
    db.pragma_update(None, "journal_mode", "wal")?;
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS progress (item INTEGER NOT NULL, updated_at REAL NOT NULL)",
    )?;
    Ok(db)
}

fn log_line(args: &WorkerArgs, line: &str) -> std::io::Result<()> {
    if let Some(path) = &args.log {
        let mut file = OpenOptions::new().create(true).append(true).open(path)?;
        writeln!(
            file,
            "{} {line}",
            Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ")
        )?;
    }
    Ok(())
}

/// Appends `text` as it is: a tqdm frame has no line end.
fn log_raw(args: &WorkerArgs, text: &str) -> std::io::Result<()> {
    if let Some(path) = &args.log {
        let mut file = OpenOptions::new().create(true).append(true).open(path)?;
        file.write_all(text.as_bytes())?;
    }
    Ok(())
}

fn remove_lock(args: &WorkerArgs) {
    if let Some(lock) = &args.lock {
        let _ = fs::remove_file(lock);
    }
}

/// Writes through a temp file and a rename, so a reader never sees half a file.
pub(crate) fn write_atomically(path: &Path, content: &[u8]) -> std::io::Result<()> {
    let folder = path.parent().unwrap_or(Path::new("."));
    let mut temp = tempfile::NamedTempFile::new_in(folder)?;
    temp.write_all(content)?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
