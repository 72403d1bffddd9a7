//! Times people read are in the machine's zone, named once in the header; JSON stays RFC 3339
//! in UTC (SPEC §8, §9). The real binary runs with `TZ` set for it alone (never for this test
//! process), over a real jobs file and a real state store: `check`'s table, `events`' table,
//! and `check --json` under `TZ=Asia/Tokyo`, and `check` under `TZ=UTC`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use chrono::{DateTime, Duration, FixedOffset, NaiveDateTime, Utc};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// A jobs file with one job, `alpha`, paused by an operator: its reason carries a time.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn paused() -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
        let jobs = dir.path().join("jobs.yaml");
        fs::write(
            &jobs,
            "settings:\n  state_dir: state\njobs:\n  - id: alpha\n    lock: alpha.lock\n    \
             log: alpha.log\n    should_run_when: [resource_free]\n",
        )
        .expect("write jobs");
        fs::set_permissions(&jobs, fs::Permissions::from_mode(0o600)).expect("chmod");
        let sandbox = Sandbox { dir };
        let (code, said) = sandbox.mihari(
            "UTC",
            &[
                "pause",
                "alpha",
                "--reason",
                "upstream maintenance",
                "--yes",
            ],
        );
        assert_eq!(code, 0, "{said}");
        sandbox
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `mihari ARGS` with `TZ=tz` for it alone: (exit code, stdout then stderr).
    fn mihari(&self, tz: &str, args: &[&str]) -> (i32, String) {
        let output = Command::new(BIN)
            .arg("--config")
            .arg(self.path("jobs.yaml"))
            .args(args)
            .env("TZ", tz)
            .stdin(Stdio::null())
            .output()
            .expect("mihari runs");
        (
            output.status.code().expect("an exit code"),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    }

    /// `check --json`, parsed.
    fn check_json(&self, tz: &str) -> Value {
        let (_, said) = self.mihari(tz, &["check", "--json"]);
        serde_json::from_str(said.lines().next().expect("a line")).expect("json")
    }
}

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

/// Tokyo has no summer time: it is always UTC+9.
fn tokyo() -> FixedOffset {
    FixedOffset::east_opt(9 * 3600).expect("offset")
}

#[test]
fn check_shows_tokyo_time_and_names_the_zone_once_while_json_stays_utc() {
    let sandbox = Sandbox::paused();
    let report = sandbox.check_json("Asia/Tokyo");
    let generated = report["generated_at"].as_str().expect("generated_at");
    assert!(
        generated.ends_with('Z'),
        "JSON must stay in UTC: {generated}"
    );
    let paused_at = report["jobs"][0]["paused"]["at"]
        .as_str()
        .expect("paused.at")
        .to_string();
    assert!(
        paused_at.ends_with('Z'),
        "JSON must stay in UTC: {paused_at}"
    );
    let paused_at = utc(&paused_at);

    let (_, table) = sandbox.mihari("Asia/Tokyo", &["check"]);
    let header = table.lines().next().expect("a header");
    assert_eq!(
        table.matches("times in JST (+09:00)").count(),
        1,
        "the zone is named once, in the header:\n{table}"
    );
    assert!(header.contains("times in JST (+09:00)"), "{header}");
    // The header's time is Tokyo's: nine hours ahead of UTC (give or take the seconds the run
    // took, or a minute boundary crossed).
    let shown = header
        .split(" · ")
        .nth(1)
        .and_then(|t| NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S").ok())
        .unwrap_or_else(|| panic!("no time in the header: {header}"));
    let ahead = shown - Utc::now().naive_utc();
    assert!(
        (ahead - Duration::hours(9)).num_minutes().abs() <= 5,
        "the header shows {shown}, {ahead} ahead of UTC, not Tokyo's time"
    );
    // The pause's time, in the reasons, in Tokyo's time.
    let in_tokyo = paused_at
        .with_timezone(&tokyo())
        .format("%Y-%m-%d %H:%M:%S JST")
        .to_string();
    let in_utc = paused_at.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    assert!(
        table.contains("paused by") && table.contains(&in_tokyo),
        "the pause at {in_tokyo} is not shown in Tokyo's time:\n{table}"
    );
    assert!(!table.contains(&in_utc), "a UTC time is left:\n{table}");

    // The same store under TZ=UTC: UTC, named once.
    let (_, table) = sandbox.mihari("UTC", &["check"]);
    assert_eq!(table.matches("times in UTC").count(), 1, "{table}");
    assert!(table.contains(&in_utc), "{table}");
}

#[test]
fn the_events_table_is_in_tokyo_time_with_the_zone_in_its_header_and_json_in_utc() {
    let sandbox = Sandbox::paused();
    let (code, json) = sandbox.mihari("Asia/Tokyo", &["events", "--json", "--kind", "paused"]);
    assert_eq!(code, 0, "{json}");
    let event: Value = serde_json::from_str(json.lines().next().expect("an event")).expect("json");
    let at = event["at"].as_str().expect("at");
    assert!(at.ends_with('Z'), "JSON must stay in UTC: {at}");

    let (code, table) = sandbox.mihari("Asia/Tokyo", &["events", "--kind", "paused"]);
    assert_eq!(code, 0, "{table}");
    let header = table.lines().next().expect("a header");
    assert!(header.starts_with("TIME JST (+09:00)"), "{header}");
    let in_tokyo = utc(at)
        .with_timezone(&tokyo())
        .format("%Y-%m-%d %H:%M:%S%.3f")
        .to_string();
    let row = table.lines().nth(1).expect("the paused event");
    assert!(row.starts_with(&in_tokyo), "{in_tokyo} not in: {row}");
}
