//! The `slurm` part of the perf bench: a pass over 500 jobs Slurm runs costs one
//! `squeue --json`, whatever their number.
//!
//! A one-node cluster of its own (tests/common/slurm.rs) holds 500 batch jobs submitted with
//! `--hold`, each its own record in squeue's list (a job array stays one record while its
//! tasks are pending together, so the 500 are submitted one by one); a jobs file declares 500
//! jobs by their names. Measured, alternating in one run: a bare `squeue --json` (the floor:
//! the one call a pass cannot avoid) and `mihari check --json` over the 500 jobs, with the
//! number of `squeue` calls the check made counted through a stand-in on its PATH.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../tests/common/slurm.rs"]
mod cluster;

use super::common::{median, ms};
use super::{Knobs, Table};

/// How many Slurm jobs the part declares.
const SLURM_JOBS: usize = 500;
/// `check` over them: at most 1.5x one bare `squeue --json`.
const SLURM_TARGET_RATIO: f64 = 1.5;

pub fn measure_slurm(knobs: &Knobs, exe: &Path, table: &mut Table) -> Result<(), String> {
    let jobs = std::env::var("MIHARI_BENCH_SLURM_JOBS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SLURM_JOBS);
    let root = knobs.tempdir()?;
    let cluster = cluster::Cluster::start();
    let started = Instant::now();
    let mut yaml = format!(
        "settings:\n  state_dir: {}\njobs:\n",
        root.path().join("state").display()
    );
    for i in 0..jobs {
        let name = format!("bench-slurm-{i:04}");
        cluster.sbatch(&["-J", &name, "--hold", "--wrap", "true"]);
        yaml.push_str(&format!(
            "  - id: slurm{i:04}\n    slurm: {{ job_name: {name} }}\n    should_run_when: [not_succeeded]\n"
        ));
    }
    println!(
        "\nslurm: {jobs} held batch jobs submitted in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let config = root.path().join("jobs.yaml");
    fs::write(&config, yaml).map_err(|e| format!("jobs.yaml: {e}"))?;
    fs::set_permissions(&config, fs::Permissions::from_mode(0o600)).map_err(|e| e.to_string())?;

    // A stand-in squeue that counts its calls, then runs the real one.
    let shim = root.path().join("bin");
    fs::create_dir_all(&shim).map_err(|e| e.to_string())?;
    let calls = root.path().join("squeue.calls");
    let real = which("squeue")?;
    fs::write(
        shim.join("squeue"),
        format!(
            "#!/bin/sh\necho called >> '{}'\nexec '{}' \"$@\"\n",
            calls.display(),
            real
        ),
    )
    .map_err(|e| e.to_string())?;
    fs::set_permissions(shim.join("squeue"), fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let path = format!(
        "{}:{}",
        shim.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let check = |counted: bool| -> Result<(Duration, serde_json::Value), String> {
        let mut command = Command::new(exe);
        command
            .args(["check", "--json", "--config"])
            .arg(&config)
            .env("SLURM_CONF", &cluster.conf)
            .stdin(Stdio::null());
        if counted {
            command.env("PATH", &path);
        }
        let started = Instant::now();
        let output = command.output().map_err(|e| format!("mihari check: {e}"))?;
        let took = started.elapsed();
        let report = serde_json::from_slice(&output.stdout)
            .map_err(|e| format!("check's output is not JSON: {e}"))?;
        Ok((took, report))
    };
    // Every job must be read as queued before anything is timed.
    let (_, report) = check(true)?;
    let rows = report["jobs"].as_array().cloned().unwrap_or_default();
    let queued = rows
        .iter()
        .filter(|row| row["slurm"]["state"] == "PENDING" && row["state"] == "NOT_RUNNING")
        .count();
    if queued != jobs {
        return Err(format!("{queued} of {jobs} Slurm jobs read as queued"));
    }
    let called = fs::read_to_string(&calls)
        .unwrap_or_default()
        .lines()
        .count();
    let squeue = || -> Result<Duration, String> {
        let started = Instant::now();
        let output = cluster
            .command("squeue")
            .arg("--json")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("squeue: {e}"))?;
        if !output.status.success() {
            return Err(format!("squeue --json: {}", output.status));
        }
        Ok(started.elapsed())
    };
    let mut floors = Vec::new();
    let mut checks = Vec::new();
    for _ in 0..knobs.runs {
        floors.push(squeue()?);
        checks.push(check(false)?.0);
    }
    let floor = median(&mut floors);
    let figure = median(&mut checks);
    let ratio = figure.as_secs_f64() / floor.as_secs_f64();
    println!(
        "slurm: {} runs alternating: squeue --json {}, mihari check --json {}; squeue calls \
         in one check: {called}",
        knobs.runs,
        ms(floor),
        ms(figure)
    );
    table.add(
        format!("`mihari check --json` over {jobs} jobs Slurm runs (held batch jobs; `slurm`)"),
        format!("≤ {SLURM_TARGET_RATIO}× floor, 1 `squeue` call"),
        format!("one `squeue --json` listing them: {}", ms(floor)),
        format!("{} ({called} `squeue` call)", ms(figure)),
        format!("{ratio:.2}×"),
        Some(ratio <= SLURM_TARGET_RATIO && called == 1),
    );
    drop(cluster);
    Ok(())
}

fn which(program: &str) -> Result<String, String> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .map_err(|e| e.to_string())?;
    let found = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if found.is_empty() {
        Err(format!("{program} is not installed (slurm-client)"))
    } else {
        Ok(found)
    }
}
