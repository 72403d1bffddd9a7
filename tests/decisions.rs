//! Decisions carried out for real: restarts that spawn `mihari run` and verify its lock,
//! exactly once under racing claimers and `kill -9`, the workspace cooldown, routes and max
//! hops, releases that race a file change, and approvals decided from the shell. Every test
//! reads the event log to check what was recorded, and in what order.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use chrono::Utc;
use mihari::core::decision::{Decision, Outcome, OutcomeKind};
use mihari::engine::decide;
use mihari::engine::{Action, Engine};
use mihari::store::{Actor, ClaimState, EventFilter, Store};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// A sandbox: a jobs file, a state folder, and every process it started killed at the end.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A jobs file with one job `collect` whose command sleeps (marked with the sandbox's
    /// path so stray processes can be found and killed).
    fn config(&self, extra_settings: &str, extra_job: &str) -> PathBuf {
        let marker = self.dir.path().display();
        let text = format!(
            "settings:\n  state_dir: state\n{extra_settings}jobs:\n  - id: collect\n    \
             lock: collect.lock\n    log: collect.log\n    progress_file: collect.progress\n    \
             expected_total: 100\n    should_run_when: [not_complete]\n    restart:\n      \
             command: [\"sh\", \"-c\", \"exec sleep 60\", \"{marker}\"]\n      cwd: .\n{extra_job}"
        );
        let path = self.path("jobs.yaml");
        fs::write(&path, text).unwrap();
        path
    }

    fn load(&self) -> mihari::config::Config {
        mihari::config::load(&self.path("jobs.yaml")).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Leaves the lock of a holder that died: a sleep killed and reaped, its pid in the lock.
    fn dead_lock(&self) {
        let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
        let pid = sleeper.id();
        let ticks = mihari::probe::proc::start_ticks(pid).unwrap();
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        fs::write(
            self.path("collect.lock"),
            format!("{{\"pid\":{pid},\"start_time\":{ticks},\"run_id\":\"run-1\"}}"),
        )
        .unwrap();
        fs::write(self.path("collect.progress"), "{\"i\":1}\n").unwrap();
        fs::write(self.path("collect.log"), "worked a while\n").unwrap();
    }

    fn mihari(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--config")
            .arg(self.path("jobs.yaml"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn store(&self) -> Store {
        Store::open(&self.path("state"), Actor::Cli).unwrap()
    }

    fn kinds(&self) -> Vec<String> {
        self.store()
            .events(&EventFilter::default())
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect()
    }

    /// How many events of `kind` the log holds.
    fn count(&self, kind: &str) -> usize {
        self.kinds().iter().filter(|k| *k == kind).count()
    }

    /// The PID in the lock now, if any.
    fn lock_pid(&self) -> Option<u32> {
        let text = fs::read_to_string(self.path("collect.lock")).ok()?;
        mihari::probe::lock::parse_lock(&text).ok().map(|l| l.pid)
    }

    /// Kills the current holder — the `mihari run` wrapper and the job it runs, its whole
    /// session — with SIGKILL and waits until the wrapper is gone, so its lock stays behind
    /// naming a dead process. (Killing the wrapper alone leaves the job holding the flock,
    /// and a restart is then rightly refused as already running.)
    fn kill_holder(&self) {
        let pid = self.lock_pid().expect("a holder");
        for entry in fs::read_dir("/proc").unwrap().flatten() {
            let Ok(member) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if nix::unistd::getsid(Some(Pid::from_raw(member))).map(|s| s.as_raw())
                == Ok(pid as i32)
            {
                let _ = kill(Pid::from_raw(member), Signal::SIGKILL);
            }
        }
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Path::new(&format!("/proc/{pid}")).exists() && !zombie(pid) {
            assert!(Instant::now() < deadline, "pid {pid} did not die");
            thread::sleep(Duration::from_millis(20));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Whether some process has `pid` as its parent (field 4 of its stat).
fn has_child(pid: u32) -> bool {
    fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        fs::read_to_string(entry.path().join("stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1))
                .is_some_and(|ppid| ppid == pid.to_string())
        })
    })
}

/// Each of `jobs` proposed for a restart by an engine of its own, in a thread of its own,
/// then all executed at the same instant: their claim keys and outcomes.
fn restart_at_once(
    config: &mihari::config::Config,
    jobs: &[&'static str],
    actor: Actor,
) -> Vec<(String, Outcome)> {
    let barrier = Arc::new(Barrier::new(jobs.len()));
    let handles: Vec<_> = jobs
        .iter()
        .map(|&job| {
            let config = config.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut engine = Engine::new(config.clone());
                let now = Utc::now();
                engine.refresh(None, now);
                let decision = engine.propose(Action::Restart, job, now).unwrap();
                barrier.wait();
                (
                    decision.key().to_string(),
                    decide::execute(&decision, &config, actor),
                )
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Every process whose command line mentions the sandbox: the jobs and their wrappers.
        let needle = self.dir.path().to_string_lossy().into_owned();
        for entry in fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&needle)
                && pid != std::process::id() as i32
            {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A job that is restarted and stops again without touching any of its files is a new
/// situation: the next restart is not a duplicate of the last one.
#[test]
fn a_job_that_stops_again_without_writing_anything_can_be_restarted_again() {
    let sandbox = Sandbox::new();
    sandbox.config("  workspace_cooldown_sec: 0\n", "");
    let marker = sandbox.dir.path().display().to_string();
    let jobs = fs::read_to_string(sandbox.path("jobs.yaml"))
        .unwrap()
        // Past the settle window a restart watches (3 s): a run that fails within it is a
        // failed restart, one that fails later is a run that stopped again.
        .replace("exec sleep 60", "sleep 4; exit 1");
    fs::write(sandbox.path("jobs.yaml"), jobs).unwrap();
    assert!(
        fs::read_to_string(sandbox.path("jobs.yaml"))
            .unwrap()
            .contains(&marker)
    );
    fs::write(sandbox.path("collect.progress"), "{\"i\":1}\n").unwrap();
    for round in 1..=2 {
        let out = sandbox.mihari(&["restart", "collect", "--yes"]);
        assert_eq!(out.status.code(), Some(0), "round {round}: {}", text(&out));
        // The job exits 1 a second later; `mihari run` records it and removes its lock.
        let deadline = Instant::now() + Duration::from_secs(10);
        while sandbox.kinds().iter().filter(|k| *k == "exited").count() < round {
            assert!(Instant::now() < deadline, "round {round}: no exit recorded");
            thread::sleep(Duration::from_millis(50));
        }
    }
    let kinds = sandbox.kinds();
    assert_eq!(
        kinds.iter().filter(|k| *k == "spawned").count(),
        2,
        "{kinds:?}"
    );
    assert!(!kinds.iter().any(|k| k == "duplicate"), "{kinds:?}");
}

#[test]
fn a_restart_shows_its_plan_records_first_spawns_detached_and_verifies_the_lock() {
    let sandbox = Sandbox::new();
    sandbox.config("", "");
    sandbox.dead_lock();
    let dead = sandbox.lock_pid().unwrap();
    let out = sandbox.mihari(&["restart", "collect", "--yes"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    for shown in [
        "argv",
        "'sh' '-c' 'exec sleep 60'",
        "cwd",
        "holder",
        &format!("pid {dead}, dead"),
        "policy",
        "never restarts it by itself",
        "cooldown",
        "holds its lock",
    ] {
        assert!(said.contains(shown), "{shown} not in:\n{said}");
    }
    let holder = sandbox.lock_pid().unwrap();
    assert_ne!(holder, dead);
    // The new holder is `mihari run`, in its own session.
    let session = nix::unistd::getsid(Some(Pid::from_raw(holder as i32))).unwrap();
    assert_eq!(
        session.as_raw(),
        holder as i32,
        "not the leader of its own session"
    );
    let kinds = sandbox.kinds();
    let at = |kind: &str| {
        kinds
            .iter()
            .position(|k| k == kind)
            .unwrap_or_else(|| panic!("no {kind} in {kinds:?}"))
    };
    assert!(at("confirmed") < at("claimed"));
    assert!(at("claimed") < at("spawned"));
    assert!(at("spawned") < at("verified"));
    // The record holds no paths and no command lines; the workspace is a short hash.
    let store = sandbox.store();
    for event in store.events(&EventFilter::default()).unwrap() {
        let row = format!("{event:?}");
        assert!(
            !row.contains(&sandbox.dir.path().to_string_lossy().to_string()),
            "{row}"
        );
        assert!(!row.contains("exec sleep"), "{row}");
        if event.kind == "spawned" {
            assert_eq!(event.workspace_hash.as_deref().map(str::len), Some(12));
            assert_eq!(
                event.run.as_deref(),
                Some("run-1"),
                "the restart continues the run"
            );
        }
    }
    let claim = store.open_claims().unwrap();
    assert!(claim.is_empty(), "the claim is resolved: {claim:?}");
}

#[test]
fn a_restart_of_a_live_job_is_refused_and_recorded() {
    let sandbox = Sandbox::new();
    sandbox.config("", "");
    let mut live = Command::new("sleep").arg("60").spawn().unwrap();
    fs::write(sandbox.path("collect.lock"), format!("{}\n", live.id())).unwrap();
    fs::write(sandbox.path("collect.log"), "busy\n").unwrap();
    let out = sandbox.mihari(&["restart", "collect", "--yes"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("refused"), "{}", text(&out));
    assert_eq!(sandbox.kinds(), ["refused"]);
    let out = sandbox.mihari(&["release", "collect", "--yes"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("alive"), "{}", text(&out));
    assert!(
        sandbox.path("collect.lock").exists(),
        "a live holder's lock is never removed"
    );
    live.kill().unwrap();
    live.wait().unwrap();
}

#[test]
fn without_a_terminal_or_yes_nothing_is_done_and_the_decline_is_recorded() {
    let sandbox = Sandbox::new();
    sandbox.config("", "");
    sandbox.dead_lock();
    let out = sandbox.mihari(&["restart", "collect"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("pass --yes"), "{}", text(&out));
    assert_eq!(sandbox.kinds(), ["declined"]);
}

#[test]
fn two_dashboards_worth_of_claimers_spawn_once() {
    let sandbox = Sandbox::new();
    // The default cooldown (600 s): the claim is looked at before the cooldown, so every late
    // claimer of the same death is a duplicate, never a suppression.
    sandbox.config("", "");
    sandbox.dead_lock();
    let config = sandbox.load();
    // This test binary is not mihari: the restarts must spawn the real one.
    // SAFETY: set before any thread of this test starts; no other test reads it.
    unsafe { std::env::set_var("MIHARI_BINARY", BIN) };
    let claimers = 6;
    let results = restart_at_once(&config, &["collect"; 6], Actor::Operator);
    let keys: std::collections::HashSet<_> = results.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        keys.len(),
        1,
        "every claimer saw the same death, so the same key"
    );
    let verified = results
        .iter()
        .filter(|(_, o)| o.result == OutcomeKind::Verified)
        .count();
    let duplicates = results
        .iter()
        .filter(|(_, o)| o.result == OutcomeKind::Duplicate)
        .count();
    assert_eq!(verified, 1, "{results:?}");
    assert_eq!(duplicates, claimers - 1, "{results:?}");
    assert_eq!(sandbox.count("spawned"), 1, "{:?}", sandbox.kinds());
    assert_eq!(sandbox.count("duplicate"), claimers - 1);
}

/// Two jobs in one workspace, dead at once and restarted at the same instant (a watcher
/// runs its restarts side by side): the cooldown lets exactly one spawn.
#[test]
fn two_restarts_in_one_workspace_at_once_spawn_once() {
    let sandbox = Sandbox::new();
    sandbox.config("", "");
    let marker = sandbox.dir.path().display().to_string();
    let yaml = fs::read_to_string(sandbox.path("jobs.yaml")).unwrap();
    let second = yaml[yaml.find("  - id: collect").unwrap()..]
        .replace("id: collect", "id: other")
        .replace("collect.", "other.");
    fs::write(sandbox.path("jobs.yaml"), format!("{yaml}{second}")).unwrap();
    assert!(
        fs::read_to_string(sandbox.path("jobs.yaml"))
            .unwrap()
            .contains(&marker)
    );
    sandbox.dead_lock();
    for file in ["lock", "progress", "log"] {
        fs::copy(
            sandbox.path(&format!("collect.{file}")),
            sandbox.path(&format!("other.{file}")),
        )
        .unwrap();
    }
    let config = sandbox.load();
    // SAFETY: set before any thread of this test starts; no other test reads it.
    unsafe { std::env::set_var("MIHARI_BINARY", BIN) };
    let results = restart_at_once(&config, &["collect", "other"], Actor::Watcher);
    let verified = results
        .iter()
        .filter(|(_, o)| o.result == OutcomeKind::Verified)
        .count();
    let suppressed = results
        .iter()
        .filter(|(_, o)| o.result == OutcomeKind::Suppressed)
        .count();
    assert_eq!((verified, suppressed), (1, 1), "{results:?}");
    assert_eq!(sandbox.count("spawned"), 1, "{:?}", sandbox.kinds());
    assert_eq!(
        sandbox.count("cooldown-suppressed"),
        1,
        "{:?}",
        sandbox.kinds()
    );
}

#[test]
fn kill_9_mid_restart_never_spawns_twice_for_one_key_and_recovery_resolves_the_claim() {
    let sandbox = Sandbox::new();
    sandbox.config("", "");
    let rounds = 12;
    for round in 0..rounds {
        sandbox.dead_lock();
        // Widen one window or the other, then kill -9 somewhere in it.
        let (variable, pause) = if round % 2 == 0 {
            ("MIHARI_FAULT_PAUSE_AFTER_CLAIM_MS", 400)
        } else {
            ("MIHARI_FAULT_PAUSE_AFTER_SPAWN_MS", 400)
        };
        let mut restart = Command::new(BIN)
            .arg("--config")
            .arg(sandbox.path("jobs.yaml"))
            .args(["restart", "collect", "--yes"])
            .env(variable, pause.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        thread::sleep(Duration::from_millis(150 + (round as u64 * 37) % 300));
        let _ = restart.kill();
        let _ = restart.wait();

        // Another restart of the same situation: recovery runs first, then at most one spawn.
        let again = sandbox.mihari(&["restart", "collect", "--yes"]);
        let said = text(&again);
        assert!(
            matches!(again.status.code(), Some(0 | 1)),
            "round {round}: {said}"
        );

        let store = sandbox.store();
        assert_eq!(store.integrity_check().unwrap(), "ok");
        let events = store.events(&EventFilter::default()).unwrap();
        let mut spawns: std::collections::HashMap<String, usize> = Default::default();
        for event in events.iter().filter(|e| e.kind == "spawned") {
            *spawns
                .entry(event.key.clone().unwrap_or_default())
                .or_default() += 1;
        }
        assert!(
            spawns.values().all(|n| *n == 1),
            "round {round}: two spawns for one key: {spawns:?}"
        );
        for claim in store.open_claims().unwrap() {
            assert!(
                mihari::effect::recover::session_alive(&claim.session) != Some(false),
                "round {round}: an orphaned claim was left open: {claim:?}"
            );
        }
        // Leave a dead holder for the next round.
        if sandbox.lock_pid().is_some() {
            sandbox.kill_holder();
        }
    }
    // A claimer killed before its fork leaves a claim recovery abandons (nothing was
    // spawned); one killed after it leaves a spawn recovery verifies from the run's record.
    // Neither is a failed restart.
    let store = sandbox.store();
    let settled: Vec<_> = store
        .events(&EventFilter::default())
        .unwrap()
        .into_iter()
        .filter(|e| {
            let reason = e.reason.as_deref().unwrap_or("");
            (e.kind == "abandoned" && reason.contains("died"))
                || (e.kind == "verified" && reason.contains("by recovery"))
        })
        .collect();
    assert!(
        !settled.is_empty(),
        "no orphaned claim was ever settled by recovery: {:?}",
        sandbox.kinds()
    );
    assert_eq!(sandbox.count("failed"), 0, "{:?}", sandbox.kinds());
}

#[test]
fn the_workspace_cooldown_suppresses_a_second_spawn_and_says_so() {
    let sandbox = Sandbox::new();
    sandbox.config("  workspace_cooldown_sec: 600\n", "");
    sandbox.dead_lock();
    assert_eq!(
        sandbox
            .mihari(&["restart", "collect", "--yes"])
            .status
            .code(),
        Some(0)
    );
    sandbox.kill_holder();
    let out = sandbox.mihari(&["restart", "collect", "--yes"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("CLOSED"),
        "the plan shows the cooldown: {said}"
    );
    assert!(said.contains("suppressed"), "{said}");
    let kinds = sandbox.kinds();
    assert_eq!(
        kinds.iter().filter(|k| *k == "spawned").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("cooldown-suppressed")
    );
}

#[test]
fn each_restart_of_a_run_takes_the_next_route_and_past_max_hops_goes_to_a_human() {
    let sandbox = Sandbox::new();
    let marker = sandbox.dir.path().display().to_string();
    sandbox.config(
        "  max_hops: 2\n  workspace_cooldown_sec: 1\n",
        &format!(
            "      routes:\n        - {{ name: local, command: [\"sh\", \"-c\", \"exec sleep 61\", \"{marker}\"] }}\n        \
             - {{ name: cloud-a, command: [\"sh\", \"-c\", \"exec sleep 62\", \"{marker}\"] }}\n        \
             - {{ name: cloud-b, command: [\"sh\", \"-c\", \"exec sleep 63\", \"{marker}\"] }}\n"
        ),
    );
    sandbox.dead_lock();
    let mut routes = Vec::new();
    for _ in 0..2 {
        thread::sleep(Duration::from_millis(1100));
        let out = sandbox.mihari(&["restart", "collect", "--yes"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let spawned = sandbox
            .store()
            .events(&EventFilter {
                kind: Some("spawned".into()),
                ..Default::default()
            })
            .unwrap();
        routes.push(spawned.last().unwrap().route.clone().unwrap());
        sandbox.kill_holder();
    }
    assert_eq!(
        routes,
        ["local", "cloud-a"],
        "a run never goes back to a route"
    );
    let run = sandbox.store().run_routes("run-1").unwrap().unwrap();
    assert_eq!(run.hops, 2);
    thread::sleep(Duration::from_millis(1100));
    let out = sandbox.mihari(&["restart", "collect", "--yes"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("goes to a human"), "{said}");
}

#[test]
fn a_release_removes_a_dead_holders_lock_once_and_records_it() {
    let sandbox = Sandbox::new();
    sandbox.config("", "");
    sandbox.dead_lock();
    let out = sandbox.mihari(&["release", "collect", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!sandbox.path("collect.lock").exists());
    assert_eq!(sandbox.kinds(), ["confirmed", "released"]);
    let out = sandbox.mihari(&["release", "collect", "--yes"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "nothing left to release: {}",
        text(&out)
    );
}

#[test]
fn a_release_whose_file_changed_since_the_dialog_removes_nothing() {
    let sandbox = Sandbox::new();
    sandbox.config("", "");
    sandbox.dead_lock();
    let config = sandbox.load();
    let mut engine = Engine::new(config.clone());
    let now = Utc::now();
    engine.refresh(None, now);
    let decision = engine.propose(Action::Release, "collect", now).unwrap();
    assert!(matches!(decision, Decision::Release(_)));
    // Between the dialog and the confirmation, the lock is rewritten (same dead pid, new
    // content): it is not the file the operator saw.
    let before = fs::read_to_string(sandbox.path("collect.lock")).unwrap();
    fs::write(
        sandbox.path("collect.lock"),
        before.replace("run-1", "run-2"),
    )
    .unwrap();
    let outcome = decide::execute(&decision, &config, Actor::Operator);
    assert_eq!(outcome.result, OutcomeKind::Refused, "{outcome:?}");
    assert!(outcome.message.contains("changed"), "{}", outcome.message);
    assert!(sandbox.path("collect.lock").exists());
    assert!(
        fs::read_to_string(sandbox.path("collect.lock"))
            .unwrap()
            .contains("run-2")
    );
    assert_eq!(sandbox.kinds(), ["confirmed", "refused"]);
}

#[test]
fn a_release_racing_a_writer_never_removes_the_writers_file() {
    let sandbox = Sandbox::new();
    sandbox.config("", "");
    let config = sandbox.load();
    for round in 0..150u32 {
        sandbox.dead_lock();
        let mut engine = Engine::new(config.clone());
        let now = Utc::now();
        engine.refresh(None, now);
        let decision = engine.propose(Action::Release, "collect", now).unwrap();
        let lock = sandbox.path("collect.lock");
        let content = format!("{{\"pid\":1,\"start_time\":1,\"run_id\":\"writer-{round}\"}}");
        let writer = {
            let lock = lock.clone();
            let content = content.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_micros(u64::from(round % 15) * 100));
                // Atomic replace, as a job taking the lock anew would.
                let temp = lock.with_extension("tmp");
                fs::write(&temp, &content).unwrap();
                fs::rename(&temp, &lock).unwrap();
            })
        };
        let _ = decide::execute(&decision, &config, Actor::Operator);
        writer.join().unwrap();
        let now_there = fs::read_to_string(&lock).unwrap_or_default();
        assert_eq!(
            now_there, content,
            "round {round}: the writer's lock was removed"
        );
        let _ = fs::remove_file(&lock);
    }
}

#[test]
fn approvals_are_decided_from_the_shell_and_a_job_sees_the_answer() {
    let sandbox = Sandbox::new();
    sandbox.config("", "");
    let mut store = sandbox.store();
    store
        .request_approval("collect", "publish", "k-approve", "publish 3 articles")
        .unwrap();
    store
        .request_approval("collect", "delete", "k-deny", "delete the raw shards")
        .unwrap();
    drop(store);
    // Without a terminal and without --yes, nothing is decided.
    let out = sandbox.mihari(&["approval", "approve", "k-approve"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = sandbox.mihari(&["approval", "approve", "k-approve", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = sandbox.mihari(&[
        "approval",
        "deny",
        "k-deny",
        "--reason",
        "wrong bucket",
        "--yes",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = sandbox.mihari(&["approval", "approve", "k-deny", "--yes"]);
    assert_eq!(out.status.code(), Some(1), "decided once: {}", text(&out));
    let store = sandbox.store();
    assert_eq!(
        store.approval("k-approve").unwrap().unwrap().state,
        mihari::store::ApprovalState::Approved
    );
    let denied = store.approval("k-deny").unwrap().unwrap();
    assert_eq!(denied.reason.as_deref(), Some("wrong bucket"));
    let kinds = sandbox.kinds();
    for kind in [
        "approval-requested",
        "declined",
        "approved",
        "denied",
        "refused",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind} in {kinds:?}");
    }
    let claims = store.open_claims().unwrap();
    assert!(claims.iter().all(|c| c.state != ClaimState::Claimed));
}

#[test]
fn a_job_that_outlived_its_killed_wrapper_is_unknown_never_dead() {
    let sandbox = Sandbox::new();
    sandbox.config("", "");
    sandbox.dead_lock();
    assert_eq!(
        sandbox
            .mihari(&["restart", "collect", "--yes"])
            .status
            .code(),
        Some(0)
    );
    // Kill only the wrapper, once it has started the job: the job keeps the flock it
    // inherited. (Killed before that, nothing holds the flock and the lock is dead.)
    let wrapper = sandbox.lock_pid().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !has_child(wrapper) {
        assert!(
            Instant::now() < deadline,
            "the wrapper never started the job"
        );
        thread::sleep(Duration::from_millis(20));
    }
    kill(Pid::from_raw(wrapper as i32), Signal::SIGKILL).unwrap();
    while Path::new(&format!("/proc/{wrapper}")).exists() && !zombie(wrapper) {
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(20));
    }
    let out = sandbox.mihari(&["check", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let job = &report["jobs"][0];
    assert_eq!(job["state"], "UNKNOWN", "{job:#}");
    assert!(
        job["reasons"].to_string().contains("still flock'ed"),
        "{job:#}"
    );
    // Neither a release nor a restart may act on it.
    assert_eq!(
        sandbox
            .mihari(&["release", "collect", "--yes"])
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        sandbox
            .mihari(&["restart", "collect", "--yes"])
            .status
            .code(),
        Some(1)
    );
    assert!(sandbox.path("collect.lock").exists());
}

#[test]
fn a_claimer_killed_between_its_fork_and_its_record_never_lets_the_key_spawn_again() {
    // A second operator's dialog is opened on a dead lock. The first restart claims, forks
    // `mihari run`, and is killed before it records the spawn. Recovery must see that a spawn
    // may have happened (the new run holds the lock): the stale dialog is then a duplicate,
    // never a second spawn, and no false failure is recorded.
    let sandbox = Sandbox::new();
    sandbox.config("  workspace_cooldown_sec: 0\n", "");
    sandbox.dead_lock();
    let config = sandbox.load();
    // SAFETY: set before any thread of this test starts; no other test reads it.
    unsafe { std::env::set_var("MIHARI_BINARY", BIN) };
    let mut engine = Engine::new(config.clone());
    engine.refresh(None, Utc::now());
    let stale = engine
        .propose(Action::Restart, "collect", Utc::now())
        .unwrap();

    let mut first = Command::new(BIN)
        .arg("--config")
        .arg(sandbox.path("jobs.yaml"))
        .args(["restart", "collect", "--yes"])
        .env("MIHARI_FAULT_PAUSE_AFTER_FORK_MS", "3000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The fork has happened once the new run holds the lock.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sandbox
        .lock_pid()
        .is_none_or(|pid| zombie(pid) || !sandbox.kinds().contains(&"started".to_string()))
    {
        assert!(Instant::now() < deadline, "the new run never took the lock");
        thread::sleep(Duration::from_millis(10));
    }
    let _ = first.kill();
    let _ = first.wait();
    assert!(
        !sandbox.kinds().contains(&"spawned".to_string()),
        "killed too late"
    );

    let outcome = decide::execute(&stale, &config, Actor::Operator);
    assert_eq!(outcome.result, OutcomeKind::Duplicate, "{outcome:?}");
    let kinds = sandbox.kinds();
    assert_eq!(
        kinds.iter().filter(|k| *k == "started").count(),
        1,
        "{kinds:?}"
    );
    assert!(
        !kinds.contains(&"failed".to_string()),
        "a false failure: {kinds:?}"
    );
    let spawned: Vec<_> = sandbox
        .store()
        .events(&EventFilter {
            kind: Some("spawned".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        spawned.len(),
        1,
        "recovery records the spawn it found: {spawned:?}"
    );
    assert!(
        spawned[0]
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("recorded by recovery")
    );
}

/// Issue 9, item 8: a claim made with `mihari claim KEY --job J` was later "recovered" as a
/// half-finished restart: J went RED "the last restart failed" and dispatch was held.
/// Recovery touches restart claims only.
#[test]
fn a_claim_made_with_mihari_claim_is_never_recovered_as_a_failed_restart() {
    let sandbox = Sandbox::new();
    sandbox.config("", "");
    let before = sandbox.mihari(&["check", "--json"]);
    let claimed = sandbox.mihari(&["claim", "export-2026-12-01", "--job", "collect"]);
    assert_eq!(claimed.status.code(), Some(0), "{}", text(&claimed));

    // Every watcher pass runs recovery first.
    let pass = sandbox.mihari(&["watch", "--once"]);
    assert!(!text(&pass).contains("recovered"), "{}", text(&pass));

    let after = sandbox.mihari(&["check", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_eq!(report["dispatch_held"], false, "{report}");
    assert_ne!(report["jobs"][0]["bucket"], "RED", "{report}");
    assert_eq!(after.status.code(), before.status.code(), "{report}");
    assert_eq!(sandbox.count("failed"), 0, "{:?}", sandbox.kinds());
    let claim = sandbox
        .store()
        .claim_of("export-2026-12-01")
        .unwrap()
        .unwrap();
    assert_eq!(claim.state, ClaimState::Claimed, "{claim:?}");
    // It still guards what it was made for.
    let again = sandbox.mihari(&["claim", "export-2026-12-01", "--job", "collect"]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
}

/// Issue 9, item 10: a recovery pass that read an open claim a moment before its living
/// claimer recorded the spawn, and settled it after that claimer had finished and exited,
/// recorded a second `spawned` for the key — "exactly-once broke" though one process ran.
/// The settlement holds only while the claim is still as recovery read it.
#[test]
fn a_recovery_that_read_a_claim_before_its_claimer_finished_never_records_a_second_spawn() {
    let sandbox = Sandbox::new();
    sandbox.config("  workspace_cooldown_sec: 0\n", "");
    sandbox.dead_lock();
    let mihari = |args: &[&str], pause: &str, ms: &str| {
        Command::new(BIN)
            .arg("--config")
            .arg(sandbox.path("jobs.yaml"))
            .args(args)
            .env(pause, ms)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // The winner pauses between its fork and its record of the spawn.
    let winner = mihari(
        &["restart", "collect", "--yes"],
        "MIHARI_FAULT_PAUSE_AFTER_FORK_MS",
        "2000",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sandbox
        .store()
        .open_claims()
        .unwrap()
        .iter()
        .any(|c| c.spawn_started.is_some())
    {
        assert!(Instant::now() < deadline, "the winner never began to spawn");
        thread::sleep(Duration::from_millis(10));
    }
    // A watcher pass reads the open claims during that pause, and settles them only once the
    // winner has recorded everything and exited.
    let late = mihari(
        &["watch", "--once"],
        "MIHARI_FAULT_PAUSE_IN_RECOVERY_MS",
        "5000",
    );
    let winner = winner.wait_with_output().unwrap();
    assert_eq!(winner.status.code(), Some(0), "{}", text(&winner));
    let late = late.wait_with_output().unwrap();
    assert!(!text(&late).contains("recovered"), "{}", text(&late));

    assert_eq!(sandbox.count("spawned"), 1, "{:?}", sandbox.kinds());
    let check = sandbox.mihari(&["check", "--json"]);
    let said = text(&check);
    assert!(!said.contains("exactly-once broke"), "{said}");
    assert_eq!(sandbox.count("failed"), 0, "{:?}", sandbox.kinds());
}
