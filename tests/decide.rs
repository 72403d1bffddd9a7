//! The one way through for a decision (`engine::decide`), used as the command line and the
//! dashboard use it: a proposal, the operator's answer in each of its ways, and what became
//! of it — on real files, a real dead holder and a real live one, with the event log read
//! back from the real store.
//!
//! What it prevents: a front-end that records a decline but not a refusal, or carries out a
//! decision without recording it first, because each front-end walked the layers its own
//! way; a confirmation that acts on a world that changed since the question (a pause made
//! meanwhile).

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command};

use chrono::Utc;
use mihari::core::decision::{Decision, OutcomeKind};
use mihari::engine::decide::{self, Answer, Asker, NoQuestion, Request};
use mihari::engine::{Action, Engine};
use mihari::store::{Actor, Event, EventFilter, Store};

/// A jobs file with one job `collect` under a lock, its restart a sleep, and whatever
/// process this sandbox started killed when it ends.
struct Sandbox {
    dir: tempfile::TempDir,
    live: Option<Child>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Some(child) = &mut self.live {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let text = "settings:\n  state_dir: state\njobs:\n  - id: collect\n    lock: collect.lock\n    \
                    log: collect.log\n    progress_file: collect.progress\n    \
                    expected_total: 100\n    should_run_when: [not_complete]\n    restart:\n      \
                    command: [\"sleep\", \"60\"]\n      cwd: .\n";
        fs::write(dir.path().join("jobs.yaml"), text).unwrap();
        fs::write(dir.path().join("collect.progress"), "{\"i\":1}\n").unwrap();
        fs::write(dir.path().join("collect.log"), "worked a while\n").unwrap();
        Sandbox { dir, live: None }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn config(&self) -> mihari::config::Config {
        mihari::config::load(&self.path("jobs.yaml")).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The lock of a holder that died: a sleep killed and reaped, its pid in the lock.
    fn dead_holder(&self) {
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
    }

    /// The lock of a holder that is alive.
    fn live_holder(&mut self) {
        let sleeper = Command::new("sleep").arg("60").spawn().unwrap();
        fs::write(self.path("collect.lock"), format!("{}\n", sleeper.id())).unwrap();
        self.live = Some(sleeper);
    }

    /// The engine a command starts from.
    fn engine(&self) -> Engine {
        decide::engine_for(self.config(), "collect").unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn events(&self) -> Vec<Event> {
        Store::open(&self.path("state"), Actor::Cli)
            .unwrap()
            .events(&EventFilter::default())
            .unwrap()
    }

    /// Each event as `kind by actor`.
    fn said(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| format!("{} by {}", e.kind, e.actor.as_str()))
            .collect()
    }
}

fn propose(engine: &Engine, action: Action, asker: Asker) -> Result<Decision, NoQuestion> {
    let request = Request::Job {
        action,
        job: "collect",
        reason: None,
    };
    decide::propose(engine, request, asker, Utc::now())
}

#[test]
fn a_proposal_declined_or_asked_of_no_one_does_nothing_and_is_recorded_as_declined() {
    let sandbox = Sandbox::new();
    sandbox.dead_holder();
    let engine = sandbox.engine();
    let decision = propose(&engine, Action::Release, Asker::Operator).unwrap();
    // What the operator is asked: the lock, and the dead holder.
    let asked: Vec<String> = decision
        .describe(Utc::now())
        .into_iter()
        .map(|(label, value)| format!("{label} {value}"))
        .collect();
    assert!(asked.iter().any(|line| line.contains("dead")), "{asked:?}");
    assert_eq!(decision.wont_happen(Utc::now()), None);
    for answer in [Answer::Declined, Answer::NoTerminal] {
        let outcome = decide::answer(&decision, answer, Asker::Operator, engine.config());
        assert_eq!(outcome.result, OutcomeKind::Declined, "{outcome:?}");
        assert_eq!(outcome.exit_code(), 1);
        assert_eq!(
            outcome.message,
            "release of 'collect' declined: nothing was done"
        );
        assert!(
            sandbox.path("collect.lock").exists(),
            "nothing was released"
        );
    }
    assert_eq!(
        sandbox.said(),
        ["declined by operator", "declined by operator"]
    );
}

#[test]
fn a_proposal_confirmed_is_recorded_before_its_effect_and_as_whoever_confirmed_it() {
    let sandbox = Sandbox::new();
    sandbox.dead_holder();
    let engine = sandbox.engine();
    let decision = propose(&engine, Action::Release, Asker::Ahead).unwrap();
    let outcome = decide::answer(&decision, Answer::Confirmed, Asker::Ahead, engine.config());
    assert_eq!(outcome.result, OutcomeKind::Released, "{outcome:?}");
    assert_eq!(outcome.exit_code(), 0);
    assert!(
        !sandbox.path("collect.lock").exists(),
        "the dead lock is gone"
    );
    // `--yes` on a shell is a headless command's decision, recorded before the removal.
    assert_eq!(sandbox.said(), ["confirmed by cli", "released by cli"]);
    assert_eq!(
        sandbox.events()[0].key.as_deref(),
        Some(decision.key()),
        "recorded under the decision's key"
    );
}

#[test]
fn a_proposal_a_rule_refuses_is_recorded_and_never_asked() {
    let mut sandbox = Sandbox::new();
    sandbox.live_holder();
    let engine = sandbox.engine();
    let Err(NoQuestion::Refused(outcome)) = propose(&engine, Action::Release, Asker::Operator)
    else {
        panic!("a live holder's lock is never proposed for release");
    };
    assert_eq!(outcome.result, OutcomeKind::Refused);
    assert!(outcome.message.contains("alive"), "{}", outcome.message);
    assert_eq!(outcome.exit_code(), 1);
    assert!(sandbox.path("collect.lock").exists());
    assert_eq!(sandbox.said(), ["refused by operator"]);
}

#[test]
fn a_question_about_nothing_is_bad_input_and_records_nothing() {
    let sandbox = Sandbox::new();
    sandbox.dead_holder();
    let Err(no_job) = decide::engine_for(sandbox.config(), "colect") else {
        panic!("an engine for a job the file does not name");
    };
    assert_eq!(no_job.exit_code(), 3);
    assert!(no_job.words().contains("no job 'colect'"), "{no_job:?}");
    let config = sandbox.config();
    let Err(no_key) = decide::propose_by_key(&config, "k-none", None, Asker::Ahead) else {
        panic!("a decision on an approval nobody asked for");
    };
    assert_eq!(no_key.exit_code(), 3);
    assert!(no_key.words().contains("'k-none'"), "{no_key:?}");
    assert_eq!(sandbox.said(), Vec::<String>::new());
}

#[test]
fn an_approval_is_proposed_from_the_store_and_a_second_answer_is_refused() {
    let sandbox = Sandbox::new();
    let config = sandbox.config();
    Store::open(&sandbox.path("state"), Actor::Job)
        .unwrap()
        .request_approval("collect", "publish", "k-1", "publish the results")
        .unwrap();
    let decision = decide::propose_by_key(&config, "k-1", None, Asker::Operator).unwrap();
    assert!(matches!(decision, Decision::Approve(_)), "{decision:?}");
    let outcome = decide::answer(&decision, Answer::Confirmed, Asker::Operator, &config);
    assert_eq!(outcome.result, OutcomeKind::Approved, "{outcome:?}");
    assert_eq!(outcome.exit_code(), 0);
    // Asked again once it is decided: refused before anyone is asked.
    let Err(NoQuestion::Refused(again)) =
        decide::propose_by_key(&config, "k-1", Some("changed my mind"), Asker::Operator)
    else {
        panic!("a decided request proposed again");
    };
    assert!(again.message.contains("already approved"), "{again:?}");
    assert_eq!(again.exit_code(), 1);
}

#[test]
fn a_restart_confirmed_after_a_pause_made_meanwhile_spawns_nothing() {
    let sandbox = Sandbox::new();
    sandbox.dead_holder();
    let engine = sandbox.engine();
    let restart = propose(&engine, Action::Restart, Asker::Operator).unwrap();
    assert!(matches!(restart, Decision::Restart(_)), "{restart:?}");
    // Another operator pauses the job while the restart's question is open.
    let pause = decide::propose(
        &engine,
        Request::Job {
            action: Action::Pause,
            job: "collect",
            reason: Some("disk maintenance"),
        },
        Asker::Ahead,
        Utc::now(),
    )
    .unwrap();
    let paused = decide::answer(&pause, Answer::Confirmed, Asker::Ahead, engine.config());
    assert_eq!(paused.result, OutcomeKind::Recorded, "{paused:?}");
    let outcome = decide::answer(
        &restart,
        Answer::Confirmed,
        Asker::Operator,
        engine.config(),
    );
    assert_eq!(outcome.result, OutcomeKind::Refused, "{outcome:?}");
    assert!(
        outcome.message.contains("paused meanwhile"),
        "{}",
        outcome.message
    );
    assert_eq!(outcome.exit_code(), 1);
    assert_eq!(sandbox.said(), ["paused by cli", "refused by operator"]);
    let events = sandbox.events();
    assert!(
        events[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("disk maintenance")),
        "the reason given ahead is recorded: {events:?}"
    );
}
