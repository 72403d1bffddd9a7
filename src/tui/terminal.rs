//! The terminal: raw mode, the alternate screen and mouse capture, and their undoing.
//!
//! The terminal is restored on every exit path: a normal quit and an error (the [`Screen`]
//! guard's `Drop`), and a panic (a hook that restores before the panic message prints, so the
//! message is readable and the shell is usable). Signals end the event loop, which drops the
//! guard. Terminal input is read on its own thread, blocked in the kernel while nothing
//! happens; that thread can be asked to stand aside (a pipe wakes it) while the terminal is
//! handed to another program (`$PAGER`), so that the program gets every key, and the screen is
//! taken back and painted whole afterwards.

use std::future::Future;
use std::io::{self, Stdout, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Mutex, Once, OnceLock};
use std::time::Duration;

use crossterm::event::{
    self, DisableFocusChange, DisableMouseCapture, EnableFocusChange, EnableMouseCapture, Event,
};
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
            EnableFocusChange,
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

    /// Hands the terminal to `program` (a pager) and takes it back: the input thread stands
    /// aside so the program gets every key, the terminal is restored for it, and afterwards
    /// the screen is entered again and painted whole at the next draw.
    pub fn hand_over(
        &mut self,
        program: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), String> {
        let resume = stand_aside()?;
        let _ = self.terminal.show_cursor();
        restore();
        let result = program();
        let entered = enable_raw_mode().and_then(|()| {
            execute!(
                io::stdout(),
                EnterAlternateScreen,
                EnableMouseCapture,
                EnableFocusChange,
                Clear(ClearType::All)
            )
        });
        // A new terminal has an empty back buffer: its first draw paints every cell.
        let fresh = Terminal::new(CrosstermBackend::new(io::stdout()));
        let _ = resume.send(());
        entered.map_err(|e| format!("cannot take the terminal back: {e}"))?;
        self.terminal = fresh.map_err(|e| format!("cannot take the terminal back: {e}"))?;
        let _ = self.terminal.hide_cursor();
        result
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
    let _ = execute!(
        stdout,
        DisableFocusChange,
        DisableMouseCapture,
        LeaveAlternateScreen
    );
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

/// The write end of the pipe that wakes the input thread, when it waits on one.
static WAKE: OnceLock<OwnedFd> = OnceLock::new();
/// The input thread's orders to stand aside: whom to tell it has, and what to wait for.
static STAND_ASIDE: Mutex<Option<(Sender<()>, Receiver<()>)>> = Mutex::new(None);

/// Asks the input thread to stop reading the terminal; answers what to send when it may read
/// again. Fails when it cannot be asked (stdin is not the terminal it reads).
fn stand_aside() -> Result<Sender<()>, String> {
    let wake = WAKE
        .get()
        .ok_or_else(|| "the terminal cannot be handed over: its input is not stdin".to_string())?;
    let (told, aside) = std::sync::mpsc::channel();
    let (resume, resumed) = std::sync::mpsc::channel();
    if let Ok(mut slot) = STAND_ASIDE.lock() {
        *slot = Some((told, resumed));
    }
    nix::unistd::write(wake, b"x").map_err(|e| format!("cannot wake the input thread: {e}"))?;
    aside
        .recv_timeout(Duration::from_secs(2))
        .map_err(|_| "the input thread did not stand aside: the terminal stays here".to_string())?;
    Ok(resume)
}

/// Shows `path` in `$PAGER` (`less` when unset) at its end, and waits for it. `less` is told
/// not to pass escape sequences through (`-+R -+r`), whatever `$LESS` says: a log's text
/// never reaches the terminal live.
pub fn page(path: &Path) -> Result<(), String> {
    let pager = std::env::var("PAGER")
        .ok()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| "less".to_string());
    let status = if pager.trim() == "less" {
        std::process::Command::new("less")
            .args(["-+R", "-+r", "+G", "--"])
            .arg(path)
            .status()
    } else {
        // As git runs it: the variable may hold words (`less -S`, `most`).
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{pager} \"$1\""))
            .arg("mihari-pager")
            .arg(path)
            .status()
    };
    match status {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!(
            "the pager '{pager}' ended with {status} on '{}'",
            path.display()
        )),
        Err(error) => Err(format!(
            "cannot run the pager '{pager}': {error}; set PAGER to one that is installed"
        )),
    }
}

/// Reads terminal events on a thread of their own and hands each to `deliver`, until it
/// returns false or reading fails (the error is delivered too). When stdin is the terminal,
/// the thread waits in `poll` on it and on a pipe, so that it can be asked to stand aside.
pub fn spawn_reader(mut deliver: impl FnMut(io::Result<Event>) -> bool + Send + 'static) {
    let gate = std::io::IsTerminal::is_terminal(&io::stdin())
        .then(nix::unistd::pipe)
        .and_then(Result::ok)
        .and_then(|(read, write)| WAKE.set(write).ok().map(|()| read));
    std::thread::spawn(move || {
        loop {
            if let Some(wake) = &gate {
                match wait_for_input(wake) {
                    Waited::Input => {}
                    Waited::Aside => {
                        let orders = STAND_ASIDE.lock().ok().and_then(|mut slot| slot.take());
                        if let Some((told, resumed)) = orders {
                            let _ = told.send(());
                            let _ = resumed.recv();
                        }
                        continue;
                    }
                }
            }
            // Every event already read and buffered, then back to waiting.
            loop {
                let event = event::read();
                let failed = event.is_err();
                if !deliver(event) || failed {
                    return;
                }
                if !matches!(event::poll(Duration::ZERO), Ok(true)) {
                    break;
                }
            }
        }
    });
}

enum Waited {
    Input,
    Aside,
}

/// Blocks until the terminal (stdin) has input or the wake pipe is written.
fn wait_for_input(wake: &OwnedFd) -> Waited {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    loop {
        let stdin = io::stdin();
        let mut fds = [
            PollFd::new(stdin.as_fd(), PollFlags::POLLIN),
            PollFd::new(wake.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {
                if fds[1].revents().is_some_and(|r| !r.is_empty()) {
                    let mut byte = [0u8; 1];
                    let _ = nix::unistd::read(wake, &mut byte);
                    return Waited::Aside;
                }
                return Waited::Input;
            }
            Err(nix::errno::Errno::EINTR) => continue,
            // Let the read report what is wrong.
            Err(_) => return Waited::Input,
        }
    }
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
    // A resize, told by the kernel: the input thread only wakes for input.
    if let Ok(mut resized) = tokio::signal::unix::signal(SignalKind::window_change()) {
        let resizes = sender.clone();
        tokio::spawn(async move {
            while resized.recv().await.is_some() {
                if let Ok((width, height)) = crossterm::terminal::size()
                    && resizes.send(event(Event::Resize(width, height))).is_err()
                {
                    break;
                }
            }
        });
    }
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
