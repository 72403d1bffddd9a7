//! The real dashboard in a real tmux, for the tests that drive it: a tmux server of the
//! test's own (its own socket, no user config), one session `demo`, killed when dropped.
//! Shared by the test files through `mod common;`; each uses what it needs.
#![allow(dead_code)]

use std::process::{Command, Output};
use std::thread;
use std::time::{Duration, Instant};

/// The session every test's pane is in: `-t demo` for a raw `run`.
pub const SESSION: &str = "demo";

pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts `command` in a `width`x`height` pane; `name` keeps tests' servers apart.
    pub fn start(name: &str, width: u16, height: u16, command: &str) -> Tmux {
        let found = Command::new("tmux").arg("-V").output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "tmux is needed for this test: apt-get install -y tmux"
        );
        let tmux = Tmux {
            socket: format!("mihari-test-{}-{name}", std::process::id()),
        };
        let out = tmux.run(&[
            "new-session",
            "-d",
            "-s",
            SESSION,
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            command,
        ]);
        assert!(
            out.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tmux
    }

    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .env_remove("TMUX")
            .output()
            .expect("tmux runs")
    }

    pub fn capture(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", SESSION]).stdout)
            .into_owned()
    }

    /// Sends keys one at a time, as a person would: two escapes sent together could read as
    /// one Alt-Escape.
    pub fn keys(&self, keys: &[&str]) {
        for key in keys {
            self.run(&["send-keys", "-t", SESSION, key]);
            thread::sleep(Duration::from_millis(150));
        }
    }

    pub fn title(&self) -> String {
        let out = self.run(&["display-message", "-p", "-t", SESSION, "#{pane_title}"]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits until the pane shows everything in `wanted`, or fails with what it showed.
    pub fn wait_for(&self, wanted: &[&str], within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let screen = self.capture();
            if wanted.iter().all(|w| screen.contains(w)) {
                return screen;
            }
            if Instant::now() > deadline {
                let missing: Vec<&&str> = wanted.iter().filter(|w| !screen.contains(**w)).collect();
                panic!("the pane never showed {missing:?}; it showed:\n{screen}");
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}
