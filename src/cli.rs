//! The command line. (being written)
