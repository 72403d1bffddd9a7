//! `probe::files::stamp` on real files: modification times to the nanosecond, and the
//! difference between "nothing yet" (missing, zero bytes) and "cannot read" (a directory,
//! a pipe, a link, a path through a file).

use std::fs::{self, File};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use mihari::core::{FileStamp, Reading};
use mihari::probe::files::stamp;

fn at(secs: u64, nanos: u32) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::new(secs, nanos)
}

#[test]
fn a_file_reads_its_mtime_to_the_nanosecond_and_its_length() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("job.log");
    fs::write(&path, b"started\nworking\n").expect("write");
    let file = File::options().write(true).open(&path).expect("open");
    file.set_modified(at(1_714_564_800, 123_456_789))
        .expect("set mtime");
    drop(file);

    let expected = DateTime::<Utc>::from_timestamp(1_714_564_800, 123_456_789).expect("in range");
    assert_eq!(
        stamp(&path),
        Reading::Found(FileStamp {
            modified: expected,
            len: 16,
            carried: None,
        })
    );
}

#[test]
fn two_writes_in_the_same_second_are_different_stamps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("job.log");
    fs::write(&path, b"x").expect("write");
    let file = File::options().write(true).open(&path).expect("open");
    file.set_modified(at(1_714_564_800, 100))
        .expect("set mtime");
    let first = stamp(&path);
    file.set_modified(at(1_714_564_800, 200))
        .expect("set mtime");
    let second = stamp(&path);
    assert_ne!(first, second);
}

#[test]
fn missing_and_zero_byte_files_are_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(stamp(&dir.path().join("not-yet.log")), Reading::Empty);
    let zero = dir.path().join("zero.log");
    File::create(&zero).expect("create");
    assert_eq!(stamp(&zero), Reading::Empty);
}

#[test]
fn a_directory_where_the_log_should_be_is_a_fault() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("job.log");
    fs::create_dir(&path).expect("mkdir");
    let reading = stamp(&path);
    let error = reading.fault().expect("a fault, not empty");
    assert!(error.contains("directory"), "{error}");
    assert!(error.contains("job.log"), "{error}");
}

#[test]
fn a_path_through_a_file_is_a_fault_not_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("plain");
    fs::write(&file, b"x").expect("write");
    // ENOTDIR: the log's parent is a file. Something is misconfigured; it is not "no log yet".
    let reading = stamp(&file.join("job.log"));
    assert!(reading.fault().is_some(), "{reading:?}");
}

#[test]
fn a_named_pipe_is_a_fault_and_does_not_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("job.log");
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let reading = stamp(&path);
    let error = reading.fault().expect("a fault");
    assert!(error.contains("named pipe"), "{error}");
}

/// A link at a job's log is never followed (issue 9: a planted `job.log -> ~/precious.txt`):
/// dangling or not, it is a fault that names it and says what to do.
#[test]
fn a_link_at_the_log_is_a_fault_naming_it_never_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("real.log");
    let link = dir.path().join("job.log");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    for content in [None, Some(&b"line\n"[..])] {
        if let Some(content) = content {
            fs::write(&target, content).expect("write");
        }
        let reading = stamp(&link);
        let error = reading.fault().expect("a fault");
        assert!(error.contains("is a symbolic link"), "{error}");
        assert!(error.contains(&format!("'{}'", link.display())), "{error}");
        assert!(error.contains("point 'log' elsewhere"), "{error}");
    }
}

#[test]
fn a_fault_naming_a_hostile_path_is_inert() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("evil\u{1b}]0;pwned\u{7}.log");
    fs::create_dir(&path).expect("mkdir");
    let reading = stamp(&path);
    let error = reading.fault().expect("a fault");
    assert!(mihari::core::text::is_inert(error), "{error:?}");
    assert!(!error.contains("pwned"), "{error:?}");
}
