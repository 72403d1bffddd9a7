//! The real alerting chain on 127.0.0.1: `prometheus-node-exporter` serving a textfile folder,
//! `prometheus` scraping it every second and evaluating the shipped rules
//! (`assets/prometheus/mihari.rules.yml`) every second, and `prometheus-alertmanager` with the
//! shipped example (`assets/alertmanager.example.yml`) whose receivers are pointed at a webhook
//! receiver of this process, which records every notification and the moment it came.
//!
//! Shared by `tests/alerts_live.rs` (that the alerts arrive) and the perf bench's `alert` part
//! (how long they take, against their floor). Each server gets a free port and a data folder
//! in a temporary folder of its own, and every one of them is stopped when the [`Alerting`] is
//! dropped. A server that cannot be started is an error naming the Debian package to install.
//! The shipped files are used as they are, but for the receivers' URLs and what the caller
//! asks to override (an alert's `for:`, the route's `group_wait`), each override checked to
//! have changed the text.

#![allow(dead_code)]

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often Prometheus scrapes node_exporter and evaluates the rules.
pub const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);
pub const EVALUATION_INTERVAL: Duration = Duration::from_secs(1);

/// How long a server may take to answer that it is ready.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// What the caller changes in the shipped files: `for:` of some alerts, the route's
/// `group_wait`. Empty: the files as shipped.
#[derive(Default, Clone)]
pub struct Overrides {
    /// (alert name, its `for:` as Prometheus writes a duration, like "1s").
    pub rule_for: Vec<(String, String)>,
    /// The top-level route's `group_wait`, like "1s".
    pub group_wait: Option<String>,
}

/// One notification the webhook received.
#[derive(Debug, Clone)]
pub struct Notification {
    pub at: Instant,
    /// The receiver's path: `/pager` or `/chat`, as the shipped example names them.
    pub path: String,
    pub body: serde_json::Value,
}

impl Notification {
    /// The alerts of this notification named `name` whose status is `status` ("firing",
    /// "resolved").
    pub fn alerts(&self, name: &str, status: &str) -> Vec<&serde_json::Value> {
        self.body["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|alert| alert["labels"]["alertname"] == name && alert["status"] == status)
            .collect()
    }
}

/// The three servers, the webhook, and the folder they keep their data in.
pub struct Alerting {
    folder: tempfile::TempDir,
    servers: Vec<Server>,
    webhook: Webhook,
    pub node_exporter_port: u16,
    pub prometheus_port: u16,
    pub alertmanager_port: u16,
    /// The rules as Prometheus read them (the shipped file with the overrides).
    pub rules: String,
    /// The Alertmanager configuration as it read it.
    pub alertmanager_config: String,
}

struct Server {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// SIGTERM, then SIGKILL if it has not ended within three seconds; always reaped.
pub fn stop(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The shipped assets folder.
pub fn assets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets")
}

/// A free port on 127.0.0.1 (bound, then let go for a server to take).
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|e| format!("cannot find a free port on 127.0.0.1: {e}"))
}

/// `text` with the `for:` of alert `alert` set to `value`; an error when the alert or its
/// `for:` is not there (the override would silently do nothing).
pub fn with_rule_for(text: &str, alert: &str, value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    let mut changed = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("- alert: ") {
            inside = name == alert;
        }
        if inside && !changed && trimmed.starts_with("for: ") {
            let indent = &line[..line.len() - line.trim_start().len()];
            out.push_str(&format!("{indent}for: {value}\n"));
            changed = true;
            continue;
        }
        out.push_str(line);
    }
    if changed {
        Ok(out)
    } else {
        Err(format!("the rules have no 'for:' for alert '{alert}'"))
    }
}

/// The `for:` of `alert` in the rules `text` (zero when it has none).
pub fn rule_for(text: &str, alert: &str) -> Result<Duration, String> {
    let mut inside = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("- alert: ") {
            if inside {
                break;
            }
            inside = name == alert;
        } else if inside && let Some(value) = trimmed.strip_prefix("for: ") {
            return duration(value);
        }
    }
    if inside {
        Ok(Duration::ZERO)
    } else {
        Err(format!("no alert '{alert}' in the rules"))
    }
}

/// The top-level route's `group_wait` in an Alertmanager configuration.
pub fn group_wait(config: &str) -> Result<Duration, String> {
    config
        .lines()
        .find_map(|line| line.strip_prefix("  group_wait: "))
        .ok_or_else(|| "no group_wait in the route".to_string())
        .and_then(|value| duration(value.trim()))
}

/// A Prometheus duration with one unit: "30s", "1m", "2h".
pub fn duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("'{text}' has no unit"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("'{text}' is no duration"))?;
    let seconds = match unit {
        "ms" => return Ok(Duration::from_millis(number)),
        "s" => number,
        "m" => number * 60,
        "h" => number * 3600,
        _ => return Err(format!("'{text}': unit '{unit}' not known here")),
    };
    Ok(Duration::from_secs(seconds))
}

impl Alerting {
    /// Starts the webhook, node_exporter on `textfiles` (the textfile collector, and `uname`
    /// so that the rule for a host without mihari metrics has its input), Alertmanager and
    /// Prometheus, and waits until each says it is ready and Prometheus scrapes the exporter.
    pub fn start(textfiles: &Path, overrides: &Overrides) -> Result<Alerting, String> {
        let folder = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let root = folder.path().to_path_buf();
        let webhook = Webhook::start()?;

        let shipped_rules = fs::read_to_string(assets().join("prometheus/mihari.rules.yml"))
            .map_err(|e| format!("the shipped rules: {e}"))?;
        let mut rules = shipped_rules;
        for (alert, value) in &overrides.rule_for {
            rules = with_rule_for(&rules, alert, value)?;
        }
        let rules_path = root.join("mihari.rules.yml");
        fs::write(&rules_path, &rules).map_err(|e| format!("write rules: {e}"))?;

        let shipped_am = fs::read_to_string(assets().join("alertmanager.example.yml"))
            .map_err(|e| format!("the shipped Alertmanager example: {e}"))?;
        let shipped_url = "http://127.0.0.1:9095/";
        if !shipped_am.contains(shipped_url) {
            return Err(format!(
                "the Alertmanager example no longer sends to '{shipped_url}'"
            ));
        }
        let mut am_config =
            shipped_am.replace(shipped_url, &format!("http://127.0.0.1:{}/", webhook.port));
        if let Some(wait) = &overrides.group_wait {
            let before = am_config.clone();
            am_config = am_config.replacen(
                &format!("  group_wait: {}\n", fmt_duration(group_wait(&before)?)),
                &format!("  group_wait: {wait}\n"),
                1,
            );
            if am_config == before {
                return Err("the route's group_wait could not be overridden".to_string());
            }
        }
        let am_path = root.join("alertmanager.yml");
        fs::write(&am_path, &am_config).map_err(|e| format!("write alertmanager.yml: {e}"))?;

        let mut servers = Vec::new();
        let (node_exporter_port, exporter) = start_server(
            &root,
            "prometheus-node-exporter",
            "prometheus-node-exporter",
            "/metrics",
            |port| {
                vec![
                    format!("--web.listen-address=127.0.0.1:{port}"),
                    "--collector.disable-defaults".to_string(),
                    "--collector.textfile".to_string(),
                    "--collector.uname".to_string(),
                    format!("--collector.textfile.directory={}", textfiles.display()),
                ]
            },
        )?;
        servers.push(exporter);
        let am_data = root.join("alertmanager-data");
        let (alertmanager_port, alertmanager) = start_server(
            &root,
            "prometheus-alertmanager",
            "prometheus-alertmanager",
            "/-/ready",
            |port| {
                vec![
                    format!("--config.file={}", am_path.display()),
                    format!("--storage.path={}", am_data.display()),
                    format!("--web.listen-address=127.0.0.1:{port}"),
                    // No gossip: no port of its own, no wait for peers to settle.
                    "--cluster.listen-address=".to_string(),
                ]
            },
        )?;
        servers.push(alertmanager);
        let prometheus_yml = root.join("prometheus.yml");
        fs::write(
            &prometheus_yml,
            format!(
                "global:\n  scrape_interval: {}\n  evaluation_interval: {}\n\
                 rule_files: ['{}']\n\
                 alerting:\n  alertmanagers:\n    - static_configs:\n        \
                 - targets: ['127.0.0.1:{alertmanager_port}']\n\
                 scrape_configs:\n  - job_name: node\n    static_configs:\n      \
                 - targets: ['127.0.0.1:{node_exporter_port}']\n",
                fmt_duration(SCRAPE_INTERVAL),
                fmt_duration(EVALUATION_INTERVAL),
                rules_path.display()
            ),
        )
        .map_err(|e| format!("write prometheus.yml: {e}"))?;
        let tsdb = root.join("prometheus-data");
        let (prometheus_port, prometheus) =
            start_server(&root, "prometheus", "prometheus", "/-/ready", |port| {
                vec![
                    format!("--config.file={}", prometheus_yml.display()),
                    format!("--storage.tsdb.path={}", tsdb.display()),
                    format!("--web.listen-address=127.0.0.1:{port}"),
                ]
            })?;
        servers.push(prometheus);
        let alerting = Alerting {
            folder,
            servers,
            webhook,
            node_exporter_port,
            prometheus_port,
            alertmanager_port,
            rules,
            alertmanager_config: am_config,
        };
        alerting.wait_until("Prometheus to scrape the exporter", READY_WITHIN, |a| {
            Ok(a.query("up{job=\"node\"} == 1")?.contains("\"instance\":"))
        })?;
        Ok(alerting)
    }

    /// The scrape's `instance` label: the `host` label every mihari alert carries.
    pub fn instance(&self) -> String {
        format!("127.0.0.1:{}", self.node_exporter_port)
    }

    /// Prometheus' answer to an instant query, as JSON text.
    pub fn query(&self, promql: &str) -> Result<String, String> {
        http_get(
            self.prometheus_port,
            &format!("/api/v1/query?query={}", percent_encoded(promql)),
        )
    }

    /// Alertmanager's alerts (`/api/v2/alerts`), with their status (active, suppressed and
    /// by what).
    pub fn alertmanager_alerts(&self) -> Result<serde_json::Value, String> {
        let body = http_get(self.alertmanager_port, "/api/v2/alerts")?;
        serde_json::from_str(&body).map_err(|e| format!("Alertmanager's alerts: {e}: {body}"))
    }

    /// Every notification received so far.
    pub fn notifications(&self) -> Vec<Notification> {
        self.webhook
            .received
            .lock()
            .map(|received| received.clone())
            .unwrap_or_default()
    }

    /// The first notification received at or after `since` that carries alert `name` firing,
    /// waiting up to `limit`; the error says what did arrive and what the servers logged.
    pub fn wait_for_firing(
        &self,
        name: &str,
        since: Instant,
        limit: Duration,
    ) -> Result<Notification, String> {
        let found = |a: &Alerting| {
            a.notifications()
                .into_iter()
                .find(|n| n.at >= since && !n.alerts(name, "firing").is_empty())
        };
        let deadline = Instant::now() + limit;
        loop {
            if let Some(notification) = found(self) {
                return Ok(notification);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no notification of {name} firing within {} s; received: {:?}\n{}",
                    limit.as_secs(),
                    self.notifications()
                        .iter()
                        .map(|n| (n.path.clone(), n.body.to_string()))
                        .collect::<Vec<_>>(),
                    self.logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Polls `done` every 100 ms until it says yes, for at most `limit`.
    pub fn wait_until(
        &self,
        what: &str,
        limit: Duration,
        mut done: impl FnMut(&Alerting) -> Result<bool, String>,
    ) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        let mut last = String::new();
        loop {
            match done(self) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(error) => last = error,
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "timed out waiting for {what} ({last})\n{}",
                    self.logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last lines each server logged, for a failure's message.
    pub fn logs(&self) -> String {
        self.servers
            .iter()
            .map(|server| format!("--- {}:\n{}", server.name, tail(&server.log, 15)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Where the servers keep their configurations and data.
    pub fn folder(&self) -> &Path {
        self.folder.path()
    }
}

impl Drop for Alerting {
    fn drop(&mut self) {
        // Prometheus first, so nothing sends to an Alertmanager that is going.
        while let Some(server) = self.servers.pop() {
            drop(server);
        }
    }
}

/// Starts `program` the way a server is started, to see what a missing one says.
pub fn start_program_for_test(root: &Path, program: &'static str) -> Result<(), String> {
    start_server(root, program, program, "/", |_| Vec::new()).map(|_| ())
}

/// `Duration` as Prometheus and Alertmanager write it.
fn fmt_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if duration.subsec_millis() != 0 {
        format!("{}ms", duration.as_millis())
    } else if seconds.is_multiple_of(3600) && seconds > 0 {
        format!("{}h", seconds / 3600)
    } else if seconds.is_multiple_of(60) && seconds > 0 {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

/// Starts `program` on a free port (`args` given the port), its output in a log in `root`,
/// and waits until `ready` answers 200; a port taken meanwhile by someone else is tried again
/// with another one.
fn start_server(
    root: &Path,
    program: &'static str,
    package: &str,
    ready: &str,
    args: impl Fn(u16) -> Vec<String>,
) -> Result<(u16, Server), String> {
    let mut last = String::new();
    for attempt in 0..3 {
        let port = free_port()?;
        let log = root.join(format!("{program}.{attempt}.log"));
        let out = fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| format!("log: {e}"))?;
        let child = Command::new(program)
            .args(args(port))
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|error| {
                format!(
                    "'{program}' cannot run ({error}): install it (apt-get install -y {package}); \
                     .ci/run does"
                )
            })?;
        let mut server = Server {
            name: program,
            child,
            log: log.clone(),
        };
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                last = format!("'{program}' exited ({status}):\n{}", tail(&log, 15));
                break;
            }
            if http_status(port, ready) == Some(200) {
                return Ok((port, server));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "'{program}' did not answer {ready} on 127.0.0.1:{port} within {} s:\n{}",
                    READY_WITHIN.as_secs(),
                    tail(&log, 15)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !last.contains("address already in use") {
            return Err(last);
        }
    }
    Err(last)
}

/// The last `lines` lines of a log file.
fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// One HTTP/1.0 GET on 127.0.0.1: (status, body).
fn http(port: u16, path: &str) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("connect to 127.0.0.1:{port}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("send to 127.0.0.1:{port}: {e}"))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| format!("read from 127.0.0.1:{port}: {e}"))?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no HTTP status from 127.0.0.1:{port}: {response}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

fn http_status(port: u16, path: &str) -> Option<u16> {
    http(port, path).ok().map(|(status, _)| status)
}

/// The body of a GET that must answer 200.
pub fn http_get(port: u16, path: &str) -> Result<String, String> {
    match http(port, path)? {
        (200, body) => Ok(body),
        (status, body) => Err(format!("GET {path}: {status}: {body}")),
    }
}

/// A webhook receiver on a free 127.0.0.1 port: each POST is answered 200 and recorded with
/// the moment its body was read.
struct Webhook {
    port: u16,
    received: Arc<Mutex<Vec<Notification>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Webhook {
    fn start() -> Result<Webhook, String> {
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| format!("webhook: bind: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("webhook: {e}"))?;
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (received, stop) = (received.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            if let Some(notification) = receive(stream)
                                && let Ok(mut all) = received.lock()
                            {
                                all.push(notification);
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
            })
        };
        Ok(Webhook {
            port,
            received,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads one POST (headers, then Content-Length bytes of JSON), answers 200 and closes.
fn receive(mut stream: TcpStream) -> Option<Notification> {
    stream.set_nonblocking(false).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&chunk[..n]);
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
    };
    let head = String::from_utf8_lossy(&bytes[..header_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while bytes.len() < header_end + length {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
    let at = Instant::now();
    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let body = serde_json::from_slice(&bytes[header_end..]).unwrap_or(serde_json::Value::Null);
    Some(Notification { at, path, body })
}
