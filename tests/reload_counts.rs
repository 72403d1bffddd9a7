//! A reload of the jobs file while the dashboard (or the watcher) is open re-counts no
//! unchanged progress file: the jobs it keeps keep what was counted, and only the jobs it
//! adds or changes are gathered. Through the live loop's own bookkeeping (`Live`), on real
//! files: the jobs file is saved in place and by rename, as editors do, and the bytes the
//! line counter read are the evidence (a re-count of an unchanged file reads it whole).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;
use mihari::engine::live::{Arrivals, Live, Reload};
use mihari::engine::triggers::Trigger;

const JOBS: usize = 50;
const LINES: usize = 2000;

fn progress_lines(n: usize) -> String {
    (0..n).map(|i| format!("{{\"step\": {i}}}\n")).collect()
}

fn stanza(root: &Path, id: &str) -> String {
    format!(
        "  - id: {id}\n    progress_file: {}\n    stall_sec: 86400\n    expected_total: \
         100000\n    should_run_when: [not_complete]\n",
        root.join(format!("{id}.progress")).display()
    )
}

fn save(path: &Path, text: &str, by_rename: bool) {
    if by_rename {
        let temp = path.with_extension("yaml.tmp");
        fs::write(&temp, text).expect("write the new jobs file");
        fs::set_permissions(&temp, fs::Permissions::from_mode(0o600)).expect("chmod");
        fs::rename(&temp, path).expect("rename over the jobs file");
    } else {
        fs::write(path, text).expect("save the jobs file in place");
    }
}

#[test]
fn a_reload_counts_only_the_added_jobs_progress_and_never_an_unchanged_one_again() {
    let dir = tempfile::tempdir().expect("a temp dir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
    let root = dir.path();
    let jobs_file: PathBuf = root.join("jobs.yaml");
    let mut text = format!(
        "settings:\n  state_dir: {}\njobs:\n",
        root.join("state").display()
    );
    for n in 0..JOBS {
        let id = format!("job{n:02}");
        fs::write(root.join(format!("{id}.progress")), progress_lines(LINES)).expect("progress");
        text.push_str(&stanza(root, &id));
    }
    save(&jobs_file, &text, false);
    fs::set_permissions(&jobs_file, fs::Permissions::from_mode(0o600)).expect("chmod");
    let one_file = fs::metadata(root.join("job00.progress"))
        .expect("stat")
        .len();

    let config = mihari::config::load(&jobs_file).expect("the jobs file loads");
    let mut live = Live::new(config, Arc::new(|_| {})).expect("live");
    let first = live.start(Utc::now());
    assert_eq!(first.evidence.len(), JOBS);
    let counted = live.engine.progress_bytes_counted();
    assert_eq!(
        counted,
        JOBS as u64 * one_file,
        "the first look counts every file once"
    );

    for (k, by_rename) in [(0, false), (1, true), (2, false), (3, true)] {
        let id = format!("added{k}");
        let lines = 10 + k;
        fs::write(root.join(format!("{id}.progress")), progress_lines(lines)).expect("progress");
        text.push_str(&stanza(root, &id));
        save(&jobs_file, &text, by_rename);
        let before = live.engine.progress_bytes_counted();

        let mut arrivals = Arrivals::default();
        live.note(&mut arrivals, Trigger::Changed(jobs_file.clone()));
        let snapshot = live
            .apply(arrivals, false, Utc::now())
            .expect("a saved jobs file calls for a snapshot");
        let reloads = live.take_reloads();
        assert!(
            matches!(reloads.as_slice(), [Reload::Loaded(change)] if change.added == [id.clone()]),
            "one load that adds '{id}': {reloads:?}"
        );
        assert_eq!(snapshot.evidence.len(), JOBS + k + 1);
        let added = snapshot
            .assessment_of(&id)
            .expect("the added job is judged");
        assert_eq!(added.done, Some(lines as u64), "the added job is counted");
        let unchanged = snapshot.assessment_of("job07").expect("an unchanged job");
        assert_eq!(
            unchanged.done,
            Some(LINES as u64),
            "and the kept ones keep their count"
        );

        let read = live.engine.progress_bytes_counted() - before;
        assert_eq!(
            read,
            progress_lines(lines).len() as u64,
            "reload {k}: only the added job's progress file is counted, no unchanged one \
             again (one is {one_file} bytes)"
        );
    }

    // A job whose stanza changed is gathered again: its file is counted from its start; the
    // others still are not.
    text = text.replace("expected_total: 100000\n", "expected_total: 100001\n");
    let only_job00 = text.replacen("expected_total: 100001\n", "expected_total: 99999\n", 1);
    let restored = only_job00.replace("expected_total: 100001\n", "expected_total: 100000\n");
    save(&jobs_file, &restored, true);
    let before = live.engine.progress_bytes_counted();
    let mut arrivals = Arrivals::default();
    live.note(&mut arrivals, Trigger::Changed(jobs_file.clone()));
    live.apply(arrivals, false, Utc::now()).expect("a snapshot");
    let reloads = live.take_reloads();
    assert!(
        matches!(reloads.as_slice(), [Reload::Loaded(change)] if change.changed == ["job00"]),
        "{reloads:?}"
    );
    assert!(
        live.engine.progress_bytes_counted() - before <= one_file,
        "only the changed job's file may be counted again"
    );
}
