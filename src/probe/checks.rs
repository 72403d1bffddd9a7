//! Checks. (being written)
