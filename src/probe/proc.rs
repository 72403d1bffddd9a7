//! `/proc/<pid>/stat`: process identity as PID + start time. Stub: the real probe replaces it.
