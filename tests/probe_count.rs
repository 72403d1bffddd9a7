//! `probe::count::LineCounter` on real files: only newline-terminated lines count, a pass
//! reads only what was appended, and truncation, rotation and replacement start the count
//! again. The property test checks the incremental count against a from-scratch count after
//! any sequence of appends, truncations and replacements.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use mihari::core::{LineCount, Reading};
use mihari::probe::count::{LineCounter, count_lines_from};
use proptest::prelude::*;

fn done(reading: &Reading<LineCount>) -> Option<u64> {
    match reading {
        Reading::Found(count) => Some(count.done),
        Reading::Empty => Some(0),
        Reading::Fault(error) => panic!("unexpected fault: {error}"),
    }
}

fn append(path: &Path, bytes: &[u8]) {
    let mut file = File::options()
        .append(true)
        .create(true)
        .open(path)
        .expect("open for append");
    file.write_all(bytes).expect("append");
}

fn lines(n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| format!("{{\"i\":{i},\"ok\":true}}\n").into_bytes())
        .collect()
}

struct Scratch {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn scratch() -> Scratch {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("progress.jsonl");
    Scratch { _dir: dir, path }
}

#[test]
fn only_newline_terminated_lines_count() {
    let s = scratch();
    let mut counter = LineCounter::new();
    assert_eq!(counter.count(&s.path), Reading::Empty, "missing is empty");
    File::create(&s.path).expect("create");
    assert_eq!(
        counter.count(&s.path),
        Reading::Empty,
        "zero bytes is empty"
    );
    append(&s.path, b"{\"i\":0");
    assert_eq!(
        counter.count(&s.path),
        Reading::Empty,
        "a half-written first line"
    );
    append(&s.path, b"}\n{\"i\":1");
    assert_eq!(done(&counter.count(&s.path)), Some(1));
    append(&s.path, b"}\n");
    assert_eq!(done(&counter.count(&s.path)), Some(2));
}

#[test]
fn the_reading_carries_the_files_mtime() {
    let s = scratch();
    fs::write(&s.path, lines(3)).expect("write");
    let mtime = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_714_564_800, 5);
    File::options()
        .write(true)
        .open(&s.path)
        .expect("open")
        .set_modified(mtime)
        .expect("set mtime");
    let reading = LineCounter::new().count(&s.path);
    let Reading::Found(count) = reading else {
        panic!("expected a count, got {reading:?}");
    };
    assert_eq!(count.done, 3);
    assert_eq!(count.modified, chrono::DateTime::<chrono::Utc>::from(mtime));
}

#[test]
fn an_append_is_counted_by_reading_only_the_new_bytes() {
    let s = scratch();
    let first = lines(10_000);
    fs::write(&s.path, &first).expect("write");
    let mut counter = LineCounter::new();
    assert_eq!(done(&counter.count(&s.path)), Some(10_000));
    assert_eq!(counter.bytes_read(), first.len() as u64);

    let more = lines(7);
    append(&s.path, &more);
    assert_eq!(done(&counter.count(&s.path)), Some(10_007));
    assert_eq!(
        counter.bytes_read(),
        (first.len() + more.len()) as u64,
        "the second pass read only the appended bytes"
    );
    assert_eq!(
        counter.offset(&s.path),
        Some((first.len() + more.len()) as u64)
    );

    // Nothing appended: nothing read.
    assert_eq!(done(&counter.count(&s.path)), Some(10_007));
    assert_eq!(counter.bytes_read(), (first.len() + more.len()) as u64);
}

#[test]
fn truncation_counts_again_from_zero() {
    let s = scratch();
    fs::write(&s.path, lines(100)).expect("write");
    let mut counter = LineCounter::new();
    assert_eq!(done(&counter.count(&s.path)), Some(100));
    // copytruncate: same inode, shorter.
    File::options()
        .write(true)
        .open(&s.path)
        .expect("open")
        .set_len(0)
        .expect("truncate");
    append(&s.path, &lines(3));
    let before = counter.bytes_read();
    assert_eq!(done(&counter.count(&s.path)), Some(3));
    assert_eq!(counter.bytes_read() - before, lines(3).len() as u64);
}

#[test]
fn truncated_and_rewritten_past_the_old_offset_is_noticed() {
    let s = scratch();
    fs::write(&s.path, lines(50)).expect("write");
    let mut counter = LineCounter::new();
    assert_eq!(done(&counter.count(&s.path)), Some(50));
    let ino = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&s.path).expect("stat"));
    // Same inode, longer than before, different content: only the bytes show it.
    let rewritten: Vec<u8> = b"x\n".repeat(lines(50).len());
    fs::write(&s.path, &rewritten).expect("rewrite in place");
    let same_ino = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&s.path).expect("stat"));
    assert_eq!(ino, same_ino, "fs::write truncates in place");
    assert_eq!(done(&counter.count(&s.path)), Some(lines(50).len() as u64));
}

#[test]
fn rotation_to_a_new_inode_counts_again() {
    let s = scratch();
    fs::write(&s.path, lines(100)).expect("write");
    let mut counter = LineCounter::new();
    assert_eq!(done(&counter.count(&s.path)), Some(100));
    // Atomic replace: write a new file and rename it over the old one. It is longer, so only
    // the inode tells it apart.
    let next = s.path.with_extension("tmp");
    fs::write(&next, lines(150)).expect("write");
    fs::rename(&next, &s.path).expect("rename");
    assert_eq!(done(&counter.count(&s.path)), Some(150));

    // Rotation: the old file moves away, a new one starts.
    fs::rename(&s.path, s.path.with_extension("1")).expect("rotate");
    assert_eq!(counter.count(&s.path), Reading::Empty);
    append(&s.path, &lines(2));
    assert_eq!(done(&counter.count(&s.path)), Some(2));
}

#[test]
fn delete_and_recreate_counts_again_even_if_the_inode_number_is_reused() {
    let s = scratch();
    let mut counter = LineCounter::new();
    for round in 1..=5 {
        fs::write(&s.path, lines(10 * round)).expect("write");
        assert_eq!(done(&counter.count(&s.path)), Some(10 * round as u64));
        fs::remove_file(&s.path).expect("delete");
        // Recreated bigger with content whose last bytes differ from before.
        let mut content = lines(10 * round + 5);
        content.extend_from_slice(format!("round {round}\n").as_bytes());
        fs::write(&s.path, &content).expect("recreate");
        assert_eq!(
            done(&counter.count(&s.path)),
            Some(10 * round as u64 + 6),
            "round {round}"
        );
        fs::remove_file(&s.path).expect("delete");
    }
}

#[test]
fn a_directory_is_a_fault_and_does_not_poison_what_was_counted() {
    let s = scratch();
    fs::write(&s.path, lines(20)).expect("write");
    let mut counter = LineCounter::new();
    assert_eq!(done(&counter.count(&s.path)), Some(20));
    let aside = s.path.with_extension("aside");
    fs::rename(&s.path, &aside).expect("move aside");
    fs::create_dir(&s.path).expect("mkdir");
    let reading = counter.count(&s.path);
    assert!(
        reading.fault().is_some_and(|e| e.contains("directory")),
        "{reading:?}"
    );
    assert_eq!(counter.offset(&s.path), Some(lines(20).len() as u64));
    fs::remove_dir(&s.path).expect("rmdir");
    fs::rename(&aside, &s.path).expect("move back");
    append(&s.path, &lines(1));
    assert_eq!(done(&counter.count(&s.path)), Some(21));
}

#[test]
fn a_named_pipe_is_a_fault_and_does_not_hang() {
    let s = scratch();
    nix::unistd::mkfifo(&s.path, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let reading = LineCounter::new().count(&s.path);
    assert!(
        reading.fault().is_some_and(|e| e.contains("named pipe")),
        "{reading:?}"
    );
}

#[test]
fn count_lines_from_an_offset() {
    let s = scratch();
    fs::write(&s.path, b"a\nb\nc\nd").expect("write");
    let file = File::open(&s.path).expect("open");
    let mut buf = vec![0; 3];
    let all = count_lines_from(&file, 0, &mut buf).expect("count");
    assert_eq!((all.lines, all.end), (3, 7));
    let rest = count_lines_from(&file, 4, &mut buf).expect("count");
    assert_eq!((rest.lines, rest.end), (1, 7));
    let none = count_lines_from(&file, 100, &mut buf).expect("count");
    assert_eq!((none.lines, none.end), (0, 100));
}

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<u8>),
    /// Truncate to this fraction (in 1/16ths) of the current length.
    Truncate(u8),
    /// Write a new file and rename it over the progress file.
    Replace(Vec<u8>),
    /// Delete the progress file and create it again.
    Recreate(Vec<u8>),
    Delete,
}

fn content() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop_oneof![3 => Just(b'a'), 1 => Just(b'\n')], 0..200)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => content().prop_map(Op::Append),
        2 => (0u8..16).prop_map(Op::Truncate),
        1 => content().prop_map(Op::Replace),
        1 => content().prop_map(Op::Recreate),
        1 => Just(Op::Delete),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The incremental count equals a from-scratch count after every step.
    #[test]
    fn incremental_count_equals_a_fresh_count(ops in prop::collection::vec(op(), 1..40)) {
        let s = scratch();
        let mut model: Option<Vec<u8>> = None;
        let mut counter = LineCounter::with_buffer_bytes(4096);
        for op in ops {
            match op {
                Op::Append(bytes) => {
                    append(&s.path, &bytes);
                    model.get_or_insert_with(Vec::new).extend_from_slice(&bytes);
                }
                Op::Truncate(sixteenths) => {
                    if let Some(model) = model.as_mut() {
                        let len = model.len() * usize::from(sixteenths) / 16;
                        model.truncate(len);
                        File::options().write(true).open(&s.path).expect("open")
                            .set_len(len as u64).expect("truncate");
                    }
                }
                Op::Replace(bytes) => {
                    let next = s.path.with_extension("tmp");
                    fs::write(&next, &bytes).expect("write");
                    fs::rename(&next, &s.path).expect("rename");
                    model = Some(bytes);
                }
                Op::Recreate(bytes) => {
                    let _ = fs::remove_file(&s.path);
                    fs::write(&s.path, &bytes).expect("write");
                    model = Some(bytes);
                }
                Op::Delete => {
                    let _ = fs::remove_file(&s.path);
                    model = None;
                }
            }
            let expected = model.as_ref().map_or(0, |m| m.iter().filter(|&&b| b == b'\n').count() as u64);
            prop_assert_eq!(done(&counter.count(&s.path)), Some(expected));
            prop_assert_eq!(done(&LineCounter::new().count(&s.path)), Some(expected));
        }
    }
}
