//! `probe::tail::tail_lines` on real files in temp dirs: the last lines oldest first, read
//! backwards with a bounded number of bytes (a 200 MB file costs one chunk; a 200 MB line
//! without a newline costs at most the read budget), "\r\n" endings, invalid UTF-8 and a
//! character split across two reads, hostile escape sequences made inert, and the difference
//! between "nothing yet" (missing, zero bytes) and "cannot read" (a directory, a named pipe).
//! A property test compares it with the obvious slow version: read everything, split, keep
//! the last n.

use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use mihari::core::Reading;
use mihari::core::text::{inert, is_inert, is_mark};
use mihari::probe::tail::{
    CHUNK_BYTES, LOOKBEHIND_BYTES, MAX_LINE_BYTES, MAX_READ_BYTES, TRUNCATED_MARK, shown_line,
    tail_lines, tail_lines_counted,
};
use proptest::prelude::*;

fn lines(items: &[&str]) -> Reading<Vec<String>> {
    Reading::Found(items.iter().map(|s| s.to_string()).collect())
}

fn write(dir: &Path, name: &str, content: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    fs::write(&path, content).expect("write");
    path
}

/// A long line as shown, the slow way: the whole line made inert, then cut to its last
/// `MAX_LINE_BYTES` bytes at a character boundary, moved past marks that belong to the
/// character before the cut.
fn cut_after_inert(line: &[u8]) -> String {
    let safe = inert(&String::from_utf8_lossy(line));
    let mut at = safe.len().saturating_sub(MAX_LINE_BYTES);
    while !safe.is_char_boundary(at) {
        at += 1;
    }
    while let Some(mark) = safe[at..].chars().next().filter(|&c| is_mark(c)) {
        at += mark.len_utf8();
    }
    format!("{TRUNCATED_MARK}{}", &safe[at..])
}

/// The slow, obviously right tail: split the whole file on '\n' (a final '\n' ends the last
/// line, it does not start an empty one), keep the last `n`, take each line's last
/// carriage-return frame (after its last '\r', the '\r's at its end left aside), and show a line longer than `MAX_LINE_BYTES` as the mark and the end of its inert
/// text. A line longer than what the reader keeps behind the cut is shown by
/// `shown_line` (whose own properties are tested below): this compares the backwards
/// reader's assembly of lines with reading everything.
fn naive_tail(content: &[u8], n: usize) -> Reading<Vec<String>> {
    if content.is_empty() {
        return Reading::Empty;
    }
    let body = content.strip_suffix(b"\n").unwrap_or(content);
    let all: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
    let kept = &all[all.len().saturating_sub(n)..];
    Reading::Found(
        kept.iter()
            .map(|line| {
                let end = line
                    .iter()
                    .rposition(|&b| b != b'\r')
                    .map_or(0, |at| at + 1);
                let line = &line[..end];
                let line = match line.iter().rposition(|&b| b == b'\r') {
                    Some(at) => &line[at + 1..],
                    None => line,
                };
                if line.len() <= MAX_LINE_BYTES {
                    return inert(&String::from_utf8_lossy(line));
                }
                if line.len() <= MAX_LINE_BYTES + LOOKBEHIND_BYTES {
                    return cut_after_inert(line);
                }
                shown_line(line)
            })
            .collect(),
    )
}

#[test]
fn a_small_file_gives_its_last_lines_oldest_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "job.log", b"one\ntwo\nthree\nfour\n");
    assert_eq!(tail_lines(&path, 2), lines(&["three", "four"]));
    assert_eq!(
        tail_lines(&path, 100),
        lines(&["one", "two", "three", "four"])
    );
}

#[test]
fn exactly_max_lines_gives_the_whole_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "job.log", b"a\nb\nc\n");
    assert_eq!(tail_lines(&path, 3), lines(&["a", "b", "c"]));
    assert_eq!(tail_lines(&path, 4), lines(&["a", "b", "c"]));
}

#[test]
fn zero_lines_asked_reads_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "job.log", b"a\nb\n");
    assert_eq!(tail_lines_counted(&path, 0), (lines(&[]), 0));
}

#[test]
fn a_line_still_being_written_is_included() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "job.log", b"done 1\ndone 2\nworking on 3");
    assert_eq!(tail_lines(&path, 2), lines(&["done 2", "working on 3"]));
}

#[test]
fn a_file_of_only_newlines_is_empty_lines_not_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "job.log", b"\n\n\n");
    assert_eq!(tail_lines(&path, 10), lines(&["", "", ""]));
    assert_eq!(tail_lines(&path, 2), lines(&["", ""]));
    let one = write(dir.path(), "one.log", b"\n");
    assert_eq!(tail_lines(&one, 10), lines(&[""]));
}

#[test]
fn crlf_line_ends_are_dropped_not_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "job.log", b"first\r\nsecond\r\nthird\r");
    assert_eq!(tail_lines(&path, 5), lines(&["first", "second", "third"]));
    // A '\r' inside a line starts a new frame, as on a terminal: the last one is shown.
    let mid = write(dir.path(), "bar.log", b"10%\r20%\r\n");
    assert_eq!(tail_lines(&mid, 5), lines(&["20%"]));
}

#[test]
fn invalid_utf8_becomes_replacement_characters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "job.log", b"ok \xff\xfe bad\nfine \xc3\xa9\n");
    assert_eq!(
        tail_lines(&path, 5),
        lines(&["ok \u{fffd}\u{fffd} bad", "fine é"])
    );
}

#[test]
fn a_character_split_across_two_reads_stays_whole() {
    // '€' is three bytes; put the boundary of the first backwards read between its first and
    // second byte: the last CHUNK_BYTES bytes start with its second byte.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut content = b"head\nab".to_vec();
    let euro_at = content.len();
    content.extend_from_slice("€cd\n".as_bytes());
    let filler_len = CHUNK_BYTES - (content.len() - euro_at - 1);
    assert_eq!(filler_len % 3, 0, "the filler is lines of 'ff\\n'");
    let filler_lines = filler_len / 3;
    content.extend(std::iter::repeat_n(*b"ff\n", filler_lines).flatten());
    assert_eq!(content.len() - CHUNK_BYTES, euro_at + 1);
    let path = write(dir.path(), "job.log", &content);

    let (reading, read) = tail_lines_counted(&path, filler_lines + 1);
    let found = reading.found().expect("found").clone();
    assert_eq!(found.first().map(String::as_str), Some("ab€cd"));
    assert_eq!(found.len(), filler_lines + 1);
    assert!(read > CHUNK_BYTES as u64, "took a second read");
    assert_eq!(
        tail_lines(&path, filler_lines + 2),
        naive_tail(&content, filler_lines + 2)
    );
}

#[test]
fn hostile_escape_sequences_come_out_inert() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(
        dir.path(),
        "job.log",
        b"\x1b]0;pwned\x07title\n\x1b[2J\x1b[31mred\x1b[0m\nbell\x07 bs\x08 \xc2\x9b6n osc8 \x1b]8;;http://x\x1b\\link\n\xe2\x80\xaeevil\n",
    );
    let reading = tail_lines(&path, 10);
    let found = reading.found().expect("found");
    assert_eq!(found[0], "title");
    assert_eq!(found[1], "red");
    assert_eq!(found[2], "bell\u{2407} bs\u{2408}  osc8 link");
    assert_eq!(found[3], "\u{fffd}evil");
    assert!(found.iter().all(|line| is_inert(line)), "{found:?}");
}

#[test]
fn a_huge_file_costs_one_read_from_its_end() {
    // 200 MB of holes, then the lines that matter: only the end is read.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("huge.log");
    let file = File::create(&path).expect("create");
    file.set_len(200 * 1024 * 1024).expect("sparse length");
    drop(file);
    let mut file = OpenOptions::new().append(true).open(&path).expect("open");
    file.write_all(b"\nstep 1\nstep 2\nstep 3\n")
        .expect("append");
    drop(file);

    let (reading, read) = tail_lines_counted(&path, 3);
    assert_eq!(reading, lines(&["step 1", "step 2", "step 3"]));
    assert!(read <= CHUNK_BYTES as u64, "read {read} bytes");
}

#[test]
fn a_huge_line_without_newlines_is_never_read_whole() {
    // A 200 MB "line" (holes, then a progress bar redrawn with '\r' and no newline): the
    // read stops at the budget, or as soon as the line's last frame is found.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bar.log");
    let mut file = File::create(&path).expect("create");
    file.seek(SeekFrom::Start(200 * 1024 * 1024)).expect("seek");
    file.write_all(b"\r99% done").expect("write");
    drop(file);

    let (reading, read) = tail_lines_counted(&path, 20);
    assert!(read <= MAX_READ_BYTES, "read {read} bytes");
    let found = reading.found().expect("found");
    assert_eq!(found, &["99% done"], "the last frame only");

    // Asked for one line only, it stops as soon as that line is known to be too long.
    let (one, read_one) = tail_lines_counted(&path, 1);
    assert_eq!(one, reading);
    assert!(read_one <= 2 * CHUNK_BYTES as u64, "read {read_one} bytes");
}

#[test]
fn past_the_read_budget_fewer_lines_are_shown_never_a_partial_one() {
    // 100 lines of 3000 bytes: the budget holds about 87 of them.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut content = Vec::new();
    for i in 0..100 {
        let line = format!("{i:04}{}\n", "x".repeat(2995));
        content.extend_from_slice(line.as_bytes());
    }
    let path = write(dir.path(), "wide.log", &content);
    let (reading, read) = tail_lines_counted(&path, 100);
    assert!(read <= MAX_READ_BYTES);
    let found = reading.found().expect("found");
    let whole = (MAX_READ_BYTES / 3000) as usize;
    assert_eq!(found.len(), whole);
    let expected = naive_tail(&content, whole);
    assert_eq!(Some(found), expected.found());
}

#[test]
fn a_long_line_is_shown_as_its_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let long = format!("{}END", "é".repeat(MAX_LINE_BYTES));
    let content = format!("short\n{long}\nlast\n");
    let path = write(dir.path(), "job.log", content.as_bytes());
    let reading = tail_lines(&path, 3);
    assert_eq!(reading, naive_tail(content.as_bytes(), 3));
    let found = reading.found().expect("found");
    assert_eq!(found[0], "short");
    assert!(found[1].starts_with(TRUNCATED_MARK));
    assert!(found[1].ends_with("éEND"));
    assert!(
        !found[1].contains('\u{fffd}'),
        "the cut is moved to a char boundary"
    );
    assert_eq!(found[2], "last");
}

/// Issue 9, item 16: a long line was cut to its last bytes before it was made inert, so a
/// cut inside an escape sequence showed the rest of the sequence as text (a hyperlink's URL,
/// a colour's parameters, a clipboard payload). The cut now falls outside every sequence.
#[test]
fn a_long_line_cut_inside_an_escape_sequence_never_shows_its_payload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let osc = format!(
        "{}\u{1b}]8;;http://{}.example/\u{1b}\\{}",
        "a".repeat(1000),
        "PAYLOAD".repeat(20),
        "b".repeat(4000)
    );
    let csi = format!("{}\u{1b}[38;5;196m{}", "a".repeat(1000), "b".repeat(4092));
    // Longer than anything looked at behind the cut: found by its terminator.
    let clipboard = format!(
        "{}\u{1b}]52;c;{}\u{7}{}",
        "a".repeat(100),
        "Q".repeat(10_000),
        "b".repeat(3000)
    );
    for (name, line, payload) in [
        ("osc", &osc, "PAYLOAD"),
        ("csi", &csi, "196m"),
        ("clipboard", &clipboard, "Q"),
    ] {
        let cut = line.len() - MAX_LINE_BYTES;
        let starts = line.find(['\u{1b}']).expect("a sequence");
        let ends = line.rfind(['\\', 'm', '\u{7}']).expect("its end");
        assert!(
            starts < cut && cut < ends,
            "{name}: the cut falls inside it"
        );
        let path = write(
            dir.path(),
            &format!("{name}.log"),
            format!("first\n{line}\nlast\n").as_bytes(),
        );
        let found = tail_lines(&path, 3).found().expect("found").clone();
        assert_eq!(found[0], "first");
        assert_eq!(found[2], "last");
        let shown = &found[1];
        assert!(shown.starts_with(TRUNCATED_MARK), "{name}: {shown}");
        assert!(
            !shown.contains(payload),
            "{name}: the payload is shown: {shown}"
        );
        assert!(
            !shown.contains('\u{2407}'),
            "{name}: its terminator is shown: {shown}"
        );
        assert!(
            shown.ends_with(&"b".repeat(3000)),
            "{name}: the text after it is kept"
        );
        assert!(is_inert(shown), "{name}");
        assert!(
            shown.len() <= TRUNCATED_MARK.len_utf8() + MAX_LINE_BYTES,
            "{name}"
        );
    }
}

/// Issue 9, item 16: 900 combining marks on one letter were shown whole (and wrapped into
/// nine rows of the detail pane). A letter keeps at most two.
#[test]
fn a_pile_of_combining_marks_is_cut_to_two_per_letter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let line = format!("e{} done\nvi\u{1ec7}t\n", "\u{301}".repeat(900));
    let path = write(dir.path(), "marks.log", line.as_bytes());
    let found = tail_lines(&path, 2).found().expect("found").clone();
    assert_eq!(found[0], "e\u{301}\u{301} done");
    // Two marks on a letter are ordinary text (Vietnamese 'ệ' decomposed), kept as written.
    let decomposed = "vie\u{323}\u{302}t";
    let path = write(dir.path(), "vi.log", format!("{decomposed}\n").as_bytes());
    assert_eq!(tail_lines(&path, 1), lines(&[decomposed]));
}

#[test]
fn a_missing_or_zero_byte_file_is_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(
        tail_lines(&dir.path().join("not-yet.log"), 5),
        Reading::Empty
    );
    let path = write(dir.path(), "zero.log", b"");
    assert_eq!(tail_lines(&path, 5), Reading::Empty);
}

#[test]
fn a_directory_is_a_fault_not_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reading = tail_lines(dir.path(), 5);
    let error = reading.fault().expect("a fault");
    assert!(error.contains("directory"), "{error}");
}

#[test]
fn a_named_pipe_is_a_fault_and_does_not_hang() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("fifo.log");
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let reading = tail_lines(&path, 5);
    let error = reading.fault().expect("a fault");
    assert!(error.contains("named pipe"), "{error}");
}

#[test]
fn a_path_through_a_file_is_a_fault() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write(dir.path(), "plain", b"x\n");
    assert!(tail_lines(&file.join("job.log"), 5).fault().is_some());
}

/// Bytes that make tails interesting: newlines, '\r', escapes, pieces of multi-byte
/// characters, invalid bytes.
fn interesting_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        6 => Just(b'a'),
        3 => Just(b'\n'),
        1 => Just(b'\r'),
        1 => Just(0x1b),
        1 => Just(b'['),
        1 => Just(b']'),
        1 => Just(0x07),
        1 => Just(0xc3),
        1 => Just(0xa9),
        1 => Just(0xe2),
        1 => Just(0x82),
        1 => Just(0xac),
        1 => Just(0xff),
        1 => any::<u8>(),
    ]
}

/// A file as runs: mostly short random pieces, sometimes a long run of one byte (so lines
/// cross read boundaries and the line cap). At most 60 pieces of 4300 bytes: under the read
/// budget, so the whole file is always within reach and the tails must be equal.
fn content() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        8 => prop::collection::vec(interesting_byte(), 0..40),
        1 => (interesting_byte(), 1usize..4300).prop_map(|(b, n)| vec![b; n]),
        1 => Just("€".as_bytes().to_vec()),
    ];
    prop::collection::vec(piece, 0..60).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn matches_reading_everything_and_keeping_the_last_lines(
        content in content(),
        n in 0usize..50,
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), "job.log", &content);
        let (reading, read) = tail_lines_counted(&path, n);
        prop_assert!(read <= content.len() as u64);
        prop_assert_eq!(&reading, &naive_tail(&content, n));
        if let Reading::Found(found) = &reading {
            prop_assert!(found.iter().all(|line| is_inert(line)));
        }
    }
}

/// A piece of a log line for the cut's property: plain text, a colour, a lone BEL, a pile
/// of marks, or a hyperlink or clipboard sequence whose payload is made of 'ж', a letter no
/// other piece holds (so a payload shown anywhere is seen), sometimes longer than what is
/// kept behind the cut.
fn line_piece() -> impl Strategy<Value = String> {
    let text = prop_oneof![
        4 => "[a-z ]{1,60}",
        1 => "[é日€ ]{1,20}",
        1 => (any::<u8>(), 1usize..5000).prop_map(|(b, n)| ((b % 26 + b'a') as char).to_string().repeat(n)),
    ];
    let csi = ("[0-9;]{0,12}", "[@-~]").prop_map(|(params, last)| format!("\u{1b}[{params}{last}"));
    let payload = prop_oneof![
        3 => 0usize..200,
        1 => 200usize..9000,
    ];
    let osc = (
        prop::sample::select(vec!["\u{1b}]8;;", "\u{1b}]52;c;", "\u{1b}P", "\u{9d}0;"]),
        payload,
        prop::sample::select(vec!["\u{7}", "\u{1b}\\", "\u{9c}"]),
    )
        .prop_map(|(intro, n, end)| format!("{intro}{}{end}", "ж".repeat(n)));
    prop_oneof![
        6 => text,
        2 => csi,
        3 => osc,
        1 => Just("\u{7}".to_string()),
        1 => (1usize..10).prop_map(|n| "\u{301}".repeat(n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The cut of a long line falls outside every sequence: what is shown is inert, holds no
    /// payload, is at most `MAX_LINE_BYTES` after the mark, and is the end of the whole
    /// line's inert text (exactly the slow version when the line fits in what is kept).
    #[test]
    fn a_long_line_is_cut_after_it_is_made_inert(
        pieces in prop::collection::vec(line_piece(), 1..40),
    ) {
        let line = pieces.concat();
        let shown = shown_line(line.as_bytes());
        prop_assert!(is_inert(&shown));
        prop_assert!(!shown.contains('ж'), "a payload is shown: {}", shown);
        if line.len() <= MAX_LINE_BYTES {
            prop_assert_eq!(&shown, &inert(&line));
        } else {
            let end = shown.strip_prefix(TRUNCATED_MARK).expect("the mark");
            prop_assert!(end.len() <= MAX_LINE_BYTES);
            prop_assert!(inert(&line).ends_with(end), "not the end of the inert line: {}", end);
            prop_assert!(!end.starts_with(is_mark), "cut between a letter and its marks");
            if line.len() <= MAX_LINE_BYTES + LOOKBEHIND_BYTES {
                prop_assert_eq!(&shown, &cut_after_inert(line.as_bytes()));
            }
        }
    }
}
