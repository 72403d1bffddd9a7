//! Effects: every side effect on jobs, each in one obvious file.
//!
//! `run` is the job-side wrapper (`mihari run`). (the executor is being written)

pub mod run;
