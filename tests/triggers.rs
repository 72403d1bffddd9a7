//! `engine::triggers::Triggers` against real folders and real processes: a write, a rotation,
//! an atomic replace and a delete-and-recreate of a watched file each arrive as `Changed`; a
//! folder that does not exist yet is followed through its ancestor until it does; a folder
//! dropped from the list goes quiet; a replaced folder is watched again. Holders (`sleep`
//! processes) are waited on through pidfds: killed ones are reported, stopped ones are not, a
//! wrong start time is reported at once (the reused-PID incident), forgotten ones are not, 50
//! at once all are, and the background threads use no CPU while nothing happens.
//!
//! Negative checks ("no event for X") use a barrier where they can: a write to a fresh file
//! whose event comes after X's in inotify's one queue. Where they cannot (a stopped process), they wait one second, which
//! bounds nothing about speed.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mihari::engine::triggers::{FILE_THREAD_NAME, HOLDER_THREAD_NAME, Trigger, Triggers};
use mihari::probe::proc;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const PATIENCE: Duration = Duration::from_secs(5);

/// Triggers whose sink sends into a channel the test reads.
fn triggers() -> (Triggers, Receiver<Trigger>) {
    let (sender, receiver) = mpsc::channel();
    let sender = Mutex::new(sender);
    let triggers = Triggers::new(Arc::new(move |trigger| {
        if let Ok(sender) = sender.lock() {
            let _ = sender.send(trigger);
        }
    }))
    .expect("start triggers");
    (triggers, receiver)
}

/// Waits until `wanted` arrives; returns everything that arrived before it. Panics with what
/// did arrive when it does not come within five seconds.
fn expect(events: &Receiver<Trigger>, wanted: &Trigger) -> Vec<Trigger> {
    let deadline = Instant::now() + PATIENCE;
    let mut before = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(trigger) if &trigger == wanted => return before,
            Ok(trigger) => before.push(trigger),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                panic!("no {wanted:?} within {PATIENCE:?}; saw {before:?}")
            }
        }
    }
}

/// Everything that arrives within `quiet`.
fn collect(events: &Receiver<Trigger>, quiet: Duration) -> Vec<Trigger> {
    let deadline = Instant::now() + quiet;
    let mut seen = Vec::new();
    while let Ok(trigger) = events.recv_timeout(deadline.saturating_duration_since(Instant::now()))
    {
        seen.push(trigger);
    }
    seen
}

/// Writes a new file in `folder` (which must be watched) and waits for its event. inotify keeps
/// one queue, so every event queued before it has then been received: returns those. Each
/// barrier file has its own name, so an event left over from one is never taken for another.
fn barrier(events: &Receiver<Trigger>, folder: &Path) -> Vec<Trigger> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let path = folder.join(format!("barrier-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
    append(&path, "x\n");
    expect(events, &changed(&path))
}

fn append(path: &Path, text: &str) {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open for append");
    file.write_all(text.as_bytes()).expect("append");
}

fn changed(path: &Path) -> Trigger {
    Trigger::Changed(path.to_path_buf())
}

/// A folder in a fresh temp dir, by its absolute path.
fn temp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical temp dir");
    (dir, root)
}

#[test]
fn a_write_to_a_watched_file_is_changed() {
    let (_dir, root) = temp();
    let log = root.join("job.log");
    append(&log, "started\n");
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_paths(std::slice::from_ref(&log)).is_empty());

    append(&log, "step 1\n");
    expect(&events, &changed(&log));
}

#[test]
fn rotation_is_followed_to_the_new_file() {
    let (_dir, root) = temp();
    let log = root.join("job.log");
    append(&log, "old\n");
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_paths(std::slice::from_ref(&log)).is_empty());

    fs::rename(&log, root.join("job.log.1")).expect("rotate");
    expect(&events, &changed(&log));
    barrier(&events, &root);
    append(&log, "new file\n");
    expect(&events, &changed(&log));
    barrier(&events, &root);
    append(&log, "more\n");
    expect(&events, &changed(&log));
}

#[test]
fn an_atomic_replace_is_changed() {
    let (_dir, root) = temp();
    let manifest = root.join("manifest.json");
    fs::write(&manifest, "{}").expect("write");
    let (mut triggers, events) = triggers();
    assert!(
        triggers
            .watch_paths(std::slice::from_ref(&manifest))
            .is_empty()
    );

    let temp_file = root.join(".manifest.json.tmp");
    fs::write(&temp_file, r#"{"phase": 2}"#).expect("write temp");
    fs::rename(&temp_file, &manifest).expect("replace");
    expect(&events, &changed(&manifest));
}

#[test]
fn delete_and_recreate_are_both_changed() {
    let (_dir, root) = temp();
    let progress = root.join("progress.jsonl");
    append(&progress, "{}\n");
    let (mut triggers, events) = triggers();
    assert!(
        triggers
            .watch_paths(std::slice::from_ref(&progress))
            .is_empty()
    );

    fs::remove_file(&progress).expect("delete");
    expect(&events, &changed(&progress));
    barrier(&events, &root);
    append(&progress, "{}\n");
    expect(&events, &changed(&progress));
}

#[test]
fn a_folder_that_does_not_exist_yet_is_followed_once_created() {
    let (_dir, root) = temp();
    let run = root.join("run-7");
    let log = run.join("job.log");
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_paths(std::slice::from_ref(&log)).is_empty());

    fs::create_dir(&run).expect("create the folder");
    expect(&events, &changed(&run));
    assert!(triggers.watch_paths(std::slice::from_ref(&log)).is_empty());
    append(&log, "started\n");
    expect(&events, &changed(&log));
}

#[test]
fn what_was_created_before_the_watch_moved_down_is_still_reported() {
    // The folder and the file appear together, before the caller gets to watch the folder:
    // the file's creation happened where nothing watched it yet.
    let (_dir, root) = temp();
    let deep = root.join("a").join("b");
    let log = deep.join("job.log");
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_paths(std::slice::from_ref(&log)).is_empty());

    fs::create_dir_all(&deep).expect("create folders");
    append(&log, "started\n");
    expect(&events, &changed(&root.join("a")));
    // Watching again goes straight to the deepest folder that exists, and reports the file
    // already there.
    assert!(triggers.watch_paths(std::slice::from_ref(&log)).is_empty());
    expect(&events, &changed(&log));
    barrier(&events, &deep);
    append(&log, "step 1\n");
    expect(&events, &changed(&log));
}

#[test]
fn a_folder_dropped_from_the_list_goes_quiet() {
    let (_dir, root) = temp();
    fs::create_dir(root.join("kept")).expect("mkdir");
    fs::create_dir(root.join("dropped")).expect("mkdir");
    let kept = root.join("kept").join("job.log");
    let dropped = root.join("dropped").join("job.log");
    let (mut triggers, events) = triggers();
    assert!(
        triggers
            .watch_paths(&[kept.clone(), dropped.clone()])
            .is_empty()
    );
    append(&dropped, "seen while watched\n");
    expect(&events, &changed(&dropped));
    barrier(&events, &root.join("kept"));

    assert!(triggers.watch_paths(std::slice::from_ref(&kept)).is_empty());
    append(&dropped, "not seen\n");
    let before = barrier(&events, &root.join("kept"));
    assert!(!before.contains(&changed(&dropped)), "{before:?}");
}

#[test]
fn a_replaced_folder_is_watched_again_and_the_old_one_is_not() {
    let (_dir, root) = temp();
    let sub = root.join("sub");
    fs::create_dir(&sub).expect("mkdir");
    let log = sub.join("job.log");
    // Keeps `root` watched, for the barriers.
    let beside = root.join("beside.log");
    let watched = [log.clone(), beside.clone()];
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_paths(&watched).is_empty());

    let moved = root.join("sub.old");
    fs::rename(&sub, &moved).expect("move the folder away");
    fs::create_dir(&sub).expect("a new folder in its place");
    expect(&events, &changed(&sub));
    assert!(triggers.watch_paths(&watched).is_empty());
    barrier(&events, &root);

    // A write in the folder that moved away must not be taken for the watched path.
    append(&moved.join("job.log"), "old run\n");
    let before = barrier(&events, &root);
    assert!(!before.contains(&changed(&log)), "{before:?}");

    append(&log, "new run\n");
    expect(&events, &changed(&log));
}

#[test]
fn a_path_with_no_parent_is_reported_not_ignored() {
    let (mut triggers, _events) = triggers();
    let failures = triggers.watch_paths(&[PathBuf::from("/")]);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].1.contains("no parent"), "{failures:?}");
}

#[test]
fn watching_the_same_paths_again_changes_nothing() {
    let (_dir, root) = temp();
    let log = root.join("job.log");
    let (mut triggers, events) = triggers();
    for _ in 0..3 {
        assert!(triggers.watch_paths(std::slice::from_ref(&log)).is_empty());
    }
    append(&log, "x\n");
    expect(&events, &changed(&log));
    barrier(&events, &root);
    // Nothing was re-routed, so nothing is reported on its own.
    assert!(triggers.watch_paths(std::slice::from_ref(&log)).is_empty());
    let before = barrier(&events, &root);
    assert!(!before.contains(&changed(&log)), "{before:?}");
}

/// The masks of this process's inotify watches on `folder`, as the kernel lists them in the
/// fdinfo of every inotify descriptor (`inotify wd:1 ino:… sdev:… mask:fce ignored_mask:0 …`).
fn inotify_masks(folder: &Path) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let inode = format!(
        "ino:{:x}",
        fs::metadata(folder).expect("stat the folder").ino()
    );
    let mut masks = Vec::new();
    for entry in fs::read_dir("/proc/self/fdinfo")
        .expect("list fdinfo")
        .flatten()
    {
        let Ok(text) = fs::read_to_string(entry.path()) else {
            continue;
        };
        for line in text
            .lines()
            .filter(|line| line.starts_with("inotify wd:"))
            .filter(|line| line.split_whitespace().any(|field| field == inode))
        {
            let mask = line
                .split_whitespace()
                .find_map(|field| field.strip_prefix("mask:"))
                .expect("a mask in the fdinfo line");
            masks.push(u32::from_str_radix(mask, 16).expect("a hex mask"));
        }
    }
    masks
}

#[test]
fn a_watch_asks_for_changes_and_never_for_opens_or_reads() {
    // A gather opens and reads every file it follows: were opens or reads asked for, the
    // kernel would queue an event for each, and wake this process (and every other one
    // watching the folder) once per file each gather reads. Asked of the kernel itself.
    const IN_ACCESS: u32 = 0x1;
    const IN_OPEN: u32 = 0x20;
    const IN_CLOSE_NOWRITE: u32 = 0x10;
    const IN_MODIFY: u32 = 0x2;
    const IN_CLOSE_WRITE: u32 = 0x8;
    const IN_CREATE: u32 = 0x100;
    const IN_MOVED_TO: u32 = 0x80;
    let (_dir, root) = temp();
    let folder = root.join("a-folder-only-this-test-watches");
    fs::create_dir(&folder).expect("make the folder");
    let log = folder.join("job.log");
    append(&log, "started\n");
    assert!(inotify_masks(&folder).is_empty());
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_paths(std::slice::from_ref(&log)).is_empty());
    let masks = inotify_masks(&folder);
    assert_eq!(masks.len(), 1, "one watch on the folder: {masks:x?}");
    for mask in &masks[..] {
        assert_eq!(
            mask & (IN_ACCESS | IN_OPEN | IN_CLOSE_NOWRITE),
            0,
            "{mask:x}"
        );
    }
    let wanted = IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO;
    assert!(
        masks.iter().any(|mask| mask & wanted == wanted),
        "{masks:x?}"
    );

    // And reading the file wakes nothing.
    for _ in 0..20 {
        assert_eq!(fs::read_to_string(&log).expect("read"), "started\n");
    }
    let before = barrier(&events, &folder);
    assert!(before.is_empty(), "reads made triggers: {before:?}");
}

#[test]
fn a_folder_reached_by_two_paths_is_reported_under_both() {
    // One folder, named directly by one job and through a symlink by another: the kernel
    // makes one watch of the two, and each job must still hear of its file's change.
    let (_dir, root) = temp();
    let real = root.join("run-42");
    fs::create_dir(&real).expect("make the folder");
    std::os::unix::fs::symlink(&real, root.join("current")).expect("symlink");
    let direct = real.join("job.log");
    let linked = root.join("current").join("job.log");
    append(&direct, "started\n");
    let (mut triggers, events) = triggers();
    assert!(
        triggers
            .watch_paths(&[direct.clone(), linked.clone()])
            .is_empty()
    );

    append(&direct, "step 1\n");
    let mut seen = expect(&events, &changed(&direct));
    seen.extend(barrier(&events, &real));
    assert!(seen.contains(&changed(&linked)), "{seen:?}");

    // Following one path no more keeps the other's watch.
    assert!(
        triggers
            .watch_paths(std::slice::from_ref(&linked))
            .is_empty()
    );
    barrier(&events, &root.join("current"));
    append(&direct, "step 2\n");
    expect(&events, &changed(&linked));
}

/// A `sleep 30` that is killed and reaped when the test ends, pass or fail.
struct Sleeper {
    child: Child,
}

impl Sleeper {
    fn spawn() -> Self {
        let child = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        Sleeper { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// (PID, start ticks): the identity the triggers wait on.
    fn holder(&self) -> (u32, u64) {
        let ticks = proc::start_ticks(self.pid()).expect("the sleeper is running");
        (self.pid(), ticks)
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid() as i32), signal).expect("signal the sleeper");
    }

    /// Kills and reaps it.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn exited((pid, start_ticks): (u32, u64)) -> Trigger {
    Trigger::HolderExited { pid, start_ticks }
}

#[test]
fn a_killed_holder_is_reported() {
    let mut sleeper = Sleeper::spawn();
    let holder = sleeper.holder();
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_holders(&[holder]).is_empty());
    assert!(
        collect(&events, Duration::from_millis(200)).is_empty(),
        "alive"
    );

    sleeper.kill();
    expect(&events, &exited(holder));
}

#[test]
fn a_killed_holder_is_reported_before_it_is_reaped() {
    let sleeper = Sleeper::spawn();
    let holder = sleeper.holder();
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_holders(&[holder]).is_empty());

    // A zombie holds nothing: its exit is the event, not its reaping (the Drop reaps it).
    sleeper.signal(Signal::SIGKILL);
    expect(&events, &exited(holder));
}

#[test]
fn a_stopped_holder_is_alive_and_not_reported() {
    let mut sleeper = Sleeper::spawn();
    let holder = sleeper.holder();
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_holders(&[holder]).is_empty());

    sleeper.signal(Signal::SIGSTOP);
    let seen = collect(&events, Duration::from_secs(1));
    assert!(seen.is_empty(), "a stopped process is alive: {seen:?}");

    sleeper.signal(Signal::SIGCONT);
    sleeper.kill();
    expect(&events, &exited(holder));
}

#[test]
fn a_wrong_start_time_is_reported_at_once_as_exited() {
    // The reused-PID incident: the PID is alive, but it is not the process the lock recorded.
    let sleeper = Sleeper::spawn();
    let (pid, ticks) = sleeper.holder();
    let recorded = (pid, ticks.saturating_sub(1));
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_holders(&[recorded]).is_empty());
    expect(&events, &exited(recorded));
    assert_eq!(
        proc::start_ticks(pid),
        Some(ticks),
        "the process itself lives"
    );

    // Listed again, it is not reported twice.
    assert!(triggers.watch_holders(&[recorded]).is_empty());
    let again = collect(&events, Duration::from_millis(300));
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn a_holder_already_gone_is_reported_at_once() {
    let mut sleeper = Sleeper::spawn();
    let holder = sleeper.holder();
    sleeper.kill();
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_holders(&[holder]).is_empty());
    expect(&events, &exited(holder));
}

#[test]
fn a_holder_dropped_from_the_list_is_not_reported() {
    let mut forgotten = Sleeper::spawn();
    let mut barrier = Sleeper::spawn();
    let forgotten_holder = forgotten.holder();
    let barrier_holder = barrier.holder();
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_holders(&[forgotten_holder]).is_empty());
    assert!(triggers.watch_holders(&[barrier_holder]).is_empty());

    forgotten.kill();
    barrier.kill();
    let mut seen = expect(&events, &exited(barrier_holder));
    seen.extend(collect(&events, Duration::from_millis(300)));
    assert!(!seen.contains(&exited(forgotten_holder)), "{seen:?}");
}

#[test]
fn fifty_holders_are_all_reported() {
    let mut sleepers: Vec<Sleeper> = (0..50).map(|_| Sleeper::spawn()).collect();
    let holders: Vec<(u32, u64)> = sleepers.iter().map(Sleeper::holder).collect();
    let (mut triggers, events) = triggers();
    assert!(triggers.watch_holders(&holders).is_empty());
    // Idempotent: the same list again adds nothing.
    assert!(triggers.watch_holders(&holders).is_empty());

    for sleeper in &mut sleepers {
        sleeper.kill();
    }
    let mut missing: std::collections::HashSet<Trigger> =
        holders.iter().copied().map(exited).collect();
    let deadline = Instant::now() + PATIENCE * 2;
    while !missing.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(trigger) => {
                missing.remove(&trigger);
            }
            Err(_) => panic!("{} holders not reported: {missing:?}", missing.len()),
        }
    }
    let extra = collect(&events, Duration::from_millis(200));
    assert!(extra.is_empty(), "each exit once: {extra:?}");
}

/// CPU time (nanoseconds) used so far by this process's threads whose name is one of `names`.
fn thread_cpu_nanos(names: &[&str]) -> u64 {
    let ticks_per_second = proc::clock_ticks_per_second().expect("CLK_TCK");
    let mut total = 0;
    for task in fs::read_dir("/proc/self/task")
        .expect("list threads")
        .flatten()
    {
        let dir = task.path();
        let Ok(comm) = fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if !names.iter().any(|name| comm.trim_end() == *name) {
            continue;
        }
        // schedstat's first field is nanoseconds on the CPU; stat's utime + stime are ticks.
        if let Some(nanos) = fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|text| text.split_whitespace().next()?.parse::<u64>().ok())
        {
            total += nanos;
        } else if let Ok(stat) = fs::read_to_string(dir.join("stat")) {
            let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
            let fields: Vec<u64> = after
                .split_whitespace()
                .map(|f| f.parse().unwrap_or(0))
                .collect();
            let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
            total += ticks * 1_000_000_000 / ticks_per_second;
        }
    }
    total
}

#[test]
fn idle_triggers_use_no_cpu() {
    // A sanity bound on busy-looping, not a measure of speed: a thread that spins burns the
    // whole second; a thread blocked in poll burns nothing.
    let names = [HOLDER_THREAD_NAME, FILE_THREAD_NAME];
    let (_dir, root) = temp();
    let sleeper = Sleeper::spawn();
    let (mut triggers, _events) = triggers();
    assert!(triggers.watch_paths(&[root.join("job.log")]).is_empty());
    assert!(triggers.watch_holders(&[sleeper.holder()]).is_empty());

    let before = thread_cpu_nanos(&names);
    std::thread::sleep(Duration::from_secs(1));
    let used = thread_cpu_nanos(&names).saturating_sub(before);
    assert!(
        used < 50_000_000,
        "watcher threads used {} ms of CPU in one idle second",
        used / 1_000_000
    );
}

#[test]
fn dropping_the_triggers_stops_their_threads() {
    // Both threads hold the sink; once they have stopped, only the test holds this token.
    let token = Arc::new(());
    let held = token.clone();
    let sleeper = Sleeper::spawn();
    let (_dir, root) = temp();
    let mut triggers = Triggers::new(Arc::new(move |_| {
        let _ = &held;
    }))
    .expect("start triggers");
    assert!(triggers.watch_paths(&[root.join("job.log")]).is_empty());
    assert!(triggers.watch_holders(&[sleeper.holder()]).is_empty());
    drop(triggers);

    let deadline = Instant::now() + PATIENCE;
    while Arc::strong_count(&token) > 1 {
        assert!(
            Instant::now() < deadline,
            "a thread still holds the sink after drop"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
