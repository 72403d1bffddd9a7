//! A write storm: logs written many times a second, and what the live loop (the watcher's and
//! the dashboard's) does with it, with real files, real inotify, real holders and the real
//! dashboard in a pty.
//!
//! - A log write re-reads the log alone: not the lock beside it, nor its holder in `/proc`,
//!   nor the progress count (a storm of a thousand logs must not re-read a thousand locks ten
//!   times a second). A change to the lock still re-reads the lock.
//! - A storm of writes to one log is gathered once per pace window, not once per write.
//! - A holder's death in the storm is still seen, and so is the last write.
//! - The dashboard's frames in a storm are paced: at most one per window (and the display's
//!   own tick), however fast the screen's figures change.
//!
//! No test here asserts how long anything took: the figures are in `benches/perf.rs`
//! (`MIHARI_BENCH_ONLY=storm`). Wall-clock bounds are generous guards against a hang.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use mihari::core::{Reading, State};
use mihari::engine::live::{Arrivals, Live, PACE, Pace};
use mihari::engine::triggers::Trigger;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::pty::{Winsize, openpty};

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// A `sleep` that holds a job's lock, killed and reaped when dropped.
struct Holder(Child);

impl Holder {
    fn spawn() -> Holder {
        Holder(
            Command::new("sleep")
                .arg("600")
                .stdin(Stdio::null())
                .spawn()
                .expect("sleep starts"),
        )
    }

    /// The lock's JSON: the PID and its start time, as `mihari run` writes them.
    fn lock_text(&self) -> String {
        let pid = self.0.id();
        let ticks = mihari::probe::proc::start_ticks(pid).expect("start ticks of a live sleep");
        format!("{{\"pid\": {pid}, \"start_time\": {ticks}}}")
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A folder with `jobs` jobs (`job0`..), each with a lock held by a live `sleep`, a log and a
/// progress file, and the jobs file.
struct Farm {
    dir: tempfile::TempDir,
    holders: Vec<Holder>,
}

impl Farm {
    fn new(jobs: usize) -> Farm {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path();
        let mut yaml = String::from("settings:\n  state_dir: state\njobs:\n");
        let mut holders = Vec::new();
        for n in 0..jobs {
            yaml.push_str(&format!(
                "  - id: job{n}\n    lock: job{n}.lock\n    log: job{n}.log\n    \
                 progress_file: job{n}.progress\n    stall_sec: 3600\n    \
                 expected_total: 100000000\n    should_run_when: [not_complete]\n"
            ));
            let holder = Holder::spawn();
            fs::write(root.join(format!("job{n}.lock")), holder.lock_text()).expect("lock");
            fs::write(root.join(format!("job{n}.log")), "worker started\n").expect("log");
            fs::write(root.join(format!("job{n}.progress")), "1\n2\n3\n").expect("progress");
            holders.push(holder);
        }
        let config = root.join("jobs.yaml");
        fs::write(&config, yaml).expect("jobs file");
        fs::set_permissions(&config, fs::Permissions::from_mode(0o600)).expect("chmod");
        Farm { dir, holders }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn live(&self) -> (Live, tokio::sync::mpsc::UnboundedReceiver<Trigger>) {
        let config = mihari::config::load(&self.path("jobs.yaml")).expect("the jobs file loads");
        let (sender, inbox) = tokio::sync::mpsc::unbounded_channel();
        let live = Live::new(
            config,
            Arc::new(move |trigger| {
                let _ = sender.send(trigger);
            }),
        )
        .expect("the live loop starts");
        (live, inbox)
    }
}

/// Appends `lines` lines to `path`, one write each, `every` apart, while `stop` is not set.
/// Returns how many it wrote.
fn storm(path: PathBuf, lines: usize, every: Duration, stop: Arc<AtomicBool>) -> usize {
    let mut file = OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("the log opens");
    let mut written = 0;
    while written < lines && !stop.load(Ordering::Relaxed) {
        file.write_all(format!("step {written} loss 0.1234\n").as_bytes())
            .expect("a log line");
        written += 1;
        std::thread::sleep(every);
    }
    written
}

fn modified(path: &Path) -> chrono::DateTime<Utc> {
    fs::metadata(path)
        .and_then(|meta| meta.modified())
        .expect("mtime")
        .into()
}

fn log_stamp(snapshot: &mihari::engine::Snapshot, job: &str) -> chrono::DateTime<Utc> {
    match snapshot.evidence_of(job).and_then(|e| e.log.as_ref()) {
        Some(Reading::Found(stamp)) => stamp.modified,
        other => panic!("no log reading for {job}: {other:?}"),
    }
}

#[test]
fn a_log_write_re_reads_the_log_alone_never_the_lock_and_its_holder_beside_it() {
    let mut farm = Farm::new(1);
    let (mut live, _inbox) = farm.live();
    // Nothing followed yet: only the triggers noted below say what changed.
    let first = live.first_look(Utc::now());
    assert_eq!(first.assessment_of("job0").unwrap().state, State::Running);

    // The holder dies and the log is written; only the log's change is told.
    farm.holders[0].kill();
    std::thread::sleep(Duration::from_millis(20));
    let log = farm.path("job0.log");
    fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut f| f.write_all(b"step 1\n"))
        .expect("append");
    let mut arrivals = Arrivals::default();
    live.note(&mut arrivals, Trigger::Changed(log.clone()));
    let after_log = live
        .apply(arrivals, false, Utc::now())
        .expect("a log write calls for a snapshot");
    assert_eq!(log_stamp(&after_log, "job0"), modified(&log));
    assert_eq!(
        after_log.assessment_of("job0").unwrap().state,
        State::Running,
        "a log write must not re-read the lock and its holder: the death is the holder's \
         own trigger"
    );

    // The lock's change re-reads the lock (and judges its holder again).
    let mut arrivals = Arrivals::default();
    live.note(&mut arrivals, Trigger::Changed(farm.path("job0.lock")));
    let after_lock = live.apply(arrivals, false, Utc::now()).expect("a snapshot");
    assert_eq!(
        after_lock.assessment_of("job0").unwrap().state,
        State::DeadLockStale
    );
}

/// Runs the live loop as the watcher does until `done` says so (or 60 s, a guard against a
/// hang): batches from the pace, noted and applied. Returns the passes made and the last
/// snapshot.
fn run_loop(
    live: &mut Live,
    inbox: &mut tokio::sync::mpsc::UnboundedReceiver<Trigger>,
    snapshot: mihari::engine::Snapshot,
    done: impl Fn(&mihari::engine::Snapshot) -> bool,
) -> (usize, mihari::engine::Snapshot) {
    run_costly_loop(live, inbox, snapshot, Duration::ZERO, done)
}

/// [`run_loop`], each pass that made a snapshot taking `cost` longer (as drawing a large
/// screen does), and telling the pace what each pass gathered, as the front-ends do. The
/// loop's own deadline (which a pass never waits past) is 500 ms, or 50 times the cost.
fn run_costly_loop(
    live: &mut Live,
    inbox: &mut tokio::sync::mpsc::UnboundedReceiver<Trigger>,
    mut snapshot: mihari::engine::Snapshot,
    cost: Duration,
    done: impl Fn(&mihari::engine::Snapshot) -> bool,
) -> (usize, mihari::engine::Snapshot) {
    let tick = (cost * 50).max(Duration::from_millis(500));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut pace = Pace::new();
    let mut passes = 0;
    let guard = Instant::now() + Duration::from_secs(60);
    runtime.block_on(async {
        while !done(&snapshot) && Instant::now() < guard {
            let deadline = Some(Utc::now() + chrono::TimeDelta::from_std(tick).unwrap());
            let batch = pace
                .next_batch(inbox, deadline, Trigger::can_wait, Trigger::may_space)
                .await;
            let mut arrivals = Arrivals::holding_growth(pace.holds_growth());
            for trigger in batch {
                live.note(&mut arrivals, trigger);
            }
            let applied = live.apply(arrivals, false, Utc::now());
            pace.gathered_storm(live.gathered_storm());
            if let Some(fresh) = applied {
                passes += 1;
                snapshot = fresh;
                std::thread::sleep(cost);
            }
        }
    });
    (passes, snapshot)
}

#[test]
fn a_storm_of_writes_to_one_log_is_gathered_once_per_pace_window_not_once_per_write() {
    let farm = Farm::new(3);
    let (mut live, mut inbox) = farm.live();
    let first = live.start(Utc::now());
    let log = farm.path("job1.log");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = std::thread::spawn({
        let (log, stop) = (log.clone(), stop.clone());
        move || storm(log, 1000, Duration::from_micros(500), stop)
    });
    let finished = AtomicBool::new(false);
    let began = Instant::now();
    let (passes, last) = run_loop(&mut live, &mut inbox, first, |snapshot| {
        if !finished.load(Ordering::Relaxed) && writer.is_finished() {
            finished.store(true, Ordering::Relaxed);
            return false;
        }
        // One more pass after the writer ended, and it must have seen the last write.
        finished.load(Ordering::Relaxed) && log_stamp(snapshot, "job1") == modified(&log)
    });
    let elapsed = began.elapsed();
    let written = writer.join().expect("the writer");
    assert_eq!(written, 1000);
    assert_eq!(
        log_stamp(&last, "job1"),
        modified(&log),
        "the last write is seen"
    );
    // Each pass gathers what arrived during a whole window: many writes each, never one pass
    // per write.
    assert!(
        passes * 10 <= written,
        "{passes} passes for {written} writes: a storm must be gathered once per window of \
         {PACE:?}, not once per write"
    );
    // And a window is the pace's: at most one pass per PACE of the storm (and the last one).
    let windows = (elapsed.as_millis() / PACE.as_millis()) as usize;
    assert!(
        passes <= windows + 2,
        "{passes} passes in {elapsed:?}: at most one per {PACE:?}"
    );
}

#[test]
fn a_storm_whose_passes_cost_more_is_gathered_less_often_and_a_death_still_at_once() {
    // Passes for a storm of jobs writing on are spaced by what they cost: a pass of 40 ms (a
    // large farm's gather and draw) is followed by forty times that, capped at 1 s, before
    // the next one for them. At the plain pace (100 ms) the same 3 s would make some twenty.
    let mut farm = Farm::new(2);
    let (mut live, mut inbox) = farm.live();
    let first = live.start(Utc::now());
    // A storm is more than one job writing on: both logs.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = ["job0.log", "job1.log"]
        .into_iter()
        .map(|log| {
            let (log, stop) = (farm.path(log), stop.clone());
            std::thread::spawn(move || storm(log, usize::MAX, Duration::from_millis(2), stop))
        })
        .collect();
    let began = Instant::now();
    let (passes, snapshot) = run_costly_loop(
        &mut live,
        &mut inbox,
        first,
        Duration::from_millis(40),
        |_| began.elapsed() > Duration::from_secs(3),
    );
    let elapsed = began.elapsed();
    assert!(passes > 0, "the storm made passes");
    assert!(
        passes as u128 <= elapsed.as_millis() / 1000 + 2,
        "{passes} passes in {elapsed:?}, each 40 ms long: at most one a second"
    );
    // A death does not wait for the storm's spacing.
    farm.holders[0].kill();
    let killed = Instant::now();
    let (_, seen) = run_costly_loop(
        &mut live,
        &mut inbox,
        snapshot,
        Duration::from_millis(40),
        |snapshot| snapshot.assessment_of("job0").unwrap().state == State::DeadLockStale,
    );
    let waited = killed.elapsed();
    assert_eq!(
        seen.assessment_of("job0").unwrap().state,
        State::DeadLockStale
    );
    assert!(
        waited < Duration::from_millis(600),
        "the death waited {waited:?}, as long as the storm's spacing"
    );
    // Nor does a lock taken in the storm: it is not a job writing on.
    let holder = Holder::spawn();
    let lock = farm.path("job0.lock");
    let fresh = farm.path("job0.lock.new");
    fs::write(&fresh, holder.lock_text()).expect("a new lock");
    fs::rename(&fresh, &lock).expect("the lock replaced");
    let taken = Instant::now();
    let (_, seen) = run_costly_loop(
        &mut live,
        &mut inbox,
        seen,
        Duration::from_millis(40),
        |snapshot| snapshot.assessment_of("job0").unwrap().state == State::Running,
    );
    let waited = taken.elapsed();
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().expect("a writer");
    }
    farm.holders.push(holder);
    assert_eq!(seen.assessment_of("job0").unwrap().state, State::Running);
    assert!(
        waited < Duration::from_millis(600),
        "the new lock waited {waited:?}, as long as the storm's spacing"
    );
    // What the passes for the death and the lock left to the storm's own pass is gathered:
    // the last write of each log is seen.
    let logs = [farm.path("job0.log"), farm.path("job1.log")];
    let (_, last) = run_costly_loop(
        &mut live,
        &mut inbox,
        seen,
        Duration::from_millis(40),
        |snapshot| {
            ["job0", "job1"]
                .iter()
                .zip(&logs)
                .all(|(job, log)| log_stamp(snapshot, job) == modified(log))
        },
    );
    for (job, log) in ["job0", "job1"].iter().zip(&logs) {
        assert_eq!(
            log_stamp(&last, job),
            modified(log),
            "{job}'s last write is seen"
        );
    }
}

#[test]
fn a_death_in_a_write_storm_is_still_seen() {
    let mut farm = Farm::new(4);
    let (mut live, mut inbox) = farm.live();
    let first = live.start(Utc::now());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|n| {
            let (log, stop) = (farm.path(&format!("job{n}.log")), stop.clone());
            std::thread::spawn(move || storm(log, usize::MAX, Duration::from_millis(1), stop))
        })
        .collect();
    // The storm is on: a few passes, then job2's holder dies.
    let (passes, snapshot) = run_loop(&mut live, &mut inbox, first, {
        let started = Instant::now();
        move |_| started.elapsed() > Duration::from_millis(500)
    });
    assert!(passes > 0, "the storm made passes");
    farm.holders[2].kill();
    let (_, seen) = run_loop(&mut live, &mut inbox, snapshot, |snapshot| {
        snapshot.assessment_of("job2").unwrap().state == State::DeadLockStale
    });
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().expect("a writer");
    }
    assert_eq!(
        seen.assessment_of("job2").unwrap().state,
        State::DeadLockStale,
        "the death during the storm is seen"
    );
    for job in ["job0", "job1", "job3"] {
        assert_eq!(seen.assessment_of(job).unwrap().state, State::Running);
    }
}

/// `mihari tui` on `config` in a 120x40 pty; its output is read by [`Screen::read_for`].
struct Screen {
    child: Child,
    master: File,
    parser: vt100::Parser,
    /// When each read of output arrived.
    bursts: Vec<Instant>,
}

impl Screen {
    fn start(config: &Path) -> Screen {
        let size = Winsize {
            ws_row: 40,
            ws_col: 120,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = openpty(&size, None).expect("openpty");
        fcntl(pty.master.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).expect("nonblocking");
        let slave = || Stdio::from(pty.slave.try_clone().expect("dup"));
        let mut command = Command::new(BIN);
        command
            .arg("tui")
            .arg("--config")
            .arg(config)
            .env("TERM", "xterm-256color")
            .stdin(slave())
            .stdout(slave())
            .stderr(slave());
        // SAFETY: between fork and exec only async-signal-safe calls: setsid(2) and ioctl(2).
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                if libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("mihari tui starts");
        drop(pty.slave);
        Screen {
            child,
            master: File::from(pty.master),
            parser: vt100::Parser::new(
                std::num::NonZero::new(40).expect("rows"),
                std::num::NonZero::new(120).expect("columns"),
                0,
            ),
            bursts: Vec::new(),
        }
    }

    /// Reads output for `how_long`, or until `wanted` holds for the screen; whether it does.
    fn read_until(&mut self, how_long: Duration, wanted: impl Fn(&str) -> bool) -> bool {
        let until = Instant::now() + how_long;
        let mut buf = [0u8; 65536];
        loop {
            if wanted(&self.parser.screen().contents()) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            match self.master.read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => {
                    self.parser.process(&buf[..n]);
                    self.bursts.push(Instant::now());
                }
                Err(error) if error.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(_) => return false,
            }
        }
    }

    /// Frames drawn since `from`: bursts of output more than 5 ms apart.
    fn frames_since(&self, from: Instant) -> usize {
        let mut frames = 0;
        let mut last: Option<Instant> = None;
        for &at in self.bursts.iter().filter(|at| **at >= from) {
            if last.is_none_or(|last| at.duration_since(last) > Duration::from_millis(5)) {
                frames += 1;
            }
            last = Some(at);
        }
        frames
    }
}

/// Whether some row of the screen holds both `id` and `state` as whole words.
fn row_shows(contents: &str, id: &str, state: &str) -> bool {
    contents.lines().any(|row| {
        let words: Vec<&str> = row
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        words.contains(&id) && words.contains(&state)
    })
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = self.master.write_all(b"q");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_dashboard_draws_a_write_storm_at_most_once_per_pace_window_and_still_shows_a_death() {
    let mut farm = Farm::new(3);
    let mut screen = Screen::start(&farm.path("jobs.yaml"));
    assert!(
        screen.read_until(Duration::from_secs(30), |s| s.contains("3 jobs")
            && s.contains("job2")),
        "no first screen:\n{}",
        screen.parser.screen().contents()
    );
    screen.read_until(Duration::from_secs(1), |_| false);

    // The progress count on screen changes with every line: without pacing, every gather
    // would be a frame of its own.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|n| {
            let path = farm.path(&format!("job{n}.progress"));
            let stop = stop.clone();
            std::thread::spawn(move || {
                storm(
                    path.clone(),
                    usize::MAX,
                    Duration::from_millis(2),
                    stop.clone(),
                );
            })
        })
        .collect();
    let began = Instant::now();
    screen.read_until(Duration::from_secs(3), |_| false);
    let elapsed = began.elapsed();
    let frames = screen.frames_since(began);

    // A death during the storm is still drawn.
    farm.holders[1].kill();
    let dead = screen.read_until(Duration::from_secs(10), |contents| {
        row_shows(contents, "job1", "DEAD_LOCK_STALE")
    });
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().expect("a writer");
    }
    assert!(
        dead,
        "the death is not on screen:\n{}",
        screen.parser.screen().contents()
    );
    // One frame per window, plus the display's tick each second and a little slack.
    let most = (elapsed.as_millis() / PACE.as_millis()) as usize + elapsed.as_secs() as usize + 3;
    assert!(
        frames >= 1,
        "the storm drew nothing:\n{}",
        screen.parser.screen().contents()
    );
    assert!(
        frames <= most,
        "{frames} frames in {elapsed:?}: a storm must be drawn at most once per {PACE:?}"
    );
}

/// A pass that read only the store does not count for the pace (the watcher's records of one
/// change would hold up its judgment of the next by up to the pace), but never two in a row:
/// records and reads that fed each other would spin. A batch that made no pass counts for
/// neither. Only the lower bound is asserted here (a
/// sleep is never early); how soon the pass after one comes is the bench's to measure.
#[test]
fn passes_that_read_only_the_store_are_paced_when_two_come_in_a_row() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (sender, mut inbox) = tokio::sync::mpsc::unbounded_channel::<u8>();
    let mut pace = Pace::new();
    runtime.block_on(async {
        hand_one(&mut pace, &sender, &mut inbox, 0).await;
        pace.read_the_store_only();
        // A batch that made no pass (a beat taken into the snapshot in hand) is not one of
        // the row, nor does it break it.
        hand_one(&mut pace, &sender, &mut inbox, 9).await;
        pace.made_no_pass();
        hand_one(&mut pace, &sender, &mut inbox, 1).await;
        let second = Instant::now();
        // The second in a row: it counts, and the next pass keeps the pace after it.
        pace.read_the_store_only();
        hand_one(&mut pace, &sender, &mut inbox, 2).await;
        assert!(
            second.elapsed() + Duration::from_millis(5) >= PACE,
            "a pass {:?} after two that read only the store: the pace is {PACE:?}",
            second.elapsed()
        );
    });
}

/// Sends `input` as a file event and takes the batch the pace hands out: that one alone.
async fn hand_one(
    pace: &mut Pace,
    sender: &tokio::sync::mpsc::UnboundedSender<u8>,
    inbox: &mut tokio::sync::mpsc::UnboundedReceiver<u8>,
    input: u8,
) {
    sender.send(input).expect("send");
    let batch = pace
        .next_batch(inbox, None, |_: &u8| true, |_: &u8| false)
        .await;
    assert_eq!(batch, [input]);
}
