//! mihari (見張り, "the lookout") watches long-running jobs on one machine and tells the
//! operator which of them need a human, in a fixed order, and why.
//!
//! The crate is laid out evidence -> verdict -> decision -> effect:
//! [`config`] turns `jobs.yaml` into validated job specs, [`probe`] turns the world into
//! [`core::Evidence`], [`core`] judges that evidence without touching the world, and
//! [`engine`] sequences the two for every command. `main.rs` only maps results to exit codes.

pub mod cli;
pub mod config;
pub mod core;
pub mod demo;
pub mod effect;
pub mod engine;
pub mod fleet;
pub mod probe;
pub mod render;
pub mod store;
pub mod tui;
pub mod watch;
