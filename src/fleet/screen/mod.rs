//! `mihari fleet`: the fleet screen — one action list over every host, fed by one
//! `check --json --follow` stream per host over the fleet file's ssh.
//!
//! This module owns the runtime around [`model`] and [`view`]: the terminal (the local
//! dashboard's), one thread per host stream ([`super::stream`]), the remote asks (a log
//! tail, a job's events, a confirmed decision) run by the host's own mihari over the same
//! ssh (one shared connection per destination, closed when the screen quits), and the one timer: the moment the quietest host has been silent twice its interval.
//! There is no polling loop: the screen is drawn again when a stream delivers a line, a key
//! arrives, or a host goes silent. Nothing central is made here — no server, no daemon, no
//! port — and nothing here judges a job: each host's mihari does.

pub mod model;
pub mod view;

use std::process::ExitCode;

use chrono::Utc;
use crossterm::event::Event;
use serde_json::Value;
use tokio::sync::mpsc;

use super::remote::{self, NoAnswer};
use super::stream::{self, Handle, Heard, Streams};
use crate::config::{Fleet, Host};
use crate::core::text::inert;
use crate::tui::terminal;
use crate::tui::theme::Theme;
use model::{FleetCommand, FleetModel, FleetMsg, Remote, RemoteDecision, update};

/// How many of a job's newest events the events view asks its host for.
const EVENTS_SHOWN: &str = "200";

enum Input {
    Terminal(Event),
    TerminalGone(String),
    Heard(usize, Heard),
    Msg(FleetMsg),
    Signal,
}

/// Opens the fleet screen on `fleet`'s hosts.
pub fn run(fleet: Fleet) -> ExitCode {
    terminal::run_full_screen("the fleet screen", move |screen| {
        Box::pin(event_loop(fleet, screen))
    })
}

/// Who confirms on this screen and from where, as the hosts' event logs record it.
pub fn origin() -> String {
    let user = std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::geteuid())
                .ok()
                .flatten()
                .map(|u| u.name)
        })
        .unwrap_or_else(|| "?".to_string());
    let mut name = [0u8; 256];
    // SAFETY: the buffer is as long as said, and gethostname writes at most that much.
    let named = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0;
    let here = if named {
        let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
        String::from_utf8_lossy(&name[..end]).into_owned()
    } else {
        "?".to_string()
    };
    format!("{user}@{here}")
}

async fn event_loop(fleet: Fleet, screen: &mut terminal::Screen) -> Result<(), String> {
    let (sender, mut inbox) = mpsc::unbounded_channel::<Input>();
    terminal::listen(&sender, Input::Terminal, Input::TerminalGone, || {
        Input::Signal
    });
    let (width, height) = screen.size().map_err(|e| e.to_string())?;
    let names = fleet.hosts.iter().map(|h| h.name.clone()).collect();
    let mut model = FleetModel::new(names, Theme::from_env(), Utc::now());
    model.zone = crate::probe::zone::Zone::machine();
    update(&mut model, FleetMsg::Resize(width, height));
    model.status = super::share::refusal(&fleet.hosts);
    // Stopped when this goes, by a quit or by a panic: no ssh outlives the screen.
    let streams = Streams(
        fleet
            .hosts
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let sender = sender.clone();
                stream::follow(host.clone(), move |heard| {
                    sender.send(Input::Heard(i, heard)).is_ok()
                })
            })
            .collect(),
    );
    let origin = origin();
    let result = serve(
        &fleet, &origin, &streams.0, &mut model, &mut inbox, &sender, screen,
    )
    .await;
    drop(streams);
    // The shared ssh connections this screen started go with it; one someone else started
    // (a `fleet check` a moment ago) is left to its ControlPersist.
    super::share::close_ours();
    result
}

async fn serve(
    fleet: &Fleet,
    origin: &str,
    handles: &[Handle],
    model: &mut FleetModel,
    inbox: &mut mpsc::UnboundedReceiver<Input>,
    sender: &mpsc::UnboundedSender<Input>,
    screen: &mut terminal::Screen,
) -> Result<(), String> {
    let mut commands: Vec<Option<FleetCommand>> = Vec::new();
    let mut pace = crate::engine::live::Pace::new();
    loop {
        for command in std::mem::take(&mut commands).into_iter().flatten() {
            match command {
                FleetCommand::Quit => return Ok(()),
                FleetCommand::KillStream(i) => {
                    if let Some(handle) = handles.get(i) {
                        handle.kill();
                    }
                }
                FleetCommand::LoadTail { host, job } => {
                    ask(fleet, sender, &host, move |h| load_tail(h, &job));
                }
                FleetCommand::LoadEvents { host, job } => {
                    ask(fleet, sender, &host, move |h| load_events(h, &job));
                }
                FleetCommand::Execute(decision) => {
                    let origin = origin.to_string();
                    let host = decision.host.clone();
                    ask(fleet, sender, &host, move |h| {
                        execute(h, &decision, &origin)
                    });
                }
            }
        }
        if model.quit {
            return Ok(());
        }
        if model.dirty {
            screen
                .draw(|frame| view::view(model, frame))
                .map_err(|e| e.to_string())?;
            model.dirty = false;
        }
        let deadline = model.next_silence();
        let batch = pace.next_batch(inbox, deadline, |_| false, |_| false).await;
        let now = Utc::now();
        for input in batch {
            let msg = match input {
                Input::Terminal(Event::Key(key)) => FleetMsg::Key(key),
                Input::Terminal(Event::Resize(w, h)) => FleetMsg::Resize(w, h),
                Input::Terminal(_) => continue,
                Input::TerminalGone(error) => {
                    return Err(format!("the terminal went away: {error}"));
                }
                Input::Signal => return Ok(()),
                Input::Heard(host, Heard::Line(line)) => FleetMsg::Line {
                    host,
                    line,
                    at: Utc::now(),
                },
                Input::Heard(host, Heard::Ended(why)) => FleetMsg::Ended { host, why },
                Input::Heard(host, Heard::Note(note)) => FleetMsg::Note { host, note },
                Input::Msg(msg) => msg,
            };
            commands.push(update(model, msg));
        }
        // A host silent past twice its interval is RED; its stream is killed and restarted.
        let silent: Vec<usize> = model
            .hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| h.red.is_none() && h.silent_after() <= now)
            .map(|(i, _)| i)
            .collect();
        for host in silent {
            commands.push(update(model, FleetMsg::Silent { host, at: now }));
        }
    }
}

/// Runs `work` against the host named `name` on the blocking pool; its message comes back.
fn ask(
    fleet: &Fleet,
    sender: &mpsc::UnboundedSender<Input>,
    name: &str,
    work: impl FnOnce(&Host) -> FleetMsg + Send + 'static,
) {
    let Some(host) = fleet.hosts.iter().find(|h| h.name == name).cloned() else {
        return;
    };
    let sender = sender.clone();
    tokio::task::spawn_blocking(move || {
        let _ = sender.send(Input::Msg(work(&host)));
    });
}

/// Why a host gave no answer, in the words the screen shows.
fn no_answer(host: &Host, why: NoAnswer) -> String {
    match why {
        NoAnswer::TimedOut(after) => format!(
            "{} did not answer within {} s",
            host.name,
            after.as_secs_f64()
        ),
        NoAnswer::NotStarted(why) => format!("{}: {why}", host.name),
        NoAnswer::CutOff => format!(
            "{}: answer longer than {}: cut off",
            host.name,
            remote::size_words(remote::MAX_ANSWER)
        ),
    }
}

/// The first non-empty line of `text`, inert and kept short.
fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(nothing on stderr)");
    inert(line.strip_prefix("mihari: ").unwrap_or(line))
        .chars()
        .take(300)
        .collect()
}

fn load_tail(host: &Host, job: &str) -> FleetMsg {
    let lines = match remote::run(host, &["show", "--json", "--", job]) {
        Err(why) => Err(no_answer(host, why)),
        Ok(answer) if answer.code != Some(0) => Err(format!(
            "{} could not show the log (exit {}): {}",
            host.name,
            answer.code.map_or("?".to_string(), |c| c.to_string()),
            first_line(&answer.stderr)
        )),
        Ok(answer) => match serde_json::from_str::<Value>(answer.stdout.trim()) {
            Err(_) => Err(format!(
                "{} answered 'show' with no JSON: its mihari may be older than this one",
                host.name
            )),
            Ok(shown) => {
                let strings = |value: Option<&Value>| -> Vec<String> {
                    value
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(inert)
                        .collect()
                };
                let mut lines = strings(shown.pointer("/earlier/lines"));
                lines.extend(strings(shown.get("tail")));
                match shown.get("tail_fault").and_then(Value::as_str) {
                    Some(fault) if lines.is_empty() => Err(inert(fault)),
                    _ => Ok(lines),
                }
            }
        },
    };
    FleetMsg::Tail(Remote {
        host: host.name.clone(),
        job: job.to_string(),
        lines,
    })
}

fn load_events(host: &Host, job: &str) -> FleetMsg {
    let lines = match remote::run(
        host,
        &[
            "events",
            "--json",
            &format!("--job={job}"),
            "--last",
            EVENTS_SHOWN,
        ],
    ) {
        Err(why) => Err(no_answer(host, why)),
        Ok(answer) if answer.code != Some(0) => Err(format!(
            "{} could not read its events (exit {}): {}",
            host.name,
            answer.code.map_or("?".to_string(), |c| c.to_string()),
            first_line(&answer.stderr)
        )),
        Ok(answer) => Ok(answer
            .stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .map(|event| {
                let field = |key: &str| {
                    event
                        .get(key)
                        .and_then(Value::as_str)
                        .map(inert)
                        .unwrap_or_default()
                };
                let at = event
                    .get("at")
                    .and_then(Value::as_str)
                    .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                    .map(|at| {
                        crate::probe::zone::Zone::machine()
                            .format(at.with_timezone(&Utc), "%Y-%m-%d %H:%M:%S")
                    })
                    .unwrap_or_default();
                let reason = field("reason");
                format!(
                    "{at}  {:<18} {:<8} {}",
                    field("kind"),
                    field("actor"),
                    reason
                )
            })
            .collect()),
    };
    FleetMsg::Events(Remote {
        host: host.name.clone(),
        job: job.to_string(),
        lines,
    })
}

/// The longest a remote decision may take: a restart waits for the new run to take its lock.
const DECISION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

fn execute(host: &Host, decision: &RemoteDecision, origin: &str) -> FleetMsg {
    let mut args: Vec<String> = vec![format!("--from-fleet={origin}")];
    args.extend(decision.args());
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut patient = host.clone();
    patient.timeout = patient.timeout.max(DECISION_TIMEOUT);
    let what = format!(
        "{}: {} '{}'",
        host.name,
        crate::tui::dialog::Proposal::verb(decision),
        inert(&decision.job)
    );
    FleetMsg::Outcome(match remote::run(&patient, &words) {
        Err(why) => format!("{what} not sent: {}", no_answer(host, why)),
        Ok(answer) => outcome_words(&what, decision, &answer),
    })
}

/// What became of a decision by what the host's mihari answered: done only when it exited
/// 0 *and* its answer is the decision's own (it names the decision first); an exit 0 that
/// printed something else (a usage text) did nothing, and is said so.
fn outcome_words(what: &str, decision: &RemoteDecision, answer: &remote::Answer) -> String {
    let last = |text: &str| {
        text.lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(inert)
            .unwrap_or_default()
    };
    let said = last(&answer.stdout);
    let taken_up = answer
        .stdout
        .lines()
        .any(|line| line.trim_end() == decision.taken_up());
    match answer.code {
        Some(0) if taken_up => format!("{what}: done — {said}"),
        Some(0) => format!(
            "{what}: NOT done: the host's mihari exited 0 without taking the decision up; it              said: {}",
            first_line(&answer.stdout)
        ),
        code => format!(
            "{what} refused or failed there (exit {}): {}",
            code.map_or("?".to_string(), |c| c.to_string()),
            if answer.stderr.trim().is_empty() {
                said
            } else {
                first_line(&answer.stderr)
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::RemoteAction;

    fn approve(key: &str) -> RemoteDecision {
        RemoteDecision {
            host: "gpu1".into(),
            job: "deploy".into(),
            action: RemoteAction::Approve {
                key: key.into(),
                deny: false,
            },
            lines: Vec::new(),
            reason: String::new(),
        }
    }

    #[test]
    fn an_exit_0_that_did_not_take_the_decision_up_is_not_done() {
        let what = "gpu1: approve 'deploy'";
        let help = remote::Answer {
            code: Some(0),
            stdout: "Decide on a pending approval\n\nUsage: mihari approval approve\n".into(),
            stderr: String::new(),
        };
        let words = outcome_words(what, &approve("--help"), &help);
        assert!(
            words.starts_with("gpu1: approve 'deploy': NOT done"),
            "{words}"
        );
        let done = remote::Answer {
            code: Some(0),
            stdout: "approve 'deploy':\n  step      drop\napproved\n".into(),
            stderr: String::new(),
        };
        assert_eq!(
            outcome_words(what, &approve("k1"), &done),
            "gpu1: approve 'deploy': done — approved"
        );
    }
}
