//! The terminal: raw mode, the alternate screen and mouse capture, and their undoing.
//!
//! The terminal is restored on every exit path: a normal quit and an error (the [`Screen`]
//! guard's `Drop`), and a panic (a hook that restores before the panic message prints, so the
//! message is readable and the shell is usable). Signals end the event loop, which drops the
//! guard. Terminal input is read on its own thread, blocked in the kernel while nothing
//! happens.

use std::future::Future;
use std::io::{self, Stdout, Write};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Once;

use crossterm::event::{self, DisableMouseCapture, EnableMouseCapture, Event};
use crossterm::execute;
use crossterm::terminal::{
    Clear, ClearType, EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use ratatui::backend::CrosstermBackend;
use ratatui::{Frame, Terminal};

/// The dashboard's hold on the terminal; dropping it gives the terminal back.
pub struct Screen {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Screen {
    /// Takes over the terminal. Fails, restoring what it changed, when stdout is no terminal.
    pub fn enter() -> io::Result<Self> {
        install_panic_hook();
        enable_raw_mode()?;
        let mut stdout = io::stdout();
        // Cleared here, not by ratatui's `Terminal::clear`: that asks the terminal where its
        // cursor is first, and a terminal that never answers (a bare pty, a serial console)
        // held the first frame for crossterm's two-second timeout. A new `Terminal`'s back
        // buffer is empty, so its first draw paints every cell anyway.
        if let Err(error) = execute!(
            stdout,
            EnterAlternateScreen,
            EnableMouseCapture,
            Clear(ClearType::All)
        ) {
            restore();
            return Err(error);
        }
        match Terminal::new(CrosstermBackend::new(stdout)) {
            Ok(mut terminal) => {
                let _ = terminal.hide_cursor();
                Ok(Screen { terminal })
            }
            Err(error) => {
                restore();
                Err(error)
            }
        }
    }

    pub fn size(&self) -> io::Result<(u16, u16)> {
        let size = self.terminal.size()?;
        Ok((size.width, size.height))
    }

    /// Rings the terminal bell: an escalation wants a human now.
    pub fn bell(&mut self) {
        let backend = self.terminal.backend_mut();
        let _ = backend.write_all(b"\x07");
        let _ = backend.flush();
    }

    /// Draws one frame; ratatui writes only the cells that changed.
    pub fn draw(&mut self, render: impl FnOnce(&mut Frame)) -> io::Result<()> {
        self.terminal.draw(render).map(|_| ())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = self.terminal.show_cursor();
        restore();
    }
}

/// Undoes everything [`Screen::enter`] did. Safe to call more than once.
pub fn restore() {
    let mut stdout = io::stdout();
    let _ = execute!(stdout, DisableMouseCapture, LeaveAlternateScreen);
    let _ = disable_raw_mode();
    let _ = write!(stdout, "\u{1b}[?25h");
    let _ = stdout.flush();
}

/// Restores the terminal before the default panic report, once per process.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}

/// Reads terminal events on a thread of their own and hands each to `deliver`, until it
/// returns false or reading fails (the error is delivered too).
pub fn spawn_reader(mut deliver: impl FnMut(io::Result<Event>) -> bool + Send + 'static) {
    std::thread::spawn(move || {
        loop {
            let event = event::read();
            let failed = event.is_err();
            if !deliver(event) || failed {
                break;
            }
        }
    });
}

/// Feeds a full-screen front-end's inbox: every terminal event (`event`), why the terminal
/// can no longer be read (`gone`), and SIGTERM, SIGHUP or SIGINT (`signal`), which end the
/// screen cleanly with the terminal restored. Must run inside the front-end's runtime.
pub fn listen<T: Send + 'static>(
    sender: &tokio::sync::mpsc::UnboundedSender<T>,
    event: fn(Event) -> T,
    gone: fn(String) -> T,
    signal: fn() -> T,
) {
    let reader = sender.clone();
    spawn_reader(move |read| match read {
        Ok(read) => reader.send(event(read)).is_ok(),
        Err(error) => {
            let _ = reader.send(gone(error.to_string()));
            false
        }
    });
    use tokio::signal::unix::SignalKind;
    let kinds = [
        SignalKind::terminate(),
        SignalKind::hangup(),
        SignalKind::interrupt(),
    ];
    let signals = sender.clone();
    crate::engine::live::on_signals(&kinds, move || {
        let _ = signals.send(signal());
    });
}

/// What a full-screen front-end runs while the screen is its: borrowing the screen for as
/// long as it serves.
pub type Serve<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + 'a>>;

/// Runs a full-screen front-end (the dashboard, the fleet screen) on a runtime of one
/// thread, with the terminal in screen mode while `serve` runs and restored before any
/// message is printed. `what` names it in those messages; exit 3 when it cannot start or
/// stops on an error.
pub fn run_full_screen(
    what: &str,
    serve: impl for<'a> FnOnce(&'a mut Screen) -> Serve<'a>,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mihari: cannot start {what}'s runtime: {error}");
            return ExitCode::from(3);
        }
    };
    let mut screen = match Screen::enter() {
        Ok(screen) => screen,
        Err(error) => {
            eprintln!("mihari: cannot open {what} on this terminal: {error}");
            return ExitCode::from(3);
        }
    };
    let result = runtime.block_on(serve(&mut screen));
    drop(screen);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mihari: {what} stopped: {error}");
            ExitCode::from(3)
        }
    }
}
