//! The dashboard: a live, keyboard-driven triage screen.
//!
//! This module owns the runtime around the Elm-style core in [`model`] and [`view`]: it sets
//! up and always restores the terminal, turns terminal input, file-change notifications,
//! holder exits, check results and the one deadline timer into messages, asks the engine for
//! snapshots, carries out the commands `update` returns, and draws only when the model says
//! something changed. Nothing here judges a job or acts on one. A quiet dashboard sleeps:
//! there is no polling loop, only events and a timer set for the next moment anything on the
//! screen can change by time alone.

pub mod chooser;
pub mod dialog;
pub mod layout;
pub mod model;
pub mod terminal;
pub mod theme;
pub mod view;

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use crossterm::event::Event;
use tokio::sync::mpsc;

use crate::config::Config;
use crate::core::auto::auto_restart;
use crate::core::escalate::{Condition, EscalationKind, conditions};
use crate::engine::EventFilter;
use crate::engine::decide::{self, Answer, Asker, Request};
use crate::engine::live::{Arrivals, Live, Pace, Reload};
use crate::engine::triggers::Trigger;
use crate::engine::{Action, CheckResultFor};
use crate::probe::tail::log_tail;
use model::{Command, Model, Msg, TAIL_LINES, update};
use theme::Theme;
use view::view;

/// The file in the state directory that keeps what the operator last saw.
const LOOKED_FILE: &str = "dashboard-looked.json";

/// What the operator last saw, as the last dashboard kept it; `None` when none did (or the
/// file cannot be read: then nothing is marked, rather than everything).
fn load_looked(path: &std::path::Path) -> Option<model::Looked> {
    let text = std::fs::read_to_string(path).ok()?;
    model::Looked::from_json(&text)
}

/// Keeps `looked` in the state directory (written aside, then renamed: a reader never sees
/// half of it). A failure only costs the marks of the next start.
fn save_looked(path: &std::path::Path, looked: &model::Looked) {
    let aside = path.with_extension("json.new");
    if std::fs::write(&aside, looked.to_json()).is_ok() {
        let _ = std::fs::rename(&aside, path);
    }
}

/// Keeps what the operator saw at their last key, when they pressed one.
fn save_seen(path: &std::path::Path, model: &Model) {
    if let Some(seen) = &model.seen {
        save_looked(path, seen);
    }
}

/// How many events the events view reads.
const EVENTS_SHOWN: usize = 500;

/// What reaches the runtime.
enum Input {
    Outcome(String),
    Terminal(Event),
    TerminalGone(String),
    Trigger(Trigger),
    Checks(CheckResultFor),
    Signal,
}

/// Runs the dashboard on an already loaded jobs file.
pub fn run_with(config: Config) -> ExitCode {
    run_greeted(config, None)
}

/// Runs the dashboard with `greeting` on its status line until the first key: the demo says
/// there whether a watcher runs in its sandbox.
pub fn run_greeted(config: Config, greeting: Option<String>) -> ExitCode {
    terminal::run_full_screen("the dashboard", move |screen| {
        Box::pin(event_loop(config, greeting, screen))
    })
}

async fn event_loop(
    config: Config,
    greeting: Option<String>,
    screen: &mut terminal::Screen,
) -> Result<(), String> {
    let (sender, mut inbox) = mpsc::unbounded_channel::<Input>();
    terminal::listen(&sender, Input::Terminal, Input::TerminalGone, || {
        Input::Signal
    });
    let trigger_sender = sender.clone();
    let jobs = config.jobs.clone();
    let source = config.source.clone();
    let mut live = Live::new(
        config,
        Arc::new(move |trigger| {
            let _ = trigger_sender.send(Input::Trigger(trigger));
        }),
    )?;
    let (width, height) = screen.size().map_err(|e| e.to_string())?;
    let mut model = Model::new(jobs, source, Theme::from_env(), Utc::now());
    model.zone = crate::probe::zone::Zone::machine();
    update(&mut model, Msg::Resize(width, height));
    if let Some(greeting) = greeting {
        update(&mut model, Msg::Status(greeting));
    }

    // The first screen is drawn from the first gather, before the watches and holder waits
    // are set up (for a farm of thousands of jobs they take as long again); `settle` then
    // gathers once more with them in place, so nothing that changed meanwhile is missed.
    let first = live.first_look(Utc::now());
    let mut commands = vec![update(&mut model, Msg::Snapshot(first))];
    let looked_file = live.engine.config().settings.state_dir.join(LOOKED_FILE);
    commands.push(update(&mut model, Msg::Looked(load_looked(&looked_file))));
    let mut settled = false;
    let mut told: BTreeSet<(String, EscalationKind)> = BTreeSet::new();
    // Loads of the jobs file not yet recorded in the event log.
    let mut unrecorded: Vec<Reload> = Vec::new();
    // File events redraw at most ten times a second; keys and deaths at once.
    let mut pace = Pace::new();

    loop {
        let pending: Vec<Command> = commands.drain(..).flatten().collect();
        for command in pending {
            match command {
                Command::SaveLooked(looked) => save_looked(&looked_file, &looked),
                Command::Quit => {
                    save_seen(&looked_file, &model);
                    // A save seen in the same moment as the quit is still recorded.
                    for reload in unrecorded.drain(..) {
                        live.record_reload(&reload);
                    }
                    return Ok(());
                }
                Command::LoadTail { job, path } => {
                    let (lines, earlier) = log_tail(&path, TAIL_LINES);
                    commands.push(update(
                        &mut model,
                        Msg::Tail {
                            job,
                            lines,
                            earlier,
                        },
                    ));
                }
                Command::LoadLog { job, path } => {
                    let (lines, earlier) = log_tail(&path, model::LOG_LINES);
                    commands.push(update(
                        &mut model,
                        Msg::Log {
                            job,
                            lines,
                            earlier,
                        },
                    ));
                }
                Command::Pager { path } => {
                    let said = screen.hand_over(|| terminal::page(&path));
                    let (width, height) = screen.size().map_err(|e| e.to_string())?;
                    commands.push(update(&mut model, Msg::Resize(width, height)));
                    if let Err(error) = said {
                        commands.push(update(&mut model, Msg::Status(error)));
                    }
                }
                Command::Refresh => {
                    let mut arrivals = Arrivals::default();
                    live.note(&mut arrivals, Trigger::Rescan);
                    if let Some(fresh) = live.apply(arrivals, false, Utc::now()) {
                        commands.push(update(&mut model, Msg::Snapshot(fresh)));
                    }
                }
                Command::Propose { action, job } => {
                    let request = Request::Job {
                        action,
                        job: &job,
                        reason: None,
                    };
                    let proposed = propose(&live, request);
                    commands.push(update(&mut model, Msg::Proposed(proposed)));
                }
                Command::ProposeApproval { job, key } => {
                    let request = Request::Pending {
                        action: Action::Approve,
                        job: &job,
                        key: &key,
                    };
                    let proposed = propose(&live, request);
                    commands.push(update(&mut model, Msg::Proposed(proposed)));
                }
                Command::ProposeMarker { job, path } => {
                    let request = Request::Marker {
                        job: &job,
                        path: Some(&path),
                        first_stale: false,
                    };
                    let proposed = propose(&live, request);
                    commands.push(update(&mut model, Msg::Proposed(proposed)));
                }
                Command::Execute(decision) => {
                    // Up to the grace period for a restart: never on the event loop.
                    let config = live.engine.config().clone();
                    let sender = sender.clone();
                    tokio::task::spawn_blocking(move || {
                        let outcome =
                            decide::answer(&decision, Answer::Confirmed, Asker::Operator, &config);
                        let _ = sender.send(Input::Outcome(outcome.message));
                    });
                }
                Command::Decline(decision) => {
                    let config = live.engine.config();
                    let outcome =
                        decide::answer(&decision, Answer::Declined, Asker::Operator, config);
                    commands.push(update(&mut model, Msg::Outcome(outcome.message)));
                }
                Command::LoadEvents { job } => {
                    let rows = live.engine.events(&EventFilter {
                        job: job.clone(),
                        last: Some(EVENTS_SHOWN),
                        ..EventFilter::default()
                    });
                    commands.push(update(&mut model, Msg::Events { job, rows }));
                }
                Command::LoadDigest => {
                    let digest = load_digest(&live);
                    commands.push(update(&mut model, Msg::Digest(digest)));
                }
                Command::MarkDigestRead(id) => {
                    let outcome = mark_digest_read(&live, id);
                    commands.push(update(&mut model, Msg::Outcome(outcome)));
                    commands.push(Some(Command::LoadDigest));
                }
                Command::Bell => screen.bell(),
            }
        }
        if !commands.is_empty() {
            continue;
        }
        if model.quit {
            save_seen(&looked_file, &model);
            for reload in unrecorded.drain(..) {
                live.record_reload(&reload);
            }
            return Ok(());
        }
        if model.dirty {
            screen
                .draw(|frame| view(&model, frame))
                .map_err(|e| e.to_string())?;
            model.drawn();
        }
        // Recorded once the new screen is out: the store's write (and its fsync) is not
        // between a save of the jobs file and the screen that shows it.
        for reload in unrecorded.drain(..) {
            live.record_reload(&reload);
        }
        if !settled {
            settled = true;
            model.snapshot = None;
            let fresh = live.settle(Utc::now());
            report_unwatched(&live, &mut model);
            start_due_checks(&mut live, &sender, Utc::now());
            commands.push(update(&mut model, Msg::Snapshot(fresh)));
            continue;
        }

        let engine_deadline = model
            .snapshot
            .as_ref()
            .and_then(|snapshot| live.deadline(snapshot, Utc::now()));
        let deadline = [engine_deadline, Some(model.next_tick())]
            .into_iter()
            .flatten()
            .min();
        let batch = pace
            .next_batch(
                &mut inbox,
                deadline,
                |i| matches!(i, Input::Trigger(trigger) if trigger.can_wait()),
                |i| matches!(i, Input::Trigger(trigger) if trigger.may_space()),
            )
            .await;

        let mut arrivals = Arrivals::holding_growth(pace.holds_growth());
        for input in batch {
            match input {
                Input::Terminal(event) => {
                    let msg = match event {
                        Event::Key(key) => Some(Msg::Key(key)),
                        Event::Mouse(mouse) => Some(Msg::Mouse(mouse)),
                        Event::Resize(w, h) => Some(Msg::Resize(w, h)),
                        Event::FocusGained => Some(Msg::Focus(true)),
                        Event::FocusLost => Some(Msg::Focus(false)),
                        _ => None,
                    };
                    if let Some(msg) = msg {
                        commands.push(update(&mut model, msg));
                    }
                }
                Input::Outcome(message) => {
                    commands.push(update(&mut model, Msg::Outcome(message)));
                }
                Input::TerminalGone(error) => {
                    return Err(format!("the terminal went away: {error}"));
                }
                Input::Signal => {
                    save_seen(&looked_file, &model);
                    return Ok(());
                }
                // File events that came with a death wait for the next paced pass.
                Input::Trigger(trigger) if pace.came_early() && trigger.can_wait() => {
                    let _ = sender.send(Input::Trigger(trigger));
                }
                Input::Trigger(trigger) => live.note(&mut arrivals, trigger),
                Input::Checks(result) => live.note_check(&mut arrivals, result),
            }
        }

        let now = Utc::now();
        // A display tick only redraws ages; verdicts are judged again only when one of the
        // engine's own deadlines (a stall, a timeout, a check) has come.
        let reached = engine_deadline.is_some_and(|at| at <= now);
        live.absorb_beat(&mut arrivals, model.snapshot.as_mut(), now);
        pace.weigh(&arrivals, reached);
        // Nothing draws while the next snapshot is made, and one is always made when
        // something arrived or a deadline came: the last one is let go first, so a farm
        // never holds two of them beside the engine's evidence.
        if arrivals.any() || reached {
            model.snapshot = None;
        }
        let applied = live.apply(arrivals, reached, now);
        pace.gathered_storm(live.gathered_storm());
        for reload in live.take_reloads() {
            commands.push(update(&mut model, reload_message(&live, &reload)));
            if matches!(reload, Reload::Loaded(_)) {
                let jobs = live.engine.config().jobs.clone();
                commands.push(update(&mut model, Msg::Jobs(jobs)));
            }
            unrecorded.push(reload);
        }
        if let Some(fresh) = applied {
            report_unwatched(&live, &mut model);
            // Escalations, as the watcher sees them: the bell and the banner, once each.
            let now_holding = escalations(&live, &fresh);
            // The model keeps the one copy: a farm's snapshot is megabytes.
            commands.push(update(&mut model, Msg::Snapshot(fresh)));
            if let Some(view) = &model.events {
                commands.push(Some(Command::LoadEvents {
                    job: view.job.clone(),
                }));
            }
            let fresh_ones: Vec<_> = now_holding
                .iter()
                .filter(|c| !told.contains(&(c.job.clone(), c.kind)))
                .cloned()
                .collect();
            told = now_holding
                .iter()
                .map(|c| (c.job.clone(), c.kind))
                .collect();
            if !fresh_ones.is_empty() {
                commands.push(update(
                    &mut model,
                    Msg::Escalations(now_holding, fresh_ones),
                ));
            } else {
                commands.push(update(
                    &mut model,
                    Msg::Escalations(now_holding, Vec::new()),
                ));
            }
        }
        start_due_checks(&mut live, &sender, now);
        commands.push(update(&mut model, Msg::Tick(now)));
    }
}

/// The engine's proposal for what the operator asked, or why there is none (a refusal is
/// recorded as the operator's), in words for the status line.
fn propose(live: &Live, request: Request) -> Result<crate::core::decision::Decision, String> {
    decide::propose(&live.engine, request, Asker::Operator, Utc::now())
        .map_err(|no| no.words().to_string())
}

/// The status line's words for a load of the jobs file.
fn reload_message(live: &Live, reload: &Reload) -> Msg {
    let jobs = live.engine.config().jobs.len();
    Msg::Status(match reload {
        Reload::Loaded(change) => format!("jobs file loaded again: {}", change.words(jobs)),
        Reload::Refused(error) => crate::core::text::inert(&format!(
            "{error}; still watching the last good file: fix it and save again"
        ))
        .lines()
        .next()
        .unwrap_or_default()
        .to_string(),
    })
}

/// Says on the status line when a folder cannot be watched.
fn report_unwatched(live: &Live, model: &mut Model) {
    if let Some((folder, error)) = live.unwatched.first() {
        update(
            model,
            Msg::Status(format!(
                "cannot watch '{}' ({error}): its changes show at the next deadline or R",
                folder.display()
            )),
        );
    }
}

/// The conditions that warrant interrupting the operator now (SPEC §7), as the watcher
/// judges them.
fn escalations(live: &Live, snapshot: &crate::engine::Snapshot) -> Vec<Condition> {
    let config = live.engine.config();
    let now = snapshot.generated_at;
    // Looked up by id once: a search per job would make every pass quadratic in the jobs.
    let jobs: std::collections::HashMap<&str, &crate::config::JobSpec> =
        config.jobs.iter().map(|j| (j.id.as_str(), j)).collect();
    let rows: std::collections::HashMap<&str, &crate::core::Assessment> =
        snapshot.list.rows().map(|r| (r.id.as_str(), r)).collect();
    let histories: std::collections::HashMap<&str, &crate::core::History> = snapshot
        .evidence
        .iter()
        .map(|(id, seen)| (id.as_str(), &seen.history))
        .collect();
    conditions(
        snapshot.list.rows(),
        &config.jobs,
        |id| {
            let job = *jobs.get(id)?;
            let row = *rows.get(id)?;
            let history = (*histories.get(id)?).clone();
            Some(auto_restart(
                job,
                row,
                &history,
                config.settings.restart_daily_cap,
                now,
            ))
        },
        &snapshot.list.rules,
    )
}

/// The digest view's content: the queue not cut yet, the newest undelivered digest and the
/// digests before it, and each day's decisions and escalations from the event log.
fn load_digest(live: &Live) -> Result<model::DigestView, String> {
    let days = live
        .engine
        .digest_days(&model::DECIDED_KINDS, DIGESTS_SHOWN, EVENTS_SHOWN * 10)?;
    Ok(model::DigestView {
        latest: days.latest,
        previous: days.previous,
        pending: days.pending,
        happened: days.happened,
        scroll: 0,
    })
}

/// How many earlier digests the digest view keeps.
const DIGESTS_SHOWN: usize = 14;

/// Marks digest `id` read: `digest-delivered`.
fn mark_digest_read(live: &Live, id: i64) -> String {
    match live.engine.mark_digest_read(id) {
        Ok(true) => format!("digest {id} marked read (digest-delivered recorded)"),
        Ok(false) => format!("digest {id} was already marked read"),
        Err(error) => format!("digest {id} could not be marked read: {error}"),
    }
}

/// Runs every due check that is not already running on the blocking pool; each result comes
/// back as a message.
fn start_due_checks(live: &mut Live, sender: &mpsc::UnboundedSender<Input>, now: DateTime<Utc>) {
    for check in live.take_due_checks(now) {
        let sender = sender.clone();
        tokio::task::spawn_blocking(move || {
            let _ = sender.send(Input::Checks(check.run()));
        });
    }
}
