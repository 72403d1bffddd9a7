//! The daily digest as values: what was queued, how it is grouped and counted, when a rise in
//! suppressions is called out, and when the next digest is cut.
//!
//! SPEC §7 lets only four kinds of things interrupt a human; everything else (a stall seen, a
//! restart the machine did, suppressions, completions, timeouts) waits here for the daily
//! digest. This module owns the digest's types, [`report`] (grouping by job, counts per
//! category, the callout when suppressions rise — it usually means retries are growing
//! upstream), its text form, and [`next_cut_in`] (the next local `digest_at`, DST included),
//! counted from [`cut_counted_from`] (a last cut stamped in the future, by a clock that jumped,
//! is treated as now) and bounded by [`next_cut_bounded`].
//! Like the rest of `core` it is pure: no clock, no files, no time zone database — the time
//! zone is an argument. It must not store, print or deliver anything; `store::digest` keeps the
//! queue and `cli::digest` and the dashboard show it.

use std::collections::BTreeMap;
use std::fmt::Display;

use chrono::{
    DateTime, NaiveDateTime, NaiveTime, SecondsFormat, TimeDelta, TimeZone, Timelike, Utc,
};
use serde::{Serialize, Serializer};

use super::text::inert;

/// The longest item text kept, in characters: a digest line is a headline, never a log line.
pub const TEXT_LIMIT: usize = 200;
/// How many earlier digests the suppression baseline looks back over (a week of days).
pub const BASELINE_DIGESTS: usize = 7;
/// A rise is called out when suppressions reach this many times the baseline...
pub const RISE_FACTOR: usize = 3;
/// ...and at least this many in absolute terms, so 1 → 3 is not news.
pub const RISE_MINIMUM: usize = 5;
/// With no earlier digest to compare with, this many suppressions are called out anyway.
pub const NO_BASELINE_MINIMUM: usize = 10;
/// How items that belong to no job are headed.
pub const ALL_JOBS: &str = "(all jobs)";

/// What kind of thing waited for the digest instead of interrupting someone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DigestCategory {
    /// A stall the machine saw (and either handled or left to a later escalation).
    StallSeen,
    /// A restart the machine did by itself, under a known cause and the daily cap.
    MachineRestart,
    /// A duplicate, a cooldown-suppressed or skipped attempt, a cap reached: the counts whose
    /// rise says retries are growing upstream.
    Suppressed,
    /// A job that ran to its end.
    Completed,
    /// A step that ran out of time without needing a human yet.
    Timeout,
    /// Anything else worth a line once a day.
    Other,
    /// A job that stays paused: named in every digest while it is, so a pause is never a
    /// silent hole.
    Paused,
}

impl DigestCategory {
    pub const ALL: [DigestCategory; 7] = [
        DigestCategory::StallSeen,
        DigestCategory::MachineRestart,
        DigestCategory::Suppressed,
        DigestCategory::Completed,
        DigestCategory::Timeout,
        DigestCategory::Other,
        DigestCategory::Paused,
    ];

    /// The category as stored and printed.
    pub fn as_str(self) -> &'static str {
        match self {
            DigestCategory::StallSeen => "stall-seen",
            DigestCategory::MachineRestart => "machine-restart",
            DigestCategory::Suppressed => "suppressed",
            DigestCategory::Completed => "completed",
            DigestCategory::Timeout => "timeout",
            DigestCategory::Other => "other",
            DigestCategory::Paused => "paused",
        }
    }

    /// The category spelled `text`, if it is one.
    pub fn parse(text: &str) -> Option<DigestCategory> {
        DigestCategory::ALL
            .into_iter()
            .find(|category| category.as_str() == text)
    }
}

/// One queued item: a short, inert headline, never a path or a log line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DigestItem {
    pub id: i64,
    #[serde(serialize_with = "rfc3339_ms")]
    pub at: DateTime<Utc>,
    /// `None` for things about no single job (the watcher itself, the machine).
    pub job: Option<String>,
    pub category: DigestCategory,
    pub text: String,
}

/// One cut digest: every item queued up to `cut`, delivered once someone read it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Digest {
    pub id: i64,
    #[serde(serialize_with = "rfc3339_ms")]
    pub cut: DateTime<Utc>,
    #[serde(serialize_with = "rfc3339_ms_opt")]
    pub delivered: Option<DateTime<Utc>>,
    /// Oldest first.
    pub items: Vec<DigestItem>,
}

impl Digest {
    /// How many of its items are suppressions: the number the rise callout watches.
    pub fn suppressed(&self) -> usize {
        suppressed_in(&self.items, None)
    }
}

/// The text a queued item keeps: inert, then cut to [`TEXT_LIMIT`] characters (the last one
/// an ellipsis when it was cut), so no caller can put a log line into the digest by mistake.
pub fn short_text(raw: &str) -> String {
    let text = inert(raw.trim());
    if text.chars().count() <= TEXT_LIMIT {
        return text;
    }
    let mut short: String = text.chars().take(TEXT_LIMIT - 1).collect();
    short.push('…');
    short
}

/// A digest grouped for reading: per job, counts per category and the items; and the
/// callouts that make a rise in suppressions impossible to miss.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DigestReport {
    /// How many items in all.
    pub items: usize,
    /// How many of them are suppressions.
    pub suppressed: usize,
    /// The median of suppressions over the earlier digests compared with; `None` when there
    /// was none.
    pub baseline: Option<f64>,
    /// How many earlier digests the baseline came from (at most [`BASELINE_DIGESTS`]).
    pub compared_with: usize,
    /// Sentences for the top of the digest, most important first.
    pub callouts: Vec<String>,
    /// Jobs sorted by id; the items of no job last, as `job: null`.
    pub jobs: Vec<JobDigest>,
}

/// One job's part of a digest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobDigest {
    /// The job's id, inert; `None` for the items of no job (shown as [`ALL_JOBS`]).
    pub job: Option<String>,
    /// Items per category; categories with none are left out.
    pub counts: BTreeMap<DigestCategory, usize>,
    /// This job's own rise in suppressions, measured against its own baseline.
    pub callout: Option<String>,
    /// Oldest first.
    pub items: Vec<ReportItem>,
}

impl JobDigest {
    /// How the job is headed on screen.
    pub fn label(&self) -> &str {
        self.job.as_deref().unwrap_or(ALL_JOBS)
    }
}

/// One item as a report shows it (its job is the section it is in).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportItem {
    #[serde(serialize_with = "rfc3339_ms")]
    pub at: DateTime<Utc>,
    pub category: DigestCategory,
    pub text: String,
}

/// Groups `items` by job and calls out a rise in suppressions against `previous`: the
/// digests cut before these items (any order; the newest [`BASELINE_DIGESTS`] count).
///
/// A rise is called out when suppressions reach [`RISE_FACTOR`] times the median of the
/// earlier digests and at least [`RISE_MINIMUM`]; with no earlier digest at all, from
/// [`NO_BASELINE_MINIMUM`]. The median, not the mean, so one bad day last week does not hide
/// a bad day today. Each job is measured against its own history as well, so one small job
/// whose retries multiply is not drowned by a big steady one.
pub fn report(items: &[DigestItem], previous: &[Digest]) -> DigestReport {
    let mut earlier: Vec<&Digest> = previous.iter().collect();
    earlier.sort_by(|a, b| b.cut.cmp(&a.cut).then(b.id.cmp(&a.id)));
    earlier.truncate(BASELINE_DIGESTS);

    let mut sorted: Vec<&DigestItem> = items.iter().collect();
    sorted.sort_by(|a, b| a.at.cmp(&b.at).then(a.id.cmp(&b.id)));
    let mut groups: BTreeMap<Option<String>, Vec<&DigestItem>> = BTreeMap::new();
    for item in sorted {
        groups.entry(item.job.clone()).or_default().push(item);
    }
    // BTreeMap puts `None` first; the items of no job read best after the jobs.
    let mut keyed: Vec<(Option<String>, Vec<&DigestItem>)> = groups.into_iter().collect();
    if keyed.first().is_some_and(|(job, _)| job.is_none()) {
        keyed.rotate_left(1);
    }

    let suppressed = suppressed_in(items, None);
    let baseline = median(earlier.iter().map(|d| d.suppressed()));
    let overall_rise = rises(suppressed, baseline);
    let mut callouts = Vec::new();
    let mut dominant = None;
    if overall_rise {
        let mut text = rise_text(suppressed, baseline, earlier.len(), "what retries");
        let top = keyed
            .iter()
            .map(|(job, group)| (job, group.iter().filter(|i| is_suppression(i)).count()))
            .max_by_key(|(_, n)| *n);
        if let Some((job, n)) = top
            && keyed.len() > 1
            && n * 2 >= suppressed
        {
            let label = job.as_deref().map_or_else(|| ALL_JOBS.to_string(), inert);
            if n == suppressed {
                text.push_str(&format!("; all from '{label}'"));
            } else {
                text.push_str(&format!("; mostly '{label}' ({n} of {suppressed})"));
            }
            dominant = Some(job.clone());
        }
        callouts.push(text);
    }

    let single = keyed.len() == 1;
    let mut jobs = Vec::with_capacity(keyed.len());
    for (job, group) in keyed {
        let label = job.as_deref().map_or_else(|| ALL_JOBS.to_string(), inert);
        let own = group.iter().filter(|i| is_suppression(i)).count();
        let own_baseline = median(
            earlier
                .iter()
                .map(|d| suppressed_in(&d.items, Some(job.as_deref()))),
        );
        let callout = rises(own, own_baseline).then(|| {
            let what = format!("what '{label}' retries");
            rise_text(own, own_baseline, earlier.len(), &what)
        });
        // The overall callout already names a single or dominant job.
        let repeats_overall = overall_rise && (single || dominant.as_ref() == Some(&job));
        if let Some(text) = &callout
            && !repeats_overall
        {
            callouts.push(format!("'{label}': {text}"));
        }
        let mut counts = BTreeMap::new();
        for item in &group {
            *counts.entry(item.category).or_insert(0) += 1;
        }
        jobs.push(JobDigest {
            job: job.as_deref().map(inert),
            counts,
            callout,
            items: group
                .iter()
                .map(|item| ReportItem {
                    at: item.at,
                    category: item.category,
                    text: short_text(&item.text),
                })
                .collect(),
        });
    }

    DigestReport {
        items: items.len(),
        suppressed,
        baseline,
        compared_with: earlier.len(),
        callouts,
        jobs,
    }
}

impl DigestReport {
    /// The report as inert lines for a terminal or a dashboard pane: the callouts (marked
    /// `!`; they already name every job that rose, so a job's own callout is not repeated
    /// under it), then each job's counts and its items, times in `tz`. Items with the same
    /// category and text are folded into one line with their count and last time, so a
    /// hundred duplicates read as one line that says "×100".
    pub fn lines<Tz>(&self, tz: &Tz) -> Vec<String>
    where
        Tz: TimeZone,
        Tz::Offset: Display,
    {
        let mut lines = Vec::new();
        for callout in &self.callouts {
            lines.push(format!("! {}", inert(callout)));
        }
        if self.jobs.is_empty() {
            lines.push("nothing queued".to_string());
        }
        let local = |at: DateTime<Utc>| at.with_timezone(tz).format("%m-%d %H:%M").to_string();
        for job in &self.jobs {
            let counts: Vec<String> = job
                .counts
                .iter()
                .map(|(category, n)| format!("{n} {}", category.as_str()))
                .collect();
            lines.push(format!("{} — {}", inert(job.label()), counts.join(" · ")));
            for fold in fold(&job.items) {
                let mut line = format!(
                    "  {}  {:<15}  {}",
                    local(fold.first),
                    fold.category.as_str(),
                    inert(fold.text)
                );
                if fold.count > 1 {
                    line.push_str(&format!("  ×{}, last {}", fold.count, local(fold.last)));
                }
                lines.push(line);
            }
        }
        lines
    }
}

/// Items with the same category and text, in the order they first appeared.
struct Fold<'a> {
    category: DigestCategory,
    text: &'a str,
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    count: usize,
}

fn fold(items: &[ReportItem]) -> Vec<Fold<'_>> {
    let mut folds: Vec<Fold<'_>> = Vec::new();
    for item in items {
        match folds
            .iter_mut()
            .find(|f| f.category == item.category && f.text == item.text)
        {
            Some(fold) => {
                fold.count += 1;
                fold.last = fold.last.max(item.at);
            }
            None => folds.push(Fold {
                category: item.category,
                text: &item.text,
                first: item.at,
                last: item.at,
                count: 1,
            }),
        }
    }
    folds
}

fn is_suppression(item: &DigestItem) -> bool {
    item.category == DigestCategory::Suppressed
}

/// Suppressions among `items`, of one job (`Some(job)`, where `Some(None)` is the items of
/// no job) or of all (`None`).
fn suppressed_in(items: &[DigestItem], job: Option<Option<&str>>) -> usize {
    items
        .iter()
        .filter(|item| is_suppression(item))
        .filter(|item| job.is_none_or(|job| item.job.as_deref() == job))
        .count()
}

fn median(counts: impl Iterator<Item = usize>) -> Option<f64> {
    let mut counts: Vec<usize> = counts.collect();
    if counts.is_empty() {
        return None;
    }
    counts.sort_unstable();
    let middle = counts.len() / 2;
    Some(if counts.len() % 2 == 1 {
        counts[middle] as f64
    } else {
        (counts[middle - 1] + counts[middle]) as f64 / 2.0
    })
}

fn rises(now: usize, baseline: Option<f64>) -> bool {
    match baseline {
        Some(baseline) => now >= RISE_MINIMUM && now as f64 >= RISE_FACTOR as f64 * baseline,
        None => now >= NO_BASELINE_MINIMUM,
    }
}

fn rise_text(now: usize, baseline: Option<f64>, compared_with: usize, what: &str) -> String {
    let advice = format!("retries may be growing upstream — look at {what}");
    match baseline {
        Some(baseline) => {
            let base = if baseline == 0.0 {
                "none".to_string()
            } else if baseline.fract() == 0.0 {
                format!("{baseline:.0}")
            } else {
                format!("{baseline:.1}")
            };
            let over = if compared_with == 1 {
                "the digest before".to_string()
            } else {
                format!("the median of the previous {compared_with} digests")
            };
            format!("suppressions rose to {now} ({base} a day before, {over}): {advice}")
        }
        None => format!("{now} suppressions, with no earlier digest to compare: {advice}"),
    }
}

/// The next time the digest is cut: the first occurrence of `digest_at`, on the wall clock
/// of `tz`, strictly after `after`.
///
/// When the clocks go back and `digest_at` happens twice, the earlier one counts and the
/// day has had its cut: a digest is cut once a day, never twice. When the clocks jump over
/// `digest_at`, the cut happens at the first instant after the jump (the wall clock's
/// first existing minute after `digest_at`), so a day is never skipped.
pub fn next_cut_in<Tz: TimeZone>(
    after: DateTime<Utc>,
    digest_at: NaiveTime,
    tz: &Tz,
) -> DateTime<Utc> {
    let mut day = after.with_timezone(tz).date_naive();
    // Today's, else tomorrow's; a day a time zone skipped entirely needs one more.
    for _ in 0..4 {
        if let Some(at) = first_instant_at(day.and_time(digest_at), tz)
            && at > after
        {
            return at;
        }
        match day.succ_opt() {
            Some(next) => day = next,
            None => break,
        }
    }
    // Only at the end of chrono's calendar: a day later is as good an answer as any.
    after + TimeDelta::days(1)
}

/// What the next digest is counted from: the last cut; before the first cut, the oldest item
/// waiting (a `watch --once` pass is a new process each time: counting from its own start, it
/// would never reach a cut). A last cut stamped after `now` was cut by a clock that ran ahead
/// (a VM restored from a snapshot, a bad NTP server, `faketime`): counting from it would wait
/// for that date, and no digest would be cut until then. It is treated as now — the oldest
/// item waiting since is counted from, as before a first cut — and said in words, the second
/// value. Waiting items stamped after `now` are not counted from, for the same reason.
pub fn cut_counted_from(
    last_cut: Option<DateTime<Utc>>,
    oldest_waiting: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> (DateTime<Utc>, Option<String>) {
    let waiting = oldest_waiting.filter(|at| *at <= now).unwrap_or(now);
    match last_cut {
        Some(cut) if cut <= now => (cut, None),
        Some(cut) => (
            waiting,
            Some(format!(
                "the last digest is stamped {}, in the future: the clock jumped; cutting from now",
                cut.format("%Y-%m-%d")
            )),
        ),
        None => (waiting, None),
    }
}

/// The next cut as it stands, never later than the next `digest_at` after `now` on the wall
/// clock of `tz`: a next cut worked out while the clock was ahead (then set back) is brought
/// back to the next `digest_at`, so a clock that jumped never stops the digest.
pub fn next_cut_bounded<Tz: TimeZone>(
    planned: DateTime<Utc>,
    now: DateTime<Utc>,
    digest_at: NaiveTime,
    tz: &Tz,
) -> DateTime<Utc> {
    planned.min(next_cut_in(now, digest_at, tz))
}

/// The earliest instant whose wall time in `tz` is `local`, or, when the clocks skip it,
/// the first instant after the skip.
fn first_instant_at<Tz: TimeZone>(local: NaiveDateTime, tz: &Tz) -> Option<DateTime<Utc>> {
    if let Some(at) = tz.from_local_datetime(&local).earliest() {
        return Some(at.with_timezone(&Utc));
    }
    // Clocks move on whole minutes; walk the wall clock forward to the first minute that
    // exists, which is the instant the clocks jumped. Two days bounds any real skip.
    let mut probe = local.with_second(0)?.with_nanosecond(0)?;
    for _ in 0..2 * 24 * 60 {
        probe = probe.checked_add_signed(TimeDelta::minutes(1))?;
        if let Some(at) = tz.from_local_datetime(&probe).earliest() {
            return Some(at.with_timezone(&Utc));
        }
    }
    None
}

/// RFC 3339 in UTC with milliseconds, as `mihari events --json` writes times.
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn rfc3339_ms<S: Serializer>(at: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&rfc3339(*at))
}

fn rfc3339_ms_opt<S: Serializer>(
    at: &Option<DateTime<Utc>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => serializer.serialize_str(&rfc3339(*at)),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::FixedOffset;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("test time")
            .with_timezone(&Utc)
    }

    fn item(id: i64, job: Option<&str>, category: DigestCategory, text: &str) -> DigestItem {
        DigestItem {
            id,
            at: at("2025-05-01T10:00:00Z") + TimeDelta::minutes(id),
            job: job.map(str::to_string),
            category,
            text: text.to_string(),
        }
    }

    fn digest(id: i64, suppressed: usize) -> Digest {
        Digest {
            id,
            cut: at("2025-04-01T07:00:00Z") + TimeDelta::days(id),
            delivered: None,
            items: (0..suppressed)
                .map(|i| item(i as i64, Some("collect"), DigestCategory::Suppressed, "dup"))
                .collect(),
        }
    }

    fn suppressions(n: usize) -> Vec<DigestItem> {
        (0..n)
            .map(|i| item(i as i64, Some("collect"), DigestCategory::Suppressed, "dup"))
            .collect()
    }

    #[test]
    fn categories_round_trip_through_their_names() {
        for category in DigestCategory::ALL {
            assert_eq!(DigestCategory::parse(category.as_str()), Some(category));
        }
        assert_eq!(DigestCategory::parse("stalled"), None);
    }

    #[test]
    fn short_text_is_inert_and_cut_to_the_limit() {
        let text = short_text(&format!("\u{1b}]0;owned\u{7}{}", "x".repeat(500)));
        assert!(super::super::text::is_inert(&text));
        assert_eq!(text.chars().count(), TEXT_LIMIT);
        assert!(text.ends_with('…'));
        assert_eq!(short_text("  ok  "), "ok");
    }

    #[test]
    fn the_median_of_the_newest_seven_is_the_baseline() {
        // One terrible day long ago falls out of the window; one spike inside it does not
        // move the median.
        let mut previous: Vec<Digest> = [100, 2, 2, 40, 2, 3, 2, 2]
            .iter()
            .enumerate()
            .map(|(i, &n)| digest(i as i64, n))
            .collect();
        previous.reverse();
        let report = report(&suppressions(6), &previous);
        assert_eq!(report.compared_with, 7);
        assert_eq!(report.baseline, Some(2.0));
        assert_eq!(report.callouts.len(), 1, "{:?}", report.callouts);
    }

    #[test]
    fn rise_boundaries() {
        // (now, baseline, called out)
        let rows = [
            (4, Some(0.0), false),
            (5, Some(0.0), true),
            (5, Some(2.0), false),
            (6, Some(2.0), true),
            (59, Some(20.0), false),
            (60, Some(20.0), true),
            (9, None, false),
            (10, None, true),
        ];
        for (now, baseline, expected) in rows {
            assert_eq!(rises(now, baseline), expected, "{now} over {baseline:?}");
        }
    }

    #[test]
    fn a_small_job_whose_retries_multiply_is_called_out_beside_a_big_steady_one() {
        let previous: Vec<Digest> = (0..3)
            .map(|d| {
                let mut digest = digest(d, 100);
                digest
                    .items
                    .push(item(500, Some("small"), DigestCategory::Suppressed, "dup"));
                digest
            })
            .collect();
        let mut now = suppressions(100);
        now.extend((0..8).map(|i| item(200 + i, Some("small"), DigestCategory::Suppressed, "d")));
        let report = report(&now, &previous);
        assert_eq!(report.callouts.len(), 1, "{:?}", report.callouts);
        assert!(report.callouts[0].starts_with("'small': suppressions rose to 8 (1 a day"));
        assert!(report.jobs[1].callout.is_some());
        assert!(report.jobs[0].callout.is_none());
    }

    #[test]
    fn lines_fold_repeats_and_head_each_job() {
        let items = vec![
            item(
                1,
                Some("collect"),
                DigestCategory::Suppressed,
                "duplicate claim",
            ),
            item(
                2,
                Some("collect"),
                DigestCategory::StallSeen,
                "no progress for 12m",
            ),
            item(
                3,
                Some("collect"),
                DigestCategory::Suppressed,
                "duplicate claim",
            ),
            item(4, None, DigestCategory::Other, "watcher took over"),
        ];
        let lines = report(&items, &[]).lines(&Utc);
        assert_eq!(
            lines,
            vec![
                "collect — 1 stall-seen · 2 suppressed",
                "  05-01 10:01  suppressed       duplicate claim  ×2, last 05-01 10:03",
                "  05-01 10:02  stall-seen       no progress for 12m",
                "(all jobs) — 1 other",
                "  05-01 10:04  other            watcher took over",
            ]
        );
    }

    #[test]
    fn next_cut_is_strictly_after_and_on_the_local_wall_clock() {
        let tokyo = FixedOffset::east_opt(9 * 3600).expect("offset");
        let nine = NaiveTime::from_hms_opt(9, 0, 0).expect("time");
        // 08:59 in Tokyo: today's 09:00.
        assert_eq!(
            next_cut_in(at("2025-05-01T23:59:00Z"), nine, &tokyo),
            at("2025-05-02T00:00:00Z")
        );
        // Exactly 09:00: the next day's.
        assert_eq!(
            next_cut_in(at("2025-05-02T00:00:00Z"), nine, &tokyo),
            at("2025-05-03T00:00:00Z")
        );
    }
}
