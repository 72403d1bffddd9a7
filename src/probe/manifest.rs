//! Run manifests of phased pipelines. Stub: the real probe replaces it.

use std::path::Path;

use crate::core::{ManifestReading, Reading};

/// Reads the run manifest at `path`.
pub fn read_manifest(path: &Path) -> Reading<ManifestReading> {
    let _ = path;
    Reading::Empty
}
