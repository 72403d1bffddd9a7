//! The daily digest on real SQLite files and through the real binary: items queued at set
//! times land in the right cut, grouping and counts, the callout when suppressions rise (and
//! its silence when they are steady), delivery recorded exactly once, the next cut on a local
//! wall clock across midnight and DST, and `mihari digest` in its three forms — read-only,
//! with hostile text shown inert.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use chrono::{
    DateTime, FixedOffset, MappedLocalTime, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta,
    TimeZone, Utc,
};
use mihari::core::digest::{next_cut_in, report};
use mihari::core::text::is_inert;
use mihari::store::digest::{Digest, DigestCategory};
use mihari::store::{Actor, EventFilter, Store};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

use DigestCategory::{Completed, MachineRestart, Other, StallSeen, Suppressed, Timeout};

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("test time '{text}': {e}"))
        .with_timezone(&Utc)
}

fn time(hour: u32, minute: u32) -> NaiveTime {
    NaiveTime::from_hms_opt(hour, minute, 0).expect("a time of day")
}

/// A temp folder with a state store and a jobs file pointing at it.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().expect("a temp dir"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn store(&self) -> Store {
        Store::open(&self.path("state"), Actor::Watcher).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A jobs file with one valid job and `settings.state_dir` in the sandbox.
    fn config(&self) -> PathBuf {
        let text = format!(
            "settings:\n  state_dir: {}\n  digest_at: \"09:00\"\njobs:\n  - id: collect\n    \
             log: {}\n    lock: {}\n    should_run_when: [resource_free]\n",
            self.path("state").display(),
            self.path("collect.log").display(),
            self.path("collect.lock").display(),
        );
        let path = self.path("jobs.yaml");
        fs::write(&path, text).expect("jobs file written");
        path
    }

    /// Runs `mihari digest ARGS` with the local time zone `tz`; (exit code, stdout, stderr).
    fn digest(&self, tz: &str, args: &[&str]) -> (i32, String, String) {
        let output = Command::new(BIN)
            .arg("digest")
            .args(args)
            .arg("--config")
            .arg(self.config())
            .env("TZ", tz)
            .output()
            .expect("mihari runs");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

fn queue(store: &mut Store, when: &str, job: Option<&str>, category: DigestCategory, text: &str) {
    store
        .queue_digest_at(at(when), job, category, text)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Three earlier days with `earlier` suppressions each, then a day with `today`: four cuts.
fn suppression_history(store: &mut Store, earlier: [usize; 3], today: usize) {
    for (day, n) in earlier.into_iter().chain([today]).enumerate() {
        let date = format!("2025-05-0{}", day + 1);
        for i in 0..n {
            let job = if i % 5 == 4 { "train" } else { "collect" };
            queue(
                store,
                &format!("{date}T03:{:02}:00Z", i % 60),
                Some(job),
                Suppressed,
                "duplicate restart claim",
            );
        }
        store
            .cut_digest(at(&format!("{date}T09:00:00Z")))
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn items_land_in_the_cut_they_were_queued_before() {
    let sandbox = Sandbox::new();
    let mut store = sandbox.store();
    assert_eq!(store.last_cut().unwrap(), None);
    assert_eq!(store.cut_digest(at("2025-05-01T09:00:00Z")).unwrap(), None);

    queue(
        &mut store,
        "2025-05-01T02:00:00Z",
        Some("collect"),
        StallSeen,
        "no progress for 12m",
    );
    // Exactly at the cut belongs to it; a millisecond later does not.
    queue(
        &mut store,
        "2025-05-01T09:00:00Z",
        Some("collect"),
        Completed,
        "ran to the end",
    );
    store
        .queue_digest_at(
            at("2025-05-01T09:00:00.001Z"),
            Some("train"),
            Timeout,
            "attempt ran out of time",
        )
        .unwrap();

    let first = store.cut_digest(at("2025-05-01T09:00:00Z")).unwrap();
    let first = first.expect("two items to cut");
    assert_eq!(store.last_cut().unwrap(), Some(at("2025-05-01T09:00:00Z")));
    // Nothing new up to the same moment: no empty digest.
    assert_eq!(store.cut_digest(at("2025-05-01T09:00:00Z")).unwrap(), None);

    let pending = store.pending_digest().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].job.as_deref(), Some("train"));

    queue(
        &mut store,
        "2025-05-01T20:00:00Z",
        None,
        Other,
        "watcher took over",
    );
    let second = store
        .cut_digest(at("2025-05-02T09:00:00Z"))
        .unwrap()
        .expect("the later items");
    assert!(second > first);
    assert!(store.pending_digest().unwrap().is_empty());

    let digests = store.digests(true).unwrap();
    let ids: Vec<i64> = digests.iter().map(|d| d.id).collect();
    assert_eq!(ids, vec![second, first], "newest first");
    let texts = |d: &Digest| d.items.iter().map(|i| i.text.clone()).collect::<Vec<_>>();
    assert_eq!(
        texts(&digests[1]),
        vec!["no progress for 12m", "ran to the end"]
    );
    assert_eq!(
        texts(&digests[0]),
        vec!["attempt ran out of time", "watcher took over"]
    );
    assert_eq!(digests[0].cut, at("2025-05-02T09:00:00Z"));
    assert_eq!(digests[0].delivered, None);
}

#[test]
fn queuing_records_a_digest_queued_event_with_the_category_and_keeps_text_short() {
    let sandbox = Sandbox::new();
    let mut store = sandbox.store();
    let long = "x".repeat(1000);
    store
        .queue_digest(Some("collect"), MachineRestart, &long)
        .unwrap();
    store
        .queue_digest(None, Other, "watcher took over")
        .unwrap();

    let item = &store.pending_digest().unwrap()[0];
    assert_eq!(item.text.chars().count(), 200);
    assert!(item.text.ends_with('…'));

    let events = store
        .events(&EventFilter {
            kind: Some("digest-queued".into()),
            ..EventFilter::default()
        })
        .unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].job.as_deref(), Some("collect"));
    assert_eq!(events[0].reason.as_deref(), Some("machine-restart"));
    assert_eq!(events[1].job, None);
    assert_eq!(events[1].reason.as_deref(), Some("other"));
    // The text itself never reaches the event log.
    assert!(
        events
            .iter()
            .all(|e| !e.reason.as_deref().unwrap_or("").contains("xxx"))
    );
}

#[test]
fn a_report_groups_by_job_counts_each_category_and_puts_jobless_items_last() {
    let sandbox = Sandbox::new();
    let mut store = sandbox.store();
    queue(
        &mut store,
        "2025-05-01T01:00:00Z",
        Some("train"),
        StallSeen,
        "no progress for 20m",
    );
    queue(
        &mut store,
        "2025-05-01T02:00:00Z",
        Some("collect"),
        Suppressed,
        "cooldown: 4m left",
    );
    queue(
        &mut store,
        "2025-05-01T01:30:00Z",
        Some("collect"),
        MachineRestart,
        "restarted (503s)",
    );
    queue(
        &mut store,
        "2025-05-01T03:00:00Z",
        Some("collect"),
        Suppressed,
        "duplicate claim",
    );
    queue(
        &mut store,
        "2025-05-01T04:00:00Z",
        None,
        Other,
        "watcher took over",
    );
    queue(
        &mut store,
        "2025-05-01T05:00:00Z",
        Some("train"),
        Completed,
        "ran to the end",
    );
    store.cut_digest(at("2025-05-01T09:00:00Z")).unwrap();

    let digests = store.digests(false).unwrap();
    let report = report(&digests[0].items, &[]);
    assert_eq!(report.items, 6);
    assert_eq!(report.suppressed, 2);
    assert_eq!(report.baseline, None);
    assert!(report.callouts.is_empty(), "{:?}", report.callouts);

    let jobs: Vec<&str> = report.jobs.iter().map(|j| j.label()).collect();
    assert_eq!(jobs, vec!["collect", "train", "(all jobs)"]);
    let counts = |i: usize| {
        report.jobs[i]
            .counts
            .iter()
            .map(|(c, n)| (c.as_str(), *n))
            .collect::<Vec<_>>()
    };
    assert_eq!(counts(0), vec![("machine-restart", 1), ("suppressed", 2)]);
    assert_eq!(counts(1), vec![("stall-seen", 1), ("completed", 1)]);
    assert_eq!(counts(2), vec![("other", 1)]);
    // Oldest first within a job, whatever order they were queued in.
    let collect: Vec<&str> = report.jobs[0]
        .items
        .iter()
        .map(|i| i.text.as_str())
        .collect();
    assert_eq!(
        collect,
        vec!["restarted (503s)", "cooldown: 4m left", "duplicate claim"]
    );

    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["jobs"][0]["counts"]["suppressed"], 2);
    assert_eq!(json["jobs"][2]["job"], Value::Null);
    assert_eq!(
        json["jobs"][0]["items"][0]["at"],
        "2025-05-01T01:30:00.000Z"
    );
}

#[test]
fn a_sudden_rise_in_suppressions_is_called_out_and_names_the_job_behind_it() {
    let sandbox = Sandbox::new();
    let mut store = sandbox.store();
    suppression_history(&mut store, [2, 3, 2], 25);
    let digests = store.digests(true).unwrap();
    assert_eq!(digests.len(), 4);
    let report = report(&digests[0].items, &digests[1..]);
    assert_eq!(report.suppressed, 25);
    assert_eq!(report.baseline, Some(2.0));
    assert_eq!(report.compared_with, 3);
    assert_eq!(
        report.callouts[0],
        "suppressions rose to 25 (2 a day before, the median of the previous 3 digests): \
         retries may be growing upstream — look at what retries; mostly 'collect' (20 of 25)"
    );
    let collect = &report.jobs[0];
    assert_eq!(collect.label(), "collect");
    assert!(
        collect
            .callout
            .as_deref()
            .is_some_and(|c| c.contains("look at what 'collect' retries")),
        "{:?}",
        collect.callout
    );
}

#[test]
fn a_steady_rate_of_suppressions_is_not_called_out() {
    let sandbox = Sandbox::new();
    let mut store = sandbox.store();
    suppression_history(&mut store, [20, 22, 19], 24);
    let digests = store.digests(true).unwrap();
    let report = report(&digests[0].items, &digests[1..]);
    assert_eq!(report.suppressed, 24);
    assert!(report.callouts.is_empty(), "{:?}", report.callouts);
    assert!(report.jobs.iter().all(|j| j.callout.is_none()));
}

#[test]
fn many_suppressions_on_the_first_day_are_called_out_without_a_baseline() {
    let items: Vec<_> = {
        let sandbox = Sandbox::new();
        let mut store = sandbox.store();
        for i in 0..10 {
            queue(
                &mut store,
                &format!("2025-05-01T03:{i:02}:00Z"),
                Some("collect"),
                Suppressed,
                "cap reached",
            );
        }
        store.pending_digest().unwrap()
    };
    assert!(report(&items[..9], &[]).callouts.is_empty());
    let report = report(&items, &[]);
    assert_eq!(
        report.callouts,
        vec![
            "10 suppressions, with no earlier digest to compare: retries may be growing \
             upstream — look at what retries"
        ]
    );
}

#[test]
fn a_digest_is_delivered_once_and_the_delivery_is_recorded() {
    let sandbox = Sandbox::new();
    let mut store = sandbox.store();
    queue(
        &mut store,
        "2025-05-01T02:00:00Z",
        Some("collect"),
        Completed,
        "ran to the end",
    );
    let id = store
        .cut_digest(at("2025-05-01T09:00:00Z"))
        .unwrap()
        .unwrap();

    assert!(store.mark_digest_delivered(id).unwrap());
    assert!(
        !store.mark_digest_delivered(id).unwrap(),
        "a second delivery"
    );
    assert!(
        !store.mark_digest_delivered(id + 100).unwrap(),
        "an unknown digest"
    );

    assert!(store.digests(false).unwrap().is_empty());
    let all = store.digests(true).unwrap();
    assert!(all[0].delivered.is_some());
    assert_eq!(all[0].items.len(), 1, "a delivered digest keeps its items");

    let delivered = store
        .events(&EventFilter {
            kind: Some("digest-delivered".into()),
            ..EventFilter::default()
        })
        .unwrap();
    assert_eq!(delivered.len(), 1);
    assert_eq!(
        delivered[0].reason.as_deref(),
        Some(format!("digest #{id}").as_str())
    );
    assert_eq!(delivered[0].actor, Actor::Watcher);
}

#[test]
fn the_next_cut_is_the_next_local_digest_at_across_midnight() {
    let tokyo = FixedOffset::east_opt(9 * 3600).unwrap();
    let new_york = FixedOffset::west_opt(4 * 3600).unwrap();
    // (after, zone, digest_at, next cut)
    let rows = [
        // 08:59 in Tokyo: today's 09:00, which is the previous UTC day's 00:00.
        (
            "2025-05-01T23:59:00Z",
            tokyo,
            time(9, 0),
            "2025-05-02T00:00:00Z",
        ),
        // Exactly at the cut: strictly after means tomorrow's.
        (
            "2025-05-02T00:00:00Z",
            tokyo,
            time(9, 0),
            "2025-05-03T00:00:00Z",
        ),
        (
            "2025-05-02T00:00:00.001Z",
            tokyo,
            time(9, 0),
            "2025-05-03T00:00:00Z",
        ),
        // Midnight itself as the digest time.
        (
            "2025-05-01T14:59:59Z",
            tokyo,
            time(0, 0),
            "2025-05-01T15:00:00Z",
        ),
        (
            "2025-05-01T15:00:00Z",
            tokyo,
            time(0, 0),
            "2025-05-02T15:00:00Z",
        ),
        // 23:30 in New York is 03:30 UTC the next day.
        (
            "2025-05-01T20:00:00Z",
            new_york,
            time(23, 30),
            "2025-05-02T03:30:00Z",
        ),
        (
            "2025-05-02T03:30:00Z",
            new_york,
            time(23, 30),
            "2025-05-03T03:30:00Z",
        ),
        // 03:00 UTC on the 2nd is still 23:00 on the 1st in New York: its next 00:30 is
        // 04:30 UTC, the same UTC day.
        (
            "2025-05-02T03:00:00Z",
            new_york,
            time(0, 30),
            "2025-05-02T04:30:00Z",
        ),
    ];
    for (after, zone, digest_at, expected) in rows {
        assert_eq!(
            next_cut_in(at(after), digest_at, &zone),
            at(expected),
            "after {after} at {digest_at} in {zone}"
        );
    }
}

/// Central European time in 2025 with a fixed rule: +01:00, and +02:00 from 30 March 01:00
/// UTC to 26 October 01:00 UTC. chrono-tz is not a dependency, so the rule is written here.
#[derive(Debug, Clone, Copy)]
struct CentralEurope2025;

impl CentralEurope2025 {
    fn winter() -> FixedOffset {
        FixedOffset::east_opt(3600).unwrap()
    }

    fn summer() -> FixedOffset {
        FixedOffset::east_opt(7200).unwrap()
    }

    fn at_utc(utc: &NaiveDateTime) -> FixedOffset {
        let starts = at("2025-03-30T01:00:00Z").naive_utc();
        let ends = at("2025-10-26T01:00:00Z").naive_utc();
        if (starts..ends).contains(utc) {
            Self::summer()
        } else {
            Self::winter()
        }
    }
}

impl TimeZone for CentralEurope2025 {
    type Offset = FixedOffset;

    fn from_offset(_: &FixedOffset) -> Self {
        CentralEurope2025
    }

    fn offset_from_local_date(&self, local: &NaiveDate) -> MappedLocalTime<FixedOffset> {
        self.offset_from_local_datetime(&local.and_time(NaiveTime::MIN))
    }

    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> MappedLocalTime<FixedOffset> {
        // Summer first: of two readings, it is the earlier instant.
        let fits: Vec<FixedOffset> = [Self::summer(), Self::winter()]
            .into_iter()
            .filter(|offset| {
                let utc = *local - TimeDelta::seconds(i64::from(offset.local_minus_utc()));
                Self::at_utc(&utc) == *offset
            })
            .collect();
        match fits[..] {
            [] => MappedLocalTime::None,
            [one] => MappedLocalTime::Single(one),
            [earlier, later, ..] => MappedLocalTime::Ambiguous(earlier, later),
        }
    }

    fn offset_from_utc_date(&self, utc: &NaiveDate) -> FixedOffset {
        Self::at_utc(&utc.and_time(NaiveTime::MIN))
    }

    fn offset_from_utc_datetime(&self, utc: &NaiveDateTime) -> FixedOffset {
        Self::at_utc(utc)
    }
}

#[test]
fn the_next_cut_follows_the_wall_clock_across_dst() {
    let zone = CentralEurope2025;
    // (after, digest_at, next cut)
    let rows = [
        // 09:00 stays 09:00 on the wall: 08:00 UTC in winter, 07:00 UTC the day after.
        ("2025-03-29T08:00:00Z", time(9, 0), "2025-03-30T07:00:00Z"),
        // 02:30 does not exist on 30 March (02:00 jumps to 03:00): the cut happens at the
        // jump, 03:00 CEST, and the day is not skipped.
        ("2025-03-29T02:00:00Z", time(2, 30), "2025-03-30T01:00:00Z"),
        ("2025-03-30T01:00:00Z", time(2, 30), "2025-03-31T00:30:00Z"),
        // 02:30 happens twice on 26 October: the first one counts...
        ("2025-10-25T12:00:00Z", time(2, 30), "2025-10-26T00:30:00Z"),
        // ...and once cut, the second one is not another day's cut.
        ("2025-10-26T00:30:00Z", time(2, 30), "2025-10-27T01:30:00Z"),
        ("2025-10-26T06:00:00Z", time(9, 0), "2025-10-26T08:00:00Z"),
    ];
    for (after, digest_at, expected) in rows {
        assert_eq!(
            next_cut_in(at(after), digest_at, &zone),
            at(expected),
            "after {after} at {digest_at}"
        );
    }
}

#[test]
fn the_command_says_when_nothing_is_cut_yet_and_shows_the_queue() {
    let sandbox = Sandbox::new();
    let (code, stdout, stderr) = sandbox.digest("UTC", &[]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("no digest cut yet; the next cut is at 09:00 UTC, "),
        "{stdout}"
    );
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("pending: 0 items not cut yet; the next cut is at 09:00 UTC, "),
        "{stdout}"
    );

    let mut store = sandbox.store();
    queue(
        &mut store,
        "2025-05-01T02:00:00Z",
        Some("collect"),
        StallSeen,
        "no progress for 12m",
    );
    queue(
        &mut store,
        "2025-05-01T03:00:00Z",
        None,
        Other,
        "watcher took over",
    );
    let (code, stdout, _) = sandbox.digest("UTC", &[]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("\nthe queue so far:\ncollect — 1 stall-seen\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  05-01 02:00  stall-seen       no progress for 12m\n"),
        "{stdout}"
    );
    assert!(stdout.contains("(all jobs) — 1 other\n"), "{stdout}");
    assert!(
        stdout
            .lines()
            .last()
            .unwrap()
            .starts_with("pending: 2 items not cut yet;"),
        "{stdout}"
    );
}

#[test]
fn the_command_shows_the_newest_undelivered_digest_in_local_time_and_stays_read_only() {
    let sandbox = Sandbox::new();
    let mut store = sandbox.store();
    suppression_history(&mut store, [2, 3, 2], 25);
    queue(
        &mut store,
        "2025-05-04T10:00:00Z",
        Some("train"),
        Completed,
        "ran to the end",
    );

    let (code, stdout, stderr) = sandbox.digest("JST-9", &[]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        "digest #4 · cut 2025-05-04 18:00 JST (2025-05-04 09:00 UTC) · 25 items · not \
         delivered yet"
    );
    assert!(
        lines[1].starts_with("! suppressions rose to 25 (2 a day before"),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("! 'train': suppressions rose to 5 (none a day before"),
        "{stdout}"
    );
    assert_eq!(lines[3], "collect — 20 suppressed");
    // Twenty identical duplicates read as one line.
    assert!(
        stdout.contains(
            "  05-04 12:00  suppressed       duplicate restart claim  ×20, last 05-04 12:23"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n3 older digests not delivered yet: mihari digest --all\n"),
        "{stdout}"
    );
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("pending: 1 item not cut yet; the next cut is at 09:00 JST, ")
    );

    // Printing delivered nothing.
    assert_eq!(store.digests(false).unwrap().len(), 4);
    let delivered = store
        .events(&EventFilter {
            kind: Some("digest-delivered".into()),
            ..EventFilter::default()
        })
        .unwrap();
    assert!(delivered.is_empty());

    // Once read in the dashboard, the next older unread one is the newest undelivered.
    let newest = store.digests(false).unwrap()[0].id;
    store.mark_digest_delivered(newest).unwrap();
    let (_, stdout, _) = sandbox.digest("UTC", &[]);
    assert!(
        stdout.starts_with("digest #3 · cut 2025-05-03 09:00 UTC"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("! "),
        "a steady day has no callout: {stdout}"
    );
}

#[test]
fn all_shows_every_digest_newest_first_and_the_queue() {
    let sandbox = Sandbox::new();
    let mut store = sandbox.store();
    suppression_history(&mut store, [1, 1, 1], 1);
    for digest in store.digests(false).unwrap() {
        store.mark_digest_delivered(digest.id).unwrap();
    }
    queue(
        &mut store,
        "2025-05-04T10:00:00Z",
        Some("train"),
        Completed,
        "ran to the end",
    );

    let (code, stdout, _) = sandbox.digest("UTC", &[]);
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with(
            "no digest waiting: the newest, #4 cut 2025-05-04 09:00 UTC, was delivered "
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nthe queue so far:\ntrain — 1 completed\n"),
        "{stdout}"
    );

    let (code, stdout, _) = sandbox.digest("UTC", &["--all"]);
    assert_eq!(code, 0);
    let headers: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("digest #"))
        .collect();
    assert_eq!(headers.len(), 4, "{stdout}");
    for (header, id) in headers.iter().zip(["#4", "#3", "#2", "#1"]) {
        assert!(
            header.starts_with(&format!("digest {id} · cut ")),
            "{header}"
        );
        assert!(header.contains(" · delivered "), "{header}");
    }
    assert!(
        stdout.contains("\nnot cut yet:\ntrain — 1 completed\n"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .last()
            .unwrap()
            .starts_with("pending: 1 item not cut yet;")
    );
}

#[test]
fn json_is_one_object_per_digest_and_the_queue_with_a_null_id() {
    let sandbox = Sandbox::new();
    let (code, stdout, _) = sandbox.digest("UTC", &["--json"]);
    assert_eq!(code, 0);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "only the empty queue: {stdout}");
    assert_eq!(lines[0]["id"], Value::Null);
    assert_eq!(lines[0]["items"], 0);
    assert!(lines[0]["next_cut"].as_str().unwrap().ends_with(":00.000Z"));

    let mut store = sandbox.store();
    suppression_history(&mut store, [2, 3, 2], 25);
    queue(
        &mut store,
        "2025-05-04T10:00:00Z",
        Some("train"),
        Completed,
        "ran to the end",
    );

    let (_, stdout, _) = sandbox.digest("UTC", &["--json"]);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        2,
        "the newest undelivered digest and the queue: {stdout}"
    );
    let newest = &lines[0];
    assert_eq!(newest["id"], 4);
    assert_eq!(newest["cut"], "2025-05-04T09:00:00.000Z");
    assert_eq!(newest["delivered"], Value::Null);
    assert_eq!(newest["suppressed"], 25);
    assert!(
        newest["callouts"][0]
            .as_str()
            .unwrap()
            .starts_with("suppressions rose to 25")
    );
    assert_eq!(newest["jobs"][0]["job"], "collect");
    assert_eq!(newest["jobs"][0]["counts"]["suppressed"], 20);
    assert_eq!(newest["jobs"][0]["items"].as_array().unwrap().len(), 20);
    let item = &newest["jobs"][0]["items"][0];
    assert_eq!(item["at"], "2025-05-04T03:00:00.000Z");
    assert_eq!(item["category"], "suppressed");
    assert_eq!(item["text"], "duplicate restart claim");
    assert_eq!(lines[1]["id"], Value::Null);
    assert_eq!(lines[1]["jobs"][0]["job"], "train");

    let (_, stdout, _) = sandbox.digest("UTC", &["--json", "--all"]);
    let ids: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].clone())
        .collect();
    assert_eq!(
        ids,
        vec![4.into(), 3.into(), 2.into(), 1.into(), Value::Null]
    );
}

#[test]
fn hostile_text_in_items_comes_out_inert() {
    let sandbox = Sandbox::new();
    let mut store = sandbox.store();
    let hostile = "\u{1b}]0;pwned\u{7}\u{1b}[2Jretry storm\r\n\u{202e}gnol\u{9b}31m";
    queue(
        &mut store,
        "2025-05-01T02:00:00Z",
        Some("evil\u{1b}[31mjob"),
        Suppressed,
        hostile,
    );
    // Written around the store, as an older or broken writer might have.
    store
        .connection()
        .execute(
            "INSERT INTO digest_items (at_ms, job, category, text) VALUES (?1, ?2, 'timeout', ?3)",
            rusqlite::params![
                at("2025-05-01T03:00:00Z").timestamp_millis(),
                "evil\u{7}",
                hostile
            ],
        )
        .unwrap();
    let stored = &store.pending_digest().unwrap()[0];
    assert!(is_inert(&stored.text), "{:?}", stored.text);
    assert!(stored.text.contains("retry storm"));

    for args in [&[][..], &["--all"][..]] {
        let (code, stdout, _) = sandbox.digest("UTC", args);
        assert_eq!(code, 0);
        assert!(stdout.lines().all(is_inert), "{stdout:?}");
        assert!(stdout.contains("retry storm"), "{stdout}");
        assert!(!stdout.contains("pwned"), "{stdout}");
    }
    let (_, stdout, _) = sandbox.digest("UTC", &["--json"]);
    let queue: Value = serde_json::from_str(stdout.trim()).unwrap();
    let strings = [
        &queue["jobs"][0]["job"],
        &queue["jobs"][0]["items"][0]["text"],
        &queue["jobs"][1]["items"][0]["text"],
    ];
    for text in strings {
        let text = text.as_str().unwrap_or_else(|| panic!("{queue}"));
        assert!(is_inert(text), "{text:?}");
    }
}

#[test]
fn a_store_that_cannot_be_opened_exits_3_with_the_reason() {
    let sandbox = Sandbox::new();
    fs::write(sandbox.path("state"), "not a folder").unwrap();
    let (code, stdout, stderr) = sandbox.digest("UTC", &[]);
    assert_eq!(code, 3);
    assert!(stdout.is_empty());
    assert!(stderr.contains("is not a folder"), "{stderr}");

    let missing = Command::new(BIN)
        .args(["digest", "--config"])
        .arg(sandbox.path("missing.yaml"))
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(3));
}

#[test]
fn a_last_cut_in_the_future_is_counted_as_now_and_said() {
    use mihari::core::digest::{cut_counted_from, next_cut_bounded};
    let now = at("2026-12-01T12:00:00Z");
    let jumped = Some(
        "the last digest is stamped 2028-01-05, in the future: the clock jumped; cutting from now"
            .to_string(),
    );
    // (last cut, oldest item waiting, counted from, words)
    let rows = [
        (None, None, now, None),
        (
            None,
            Some("2026-11-30T08:00:00Z"),
            at("2026-11-30T08:00:00Z"),
            None,
        ),
        // An item stamped by a clock ahead is not counted from either.
        (None, Some("2028-01-05T08:00:00Z"), now, None),
        (
            Some("2026-12-01T09:00:00Z"),
            None,
            at("2026-12-01T09:00:00Z"),
            None,
        ),
        (Some("2026-12-01T12:00:00Z"), None, now, None),
        (Some("2028-01-05T09:00:00Z"), None, now, jumped.clone()),
        (
            Some("2028-01-05T09:00:00Z"),
            Some("2026-12-01T10:00:00Z"),
            at("2026-12-01T10:00:00Z"),
            jumped.clone(),
        ),
        (Some("2026-12-01T12:00:00.001Z"), None, now, {
            Some("the last digest is stamped 2026-12-01, in the future: the clock jumped; cutting from now".to_string())
        }),
    ];
    for (last, oldest, from, words) in rows {
        assert_eq!(
            cut_counted_from(last.map(at), oldest.map(at), now),
            (from, words),
            "last cut {last:?}, oldest waiting {oldest:?}"
        );
    }
    // A next cut worked out while the clock was ahead comes back to the next digest_at.
    let utc = Utc;
    for (planned, expected) in [
        ("2028-01-06T09:00:00Z", "2026-12-02T09:00:00Z"),
        ("2026-12-02T09:00:00Z", "2026-12-02T09:00:00Z"),
        ("2026-12-01T09:00:00Z", "2026-12-01T09:00:00Z"),
    ] {
        assert_eq!(
            next_cut_bounded(at(planned), now, time(9, 0), &utc),
            at(expected),
            "planned {planned}"
        );
    }
}

/// Round three, item 8: one watcher pass with the clock far ahead (`faketime +400d`) cut a
/// digest stamped 2028; after it, passes with the right clock never cut one again, and the
/// items queued and the paused-job reminders were never delivered. A last cut in the future
/// is counted as now, and said.
#[test]
fn a_pass_with_the_clock_far_ahead_does_not_stop_the_digests_after_it() {
    let sandbox = Sandbox::new();
    let config = sandbox.config();
    let mihari = |faked: Option<&str>, args: &[&str]| {
        let mut command = match faked {
            Some(offset) => {
                let mut faketime = Command::new("faketime");
                faketime.args(["-f", offset, BIN]);
                faketime
            }
            None => Command::new(BIN),
        };
        let output = command
            .arg("--config")
            .arg(&config)
            .args(args)
            .env("TZ", "UTC")
            .output()
            .expect("mihari runs (apt-get install -y faketime)");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, _, stderr) = mihari(
        None,
        &["pause", "collect", "--reason", "disk swap", "--yes"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    sandbox
        .store()
        .queue_digest_at(
            Utc::now() - TimeDelta::days(2),
            Some("collect"),
            Other,
            "queued before the jump",
        )
        .expect("queued");
    let (_, _, stderr) = mihari(Some("+400d"), &["watch", "--once"]);
    let digests = sandbox.store().digests(true).expect("digests");
    assert_eq!(
        digests.len(),
        1,
        "the pass with the clock ahead cut one: {stderr}"
    );
    let stamped = digests[0].cut;
    assert!(stamped > Utc::now() + TimeDelta::days(300), "{stamped}");

    sandbox
        .store()
        .queue_digest(Some("collect"), Other, "queued once the clock was right")
        .expect("queued");
    let (_, _, stderr) = mihari(None, &["watch", "--once"]);
    let words = format!(
        "the last digest is stamped {}, in the future: the clock jumped; cutting from now",
        stamped.format("%Y-%m-%d")
    );
    assert!(stderr.contains(&words), "{stderr}");
    let events = sandbox
        .store()
        .events(&EventFilter::default())
        .expect("events");
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some(words.as_str())),
        "said in the event log too"
    );

    // A day on, with the clock right: the digest is cut, with what queued and the reminder
    // that the job stays paused.
    let (_, _, stderr) = mihari(Some("+1d"), &["watch", "--once"]);
    let digests = sandbox.store().digests(true).expect("digests");
    assert_eq!(digests.len(), 2, "a digest is cut again: {stderr}");
    let cut = digests
        .iter()
        .find(|d| d.cut < Utc::now() + TimeDelta::days(2))
        .expect("the digest cut with the right clock");
    let texts: Vec<&str> = cut.items.iter().map(|i| i.text.as_str()).collect();
    assert!(
        texts.contains(&"queued once the clock was right"),
        "{texts:?}"
    );
    assert!(
        cut.items
            .iter()
            .any(|i| i.category == DigestCategory::Paused),
        "the paused job is named: {texts:?}"
    );
    assert!(
        sandbox
            .store()
            .pending_digest()
            .expect("pending")
            .is_empty()
    );
}
