//! `probe::lock::read_lock` against real processes: a `sleep` is spawned, its PID written to
//! a lock (bare or JSON), and the holder's liveness read while it runs, stops, dies unreaped
//! (a zombie) and dies reaped. PID reuse is simulated the two ways SPEC names it: a JSON lock
//! whose start time is not the process's, and a bare-PID lock last written before the process
//! started (the reused-PID incident: a restart must not be skipped because some unrelated
//! process got the old PID).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime};

use mihari::core::{Liveness, LockHolder, Reading};
use mihari::probe::lock::read_lock;
use mihari::probe::proc::{self, ProcLookup};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

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

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid() as i32), signal).expect("signal the sleeper");
    }

    /// Waits until `/proc` shows the state `want` (signals are delivered asynchronously).
    fn wait_for_state(&self, want: char) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let state = match proc::lookup(self.pid()) {
                ProcLookup::Running(stat) | ProcLookup::Zombie(stat) => Some(stat.state),
                _ => None,
            };
            if state == Some(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "process {} never reached state {want}, last {state:?}",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lock_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("job.lock")
}

fn holder(path: &Path) -> LockHolder {
    match read_lock(path) {
        Reading::Found(holder) => holder,
        other => panic!("expected a lock holder, got {other:?}"),
    }
}

fn set_mtime(path: &Path, at: SystemTime) {
    File::options()
        .write(true)
        .open(path)
        .expect("open")
        .set_modified(at)
        .expect("set mtime");
}

#[test]
fn no_lock_file_is_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(read_lock(&lock_path(&dir)), Reading::Empty);
}

#[test]
fn a_directory_where_the_lock_should_be_is_a_fault() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::create_dir(lock_path(&dir)).expect("mkdir");
    let reading = read_lock(&lock_path(&dir));
    assert!(
        reading.fault().is_some_and(|e| e.contains("directory")),
        "{reading:?}"
    );
}

#[test]
fn a_bare_pid_of_a_running_process_is_alive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sleeper = Sleeper::spawn();
    let before_write = chrono::Utc::now();
    fs::write(lock_path(&dir), format!("{}\n", sleeper.pid())).expect("write lock");
    let holder = holder(&lock_path(&dir));
    assert_eq!(holder.liveness, Liveness::Alive, "{}", holder.why);
    assert_eq!(holder.pid, Some(sleeper.pid()));
    let started = holder.started_at.expect("start time of a live holder");
    let skew = (started - before_write).abs();
    assert!(
        skew < chrono::TimeDelta::seconds(2),
        "started {started}, lock written {before_write}"
    );
}

#[test]
fn a_json_lock_with_the_real_start_time_is_alive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sleeper = Sleeper::spawn();
    let ticks = proc::start_ticks(sleeper.pid()).expect("start ticks");
    fs::write(
        lock_path(&dir),
        format!(
            r#"{{"pid": {}, "start_time": {ticks}, "cmdline": "sleep 30", "run_id": "r1"}}"#,
            sleeper.pid()
        ),
    )
    .expect("write lock");
    // Even an old lock file is fine: the start time is the identity.
    set_mtime(&lock_path(&dir), SystemTime::UNIX_EPOCH);
    let holder = holder(&lock_path(&dir));
    assert_eq!(holder.liveness, Liveness::Alive, "{}", holder.why);
    assert_eq!(holder.recorded_start, Some(ticks));
    assert_eq!(holder.cmdline.as_deref(), Some("sleep 30"));
    assert!(holder.started_at.is_some());
}

#[test]
fn a_json_lock_with_another_start_time_is_dead_the_pid_was_reused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sleeper = Sleeper::spawn();
    let ticks = proc::start_ticks(sleeper.pid()).expect("start ticks");
    // The lock's writer started one tick earlier than the process that now has its PID.
    let recorded = ticks - 1;
    fs::write(
        lock_path(&dir),
        format!(r#"{{"pid": {}, "start_time": {recorded}}}"#, sleeper.pid()),
    )
    .expect("write lock");
    let holder = holder(&lock_path(&dir));
    assert_eq!(holder.liveness, Liveness::Dead, "{}", holder.why);
    assert!(
        holder.why.contains(&format!(
            "start time differs: lock says {recorded}, process {} started at {ticks}",
            sleeper.pid()
        )),
        "{}",
        holder.why
    );
}

#[test]
fn a_holder_that_exited_and_was_reaped_is_dead() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sleeper = Sleeper::spawn();
    let pid = sleeper.pid();
    fs::write(lock_path(&dir), pid.to_string()).expect("write lock");
    assert_eq!(holder(&lock_path(&dir)).liveness, Liveness::Alive);
    sleeper.child.kill().expect("kill");
    sleeper.child.wait().expect("reap");
    let holder = holder(&lock_path(&dir));
    assert_eq!(holder.liveness, Liveness::Dead, "{}", holder.why);
    assert_eq!(holder.why, "no such process");
}

#[test]
fn a_holder_that_exited_unreaped_is_a_zombie_and_dead() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sleeper = Sleeper::spawn();
    let ticks = proc::start_ticks(sleeper.pid()).expect("start ticks");
    fs::write(
        lock_path(&dir),
        format!(r#"{{"pid": {}, "start_time": {ticks}}}"#, sleeper.pid()),
    )
    .expect("write lock");
    sleeper.signal(Signal::SIGKILL);
    sleeper.wait_for_state('Z');
    let holder = holder(&lock_path(&dir));
    assert_eq!(holder.liveness, Liveness::Dead, "{}", holder.why);
    assert!(holder.why.contains("zombie"), "{}", holder.why);
}

#[test]
fn a_stopped_holder_is_still_alive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sleeper = Sleeper::spawn();
    fs::write(lock_path(&dir), sleeper.pid().to_string()).expect("write lock");
    sleeper.signal(Signal::SIGSTOP);
    sleeper.wait_for_state('T');
    let holder = holder(&lock_path(&dir));
    assert_eq!(holder.liveness, Liveness::Alive, "{}", holder.why);
    sleeper.signal(Signal::SIGCONT);
}

#[test]
fn a_bare_pid_lock_written_before_its_process_started_is_dead_the_pid_was_reused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sleeper = Sleeper::spawn();
    fs::write(lock_path(&dir), sleeper.pid().to_string()).expect("write lock");
    // The lock was last written an hour ago; the process with that PID started just now, so
    // it cannot be the one that wrote it.
    set_mtime(
        &lock_path(&dir),
        SystemTime::now() - Duration::from_secs(3600),
    );
    let holder = holder(&lock_path(&dir));
    assert_eq!(holder.liveness, Liveness::Dead, "{}", holder.why);
    assert!(holder.why.contains("the PID was reused"), "{}", holder.why);
}

#[test]
fn a_bare_pid_lock_written_a_second_before_its_process_started_is_unknown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sleeper = Sleeper::spawn();
    let started = proc::start_wall(proc::start_ticks(sleeper.pid()).expect("ticks")).expect("wall");
    fs::write(lock_path(&dir), sleeper.pid().to_string()).expect("write lock");
    set_mtime(
        &lock_path(&dir),
        SystemTime::from(started - chrono::TimeDelta::seconds(1)),
    );
    let holder = holder(&lock_path(&dir));
    assert_eq!(holder.liveness, Liveness::Unknown, "{}", holder.why);
}

#[test]
fn a_reused_pid_is_caught_after_the_first_holder_dies() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The first holder writes its JSON lock and dies.
    let mut first = Sleeper::spawn();
    let first_ticks = proc::start_ticks(first.pid()).expect("ticks");
    first.child.kill().expect("kill");
    first.child.wait().expect("reap");
    // Another process now has a PID; pretend it got the first holder's PID by writing the
    // first holder's start time next to the second's PID.
    let second = Sleeper::spawn();
    let second_ticks = proc::start_ticks(second.pid()).expect("ticks");
    fs::write(
        lock_path(&dir),
        format!(
            r#"{{"pid": {}, "start_time": {first_ticks}}}"#,
            second.pid()
        ),
    )
    .expect("write lock");
    let holder = holder(&lock_path(&dir));
    if first_ticks == second_ticks {
        // Both started within one clock tick: the start time cannot tell them apart.
        assert_eq!(holder.liveness, Liveness::Alive);
    } else {
        assert_eq!(holder.liveness, Liveness::Dead, "{}", holder.why);
        assert!(holder.why.contains("start time differs"), "{}", holder.why);
    }
}

#[test]
fn garbage_content_is_unknown_and_quoted() {
    let dir = tempfile::tempdir().expect("tempdir");
    // An empty file is not garbage: it is judged by the locks on it (tests/empty_locks.rs).
    let rows: [(&[u8], &str); 4] = [
        (b"hello world\n", "'hello world'"),
        (b"0\n", "out of range"),
        (b"{\"pid\": \"soon\"}", "'pid' is not a whole number"),
        (b"\x1b]0;pwned\x07 4242", "not a PID"),
    ];
    for (content, needle) in rows {
        fs::write(lock_path(&dir), content).expect("write lock");
        let holder = holder(&lock_path(&dir));
        assert_eq!(holder.liveness, Liveness::Unknown, "{content:?}");
        assert!(holder.why.contains(needle), "{content:?}: {}", holder.why);
        assert!(!holder.why.contains("pwned"), "{}", holder.why);
        assert!(mihari::core::text::is_inert(&holder.why), "{}", holder.why);
    }
}

#[test]
fn this_test_process_holds_its_own_json_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ticks = proc::self_start_ticks().expect("self start ticks");
    fs::write(
        lock_path(&dir),
        format!(
            r#"{{"pid": {}, "start_time": {ticks}}}"#,
            std::process::id()
        ),
    )
    .expect("write lock");
    assert_eq!(holder(&lock_path(&dir)).liveness, Liveness::Alive);
}
