//! The dashboard's pure parts: snapshots of `view` through ratatui's TestBackend at 80x24 and
//! 120x40, `update` driven by key and mouse sequences, and the real crossterm backend's bytes
//! checked against a corpus of hostile lines.

use std::path::PathBuf;

use chrono::{DateTime, Duration, TimeZone, Utc};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
use mihari::config::{CheckSpec, JobSpec, Predicate, RestartSpec, Timeouts};
use mihari::core::decision::{
    ApprovalPlan, Cooldown, Decision, FileIdentity, HolderView, ReleasePlan, RestartPlan,
};
use mihari::core::digest::{Digest, DigestCategory, DigestItem};
use mihari::core::escalate::{Condition, EscalationKind};
use mihari::core::{Bucket, PendingApproval, State};
use mihari::core::{
    CheckOutcome, CheckResult, Evidence, FileStamp, LineCount, Liveness, LockHolder,
    ManifestReading, Reading, TableReading,
};
use mihari::engine::Action;
use mihari::engine::Snapshot;
use mihari::store::{Actor, Event};
use mihari::tui::model::{Command, DigestView, Focus, Model, Msg, Pane, update};
use mihari::tui::theme::Theme;
use mihari::tui::view::view;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 9, 0, 0).unwrap()
}

fn ago(secs: i64) -> DateTime<Utc> {
    now() - Duration::seconds(secs)
}

fn spec(id: &str, owner: &str) -> JobSpec {
    JobSpec {
        id: id.into(),
        name: Some(format!("the {id} job")),
        owner: Some(owner.into()),
        workspace: None,
        lock: Some(PathBuf::from(format!("/run/{id}.lock"))),
        log: Some(PathBuf::from(format!("/var/log/{id}.log"))),
        progress_file: Some(PathBuf::from(format!("/data/{id}.jsonl"))),
        progress_table: None,
        manifest: None,
        log_progress: None,
        process: None,
        kept_lock: None,
        stall_sec: 300,
        expected_total: Some(5121),
        should_run_when: vec![Predicate::NotComplete],
        resource_lock: None,
        auto_restart: false,
        auto_restart_reason: None,
        auto_restart_blocked_reason: Some("server-side error not yet understood".into()),
        restart: Some(RestartSpec {
            command: Some(vec![
                "python3".into(),
                "collect.py".into(),
                "--resume".into(),
            ]),
            cwd: Some("/data".into()),
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

fn holder(pid: u32, liveness: Liveness, why: &str) -> Option<Reading<LockHolder>> {
    Some(Reading::Found(LockHolder {
        pid: Some(pid),
        recorded_start: Some(1000),
        cmdline: None,
        run_id: None,
        modified: ago(3600),
        liveness,
        why: why.into(),
        started_at: (liveness == Liveness::Alive).then(|| ago(3600)),
        start_ticks: (liveness == Liveness::Alive).then_some(1000),
        stopped: false,
    }))
}

fn stamp(secs: i64) -> Option<Reading<FileStamp>> {
    Some(Reading::Found(FileStamp {
        modified: ago(secs),
        len: 4200,
        carried: None,
    }))
}

fn count(secs: i64, done: u64) -> Option<Reading<LineCount>> {
    Some(Reading::Found(LineCount {
        modified: ago(secs),
        done,
    }))
}

/// Jobs in every bucket, with one of each kind of evidence.
fn fleet() -> (Vec<JobSpec>, Vec<Evidence>) {
    let mut jobs = Vec::new();
    let mut evidence = Vec::new();

    jobs.push(spec("collect_raw", "data-team"));
    evidence.push(Evidence {
        lock: holder(4242, Liveness::Alive, "start time matches"),
        log: stamp(10),
        progress_file: count(303, 1800),
        ..Evidence::default()
    });

    jobs.push(spec("export", "data-team"));
    evidence.push(Evidence {
        lock: holder(4243, Liveness::Dead, "no such process"),
        log: stamp(120),
        progress_file: count(120, 400),
        ..Evidence::default()
    });

    let mut gaps = spec("ingest", "ingest-team");
    gaps.checks = vec![CheckSpec {
        name: "no_gaps".into(),
        command: vec!["check_gaps".into()],
        every_sec: 300,
        timeout_sec: 30,
    }];
    jobs.push(gaps);
    evidence.push(Evidence {
        lock: holder(4244, Liveness::Alive, "start time matches"),
        log: stamp(2),
        progress_file: count(2, 120),
        checks: vec![CheckOutcome {
            name: "no_gaps".into(),
            result: CheckResult::Fail,
            detail: "exit 1: gap: shards 120-135 missing".into(),
            at: ago(30),
        }],
        ..Evidence::default()
    });

    jobs.push(spec("train", "ml-team"));
    evidence.push(Evidence {
        lock: holder(4245, Liveness::Alive, "start time matches"),
        log: stamp(900),
        progress_file: count(900, 12),
        ..Evidence::default()
    });

    jobs.push(spec("faulty", "ops"));
    evidence.push(Evidence {
        lock: holder(4246, Liveness::Alive, "start time matches"),
        log: stamp(900),
        progress_file: Some(Reading::Fault(
            "cannot read '/data/faulty.jsonl': it is a directory, not a file".into(),
        )),
        ..Evidence::default()
    });

    jobs.push(spec("next_batch", "batch-team"));
    evidence.push(Evidence {
        lock: Some(Reading::Empty),
        log: Some(Reading::Empty),
        progress_file: Some(Reading::Empty),
        ..Evidence::default()
    });

    let mut table = spec("labels", "ml-team");
    table.progress_file = None;
    table.progress_table = Some(mihari::config::ProgressTable::new(
        "/data/labels.sqlite",
        "progress",
        "updated_at",
    ));
    jobs.push(table);
    evidence.push(Evidence {
        lock: holder(4247, Liveness::Alive, "start time matches"),
        progress_table: Some(Reading::Found(TableReading {
            newest: ago(4),
            rows: 5121,
            done: None,
            total: None,
        })),
        log: stamp(4),
        ..Evidence::default()
    });

    let mut phases = spec("publish", "content-team");
    phases.manifest = Some("/data/run/manifest.json".into());
    phases.expected_total = None;
    phases.progress_file = None;
    phases.should_run_when = vec![Predicate::ResourceFree];
    phases.auto_restart = true;
    phases.auto_restart_reason = Some("cause known: flaky upload; procedure: rerun".into());
    jobs.push(phases);
    evidence.push(Evidence {
        lock: holder(4248, Liveness::Alive, "start time matches"),
        log: stamp(8),
        manifest: Some(Box::new(Reading::Found(ManifestReading {
            updated_at: ago(5),
            run_id: Some("run-7".into()),
            current_phase: Some("article_generation".into()),
            completed_phases: vec!["loading".into(), "topic_selection".into()],
            failed_phases: Vec::new(),
        }))),
        ..Evidence::default()
    });
    (jobs, evidence)
}

fn model_at(width: u16, height: u16) -> Model {
    let (jobs, evidence) = fleet();
    let mut snapshot = Snapshot::judge(&jobs, evidence, now());
    snapshot.notices = vec!["no watcher yet: nothing watches these jobs".into()];
    let mut model = Model::new(jobs, "/etc/mihari/jobs.yaml".into(), Theme::plain(), now());
    update(&mut model, Msg::Resize(width, height));
    // A little history: collect_raw did 60 items over the last two minutes.
    let mut early = snapshot.clone();
    early.generated_at = now() - Duration::seconds(120);
    for row in early
        .list
        .actions
        .iter_mut()
        .chain(early.list.rest.iter_mut())
    {
        if row.id == "collect_raw" {
            row.done = Some(1740);
        }
    }
    update(&mut model, Msg::Snapshot(early));
    update(&mut model, Msg::Snapshot(snapshot));
    update(
        &mut model,
        Msg::Tail {
            job: "export".into(),
            lines: Reading::Found(vec!["fetched 399 of 400 items".into(), "Killed".into()]),
            earlier: None,
        },
    );
    model.dirty = false;
    model
}

fn draw(model: &Model) -> String {
    let (width, height) = model.size;
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| view(model, frame)).unwrap();
    terminal.backend().to_string()
}

fn key(code: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(code, KeyModifiers::NONE))
}

fn press(model: &mut Model, keys: &str) -> Vec<Command> {
    keys.chars()
        .filter_map(|c| update(model, key(KeyCode::Char(c))))
        .collect()
}

#[test]
fn the_list_with_every_bucket_80x24() {
    insta::assert_snapshot!(draw(&model_at(80, 24)));
}

#[test]
fn the_list_with_every_bucket_and_the_detail_120x40() {
    insta::assert_snapshot!(draw(&model_at(120, 40)));
}

#[test]
fn the_detail_pane_80x24() {
    let mut model = model_at(80, 24);
    update(&mut model, key(KeyCode::Enter));
    insta::assert_snapshot!(draw(&model));
}

#[test]
fn the_detail_pane_with_manifest_and_policy_120x40() {
    let mut model = model_at(120, 40);
    press(&mut model, "G");
    update(&mut model, key(KeyCode::Enter));
    insta::assert_snapshot!(draw(&model));
}

#[test]
fn help_80x24() {
    let mut model = model_at(80, 24);
    press(&mut model, "?");
    insta::assert_snapshot!(draw(&model));
}

#[test]
fn help_120x40() {
    let mut model = model_at(120, 40);
    press(&mut model, "?");
    insta::assert_snapshot!(draw(&model));
}

#[test]
fn a_filter_80x24() {
    let mut model = model_at(80, 24);
    press(&mut model, "/ml");
    insta::assert_snapshot!(draw(&model));
}

#[test]
fn a_filter_kept_120x40() {
    let mut model = model_at(120, 40);
    press(&mut model, "/stale");
    update(&mut model, key(KeyCode::Enter));
    insta::assert_snapshot!(draw(&model));
}

fn empty_model(width: u16, height: u16) -> Model {
    let mut model = Model::new(
        vec![],
        "/etc/mihari/jobs.yaml".into(),
        Theme::plain(),
        now(),
    );
    update(&mut model, Msg::Resize(width, height));
    let mut snapshot = Snapshot::judge(&[], vec![], now());
    snapshot.notices = vec!["no watcher yet: nothing watches these jobs".into()];
    update(&mut model, Msg::Snapshot(snapshot));
    model
}

#[test]
fn an_empty_jobs_file_80x24() {
    insta::assert_snapshot!(draw(&empty_model(80, 24)));
}

#[test]
fn an_empty_jobs_file_120x40() {
    insta::assert_snapshot!(draw(&empty_model(120, 40)));
}

fn select(model: &mut Model, id: &str) {
    press(model, "g");
    for _ in 0..20 {
        if model.selected.as_deref() == Some(id) && model.selected_approval.is_none() {
            return;
        }
        press(model, "j");
    }
    panic!("{id} not found");
}

#[test]
fn a_fault_in_the_evidence_80x24() {
    let mut model = model_at(80, 24);
    select(&mut model, "faulty");
    update(&mut model, key(KeyCode::Enter));
    let screen = draw(&model);
    assert!(screen.contains("fault"), "{screen}");
    insta::assert_snapshot!(screen);
}

#[test]
fn a_fault_in_the_evidence_120x40() {
    let mut model = model_at(120, 40);
    select(&mut model, "faulty");
    insta::assert_snapshot!(draw(&model));
}

#[test]
fn the_sections_are_in_fixed_order_on_screen() {
    let screen = draw(&model_at(120, 40));
    let at = |s: &str| {
        screen
            .find(s)
            .unwrap_or_else(|| panic!("no {s} in {screen}"))
    };
    assert!(at("\"RESTART 1") < at("\"RED 1"));
    assert!(at("\"RED 1") < at("\"STALE 2"));
    assert!(at("\"STALE 2") < at("\"DISPATCH 1"));
    assert!(at("\"DISPATCH 1") < at("\"NO ACTION 3"));
}

#[test]
fn it_stays_readable_down_to_60x20() {
    let screen = draw(&model_at(60, 20));
    for word in ["RESTART", "DEAD_LOCK_STALE", "export", "q quit", "? help"] {
        assert!(screen.contains(word), "{word} missing at 60x20:\n{screen}");
    }
}

#[test]
fn keys_move_the_selection_and_skip_headings() {
    let mut model = model_at(80, 24);
    assert_eq!(model.selected.as_deref(), Some("export"), "RESTART first");
    press(&mut model, "j");
    assert_eq!(model.selected.as_deref(), Some("ingest"));
    update(&mut model, key(KeyCode::Down));
    assert_eq!(model.selected.as_deref(), Some("train"));
    press(&mut model, "k");
    update(&mut model, key(KeyCode::Up));
    assert_eq!(model.selected.as_deref(), Some("export"));
    press(&mut model, "k");
    assert_eq!(
        model.selected.as_deref(),
        Some("export"),
        "clamped at the top"
    );
    press(&mut model, "G");
    assert_eq!(model.selected.as_deref(), Some("publish"));
    press(&mut model, "g");
    assert_eq!(model.selected.as_deref(), Some("export"));
    update(&mut model, key(KeyCode::PageDown));
    assert_ne!(model.selected.as_deref(), Some("export"));
    update(&mut model, key(KeyCode::PageUp));
    assert_eq!(model.selected.as_deref(), Some("export"));
}

#[test]
fn moving_the_selection_asks_for_the_new_jobs_log_tail() {
    let mut model = model_at(80, 24);
    let commands = press(&mut model, "j");
    assert_eq!(
        commands,
        vec![Command::LoadTail {
            job: "ingest".into(),
            path: "/var/log/ingest.log".into()
        }]
    );
}

#[test]
fn enter_opens_the_detail_tab_switches_and_esc_closes() {
    let mut model = model_at(80, 24);
    assert!(model.areas().detail.is_none(), "80x24 shows the list alone");
    update(&mut model, key(KeyCode::Enter));
    assert!(model.zoomed);
    assert_eq!(model.focus, Pane::Detail);
    press(&mut model, "j");
    assert_eq!(
        model.selected.as_deref(),
        Some("export"),
        "j scrolls the detail"
    );
    update(&mut model, key(KeyCode::Esc));
    assert!(!model.zoomed);
    assert_eq!(model.focus, Pane::List);
    update(&mut model, key(KeyCode::Tab));
    assert_eq!(model.focus, Pane::Detail);
    update(&mut model, key(KeyCode::Tab));
    assert_eq!(model.focus, Pane::List);

    let mut big = model_at(120, 40);
    assert!(big.areas().detail.is_some(), "120x40 shows both panes");
    update(&mut big, key(KeyCode::Tab));
    assert_eq!(big.focus, Pane::Detail);
    assert!(!big.zoomed);
}

/// The list is asked for the lines in view, not made a line per job: every window, every
/// line and every count below a window reads as the whole list does, filtered or not.
#[test]
fn the_lines_in_view_are_those_of_the_whole_list() {
    use mihari::tui::model::Row;
    for filter in ["", "ml", "e", "RUNNING"] {
        let mut model = model_at(120, 40);
        if !filter.is_empty() {
            press(&mut model, "/");
            press(&mut model, filter);
        }
        let rows = model.rows();
        let all: Vec<Row> = rows.iter().collect();
        assert_eq!(all.len(), rows.len(), "{filter}");
        assert!(
            all.iter().any(|r| matches!(r, Row::Heading { .. }))
                && all.iter().any(|r| matches!(r, Row::Job(_))),
            "{filter}: {all:?}"
        );
        for start in 0..=all.len() + 1 {
            for count in [0, 1, 3, 40] {
                let whole: Vec<Row> = all.iter().skip(start).take(count).copied().collect();
                assert_eq!(rows.window(start, count), whole, "{filter} {start} {count}");
            }
            let below = all
                .iter()
                .skip(start)
                .filter(|r| !matches!(r, Row::Heading { .. }))
                .count();
            assert_eq!(rows.rows_from(start), below, "{filter} {start}");
            assert_eq!(rows.get(start), all.get(start).copied(), "{filter} {start}");
        }
    }
}

#[test]
fn the_filter_matches_id_owner_or_state_and_esc_clears_it() {
    let mut model = model_at(80, 24);
    press(&mut model, "/");
    assert!(model.filter_editing);
    press(&mut model, "ml");
    let ids: Vec<String> = model
        .rows()
        .iter()
        .filter_map(|r| match r {
            mihari::tui::model::Row::Job(a) => Some(a.id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["train", "labels"], "owner ml-team");
    update(&mut model, key(KeyCode::Backspace));
    update(&mut model, key(KeyCode::Backspace));
    press(&mut model, "dead");
    assert_eq!(
        model.selected.as_deref(),
        Some("export"),
        "state DEAD_LOCK_STALE"
    );
    update(&mut model, key(KeyCode::Enter));
    assert!(!model.filter_editing);
    assert_eq!(model.filter, "dead");
    update(&mut model, key(KeyCode::Esc));
    assert_eq!(model.filter, "");
    assert_eq!(model.rows().len(), 13);
}

#[test]
fn help_opens_with_a_question_mark_and_any_key_closes_it() {
    let mut model = model_at(80, 24);
    press(&mut model, "?");
    assert!(model.help);
    let screen = draw(&model);
    for (keys, _) in mihari::tui::view::KEYS {
        assert!(screen.contains(keys), "help lacks {keys}:\n{screen}");
    }
    update(&mut model, key(KeyCode::Esc));
    assert!(!model.help);
}

#[test]
fn q_and_ctrl_c_quit() {
    let mut model = model_at(80, 24);
    assert_eq!(press(&mut model, "q"), vec![Command::Quit]);
    assert!(model.quit);
    let mut model = model_at(80, 24);
    let ctrl_c = Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    assert_eq!(update(&mut model, ctrl_c), Some(Command::Quit));
    // Ctrl-C quits even while typing a filter.
    let mut model = model_at(80, 24);
    press(&mut model, "/x");
    let ctrl_c = Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    assert_eq!(update(&mut model, ctrl_c), Some(Command::Quit));
}

fn restart_plan() -> Decision {
    Decision::Restart(RestartPlan {
        job: "export".into(),
        key: "5f0c2a9e8b7d6c5a4f3e2d1c0b9a8f7e".into(),
        evidence: "lock held by dead pid 4243, start 1000, written 2026-11-29T08:00:00.123456789Z"
            .into(),
        reason: "lock held by pid 4243, process gone: no such process".into(),
        state: State::DeadLockStale,
        bucket: Bucket::Restart,
        argv: vec!["python3".into(), "collect.py".into(), "--resume".into()],
        cwd: "/data".into(),
        route: None,
        run_id: "export-20261129T080000".into(),
        routes_used: vec![],
        max_hops: 3,
        holder: Some(HolderView {
            pid: Some(4243),
            liveness: Liveness::Dead,
            why: "no such process".into(),
        }),
        policy: mihari::core::decision::policy_words(&spec("export", "data-team")),
        cooldown: Cooldown::Closed {
            workspace_hash: "a1b2c3d4e5f6".into(),
            last_spawn: now() - Duration::seconds(100),
            opens_at: now() + Duration::seconds(500),
        },
    })
}

/// The restart plan with the workspace cooldown open: confirming spawns.
fn open_restart_plan() -> Decision {
    let Decision::Restart(mut plan) = restart_plan() else {
        unreachable!()
    };
    plan.cooldown = Cooldown::Open {
        workspace_hash: "a1b2c3d4e5f6".into(),
    };
    Decision::Restart(plan)
}

fn release_plan() -> Decision {
    Decision::Release(ReleasePlan {
        job: "export".into(),
        key: "9e8b7d6c5a4f3e2d1c0b9a8f7e5f0c2a".into(),
        path: "/run/export.lock".into(),
        identity: FileIdentity {
            dev: 2049,
            ino: 131_072,
            mtime_ns: 1_764_403_200_000_000_000,
            len: 5,
            content: "ab".repeat(32),
        },
        holder: HolderView {
            pid: Some(4243),
            liveness: Liveness::Dead,
            why: "no such process".into(),
        },
    })
}

fn approval_plan() -> Decision {
    Decision::Approve(ApprovalPlan {
        job: "publish".into(),
        key: "c0ffee".into(),
        step: "publish".into(),
        summary: "publish 3 articles to the main feed".into(),
        reason: None,
        requested_by: Some("alice".into()),
        requested: now() - Duration::minutes(10),
    })
}

#[test]
fn decision_keys_propose_for_the_selected_job() {
    let mut model = model_at(80, 24);
    let job = model.selected.clone().unwrap();
    for (k, action) in [
        ("r", Action::Restart),
        ("x", Action::Release),
        ("a", Action::Approve),
    ] {
        let commands = press(&mut model, k);
        assert_eq!(
            commands,
            vec![Command::Propose {
                action,
                job: job.clone()
            }]
        );
    }
    update(
        &mut model,
        Msg::Proposed(Err("restart is offered on RESTART and DISPATCH rows".into())),
    );
    assert!(model.dialog.is_none());
    assert!(draw(&model).contains("restart is offered on RESTART"));
    assert_eq!(press(&mut model, "D"), vec![Command::LoadDigest]);
}

fn digest_item(id: i64, job: &str, category: DigestCategory, text: &str) -> DigestItem {
    DigestItem {
        id,
        at: now() - Duration::hours(12) + Duration::minutes(id),
        job: Some(job.into()),
        category,
        text: text.into(),
    }
}

#[test]
fn the_digest_view_shows_the_digest_and_marks_it_read() {
    let mut model = model_at(80, 24);
    assert_eq!(press(&mut model, "D"), vec![Command::LoadDigest]);
    let digest = Digest {
        id: 7,
        cut: now() - Duration::hours(1),
        delivered: None,
        items: vec![
            digest_item(
                1,
                "collect_raw",
                DigestCategory::StallSeen,
                "RUNNING -> STALLED",
            ),
            digest_item(
                2,
                "export",
                DigestCategory::MachineRestart,
                "restarted by the machine",
            ),
            digest_item(
                3,
                "export",
                DigestCategory::Suppressed,
                "restart skipped: cap spent",
            ),
        ],
    };
    update(
        &mut model,
        Msg::Digest(Ok(DigestView {
            happened: Default::default(),
            latest: Some(digest),
            previous: vec![],
            pending: vec![digest_item(
                4,
                "labels",
                DigestCategory::Completed,
                "5121 of 5121",
            )],
            scroll: 0,
        })),
    );
    let screen = draw(&model);
    for shown in [
        "digest 7",
        "collect_raw",
        "STALLED",
        "export",
        "queued since the last cut: 1",
    ] {
        assert!(screen.contains(shown), "{shown} missing:\n{screen}");
    }
    insta::assert_snapshot!(screen);
    assert_eq!(press(&mut model, "m"), vec![Command::MarkDigestRead(7)]);
    update(&mut model, key(KeyCode::Esc));
    assert!(model.digest.is_none());
}

#[test]
fn a_new_escalation_rings_the_bell_once_and_shows_a_banner_until_a_key() {
    let mut model = model_at(80, 24);
    let condition = Condition {
        job: "export".into(),
        kind: EscalationKind::HumanOnly,
        message: "export is DEAD_LOCK_STALE and needs a restart only a human may do".into(),
    };
    let bell = update(
        &mut model,
        Msg::Escalations(vec![condition.clone()], vec![condition.clone()]),
    );
    assert_eq!(bell, Some(Command::Bell));
    assert!(draw(&model).contains("NOW: export is DEAD_LOCK_STALE"));
    // The same condition again: no bell.
    assert_eq!(
        update(
            &mut model,
            Msg::Escalations(vec![condition.clone()], vec![])
        ),
        None
    );
    press(&mut model, "j");
    assert!(!draw(&model).contains("NOW:"), "a key dismisses the banner");
}

#[test]
fn a_broken_rule_of_no_job_heads_the_red_section() {
    let (jobs, evidence) = fleet();
    let snapshot = Snapshot::judge_with_rules(
        &jobs,
        evidence,
        vec!["no machine is watching: the watcher (pid 77) is gone".into()],
        now(),
    );
    let mut model = Model::new(jobs, "/etc/mihari/jobs.yaml".into(), Theme::plain(), now());
    update(&mut model, Msg::Resize(120, 40));
    update(&mut model, Msg::Snapshot(snapshot));
    let screen = draw(&model);
    assert!(screen.contains("\"RED 2"), "{screen}");
    assert!(screen.contains("✖ no machine is watching"), "{screen}");
}

#[test]
fn a_dialog_focuses_cancel_and_only_confirm_executes() {
    let mut model = model_at(80, 24);
    update(&mut model, Msg::Proposed(Ok(open_restart_plan())));
    let dialog = model.dialog.clone().unwrap();
    assert_eq!(dialog.focus, Focus::Cancel);
    // Enter on the focused Cancel declines.
    assert_eq!(
        update(&mut model, key(KeyCode::Enter)),
        Some(Command::Decline(open_restart_plan()))
    );
    assert!(model.dialog.is_none());
    // Esc declines too.
    update(&mut model, Msg::Proposed(Ok(open_restart_plan())));
    assert_eq!(
        update(&mut model, key(KeyCode::Esc)),
        Some(Command::Decline(open_restart_plan()))
    );
    // Other keys do nothing while the dialog is open: no selection moves, no quitting on j.
    update(&mut model, Msg::Proposed(Ok(open_restart_plan())));
    let selected = model.selected.clone();
    assert_eq!(press(&mut model, "jkrxa"), vec![]);
    assert_eq!(model.selected, selected);
    assert!(model.dialog.is_some());
    // Tab to Restart, Enter: the decision, as a value, to execute.
    update(&mut model, key(KeyCode::Tab));
    assert_eq!(model.dialog.as_ref().unwrap().focus, Focus::Confirm);
    assert_eq!(
        update(&mut model, key(KeyCode::Enter)),
        Some(Command::Execute(open_restart_plan()))
    );
    assert!(model.dialog.is_none());
    update(
        &mut model,
        Msg::Outcome("'export' restarted: pid 5000 holds its lock".into()),
    );
    assert!(draw(&model).contains("pid 5000 holds its lock"));
}

#[test]
fn an_approval_needs_the_job_id_typed() {
    let mut model = model_at(80, 24);
    update(&mut model, Msg::Proposed(Ok(approval_plan())));
    assert_eq!(model.dialog.as_ref().unwrap().focus, Focus::TypedId);
    // Straight to Approve without typing: refused, focus back on the id.
    update(&mut model, key(KeyCode::BackTab));
    assert_eq!(model.dialog.as_ref().unwrap().focus, Focus::Confirm);
    assert_eq!(update(&mut model, key(KeyCode::Enter)), None);
    assert_eq!(model.dialog.as_ref().unwrap().focus, Focus::TypedId);
    assert!(model.status.clone().unwrap().contains("type the job id"));
    // A wrong id does not do either.
    press(&mut model, "publis");
    update(&mut model, key(KeyCode::BackTab));
    assert_eq!(update(&mut model, key(KeyCode::Enter)), None);
    // The right id, then Approve.
    press(&mut model, "h");
    update(&mut model, key(KeyCode::BackTab));
    assert_eq!(model.dialog.as_ref().unwrap().focus, Focus::Confirm);
    assert_eq!(
        update(&mut model, key(KeyCode::Enter)),
        Some(Command::Execute(approval_plan()))
    );
    // Deny with a reason.
    update(&mut model, Msg::Proposed(Ok(approval_plan())));
    press(&mut model, "publish");
    update(&mut model, key(KeyCode::Tab));
    press(&mut model, "wrong feed");
    update(&mut model, key(KeyCode::Tab));
    update(&mut model, key(KeyCode::Tab));
    assert_eq!(model.dialog.as_ref().unwrap().focus, Focus::Deny);
    match update(&mut model, key(KeyCode::Enter)) {
        Some(Command::Execute(Decision::Deny(plan))) => {
            assert_eq!(plan.reason.as_deref(), Some("wrong feed"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_restart_dialog_80x24() {
    let mut model = model_at(80, 24);
    update(&mut model, Msg::Proposed(Ok(restart_plan())));
    insta::assert_snapshot!(draw(&model));
}

#[test]
fn the_restart_dialog_120x40() {
    let mut model = model_at(120, 40);
    update(&mut model, Msg::Proposed(Ok(restart_plan())));
    insta::assert_snapshot!(draw(&model));
}

#[test]
fn the_release_dialog_80x24() {
    let mut model = model_at(80, 24);
    update(&mut model, Msg::Proposed(Ok(release_plan())));
    insta::assert_snapshot!(draw(&model));
}

#[test]
fn the_approval_dialog_80x24() {
    let mut model = model_at(80, 24);
    update(&mut model, Msg::Proposed(Ok(approval_plan())));
    press(&mut model, "pub");
    insta::assert_snapshot!(draw(&model));
}

fn event(id: i64, kind: &str, job: &str, reason: &str) -> Event {
    Event {
        id,
        at: now() - Duration::seconds(600 - id * 10),
        kind: kind.into(),
        job: Some(job.into()),
        actor: Actor::Operator,
        session: "4242.98765".into(),
        run: Some("export-1".into()),
        workspace_hash: Some("a1b2c3d4e5f6".into()),
        route: None,
        key: Some("5f0c2a9e".into()),
        reason: Some(reason.into()),
    }
}

#[test]
fn the_events_view_loads_the_jobs_events_and_toggles_to_all() {
    let mut model = model_at(80, 24);
    let commands = press(&mut model, "e");
    assert_eq!(
        commands,
        vec![Command::LoadEvents {
            job: Some("export".into())
        }]
    );
    update(
        &mut model,
        Msg::Events {
            job: Some("export".into()),
            rows: Ok(vec![
                event(1, "confirmed", "export", "restart confirmed"),
                event(2, "claimed", "export", "lock held by dead pid 4243"),
                event(3, "spawned", "export", "pid 5000"),
                event(4, "verified", "export", "pid 5000 holds the lock"),
            ]),
        },
    );
    let screen = draw(&model);
    assert!(screen.contains("events: job export"), "{screen}");
    assert!(screen.contains("verified"), "{screen}");
    insta::assert_snapshot!(screen);
    assert_eq!(
        press(&mut model, "a"),
        vec![Command::LoadEvents { job: None }]
    );
    update(&mut model, key(KeyCode::Esc));
    assert!(model.events.is_none());
}

#[test]
fn a_pending_approval_shows_on_its_row_and_in_the_header() {
    let (jobs, mut evidence) = fleet();
    evidence[7].pending_approvals = vec![PendingApproval {
        key: "c0ffee".into(),
        step: "publish".into(),
        summary: "publish 3 articles".into(),
        requested: now() - Duration::seconds(300),
        requested_by: None,
    }];
    let mut model = Model::new(
        jobs.clone(),
        "/etc/mihari/jobs.yaml".into(),
        Theme::plain(),
        now(),
    );
    update(&mut model, Msg::Resize(120, 40));
    update(
        &mut model,
        Msg::Snapshot(Snapshot::judge(&jobs, evidence, now())),
    );
    let screen = draw(&model);
    assert!(screen.contains("⚑ APPROVALS 1"), "{screen}");
    assert!(
        screen.contains("publish    ⚑")
            || screen.contains("publish⚑")
            || screen.contains("publish ⚑"),
        "{screen}"
    );
}

#[test]
fn the_mouse_wheel_scrolls_and_a_click_selects() {
    let mut model = model_at(120, 40);
    let mouse = |kind, column, row| {
        Msg::Mouse(MouseEvent {
            kind,
            column,
            row,
            modifiers: KeyModifiers::NONE,
        })
    };
    update(&mut model, mouse(MouseEventKind::ScrollDown, 10, 5));
    assert_eq!(model.selected.as_deref(), Some("ingest"));
    // Below the border and the column titles: the first list row ("RESTART 1"); find labels.
    let line = model
        .rows()
        .iter()
        .position(|r| matches!(r, mihari::tui::model::Row::Job(a) if a.id == "labels"))
        .unwrap() as u16;
    let list = model.areas().list.unwrap();
    let commands = update(
        &mut model,
        mouse(
            MouseEventKind::Down(MouseButton::Left),
            5,
            list.y + 2 + line,
        ),
    );
    assert_eq!(model.selected.as_deref(), Some("labels"));
    assert!(matches!(commands, Some(Command::LoadTail { .. })));
    let detail = model.areas().detail.unwrap();
    update(
        &mut model,
        mouse(MouseEventKind::ScrollDown, 5, detail.y + 2),
    );
    assert_eq!(model.focus, Pane::Detail);
}

#[test]
fn the_selection_follows_its_job_when_the_order_changes() {
    let mut model = model_at(80, 24);
    select(&mut model, "collect_raw");
    // collect_raw dies: it moves from the rest to RESTART, and stays selected.
    let (jobs, mut evidence) = fleet();
    evidence[0].lock = holder(4242, Liveness::Dead, "no such process");
    update(
        &mut model,
        Msg::Snapshot(Snapshot::judge(&jobs, evidence, now())),
    );
    assert_eq!(model.selected.as_deref(), Some("collect_raw"));
    let screen = draw(&model);
    assert!(screen.find("collect_raw").unwrap() < screen.find("\"RED 1").unwrap());
}

/// After a release the cursor followed the job into NO ACTION, and RESTART scrolled off the
/// top: now it stays at its place among the rows that need a human.
#[test]
fn a_job_leaving_the_action_list_leaves_the_cursor_on_the_next_that_needs_a_human() {
    let mut model = model_at(80, 24);
    assert_eq!(model.selected.as_deref(), Some("export"), "RESTART first");
    // export's dead holder is released and it runs again: it needs nothing now.
    let (jobs, mut evidence) = fleet();
    evidence[1].lock = holder(4243, Liveness::Alive, "start time matches");
    evidence[1].log = stamp(1);
    evidence[1].progress_file = count(1, 401);
    update(
        &mut model,
        Msg::Snapshot(Snapshot::judge(&jobs, evidence, now())),
    );
    assert_eq!(
        model.selected.as_deref(),
        Some("ingest"),
        "the next that needs a human (RED), not export in NO ACTION"
    );
    assert_eq!(model.list_scroll, 0, "the head of the list stays in view");
    // Moving by hand into NO ACTION is followed as ever.
    select(&mut model, "collect_raw");
    let (jobs, evidence) = fleet();
    update(
        &mut model,
        Msg::Snapshot(Snapshot::judge(&jobs, evidence, now())),
    );
    assert_eq!(model.selected.as_deref(), Some("collect_raw"));
}

/// The log view at 80x24: its path, the lines still while scrolled up, a match reversed.
#[test]
fn the_log_view_80x24() {
    let mut model = model_at(80, 24);
    let commands = press(&mut model, "l");
    assert_eq!(
        commands,
        vec![Command::LoadLog {
            job: "export".into(),
            path: "/var/log/export.log".into()
        }]
    );
    let lines: Vec<String> = (1..=40)
        .map(|i| format!("fetched {i} of 400 items"))
        .chain(["Killed".to_string()])
        .collect();
    update(
        &mut model,
        Msg::Log {
            job: "export".into(),
            lines: Reading::Found(lines.clone()),
            earlier: None,
        },
    );
    press(&mut model, "kkk");
    // New lines arrive while scrolled up: what is shown stays put.
    let before = draw(&model);
    let mut more = lines.clone();
    more.push("restarted".into());
    update(
        &mut model,
        Msg::Log {
            job: "export".into(),
            lines: Reading::Found(more),
            earlier: None,
        },
    );
    let after = draw(&model);
    let body = |screen: &str| -> Vec<String> {
        screen
            .lines()
            .filter(|l| l.contains("fetched"))
            .map(String::from)
            .collect()
    };
    assert_eq!(body(&before), body(&after));
    assert!(after.contains("new lines below"), "{after}");
    // / searches the log (not the job filter); n goes to older matches.
    press(&mut model, "/");
    press(&mut model, "fetched 1");
    update(&mut model, key(KeyCode::Enter));
    assert!(model.filter.is_empty(), "the job filter is untouched");
    assert_eq!(model.log.as_ref().unwrap().hit, Some(18), "fetched 19");
    press(&mut model, "n");
    assert_eq!(model.log.as_ref().unwrap().hit, Some(17), "fetched 18");
    assert_eq!(
        press(&mut model, "o"),
        vec![Command::Pager {
            path: "/var/log/export.log".into()
        }]
    );
    insta::assert_snapshot!(draw(&model));
}

#[test]
fn time_alone_is_a_tick_and_the_next_tick_is_aligned() {
    let model = model_at(80, 24);
    let next = model.next_tick();
    assert!(next > model.now);
    assert!(next <= model.now + Duration::seconds(60));
    let mut later = model.clone();
    update(&mut later, Msg::Tick(now() + Duration::seconds(61)));
    assert!(later.dirty);
    assert_ne!(draw(&model), draw(&later), "ages move on with now");
}

/// Lines a hostile or broken job might write: every one must reach the terminal inert.
const HOSTILE: [&str; 12] = [
    "\u{1b}]0;pwned title\u{7}after the title",
    "\u{1b}]2;pwned title\u{1b}\\after the title",
    "\u{1b}[2J\u{1b}[Hcleared?",
    "\u{1b}[31;1mred\u{1b}[0m",
    "\u{9b}2J eight-bit clear",
    "\u{9d}0;eight-bit title\u{9c}",
    "\u{1b}P+q544e\u{1b}\\ dcs",
    "bell\u{7}\u{7} backspace\u{8}",
    "invoice\u{202e}fdp.exe",
    "\u{2066}isolate\u{2069}",
    "\u{1b}]52;c;cm0gLXJmIH4=\u{7}clipboard",
    "\u{1b}[?1049l leave alt screen \u{1b}c reset",
];

#[test]
fn hostile_text_reaches_the_real_backend_inert() {
    use ratatui::backend::CrosstermBackend;
    use ratatui::layout::Rect;
    use ratatui::{TerminalOptions, Viewport};

    let mut model = model_at(120, 40);
    // Straight into the model, as if a probe had missed them: the view is the last gate.
    let mut jobs = model.jobs.to_vec();
    jobs[1].name = Some(HOSTILE[0].into());
    jobs[1].owner = Some(HOSTILE[8].into());
    model.jobs = jobs.into();
    if let Some(snapshot) = model.snapshot.as_mut() {
        for row in snapshot.list.actions.iter_mut() {
            if row.id == "export" {
                row.reasons.extend(HOSTILE.iter().map(|s| s.to_string()));
            }
        }
    }
    update(
        &mut model,
        Msg::Tail {
            job: "export".into(),
            lines: Reading::Found(HOSTILE.iter().map(|s| s.to_string()).collect()),
            earlier: None,
        },
    );
    update(&mut model, key(KeyCode::Enter));

    let mut bytes: Vec<u8> = Vec::new();
    {
        let backend = CrosstermBackend::new(&mut bytes);
        let mut terminal = Terminal::with_options(
            backend,
            TerminalOptions {
                viewport: Viewport::Fixed(Rect::new(0, 0, 120, 40)),
            },
        )
        .unwrap();
        terminal.draw(|frame| view(&model, frame)).unwrap();
    }
    let out = String::from_utf8(bytes).expect("the backend writes UTF-8");
    assert!(
        out.contains("cleared?"),
        "the hostile lines were not drawn at all"
    );
    for forbidden in [
        "\u{1b}]",
        "\u{1b}P",
        "\u{1b}c",
        "\u{1b}[2J",
        "\u{1b}[?1049",
        "\u{7}",
        "\u{8}",
    ] {
        assert!(
            !out.contains(forbidden),
            "{forbidden:?} reached the terminal"
        );
    }
    assert!(
        !out.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)),
        "a C1 control reached the terminal"
    );
    assert!(
        !out.chars()
            .any(|c| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')),
        "a bidi control reached the terminal"
    );
    // Every escape the backend wrote is its own CSI (cursor moves and styles), nothing else.
    for (at, _) in out.match_indices('\u{1b}') {
        assert_eq!(
            out[at + 1..].chars().next(),
            Some('['),
            "a non-CSI escape at {at}"
        );
    }
}

/// Issue 9, item 16: a log line with 900 combining marks on one letter wrapped into nine rows
/// of the detail pane (the wrap counted each mark as a column). Read by the real tail code
/// from a real file and drawn through the view, it takes one row.
#[test]
fn a_pile_of_combining_marks_in_the_log_tail_takes_one_row() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("export.log");
    std::fs::write(
        &log,
        format!("before\nz{} after the marks\nlast\n", "\u{301}".repeat(900)),
    )
    .unwrap();
    let lines = mihari::probe::tail::tail_lines(&log, 10);
    let mut model = model_at(120, 40);
    update(
        &mut model,
        Msg::Tail {
            job: "export".into(),
            lines,
            earlier: None,
        },
    );
    update(&mut model, key(KeyCode::Enter));
    let (width, height) = model.size;
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| view(&model, frame)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    let rows: Vec<String> = (0..height)
        .map(|y| {
            (0..width)
                .map(|x| buffer[(x, y)].symbol().to_string())
                .collect()
        })
        .collect();
    let row_of = |text: &str| {
        rows.iter()
            .position(|row| row.contains(text))
            .unwrap_or_else(|| panic!("'{text}' is not drawn:\n{}", rows.join("\n")))
    };
    let (before, marks, last) = (
        row_of("  before"),
        row_of("after the marks"),
        row_of("  last"),
    );
    assert_eq!(
        (marks - before, last - marks),
        (1, 1),
        "the marked line takes one row:\n{}",
        rows.join("\n")
    );
    let cell = rows[marks].find('z').expect("the letter");
    let drawn: String = rows[marks][cell..].chars().take(3).collect();
    assert_eq!(drawn, "z\u{301}\u{301}", "one letter and two marks");
}

// ---- pause, resume, acknowledge ----

fn pause_plan(reason: &str) -> Decision {
    let mut plan = mihari::core::decision::NotePlan::new(
        "next_batch",
        "pause",
        State::ShouldBeRunning,
        vec!["not running, but should: not_complete (0 of 5121 done)".into()],
        "alice",
    );
    plan.reason = reason.into();
    Decision::Pause(plan)
}

/// The fleet with `next_batch` paused by alice ten minutes ago, whose last run exited 1.
fn paused_model(width: u16, height: u16) -> Model {
    let (jobs, mut evidence) = fleet();
    let at = jobs.iter().position(|j| j.id == "next_batch").unwrap();
    evidence[at].started_before = true;
    evidence[at].history.paused = Some(mihari::core::OperatorNote {
        at: ago(600),
        by: "alice".into(),
        reason: "upstream maintenance until 18:00".into(),
    });
    evidence[at].history.last_run = Some(mihari::core::LastRun {
        started: Some(ago(900)),
        exit: Some(mihari::core::RunExit::from_words("exit 1", ago(700))),
    });
    let snapshot = Snapshot::judge(&jobs, evidence, now());
    let mut model = Model::new(jobs, "/etc/mihari/jobs.yaml".into(), Theme::plain(), now());
    update(&mut model, Msg::Resize(width, height));
    update(&mut model, Msg::Snapshot(snapshot));
    model
}

#[test]
fn p_pauses_or_resumes_and_capital_k_acknowledges_the_selected_job() {
    let mut model = model_at(80, 24);
    let job = model.selected.clone().unwrap();
    assert_eq!(
        press(&mut model, "p"),
        vec![Command::Propose {
            action: Action::Pause,
            job: job.clone()
        }]
    );
    assert_eq!(
        press(&mut model, "K"),
        vec![Command::Propose {
            action: Action::Acknowledge,
            job
        }]
    );
    let mut model = paused_model(80, 24);
    select(&mut model, "next_batch");
    assert_eq!(
        press(&mut model, "p"),
        vec![Command::Propose {
            action: Action::Resume,
            job: "next_batch".into()
        }]
    );
}

#[test]
fn a_pause_starts_in_its_reason_and_is_never_carried_out_without_one() {
    let mut model = model_at(80, 24);
    update(&mut model, Msg::Proposed(Ok(pause_plan(""))));
    assert_eq!(model.dialog.as_ref().unwrap().focus, Focus::Reason);
    // Straight to Pause with no reason: refused, focus back on the reason.
    update(&mut model, key(KeyCode::BackTab));
    assert_eq!(model.dialog.as_ref().unwrap().focus, Focus::Confirm);
    assert_eq!(update(&mut model, key(KeyCode::Enter)), None);
    assert_eq!(model.dialog.as_ref().unwrap().focus, Focus::Reason);
    assert!(
        model
            .status
            .clone()
            .unwrap()
            .contains("write a reason first")
    );
    // Typing never confirms: Enter in the field moves on to Cancel.
    press(&mut model, "upstream maintenance");
    update(&mut model, key(KeyCode::Enter));
    assert_eq!(model.dialog.as_ref().unwrap().focus, Focus::Cancel);
    update(&mut model, key(KeyCode::Tab));
    assert_eq!(
        update(&mut model, key(KeyCode::Enter)),
        Some(Command::Execute(pause_plan("upstream maintenance")))
    );
}

#[test]
fn the_pause_dialog_80x24() {
    let mut model = model_at(80, 24);
    update(&mut model, Msg::Proposed(Ok(pause_plan(""))));
    press(&mut model, "upstream maint");
    insta::assert_snapshot!(draw(&model));
}

#[test]
fn a_paused_job_is_listed_last_with_who_when_why_and_its_last_run() {
    let mut model = paused_model(120, 40);
    let rows: Vec<String> = model
        .rows()
        .iter()
        .filter_map(|r| match r {
            mihari::tui::model::Row::Job(a) => Some(a.id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(rows.last().map(String::as_str), Some("next_batch"));
    select(&mut model, "next_batch");
    update(&mut model, key(KeyCode::Enter));
    let screen = draw(&model);
    assert!(screen.contains("PAUSED"), "{screen}");
    assert!(
        screen.contains("Paused by alice 600 s ago: upstream maintenance until 18:00 (p resumes)"),
        "{screen}"
    );
    assert!(screen.contains("Last run exited 1 700 s ago"), "{screen}");
}

/// Two questions of one job: `a` opens a chooser (not the first one's dialog), arrows and
/// digits pick, Esc decides nothing; with one question `a` proposes it at once, as before.
#[test]
fn the_approve_key_chooses_among_several_pending_approvals_80x24() {
    let (jobs, mut evidence) = fleet();
    let approval =
        |key: &str, step: &str, summary: &str, secs: i64, by: Option<&str>| PendingApproval {
            key: key.into(),
            step: step.into(),
            summary: summary.into(),
            requested: ago(secs),
            requested_by: by.map(Into::into),
        };
    evidence[7].pending_approvals = vec![
        approval("k-one", "publish", "publish 3 articles", 600, Some("alice")),
        approval("k-two", "delete", "delete 12 raw shards", 120, None),
    ];
    let mut model = Model::new(
        jobs.clone(),
        "/etc/mihari/jobs.yaml".into(),
        Theme::plain(),
        now(),
    );
    update(&mut model, Msg::Resize(80, 24));
    update(
        &mut model,
        Msg::Snapshot(Snapshot::judge(&jobs, evidence.clone(), now())),
    );
    select(&mut model, "publish");
    let detail = mihari::tui::view::detail_lines(&model, 200)
        .iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        detail.contains("1 ⚑ step 'publish': publish 3 articles · asked by alice at 08:50:00 (600 s ago) · key k-one"),
        "{detail}"
    );
    assert!(
        detail.contains("2 ⚑ step 'delete': delete 12 raw shards · asked at 08:58:00 (120 s ago)"),
        "{detail}"
    );

    assert_eq!(press(&mut model, "a"), vec![]);
    let chooser = model.chooser.as_ref().expect("a chooser");
    assert_eq!(chooser.at, 0);
    insta::assert_snapshot!(draw(&model));
    // Down moves, Up stays at the top, Esc closes with nothing decided.
    update(&mut model, key(KeyCode::Down));
    assert_eq!(model.chooser.as_ref().unwrap().at, 1);
    update(&mut model, key(KeyCode::Down));
    assert_eq!(model.chooser.as_ref().unwrap().at, 1);
    assert_eq!(update(&mut model, key(KeyCode::Esc)), None);
    assert!(model.chooser.is_none());
    // A digit takes that one at once; Enter takes the highlighted one.
    press(&mut model, "a");
    assert_eq!(
        press(&mut model, "2"),
        vec![Command::ProposeApproval {
            job: "publish".into(),
            key: "k-two".into()
        }]
    );
    assert!(model.chooser.is_none());
    press(&mut model, "a");
    press(&mut model, "9");
    assert!(model.chooser.is_some(), "no ninth: the chooser stays");
    assert_eq!(
        update(&mut model, key(KeyCode::Enter)),
        Some(Command::ProposeApproval {
            job: "publish".into(),
            key: "k-one".into()
        })
    );

    // One question: the dialog is proposed at once, as it always was.
    evidence[7].pending_approvals.truncate(1);
    update(
        &mut model,
        Msg::Snapshot(Snapshot::judge(&jobs, evidence, now())),
    );
    assert_eq!(
        press(&mut model, "a"),
        vec![Command::Propose {
            action: Action::Approve,
            job: "publish".into()
        }]
    );
    assert!(model.chooser.is_none());
}
