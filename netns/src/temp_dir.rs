//! A temporary directory owned by a guard.

use crate::name::unique_name;
use std::io;
use std::path::PathBuf;

/// A temporary directory (under the system's temp dir, uniquely named),
/// removed with its contents on drop.
#[derive(Debug)]
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(prefix: &str) -> io::Result<Self> {
        let path = std::env::temp_dir().join(unique_name(prefix));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
