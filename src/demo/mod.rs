//! The demo sandbox. (being written)
