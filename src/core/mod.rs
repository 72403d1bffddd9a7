//! The pure core: evidence in, verdicts out.
//!
//! Everything here is a function of its arguments. Nothing in `core` reads a clock, a file,
//! a process or the environment; the time of judgment is always passed in as `now`. That is
//! what makes every verdict reproducible in a table-driven test.

pub mod activity;
pub mod assess;
pub mod auto;
pub mod decision;
pub mod digest;
pub mod escalate;
pub mod evidence;
pub mod marker;
pub mod order;
pub mod schedule;
pub mod slurm;
pub mod text;
pub mod times;
pub mod watch;
pub mod why;

pub use assess::{Assessment, Bucket, State, assess};
pub use evidence::Carried;
pub use evidence::{
    CheckOutcome, CheckResult, Evidence, Fall, Figure, FileStamp, HeartbeatReading, History,
    LastRun, LineCount, Liveness, LockHolder, LogProgressReading, ManifestReading, MatchedProcess,
    Moved, OperatorNote, PendingApproval, Reading, RunExit, SlurmJob, TableReading,
};
pub use evidence::{MarkerKind, MarkerReading};
pub use order::{ActionList, order, order_with_rules};
