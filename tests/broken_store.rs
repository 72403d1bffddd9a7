//! A state store that is damaged, emptied or replaced, on real database files: `check` says
//! UNKNOWN (exit 3) in every format, naming the file and what to do, instead of reading the
//! damage as "nothing there" (no watcher yet, no approvals, no history); the dashboard's
//! header says so too.

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mihari::store::{Actor, Kind, NewEvent, Store};

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// A folder with one COMPLETE job, `collect`, and its state store in `state`.
struct Sandbox {
    dir: tempfile::TempDir,
}

/// What one `mihari check` printed and exited with.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let progress = dir.path().join("collect.progress");
        fs::write(&progress, "1\n2\n3\n").unwrap();
        fs::write(
            dir.path().join("jobs.yaml"),
            format!(
                "settings:\n  state_dir: state\njobs:\n  - id: collect\n    lock: {}\n    \
                 progress_file: {}\n    expected_total: 3\n    should_run_when: [not_complete]\n",
                dir.path().join("collect.lock").display(),
                progress.display()
            ),
        )
        .unwrap();
        Sandbox { dir }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn db(&self) -> PathBuf {
        self.state().join("mihari.sqlite")
    }

    /// A store with what a broken store would hide: a watcher that ran and a pending
    /// approval, plus `padding` more events (so the file has many interior pages).
    fn store_with_history(&self, padding: usize) {
        let mut store = Store::open(&self.state(), Actor::Watcher).unwrap();
        store
            .append(NewEvent::new(Kind::WatcherStarted).reason("pid 4242"))
            .unwrap();
        store
            .append(NewEvent::new(Kind::WatcherStopped).reason("pid 4242"))
            .unwrap();
        store
            .request_approval("collect", "publish", "k-publish", "publish 3 files")
            .unwrap();
        if padding > 0 {
            store
                .connection()
                .execute(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
                     INSERT INTO events (at_ms, kind, job, actor, session, reason) \
                     SELECT 1700000000000 + i, 'state-changed', 'job-' || (i % 50), 'watcher', \
                     '1.1', 'RUNNING -> STALLED: progress 400 s ago (log)' FROM n",
                    [padding as i64],
                )
                .unwrap();
        }
        // Closing the last connection folds the WAL into the database file.
        drop(store);
    }

    fn check(&self, format: &[&str]) -> Run {
        let out = Command::new(BIN)
            .arg("--config")
            .arg(self.dir.path().join("jobs.yaml"))
            .arg("check")
            .args(format)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `check` in all three formats must say UNKNOWN and name the store and `fix`.
    fn assert_unknown_everywhere(&self, fix: &str) {
        let db = format!("'{}'", self.db().display());
        let table = self.check(&[]);
        assert_eq!(table.code, 3, "table: {}{}", table.stdout, table.stderr);
        assert!(table.stdout.contains(&db), "table: {}", table.stdout);
        assert!(table.stdout.contains(fix), "table: {}", table.stdout);
        assert!(
            !table.stdout.contains("no watcher yet"),
            "table: {}",
            table.stdout
        );

        let json = self.check(&["--json"]);
        assert_eq!(json.code, 3, "json: {}{}", json.stdout, json.stderr);
        let report: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
        assert_eq!(report["store"]["state"], "fault", "{report:#}");
        let reason = report["store"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(&db) && reason.contains(fix), "{report:#}");

        let prometheus = self.check(&["--prometheus"]);
        assert_eq!(prometheus.code, 3, "prometheus: {}", prometheus.stdout);
        assert!(
            prometheus.stdout.contains("\nmihari_store_readable 0\n"),
            "prometheus: {}",
            prometheus.stdout
        );
    }
}

/// Writes `bytes` of garbage into `path` at `offset`.
fn garbage(path: &Path, offset: u64, bytes: usize) {
    let mut file = fs::OpenOptions::new().write(true).open(path).unwrap();
    file.seek(SeekFrom::Start(offset)).unwrap();
    let noise: Vec<u8> = (0..bytes).map(|i| (i * 131 + 7) as u8 ^ 0xa5).collect();
    file.write_all(&noise).unwrap();
}

#[test]
fn a_healthy_store_shows_its_approval_and_its_watcher() {
    let s = Sandbox::new();
    s.store_with_history(0);
    let table = s.check(&[]);
    // The pending approval makes it a WARNING; the stopped watcher is RED.
    assert_eq!(table.code, 2, "{}{}", table.stdout, table.stderr);
    assert!(
        table.stdout.contains("approvals pending: 1"),
        "{}",
        table.stdout
    );
    assert!(
        table.stdout.contains("no machine is watching"),
        "{}",
        table.stdout
    );
    let prometheus = s.check(&["--prometheus"]);
    assert!(prometheus.stdout.contains("\nmihari_store_readable 1\n"));
}

#[test]
fn garbage_over_the_stores_header_is_unknown_in_every_format() {
    let s = Sandbox::new();
    s.store_with_history(0);
    garbage(&s.db(), 0, 100);
    s.assert_unknown_everywhere("move it aside");
}

#[test]
fn garbage_over_interior_pages_of_a_big_store_is_unknown_in_every_format() {
    let s = Sandbox::new();
    s.store_with_history(20_000);
    let pages = fs::metadata(s.db()).unwrap().len() / 4096;
    assert!(pages > 100, "{pages} pages");
    for page in [pages / 3, pages / 2, pages * 2 / 3] {
        garbage(&s.db(), page * 4096, 4096);
    }
    s.assert_unknown_everywhere("move it aside");
}

#[test]
fn following_the_advice_for_a_damaged_store_starts_a_new_one() {
    let s = Sandbox::new();
    s.store_with_history(0);
    garbage(&s.db(), 0, 100);
    let table = s.check(&[]);
    let fix = table
        .stdout
        .split("move it aside: ")
        .nth(1)
        .and_then(|rest| rest.split("; mihari starts").next())
        .unwrap_or_else(|| panic!("no command in: {}", table.stdout));
    let out = Command::new("sh").args(["-c", fix]).output().unwrap();
    assert!(
        out.status.success(),
        "{fix}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = s.check(&[]);
    assert_eq!(after.code, 0, "{}{}", after.stdout, after.stderr);
    assert!(after.stdout.contains("no watcher yet"), "{}", after.stdout);
}

#[test]
fn a_store_emptied_under_mihari_is_unknown_in_every_format() {
    let s = Sandbox::new();
    s.store_with_history(0);
    fs::File::create(s.db()).unwrap();
    s.assert_unknown_everywhere("emptied under mihari");
    assert_eq!(fs::metadata(s.db()).unwrap().len(), 0, "made again");
}

#[test]
fn a_store_replaced_by_another_database_is_unknown_in_every_format() {
    let s = Sandbox::new();
    s.store_with_history(0);
    let other = tempfile::tempdir().unwrap();
    drop(Store::open(other.path(), Actor::Cli).unwrap());
    fs::copy(other.path().join("mihari.sqlite"), s.db()).unwrap();
    s.assert_unknown_everywhere("replaced by another database");
}

#[test]
fn the_dashboards_header_names_a_damaged_store() {
    let s = Sandbox::new();
    s.store_with_history(0);
    garbage(&s.db(), 0, 100);
    let config = mihari::config::load(&s.dir.path().join("jobs.yaml")).unwrap();
    let mut engine = mihari::engine::Engine::new(config.clone());
    let now = chrono::Utc::now();
    let snapshot = engine.snapshot(now);
    let mut model = mihari::tui::model::Model::new(
        config.jobs,
        s.dir.path().join("jobs.yaml"),
        mihari::tui::theme::Theme::plain(),
        now,
    );
    mihari::tui::model::update(&mut model, mihari::tui::model::Msg::Resize(120, 30));
    mihari::tui::model::update(&mut model, mihari::tui::model::Msg::Snapshot(snapshot));
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(120, 30)).unwrap();
    terminal
        .draw(|frame| mihari::tui::view::view(&model, frame))
        .unwrap();
    let screen = terminal.backend().to_string();
    let header: Vec<&str> = screen.lines().take(2).collect();
    assert!(header[0].contains("STORE FAULT"), "{screen}");
    assert!(header[1].contains("mihari.sqlite"), "{screen}");
    assert!(!screen.contains("no watcher yet"), "{screen}");
}

// A full disk under a running watcher (ISSUE 9, item 7)

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    at: PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `size` at `at`; `None`, with a message, where mounting is not
    /// permitted.
    fn mount(at: &Path, size: &str) -> Option<SmallDisk> {
        fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .output();
        match out {
            Ok(out) if out.status.success() => Some(SmallDisk {
                at: at.to_path_buf(),
            }),
            Ok(out) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs here: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                None
            }
            Err(error) => {
                eprintln!("skipped: cannot run mount: {error}");
                None
            }
        }
    }

    /// Fills the disk with one big file until it is full; returns the file.
    fn fill(&self) -> PathBuf {
        let filler = self.at.join("filler");
        let mut file = fs::File::create(&filler).unwrap();
        let chunk = vec![0x5au8; 64 * 1024];
        loop {
            if file.write_all(&chunk).is_err() {
                break;
            }
        }
        // What is left is smaller than a chunk: fill it byte by byte.
        while file.write_all(&[0x5a]).is_ok() {}
        let _ = file.sync_all();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// Waits until `ready` holds, or panics after `secs` with `why()`.
fn wait_for(secs: u64, what: &str, ready: impl Fn() -> bool, why: impl Fn() -> String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !ready() {
        if std::time::Instant::now() >= deadline {
            panic!("timed out waiting for {what}\n{}", why());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_full_disk_under_a_running_watcher_is_told_and_what_it_kept_is_recorded_after() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&dir.path().join("disk"), "4m") else {
        return;
    };
    let state = disk.at.join("state");
    let lock = dir.path().join("collect.lock");
    let log = dir.path().join("collect.log");
    let told = dir.path().join("escalations.txt");
    fs::write(&log, "working\n").unwrap();
    let jobs = dir.path().join("jobs.yaml");
    fs::write(
        &jobs,
        format!(
            "settings:\n  state_dir: {}\n  escalate_command: [\"sh\", \"-c\", \
             \"printf '%s\\\\n' \\\"$1\\\" >> {}\", \"tell\"]\njobs:\n  - id: collect\n    \
             lock: {}\n    log: {}\n    stall_sec: 86400\n    should_run_when: [resource_free]\n",
            state.display(),
            told.display(),
            lock.display(),
            log.display()
        ),
    )
    .unwrap();
    let stderr_path = dir.path().join("watcher.stderr");
    let _watcher = Ended(
        Command::new(BIN)
            .arg("--config")
            .arg(&jobs)
            .arg("watch")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let stderr = || fs::read_to_string(&stderr_path).unwrap_or_default();
    let count = |kind: &str| -> usize {
        Store::open(&state, Actor::Cli)
            .and_then(|store| {
                store.events(&mihari::store::EventFilter {
                    kind: Some(kind.into()),
                    ..Default::default()
                })
            })
            .map(|events| events.len())
            .unwrap_or(0)
    };
    wait_for(
        20,
        "the watcher's first state",
        || count("state-changed") >= 1,
        stderr,
    );

    // A process to hold the job's lock: each toggle is a state change to record.
    let holder = Ended(Command::new("sleep").arg("600").spawn().unwrap());
    let filler = disk.fill();
    let before = count("state-changed");
    let toggles = 6;
    let lines_told = || stderr().matches("not recorded").count();
    for i in 0..toggles {
        let before_toggle = lines_told();
        if i % 2 == 0 {
            fs::write(&lock, format!("{}\n", holder.0.id())).unwrap();
        } else {
            fs::remove_file(&lock).unwrap();
        }
        // Each state change is a write that fails, told on stderr at once.
        wait_for(
            20,
            &format!("toggle {i} told on stderr"),
            || lines_told() > before_toggle,
            stderr,
        );
    }
    let said = stderr();
    assert!(said.contains("is full"), "{said}");
    assert!(said.contains(&format!("'{}'", state.display())), "{said}");
    assert_eq!(count("state-changed"), before, "written on a full disk?");

    // check says so, as a broken rule, while the disk is full; so did escalate_command.
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&jobs)
        .arg("check")
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{table}");
    assert!(table.contains("store writes failing"), "{table}");
    assert!(table.contains("is full"), "{table}");
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&jobs)
        .args(["check", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["store"]["state"], "writes_failing", "{report:#}");
    assert!(
        report["rules"][0]
            .as_str()
            .is_some_and(|r| r.starts_with("store writes failing")),
        "{report:#}"
    );
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&jobs)
        .args(["check", "--prometheus"])
        .output()
        .unwrap();
    let gauges = String::from_utf8_lossy(&out.stdout);
    assert!(
        gauges.contains("\nmihari_store_writes_failing 1\n"),
        "{gauges}"
    );
    wait_for(
        20,
        "the escalation",
        || fs::read_to_string(&told).is_ok_and(|t| t.contains("store writes failing")),
        || fs::read_to_string(&told).unwrap_or_default(),
    );

    // Space again: what the watcher kept is recorded, with a summary of the outage.
    fs::remove_file(&filler).unwrap();
    wait_for(
        30,
        "the kept events recorded",
        || count("state-changed") >= before + toggles,
        stderr,
    );
    let summary = Store::open(&state, Actor::Cli)
        .unwrap()
        .events(&mihari::store::EventFilter::default())
        .unwrap()
        .into_iter()
        .filter_map(|e| e.reason)
        .find(|r| r.contains("could not be written between"));
    assert!(summary.is_some(), "no summary of the outage");
    assert!(stderr().contains("takes writes again"), "{}", stderr());
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&jobs)
        .arg("check")
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(!table.contains("store writes failing"), "{table}");
}

/// A child process ended (killed and reaped) when the test ends, passed or not.
struct Ended(std::process::Child);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn what_does_not_fit_in_memory_is_counted_and_summed_up_when_the_disk_has_room_again() {
    use mihari::effect::recorder::{KEPT, Recorder};
    let dir = tempfile::tempdir().unwrap();
    // Room for the kept events once it is freed: each is a commit of its own in the WAL.
    let Some(disk) = SmallDisk::mount(&dir.path().join("disk"), "16m") else {
        return;
    };
    let state = disk.at.join("state");
    let store = Store::open(&state, Actor::Watcher).unwrap();
    let mut recorder = Recorder::new(store, &state);
    recorder.append(NewEvent::new(Kind::WatcherStarted).reason("pid 1"));
    let filler = disk.fill();
    let over = 25;
    for i in 0..KEPT + over {
        recorder.append(
            NewEvent::new(Kind::StateChanged)
                .job("collect")
                .reason(format!("RUNNING -> STALLED ({i})")),
        );
    }
    assert!(recorder.failing());
    let rule = recorder.rule().unwrap();
    assert!(rule.starts_with("store writes failing"), "{rule}");
    assert!(rule.contains(&format!("{over} did not fit")), "{rule}");
    let health = mihari::store::health::read(&state).unwrap();
    assert_eq!(health.kept, KEPT);
    assert_eq!(health.lost, over as u64);

    fs::remove_file(&filler).unwrap();
    recorder.retry(chrono::Utc::now() + chrono::Duration::seconds(60));
    assert!(!recorder.failing());
    let events = recorder
        .store()
        .events(&mihari::store::EventFilter::default())
        .unwrap();
    let changes: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "state-changed")
        .collect();
    assert_eq!(changes.len(), KEPT, "the kept events, in order");
    assert_eq!(changes[0].reason.as_deref(), Some("RUNNING -> STALLED (0)"));
    let summary = events.last().unwrap().reason.clone().unwrap_or_default();
    assert!(
        summary.starts_with(&format!("{over} events could not be recorded between")),
        "{summary}"
    );
    assert!(summary.contains("disk full"), "{summary}");
    assert!(
        mihari::store::health::read(&state)
            .unwrap()
            .failing_since
            .is_none()
    );
}

#[test]
fn the_dashboards_header_says_when_the_watchers_writes_fail() {
    let now = chrono::Utc::now();
    let rule = mihari::store::health::WriteHealth {
        pid: 4242,
        failing_since: Some(now),
        failed: 3,
        kept: 3,
        lost: 0,
        cause: Some("the disk holding '/var/lib/mihari' is full: free space there".into()),
    }
    .rule()
    .unwrap();
    let mut snapshot =
        mihari::engine::Snapshot::judge_with_rules(&[], Vec::new(), vec![rule.clone()], now);
    snapshot.store_writes_failing = Some(rule);
    let mut model = mihari::tui::model::Model::new(
        Vec::new(),
        "/etc/mihari/jobs.yaml".into(),
        mihari::tui::theme::Theme::plain(),
        now,
    );
    mihari::tui::model::update(&mut model, mihari::tui::model::Msg::Resize(120, 30));
    mihari::tui::model::update(&mut model, mihari::tui::model::Msg::Snapshot(snapshot));
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(120, 30)).unwrap();
    terminal
        .draw(|frame| mihari::tui::view::view(&model, frame))
        .unwrap();
    let screen = terminal.backend().to_string();
    let header: Vec<&str> = screen.lines().take(2).collect();
    assert!(header[0].contains("STORE WRITES FAILING"), "{screen}");
    assert!(header[0].contains("RED 1"), "{screen}");
    assert!(header[1].contains("store writes failing"), "{screen}");
}

#[test]
fn the_watcher_does_not_start_on_a_damaged_store_and_names_it() {
    let s = Sandbox::new();
    s.store_with_history(20_000);
    let pages = fs::metadata(s.db()).unwrap().len() / 4096;
    garbage(&s.db(), pages / 2 * 4096, 4096);
    for once in [false, true] {
        let mut command = Command::new(BIN);
        command
            .arg("--config")
            .arg(s.dir.path().join("jobs.yaml"))
            .arg("watch");
        if once {
            command.arg("--once");
        }
        let out = command.stdin(Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "once {once}: {stderr}");
        assert!(
            stderr.contains(&format!("'{}'", s.db().display())),
            "once {once}: {stderr}"
        );
        assert!(stderr.contains("move it aside"), "once {once}: {stderr}");
    }
}
