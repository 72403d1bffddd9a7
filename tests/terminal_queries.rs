//! The dashboard never asks the terminal a question it must wait for.
//!
//! A terminal that does not answer a cursor-position query (`ESC [ 6 n`) — a bare pty, a
//! serial console, some multiplexers and recorders — made the dashboard wait two seconds
//! (crossterm's timeout) before its first frame: the clear ratatui does on start asks where
//! the cursor is first. This runs the real `mihari tui` in a pty of its own that answers
//! nothing, waits for the first full frame, and asserts no query was ever written.

use std::fs::{self, File};
use std::io::{ErrorKind, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::pty::{Winsize, openpty};

#[test]
fn the_first_frame_never_waits_for_a_terminal_that_answers_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    fs::write(root.join("train.progress"), "1\n2\n3\n").expect("progress");
    let jobs = root.join("jobs.yaml");
    fs::write(
        &jobs,
        "settings:\n  state_dir: state\njobs:\n  - id: train\n    \
         progress_file: train.progress\n    stall_sec: never\n    expected_total: 10\n    \
         should_run_when: [not_complete]\n",
    )
    .expect("jobs file");
    fs::set_permissions(&jobs, fs::Permissions::from_mode(0o600)).expect("chmod");

    let size = Winsize {
        ws_row: 40,
        ws_col: 120,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = openpty(&size, None).expect("openpty");
    fcntl(pty.master.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).expect("nonblocking");
    let slave = |_: ()| Stdio::from(pty.slave.try_clone().expect("dup"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_mihari"));
    command
        .arg("tui")
        .arg("--config")
        .arg(&jobs)
        .env("TERM", "xterm-256color")
        .stdin(slave(()))
        .stdout(slave(()))
        .stderr(slave(()));
    // SAFETY: between fork and exec only async-signal-safe calls: setsid(2) and ioctl(2).
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            if libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("mihari tui starts");
    drop(pty.slave);
    let mut master = File::from(pty.master);
    let mut output = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 65536];
    while !String::from_utf8_lossy(&output).contains("1 jobs") && Instant::now() < until {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => output.extend_from_slice(&buf[..n]),
            Err(error) if error.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = String::from_utf8_lossy(&output);
    assert!(
        text.contains("1 jobs"),
        "no first frame within 30 s: {text:?}"
    );
    assert!(
        !text.contains("\x1b[6n"),
        "the dashboard asked the terminal where its cursor is, and waited for the answer"
    );
}
