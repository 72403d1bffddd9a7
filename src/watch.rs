//! `mihari watch`: the machine watcher, the process that keeps watch when no one looks.
//!
//! One per state_dir (the watch lock). It runs the same event-driven engine as the dashboard
//! ([`Live`]: file notifications, pidfd waits, one deadline timer) and, after each change,
//! asks the [`Brain`] what to do: record state changes, restart what the rules allow (through
//! the one executor, as the watcher), tell a human at once about the four kinds of things,
//! once per episode, through `escalate_command`, and queue everything else for the daily
//! digest, which it cuts at `digest_at`. `--once` makes one such pass for cron or a systemd
//! timer and exits with `check`'s codes. Every write it makes goes through the [`Recorder`]:
//! a write that fails is told and kept, never dropped, and no automatic restart happens
//! while the store cannot be written or read. It never draws anything and never decides for
//! a human: what it may not do, it escalates.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::process::ExitCode;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::core::State;
use crate::core::decision::{Cooldown, Decision, RestartPlan};
use crate::core::decision::{Outcome, OutcomeKind};
use crate::core::digest::cut_counted_from;
use crate::core::escalate::{Condition, EscalationKind, NO_JOB};
use crate::core::watch::{Brain, PASS_BEAT_SEC, Pass, category, paused_digest};
use crate::effect;
use crate::effect::notify::{Finished, Notice, Notifier};
use crate::effect::recorder::{Cut, Recorder};
use crate::effect::textfile::Textfile;
use crate::effect::watch_lock::{self, Acquired};
use crate::engine::live::{Arrivals, Live, Pace, Reload};
use crate::engine::triggers::Trigger;
use crate::engine::{Action, CheckResultFor, Snapshot};
use crate::render::{prometheus, status_code};
use crate::store::digest::{DigestCategory, next_cut, next_cut_bounded};
use crate::store::{Actor, Kind, NewEvent, Store, StoreError};

/// Exit code when another watcher already watches this state_dir.
pub const EXIT_ALREADY_WATCHING: u8 = 75;

/// Runs the watcher on the jobs file `config` was loaded from: long-running, or one pass
/// with `once`.
pub fn run(config: Config, once: bool, interval_sec: u64) -> ExitCode {
    // The whole file is checked once: a watcher never starts on a damaged store, where it
    // would read damage as "nothing recorded" (no cap spent, no claims).
    let opened = Store::open(&config.settings.state_dir, Actor::Watcher)
        .and_then(|store| store.verify().map(|()| store));
    let store = match opened {
        Ok(store) => store,
        Err(error) => {
            let words = crate::engine::store_error_words(&config.settings.state_dir, &error);
            eprintln!("mihari watch: {words}");
            return ExitCode::from(3);
        }
    };
    let (lock, takeover) = match watch_lock::acquire(&config.settings.state_dir) {
        Ok(Acquired::Taken(lock, takeover)) => (lock, takeover),
        Ok(Acquired::Busy { why, .. }) if once => {
            // The running watcher acts; this pass only reports, with `check`'s exit code.
            println!("mihari watch --once: {why}; this pass only reports");
            let mut engine = crate::engine::Engine::new(config.clone());
            engine.run_checks(None);
            let snapshot = engine.refresh(None, Utc::now());
            let _ = crate::render::render_table(&snapshot, &mut std::io::stdout().lock());
            return ExitCode::from(status_code(&snapshot));
        }
        Ok(Acquired::Busy { why, .. }) => {
            eprintln!("mihari watch: {why}");
            return ExitCode::from(EXIT_ALREADY_WATCHING);
        }
        Err(error) => {
            eprintln!("mihari watch: {error}");
            return ExitCode::from(3);
        }
    };
    // From here on every write goes through the recorder: none is dropped without a word.
    let mut store = Recorder::new(store, &config.settings.state_dir);
    if let Some(note) = takeover {
        store.append(NewEvent::new(Kind::WatcherTakeover).reason(note));
    }
    let code = if once {
        one_pass(config, &mut store, interval_sec)
    } else {
        store.append(
            NewEvent::new(Kind::WatcherStarted).reason(format!("pid {}", std::process::id())),
        );
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                eprintln!("mihari watch: cannot start its runtime: {error}");
                return ExitCode::from(3);
            }
        };
        let result = runtime.block_on(watch_forever(config, &mut store, &lock));
        store.append(
            NewEvent::new(Kind::WatcherStopped).reason(format!("pid {}", std::process::id())),
        );
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("mihari watch: {error}");
                ExitCode::from(3)
            }
        }
    };
    store.finish();
    drop(lock);
    code
}

/// The watcher's memory and hands: the brain, the store, and what it has in flight.
struct Watcher {
    config: Config,
    brain: Brain,
    /// Restarts handed to the executor whose outcomes have not come back.
    in_flight: HashSet<String>,
    /// Restart keys already recorded as skipped because the daily cap was spent.
    capped_keys: HashSet<String>,
    /// When the digest is cut next.
    next_cut: DateTime<Utc>,
    /// Jobs whose restart waits for their workspace's cooldown, and when it opens: the
    /// suppression is recorded once, then the watcher sleeps until then instead of asking
    /// again on every pass.
    cooling: HashMap<String, DateTime<Utc>>,
    /// `escalate_command`'s runs, off the loop and a few at a time (a hanging notifier must
    /// not blind the watcher, nor a flood of escalations start a process each); `None` when
    /// the jobs file has no `escalate_command`.
    notifier: Option<Notifier>,
    /// Whether stderr was told that automatic restarts wait for the store.
    restarts_held: bool,
    /// The store fault stderr was last told of.
    fault_told: Option<String>,
    /// The cut whose digest already names the paused jobs: a cut that fails and is tried
    /// again names them once, not once per try.
    paused_named_for: Option<DateTime<Utc>>,
    /// Words for a last digest stamped in the future, to say once.
    clock_jumped: Option<String>,
    /// The ends of Slurm jobs already in the event log, by (job, run key): each is recorded
    /// once, so that it outlives Slurm's memory of the job.
    slurm_ends: HashSet<(String, String)>,
}

impl Watcher {
    /// The watcher's memory as the store records it. A store that cannot be read is an
    /// error: starting with an empty memory would record every state and tell every open
    /// episode again.
    fn new(config: Config, store: &Store, now: DateTime<Utc>) -> Result<Watcher, StoreError> {
        let states = store
            .last_states()?
            .into_iter()
            .filter_map(|(job, state)| Some((job, State::parse(&state)?)));
        let episodes = store
            .open_episodes()?
            .into_iter()
            .filter_map(|e| Some((e.job, EscalationKind::parse(&e.kind)?)));
        let capped_keys = store
            .events(&crate::store::EventFilter {
                kind: Some(Kind::Skipped.as_str().to_string()),
                since: Some(now - chrono::Duration::hours(24)),
                ..Default::default()
            })?
            .into_iter()
            .filter_map(|e| e.key)
            .collect();
        // Before the first cut ever (and after one stamped in the future), the digest is due
        // at the first digest_at after the oldest item queued.
        let waiting = store
            .pending_digest()?
            .iter()
            .map(|item| item.at)
            .filter(|at| *at <= now)
            .min();
        let (after, clock_jumped) = cut_counted_from(store.last_cut()?, waiting, now);
        let timeouts_told =
            store.digest_texts_since(DigestCategory::Timeout, now - chrono::Duration::hours(24))?;
        let next_cut = next_cut(
            after.max(now - chrono::Duration::days(1)),
            config.settings.digest_at,
        );
        Ok(Watcher {
            brain: Brain::restored(states, episodes).with_timeouts_told(timeouts_told),
            config,
            in_flight: HashSet::new(),
            capped_keys,
            next_cut,
            cooling: HashMap::new(),
            notifier: None,
            restarts_held: false,
            fault_told: None,
            paused_named_for: None,
            clock_jumped,
            slurm_ends: HashSet::new(),
        })
    }

    /// Says (once, on stderr and in the event log) that the last digest is stamped in the
    /// future and the next is counted from now.
    fn tell_clock_jumped(&mut self, store: &mut Recorder) {
        if let Some(words) = self.clock_jumped.take() {
            eprintln!("mihari watch: {words}");
            store.append(NewEvent::new(Kind::Detected).reason(words));
        }
    }

    /// Puts a new load of the jobs file in force: the jobs, the cap, the digest's time and
    /// the notifier follow it; what the brain remembers of each job stays.
    fn reload(&mut self, config: Config) {
        if config.settings.digest_at != self.config.settings.digest_at {
            self.next_cut = next_cut(Utc::now(), config.settings.digest_at);
        }
        self.config = config;
    }

    /// Judges one snapshot and carries out what it asks, except the restarts, which are
    /// returned as decisions for the caller to execute (in the background, or at once),
    /// with the moments backoffs end.
    fn pass(
        &mut self,
        live: &Live,
        snapshot: &Snapshot,
        store: &mut Recorder,
        now: DateTime<Utc>,
    ) -> (Vec<Decision>, Vec<(String, DateTime<Utc>)>) {
        store.retry(now);
        if snapshot.store_fault != self.fault_told {
            if let Some(fault) = &snapshot.store_fault {
                eprintln!(
                    "mihari watch: the state store cannot be read: {fault}; nothing is \
                     restarted until it can"
                );
            }
            self.fault_told = snapshot.store_fault.clone();
        }
        // Looked up by id once: a search per job would make each pass quadratic in the jobs.
        let histories: std::collections::HashMap<&str, &crate::core::History> = snapshot
            .evidence
            .iter()
            .map(|(id, seen)| (id.as_str(), &seen.history))
            .collect();
        let history = |id: &str| histories.get(id).map(|h| (*h).clone()).unwrap_or_default();
        let in_flight = &self.in_flight;
        let pass = self.brain.pass(
            &snapshot.list,
            &self.config.jobs,
            &history,
            &|job| in_flight.contains(job),
            self.config.settings.restart_daily_cap,
            // The watcher cannot escalate its own absence; that is the dashboard's to say.
            // What it can say is that the store does not take its writes, or cannot be read.
            &store_rules(live, snapshot, store),
            now,
        );
        // Claims whose claimer died mid-way (a watcher killed between claiming and
        // verifying) are resolved before anything else is decided.
        let recovery = effect::recover::recover(store.store_mut(), &self.config);
        for settled in &recovery.settled {
            eprintln!("mihari watch: recovered a claim: {settled}");
        }
        self.record_slurm_ends(snapshot, store);
        let restarts = self.restarts(live, &pass, snapshot, store, now);
        self.record(&pass, store);
        self.cap(live, &pass, store, now);
        self.tell_clock_jumped(store);
        // A next cut worked out while the clock was ahead comes back with the clock.
        let bounded = next_cut_bounded(self.next_cut, now, self.config.settings.digest_at);
        if bounded < self.next_cut {
            let words = format!(
                "the next digest was due {}, later than the next digest_at from now: the clock \
                 went back; cutting at the next digest_at",
                self.next_cut.format("%Y-%m-%d %H:%M UTC")
            );
            eprintln!("mihari watch: {words}");
            store.append(NewEvent::new(Kind::Detected).reason(words));
            self.next_cut = bounded;
        }
        if now >= self.next_cut {
            // Every digest names the jobs that stay paused, so a pause never goes quiet.
            if self.paused_named_for != Some(self.next_cut) {
                for (job, words) in paused_digest(&snapshot.list) {
                    store.queue_digest_at(now, Some(&job), DigestCategory::Paused, &words);
                }
                self.paused_named_for = Some(self.next_cut);
            }
            match store.cut_digest(now) {
                Cut::Made(id) => {
                    store.append(
                        NewEvent::new(Kind::Detected)
                            .reason(format!("digest {id} cut at digest_at")),
                    );
                    self.next_cut = next_cut(now, self.config.settings.digest_at);
                }
                Cut::Empty => self.next_cut = next_cut(now, self.config.settings.digest_at),
                // Not cut: the store takes no write (told already); cut when it does.
                Cut::Failed => {}
            }
        }
        self.tell_store(store);
        let mut waits = pass.waits;
        // A spawn that may still be starting is looked at again when its grace period ends.
        waits.extend(recovery.waiting);
        self.cooling.retain(|_, opens_at| *opens_at > now);
        waits.extend(self.cooling.iter().map(|(job, at)| (job.clone(), *at)));
        (restarts, waits)
    }

    /// Proposes the restarts the brain allows; a refusal becomes something only a human can
    /// move, escalated by the next pass.
    fn restarts(
        &mut self,
        live: &Live,
        pass: &Pass,
        snapshot: &Snapshot,
        store: &mut Recorder,
        now: DateTime<Utc>,
    ) -> Vec<Decision> {
        let mut decisions = Vec::new();
        // A restart is claimed and recorded before it spawns: while the store takes no
        // write, or cannot be read (no cap count, no claims), none may happen.
        if store.failing() || snapshot.store_fault.is_some() {
            if !pass.restarts.is_empty() && !self.restarts_held {
                eprintln!(
                    "mihari watch: automatic restarts of '{}' wait until the state store can \
                     be read and written again",
                    pass.restarts.join("', '")
                );
            }
            self.restarts_held = !pass.restarts.is_empty();
            return decisions;
        }
        self.restarts_held = false;
        for job in &pass.restarts {
            if self.in_flight.contains(job) || self.cooling.get(job).is_some_and(|at| *at > now) {
                continue;
            }
            match live.engine.propose(Action::Restart, job, now) {
                Ok(Decision::Restart(plan)) if matches!(plan.cooldown, Cooldown::Closed { .. }) => {
                    self.cool(&plan, store, now);
                }
                Ok(decision) => {
                    self.in_flight.insert(job.clone());
                    decisions.push(decision);
                }
                Err(why) => {
                    store.append(
                        NewEvent::new(Kind::Refused)
                            .job(job)
                            .reason(format!("automatic restart refused: {why}")),
                    );
                    if let Some(condition) = self.brain.cannot_restart(job, &why) {
                        self.escalate(&condition, store);
                    }
                }
            }
        }
        decisions
    }

    /// A restart the workspace cooldown holds back: recorded once, with a digest item, and
    /// proposed again when the cooldown opens.
    fn cool(&mut self, plan: &RestartPlan, store: &mut Recorder, now: DateTime<Utc>) {
        let Cooldown::Closed {
            workspace_hash,
            last_spawn,
            opens_at,
        } = &plan.cooldown
        else {
            return;
        };
        let why = format!(
            "workspace cooldown: the last spawn there was {} s ago; the automatic restart \
             waits until it opens in {} s",
            (now - *last_spawn).num_seconds(),
            (*opens_at - now).num_seconds().max(1)
        );
        store.append(
            NewEvent::new(Kind::CooldownSuppressed)
                .job(&plan.job)
                .key(&plan.key)
                .workspace_hash(Some(workspace_hash.clone()))
                .run(Some(&plan.run_id))
                .reason(why),
        );
        store.queue_digest(
            Some(&plan.job),
            DigestCategory::Suppressed,
            "automatic restart held back by the workspace cooldown",
        );
        self.cooling.insert(plan.job.clone(), *opens_at);
    }

    /// Records the end of each Slurm job seen ended as an `exited` event (once per Slurm job
    /// and requeue), as `mihari run` records a run's end: Slurm forgets an ended job after
    /// MinJobAge (300 s by default) where no accounting runs, and `not_succeeded` must not
    /// forget it with it.
    fn record_slurm_ends(&mut self, snapshot: &Snapshot, store: &mut Recorder) {
        if snapshot.store_fault.is_some() {
            return;
        }
        for (job, seen) in &snapshot.evidence {
            let Some(crate::core::Reading::Found(held)) = seen.slurm.as_deref() else {
                continue;
            };
            let Some(words) = held.exited_event_words() else {
                continue;
            };
            let key = (job.clone(), held.run_key());
            if self.slurm_ends.contains(&key) {
                continue;
            }
            let recorded = match store.store().last_event(Some(job), &[Kind::Exited]) {
                Ok(last) => last.is_some_and(|event| event.run.as_deref() == Some(&key.1)),
                // Unreadable now: tried again on the next pass, never written twice.
                Err(_) => continue,
            };
            if !recorded {
                store.append(
                    NewEvent::new(Kind::Exited)
                        .job(job)
                        .run(Some(&key.1))
                        .reason(words),
                );
            }
            self.slurm_ends.insert(key);
        }
    }

    /// Records state changes, escalates new episodes, closes ended ones, queues the digest.
    fn record(&mut self, pass: &Pass, store: &mut Recorder) {
        for (job, before, now) in &pass.state_changes {
            let from = before.map_or("(first seen)", State::as_str);
            store.append(
                NewEvent::new(Kind::StateChanged)
                    .job(job)
                    .reason(format!("{from} -> {}", now.as_str())),
            );
        }
        for condition in &pass.escalate {
            self.escalate(condition, store);
        }
        for (job, kind) in &pass.ended {
            store.close_episode(job, kind.as_str());
        }
        for (job, category, text) in &pass.digest {
            let category = DigestCategory::parse(category).unwrap_or(DigestCategory::Other);
            store.queue_digest(job.as_deref(), category, text);
        }
    }

    /// Tells a human once: records the episode and `escalated` now, when it is decided, then
    /// hands the one-line message to the notifier, which runs `escalate_command` with it as
    /// its last argument when there is room. A failure is recorded, never fatal.
    fn escalate(&mut self, condition: &Condition, store: &mut Recorder) {
        let job = (condition.job != NO_JOB).then_some(condition.job.as_str());
        let opened =
            store.open_episode(&condition.job, condition.kind.as_str(), &condition.message);
        if !opened {
            return;
        }
        let mut event =
            NewEvent::new(Kind::Escalated).reason(format!("kind {}", condition.kind.as_str()));
        if let Some(job) = job {
            event = event.job(job);
        }
        store.append(event);
        store.mark_escalated(&condition.job, condition.kind.as_str());
        if let Some(notifier) = &mut self.notifier {
            notifier.tell(Notice {
                kind: condition.kind,
                job: job.map(str::to_string),
                message: format!("mihari: {}", condition.message),
            });
        }
    }

    /// A notifier run has been reported: its failure recorded, its place given to what
    /// queued behind it.
    fn notified(&mut self, finished: &Finished, store: &mut Recorder) {
        record_escalate_result(store, finished);
        if let Some(notifier) = &mut self.notifier {
            notifier.finished(finished.run);
        }
    }

    /// Jobs that need a restart while the daily cap is spent: `cap-reached` once, and each
    /// new situation (a new claim key) recorded as `skipped`, queued as a suppression.
    fn cap(&mut self, live: &Live, pass: &Pass, store: &mut Recorder, now: DateTime<Utc>) {
        for job in &pass.capped {
            let key = match live.engine.propose(Action::Restart, job, now) {
                Ok(decision) => decision.key().to_string(),
                Err(_) => continue,
            };
            if !self.capped_keys.insert(key.clone()) {
                continue;
            }
            let cap = self.config.settings.restart_daily_cap;
            let already_reached = store
                .store()
                .last_event(Some(job), &[Kind::CapReached, Kind::Started])
                .ok()
                .flatten()
                .is_some_and(|e| e.kind == Kind::CapReached.as_str());
            if !already_reached {
                store.append(
                    NewEvent::new(Kind::CapReached)
                        .job(job)
                        .reason(format!("{cap} automatic restarts in 24 h")),
                );
            }
            store.append(
                NewEvent::new(Kind::Skipped)
                    .job(job)
                    .key(&key)
                    .reason(format!(
                        "automatic restart skipped: the daily cap of {cap} is spent"
                    )),
            );
            store.queue_digest(
                Some(job),
                DigestCategory::Suppressed,
                &format!("restart skipped: the daily cap of {cap} is spent"),
            );
        }
    }

    /// Notes a restart's outcome: queued for the digest, or left for the next pass (a failure
    /// is a broken rule the event log carries).
    fn outcome(&mut self, job: &str, outcome: &Outcome, store: &mut Recorder) {
        self.in_flight.remove(job);
        // Short words of our own for the digest: an outcome's message may name a path.
        let (category, text) = match outcome.result {
            OutcomeKind::Verified => (
                category::MACHINE_RESTART,
                "restarted by the machine; the new process holds the lock",
            ),
            OutcomeKind::Suppressed => {
                // Another restart in the workspace won the cooldown a moment ago: look again
                // in a while, not on the very next pass.
                self.cooling
                    .insert(job.to_string(), Utc::now() + chrono::Duration::seconds(10));
                (
                    category::SUPPRESSED,
                    "automatic restart suppressed by the workspace cooldown",
                )
            }
            OutcomeKind::Duplicate => {
                // The same situation was claimed already: asking again at once would only
                // record more duplicates until something changes.
                self.cooling
                    .insert(job.to_string(), Utc::now() + chrono::Duration::seconds(10));
                (
                    category::SUPPRESSED,
                    "automatic restart already claimed elsewhere (duplicate)",
                )
            }
            OutcomeKind::Refused => {
                if let Some(condition) = self.brain.cannot_restart(job, &outcome.message) {
                    self.escalate(&condition, store);
                }
                return;
            }
            _ => (
                category::MACHINE_RESTART,
                "automatic restart failed (see mihari events)",
            ),
        };
        let category = DigestCategory::parse(category).unwrap_or(DigestCategory::Other);
        store.queue_digest(Some(job), category, text);
        self.tell_store(store);
    }

    /// Escalates, at once, an outage of the store's writes that began since the last look:
    /// through the usual path, once per episode (the next passes carry its rule).
    fn tell_store(&mut self, store: &mut Recorder) {
        if let Some(rule) = store.take_untold()
            && let Some(condition) = self.brain.rule_broken(&rule)
        {
            self.escalate(&condition, store);
        }
    }

    /// The next moment the watcher itself must act: a backoff ending, the digest's cut, or
    /// trying the store again while it takes no write.
    fn deadline(&self, pass_waits: &[(String, DateTime<Utc>)], store: &Recorder) -> DateTime<Utc> {
        pass_waits
            .iter()
            .map(|(_, at)| *at)
            .chain(std::iter::once(self.next_cut))
            .chain(store.retry_at())
            .min()
            .unwrap_or(self.next_cut)
    }
}

/// The broken rules that belong to no job the watcher escalates: its own writes failing, a
/// store its engine cannot read, and a save of the jobs file that was refused (the last good
/// file stays in force until it is fixed).
fn store_rules(live: &Live, snapshot: &Snapshot, store: &Recorder) -> Vec<String> {
    store
        .rule()
        .into_iter()
        .chain(
            snapshot
                .store_fault
                .iter()
                .map(|fault| format!("the state store cannot be read: {fault}")),
        )
        .chain(live.engine.config_refusal().map(|(_, rule)| rule.clone()))
        .chain(live.engine.textfile_refusal().cloned())
        .collect()
}

/// Records a failed `escalate_command` run (a success needs no record: `escalated` is
/// already there): for its one escalation, or once for those it told together.
fn record_escalate_result(store: &mut Recorder, finished: &Finished) {
    let Err(error) = &finished.result else {
        return;
    };
    let event = match finished.notices.as_slice() {
        [one] => {
            let event = NewEvent::new(Kind::Escalated).reason(format!(
                "escalate_command failed ({}): {error}",
                one.kind.as_str()
            ));
            match &one.job {
                Some(job) => event.job(job),
                None => event,
            }
        }
        [] => NewEvent::new(Kind::Escalated).reason(format!("escalate_command failed: {error}")),
        many => NewEvent::new(Kind::Escalated).reason(format!(
            "escalate_command failed for {} escalations told together: {error}",
            many.len()
        )),
    };
    store.append(event);
}

/// A notifier for the jobs file's `escalate_command`, reporting through `report`.
fn notifier_for(
    config: &Config,
    report: impl Fn(Finished) + Send + Sync + 'static,
) -> Option<Notifier> {
    let command = config.settings.escalate_command.clone()?;
    Some(Notifier::new(command, report))
}

/// What reaches the long-running watcher.
enum Input {
    Trigger(Trigger),
    Checks(CheckResultFor),
    Restarted(String, Outcome),
    /// What an `escalate_command` run came to.
    Notified(Finished),
    /// SIGHUP: load the jobs file again.
    Reload,
    Stop,
}

async fn watch_forever(
    config: Config,
    store: &mut Recorder,
    lock: &watch_lock::WatchLock,
) -> Result<(), String> {
    let (sender, mut inbox) = mpsc::unbounded_channel::<Input>();
    {
        use tokio::signal::unix::SignalKind;
        let sender = sender.clone();
        crate::engine::live::on_signals(
            &[SignalKind::terminate(), SignalKind::interrupt()],
            move || {
                let _ = sender.send(Input::Stop);
            },
        );
    }
    // SIGHUP reloads the jobs file, as daemons do (systemd's ExecReload sends it); every one
    // is heard, not only the first.
    if let Ok(mut stream) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        let sender = sender.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if sender.send(Input::Reload).is_err() {
                    break;
                }
            }
        });
    }
    let trigger_sender = sender.clone();
    let mut live = Live::new(
        config.clone(),
        Arc::new(move |trigger| {
            let _ = trigger_sender.send(Input::Trigger(trigger));
        }),
    )?;
    let now = Utc::now();
    let mut watcher = Watcher::new(config.clone(), store.store(), now)
        .map_err(|error| crate::engine::store_error_words(&config.settings.state_dir, &error))?;
    let notified = sender.clone();
    watcher.notifier = notifier_for(&config, move |finished| {
        let _ = notified.send(Input::Notified(finished));
    });
    let mut snapshot = live.start(now);
    start_checks(&mut live, &sender, now);
    let mut waits: Vec<(String, DateTime<Utc>)> = Vec::new();
    let mut told_unwatched: BTreeSet<std::path::PathBuf> = BTreeSet::new();
    let mut textfile = config
        .settings
        .prometheus_textfile
        .as_deref()
        .map(Textfile::new);
    // When this loop last recorded a pass; `None` until the first.
    let mut beaten: Option<std::time::Instant> = None;
    let beat_every = std::time::Duration::from_secs(PASS_BEAT_SEC.unsigned_abs());
    // File events make at most ten passes a second; a holder's exit one at once.
    let mut pace = Pace::new();
    // A pass follows anything new: a snapshot, a deadline, an outcome. A turn of the loop for
    // the beat alone (or the file event of its own beat) passes only when the wall clock
    // moved other than time did, which the digest's cut must hear of: on 10,000 jobs a pass
    // costs some 20 ms. Every job is judged again at least every JUDGED_AT_LEAST_EVERY, for
    // what time alone changes that no deadline names.
    let mut pass_due = true;
    let mut passed = (std::time::Instant::now(), Utc::now());
    loop {
        let now = Utc::now();
        let turned = std::time::Instant::now();
        let mut decisions = Vec::new();
        if pass_due || clock_moved(passed, now) {
            (decisions, waits) = watcher.pass(&live, &snapshot, store, now);
            passed = (turned, now);
        }
        // Recorded at most every half beat (each is a file event for every reader), and at
        // least every beat: the deadline below wakes the loop for it.
        if beaten.is_none_or(|at| at.elapsed() >= beat_every / 2) {
            if let Err(error) = lock.beat() {
                eprintln!(
                    "mihari watch: cannot record a pass on the watch lock ({error}); check \
                     will call this watcher stuck"
                );
            }
            beaten = Some(std::time::Instant::now());
        }
        if let Some(textfile) = &mut textfile {
            let _ = textfile.offer(prometheus::exposition(
                &snapshot,
                &live.engine.config().jobs,
                prometheus::Writer::Watcher { at: now },
            ));
        }
        for decision in decisions {
            let config = live.engine.config().clone();
            let sender = sender.clone();
            tokio::task::spawn_blocking(move || {
                let outcome = crate::engine::decide::execute(&decision, &config, Actor::Watcher);
                let _ = sender.send(Input::Restarted(decision.job().to_string(), outcome));
            });
        }
        for (folder, error) in &live.unwatched {
            if told_unwatched.insert(folder.clone()) {
                eprintln!(
                    "mihari watch: cannot watch '{}' ({error}); its changes are seen at the next deadline",
                    folder.display()
                );
            }
        }

        let engine_deadline = live.deadline(&snapshot, now);
        let work_due = watcher
            .deadline(&waits, store)
            .min(passed.1 + JUDGED_AT_LEAST_EVERY);
        let mut own = work_due;
        if let Some(textfile) = &textfile {
            let wait = textfile
                .due()
                .saturating_duration_since(std::time::Instant::now());
            own = own.min(now + chrono::Duration::from_std(wait).unwrap_or_default());
        }
        let beat_due = beaten.map_or(std::time::Duration::ZERO, |at| {
            beat_every.saturating_sub(at.elapsed())
        });
        own = own.min(now + chrono::Duration::from_std(beat_due).unwrap_or_default());
        let deadline = engine_deadline.map_or(own, |at| at.min(own));
        let batch = pace
            .next_batch(
                &mut inbox,
                Some(deadline),
                |i| matches!(i, Input::Trigger(trigger) if trigger.can_wait()),
                |i| matches!(i, Input::Trigger(trigger) if trigger.may_space()),
            )
            .await;
        let mut arrivals = Arrivals::holding_growth(pace.holds_growth());
        let (mut restarted, mut notified) = (false, false);
        for input in batch {
            match input {
                Input::Stop => {
                    // The last version says that nothing watches now, so an alert need not
                    // wait for the file to go stale.
                    if let Some(textfile) = &mut textfile {
                        let _ = textfile.write(&prometheus::exposition(
                            &snapshot,
                            &live.engine.config().jobs,
                            prometheus::Writer::WatcherStopping,
                        ));
                    }
                    // Notifiers end with the watcher: none is left behind to run unwatched.
                    let ended = watcher.notifier.as_mut().map_or(0, Notifier::stop);
                    if ended > 0 {
                        eprintln!(
                            "mihari watch: stopped {ended} escalate_command run(s) still going"
                        );
                    }
                    return Ok(());
                }
                // File events that came with a death wait for the next paced pass.
                Input::Trigger(trigger) if pace.came_early() && trigger.can_wait() => {
                    let _ = sender.send(Input::Trigger(trigger));
                }
                Input::Trigger(trigger) => live.note(&mut arrivals, trigger),
                Input::Reload => arrivals.reload(),
                Input::Checks(result) => live.note_check(&mut arrivals, result),
                Input::Restarted(job, outcome) => {
                    watcher.outcome(&job, &outcome, store);
                    restarted = true;
                }
                Input::Notified(finished) => {
                    watcher.notified(&finished, store);
                    watcher.tell_store(store);
                    notified = true;
                }
            }
        }
        let now = Utc::now();
        // The beat and the textfile's minute wake the loop with nothing to judge again.
        let reached = engine_deadline.is_some_and(|at| at <= now) || work_due <= now || restarted;
        live.absorb_beat(&mut arrivals, Some(&mut snapshot), now);
        pace.weigh(&arrivals, reached);
        let applied = live.apply(arrivals, reached, now);
        pass_due = applied.is_some() || reached || notified;
        pace.gathered_storm(live.gathered_storm());
        if let Some(fresh) = applied {
            snapshot = fresh;
        } else if reached {
            snapshot = live.engine.reassess(now);
        }
        for reload in live.take_reloads() {
            let config = live.engine.config();
            store.append(reload.event(config.jobs.len()));
            match &reload {
                Reload::Loaded(_) => {
                    watcher.reload(config.clone());
                    let notified = sender.clone();
                    watcher.notifier = notifier_for(config, move |finished| {
                        let _ = notified.send(Input::Notified(finished));
                    });
                }
                Reload::Refused(error) => {
                    eprintln!(
                        "mihari watch: {}; still watching the last good file",
                        error.to_string().lines().next().unwrap_or_default()
                    );
                }
            }
        }
        start_checks(&mut live, &sender, now);
    }
}

/// The longest the watcher goes without judging every job again and passing, when no file
/// changes and no deadline comes.
const JUDGED_AT_LEAST_EVERY: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// Whether the wall clock moved other than time did since the pass at `passed` (a monotonic
/// instant and the wall clock read with it).
fn clock_moved(passed: (std::time::Instant, DateTime<Utc>), now: DateTime<Utc>) -> bool {
    crate::core::watch::clock_moved(now - passed.1, passed.0.elapsed())
}

fn start_checks(live: &mut Live, sender: &mpsc::UnboundedSender<Input>, now: DateTime<Utc>) {
    for check in live.take_due_checks(now) {
        let sender = sender.clone();
        tokio::task::spawn_blocking(move || {
            let _ = sender.send(Input::Checks(check.run()));
        });
    }
}

/// One pass for cron or a systemd timer: gather, run every check, act, record the pass
/// (with its interval, so a missing pass can be noticed), and exit with `check`'s code.
fn one_pass(config: Config, store: &mut Recorder, interval_sec: u64) -> ExitCode {
    let mut live = match Live::new(config.clone(), Arc::new(|_| {})) {
        Ok(live) => live,
        Err(error) => {
            eprintln!("mihari watch --once: {error}");
            return ExitCode::from(3);
        }
    };
    live.engine.run_checks(None);
    let now = Utc::now();
    let snapshot = live.start(now);
    let mut watcher = match Watcher::new(config.clone(), store.store(), now) {
        Ok(watcher) => watcher,
        Err(error) => {
            let words = crate::engine::store_error_words(&config.settings.state_dir, &error);
            eprintln!("mihari watch --once: {words}");
            return ExitCode::from(3);
        }
    };
    let (report, reports) = std::sync::mpsc::channel();
    watcher.notifier = notifier_for(&config, move |finished| {
        let _ = report.send(finished);
    });
    let (decisions, _) = watcher.pass(&live, &snapshot, store, now);
    for decision in decisions {
        let outcome = crate::engine::decide::execute(&decision, &config, Actor::Watcher);
        println!("{}", crate::core::text::inert(&outcome.message));
        watcher.outcome(decision.job(), &outcome, store);
    }
    // The pass tells what it found before it exits: each run ends within its timeout, and
    // what queued behind the first ones goes out together in one more.
    while watcher.notifier.as_ref().is_some_and(|n| !n.is_idle()) {
        match reports.recv_timeout(crate::effect::notify::TIMEOUT * 2) {
            Ok(finished) => watcher.notified(&finished, store),
            Err(_) => break,
        }
    }
    store.append(NewEvent::new(Kind::WatcherPass).reason(format!(
        "once, interval {interval_sec} s, pid {}",
        std::process::id()
    )));
    let now = Utc::now();
    let after = live.engine.refresh(None, now);
    if let Some(path) = &config.settings.prometheus_textfile {
        let _ = Textfile::new(path).write(&prometheus::exposition(
            &after,
            &config.jobs,
            prometheus::Writer::Watcher { at: now },
        ));
    }
    let mut out = std::io::stdout().lock();
    let _ = crate::render::render_table(&after, &mut out);
    ExitCode::from(status_code(&after))
}
