//! `mihari check --json --follow`: check's JSON object, one per line, again whenever
//! anything it shows changes — driven by the same event-driven engine as the dashboard (file
//! notifications, pidfd waits, one deadline timer), never by a polling loop — and at least
//! every [`HEARTBEAT`], so a reader tells a quiet host from a dead stream.
//!
//! "Changes" leaves out what changes by itself with the clock (`generated_at`, and the ages
//! in `progress_age_sec`): a job whose age crosses its stall threshold changes state, which is
//! shown at once; a fresh write that makes no other difference is seen at the next line.
//! The stream ends when its reader goes (a closed pipe: exit 0) or on SIGTERM/SIGINT.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc;

use crate::config::Config;
use crate::engine::live::{Arrivals, Live, Pace};
use crate::engine::triggers::Trigger;
use crate::engine::{CheckResultFor, Snapshot};

use super::check::{EXIT_UNKNOWN, render_json};
use crate::render::json::shown_digest;

/// The longest a follower waits between two lines.
pub const HEARTBEAT: Duration = Duration::from_secs(30);

/// [`HEARTBEAT`], or `MIHARI_FOLLOW_HEARTBEAT_MS` where a test cannot wait half a minute.
fn heartbeat() -> Duration {
    std::env::var("MIHARI_FOLLOW_HEARTBEAT_MS")
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(HEARTBEAT, Duration::from_millis)
}

enum Input {
    Trigger(Trigger),
    Checks(CheckResultFor),
    Stop,
}

/// Follows `config` until the reader goes or a signal stops it; answers the exit code.
pub fn run(config: Config, out: &mut impl Write) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mihari check --follow: cannot start its runtime: {error}");
            return EXIT_UNKNOWN;
        }
    };
    match runtime.block_on(follow(config, out)) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("mihari check --follow: {error}");
            EXIT_UNKNOWN
        }
    }
}

/// check's object for `snapshot` with `heartbeat_sec`, the longest this stream stays silent,
/// so a reader learns how long a silence means a dead stream instead of assuming it.
fn follow_line(
    snapshot: &Snapshot,
    jobs: &[crate::config::JobSpec],
    every: Duration,
) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    render_json(snapshot, jobs, &mut line).map_err(|e| e.to_string())?;
    // The object's closing brace, then the newline: the field goes in before the brace.
    if line.ends_with(b"}\n") {
        line.truncate(line.len() - 2);
        line.extend_from_slice(
            format!(",\"heartbeat_sec\":{}}}\n", every.as_secs_f64()).as_bytes(),
        );
    }
    Ok(line)
}

/// One line of `snapshot`; `Ok(false)` when the reader has gone.
fn emit(
    snapshot: &Snapshot,
    jobs: &[crate::config::JobSpec],
    every: Duration,
    out: &mut impl Write,
) -> Result<bool, String> {
    let line = follow_line(snapshot, jobs, every)?;
    match out.write_all(&line).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(error) => Err(format!("cannot write: {error}")),
    }
}

async fn follow(config: Config, out: &mut impl Write) -> Result<(), String> {
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
    // The stream ends as soon as its reader goes, not at its next line: a closed pipe shows
    // as POLLERR on our end of it (a terminal that hangs up, as POLLHUP).
    {
        let sender = sender.clone();
        std::thread::spawn(move || {
            if reader_gone(std::io::stdout().as_fd()) {
                let _ = sender.send(Input::Stop);
            }
        });
    }
    let trigger_sender = sender.clone();
    let mut live = Live::new(
        config,
        Arc::new(move |trigger| {
            let _ = trigger_sender.send(Input::Trigger(trigger));
        }),
    )?;
    // The checks run before the first line: a first line without their results would show
    // a failing job as healthy for a moment.
    live.engine.run_checks(None);
    let now = Utc::now();
    let mut snapshot = live.start(now);
    start_checks(&mut live, &sender, now);
    let every = heartbeat();
    if !emit(&snapshot, &live.engine.config().jobs, every, out)? {
        return Ok(());
    }
    let mut last_shown = shown_digest(&snapshot, &live.engine.config().jobs);
    let mut last_at = Utc::now();
    let mut pace = Pace::new();
    loop {
        let now = Utc::now();
        let heartbeat = last_at + chrono::Duration::from_std(every).unwrap_or_default();
        let engine_deadline = live.deadline(&snapshot, now);
        let deadline = engine_deadline.map_or(heartbeat, |at| at.min(heartbeat));
        let batch = pace
            .next_batch(
                &mut inbox,
                Some(deadline),
                |input| matches!(input, Input::Trigger(trigger) if trigger.can_wait()),
                |input| matches!(input, Input::Trigger(trigger) if trigger.may_space()),
            )
            .await;
        let mut arrivals = Arrivals::holding_growth(pace.holds_growth());
        for input in batch {
            match input {
                Input::Stop => return Ok(()),
                Input::Trigger(trigger) => live.note(&mut arrivals, trigger),
                Input::Checks(result) => live.note_check(&mut arrivals, result),
            }
        }
        let now = Utc::now();
        let reached = engine_deadline.is_some_and(|at| at <= now);
        let applied = live.apply(arrivals, reached, now);
        pace.gathered_storm(live.gathered_storm());
        if let Some(fresh) = applied {
            snapshot = fresh;
        } else if reached {
            snapshot = live.engine.reassess(now);
        }
        start_checks(&mut live, &sender, now);
        let heartbeat_due = now >= heartbeat;
        if heartbeat_due && !reached {
            // The heartbeat line carries fresh ages and time even when nothing changed.
            snapshot = live.engine.reassess(now);
        }
        let view = shown_digest(&snapshot, &live.engine.config().jobs);
        if view == last_shown && !heartbeat_due {
            continue;
        }
        if !emit(&snapshot, &live.engine.config().jobs, every, out)? {
            return Ok(());
        }
        last_shown = view;
        last_at = Utc::now();
    }
}

/// Blocks until the reader of `out` has gone (POLLERR or POLLHUP); `false` when that cannot be
/// watched. A regular file never reports either, so a follower writing to one just runs on.
fn reader_gone(out: std::os::fd::BorrowedFd<'_>) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    loop {
        let mut fds = [PollFd::new(out, PollFlags::empty())];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {
                let revents = fds[0].revents().unwrap_or(PollFlags::empty());
                if revents.intersects(PollFlags::POLLERR | PollFlags::POLLHUP) {
                    return true;
                }
                if revents.contains(PollFlags::POLLNVAL) {
                    return false;
                }
                // Woken with nothing to say: never spin.
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

fn start_checks(
    live: &mut Live,
    sender: &mpsc::UnboundedSender<Input>,
    now: chrono::DateTime<Utc>,
) {
    for check in live.take_due_checks(now) {
        let sender = sender.clone();
        tokio::task::spawn_blocking(move || {
            let _ = sender.send(Input::Checks(check.run()));
        });
    }
}
