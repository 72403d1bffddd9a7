//! Several pending approvals of one job, through the real binary and the engine: each is
//! proposed by its own key, the plain approve key still means the oldest, a request decided
//! meanwhile is refused by name, and who asked is kept with the request.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use chrono::Utc;
use mihari::core::decision::Decision;
use mihari::engine::{Action, Engine};

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
        let jobs = dir.path().join("jobs.yaml");
        fs::write(
            &jobs,
            "settings:\n  state_dir: state\njobs:\n  - id: publisher\n    lock: publisher.lock\n    \
             log: publisher.log\n    should_run_when: [resource_free]\n",
        )
        .expect("write jobs");
        fs::set_permissions(&jobs, fs::Permissions::from_mode(0o600)).expect("chmod");
        Sandbox { dir }
    }

    fn jobs(&self) -> PathBuf {
        self.dir.path().join("jobs.yaml")
    }

    fn mihari(&self, args: &[&str]) -> (i32, String) {
        let out = Command::new(BIN)
            .arg("--config")
            .arg(self.jobs())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("mihari runs");
        (
            out.status.code().expect("an exit code"),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    fn request(&self, step: &str, key: &str) {
        let (code, said) = self.mihari(&[
            "approval",
            "request",
            "publisher",
            "--step",
            step,
            "--key",
            key,
            "--summary",
            &format!("{step} things"),
        ]);
        assert_eq!(code, 10, "{said}");
    }

    /// An engine that has gathered once, as the dashboard's has before any key is pressed.
    fn engine(&self) -> Engine {
        let mut engine =
            Engine::new(mihari::config::load(&self.jobs()).expect("the jobs file loads"));
        engine.snapshot(Utc::now());
        engine
    }
}

fn key_of(decision: &Decision) -> &str {
    match decision {
        Decision::Approve(plan) | Decision::Deny(plan) => &plan.key,
        other => panic!("not an approval: {other:?}"),
    }
}

#[test]
fn each_pending_approval_is_proposed_by_its_key_and_a_decided_one_is_refused() {
    let sandbox = Sandbox::new();
    sandbox.request("publish", "k-first");
    std::thread::sleep(std::time::Duration::from_millis(20));
    sandbox.request("delete", "k-second");

    let mut engine = sandbox.engine();
    let now = Utc::now();
    // The plain key: the oldest, as the detail numbers it 1.
    let plain = engine
        .propose(Action::Approve, "publisher", now)
        .expect("proposed");
    assert_eq!(key_of(&plain), "k-first");
    let second = engine
        .propose_approval(Action::Approve, "publisher", "k-second", now)
        .expect("proposed");
    assert!(matches!(second, Decision::Approve(_)));
    assert_eq!(key_of(&second), "k-second");
    let snapshot = engine.snapshot(now);
    let pending = &snapshot
        .evidence_of("publisher")
        .expect("evidence")
        .pending_approvals;
    let keys: Vec<&str> = pending.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(keys, ["k-first", "k-second"], "oldest first");
    assert!(
        pending
            .iter()
            .all(|a| a.requested_by.as_deref().is_some_and(|by| !by.is_empty())),
        "who asked is kept: {pending:?}"
    );

    // Decided from a shell meanwhile: the dashboard's choice is refused by name.
    let (code, said) = sandbox.mihari(&["approval", "approve", "k-second", "--yes"]);
    assert_eq!(code, 0, "{said}");
    let refused = sandbox
        .engine()
        .propose_approval(Action::Approve, "publisher", "k-second", Utc::now())
        .expect_err("no longer pending");
    assert!(refused.contains("'k-second'"), "{refused}");
    assert!(refused.contains("no longer pending"), "{refused}");
    // The other one is still there to decide.
    let first = sandbox
        .engine()
        .propose_approval(Action::Approve, "publisher", "k-first", Utc::now())
        .expect("still pending");
    assert_eq!(key_of(&first), "k-first");
}

/// Who asked is a column of `mihari approval list`: the operator deciding from a shell
/// sees whether the request came from the job's own user or from a colleague, and a request
/// made before mihari kept who asks says so instead of leaving a blank.
#[test]
fn approval_list_names_who_asked_each_request() {
    let sandbox = Sandbox::new();
    sandbox.request("publish", "k-mine");
    {
        let mut store = mihari::store::Store::open(
            &sandbox.dir.path().join("state"),
            mihari::store::Actor::Job,
        )
        .expect("the store opens");
        store
            .request_approval_by(
                "publisher",
                "delete",
                "k-alice",
                "delete things",
                Some("alice"),
            )
            .expect("recorded");
        store
            .request_approval("publisher", "rotate", "k-old", "rotate things")
            .expect("recorded");
    }
    let me = String::from_utf8(
        Command::new("id")
            .arg("-un")
            .output()
            .expect("id runs")
            .stdout,
    )
    .expect("a user name")
    .trim()
    .to_string();
    let (code, table) = sandbox.mihari(&["approval", "list"]);
    assert_eq!(code, 0, "{table}");
    let header = table.lines().next().expect("a header");
    assert!(header.contains("ASKED BY"), "{table}");
    let row = |key: &str| {
        table
            .lines()
            .find(|line| line.starts_with(key))
            .unwrap_or_else(|| panic!("a row for {key} in {table}"))
            .to_string()
    };
    assert!(row("k-alice").contains(" alice "), "{table}");
    assert!(row("k-mine").contains(&format!(" {me} ")), "{table}");
    assert!(row("k-old").contains(" — "), "{table}");
}

/// The approve dialog says who asked, beside the step and the key: approving a colleague's
/// deletion is a different decision from approving one's own.
#[test]
fn the_approve_confirmation_says_who_asked() {
    let sandbox = Sandbox::new();
    {
        let mut store = mihari::store::Store::open(
            &sandbox.dir.path().join("state"),
            mihari::store::Actor::Job,
        )
        .expect("the store opens");
        store
            .request_approval_by(
                "publisher",
                "delete",
                "k-alice",
                "delete things",
                Some("alice"),
            )
            .expect("recorded");
        store
            .request_approval("publisher", "rotate", "k-old", "rotate things")
            .expect("recorded");
    }
    let engine = sandbox.engine();
    let now = Utc::now();
    let asked_by = |key: &str| {
        let decision = engine
            .propose_approval(Action::Approve, "publisher", key, now)
            .expect("proposed");
        decision
            .describe(now)
            .into_iter()
            .find(|(label, _)| label == "asked by")
            .map(|(_, value)| value)
            .unwrap_or_else(|| panic!("no 'asked by' line for {key}"))
    };
    let alice = asked_by("k-alice");
    assert!(alice.starts_with("alice"), "{alice}");
    assert!(alice.contains("ago"), "{alice}");
    let old = asked_by("k-old");
    assert!(old.contains("not recorded"), "{old}");

    // And from a shell: the same confirmation, printed before the typed job id.
    let (_, said) = sandbox.mihari(&["approval", "approve", "k-alice"]);
    assert!(
        said.contains("asked by") && said.contains("alice"),
        "{said}"
    );
}
