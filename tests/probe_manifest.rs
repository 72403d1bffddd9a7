//! `probe::manifest::read_manifest` on real files written the way seed 004's `RunState.save`
//! writes them: part-way through the phases, between runs, half-written, and gone.

use std::fs::{self, File};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Local, NaiveDateTime, TimeZone, Utc};
use mihari::core::{ManifestReading, Reading};
use mihari::probe::manifest::read_manifest;

fn found(reading: Reading<ManifestReading>) -> ManifestReading {
    match reading {
        Reading::Found(reading) => reading,
        other => panic!("expected a reading, got {other:?}"),
    }
}

fn set_mtime(path: &std::path::Path, secs: u64, nanos: u32) -> DateTime<Utc> {
    let at = SystemTime::UNIX_EPOCH + Duration::new(secs, nanos);
    File::options()
        .write(true)
        .open(path)
        .expect("open")
        .set_modified(at)
        .expect("set mtime");
    DateTime::<Utc>::from(at)
}

#[test]
fn part_way_through_the_phases() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("manifest.json");
    // json.dumps(data, ensure_ascii=False, indent=2) after three phases.
    fs::write(
        &path,
        r#"{
  "run_id": "run-20240501-0900",
  "current_phase": "article_generation",
  "phase_results": {
    "loading": true,
    "topic_selection": true,
    "topic_dedup": true
  },
  "updated_at": "2024-05-01T09:00:00.250000"
}"#,
    )
    .expect("write");
    let reading = found(read_manifest(&path));
    assert_eq!(reading.run_id.as_deref(), Some("run-20240501-0900"));
    assert_eq!(reading.current_phase.as_deref(), Some("article_generation"));
    assert_eq!(
        reading.completed_phases,
        ["loading", "topic_selection", "topic_dedup"]
    );
    // Naive: Python's datetime.now() is the machine's local time.
    let naive = NaiveDateTime::parse_from_str("2024-05-01T09:00:00.25", "%Y-%m-%dT%H:%M:%S%.f")
        .expect("valid");
    let expected = Local
        .from_local_datetime(&naive)
        .earliest()
        .expect("exists locally")
        .to_utc();
    assert_eq!(reading.updated_at, expected);
}

#[test]
fn between_phases_current_phase_is_null() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("manifest.json");
    fs::write(
        &path,
        r#"{"run_id": "r1", "current_phase": null, "phase_results": {}, "updated_at": "2024-05-01T12:00:00+00:00"}"#,
    )
    .expect("write");
    let reading = found(read_manifest(&path));
    assert_eq!(reading.current_phase, None);
    assert!(reading.completed_phases.is_empty());
    assert_eq!(
        reading.updated_at,
        Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0)
            .single()
            .expect("valid")
    );
}

#[test]
fn without_updated_at_the_mtime_stands_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("manifest.json");
    fs::write(&path, r#"{"run_id": "r1", "current_phase": "publish"}"#).expect("write");
    let mtime = set_mtime(&path, 1_714_564_800, 42);
    let reading = found(read_manifest(&path));
    assert_eq!(reading.updated_at, mtime);
    assert_eq!(reading.current_phase.as_deref(), Some("publish"));
}

#[test]
fn a_missing_manifest_is_empty() {
    // The seed deletes its manifest at cleanup: no run in progress is not a fault.
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(
        read_manifest(&dir.path().join("manifest.json")),
        Reading::Empty
    );
}

#[test]
fn garbage_and_half_written_manifests_are_faults() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("manifest.json");
    let whole =
        r#"{"run_id": "r1", "current_phase": "publish", "phase_results": {"loading": true}}"#;
    let rows: [(&str, &[u8], &str); 5] = [
        ("garbage", b"not json at all", "not a JSON object"),
        (
            "half written",
            &whole.as_bytes()[..40],
            "invalid manifest JSON",
        ),
        (
            "caught mid-rewrite, zero bytes",
            b"",
            "invalid manifest JSON",
        ),
        ("not UTF-8", b"{\"run_id\": \"\xff\xfe\"}", "UTF-8"),
        (
            "unreadable updated_at",
            br#"{"updated_at": "the day before yesterday"}"#,
            "'the day before yesterday'",
        ),
    ];
    for (name, bytes, needle) in rows {
        fs::write(&path, bytes).expect("write");
        let reading = read_manifest(&path);
        let error = reading
            .fault()
            .unwrap_or_else(|| panic!("{name}: {reading:?}"));
        assert!(error.contains(needle), "{name}: {error}");
        assert!(error.contains("manifest.json"), "{name}: {error}");
    }
}

#[test]
fn a_directory_is_a_fault() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("manifest.json");
    fs::create_dir(&path).expect("mkdir");
    let reading = read_manifest(&path);
    assert!(
        reading.fault().is_some_and(|e| e.contains("directory")),
        "{reading:?}"
    );
}
