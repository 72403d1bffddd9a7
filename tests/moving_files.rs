//! Files that move under us: a real [`Live`] driven in-process the way the dashboard and the
//! watcher drive it — triggers arrive on a channel, each is sorted with `note`, and `apply`
//! makes the next snapshot; `Engine::refresh` is never called by the test. The job has a JSON
//! lock held by a live `sleep`, a log and a progress file.
//!
//! What it proves:
//!
//! - Rename-and-recreate (logrotate's default), copytruncate, atomic replace and
//!   delete-and-recreate, each done 100 times to both the log and the progress file, are each
//!   followed with no update lost: after every repetition, within 2 s and by the event path
//!   alone, the progress count is exactly the lines of the file now at the path, the log's
//!   stamp is the file's own, and the log tail ends with the line just written. Consecutive
//!   repetitions write different numbers of lines, so a snapshot left over from the last one
//!   can never pass for this one.
//! - An inotify queue overflow (a queue of 16 events, a sink that blocks, hundreds of writes)
//!   arrives as `Trigger::Rescan`, and the snapshot after it has gathered every job again.
//! - With the inotify watch limit reached, the folders that could not be watched are named,
//!   the snapshot says it polls them ("polling ..." first among the notices), a write there
//!   shows up at the 2 s poll and not before, and once watches can be added again the next
//!   pass watches the folders and stops polling. The watch limit is per user, and the count
//!   of root's watches moves whenever another process on the machine adds or drops one: the
//!   `Live` under test runs as the second test user (`mihari-other`, tests/common/users.rs),
//!   whose count nothing else touches.
//!
//! The last two lower machine-wide sysctls (as root). Each is saved first and restored by a
//! guard, and lowered only for as long as the `Live` under test takes to set up its inotify
//! instance and its watches (both limits are checked only then), so other processes on the
//! machine are exposed for milliseconds. Where the sysctl cannot be written (not root, a
//! read-only `/proc/sys`), the test says why and passes without checking anything. The tests
//! of this file run one at a time, so none of them is caught inside another's lowered limit.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use chrono::Utc;
use mihari::core::Reading;
use mihari::engine::Snapshot;
use mihari::engine::live::{Arrivals, Live};
use mihari::engine::triggers::{Sink, Trigger};
use mihari::probe::files::modified_utc;
use mihari::probe::tail::tail_lines;

#[path = "common/users.rs"]
mod users;

/// How long a change may take to be reflected before the test fails.
const PATIENCE: Duration = Duration::from_secs(2);
/// How often each file operation is repeated.
const REPETITIONS: usize = 100;
/// The job every test watches.
const JOB: &str = "moving";

const MAX_QUEUED_EVENTS: &str = "/proc/sys/fs/inotify/max_queued_events";
const MAX_USER_WATCHES: &str = "/proc/sys/fs/inotify/max_user_watches";

/// Taken by every test: two of them lower limits that every inotify user of root shares.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A `sleep` that holds the job's lock; killed and reaped when dropped.
struct Holder(Child);

impl Holder {
    fn start() -> Holder {
        Holder(
            Command::new("sleep")
                .arg("600")
                .spawn()
                .expect("start sleep"),
        )
    }

    /// The lock `mihari run` would write for it: pid, start ticks, run id.
    fn lock_json(&self) -> String {
        let pid = self.0.id();
        let ticks = mihari::probe::proc::start_ticks(pid).expect("the holder's start ticks");
        format!(
            "{{\"pid\":{pid},\"start_time\":{ticks},\"cmdline\":\"sleep 600\",\"run_id\":\"moving-1\"}}"
        )
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A saved sysctl, lowered; written back when dropped, whatever happened meanwhile.
struct Lowered {
    path: &'static str,
    saved: String,
}

impl Lowered {
    /// Saves `path` and writes `value` into it, or says why it cannot.
    fn lower(path: &'static str, value: u64) -> Result<Lowered, String> {
        let saved = fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        fs::write(path, value.to_string()).map_err(|e| {
            format!("cannot write {path} (needs root and a writable /proc/sys): {e}")
        })?;
        Ok(Lowered { path, saved })
    }
}

impl Drop for Lowered {
    fn drop(&mut self) {
        if let Err(error) = fs::write(self.path, self.saved.trim()) {
            eprintln!(
                "could NOT restore {} to {}: {error}",
                self.path,
                self.saved.trim()
            );
        }
    }
}

/// One job's files in a temp dir, each kind in its own folder (the lock in `run/`, the log in
/// `logs/`, the progress file in `progress/`, the store in `state/`).
struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
    holder: Holder,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        for folder in ["run", "logs", "progress", "state"] {
            fs::create_dir(root.join(folder)).expect("create folder");
        }
        let holder = Holder::start();
        let sandbox = Sandbox {
            _dir: dir,
            root,
            holder,
        };
        fs::write(sandbox.lock(), sandbox.holder.lock_json()).expect("write the lock");
        fs::write(sandbox.log(), "started\n").expect("write the log");
        fs::write(sandbox.progress(), "{\"i\":1}\n").expect("write the progress file");
        sandbox
    }

    fn lock(&self) -> PathBuf {
        self.root.join("run/moving.lock")
    }

    /// Gives the sandbox and everything in it to user `uid` (group `gid`).
    fn give_to(&self, uid: u32, gid: u32) {
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{uid}:{gid}"))
            .arg(&self.root)
            .status()
            .expect("chown");
        assert!(status.success(), "chown -R failed");
    }

    fn log(&self) -> PathBuf {
        self.root.join("logs/moving.log")
    }

    fn progress(&self) -> PathBuf {
        self.root.join("progress/moving.progress")
    }

    /// The jobs file: the job, plus `extra` more jobs with only a progress file each in
    /// `progress/` (for the overflow test). Never stalls, never completes.
    fn config(&self, extra: usize) -> mihari::config::Config {
        let mut text = String::from(
            "settings:\n  state_dir: state\njobs:\n  - id: moving\n    lock: run/moving.lock\n    \
             log: logs/moving.log\n    progress_file: progress/moving.progress\n    \
             expected_total: 1000000\n    stall_sec: 86400\n    should_run_when: [not_complete]\n",
        );
        for n in 0..extra {
            text.push_str(&format!(
                "  - id: extra{n}\n    progress_file: progress/extra{n}.progress\n    \
                 expected_total: 1000000\n    stall_sec: 86400\n    should_run_when: [not_complete]\n"
            ));
        }
        mihari::config::load_str(&text, &self.root.join("jobs.yaml"))
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// A `Live` with its trigger channel and its latest snapshot, driven like the real loops.
struct Rig {
    live: Live,
    triggers: Receiver<Trigger>,
    snapshot: Snapshot,
    /// Every trigger seen so far.
    seen: Vec<Trigger>,
}

/// A sink into a channel; when `block_first` is set, the first call sleeps 500 ms first
/// (holding up notify's reading thread, so the kernel's queue fills behind it).
fn channel_sink(block_first: Option<Arc<AtomicBool>>) -> (Sink, Receiver<Trigger>) {
    let (sender, receiver) = mpsc::channel();
    let sink: Sink = Arc::new(move |trigger| {
        if let Some(first) = &block_first
            && first.swap(false, Ordering::SeqCst)
        {
            thread::sleep(Duration::from_millis(500));
        }
        let _ = sender.send(trigger);
    });
    (sink, receiver)
}

impl Rig {
    fn new(config: mihari::config::Config) -> Rig {
        let (sink, triggers) = channel_sink(None);
        Rig::with(config, sink, triggers)
    }

    fn with(config: mihari::config::Config, sink: Sink, triggers: Receiver<Trigger>) -> Rig {
        let live = Live::new(config, sink).expect("start Live");
        Rig::started(live, triggers)
    }

    fn started(mut live: Live, triggers: Receiver<Trigger>) -> Rig {
        let snapshot = live.start(Utc::now());
        Rig {
            live,
            triggers,
            snapshot,
            seen: Vec::new(),
        }
    }

    /// One turn of the loop: wait for triggers (or the deadline, or `until`), sort them,
    /// apply. True when a new snapshot was made.
    fn turn(&mut self, until: Instant) -> bool {
        let now = Utc::now();
        let deadline = self.live.deadline(&self.snapshot, now);
        let mut wait = until.saturating_duration_since(Instant::now());
        if let Some(at) = deadline {
            wait = wait.min((at - now).to_std().unwrap_or(Duration::ZERO));
        }
        let mut batch = Vec::new();
        match self.triggers.recv_timeout(wait) {
            Ok(trigger) => batch.push(trigger),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => panic!("the trigger channel closed"),
        }
        while let Ok(more) = self.triggers.try_recv() {
            batch.push(more);
        }
        let mut arrivals = Arrivals::default();
        for trigger in batch {
            self.seen.push(trigger.clone());
            self.live.note(&mut arrivals, trigger);
        }
        let now = Utc::now();
        let reached = deadline.is_some_and(|at| at <= now);
        match self.live.apply(arrivals, reached, now) {
            Some(fresh) => {
                self.snapshot = fresh;
                true
            }
            None => false,
        }
    }

    /// Runs the loop until `wanted` holds for a snapshot made after this call, at most
    /// [`PATIENCE`]. Err with what the last check said.
    fn follow_until(
        &mut self,
        wanted: impl Fn(&Snapshot) -> Result<(), String>,
    ) -> Result<(), String> {
        self.follow_within(PATIENCE, wanted)
    }

    /// [`Rig::follow_until`], at most `patience`.
    fn follow_within(
        &mut self,
        patience: Duration,
        wanted: impl Fn(&Snapshot) -> Result<(), String>,
    ) -> Result<(), String> {
        let give_up = Instant::now() + patience;
        let mut last = "no new snapshot was made".to_string();
        loop {
            if self.turn(give_up) {
                match wanted(&self.snapshot) {
                    Ok(()) => return Ok(()),
                    Err(miss) => last = miss,
                }
            }
            if Instant::now() >= give_up {
                return Err(last);
            }
        }
    }

    /// The last few triggers seen, for a failure message.
    fn recent(&self) -> &[Trigger] {
        &self.seen[self.seen.len().saturating_sub(12)..]
    }
}

/// The line count of job `id` as the snapshot says it, in the assessment and in the evidence.
fn counted(snapshot: &Snapshot, id: &str) -> (Option<u64>, String) {
    let done = snapshot.assessment_of(id).and_then(|a| a.done);
    let reading = match snapshot
        .evidence_of(id)
        .and_then(|e| e.progress_file.as_ref())
    {
        Some(Reading::Found(count)) => format!("{} lines", count.done),
        Some(Reading::Empty) => "empty".to_string(),
        Some(Reading::Fault(fault)) => format!("fault: {fault}"),
        None => "no reading".to_string(),
    };
    (done, reading)
}

/// Whether the snapshot has the job's progress at `lines`, its log stamp equal to the file's
/// own stamp now, and the log tail ending with `newest`.
fn follows(snapshot: &Snapshot, sandbox: &Sandbox, lines: u64, newest: &str) -> Result<(), String> {
    let (done, reading) = counted(snapshot, JOB);
    let found = snapshot
        .evidence_of(JOB)
        .and_then(|e| e.progress_file.as_ref())
        .and_then(Reading::found)
        .map(|c| c.done);
    if done != Some(lines) || found != Some(lines) {
        return Err(format!(
            "progress: expected {lines} lines, saw done {done:?} and the reading '{reading}'"
        ));
    }
    let meta = fs::metadata(sandbox.log()).map_err(|e| format!("the log: {e}"))?;
    let expected = (modified_utc(&meta)?, meta.len());
    let stamp = snapshot.evidence_of(JOB).and_then(|e| e.log.clone());
    match &stamp {
        Some(Reading::Found(stamp)) if (stamp.modified, stamp.len) == expected => {}
        other => {
            return Err(format!(
                "log stamp: expected (modified {}, {} bytes), saw {other:?}",
                expected.0, expected.1
            ));
        }
    }
    match tail_lines(&sandbox.log(), 5) {
        Reading::Found(lines) if lines.last().map(String::as_str) == Some(newest) => Ok(()),
        other => Err(format!(
            "log tail: expected it to end with '{newest}', saw {other:?}"
        )),
    }
}

fn append(path: &Path, text: &str) {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .unwrap_or_else(|e| panic!("append to {}: {e}", path.display()));
}

/// `count` lines for repetition `rep` of `op`. Their width changes from one repetition to
/// the next, so that counting on in a new file from where the old one ended (or reading a
/// stale length) comes out wrong rather than right by accident.
fn lines_for(op: &str, rep: usize, count: u64) -> Vec<String> {
    let pad = "x".repeat((rep * 37) % 61);
    (1..=count)
        .map(|n| format!("{op} rep {rep:03} line {n} {pad}"))
        .collect()
}

/// Writes each line with its own `write`, as a job appending would.
fn write_lines(path: &Path, lines: &[String]) {
    for line in lines {
        append(path, &format!("{line}\n"));
    }
}

/// The new file at `path` for one repetition, made by `op`, holding `lines`.
fn move_and_write(op: &str, path: &Path, rep: usize, lines: &[String]) {
    let folder = path.parent().expect("a folder");
    let name = path
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    match op {
        "rename-and-recreate" => {
            fs::rename(path, folder.join(format!("{name}.1"))).expect("rotate");
            fs::File::create(path).expect("recreate");
            write_lines(path, lines);
        }
        "copytruncate" => {
            fs::copy(path, folder.join(format!("{name}.1"))).expect("copy");
            OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(0))
                .expect("truncate in place");
            write_lines(path, lines);
        }
        "atomic-replace" => {
            let temp = folder.join(format!(".{name}.tmp-{rep}"));
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            fs::write(&temp, text).expect("write the temp file");
            fs::rename(&temp, path).expect("rename over");
        }
        "delete-and-recreate" => {
            fs::remove_file(path).expect("delete");
            write_lines(path, lines);
        }
        other => panic!("no operation {other}"),
    }
}

/// Repeats `op` on both the log and the progress file, and checks after each repetition
/// that the snapshot follows.
fn repeat(op: &str) {
    let _serial = one_at_a_time();
    let sandbox = Sandbox::new();
    let mut rig = Rig::new(sandbox.config(0));
    if let Err(miss) = follows(&rig.snapshot, &sandbox, 1, "started") {
        panic!("{op}: the first snapshot is wrong: {miss}");
    }
    for rep in 1..=REPETITIONS {
        // 1, 2, 3, 1, 2, 3...: never the count of the repetition before.
        let count = 1 + (rep % 3) as u64;
        let progress = lines_for(op, rep, count);
        let log = lines_for(&format!("{op} log"), rep, count);
        move_and_write(op, &sandbox.progress(), rep, &progress);
        move_and_write(op, &sandbox.log(), rep, &log);
        let newest = log.last().expect("a line").clone();
        if let Err(miss) = rig.follow_until(|s| follows(s, &sandbox, count, &newest)) {
            panic!(
                "{op}, repetition {rep}: not reflected within {PATIENCE:?}: {miss}\nthe last \
                 triggers: {:?}",
                rig.recent()
            );
        }
    }
}

#[test]
fn rename_and_recreate_is_followed_100_times() {
    repeat("rename-and-recreate");
}

#[test]
fn copytruncate_is_followed_100_times() {
    repeat("copytruncate");
}

#[test]
fn atomic_replace_is_followed_100_times() {
    repeat("atomic-replace");
}

#[test]
fn delete_and_recreate_is_followed_100_times() {
    repeat("delete-and-recreate");
}

#[test]
fn an_inotify_queue_overflow_leads_to_a_full_rescan() {
    let _serial = one_at_a_time();
    let sandbox = Sandbox::new();
    let extra = 5;
    let config = sandbox.config(extra);
    let (sink, triggers) = channel_sink(Some(Arc::new(AtomicBool::new(true))));
    // The queue length is fixed when an inotify instance is made: lower it, make Live's, and
    // put it back at once.
    let lowered = match Lowered::lower(MAX_QUEUED_EVENTS, 16) {
        Ok(lowered) => lowered,
        Err(why) => {
            eprintln!("SKIPPED an_inotify_queue_overflow_leads_to_a_full_rescan: {why}");
            return;
        }
    };
    let live = Live::new(config, sink);
    drop(lowered);
    let mut rig = Rig::started(live.expect("start Live"), triggers);

    // First a file of no job, enough to fill the queue many times over (the first of its
    // events holds notify's thread in the sink meanwhile); then every job's progress file.
    // The jobs' events come after the overflow and are dropped: only a rescan finds them.
    let noise = sandbox.root.join("progress/noise.log");
    let noisy_writes = 250;
    for n in 0..noisy_writes {
        append(&noise, &format!("noise {n}\n"));
    }
    let files: Vec<PathBuf> = std::iter::once(sandbox.progress())
        .chain((0..extra).map(|n| sandbox.root.join(format!("progress/extra{n}.progress"))))
        .collect();
    let mut written = vec![1u64; files.len()];
    written[1..].fill(0);
    for (n, (file, lines)) in files.iter().zip(written.iter_mut()).enumerate() {
        for i in 0..=n {
            append(file, &format!("{{\"i\":{i}}}\n"));
            *lines += 1;
        }
    }
    let ids: Vec<String> = std::iter::once(JOB.to_string())
        .chain((0..extra).map(|n| format!("extra{n}")))
        .collect();
    // The sink holds notify's thread for 500 ms before the queue drains: patience on top.
    let outcome = rig.follow_within(PATIENCE + Duration::from_secs(1), |snapshot| {
        for (id, lines) in ids.iter().zip(&written) {
            let (done, reading) = counted(snapshot, id);
            if done != Some(*lines) {
                return Err(format!("{id}: expected {lines} lines, saw {reading}"));
            }
        }
        Ok(())
    });
    assert!(
        rig.seen.contains(&Trigger::Rescan),
        "no Trigger::Rescan after {noisy_writes} writes into a queue of 16 events; the last \
         triggers: {:?}",
        rig.recent()
    );
    if let Err(miss) = outcome {
        panic!("after the rescan, not every job was gathered again: {miss}");
    }
}

/// Runs `work` on this thread with the effective user and group `uid` and `gid`, and root's
/// back after. Raw system calls change this thread's credentials only (the C library's
/// wrappers would change every thread of the test binary); threads started meanwhile keep
/// them, as an inotify instance made meanwhile is charged to that user's watch limit.
fn as_user<T>(uid: u32, gid: u32, work: impl FnOnce() -> T) -> T {
    /// Puts root back, however `work` ends.
    struct Back;
    impl Drop for Back {
        fn drop(&mut self) {
            // SAFETY: plain system calls on this thread's credentials; -1 keeps a field.
            let (user, group) = unsafe {
                (
                    libc::syscall(
                        libc::SYS_setresuid,
                        -1 as libc::c_long,
                        0,
                        -1 as libc::c_long,
                    ),
                    libc::syscall(
                        libc::SYS_setresgid,
                        -1 as libc::c_long,
                        0,
                        -1 as libc::c_long,
                    ),
                )
            };
            assert!(user == 0 && group == 0, "could NOT become root again");
        }
    }
    // SAFETY: as above; the saved ids stay root's, so root can be taken back.
    let (group, user) = unsafe {
        let group = libc::syscall(
            libc::SYS_setresgid,
            -1 as libc::c_long,
            libc::c_long::from(gid),
            -1 as libc::c_long,
        );
        let user = libc::syscall(
            libc::SYS_setresuid,
            -1 as libc::c_long,
            libc::c_long::from(uid),
            -1 as libc::c_long,
        );
        (group, user)
    };
    let _back = Back;
    assert!(group == 0 && user == 0, "cannot become uid {uid}");
    work()
}

/// How many inotify watches exist now, as `/proc/*/fdinfo` shows them (the processes this one
/// can see) in the processes of user `uid`.
fn watches_in_use(uid: u32) -> u64 {
    let mut count = 0;
    let Ok(processes) = fs::read_dir("/proc") else {
        return 0;
    };
    for process in processes.flatten() {
        if !process
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        if fs::metadata(process.path()).map_or(true, |meta| {
            std::os::unix::fs::MetadataExt::uid(&meta) != uid
        }) {
            continue;
        }
        let Ok(fds) = fs::read_dir(process.path().join("fdinfo")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(text) = fs::read_to_string(fd.path()) {
                count += text
                    .lines()
                    .filter(|l| l.starts_with("inotify wd:"))
                    .count() as u64;
            }
        }
    }
    count
}

#[test]
fn past_the_watch_limit_unwatched_folders_are_polled_every_2_s() {
    let _serial = one_at_a_time();
    // The watch limit is per user: the `Live` under test is the second user's (its inotify
    // instance is made with that user's credentials, on this thread only), whose watches
    // nothing else on the machine adds or drops, so "its watches in use + 1" holds whatever
    // root's other processes do meanwhile.
    let Some((uid, gid)) = users::other_user() else {
        eprintln!(
            "SKIPPED past_the_watch_limit_unwatched_folders_are_polled_every_2_s: no second user"
        );
        return;
    };
    let sandbox = Sandbox::new();
    sandbox.give_to(uid, gid);
    // The job needs four folders (logs, progress, run, state, watched in that path order);
    // allow one more watch than the second user has now, which goes to logs.
    let mut attempt = 0;
    let rig = loop {
        attempt += 1;
        let (sink, triggers) = channel_sink(None);
        let lowered = match Lowered::lower(MAX_USER_WATCHES, watches_in_use(uid) + 1) {
            Ok(lowered) => lowered,
            Err(why) => {
                eprintln!(
                    "SKIPPED past_the_watch_limit_unwatched_folders_are_polled_every_2_s: {why}"
                );
                return;
            }
        };
        // The limit is checked only when a watch is added: make the instance and start (which
        // adds every watch), then put the limit back before anything else.
        let started = as_user(uid, gid, || {
            Live::new(sandbox.config(0), sink).map(|mut live| {
                let snapshot = live.start(Utc::now());
                (live, snapshot)
            })
        });
        drop(lowered);
        let (live, snapshot) = started.expect("start Live");
        let polled_job_folder = live
            .unwatched
            .iter()
            .any(|(folder, _)| folder.ends_with("progress"));
        if polled_job_folder || attempt == 5 {
            break Rig {
                live,
                triggers,
                snapshot,
                seen: Vec::new(),
            };
        }
    };
    as_user(uid, gid, || polled_until_watched_again(&sandbox, rig));
}

/// The rest of [`past_the_watch_limit_unwatched_folders_are_polled_every_2_s`], as the second
/// user: the folders past the limit are polled, and watched again once the limit is back.
fn polled_until_watched_again(sandbox: &Sandbox, mut rig: Rig) {
    let unwatched: Vec<PathBuf> = rig.live.unwatched.iter().map(|(f, _)| f.clone()).collect();
    assert!(
        unwatched.iter().any(|f| f.ends_with("progress")),
        "the progress folder is watched although the limit allowed one watch; unwatched: \
         {unwatched:?}"
    );
    assert_eq!(rig.snapshot.polled_folders, unwatched.len());
    let first = rig.snapshot.notices.first().cloned().unwrap_or_default();
    assert!(
        first.starts_with("polling"),
        "the first notice is '{first}'"
    );
    assert!(
        rig.live
            .unwatched
            .iter()
            .all(|(_, why)| why.contains("max_user_watches")),
        "the errors do not name the limit: {:?}",
        rig.live.unwatched
    );

    // A write in the unwatched folder: no event can come, only the poll sees it.
    let poll_at = rig
        .live
        .deadline(&rig.snapshot, Utc::now())
        .expect("a poll deadline while folders are unwatched");
    let lines = 1 + 4;
    write_lines(&sandbox.progress(), &lines_for("polled", 1, 4));
    let give_up = Instant::now() + PATIENCE + Duration::from_secs(2);
    let seen_at = loop {
        if rig.turn(give_up) {
            let (done, _) = counted(&rig.snapshot, JOB);
            if done == Some(lines) {
                break rig.snapshot.generated_at;
            }
        }
        assert!(
            Instant::now() < give_up,
            "the write in an unwatched folder was not seen by the poll: {:?}",
            counted(&rig.snapshot, JOB)
        );
    };
    assert!(
        seen_at >= poll_at,
        "seen at {seen_at}, before the poll at {poll_at}: an event came from an unwatched folder"
    );

    // The limit is back: that same poll watched the folders again, and polling stopped.
    assert!(
        rig.live.unwatched.is_empty(),
        "still unwatched after the limit was raised: {:?}",
        rig.live.unwatched
    );
    assert_eq!(rig.snapshot.polled_folders, 0);
    assert!(
        rig.snapshot
            .notices
            .iter()
            .all(|n| !n.starts_with("polling")),
        "{:?}",
        rig.snapshot.notices
    );
    write_lines(&sandbox.progress(), &lines_for("watched", 2, 2));
    rig.follow_until(|s| match counted(s, JOB) {
        (Some(7), _) => Ok(()),
        (_, reading) => Err(format!("expected 7 lines, saw {reading}")),
    })
    .unwrap_or_else(|miss| panic!("after watching again, a write was not followed: {miss}"));
}
