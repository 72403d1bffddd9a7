//! `mihari fleet check`: every host's `check --json`, asked at once, merged into one report
//! in the fixed order (RESTART, RED, STALE, DISPATCH, then the rest) with a `host` on every
//! job, a `hosts` list, and the worst exit code.
//!
//! A host that cannot be reached within its timeout, whose ssh fails, or whose mihari cannot
//! assess its jobs is a broken rule — RED, "gpu2 unreachable: ssh said ..." — and is listed
//! in `hosts` with why: never dropped. The hosts' own JSON is carried as it is (a host may
//! run another version of mihari), with what this report needs read from it.

use std::io::{self, Write};

use chrono::{SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use super::remote::{self, NoAnswer};
use crate::config::{Fleet, Host};
use crate::core::text::inert;
use crate::probe::zone::Zone;
use crate::render::{EXIT_CRITICAL, EXIT_OK, EXIT_UNKNOWN};

/// What one host said, or why it said nothing usable.
#[derive(Debug, Clone, PartialEq)]
pub struct HostReport {
    pub name: String,
    /// The host's `check --json` object, when it answered with one.
    pub report: Option<Value>,
    /// The host's exit code (0 to 3) when it answered.
    pub exit: Option<u8>,
    /// Why the host is not known: unreachable, no mihari there, its jobs file refused.
    pub error: Option<String>,
    /// Whether the host's mihari answered at all (it may answer that it cannot assess).
    pub reachable: bool,
}

impl HostReport {
    pub fn reachable(&self) -> bool {
        self.reachable
    }
}

/// Asks every host at once (one thread each) and answers in the fleet file's order.
pub fn ask_all(fleet: &Fleet) -> Vec<HostReport> {
    std::thread::scope(|scope| {
        let asked: Vec<_> = fleet
            .hosts
            .iter()
            .map(|host| scope.spawn(move || ask(host)))
            .collect();
        asked
            .into_iter()
            .zip(&fleet.hosts)
            .map(|(handle, host)| {
                handle.join().unwrap_or_else(|_| HostReport {
                    name: host.name.clone(),
                    report: None,
                    exit: None,
                    error: Some(format!("{} could not be asked", host.name)),
                    reachable: false,
                })
            })
            .collect()
    })
}

/// One host's `check --json`, judged.
pub fn ask(host: &Host) -> HostReport {
    let failed = |error: String| HostReport {
        name: host.name.clone(),
        report: None,
        exit: None,
        error: Some(error),
        reachable: false,
    };
    let answer = match remote::run(host, &["check", "--json"]) {
        Ok(answer) => answer,
        Err(NoAnswer::TimedOut(after)) => {
            return failed(format!(
                "{} unreachable: no answer within {} s",
                host.name,
                after.as_secs_f64()
            ));
        }
        Err(NoAnswer::NotStarted(why)) => {
            return failed(format!("{} unreachable: {why}", host.name));
        }
        Err(NoAnswer::CutOff) => {
            return failed(format!(
                "{}: answer longer than {}: cut off",
                host.name,
                remote::size_words(remote::MAX_ANSWER)
            ));
        }
    };
    let said = last_words(&answer.stderr);
    let code = answer.code.and_then(|code| u8::try_from(code).ok());
    let parsed = serde_json::from_str::<Value>(answer.stdout.trim())
        .ok()
        .filter(|value| value.get("jobs").is_some_and(Value::is_array));
    match (code, parsed) {
        (Some(code @ 0..=3), Some(report)) => HostReport {
            name: host.name.clone(),
            report: Some(report),
            exit: Some(code),
            error: None,
            reachable: true,
        },
        (Some(255), _) if !host.ssh.is_empty() => {
            failed(format!("{} unreachable: ssh said: {said}", host.name))
        }
        (Some(126 | 127), _) => failed(format!(
            "{}: mihari not found there as '{}' (set 'mihari' in the fleet file): {said}",
            host.name,
            inert(&host.mihari)
        )),
        // It answered: its jobs file (or store) is refused. The refusal's first line names
        // file:line:col and why; the lines after it are the quoted source and a caret.
        (Some(3), None) => HostReport {
            exit: Some(3),
            reachable: true,
            ..failed(format!(
                "{}: mihari there cannot assess its jobs: {}",
                host.name,
                first_words(&answer.stderr)
            ))
        },
        (code, _) => failed(format!(
            "{}: no report from mihari there ({}): {said}",
            host.name,
            code.map_or_else(|| "killed by a signal".to_string(), |c| format!("exit {c}"))
        )),
    }
}

/// The first non-empty line of what mihari said on stderr, made inert and kept short.
fn first_words(stderr: &str) -> String {
    let line = stderr
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("(nothing on stderr)");
    let line = inert(line.strip_prefix("mihari: ").unwrap_or(line));
    if line.chars().count() > 300 {
        line.chars().take(300).collect::<String>() + "…"
    } else {
        line
    }
}

/// The last non-empty line of what a program said on stderr, made inert and kept short.
fn last_words(stderr: &str) -> String {
    let line = stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("(nothing on stderr)");
    let line = inert(line);
    if line.chars().count() > 300 {
        line.chars().take(300).collect::<String>() + "…"
    } else {
        line
    }
}

const BUCKETS: [&str; 4] = ["RESTART", "RED", "STALE", "DISPATCH"];

fn bucket_rank(job: &Value) -> usize {
    job.get("bucket")
        .and_then(Value::as_str)
        .and_then(|bucket| BUCKETS.iter().position(|b| *b == bucket))
        .unwrap_or(BUCKETS.len())
}

fn paused(job: &Value) -> bool {
    job.get("state").and_then(Value::as_str) == Some("PAUSED")
}

/// The merged report: check's object with `host` on every job, a `hosts` list, and the
/// unreachable hosts and each host's own rules (named by host) under `rules`.
pub fn merge(hosts: &[HostReport]) -> Value {
    let mut jobs: Vec<(usize, bool, usize, usize, Value)> = Vec::new();
    let mut rules: Vec<Value> = Vec::new();
    let mut listed: Vec<Value> = Vec::new();
    let mut held = false;
    for (h, host) in hosts.iter().enumerate() {
        let report = host.report.as_ref();
        if let Some(error) = &host.error {
            rules.push(Value::String(error.clone()));
        }
        if let Some(report) = report {
            for rule in report
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                rules.push(Value::String(format!("{}: {}", host.name, inert(rule))));
            }
            // A host whose store cannot be used answers UNKNOWN: say why, as its check does.
            if report.pointer("/store/state").and_then(Value::as_str) == Some("fault") {
                let why = report
                    .pointer("/store/reason")
                    .and_then(Value::as_str)
                    .unwrap_or("its state store cannot be used");
                rules.push(Value::String(format!(
                    "{}: UNKNOWN: its state store cannot be used: {}",
                    host.name,
                    inert(why)
                )));
            }
            held |= report
                .get("dispatch_held")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            for (i, job) in report
                .get("jobs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let mut job = job.clone();
                if let Some(fields) = job.as_object_mut() {
                    fields.insert("host".to_string(), Value::String(host.name.clone()));
                }
                jobs.push((bucket_rank(&job), paused(&job), h, i, job));
            }
        }
        listed.push(json!({
            "name": host.name,
            "reachable": host.reachable(),
            "exit": host.exit,
            "store": report.and_then(|r| r.get("store")).cloned().unwrap_or(Value::Null),
            "watcher": report.and_then(|r| r.get("watcher")).cloned().unwrap_or(Value::Null),
            "error": host.error,
        }));
    }
    jobs.sort_by_key(|(rank, paused, h, i, _)| (*rank, *paused, *h, *i));
    let mut merged = Map::new();
    merged.insert(
        "generated_at".into(),
        Value::String(Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)),
    );
    merged.insert(
        "jobs".into(),
        Value::Array(jobs.into_iter().map(|(.., job)| job).collect()),
    );
    merged.insert(
        "dispatch_held".into(),
        Value::Bool(held || !rules.is_empty()),
    );
    merged.insert("rules".into(), Value::Array(rules));
    merged.insert("hosts".into(), Value::Array(listed));
    Value::Object(merged)
}

/// The worst exit code over the hosts: an unreachable host is CRITICAL (it is RED), a host
/// that cannot assess its jobs UNKNOWN, as its own check would say.
pub fn exit_code(hosts: &[HostReport]) -> u8 {
    hosts
        .iter()
        .map(|host| match (host.exit, &host.error) {
            (Some(code), None) => code,
            (_, Some(error)) if error.contains("cannot assess") => EXIT_UNKNOWN,
            _ => EXIT_CRITICAL,
        })
        .max()
        .unwrap_or(EXIT_OK)
}

/// The merged report as one JSON object on one line.
pub fn render_json(merged: &Value, out: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut *out, merged)?;
    writeln!(out)
}

/// The merged report as a table in the fixed order, with a host column; times in the
/// machine's zone, named once in the first line.
pub fn render_table(merged: &Value, out: &mut impl Write) -> io::Result<()> {
    let empty = Vec::new();
    let jobs = merged
        .get("jobs")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let hosts = merged
        .get("hosts")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let rules = merged
        .get("rules")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let text = |value: &Value, key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .map(inert)
            .unwrap_or_default()
    };
    let reachable = hosts
        .iter()
        .filter(|h| h.get("reachable").and_then(Value::as_bool) == Some(true))
        .count();
    let count = |bucket: &str| {
        jobs.iter()
            .filter(|job| text(job, "bucket") == bucket)
            .count()
            + if bucket == "RED" { rules.len() } else { 0 }
    };
    let counts: Vec<String> = BUCKETS
        .iter()
        .map(|bucket| format!("{bucket} {}", count(bucket)))
        .collect();
    let zone = Zone::machine();
    let now = Utc::now();
    writeln!(
        out,
        "mihari fleet check · {} · {} · {} host{} ({reachable} reachable) · {} job{} · {}",
        zone.format(now, "%Y-%m-%d %H:%M:%S"),
        zone.header(now),
        hosts.len(),
        if hosts.len() == 1 { "" } else { "s" },
        jobs.len(),
        if jobs.len() == 1 { "" } else { "s" },
        counts.join(" · ")
    )?;
    let host_width = hosts
        .iter()
        .map(|h| text(h, "name").chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 24);
    let id_width = jobs
        .iter()
        .map(|j| text(j, "id").chars().count())
        .max()
        .unwrap_or(8)
        .clamp(8, 32);
    let row = |job: &Value, out: &mut dyn Write| -> io::Result<()> {
        writeln!(
            out,
            "  {:<host_width$}  {:<id_width$}  {}",
            text(job, "host"),
            text(job, "id"),
            text(job, "state")
        )?;
        for reason in job
            .get("reasons")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            writeln!(out, "      - {}", zone.rewrite_utc_stamps(&inert(reason)))?;
        }
        Ok(())
    };
    // Each host on one line: reachable or not, and whether anything watches its jobs.
    for host in hosts {
        let name = text(host, "name");
        let watcher = host.get("watcher").filter(|w| !w.is_null());
        let words = match watcher.map(|w| text(w, "state")).as_deref() {
            _ if host.get("reachable").and_then(Value::as_bool) != Some(true) => {
                "unreachable".to_string()
            }
            Some("alive") => match watcher.and_then(|w| w.get("pid")).and_then(Value::as_u64) {
                Some(pid) => format!("watcher alive (pid {pid})"),
                None => "watcher alive".to_string(),
            },
            Some("passes") => "watcher passes (watch --once)".to_string(),
            Some("stuck") => match watcher.and_then(|w| w.get("pid")).and_then(Value::as_u64) {
                Some(pid) => format!("watcher stuck (pid {pid} lives, no pass for 5 min: RED)"),
                None => "watcher stuck (no pass for 5 min: RED)".to_string(),
            },
            Some("gone") => "no watcher: it stopped (RED)".to_string(),
            Some("none_yet") => "no watcher has run yet".to_string(),
            Some("unknown") => "watcher unknown".to_string(),
            _ => "watcher not reported".to_string(),
        };
        writeln!(out, "  {:<host_width$}  {words}", name)?;
    }
    // Pending approvals, which no bucket counts: each waits for a human.
    let approvals: Vec<String> = jobs
        .iter()
        .flat_map(|job| {
            let (host, id) = (text(job, "host"), text(job, "id"));
            job.get("approvals")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(move |a| {
                    format!(
                        "{host}/{id} '{}': {} (mihari approval approve -- {} on {host})",
                        text(a, "step"),
                        text(a, "summary"),
                        text(a, "key")
                    )
                })
        })
        .collect();
    if !approvals.is_empty() {
        writeln!(out, "\nAPPROVALS ({})", approvals.len())?;
        for line in approvals {
            writeln!(out, "  ⚑ {line}")?;
        }
    }
    for bucket in BUCKETS {
        let n = count(bucket);
        if n == 0 {
            continue;
        }
        writeln!(out, "\n{bucket} ({n})")?;
        if bucket == "RED" {
            for rule in rules.iter().filter_map(Value::as_str) {
                writeln!(out, "  ✖ {}", zone.rewrite_utc_stamps(&inert(rule)))?;
            }
        }
        for job in jobs.iter().filter(|job| text(job, "bucket") == bucket) {
            row(job, out)?;
        }
    }
    let rest: Vec<&Value> = jobs
        .iter()
        .filter(|job| job.get("bucket").is_none_or(Value::is_null))
        .collect();
    if !rest.is_empty() {
        writeln!(out, "\nNOTHING TO DO ({})", rest.len())?;
        for job in rest {
            row(job, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(name: &str, exit: u8, report: Value) -> HostReport {
        HostReport {
            name: name.into(),
            report: Some(report),
            exit: Some(exit),
            error: None,
            reachable: true,
        }
    }

    #[test]
    fn jobs_of_all_hosts_merge_in_the_fixed_order_and_an_unreachable_host_is_red() {
        let a = answered(
            "a",
            1,
            json!({"jobs": [
                {"id": "quiet", "state": "RUNNING", "bucket": null},
                {"id": "held", "state": "SHOULD_BE_RUNNING", "bucket": "DISPATCH",
                 "approvals": [{"key": "k1", "step": "publish", "summary": "push v2"}]},
                {"id": "paused", "state": "PAUSED", "bucket": null},
            ], "rules": [], "dispatch_held": false,
               "watcher": {"state": "alive", "pid": 4100}}),
        );
        let b = answered(
            "b",
            2,
            json!({"jobs": [
                {"id": "calm", "state": "COMPLETE", "bucket": null},
                {"id": "dead", "state": "DEAD_LOCK_STALE", "bucket": "RESTART"},
            ], "rules": ["no machine is watching: gone"], "dispatch_held": true}),
        );
        let c = HostReport {
            name: "c".into(),
            report: None,
            exit: None,
            error: Some("c unreachable: ssh said: Connection refused".into()),
            reachable: false,
        };
        let hosts = [a, b, c];
        let merged = merge(&hosts);
        let order: Vec<String> = merged["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .map(|job| {
                format!(
                    "{}/{}",
                    job["host"].as_str().unwrap(),
                    job["id"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(order, ["b/dead", "a/held", "a/quiet", "b/calm", "a/paused"]);
        assert_eq!(
            merged["rules"],
            json!([
                "b: no machine is watching: gone",
                "c unreachable: ssh said: Connection refused"
            ])
        );
        assert_eq!(merged["hosts"][2]["reachable"], json!(false));
        assert_eq!(merged["dispatch_held"], json!(true));
        assert_eq!(exit_code(&hosts), 2);
        let mut table = Vec::new();
        render_table(&merged, &mut table).expect("table");
        let table = String::from_utf8(table).expect("utf-8");
        assert!(table.contains("3 hosts (2 reachable)"), "{table}");
        assert!(table.contains("RED (2)\n  ✖ b: no machine"), "{table}");
        // Each host's watcher, and the approvals no bucket counts.
        assert!(
            table.contains("  a     watcher alive (pid 4100)\n"),
            "{table}"
        );
        assert!(table.contains("  c     unreachable\n"), "{table}");
        assert!(
            table.contains(
                "APPROVALS (1)\n  ⚑ a/held 'publish': push v2 (mihari approval approve -- k1 on a)"
            ),
            "{table}"
        );
    }
}
