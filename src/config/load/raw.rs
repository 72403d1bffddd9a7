//! The jobs file exactly as written: serde structs that mirror `jobs.yaml` key for key.
//!
//! This module owns the shape of the YAML: every mapping refuses unknown keys
//! (`deny_unknown_fields`), and every value a later refusal must point at is kept
//! [`Spanned`] so the refusal can name its line and column. Nothing here judges a value
//! beyond its YAML type, applies a default, or resolves a path: that is `validate`'s job,
//! which keeps each rule in one place. No `#[serde(flatten)]` or untagged enums: they
//! would silently drop the positions (`Spanned` loses its location inside them).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use crate::core::text::inert;

/// A key that may be absent, present with a value, or present with no value (`key:`).
///
/// `Option<Spanned<T>>` alone cannot tell the last two apart (serde maps YAML null to
/// `None` before `T` is asked), and an empty `jobs:` or `command:` must be refused with its
/// position rather than read as "not given".
pub(super) type Given<T> = Option<Spanned<Option<T>>>;

/// `deserialize_with` for [`Given`]: called only when the key is present.
fn given<'de, D, T>(deserializer: D) -> Result<Given<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Spanned::<Option<T>>::deserialize(deserializer).map(Some)
}

/// The whole file. `Option` at the root because an empty file is a document with no node.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    #[serde(default)]
    pub settings: Option<RawSettings>,
    #[serde(default, deserialize_with = "given")]
    pub jobs: Given<Vec<Spanned<RawJob>>>,
}

/// The file's `settings:` alone, everything else skipped unread: what a refused file still
/// says about where its store is.
#[derive(Deserialize)]
pub(super) struct RawSettingsAlone {
    #[serde(default)]
    pub settings: Option<RawSettings>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettings {
    pub state_dir: Option<Spanned<String>>,
    pub digest_at: Option<Spanned<String>>,
    pub restart_daily_cap: Option<u32>,
    pub workspace_cooldown_sec: Option<u64>,
    pub max_hops: Option<u32>,
    #[serde(default, deserialize_with = "given")]
    pub escalate_command: Given<Argv>,
    pub prometheus_textfile: Option<Spanned<String>>,
}

/// The sections few jobs write (a progress table, a log pattern, a process, a restart, timeouts)
/// are boxed: inline they made every job 2.5 KB while the file is read, and a farm of 10,000
/// jobs held 41 MB of them at once (the list grows by doubling), for 16 MB now.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJob {
    pub id: Option<Spanned<String>>,
    pub name: Option<String>,
    pub owner: Option<String>,
    pub workspace: Option<Spanned<String>>,
    pub lock: Option<Spanned<String>>,
    pub log: Option<Spanned<String>>,
    pub progress_file: Option<Spanned<String>>,
    pub progress_table: Option<Box<Spanned<RawProgressTable>>>,
    pub manifest: Option<Spanned<String>>,
    pub log_progress: Option<Box<Spanned<RawLogProgress>>>,
    pub process: Option<Box<Spanned<RawProcess>>>,
    pub stall_sec: Option<Spanned<RawStall>>,
    pub expected_total: Option<u64>,
    #[serde(default, deserialize_with = "given")]
    pub should_run_when: Given<Vec<Spanned<String>>>,
    pub resource_lock: Option<Spanned<String>>,
    pub auto_restart: Option<Spanned<bool>>,
    pub auto_restart_reason: Option<Spanned<String>>,
    pub auto_restart_blocked_reason: Option<String>,
    pub restart: Option<Box<RawRestart>>,
    pub checks: Option<Vec<Spanned<RawCheck>>>,
    pub timeouts: Option<Box<RawTimeouts>>,
    pub markers: Option<Vec<Spanned<RawMarker>>>,
    pub io_progress: Option<Spanned<bool>>,
    pub slurm: Option<Box<Spanned<RawSlurm>>>,
    pub schedule: Option<Box<Spanned<RawSchedule>>>,
}

/// `slurm:` — the Slurm job that holds the job.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSlurm {
    pub job_name: Option<Spanned<String>>,
    pub job_id: Option<Spanned<u64>>,
    pub user: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "given")]
    pub submit: Given<Argv>,
    pub requeue: Option<Spanned<bool>>,
}

/// `schedule:` — every or cron, and grace.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSchedule {
    pub every: Option<Spanned<RawDuration>>,
    pub cron: Option<Spanned<String>>,
    pub grace: Option<Spanned<RawDuration>>,
    pub time_zone: Option<Spanned<String>>,
}

/// A duration as written (`30s`, `20m`, `1h`, `1d`), kept as text: a bare number, a float or a
/// boolean is kept too, so that `validate` can refuse it with its position and the forms
/// that are accepted.
pub(super) struct RawDuration(pub String);

impl<'de> Deserialize<'de> for RawDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DurationVisitor)
    }
}

struct DurationVisitor;

impl<'de> Visitor<'de> for DurationVisitor {
    type Value = RawDuration;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a duration like 30s, 20m, 1h or 1d")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<RawDuration, E> {
        Ok(RawDuration(value.to_string()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawDuration, E> {
        Ok(RawDuration(value.to_string()))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawDuration, E> {
        Ok(RawDuration(value.to_string()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<RawDuration, E> {
        Ok(RawDuration(value.to_string()))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<RawDuration, E> {
        Ok(RawDuration(value.to_string()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<RawDuration, E> {
        Ok(RawDuration(String::new()))
    }

    fn visit_none<E: de::Error>(self) -> Result<RawDuration, E> {
        Ok(RawDuration(String::new()))
    }
}

/// One of `markers:`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMarker {
    pub path: Option<Spanned<String>>,
    pub stale_after_sec: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProgressTable {
    pub db: Option<Spanned<String>>,
    pub table: Option<Spanned<String>>,
    pub time_column: Option<Spanned<String>>,
    pub time_unit: Option<Spanned<String>>,
    pub time_zone: Option<Spanned<String>>,
    pub done_column: Option<Spanned<String>>,
    pub total_column: Option<Spanned<String>>,
}

/// `log_progress:` — a preset, or a pattern with named groups.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLogProgress {
    pub preset: Option<Spanned<String>>,
    pub pattern: Option<Spanned<String>>,
}

/// `process:` — the holder found by its command line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProcess {
    pub cmdline: Option<Spanned<String>>,
    pub user: Option<Spanned<RawUser>>,
}

/// `process.user` as written: a user name, or a uid as a number.
pub(super) enum RawUser {
    Name(String),
    Uid(u64),
    /// Anything else (a negative number, a list...), kept so the refusal can quote it.
    Other(String),
}

impl<'de> Deserialize<'de> for RawUser {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UserVisitor)
    }
}

struct UserVisitor;

impl<'de> Visitor<'de> for UserVisitor {
    type Value = RawUser;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a user name or a uid, like alice or 1000")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<RawUser, E> {
        Ok(RawUser::Name(value.to_string()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawUser, E> {
        Ok(RawUser::Uid(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawUser, E> {
        match u64::try_from(value) {
            Ok(value) => Ok(RawUser::Uid(value)),
            Err(_) => Ok(RawUser::Other(value.to_string())),
        }
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<RawUser, E> {
        Ok(RawUser::Other(value.to_string()))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<RawUser, E> {
        Ok(RawUser::Other(value.to_string()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<RawUser, E> {
        Ok(RawUser::Other(String::new()))
    }

    fn visit_none<E: de::Error>(self) -> Result<RawUser, E> {
        Ok(RawUser::Other(String::new()))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRestart {
    #[serde(default, deserialize_with = "given")]
    pub command: Given<Argv>,
    pub cwd: Option<Spanned<String>>,
    pub env: Option<EnvMap>,
    pub routes: Option<Vec<Spanned<RawRoute>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub name: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "given")]
    pub command: Given<Argv>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCheck {
    pub name: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "given")]
    pub command: Given<Argv>,
    pub every_sec: Option<Spanned<u64>>,
    pub timeout_sec: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTimeouts {
    pub queue_sec: Option<Spanned<u64>>,
    pub attempt_sec: Option<Spanned<u64>>,
    pub total_sec: Option<Spanned<u64>>,
}

/// A command as written: a list of strings, each with its position.
///
/// A plain string is refused here, while the YAML is read, because it is the one mistake
/// that looks right: `"python3 collect.py"` would have to go through a shell to run, and
/// mihari runs argv, never a shell string.
pub(super) struct Argv(pub Vec<Spanned<String>>);

impl<'de> Deserialize<'de> for Argv {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ArgvVisitor)
    }
}

struct ArgvVisitor;

impl ArgvVisitor {
    fn not_a_list<E: de::Error>(shown: &str) -> E {
        E::custom(format!(
            "'{}' is not a command: a command is an argv list, never a shell string; \
             write it as a list, one element per argument, like [\"python3\", \"collect.py\"]",
            inert(shown)
        ))
    }
}

impl<'de> Visitor<'de> for ArgvVisitor {
    type Value = Argv;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an argv list, like [\"python3\", \"collect.py\"]")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Argv, E> {
        let mut message = format!(
            "'{}' is a shell string: a command is an argv list, never a shell string",
            inert(value)
        );
        if let Some(suggestion) = argv_suggestion(value) {
            message.push_str("; write ");
            message.push_str(&suggestion);
        } else {
            message.push_str("; write it as a list, one element per argument");
        }
        Err(E::custom(message))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Argv, E> {
        Err(Self::not_a_list(&value.to_string()))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Argv, E> {
        Err(Self::not_a_list(&value.to_string()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Argv, E> {
        Err(Self::not_a_list(&value.to_string()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Argv, E> {
        Err(Self::not_a_list(&value.to_string()))
    }

    /// `command:` with no value is read as an empty command, so that it is refused as one
    /// (with its position) instead of passing as "no command given".
    fn visit_unit<E: de::Error>(self) -> Result<Argv, E> {
        Ok(Argv(Vec::new()))
    }

    fn visit_none<E: de::Error>(self) -> Result<Argv, E> {
        Ok(Argv(Vec::new()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Argv, A::Error> {
        let mut argv = Vec::new();
        while let Some(arg) = seq.next_element()? {
            argv.push(arg);
        }
        Ok(Argv(argv))
    }
}

/// The list a shell string most likely meant, when splitting on blanks is unambiguous
/// (no quotes, no shell syntax). Otherwise `None`: guessing would hide a real decision.
fn argv_suggestion(shell: &str) -> Option<String> {
    let words: Vec<&str> = shell.split_whitespace().collect();
    let plain = |w: &&str| {
        w.chars().all(|c| {
            !c.is_control()
                && !matches!(
                    c,
                    '\'' | '"'
                        | '\\'
                        | '$'
                        | '`'
                        | '|'
                        | '&'
                        | ';'
                        | '<'
                        | '>'
                        | '('
                        | ')'
                        | '*'
                        | '?'
                        | '~'
                        | '#'
                        | '{'
                        | '}'
                )
        })
    };
    if words.is_empty() || words.len() > 12 || !words.iter().all(plain) {
        return None;
    }
    let listed: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
    Some(format!("[{}]", listed.join(", ")))
}

/// `stall_sec` as written: a number of seconds, or `never` for a job idle by nature. Anything
/// else is refused here, while the YAML is read, with the value and what is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RawStall {
    Seconds(u64),
    Never,
}

impl<'de> Deserialize<'de> for RawStall {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StallVisitor)
    }
}

struct StallVisitor;

impl StallVisitor {
    fn refused<E: de::Error>(shown: &str) -> E {
        E::custom(format!(
            "stall_sec '{}' is not accepted: expected a whole number of seconds, at least 1, \
             or never (for a job that is idle by nature)",
            inert(shown)
        ))
    }
}

impl<'de> Visitor<'de> for StallVisitor {
    type Value = RawStall;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a whole number of seconds, or never")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawStall, E> {
        Ok(RawStall::Seconds(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawStall, E> {
        u64::try_from(value)
            .map(RawStall::Seconds)
            .map_err(|_| Self::refused(&value.to_string()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<RawStall, E> {
        Err(Self::refused(&value.to_string()))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<RawStall, E> {
        Err(Self::refused(&value.to_string()))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<RawStall, E> {
        match value {
            "never" => Ok(RawStall::Never),
            other => Err(Self::refused(other)),
        }
    }

    fn visit_unit<E: de::Error>(self) -> Result<RawStall, E> {
        Err(Self::refused(""))
    }

    fn visit_none<E: de::Error>(self) -> Result<RawStall, E> {
        Err(Self::refused(""))
    }
}

/// `restart.env` as written: name/value pairs in order, each with its position, so a bad
/// name can be pointed at. Repeated names never reach here: the parser refuses duplicate keys.
pub(super) struct EnvMap(pub Vec<(Spanned<String>, Spanned<String>)>);

impl<'de> Deserialize<'de> for EnvMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EnvVisitor)
    }
}

struct EnvVisitor;

impl<'de> Visitor<'de> for EnvVisitor {
    type Value = EnvMap;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping of variable names to values, like { PYTHONUNBUFFERED: \"1\" }")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EnvMap, A::Error> {
        let mut pairs = Vec::new();
        while let Some(pair) = map.next_entry()? {
            pairs.push(pair);
        }
        Ok(EnvMap(pairs))
    }
}
