//! The unprivileged second user the tests run mihari as (`mihari-other`), made on first use.
//! Test binaries run at once, so "already exists" (useradd's exit 9) and "the password file is
//! locked" (10, another binary's useradd at the same moment) both mean: look again.

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use nix::unistd::User;

/// The name of the second user.
pub const OTHER: &str = "mihari-other";

/// The second user's uid and gid; `None`, said on stderr, where it cannot be made (then a
/// test that needs it says so and passes).
pub fn other_user() -> Option<(u32, u32)> {
    static MADE: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *MADE.get_or_init(|| {
        for _ in 0..20 {
            if let Ok(Some(user)) = User::from_name(OTHER) {
                return Some((user.uid.as_raw(), user.gid.as_raw()));
            }
            match Command::new("useradd")
                .args(["--system", "--no-create-home", OTHER])
                .stderr(Stdio::null())
                .status()
            {
                Ok(status) if matches!(status.code(), Some(0 | 9 | 10)) => {}
                other => {
                    eprintln!("skipped: cannot create the user '{OTHER}' ({other:?})");
                    return None;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("skipped: the user '{OTHER}' never appeared");
        None
    })
}
