//! Progress-file counting, measured: mihari's from-scratch count against `wc -l` on the same
//! warm file, and an incremental recount after a 1 MiB append against a full count.
//!
//! Run with `cargo bench --bench progress_count`. It writes a JSONL progress file of
//! `MIHARI_BENCH_MIB` MiB (default 1024) in a temporary directory (under `MIHARI_BENCH_DIR`
//! when set), warms the page cache, and prints medians. Every count is checked against the
//! number of lines written and against `wc -l`; a mismatch aborts the bench. The file is
//! removed at the end. Timings are printed, never asserted: they depend on the machine.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use mihari::core::Reading;
use mihari::probe::count::{DEFAULT_BUFFER_BYTES, LineCounter, count_lines_from};

const RUNS: usize = 7;
const MIB: u64 = 1 << 20;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("progress_count bench failed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mib: u64 = match std::env::var("MIHARI_BENCH_MIB") {
        Ok(text) => text
            .parse()
            .map_err(|e| format!("MIHARI_BENCH_MIB '{text}': {e}"))?,
        Err(_) => 1024,
    };
    let dir = match std::env::var_os("MIHARI_BENCH_DIR") {
        Some(base) => tempfile::tempdir_in(&base),
        None => tempfile::tempdir(),
    }
    .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
    let path = dir.path().join("progress.jsonl");

    let started = Instant::now();
    let mut writer = ProgressWriter::create(&path)?;
    writer.append_at_least(mib * MIB)?;
    let mut lines = writer.lines;
    let bytes = writer.bytes;
    drop(writer);
    println!(
        "progress file: {} ({:.0} MiB, {} lines, {:.0} bytes/line), written in {:.1} s",
        path.display(),
        bytes as f64 / MIB as f64,
        lines,
        bytes as f64 / lines as f64,
        started.elapsed().as_secs_f64()
    );

    // Warm the page cache, and check both counters agree before timing anything.
    let (wc_lines, _) = time_wc(&path)?;
    let (our_lines, _) = time_full_count(&path, DEFAULT_BUFFER_BYTES)?;
    check("wc -l", wc_lines, lines)?;
    check("mihari", our_lines, lines)?;

    println!();
    println!("read buffer sweep (from-scratch count, median of 3)");
    println!("  {:>9}  {:>9}  {:>9}", "buffer", "time", "GiB/s");
    for buffer in [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20] {
        // One buffer per size, touched before timing: the sweep compares steady-state reads.
        let mut buf = vec![1u8; buffer];
        let mut times = Vec::new();
        for _ in 0..3 {
            let (count, took) = time_count_lines_from(&path, &mut buf)?;
            check("count_lines_from", count, lines)?;
            times.push(took);
        }
        let took = median(&mut times);
        println!(
            "  {:>9}  {:>9}  {:>9.2}{}",
            human_bytes(buffer as u64),
            ms(took),
            gib_per_s(bytes, took),
            if buffer == DEFAULT_BUFFER_BYTES {
                "  <- default"
            } else {
                ""
            }
        );
    }

    let mut wc_times = Vec::new();
    let mut full_times = Vec::new();
    for _ in 0..RUNS {
        let (count, took) = time_wc(&path)?;
        check("wc -l", count, lines)?;
        wc_times.push(took);
        let (count, took) = time_full_count(&path, DEFAULT_BUFFER_BYTES)?;
        check("mihari", count, lines)?;
        full_times.push(took);
    }
    let wc = median(&mut wc_times);
    let full = median(&mut full_times);

    // Incremental: a counter that has counted the file once, then 1 MiB appended per run.
    let mut counter = LineCounter::new();
    let (count, _) = timed_count(&mut counter, &path)?;
    check("mihari", count, lines)?;
    let mut writer = ProgressWriter::append(&path, lines, bytes)?;
    let mut incremental_times = Vec::new();
    let mut appended = Vec::new();
    for _ in 0..RUNS {
        let before = writer.bytes;
        writer.append_at_least(MIB)?;
        writer.flush()?;
        appended.push(writer.bytes - before);
        let read_before = counter.bytes_read();
        let (count, took) = timed_count(&mut counter, &path)?;
        check("incremental", count, writer.lines)?;
        let read = counter.bytes_read() - read_before;
        if read != writer.bytes - before {
            return Err(format!(
                "the incremental pass read {read} bytes, {} were appended",
                writer.bytes - before
            ));
        }
        incremental_times.push(took);
    }
    lines = writer.lines;
    drop(writer);
    let (count, _) = time_wc(&path)?;
    check("wc -l after appends", count, lines)?;
    let incremental = median(&mut incremental_times);
    let appended_mib = appended.iter().sum::<u64>() as f64 / appended.len() as f64 / MIB as f64;
    let file_mib = mib as f64;

    println!();
    println!(
        "from-scratch count of {:.0} MiB, page cache warm, alternating, median of {RUNS}",
        file_mib
    );
    println!("  {:<26}  {:>9}  {:>9}", "", "median", "GiB/s");
    println!(
        "  {:<26}  {:>9}  {:>9.2}",
        "wc -l",
        ms(wc),
        gib_per_s(bytes, wc)
    );
    println!(
        "  {:<26}  {:>9}  {:>9.2}",
        "mihari (LineCounter::count)",
        ms(full),
        gib_per_s(bytes, full)
    );
    println!(
        "  ratio mihari / wc -l: {:.3}x (target <= 1.1x)",
        full.as_secs_f64() / wc.as_secs_f64()
    );

    println!();
    println!("incremental recount after appending ~{appended_mib:.2} MiB, median of {RUNS}");
    println!("  {:<26}  {:>9}  {:>12}", "", "median", "per MiB read");
    println!(
        "  {:<26}  {:>9}  {:>12}",
        format!("full count ({file_mib:.0} MiB)"),
        ms(full),
        us(full.as_secs_f64() / file_mib)
    );
    println!(
        "  {:<26}  {:>9}  {:>12}",
        format!("incremental ({appended_mib:.2} MiB)"),
        ms(incremental),
        us(incremental.as_secs_f64() / appended_mib)
    );
    println!(
        "  incremental / full: {:.5} (file / append = {:.5})",
        incremental.as_secs_f64() / full.as_secs_f64(),
        appended_mib / file_mib
    );
    println!("all counts matched wc -l: {lines} lines at the end");

    std::fs::remove_file(&path).map_err(|e| format!("cannot remove '{}': {e}", path.display()))?;
    dir.close()
        .map_err(|e| format!("cannot remove the bench directory: {e}"))?;
    Ok(())
}

/// Writes realistic progress lines (~110 bytes of JSON each) and keeps count.
struct ProgressWriter {
    out: BufWriter<File>,
    lines: u64,
    bytes: u64,
}

impl ProgressWriter {
    fn create(path: &Path) -> Result<Self, String> {
        let file =
            File::create(path).map_err(|e| format!("cannot create '{}': {e}", path.display()))?;
        Ok(Self::over(file, 0, 0))
    }

    fn append(path: &Path, lines: u64, bytes: u64) -> Result<Self, String> {
        let file = File::options()
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open '{}': {e}", path.display()))?;
        Ok(Self::over(file, lines, bytes))
    }

    fn over(file: File, lines: u64, bytes: u64) -> Self {
        ProgressWriter {
            out: BufWriter::with_capacity(8 << 20, file),
            lines,
            bytes,
        }
    }

    fn append_at_least(&mut self, want: u64) -> Result<(), String> {
        let mut line = String::with_capacity(160);
        let until = self.bytes + want;
        while self.bytes < until {
            let i = self.lines;
            line.clear();
            use std::fmt::Write as _;
            let _ = writeln!(
                line,
                "{{\"i\":{i},\"file\":\"shard-{:06}.parquet\",\"rows\":{},\"bytes\":{},\"ok\":true,\
                 \"at\":\"2024-05-01T{:02}:{:02}:{:02}.{:03}Z\"}}",
                i % 1_000_000,
                40_000 + (i * 7919) % 20_000,
                (i * 104_729) % 50_000_000,
                (i / 3_600_000) % 24,
                (i / 60_000) % 60,
                (i / 1000) % 60,
                i % 1000
            );
            self.out
                .write_all(line.as_bytes())
                .map_err(|e| format!("cannot write the progress file: {e}"))?;
            self.lines += 1;
            self.bytes += line.len() as u64;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        self.out
            .flush()
            .map_err(|e| format!("cannot write the progress file: {e}"))
    }
}

impl Drop for ProgressWriter {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

fn time_wc(path: &Path) -> Result<(u64, Duration), String> {
    let started = Instant::now();
    let output = Command::new("wc")
        .arg("-l")
        .arg(path)
        .env("LC_ALL", "C")
        .output()
        .map_err(|e| format!("cannot run 'wc -l': {e}"))?;
    let took = started.elapsed();
    if !output.status.success() {
        return Err(format!("'wc -l' failed: {}", output.status));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let count = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("cannot read wc's output '{}'", text.trim()))?;
    Ok((count, took))
}

/// A fresh counter, so the whole file is read: what the first pass of `mihari` costs.
fn time_full_count(path: &Path, buffer: usize) -> Result<(u64, Duration), String> {
    let mut counter = LineCounter::with_buffer_bytes(buffer);
    timed_count(&mut counter, path)
}

fn timed_count(counter: &mut LineCounter, path: &Path) -> Result<(u64, Duration), String> {
    let started = Instant::now();
    let reading = counter.count(path);
    let took = started.elapsed();
    match reading {
        Reading::Found(count) => Ok((count.done, took)),
        Reading::Empty => Ok((0, took)),
        Reading::Fault(error) => Err(error),
    }
}

fn time_count_lines_from(path: &Path, buf: &mut [u8]) -> Result<(u64, Duration), String> {
    let started = Instant::now();
    let file = File::open(path).map_err(|e| format!("cannot open '{}': {e}", path.display()))?;
    let tally = count_lines_from(&file, 0, buf).map_err(|e| format!("cannot count: {e}"))?;
    Ok((tally.lines, started.elapsed()))
}

fn check(what: &str, got: u64, expected: u64) -> Result<(), String> {
    if got == expected {
        Ok(())
    } else {
        Err(format!(
            "{what} counted {got} lines, {expected} were written"
        ))
    }
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(took: Duration) -> String {
    if took < Duration::from_millis(10) {
        format!("{:.0} us", took.as_secs_f64() * 1e6)
    } else {
        format!("{:.1} ms", took.as_secs_f64() * 1000.0)
    }
}

fn us(secs: f64) -> String {
    format!("{:.0} us", secs * 1e6)
}

fn gib_per_s(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / (1u64 << 30) as f64 / took.as_secs_f64()
}

fn human_bytes(bytes: u64) -> String {
    if bytes >= MIB {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}
