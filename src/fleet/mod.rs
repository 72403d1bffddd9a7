//! The fleet (SPEC §11): several hosts, each with its own `mihari watch` and event log,
//! seen together over ssh. Nothing central is home-made: every host answers with its own
//! `mihari check --json`, and every decision is carried out by the host's own mihari.
//!
//! This front-end never imports the command line. It owns asking the hosts
//! ([`remote`]) and merging their answers into one action list in the fixed order
//! ([`check`]), following them live on one screen ([`stream`], [`screen`]), each
//! destination over one shared ssh connection ([`share`]); a host that cannot
//! be asked, or whose stream ends or goes silent, is RED, never silently absent.

pub mod check;
pub mod remote;
pub mod screen;
pub mod share;
pub mod stream;
