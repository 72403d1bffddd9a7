//! The log readings kept between processes: `state_dir/log-readings`.
//!
//! A meter that redraws the same figure every second moves its log's modification time: a
//! new `mihari check` that saw only the log now could not tell how long the figure has
//! stood. This module owns that file's bytes: for each log and way of reading it, what the
//! last look saw ([`KeptReading`]: the file, its figure, when the figure last moved and a
//! fall seen). It decides nothing (`probe::log_progress` compares a look with it) and trusts
//! the file by the rules of the line counts beside it ([`super::counts`]): a link, someone
//! else's, open to group or others, damaged (its closing SHA-256 does not match) or of
//! another format is read as nothing kept. It is written whole through a private temp file.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::counts::Reader;
use crate::core::Figure;
use crate::probe::log_progress::{KeptKey, KeptReading};

/// The file's name in `state_dir`.
pub const FILE: &str = "log-readings";

/// The first bytes of the file: its format. A file of another format is not read.
const MAGIC: &[u8] = b"mihari log readings 1\n";

/// A reading not seen for this long is not kept: its log is no longer any job's.
const KEPT_FOR_DAYS: i64 = 14;

/// The readings kept in `state_dir`; empty when there are none or the file cannot be trusted
/// (never an error: a reading not kept is only a look without memory).
pub fn load(state_dir: &Path) -> HashMap<KeptKey, KeptReading> {
    super::counts::read_trusted(&state_dir.join(FILE), "the kept log readings")
        .and_then(|bytes| parse(&bytes))
        .unwrap_or_default()
}

/// Keeps `entries` in `state_dir`, replacing the file whole, leaving out those not seen for
/// [`KEPT_FOR_DAYS`] before `now`. The error names the file and says what to do.
pub fn save(
    state_dir: &Path,
    entries: &HashMap<KeptKey, KeptReading>,
    now: DateTime<Utc>,
) -> Result<(), String> {
    let since = now - chrono::Duration::days(KEPT_FOR_DAYS);
    let kept: Vec<(&KeptKey, &KeptReading)> = entries
        .iter()
        .filter(|(_, kept)| kept.seen >= since)
        .collect();
    super::counts::write_whole(state_dir, FILE, &encode(&kept)).map_err(|error| {
        format!(
            "cannot keep log readings in '{}' ({error}): a new mihari cannot tell how long a \
             meter has redrawn the same figure until its second look; make '{}' a folder only \
             you can write",
            state_dir.join(FILE).display(),
            state_dir.display()
        )
    })
}

fn nanos(at: DateTime<Utc>) -> u64 {
    at.timestamp_nanos_opt().unwrap_or(0) as u64
}

fn at(nanos: u64) -> DateTime<Utc> {
    DateTime::from_timestamp_nanos(nanos as i64)
}

fn figure_byte(figure: Figure) -> u8 {
    match figure {
        Figure::Items => 0,
        Figure::Bytes => 1,
        Figure::Percent => 2,
    }
}

fn encode(entries: &[(&KeptKey, &KeptReading)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 8 + entries.len() * 160 + 32);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for ((path, preset), kept) in entries {
        for text in [path.as_os_str().as_bytes(), preset.as_bytes()] {
            out.extend_from_slice(&(text.len() as u64).to_le_bytes());
            out.extend_from_slice(text);
        }
        out.push(figure_byte(kept.figure));
        out.push(u8::from(kept.earliest.is_some()));
        out.push(u8::from(kept.fall.is_some()));
        let (from, to, fall_len) = kept.fall.unwrap_or_default();
        for word in [
            kept.dev,
            kept.ino,
            kept.len,
            kept.value.to_bits(),
            nanos(kept.latest),
            kept.earliest.map_or(0, nanos),
            nanos(kept.seen),
            from.to_bits(),
            to.to_bits(),
            fall_len,
        ] {
            out.extend_from_slice(&word.to_le_bytes());
        }
    }
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

fn parse(bytes: &[u8]) -> Option<HashMap<KeptKey, KeptReading>> {
    let body_len = bytes.len().checked_sub(32)?;
    let (body, sum) = bytes.split_at(body_len);
    if Sha256::digest(body).as_slice() != sum {
        return None;
    }
    let mut r = Reader(body.strip_prefix(MAGIC)?);
    let entries = r.u64()?;
    let mut kept = HashMap::with_capacity(entries.min(1 << 16) as usize);
    for _ in 0..entries {
        let len = r.u64()? as usize;
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(r.take(len)?));
        let len = r.u64()? as usize;
        let preset = String::from_utf8(r.take(len)?.to_vec()).ok()?;
        let flags = r.take(3)?;
        let figure = match flags[0] {
            0 => Figure::Items,
            1 => Figure::Bytes,
            2 => Figure::Percent,
            _ => return None,
        };
        let (has_earliest, has_fall) = (flags[1] == 1, flags[2] == 1);
        let mut words = [0u64; 10];
        for word in &mut words {
            *word = r.u64()?;
        }
        let [
            dev,
            ino,
            len,
            value,
            latest,
            earliest,
            seen,
            from,
            to,
            fall_len,
        ] = words;
        kept.insert(
            (path, preset),
            KeptReading {
                dev,
                ino,
                len,
                figure,
                value: f64::from_bits(value),
                latest: at(latest),
                earliest: has_earliest.then(|| at(earliest)),
                seen: at(seen),
                fall: has_fall.then(|| (f64::from_bits(from), f64::from_bits(to), fall_len)),
            },
        );
    }
    r.0.is_empty().then_some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_and_any_changed_byte_is_refused() {
        let seen = DateTime::from_timestamp(1_790_000_000, 123_456_789).expect("a time");
        let one = KeptReading {
            dev: 1,
            ino: 2,
            len: 3,
            figure: Figure::Bytes,
            value: 1_999_872.0,
            latest: seen - chrono::Duration::seconds(40),
            earliest: None,
            seen,
            fall: Some((100.0, 16.0, 3)),
        };
        let two = KeptReading {
            figure: Figure::Percent,
            earliest: Some(seen),
            fall: None,
            ..one
        };
        let a = (PathBuf::from("/x/curl.log"), "curl".to_string());
        let b = (
            PathBuf::from("/x/pv.log"),
            "pattern (?P<done>\\d+)".to_string(),
        );
        let bytes = encode(&[(&a, &one), (&b, &two)]);
        let back = parse(&bytes).expect("parses");
        assert_eq!(back.get(&a), Some(&one));
        assert_eq!(back.get(&b), Some(&two));
        for at in [0, MAGIC.len() + 3, bytes.len() / 2, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 1;
            assert!(
                parse(&damaged).is_none(),
                "byte {at} changed and still read"
            );
        }
        assert!(parse(b"").is_none());
    }
}
