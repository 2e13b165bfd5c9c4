//! Building the object store the broker seals into.
//!
//! The embedded default is a local directory (`object_store::local`) with fsync on every
//! write, so a sealed object is as durable as the catalog entry that points at it.

use crate::error::{Error, Result};
use object_store::local::LocalFileSystem;
use object_store::ObjectStore;
use std::path::Path;
use std::sync::Arc;

/// A local-directory object store rooted at `dir` (created if missing).
pub fn local(dir: &Path) -> Result<Arc<dyn ObjectStore>> {
    std::fs::create_dir_all(dir)?;
    let store = LocalFileSystem::new_with_prefix(dir)
        .map_err(|e| Error::ObjectStore(format!("opening {}: {e}", dir.display())))?
        .with_fsync(true);
    Ok(Arc::new(store))
}
