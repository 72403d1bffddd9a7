//! The dashboard: a live, keyboard-driven triage screen.
//!
//! This module owns the runtime around the Elm-style core in [`model`] and [`view`]: it sets
//! up and always restores the terminal, turns terminal input, file-change notifications,
//! holder exits, check results and the one deadline timer into messages, asks the engine for
//! snapshots, carries out the commands `update` returns, and draws only when the model says
//! something changed. Nothing here judges a job or acts on one. A quiet dashboard sleeps:
//! there is no polling loop, only events and a timer set for the next moment anything on the
//! screen can change by time alone.

pub mod layout;
pub mod model;
pub mod terminal;
pub mod theme;
pub mod view;

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use crossterm::event::Event;
use tokio::sync::mpsc;

use crate::config::Config;
use crate::effect;
use crate::engine::triggers::{Trigger, Triggers};
use crate::engine::{Action, CheckResultFor, Engine};
use crate::probe::tail::tail_lines;
use crate::store::{Actor, EventFilter};
use model::{Command, Model, Msg, TAIL_LINES, update};
use theme::Theme;
use view::view;

/// How long the runtime waits for more file events after the first, so a burst of writes
/// becomes one gather. Small against the 100 ms a state change may take to reach the screen.
const COALESCE: StdDuration = StdDuration::from_millis(15);
/// How many events the events view reads.
const EVENTS_SHOWN: usize = 500;
/// How often holders that cannot be waited on through a pidfd are looked at again.
const HOLDER_POLL: chrono::Duration = chrono::Duration::seconds(5);

/// What reaches the runtime.
enum Input {
    Outcome(String),
    Terminal(Event),
    TerminalGone(String),
    Trigger(Trigger),
    Checks(CheckResultFor),
    Signal,
}

/// Loads the jobs file and runs the dashboard until the operator quits.
pub fn run(config_path: Option<&Path>) -> ExitCode {
    let config = match crate::cli::load_config(config_path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    run_with(config)
}

/// Runs the dashboard on an already loaded jobs file.
pub fn run_with(config: Config) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mihari: cannot start the dashboard's runtime: {error}");
            return ExitCode::from(3);
        }
    };
    let mut screen = match terminal::Screen::enter() {
        Ok(screen) => screen,
        Err(error) => {
            eprintln!("mihari: cannot open the dashboard on this terminal: {error}");
            return ExitCode::from(3);
        }
    };
    let result = runtime.block_on(event_loop(config, &mut screen));
    drop(screen);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mihari: the dashboard stopped: {error}");
            ExitCode::from(3)
        }
    }
}

async fn event_loop(config: Config, screen: &mut terminal::Screen) -> Result<(), String> {
    let (sender, mut inbox) = mpsc::unbounded_channel::<Input>();
    terminal::spawn_reader({
        let sender = sender.clone();
        move |event| match event {
            Ok(event) => sender.send(Input::Terminal(event)).is_ok(),
            Err(error) => {
                let _ = sender.send(Input::TerminalGone(error.to_string()));
                false
            }
        }
    });
    spawn_signal_listener(sender.clone());
    let trigger_sender = sender.clone();
    let mut triggers = Triggers::new(Arc::new(move |trigger| {
        let _ = trigger_sender.send(Input::Trigger(trigger));
    }))?;

    let jobs = config.jobs.clone();
    let source = config.source.clone();
    let mut engine = Engine::new(config);
    let (width, height) = screen.size().map_err(|e| e.to_string())?;
    let mut model = Model::new(jobs, source, Theme::from_env(), Utc::now());
    update(&mut model, Msg::Resize(width, height));

    let mut snapshot = engine.snapshot(Utc::now());
    let store_paths: HashSet<std::path::PathBuf> = engine.store_paths().into_iter().collect();
    let mut unpolled = follow(&mut triggers, &engine, &mut model);
    start_due_checks(&mut engine, &sender, Utc::now());
    let mut commands = vec![update(&mut model, Msg::Snapshot(snapshot.clone()))];
    let mut next_holder_poll: Option<DateTime<Utc>> = None;

    loop {
        let pending: Vec<Command> = commands.drain(..).flatten().collect();
        for command in pending {
            match command {
                Command::Quit => return Ok(()),
                Command::LoadTail { job, path } => {
                    let lines = tail_lines(&path, TAIL_LINES);
                    if let Some(next) = update(&mut model, Msg::Tail { job, lines }) {
                        commands.push(Some(next));
                    }
                }
                Command::Refresh => {
                    snapshot = engine.refresh(None, Utc::now());
                    unpolled = follow(&mut triggers, &engine, &mut model);
                    commands.push(update(&mut model, Msg::Snapshot(snapshot.clone())));
                }
                Command::Propose { action, job } => {
                    let proposed = engine.propose(action, &job, Utc::now()).map_err(|why| {
                        let verb = match action {
                            Action::Restart => "restart",
                            Action::Release => "release",
                            Action::Approve => "approve",
                            Action::Deny => "deny",
                        };
                        effect::refuse(&job, verb, &why, engine.config(), Actor::Operator).message
                    });
                    commands.push(update(&mut model, Msg::Proposed(proposed)));
                }
                Command::Execute(decision) => {
                    // Up to the grace period for a restart: never on the event loop.
                    let config = engine.config().clone();
                    let sender = sender.clone();
                    tokio::task::spawn_blocking(move || {
                        let outcome = effect::execute(&decision, &config, Actor::Operator);
                        let _ = sender.send(Input::Outcome(outcome.message));
                    });
                }
                Command::Decline(decision) => {
                    let outcome = effect::decline(&decision, engine.config(), Actor::Operator);
                    commands.push(update(&mut model, Msg::Outcome(outcome.message)));
                }
                Command::LoadEvents { job } => {
                    let rows = engine.events(&EventFilter {
                        job: job.clone(),
                        last: Some(EVENTS_SHOWN),
                        ..EventFilter::default()
                    });
                    commands.push(update(&mut model, Msg::Events { job, rows }));
                }
            }
        }
        if !commands.is_empty() {
            continue;
        }
        if model.quit {
            return Ok(());
        }
        if model.dirty {
            screen
                .draw(|frame| view(&model, frame))
                .map_err(|e| e.to_string())?;
            model.dirty = false;
        }

        if !unpolled.is_empty() && next_holder_poll.is_none() {
            next_holder_poll = Some(Utc::now() + HOLDER_POLL);
        }
        let engine_deadline = engine.next_deadline(&snapshot);
        let deadline = [engine_deadline, Some(model.next_tick()), next_holder_poll]
            .into_iter()
            .flatten()
            .min();
        let sleep = deadline
            .map(|at| (at - Utc::now()).to_std().unwrap_or(StdDuration::ZERO))
            .unwrap_or(StdDuration::from_secs(3600));

        let first = tokio::select! {
            input = inbox.recv() => input,
            () = tokio::time::sleep(sleep) => None,
        };
        // A display tick only redraws ages; a verdict is judged again only when one of the
        // engine's own deadlines (a stall, a check) has come.
        let timer_fired = first.is_none() && engine_deadline.is_some_and(|at| at <= Utc::now());
        let mut batch: Vec<Input> = first.into_iter().collect();
        if batch.iter().any(|i| matches!(i, Input::Trigger(_))) {
            tokio::time::sleep(COALESCE).await;
        }
        while let Ok(more) = inbox.try_recv() {
            batch.push(more);
        }

        let mut touched: HashSet<String> = HashSet::new();
        let mut store_changed = false;
        let mut everything = false;
        let mut unknown_paths = false;
        let mut checks_done = Vec::new();
        for input in batch {
            match input {
                Input::Terminal(event) => {
                    let msg = match event {
                        Event::Key(key) => Some(Msg::Key(key)),
                        Event::Mouse(mouse) => Some(Msg::Mouse(mouse)),
                        Event::Resize(w, h) => Some(Msg::Resize(w, h)),
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
                Input::Signal => return Ok(()),
                Input::Trigger(Trigger::Changed(path)) if store_paths.contains(&path) => {
                    store_changed = true;
                }
                Input::Trigger(Trigger::Changed(path)) => {
                    let jobs = engine.jobs_touching(&path);
                    // A folder that appeared or went away may be where a job's files live:
                    // point the watches again. Files of no job that still exist need nothing.
                    if jobs.is_empty() && (path.is_dir() || !path.exists()) {
                        unknown_paths = true;
                    }
                    touched.extend(jobs);
                }
                Input::Trigger(Trigger::Rescan) => everything = true,
                Input::Trigger(Trigger::HolderExited { pid, .. }) => {
                    touched.extend(engine.jobs_held_by(pid));
                }
                Input::Checks(result) => checks_done.push(result),
            }
        }

        let now = Utc::now();
        if next_holder_poll.is_some_and(|at| at <= now) {
            next_holder_poll = None;
            for (pid, _) in &unpolled {
                touched.extend(engine.jobs_held_by(*pid));
            }
        }
        let regather = everything || !touched.is_empty();
        let checked = !checks_done.is_empty();
        if checked {
            engine.record_checks(checks_done);
        }
        if unknown_paths {
            // A folder a job's file will live in may have appeared: watch it.
            unpolled = follow(&mut triggers, &engine, &mut model);
        }
        if store_changed {
            // A heartbeat, an approval or a decision: news for every job, and for the
            // events view.
            snapshot = engine.refresh_store(now);
            if let Some(view) = &model.events {
                commands.push(Some(Command::LoadEvents {
                    job: view.job.clone(),
                }));
            }
        }
        if regather {
            snapshot = engine.refresh((!everything).then_some(&touched), now);
            unpolled = follow(&mut triggers, &engine, &mut model);
        } else if timer_fired || checked {
            // Time alone (a stall deadline) or a check result: judge again, read nothing.
            snapshot = engine.reassess(now);
        }
        start_due_checks(&mut engine, &sender, now);
        if regather || timer_fired || checked || store_changed {
            commands.push(update(&mut model, Msg::Snapshot(snapshot.clone())));
        }
        commands.push(update(&mut model, Msg::Tick(now)));
    }
}

/// Points the triggers at the current files and holders; reports folders that cannot be
/// watched on the status line. Returns the holders that need a slow poll instead.
fn follow(triggers: &mut Triggers, engine: &Engine, model: &mut Model) -> Vec<(u32, u64)> {
    let mut paths = engine.watched_paths();
    paths.extend(engine.store_paths());
    let failed = triggers.watch_paths(&paths);
    if let Some((folder, error)) = failed.first() {
        update(
            model,
            Msg::Status(format!(
                "cannot watch '{}' ({error}): its changes show at the next deadline or R",
                folder.display()
            )),
        );
    }
    triggers.watch_holders(&engine.live_holders())
}

/// Runs every due check that is not already running on the blocking pool; each result comes
/// back as a message.
fn start_due_checks(
    engine: &mut Engine,
    sender: &mpsc::UnboundedSender<Input>,
    now: DateTime<Utc>,
) {
    for check in engine.take_due_checks(now) {
        let sender = sender.clone();
        tokio::task::spawn_blocking(move || {
            let _ = sender.send(Input::Checks(check.run()));
        });
    }
}

/// SIGTERM, SIGHUP and SIGINT end the dashboard cleanly, restoring the terminal.
fn spawn_signal_listener(sender: mpsc::UnboundedSender<Input>) {
    use tokio::signal::unix::{SignalKind, signal};
    for kind in [
        SignalKind::terminate(),
        SignalKind::hangup(),
        SignalKind::interrupt(),
    ] {
        if let Ok(mut stream) = signal(kind) {
            let sender = sender.clone();
            tokio::spawn(async move {
                if stream.recv().await.is_some() {
                    let _ = sender.send(Input::Signal);
                }
            });
        }
    }
}
