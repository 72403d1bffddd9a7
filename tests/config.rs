//! The jobs file, from the outside: every refusal of SPEC §2 against a fixture, the full
//! example loading with its values and defaults, permissions on real files in temp dirs,
//! the lookup order, and an alias bomb.
//!
//! Fixture refusals go through `load_str` with the fixture's own path, so they do not
//! depend on how the repository was checked out; `load` (which checks permissions) is
//! tested on files this test creates. Nothing here changes the process environment: the
//! lookup order runs in a child process with an environment of its own.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use mihari::config::{ConfigError, Predicate, find_config_path, load, load_str};

const INVALID: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/invalid");
const VALID: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/valid");

/// One refusal: the fixture, where it must point, the text it must quote, and a phrase
/// that says what would be accepted or what to do.
struct Refusal {
    fixture: &'static str,
    line: u64,
    column: u64,
    quoted: &'static str,
    phrase: &'static str,
}

const fn refusal(
    fixture: &'static str,
    line: u64,
    column: u64,
    quoted: &'static str,
    phrase: &'static str,
) -> Refusal {
    Refusal {
        fixture,
        line,
        column,
        quoted,
        phrase,
    }
}

#[rustfmt::skip]
const REFUSALS: &[Refusal] = &[
    // a. unknown keys, in every mapping of the file
    refusal("unknown_key_top_level",           2,  1, "watchers",      "accepted keys: settings, jobs"),
    refusal("unknown_key_in_settings",         2,  3, "digest",        "accepted keys: state_dir, digest_at,"),
    refusal("unknown_key_in_job",              6,  5, "stal_sec",      "did you mean 'stall_sec'?"),
    refusal("unknown_key_in_restart",          8,  7, "workdir",       "accepted keys: command, cwd, env, routes"),
    refusal("unknown_key_in_route",            8, 44, "queue",         "accepted keys: name, command"),
    refusal("unknown_key_in_check",            9,  9, "interval_sec",  "accepted keys: name, command, every_sec, timeout_sec"),
    refusal("unknown_key_in_progress_table",   8,  7, "column",        "accepted keys: db, table, time_column"),
    refusal("unknown_key_in_timeouts",         6, 34, "idle_sec",      "accepted keys: queue_sec, attempt_sec, total_sec"),
    // b. ids
    refusal("invalid_id",                      2,  9, "Collect Raw",   "like 'collect_raw'"),
    refusal("repeated_id",                     6,  9, "collect_raw",   "first at line 2"),
    refusal("missing_id",                      2,  5, "name: Bulk fetch", "add 'id:'"),
    // c. should_run_when
    refusal("should_run_when_missing",         2,  5, "collect_raw",   "has no should_run_when"),
    refusal("should_run_when_empty",           5, 22, "[]",            "list at least one of not_complete, resource_free"),
    refusal("should_run_when_unknown_predicate", 5, 38, "not-complete", "accepted: not_complete, resource_free"),
    refusal("should_run_when_not_a_list",      5, 22, "resource_free", "expected a list"),
    // d. not_complete
    refusal("not_complete_without_expected_total",   4, 23, "not_complete", "needs expected_total"),
    refusal("not_complete_without_countable_source", 6,  9, "not_complete", "add progress_file, progress_table or log_progress"),
    // e. resource_free
    refusal("resource_free_without_lock",      4, 23, "resource_free", "add resource_lock (or lock)"),
    // f. progress sources
    refusal("no_progress_source",              2,  5, "collect_raw",   "log, progress_file, progress_table, manifest"),
    refusal("stall_never_without_holder",      6,  5, "collect_raw",   "with stall_sec: never a holder alone is enough"),
    // g. auto_restart
    refusal("auto_restart_without_reason",     6, 19, "true",          "lacks auto_restart_reason"),
    refusal("auto_restart_with_blank_reason",  7, 26, "  ",            "is blank"),
    refusal("auto_restart_without_restart_command", 6, 19, "true",     "lacks restart.command"),
    // h. empty commands
    refusal("empty_restart_command",           7, 16, "[]",            "restart.command of job 'collect_raw' is empty"),
    refusal("restart_command_without_value",   7, 14, "",              "restart.command of job 'collect_raw' is empty"),
    refusal("empty_route_command",             8, 35, "[]",            "command of route 'local'"),
    refusal("empty_check_command",             8, 18, "[]",            "command of check 'no_gaps'"),
    refusal("empty_escalate_command",          2, 21, "[]",            "settings.escalate_command is empty"),
    refusal("empty_program_name",              7, 17, "",              "empty program name"),
    refusal("check_without_command",           7,  9, "no_gaps",       "has no command"),
    // j. yes/no/on/off
    refusal("bad_bool_yes",                    6, 19, "yes",           "write true or false"),
    refusal("bad_bool_no",                     6, 19, "no",            "write true or false"),
    refusal("bad_bool_on",                     6, 19, "on",            "write true or false"),
    refusal("bad_bool_off",                    6, 19, "off",           "write true or false"),
    // k. syntax, types, duplicates, missing jobs, repeated names
    refusal("syntax_error",                    5, 22, "[",             "not valid YAML"),
    refusal("negative_stall_sec",              6, 16, "-5",            "expected a whole number"),
    refusal("zero_stall_sec",                  6, 16, "0",             "at least 1"),
    refusal("shell_string_command",            7, 16, "python x.py",   "argv list, never a shell string"),
    refusal("settings_not_a_mapping",          1, 11, "5",             "expected a mapping"),
    refusal("duplicate_key",                   6,  5, "log",           "appears twice"),
    refusal("multiple_documents",              3,  1, "jobs: []",      "one document"),
    refusal("empty_file",                      1,  1, "",              "write 'jobs: []'"),
    refusal("comments_only",                   1,  1, "",              "write 'jobs: []'"),
    refusal("no_jobs_key",                     1,  1, "settings:",     "add a 'jobs:' list"),
    refusal("jobs_without_value",              3,  5, "",              "write 'jobs: []'"),
    refusal("repeated_check_name",             9, 15, "no_gaps",       "first at line 7"),
    refusal("repeated_route_name",             9, 19, "local",         "first at line 8"),
    refusal("check_name_with_control",         7, 15, "no gaps",       "holds a control character"),
    refusal("route_name_with_control",         8, 19, "local",         "holds a control character"),
    // values that would be silently wrong
    refusal("bad_digest_at",                   2, 14, "9am",           "HH:MM"),
    refusal("prometheus_textfile_not_prom",    2, 24, "/var/lib/node_exporter/mihari.txt", "reads only *.prom"),
    refusal("other_users_home",                3, 10, "~alice/collect.log", "only '~/'"),
    refusal("empty_path",                      3, 10, "",              "relative to the jobs file's folder"),
    refusal("bad_table_name",                  7, 14, "progress; DROP TABLE x", "not a plain SQL name"),
    refusal("env_name_with_equals",            7, 14, "A=B",           "without '='"),
    // one bad job refuses the whole file, good jobs before it included
    refusal("one_bad_job_refuses_all",         8, 23, "resource_free", "job 'bad'"),
    // how a progress table's times and counts are read
    refusal("bad_time_unit",                   9, 18, "msec",          "write one of 's', 'ms', 'us'"),
    refusal("bad_time_zone",                   9, 18, "JST",           "write one of 'local', 'utc'"),
    refusal("total_column_without_done_column", 9, 21, "total",        "has no done_column beside it"),
    // progress read from the job's own output
    refusal("log_progress_pattern_does_not_compile", 6, 16, r"step (?P<done>\d+/(?P<total>\d+)", "is not a regular expression (unclosed group)"),
    refusal("log_progress_pattern_without_done_or_percent", 6, 16, r"step (\d+)/(?P<total>\d+)", "has neither a 'done' nor a 'percent' group"),
    refusal("log_progress_unknown_preset",     6, 15, "progressbar",   "write one of 'tqdm', 'fraction', 'percent', 'curl', 'wget', 'rsync', 'pv', 'dd'"),
    refusal("log_progress_dd_without_expected_total", 4, 23, "not_complete", "dd status=progress prints the bytes copied, never of how many"),
    refusal("log_progress_without_log",        6, 19, "{",             "has no log to read"),
    refusal("log_progress_preset_and_pattern", 7, 16, r"step (?P<done>\d+)", "keep one"),
    refusal("log_progress_without_preset_or_pattern", 5, 19, "{",      "names neither a preset nor a pattern"),
    refusal("unknown_key_in_log_progress",     6,  7, "regex",         "accepted keys: preset, pattern"),
    // markers (SPEC §5)
    refusal("marker_without_path",             6,  9, "{",             "add 'path:'"),
    refusal("marker_without_stale_after_sec",  6,  9, "/data/run/.resumed", "lacks stale_after_sec"),
    refusal("marker_zero_stale_after_sec",     6, 54, "0",             "at least 1"),
    refusal("marker_repeated",                 7, 17, "/data/run/./.resumed", "first at line 6"),
    refusal("unknown_key_in_marker",           6, 37, "max_age_sec",   "accepted keys: path, stale_after_sec"),
    refusal("marker_empty_path",               6, 17, "",              "markers.path"),
    // slurm (SPEC §12)
    refusal("slurm_beside_lock",               5, 12, "{",             "declares both slurm (at '{') and lock"),
    refusal("slurm_beside_process",            5, 12, "{",             "declares both slurm (at '{') and process"),
    refusal("slurm_name_and_id",               4, 43, "4242",          "keep one"),
    refusal("slurm_without_job",               4, 12, "{",             "write job_name: NAME"),
    refusal("slurm_submit_with_job_id",        4, 36, "[",             "which job_id would not follow"),
    refusal("slurm_submit_and_requeue",        4, 80, "true",          "keep one"),
    refusal("slurm_submit_shell_string",       4, 43, "sbatch train.sbatch", "never a shell string"),
    refusal("slurm_restart_command",           5, 25, "[",             "slurm.submit is what restart runs"),
    refusal("slurm_auto_restart_without_submit", 5, 19, "true",        "lacks slurm.submit"),
    refusal("slurm_bad_user",                  4, 41, "al ice",        "is not a user name"),
    refusal("unknown_key_in_slurm",            4, 14, "name",          "accepted keys: job_name, job_id, user, submit, requeue"),
    // jobs that run on a schedule
    refusal("schedule_overdue_without_schedule", 4, 23, "overdue",     "needs schedule"),
    refusal("schedule_without_overdue",        5, 15, "{",             "add overdue to it"),
    refusal("schedule_every_and_cron",         5, 35, "*/20 * * * *",  "keep one"),
    refusal("schedule_neither_every_nor_cron", 5, 15, "{",             "names neither every nor cron"),
    refusal("schedule_bad_duration",           5, 24, "20 min",        "a whole number of at least 1 and one unit, s, m, h or d"),
    refusal("schedule_duration_without_unit",  7, 14, "300",           "'300' alone has no unit"),
    refusal("schedule_cron_four_fields",       5, 23, "*/20 * * *",    "the five fields of a crontab line"),
    refusal("schedule_cron_never_matches",     5, 23, "0 0 31 2 *",    "never matches a real day"),
    refusal("schedule_without_grace",          5, 15, "{",             "lacks grace"),
    refusal("schedule_time_zone_with_every",   5, 50, "utc",           "is read only with cron"),
    refusal("schedule_bad_time_zone",          5, 59, "Europe/Berlin", "write one of 'local', 'utc'"),
    refusal("unknown_key_in_schedule",         5, 39, "at",            "accepted keys: every, cron, grace, time_zone"),
];

fn fixture(folder: &str, name: &str) -> (PathBuf, String) {
    let path = Path::new(folder).join(format!("{name}.yaml"));
    let text =
        fs::read_to_string(&path).unwrap_or_else(|err| panic!("fixture {}: {err}", path.display()));
    (path, text)
}

#[test]
fn every_invalid_fixture_is_refused_with_position_quote_and_advice() {
    for row in REFUSALS {
        let (path, text) = fixture(INVALID, row.fixture);
        let err = load_str(&text, &path).expect_err(row.fixture);
        let shown = err.to_string();
        let context = format!("fixture {}:\n{shown}", row.fixture);
        assert_eq!(err.path, path, "{context}");
        assert_eq!(err.position, Some((row.line, row.column)), "{context}");
        assert!(
            shown.starts_with(&format!("{}:{}:{}: ", path.display(), row.line, row.column)),
            "{context}"
        );
        let headline = err.summary();
        assert!(headline.contains(&format!("'{}'", row.quoted)), "{context}");
        assert!(headline.contains(row.phrase), "{context}");
        assert!(mihari::core::text::is_inert(headline), "{context}");
    }
}

#[test]
fn every_invalid_fixture_has_a_row_and_every_row_a_fixture() {
    let mut on_disk: Vec<String> = fs::read_dir(INVALID)
        .expect("fixtures folder")
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            name.strip_suffix(".yaml").map(str::to_owned)
        })
        .collect();
    on_disk.sort();
    let mut in_table: Vec<String> = REFUSALS.iter().map(|r| r.fixture.to_owned()).collect();
    in_table.sort();
    assert_eq!(on_disk, in_table);
}

#[test]
fn refusals_point_at_the_text_with_a_caret() {
    let (path, text) = fixture(INVALID, "negative_stall_sec");
    let err = load_str(&text, &path).expect_err("refused");
    let lines: Vec<&str> = err.message.lines().collect();
    assert_eq!(lines.len(), 3, "{}", err.message);
    assert_eq!(lines[1], "6 |     stall_sec: -5");
    assert_eq!(lines[2], "  |                ^^");
}

#[test]
fn escape_sequences_in_the_file_never_reach_the_terminal() {
    let source = "jobs:\n  - id: \"\u{1b}]0;pwned\u{7}\u{1b}[2J\"\n    log: /l\n";
    let err = load_str(source, Path::new("/etc/mihari/jobs.yaml")).expect_err("bad id");
    assert!(
        mihari::core::text::is_inert(&err.message.replace('\n', " ")),
        "{err}"
    );
}

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .expect("these tests need $HOME")
}

#[test]
fn the_full_example_loads_with_every_value() {
    let (path, text) = fixture(VALID, "full");
    let config = load_str(&text, &path).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(config.source, path);

    let settings = &config.settings;
    assert_eq!(settings.state_dir, home().join(".local/state/mihari-test"));
    assert_eq!(settings.digest_at.to_string(), "07:30:00");
    assert_eq!(settings.restart_daily_cap, 4);
    assert_eq!(settings.workspace_cooldown_sec, 900);
    assert_eq!(settings.max_hops, 2);
    assert_eq!(
        settings.escalate_command.as_deref(),
        Some(&["notify-send".to_owned(), "mihari".to_owned()][..])
    );

    assert_eq!(config.jobs.len(), 2);
    let job = &config.jobs[0];
    assert_eq!(job.id, "collect_raw");
    assert_eq!(job.name.as_deref(), Some("Bulk fetch of raw data"));
    assert_eq!(job.owner.as_deref(), Some("data-team"));
    assert_eq!(job.workspace.as_deref(), Some(Path::new("/data/raw")));
    assert_eq!(job.lock.as_deref(), Some(Path::new("/run/collect.lock")));
    assert_eq!(job.log.as_deref(), Some(Path::new("/var/log/collect.log")));
    assert_eq!(
        job.progress_file.as_deref(),
        Some(Path::new("/data/raw/_manifest.jsonl"))
    );
    let table = job.progress_table.as_ref().expect("progress_table");
    assert_eq!(table.db, PathBuf::from("/data/progress.sqlite"));
    assert_eq!(table.table, "progress");
    assert_eq!(table.time_column, "updated_at");
    assert_eq!(
        job.manifest.as_deref(),
        Some(Path::new("/data/run/manifest.json"))
    );
    assert_eq!(job.stall_sec, 120);
    assert_eq!(job.expected_total, Some(5121));
    assert_eq!(
        job.should_run_when,
        [Predicate::NotComplete, Predicate::ResourceFree]
    );
    assert_eq!(job.resource_lock_path(), Some(Path::new("/run/gpu0.lock")));
    assert!(job.auto_restart);
    assert_eq!(
        job.auto_restart_reason.as_deref(),
        Some("cause known: upstream 503s; procedure: rerun with --resume")
    );
    assert_eq!(
        job.auto_restart_blocked_reason.as_deref(),
        Some("server-side error not yet understood")
    );
    let restart = job.restart.as_ref().expect("restart");
    assert_eq!(
        restart.command.as_deref(),
        Some(
            &[
                "python3".to_owned(),
                "collect.py".to_owned(),
                "--resume".to_owned()
            ][..]
        )
    );
    assert_eq!(restart.cwd.as_deref(), Some(Path::new("/data")));
    assert_eq!(
        restart.env.get("PYTHONUNBUFFERED").map(String::as_str),
        Some("1")
    );
    let routes: Vec<&str> = restart.routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(routes, ["local", "cloud-a"]);
    assert_eq!(
        restart.routes[1].command,
        ["submit", "--queue", "a", "collect.py"]
    );
    assert_eq!(job.checks.len(), 1);
    assert_eq!(job.checks[0].name, "no_gaps");
    assert_eq!(job.checks[0].command, ["python3", "check_gaps.py"]);
    assert_eq!(job.checks[0].every_sec, 600);
    assert_eq!(job.checks[0].timeout_sec, 45);
    assert_eq!(job.timeouts.queue_sec, Some(3600));
    assert_eq!(job.timeouts.attempt_sec, Some(86400));
    assert_eq!(job.timeouts.total_sec, Some(259200));
    assert_eq!(job.workspace_key(), Some(Path::new("/data/raw")));
}

#[test]
fn a_minimal_job_gets_every_default_and_relative_paths_resolve_against_the_file() {
    let (path, text) = fixture(VALID, "full");
    let config = load_str(&text, &path).unwrap_or_else(|err| panic!("{err}"));
    let job = &config.jobs[1];
    let folder = Path::new(VALID);
    assert_eq!(job.id, "train-0");
    assert_eq!(
        job.log.as_deref(),
        Some(folder.join("logs/train.log").as_path())
    );
    // Lexical only: `.` is dropped, `..` is kept, nothing is looked up on disk.
    assert_eq!(
        job.lock.as_deref(),
        Some(folder.join("run/../run/train.lock").as_path())
    );
    assert_eq!(job.resource_lock_path(), job.lock.as_deref());
    assert_eq!(job.stall_sec, 300);
    assert!(!job.auto_restart);
    assert_eq!(job.restart, None);
    assert!(job.checks.is_empty());
    assert_eq!(job.timeouts, Default::default());
    assert_eq!(job.workspace_key(), None);
}

#[test]
fn an_empty_job_list_is_a_valid_config_with_default_settings() {
    let config = load_str("jobs: []\n", Path::new("/etc/mihari/jobs.yaml")).expect("valid");
    assert!(config.jobs.is_empty());
    let settings = &config.settings;
    let expected_state_dir = match std::env::var_os("XDG_STATE_HOME").map(PathBuf::from) {
        Some(xdg) if xdg.is_absolute() => xdg.join("mihari"),
        _ => home().join(".local/state/mihari"),
    };
    assert_eq!(settings.state_dir, expected_state_dir);
    assert_eq!(settings.digest_at.to_string(), "09:00:00");
    assert_eq!(settings.restart_daily_cap, 6);
    assert_eq!(settings.workspace_cooldown_sec, 600);
    assert_eq!(settings.max_hops, 3);
    assert_eq!(settings.escalate_command, None);
}

#[test]
fn check_defaults_apply() {
    let source = "jobs:\n  - id: a\n    log: /l\n    lock: /k\n    should_run_when: [resource_free]\n    \
                  checks:\n      - { name: c, command: [true] }\n";
    let config =
        load_str(source, Path::new("/etc/mihari/jobs.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let check = &config.jobs[0].checks[0];
    assert_eq!((check.every_sec, check.timeout_sec), (300, 30));
}

#[test]
fn home_and_relative_paths_resolve() {
    let source = "settings:\n  state_dir: state\njobs:\n  - id: a\n    log: ~/logs/a.log\n    \
                  progress_file: ./out/../out/a.jsonl\n    manifest: \"~\"\n    lock: /run/a.lock\n    \
                  should_run_when: [resource_free]\n    restart: { command: [run], cwd: work }\n";
    let config =
        load_str(source, Path::new("/srv/mihari/jobs.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let job = &config.jobs[0];
    assert_eq!(
        config.settings.state_dir,
        PathBuf::from("/srv/mihari/state")
    );
    assert_eq!(job.log, Some(home().join("logs/a.log")));
    assert_eq!(
        job.progress_file,
        Some(PathBuf::from("/srv/mihari/out/../out/a.jsonl"))
    );
    assert_eq!(job.manifest, Some(home()));
    let cwd = job.restart.as_ref().and_then(|r| r.cwd.clone());
    assert_eq!(cwd, Some(PathBuf::from("/srv/mihari/work")));
}

#[test]
fn a_relative_config_path_still_gives_absolute_job_paths() {
    let source =
        "jobs:\n  - id: a\n    log: a.log\n    lock: /k\n    should_run_when: [resource_free]\n";
    let config = load_str(source, Path::new("conf/jobs.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let log = config.jobs[0].log.clone().expect("log");
    assert!(log.is_absolute(), "{}", log.display());
    assert!(log.ends_with("conf/a.log"), "{}", log.display());
    assert!(config.source.is_absolute());
}

// ---- load: the file system ----

/// A folder holding a copy of the full valid fixture, both private to this user.
fn private_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jobs.yaml");
    let (_, text) = fixture(VALID, "full");
    fs::write(&path, text).expect("write");
    chmod(&path, 0o600);
    chmod(dir.path(), 0o700);
    (dir, path)
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn a_private_file_in_a_private_folder_loads() {
    let (_dir, path) = private_copy();
    let config = load(&path).unwrap_or_else(|err| {
        panic!("the baseline must load (is the temp folder itself writable by others?): {err}")
    });
    assert_eq!(config.jobs.len(), 2);
}

#[test]
fn a_file_writable_by_group_is_refused_with_the_fix() {
    let (_dir, path) = private_copy();
    chmod(&path, 0o664);
    let err = load(&path).expect_err("group-writable");
    assert_eq!(err.position, Some((1, 1)), "{err}");
    let shown = err.to_string();
    assert!(shown.contains(&format!("'{}'", path.display())), "{shown}");
    assert!(shown.contains("'0664'"), "{shown}");
    assert!(
        shown.contains(&format!("chmod go-w {}", path.display())),
        "{shown}"
    );
}

#[test]
fn a_file_writable_by_others_is_refused() {
    let (_dir, path) = private_copy();
    chmod(&path, 0o602);
    let err = load(&path).expect_err("world-writable");
    assert!(err.to_string().contains("'0602'"), "{err}");
}

#[test]
fn a_folder_writable_by_others_without_sticky_bit_is_refused() {
    let (dir, path) = private_copy();
    chmod(dir.path(), 0o777);
    let err = load(&path).expect_err("open folder");
    let shown = err.to_string();
    assert_eq!(err.position, Some((1, 1)), "{shown}");
    assert!(
        shown.contains(&format!("'{}'", dir.path().display())),
        "{shown}"
    );
    assert!(shown.contains("'0777'"), "{shown}");
    assert!(
        shown.contains(&format!("chmod go-w {}", dir.path().display())),
        "{shown}"
    );
    chmod(dir.path(), 0o700);
}

#[test]
fn a_folder_writable_by_others_with_sticky_bit_loads() {
    let (dir, path) = private_copy();
    chmod(dir.path(), 0o1777);
    let loaded = load(&path);
    chmod(dir.path(), 0o700);
    loaded.unwrap_or_else(|err| panic!("a sticky folder like /tmp is safe: {err}"));
}

#[test]
fn a_symlink_is_judged_by_the_file_it_points_to() {
    let (dir, path) = private_copy();
    let link = dir.path().join("link.yaml");
    std::os::unix::fs::symlink(&path, &link).expect("symlink");
    load(&link).unwrap_or_else(|err| panic!("{err}"));
    chmod(&path, 0o666);
    assert!(load(&link).is_err());
}

#[test]
fn a_missing_file_says_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jobs.yaml");
    let err = load(&path).expect_err("missing");
    assert_eq!(err.position, None);
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("{}: ", path.display())),
        "{shown}"
    );
    assert!(
        shown.contains("create it, see jobs.example.yaml, or pass --config"),
        "{shown}"
    );
}

#[test]
fn a_folder_instead_of_a_file_is_refused_without_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = load(dir.path()).expect_err("a folder");
    assert!(err.to_string().contains("is a folder"), "{err}");
}

#[test]
fn an_unreadable_file_is_refused_without_panic() {
    let (_dir, path) = private_copy();
    chmod(&path, 0o000);
    let result = load(&path);
    chmod(&path, 0o600);
    if nix::unistd::geteuid().is_root() {
        // root reads anything; the refusal cannot be provoked, only the absence of a panic.
        return;
    }
    let err = result.expect_err("unreadable");
    assert!(err.to_string().contains("make it readable"), "{err}");
}

#[test]
fn a_file_that_is_not_utf8_is_refused_at_the_bad_byte() {
    let (_dir, path) = private_copy();
    fs::write(&path, b"jobs: []\n# caf\xe9\n").expect("write");
    let err = load(&path).expect_err("latin-1");
    assert_eq!(err.position, Some((2, 6)), "{err}");
    assert!(err.to_string().contains("'\\xe9'"), "{err}");
}

// ---- the lookup order ----

/// Runs `find_config_path` in a child process (this test binary, filtered to
/// [`lookup_probe`]) with exactly the given variables, so the process-global environment
/// of the tests is never changed.
fn lookup_in_child(explicit: Option<&str>, vars: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe);
    child
        .args(["--exact", "lookup_probe", "--nocapture", "--test-threads=1"])
        .env_remove("MIHARI_CONFIG")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("HOME")
        .env("MIHARI_TEST_LOOKUP_PROBE", "1");
    if let Some(explicit) = explicit {
        child.env("MIHARI_TEST_LOOKUP_EXPLICIT", explicit);
    }
    for (name, value) in vars {
        child.env(name, value);
    }
    let output = child.output().expect("run the probe");
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|line| line.split_once("LOOKUP=").map(|(_, answer)| answer))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no answer from the probe:\n{stdout}"))
}

/// The child side of [`lookup_in_child`]; does nothing in a normal test run.
#[test]
fn lookup_probe() {
    if std::env::var_os("MIHARI_TEST_LOOKUP_PROBE").is_none() {
        return;
    }
    let explicit = std::env::var_os("MIHARI_TEST_LOOKUP_EXPLICIT").map(PathBuf::from);
    match find_config_path(explicit.as_deref()) {
        Ok(path) => println!("LOOKUP={}", path.display()),
        Err(err) => println!("LOOKUP=error: {err}"),
    }
}

#[test]
fn the_config_is_found_by_flag_then_mihari_config_then_xdg_then_home() {
    let all = [
        ("MIHARI_CONFIG", "/from/env.yaml"),
        ("XDG_CONFIG_HOME", "/xdg"),
        ("HOME", "/home/op"),
    ];
    assert_eq!(
        lookup_in_child(Some("/from/flag.yaml"), &all),
        "/from/flag.yaml"
    );
    assert_eq!(lookup_in_child(None, &all), "/from/env.yaml");
    assert_eq!(lookup_in_child(None, &all[1..]), "/xdg/mihari/jobs.yaml");
    assert_eq!(
        lookup_in_child(None, &all[2..]),
        "/home/op/.config/mihari/jobs.yaml"
    );
    assert!(lookup_in_child(None, &[]).starts_with("error: "));
}

// ---- hostile YAML ----

/// "Billion laughs": ten anchors, each ten aliases of the one before. Fully expanded it
/// would be 10^9 nodes. It must be refused after a bounded amount of work (the parser's
/// alias budget), not expanded; the test finishing at all is the evidence.
#[test]
fn an_alias_bomb_is_refused() {
    let mut classic = String::from("a0: &a0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n");
    for level in 1..10 {
        let aliases = vec![format!("*a{}", level - 1); 10].join(", ");
        classic.push_str(&format!("a{level}: &a{level} [{aliases}]\n"));
    }
    classic.push_str("jobs: []\n");
    assert!(load_str(&classic, Path::new("/etc/mihari/jobs.yaml")).is_err());

    // The same bomb where every expansion is well-typed, so only the alias budget stops it:
    // each job merges ten copies of the one before.
    let mut merged = String::from(
        "jobs:\n  - &a0 {id: a, log: /l, lock: /k, should_run_when: [resource_free]}\n",
    );
    for level in 1..10 {
        let aliases = vec![format!("*a{}", level - 1); 10].join(", ");
        merged.push_str(&format!("  - &a{level} {{<<: [{aliases}]}}\n"));
    }
    let err: ConfigError = load_str(&merged, Path::new("/etc/mihari/jobs.yaml")).expect_err("bomb");
    assert!(err.summary().contains("alias"), "{err}");
    assert!(err.summary().contains("alias bomb"), "{err}");
}

#[test]
fn a_refusal_after_a_lone_carriage_return_quotes_the_right_line() {
    // YAML ends a line at a lone "\r" too: the snippet must show the line the position names.
    let text = "jobs: []\rstall_sec: 1\nbar: 2\n";
    let error = mihari::config::load_str(text, std::path::Path::new("/etc/jobs.yaml"))
        .expect_err("unknown top-level keys are refused");
    let shown = error.to_string();
    assert!(shown.starts_with("/etc/jobs.yaml:2:1:"), "{shown}");
    assert!(shown.contains("stall_sec: 1"), "{shown}");
    assert!(!shown.contains("bar: 2"), "{shown}");
}

#[test]
fn a_status_table_with_a_total_column_stands_in_for_expected_total() {
    let text = "jobs:\n  - id: labels\n    should_run_when: [not_complete]\n    \
                progress_table:\n      db: /data/status.sqlite\n      table: status\n      \
                time_column: updated_at_ms\n      time_unit: ms\n      time_zone: utc\n      \
                done_column: done\n      total_column: total\n";
    let config =
        load_str(text, Path::new("/etc/mihari/jobs.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let table = config.jobs[0].progress_table.as_ref().expect("a table");
    assert_eq!(table.time_unit, mihari::config::TimeUnit::Milliseconds);
    assert_eq!(table.time_zone, mihari::config::TimeZoneName::Utc);
    assert_eq!(table.done_column.as_deref(), Some("done"));
    assert_eq!(table.total_column.as_deref(), Some("total"));
    assert_eq!(config.jobs[0].expected_total, None);

    // Without a total to reach, not_complete still needs expected_total.
    let without_total = text.replace("      total_column: total\n", "");
    let refused =
        load_str(&without_total, Path::new("/etc/mihari/jobs.yaml")).expect_err("no total at all");
    assert!(
        refused.to_string().contains("needs expected_total"),
        "{refused}"
    );
}

#[test]
fn a_progress_table_reads_seconds_and_local_time_by_default() {
    let (path, text) = fixture(VALID, "full");
    let config = load_str(&text, &path).unwrap_or_else(|err| panic!("{err}"));
    let table = config.jobs[0]
        .progress_table
        .as_ref()
        .expect("progress_table");
    assert_eq!(table.time_unit, mihari::config::TimeUnit::Seconds);
    assert_eq!(table.time_zone, mihari::config::TimeZoneName::Local);
    assert_eq!(
        (table.done_column.as_ref(), table.total_column.as_ref()),
        (None, None)
    );
}

#[test]
fn a_slurm_job_needs_no_lock_and_no_log_and_reads_tqdm_from_its_stdout() {
    let text = "jobs:\n  - id: train\n    slurm: { job_name: train-llm, user: alice, \
                submit: [\"sbatch\", \"train.sbatch\"] }\n    log_progress: { preset: tqdm }\n    \
                should_run_when: [not_succeeded, resource_free]\n    timeouts: { queue_sec: 3600 }\n";
    let config = load_str(text, Path::new("/srv/jobs.yaml")).expect("a Slurm job loads");
    let job = &config.jobs[0];
    let slurm = job.slurm.as_ref().expect("slurm");
    assert_eq!(
        slurm.job,
        mihari::config::SlurmJobRef::Name("train-llm".into())
    );
    assert_eq!(slurm.user.as_deref(), Some("alice"));
    assert_eq!(
        job.slurm_restart_argv(Some(42)),
        Some(vec!["sbatch".to_string(), "train.sbatch".to_string()])
    );
    assert!(job.lock.is_none() && job.log.is_none() && job.kept_lock.is_none());
    let requeue = "jobs:\n  - id: train\n    slurm: { job_id: 4242, requeue: true }\n    \
                   should_run_when: [not_succeeded]\n";
    let config = load_str(requeue, Path::new("/srv/jobs.yaml")).expect("a requeued job loads");
    assert_eq!(
        config.jobs[0].slurm_restart_argv(Some(4242)),
        Some(vec![
            "scontrol".to_string(),
            "requeue".to_string(),
            "4242".to_string()
        ])
    );
}
