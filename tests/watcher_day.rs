//! A scripted day: 20 jobs, faults injected at set times, the watcher's brain judging every
//! five minutes on a controllable clock. Only the four kinds of things are escalated, each
//! once per episode; everything else lands in one digest, cut at `digest_at`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::{DateTime, Duration, NaiveTime, TimeZone, Utc};
use mihari::config::{JobSpec, Predicate, RestartSpec, Timeouts};
use mihari::core::escalate::EscalationKind;
use mihari::core::watch::Brain;
use mihari::core::{
    CheckOutcome, CheckResult, Evidence, FileStamp, History, LineCount, Liveness, LockHolder,
    PendingApproval, Reading,
};
use mihari::engine::Snapshot;
use mihari::store::digest::DigestCategory;
use mihari::store::{Actor, Store};

fn midnight() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 0, 0, 0).unwrap()
}

fn at(hours: i64, minutes: i64) -> DateTime<Utc> {
    midnight() + Duration::minutes(hours * 60 + minutes)
}

fn job(i: usize) -> JobSpec {
    JobSpec {
        id: format!("j{i:02}"),
        name: None,
        owner: None,
        workspace: None,
        lock: Some(PathBuf::from(format!("/run/j{i:02}.lock"))),
        log: Some(PathBuf::from(format!("/var/log/j{i:02}.log"))),
        progress_file: Some(PathBuf::from(format!("/data/j{i:02}.jsonl"))),
        progress_table: None,
        manifest: None,
        log_progress: None,
        process: None,
        kept_lock: None,
        stall_sec: 900,
        expected_total: Some(1000),
        should_run_when: vec![Predicate::NotComplete],
        resource_lock: None,
        auto_restart: false,
        auto_restart_reason: None,
        auto_restart_blocked_reason: Some("cause not understood".into()),
        restart: Some(RestartSpec {
            command: Some(vec!["true".into()]),
            cwd: None,
            env: Default::default(),
            routes: vec![],
        }),
        checks: vec![],
        timeouts: Timeouts::default(),
        stall_never: false,
        io_progress: true,
        markers: Vec::new(),
        slurm: None,
        schedule: None,
    }
}

fn holder(liveness: Liveness, started: DateTime<Utc>) -> Option<Reading<LockHolder>> {
    Some(Reading::Found(LockHolder {
        pid: Some(4000),
        recorded_start: Some(1),
        cmdline: None,
        run_id: None,
        modified: started,
        liveness,
        why: if liveness == Liveness::Dead {
            "no such process".into()
        } else {
            "start time matches".into()
        },
        started_at: (liveness == Liveness::Alive).then_some(started),
        start_ticks: (liveness == Liveness::Alive).then_some(1),
        stopped: false,
    }))
}

/// A job alive and writing progress up to `last`.
fn running(last: DateTime<Utc>, done: u64) -> Evidence {
    Evidence {
        lock: holder(Liveness::Alive, midnight()),
        log: Some(Reading::Found(FileStamp {
            modified: last,
            len: 100,
            carried: None,
        })),
        progress_file: Some(Reading::Found(LineCount {
            modified: last,
            done,
        })),
        ..Evidence::default()
    }
}

fn dead(since: DateTime<Utc>, done: u64) -> Evidence {
    Evidence {
        lock: holder(Liveness::Dead, since),
        log: Some(Reading::Found(FileStamp {
            modified: since,
            len: 100,
            carried: None,
        })),
        progress_file: Some(Reading::Found(LineCount {
            modified: since,
            done,
        })),
        ..Evidence::default()
    }
}

fn stopped(since: DateTime<Utc>, done: u64) -> Evidence {
    Evidence {
        lock: Some(Reading::Empty),
        log: Some(Reading::Found(FileStamp {
            modified: since,
            len: 100,
            carried: None,
        })),
        progress_file: Some(Reading::Found(LineCount {
            modified: since,
            done,
        })),
        ..Evidence::default()
    }
}

/// The simulated world: what each job's evidence is at `now`, given the machine's restarts
/// so far (a job the machine restarted runs again).
struct World {
    jobs: Vec<JobSpec>,
    /// The times the machine restarted each job.
    restarts: BTreeMap<String, Vec<DateTime<Utc>>>,
    /// j08 keeps dying: each machine restart lives five minutes.
    j11_refused: bool,
}

impl World {
    fn new() -> World {
        let mut jobs: Vec<JobSpec> = (0..20).map(job).collect();
        for auto in [7, 8, 11] {
            jobs[auto].auto_restart = true;
            jobs[auto].auto_restart_reason = Some("cause known: upstream 503s".into());
        }
        jobs[9].checks = vec![mihari::config::CheckSpec {
            name: "no_gaps".into(),
            command: vec!["true".into()],
            every_sec: 300,
            timeout_sec: 30,
        }];
        jobs[14].timeouts.attempt_sec = Some(14 * 3600);
        World {
            jobs,
            restarts: BTreeMap::new(),
            j11_refused: false,
        }
    }

    fn evidence(&self, now: DateTime<Utc>) -> Vec<Evidence> {
        let fresh = now - Duration::seconds(30);
        let restarted_at = |id: &str| self.restarts.get(id).and_then(|r| r.last().copied());
        (0..20)
            .map(|i| {
                let mut seen = match i {
                    // Stalls from 02:00 to 03:00.
                    5 if now >= at(2, 0) && now < at(3, 0) => running(at(2, 0), 100),
                    // Dies at 04:00, a human restarts it at 05:00; dies again at 10:00 and
                    // stays dead: two episodes.
                    6 if (now >= at(4, 0) && now < at(5, 0)) || now >= at(10, 0) => dead(
                        if now >= at(10, 0) {
                            at(10, 0)
                        } else {
                            at(4, 0)
                        },
                        300,
                    ),
                    // Dies at 06:00; the machine restarts it.
                    7 if now >= at(6, 0) && restarted_at("j07").is_none_or(|r| r < at(6, 0)) => {
                        dead(at(6, 0), 300)
                    }
                    // Dies at 07:00, and again five minutes after each machine restart.
                    8 if now >= at(7, 0) => match restarted_at("j08") {
                        Some(r) if now < r + Duration::minutes(5) => running(fresh, 200),
                        Some(r) => dead(r + Duration::minutes(5), 200),
                        None => dead(at(7, 0), 200),
                    },
                    // Its check fails from 08:00 to 09:00.
                    9 => {
                        let mut seen = running(fresh, 500);
                        if now >= at(8, 0) && now < at(9, 0) {
                            seen.checks = vec![CheckOutcome {
                                name: "no_gaps".into(),
                                result: CheckResult::Fail,
                                detail: "exit 1: gap at shard 120".into(),
                                at: now,
                            }];
                        }
                        seen
                    }
                    // Asks approval to publish from 11:00 to 11:30.
                    10 => {
                        let mut seen = running(fresh, 600);
                        if now >= at(11, 0) && now < at(11, 30) {
                            seen.pending_approvals = vec![PendingApproval {
                                key: "k-publish".into(),
                                step: "publish".into(),
                                summary: "publish 3 articles".into(),
                                requested: at(11, 0),
                                requested_by: None,
                            }];
                        }
                        seen
                    }
                    // Stops at 13:00; the machine's restart is refused (no route left).
                    11 if now >= at(13, 0) => stopped(at(13, 0), 700),
                    // Completes at 12:00.
                    12 if now >= at(12, 0) => stopped(at(12, 0), 1000),
                    // A lock nobody can judge from 15:00: STALE, never escalated.
                    13 if now >= at(15, 0) => Evidence {
                        lock: Some(Reading::Found(LockHolder {
                            liveness: Liveness::Unknown,
                            why: "permission denied".into(),
                            ..match holder(Liveness::Unknown, midnight()) {
                                Some(Reading::Found(h)) => h,
                                _ => unreachable!(),
                            }
                        })),
                        ..running(fresh, 50)
                    },
                    _ => running(fresh, 10 * i as u64),
                };
                let id = format!("j{i:02}");
                seen.started_before = true;
                seen.history = History {
                    attempt_started: Some(midnight()),
                    auto_spawns_24h: self.restarts.get(&id).cloned().unwrap_or_default(),
                    ..History::default()
                };
                seen
            })
            .collect()
    }
}

#[test]
fn a_scripted_day_escalates_only_the_four_kinds_once_per_episode_and_digests_the_rest() {
    let mut world = World::new();
    let cap = 2;
    let mut brain = Brain::default();
    let mut escalations: Vec<(String, EscalationKind, DateTime<Utc>)> = Vec::new();
    let mut digest: Vec<(DateTime<Utc>, Option<String>, DigestCategory, String)> = Vec::new();
    let mut passes = 0;
    let mut now = midnight();
    while now < midnight() + Duration::hours(24) {
        let snapshot = Snapshot::judge(&world.jobs, world.evidence(now), now);
        let history = |id: &str| {
            snapshot
                .evidence_of(id)
                .map(|e| e.history.clone())
                .unwrap_or_default()
        };
        let pass = brain.pass(
            &snapshot.list,
            &world.jobs,
            &history,
            &|_| false,
            cap,
            &[],
            now,
        );
        passes += 1;
        for condition in &pass.escalate {
            escalations.push((condition.job.clone(), condition.kind, now));
        }
        for (job, category, text) in &pass.digest {
            digest.push((
                now,
                job.clone(),
                DigestCategory::parse(category).unwrap(),
                text.clone(),
            ));
        }
        // The watcher's hands: restart what the brain allows, except j11, whose restart is
        // refused (every route used).
        for job in &pass.restarts {
            if job == "j11" {
                // Told at once, as the watcher does with what `cannot_restart` returns.
                if let Some(condition) =
                    brain.cannot_restart(job, "every route has been used by this run")
                {
                    escalations.push((condition.job, condition.kind, now));
                }
                world.j11_refused = true;
                continue;
            }
            world.restarts.entry(job.clone()).or_default().push(now);
            digest.push((
                now,
                Some(job.clone()),
                DigestCategory::MachineRestart,
                "restarted".into(),
            ));
        }
        for job in &pass.capped {
            digest.push((
                now,
                Some(job.clone()),
                DigestCategory::Suppressed,
                "cap spent".into(),
            ));
        }
        now += Duration::minutes(5);
    }
    assert_eq!(passes, 288);

    let count = |kind: EscalationKind| escalations.iter().filter(|e| e.1 == kind).count();
    let told: Vec<(String, EscalationKind)> = escalations
        .iter()
        .map(|(j, k, _)| (j.clone(), *k))
        .collect();
    // j06 twice (two episodes), only a human may restart it.
    assert_eq!(count(EscalationKind::HumanOnly), 2, "{told:?}");
    assert!(
        escalations
            .iter()
            .all(|e| e.1 != EscalationKind::HumanOnly || e.0 == "j06")
    );
    // The failing check of j09, and j08's spent cap.
    assert_eq!(count(EscalationKind::BrokenRule), 2, "{told:?}");
    assert!(told.contains(&("j09".into(), EscalationKind::BrokenRule)));
    assert!(told.contains(&("j08".into(), EscalationKind::BrokenRule)));
    // j10's publish.
    assert_eq!(count(EscalationKind::Irreversible), 1, "{told:?}");
    // j11, which the machine may restart but cannot.
    assert_eq!(count(EscalationKind::Unrestartable), 1, "{told:?}");
    assert!(world.j11_refused);
    assert_eq!(escalations.len(), 6, "{told:?}");
    // Nothing about the stalled j05, the machine-restarted j07, the complete j12, the unknown
    // j13 or the timed-out j14 interrupted anyone.
    for quiet in ["j05", "j07", "j12", "j13", "j14"] {
        assert!(
            !told.iter().any(|(j, _)| j == quiet),
            "{quiet} escalated: {told:?}"
        );
    }
    // The cap held: two machine restarts of j08, then suppressions.
    assert_eq!(world.restarts["j08"].len(), cap as usize);
    assert_eq!(world.restarts["j07"].len(), 1);

    // Everything else goes into one digest, cut at 09:00 the next morning.
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), Actor::Watcher).unwrap();
    for (at, job, category, text) in &digest {
        store
            .queue_digest_at(*at, job.as_deref(), *category, text)
            .unwrap();
    }
    let cut = mihari::store::digest::next_cut(
        midnight() + Duration::hours(23),
        NaiveTime::from_hms_opt(9, 0, 0).unwrap(),
    );
    let id = store.cut_digest(cut).unwrap().expect("a digest");
    let digests = store.digests(true).unwrap();
    assert_eq!(digests.len(), 1, "one digest");
    assert_eq!(digests[0].id, id);
    let by = |category: DigestCategory| {
        digests[0]
            .items
            .iter()
            .filter(|i| i.category == category)
            .map(|i| i.job.clone().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    assert_eq!(by(DigestCategory::StallSeen), ["j05"]);
    assert_eq!(by(DigestCategory::Completed), ["j12"]);
    assert_eq!(by(DigestCategory::Timeout), ["j14"]);
    assert_eq!(by(DigestCategory::MachineRestart), ["j07", "j08", "j08"]);
    assert!(!by(DigestCategory::Suppressed).is_empty());
    assert!(by(DigestCategory::Suppressed).iter().all(|j| j == "j08"));
    println!(
        "scripted day: {} passes, {} escalations ({} human-only, {} broken-rule, {} irreversible, \
         {} unrestartable), {} digest items in one digest",
        passes,
        escalations.len(),
        count(EscalationKind::HumanOnly),
        count(EscalationKind::BrokenRule),
        count(EscalationKind::Irreversible),
        count(EscalationKind::Unrestartable),
        digests[0].items.len()
    );
}

/// A watcher test failed now and then under load: the spawn that spent the daily cap was
/// taken, while its run was still starting, for a crash the cap had to stop — the watcher
/// escalated "the cap is spent" at once, then again when the run really stopped, and
/// recorded `cap-reached` twice. While the machine's restart of a job is under way, nothing
/// about its restart is decided or told.
#[test]
fn a_restart_under_way_is_not_a_spent_cap_until_its_outcome_is_known() {
    let mut spec = job(1);
    spec.auto_restart = true;
    spec.auto_restart_reason = Some("known cause".into());
    let jobs = vec![spec];
    let now = at(10, 0);
    let cap = 2;
    let mut seen = dead(at(9, 59), 10);
    seen.started_before = true;
    // The second automatic restart has just been spawned: the cap is reached.
    seen.history.auto_spawns_24h = vec![at(9, 0), at(9, 59)];
    let snapshot = Snapshot::judge(&jobs, vec![seen], now);
    let history = |id: &str| {
        snapshot
            .evidence_of(id)
            .map(|e| e.history.clone())
            .unwrap_or_default()
    };
    let mut brain = Brain::default();
    let in_flight = |job: &str| job == "j01";
    let pass = brain.pass(&snapshot.list, &jobs, &history, &in_flight, cap, &[], now);
    assert!(pass.capped.is_empty(), "{pass:?}");
    assert!(pass.restarts.is_empty(), "{pass:?}");
    assert!(pass.escalate.is_empty(), "{pass:?}");
    // Its outcome is back and the job is still down: now the cap is spent, told once.
    let pass = brain.pass(&snapshot.list, &jobs, &history, &|_| false, cap, &[], now);
    assert_eq!(pass.capped, ["j01"], "{pass:?}");
    // The cap frees when the oldest of the day's restarts turns a day old: the watcher looks
    // again then, though no file changes meanwhile.
    let frees = at(9, 0) + chrono::Duration::hours(24) + chrono::Duration::milliseconds(1);
    assert_eq!(pass.waits, [("j01".to_string(), frees)], "{pass:?}");
    let broken: Vec<_> = pass
        .escalate
        .iter()
        .filter(|c| c.kind == EscalationKind::BrokenRule)
        .collect();
    assert_eq!(broken.len(), 1, "{pass:?}");
    let again = brain.pass(&snapshot.list, &jobs, &history, &|_| false, cap, &[], now);
    assert!(again.escalate.is_empty(), "{again:?}");
}
