//! The embedded default's object store: a local directory (`object_store::local`, fsync on)
//! whose PUTs are written out a few MiB at a time (issue 17).
//!
//! `LocalFileSystem` writes a whole payload into the page cache and fsyncs it once: a
//! 512 MiB compacted segment (or a 64 MiB sealed object after a backlog) reaches the disk in
//! one burst, and every WAL fsync behind it on the same device waits for it — the latency
//! spikes of a broker that has been up long enough to compact. Here a PUT's staging file is
//! written [`STEP`] bytes at a time, each step fdatasynced (and, for large payloads,
//! followed by a short pause), so at most one step is ever queued ahead of a WAL fsync.
//! Publishing is `LocalFileSystem`'s: the staged file is hard-linked to its key for
//! create-only PUTs (`AlreadyExists` if the key exists) or renamed for overwrites, then the
//! directory is fsynced.
//!
//! Deletes go one at a time, and a deleted file's blocks are given back [`STEP`] bytes at a
//! time: the file is opened, unlinked by the inner store (so it is gone at once, with the
//! inner store's errors), then truncated in steps through the open handle before it is
//! closed. On ext4 mounted with `discard` (common on cloud volumes) freeing a file's
//! extents sends the device a discard of all of them (at once without a journal, as on the
//! VM measured; at the next journal commit with one), and the WAL's writes and fsyncs
//! queue behind it: ten 32 MiB objects unlinked at once (the inner store's concurrency)
//! held a 4 KiB write + fdatasync up for 190–290 ms, and a broker reclaiming a deleted
//! topic's objects stalled acks for up to 0.9 s (README, Benchmarks). A reader that opened
//! a file just before its delete may see it shortened and fail that read (what it reads is
//! checked; the delete delay makes this rare). Everything else (GET, LIST, multipart, …)
//! is the inner store's.

use crate::direct_io::{Aligned, BLOCK};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Bytes written between fdatasyncs.
pub const STEP: usize = 4 << 20;
/// Payloads at least this large are written here (around the page cache where the file
/// system allows, a step at a time); smaller ones by the inner store. A sealed object at a
/// light produce rate (2.5 MiB every 250 ms at 10 MiB/s) is one of these: its page-cache
/// copy cost CPU and its dirty pages went to the disk in one burst at its fsync.
const DIRECT_FROM: usize = 64 << 10;
/// Payloads at least this large pause [`PAUSE`] after each step: a compaction's segment, not
/// a seal's object (whose upload the WAL's trimming and `--durability direct` wait for).
const PACED_FROM: usize = 32 << 20;
const PAUSE: Duration = Duration::from_millis(5);

/// A local directory store with paced PUTs (see the module docs).
pub struct PacedLocalStore {
    inner: LocalFileSystem,
    /// Held by the delete in progress: one at a time across all callers.
    deleting: Arc<tokio::sync::Mutex<()>>,
}

impl fmt::Debug for PacedLocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PacedLocalStore({})", self.inner)
    }
}

impl fmt::Display for PacedLocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PacedLocalStore({})", self.inner)
    }
}

impl PacedLocalStore {
    /// `inner` must have fsync on (`LocalFileSystem::with_fsync`): its publishing steps are
    /// the ones used here.
    pub fn new(inner: LocalFileSystem) -> Self {
        PacedLocalStore {
            inner,
            deleting: Arc::default(),
        }
    }
}

/// Deletes `location` from `inner` and gives its blocks back a step at a time (module docs).
async fn delete_gradually(
    inner: LocalFileSystem,
    deleting: Arc<tokio::sync::Mutex<()>>,
    location: Path,
) -> Result<Path> {
    let _one_at_a_time = deleting.lock_owned().await;
    let path = inner.path_to_filesystem(&location)?;
    // No handle (already gone, or not writable here): the inner store's delete answers.
    let held = tokio::task::spawn_blocking(move || File::options().write(true).open(path).ok())
        .await
        .map_err(|e| generic(std::io::Error::other(e)))?;
    inner.delete(&location).await?;
    if let Some(file) = held {
        tokio::task::spawn_blocking(move || release_in_steps(&file))
            .await
            .map_err(|e| generic(std::io::Error::other(e)))?;
    }
    Ok(location)
}

/// Truncates an unlinked file [`STEP`] bytes at a time, so each step frees (and discards)
/// at most that much. A failed step leaves the rest to the close.
fn release_in_steps(file: &File) {
    let Ok(meta) = file.metadata() else { return };
    let mut len = meta.len();
    while len > 0 {
        len = len.saturating_sub(STEP as u64);
        if file.set_len(len).is_err() {
            return;
        }
    }
}

fn generic(e: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "PacedLocalStore",
        source: Box::new(e),
    }
}

/// Writes `payload` to a new staging file beside `path`, a step at a time, and publishes it
/// there: hard link (create-only) or rename (overwrite), then the directory's fsync.
fn write_paced(path: PathBuf, payload: PutPayload, create_only: bool) -> Result<PutResult> {
    let dir = path
        .parent()
        .ok_or_else(|| generic(std::io::Error::other("an object key with no directory")))?
        .to_path_buf();
    std::fs::create_dir_all(&dir).map_err(generic)?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| generic(std::io::Error::other("an object key that is not UTF-8")))?;
    // `#` marks a staging file for LocalFileSystem too: never listed as an object.
    let staging = dir.join(format!("{name}#paced-{}", std::process::id()));
    let mut file = File::create(&staging).map_err(generic)?;
    let paced = payload.content_length() >= PACED_FROM;
    let direct = crate::direct_io::open(&staging)
        .map_err(generic)?
        .zip(Aligned::new(STEP));
    let written = (|| -> std::io::Result<()> {
        if let Some((direct, mut step)) = direct {
            return write_direct(&file, &direct, &mut step, &payload, paced);
        }
        let mut pending = 0usize;
        for part in payload.iter() {
            let mut rest: &[u8] = part;
            while !rest.is_empty() {
                let n = rest.len().min(STEP - pending);
                file.write_all(&rest[..n])?;
                rest = &rest[n..];
                pending += n;
                if pending == STEP {
                    file.sync_data()?;
                    pending = 0;
                    if paced {
                        std::thread::sleep(PAUSE);
                    }
                }
            }
        }
        file.sync_all()
    })();
    let published = written.and_then(|()| {
        if create_only {
            std::fs::hard_link(&staging, &path)
        } else {
            std::fs::rename(&staging, &path)
        }
    });
    let _ = std::fs::remove_file(&staging);
    match published {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(object_store::Error::AlreadyExists {
                path: path.display().to_string(),
                source: Box::new(e),
            })
        }
        Err(e) => return Err(generic(e)),
    }
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(generic)?;
    Ok(PutResult {
        e_tag: None,
        version: None,
        extensions: Default::default(),
    })
}

/// [`write_paced`]'s steps with `O_DIRECT` (`crate::direct_io`: the page cache copy was a
/// fifth of the broker's CPU at max produce throughput): each step is copied into `step`
/// (aligned, [`STEP`] bytes) and written around the cache; the payload's last partial block
/// goes through `file`, the same file opened without `O_DIRECT`, and `sync_all` makes both
/// durable.
fn write_direct(
    file: &File,
    direct: &File,
    step: &mut Aligned,
    payload: &PutPayload,
    paced: bool,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut filled = 0usize;
    let mut offset = 0u64;
    for part in payload.iter() {
        let mut rest: &[u8] = part;
        while !rest.is_empty() {
            // Nothing buffered and the bytes themselves block-aligned in memory (a sealed
            // object's body is one large allocation, page-aligned by jemalloc): whole blocks
            // go to the disk straight from the payload, without the copy into `step`.
            let whole = rest.len().min(STEP) / BLOCK * BLOCK;
            if filled == 0 && whole > 0 && (rest.as_ptr() as usize).is_multiple_of(BLOCK) {
                direct.write_all_at(&rest[..whole], offset)?;
                offset += whole as u64;
                rest = &rest[whole..];
                if whole == STEP {
                    direct.sync_data()?;
                    if paced {
                        std::thread::sleep(PAUSE);
                    }
                }
                continue;
            }
            let n = rest.len().min(STEP - filled);
            step.get_mut(STEP)[filled..filled + n].copy_from_slice(&rest[..n]);
            filled += n;
            rest = &rest[n..];
            if filled == STEP {
                direct.write_all_at(step.get_mut(STEP), offset)?;
                direct.sync_data()?;
                offset += STEP as u64;
                filled = 0;
                if paced {
                    std::thread::sleep(PAUSE);
                }
            }
        }
    }
    let whole = filled - filled % BLOCK;
    if whole > 0 {
        direct.write_all_at(step.get_mut(whole), offset)?;
        offset += whole as u64;
    }
    if filled > whole {
        file.write_all_at(&step.get_mut(filled)[whole..], offset)?;
    }
    file.sync_all()
}

#[async_trait]
impl ObjectStore for PacedLocalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let create_only = match opts.mode {
            PutMode::Create => true,
            PutMode::Overwrite => false,
            // Conditional updates and attributes: whatever the inner store does with them.
            PutMode::Update(_) => return self.inner.put_opts(location, payload, opts).await,
        };
        if !opts.attributes.is_empty() || payload.content_length() < DIRECT_FROM {
            return self.inner.put_opts(location, payload, opts).await;
        }
        let path = self.inner.path_to_filesystem(location)?;
        tokio::task::spawn_blocking(move || write_paced(path, payload, create_only))
            .await
            .map_err(|e| generic(std::io::Error::other(e)))?
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let (inner, deleting) = (self.inner.clone(), Arc::clone(&self.deleting));
        locations
            .then(move |location| {
                let (inner, deleting) = (inner.clone(), Arc::clone(&deleting));
                async move { delete_gradually(inner, deleting, location?).await }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;

    fn store(dir: &std::path::Path) -> PacedLocalStore {
        PacedLocalStore::new(
            LocalFileSystem::new_with_prefix(dir)
                .expect("store")
                .with_fsync(true),
        )
    }

    #[tokio::test]
    async fn large_puts_are_paced_create_only_and_read_back_whole() {
        let dir = tempfile::tempdir().expect("tmp");
        let s = store(dir.path());
        // Several steps, in parts that do not line up with them.
        let parts: Vec<Bytes> = (0..5u8)
            .map(|i| Bytes::from(vec![i; STEP / 2 + 1000]))
            .collect();
        let want: Vec<u8> = parts.iter().flat_map(|p| p.to_vec()).collect();
        let key = Path::from("segments/t/0/00000000000000000000-1-x.oxs");
        let create = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        s.put_opts(&key, PutPayload::from_iter(parts.clone()), create.clone())
            .await
            .expect("put");
        let got = s.get(&key).await.expect("get").bytes().await.expect("body");
        assert_eq!(got.as_ref(), want.as_slice());
        // Create-only: a second PUT of the key is refused and changes nothing.
        let again = s
            .put_opts(&key, PutPayload::from(vec![9u8; STEP + 1]), create)
            .await
            .expect_err("exists");
        assert!(
            matches!(again, object_store::Error::AlreadyExists { .. }),
            "{again}"
        );
        let got = s.get(&key).await.expect("get").bytes().await.expect("body");
        assert_eq!(got.len(), want.len());
        // No staging file is left, and none is listed.
        let listed: Vec<ObjectMeta> = s.list(None).try_collect().await.expect("list");
        assert_eq!(listed.len(), 1, "{listed:?}");
        let names: Vec<String> = std::fs::read_dir(dir.path().join("segments/t/0"))
            .expect("ls")
            .map(|e| {
                e.expect("dirent")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        // Overwrite replaces.
        s.put_opts(
            &key,
            PutPayload::from(vec![7u8; STEP + 3]),
            PutOptions::default(),
        )
        .await
        .expect("overwrite");
        let got = s.get(&key).await.expect("get").bytes().await.expect("body");
        assert_eq!(got.as_ref(), vec![7u8; STEP + 3].as_slice());
    }

    /// Aligned payloads are written from where they lie, unaligned ones through the step
    /// buffer, and mixes of both; every layout reads back byte for byte.
    #[tokio::test]
    async fn every_payload_layout_reads_back_whole() {
        let dir = tempfile::tempdir().expect("tmp");
        let s = store(dir.path());
        let pattern = |n: usize, seed: u8| -> Vec<u8> {
            (0..n).map(|i| (i % 251) as u8 ^ seed).collect::<Vec<u8>>()
        };
        // Block-aligned in memory, as jemalloc places a sealed object's body (the test's
        // allocator may not: the slice is cut at the first aligned address).
        let n = 2 * STEP + BLOCK + 5;
        let raw = Bytes::from(pattern(n + BLOCK, 1));
        let at = raw.as_ptr().align_offset(BLOCK);
        let big = raw.slice(at..at + n);
        assert!((big.as_ptr() as usize).is_multiple_of(BLOCK));
        let layouts: Vec<Vec<Bytes>> = vec![
            vec![big.clone()],
            // Unaligned start: every byte through the step buffer.
            vec![big.slice(1..)],
            // An aligned part after a partial block, then one after whole blocks.
            vec![Bytes::from(pattern(100, 2)), big.clone()],
            vec![big.slice(..BLOCK), big.slice(BLOCK..)],
            // Between DIRECT_FROM and a step: one write, no step fsync.
            vec![Bytes::from(pattern(DIRECT_FROM + 3 * BLOCK + 7, 3))],
            vec![Bytes::from(pattern(DIRECT_FROM, 4))],
        ];
        for (i, parts) in layouts.into_iter().enumerate() {
            let want: Vec<u8> = parts.iter().flat_map(|p| p.to_vec()).collect();
            let key = Path::from(format!("data/b1/{i}.oxb"));
            s.put_opts(&key, PutPayload::from_iter(parts), PutOptions::default())
                .await
                .expect("put");
            let got = s.get(&key).await.expect("get").bytes().await.expect("body");
            assert_eq!(got.len(), want.len(), "layout {i}");
            assert!(got.as_ref() == want.as_slice(), "layout {i} differs");
        }
    }

    #[tokio::test]
    async fn deletes_remove_objects_and_answer_as_the_inner_store() {
        let dir = tempfile::tempdir().expect("tmp");
        let s = store(dir.path());
        let keys: Vec<Path> = (0..3)
            .map(|i| Path::from(format!("data/b1/{i}.oxb")))
            .collect();
        for (i, key) in keys.iter().enumerate() {
            // Several steps each, and one below DIRECT_FROM (the inner store's PUT).
            let len = if i == 0 { 100 } else { 2 * STEP + 17 };
            s.put(key, PutPayload::from(vec![i as u8; len]))
                .await
                .expect("put");
        }
        s.delete(&keys[0]).await.expect("delete one");
        let rest: Vec<Result<Path>> = keys[1..].iter().cloned().map(Ok).collect();
        let rest = futures::stream::iter(rest).boxed();
        let deleted: Vec<Path> = s.delete_stream(rest).try_collect().await.expect("delete");
        assert_eq!(deleted, keys[1..].to_vec());
        let listed: Vec<ObjectMeta> = s.list(None).try_collect().await.expect("list");
        assert!(listed.is_empty(), "{listed:?}");
        let gone = s.delete(&keys[1]).await.expect_err("already deleted");
        assert!(
            matches!(gone, object_store::Error::NotFound { .. }),
            "{gone}"
        );
        let read = s.get(&keys[2]).await.expect_err("deleted");
        assert!(
            matches!(read, object_store::Error::NotFound { .. }),
            "{read}"
        );
    }

    #[test]
    fn an_unlinked_file_is_released_to_nothing_through_its_handle() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 3 * STEP + 5]).expect("write");
        let file = File::options().write(true).open(&path).expect("open");
        std::fs::remove_file(&path).expect("unlink");
        release_in_steps(&file);
        assert_eq!(file.metadata().expect("stat").len(), 0);
    }

    #[tokio::test]
    async fn small_puts_are_the_inner_stores() {
        let dir = tempfile::tempdir().expect("tmp");
        let s = store(dir.path());
        let key = Path::from("data/b1/x.oxb");
        s.put(&key, PutPayload::from_static(b"small"))
            .await
            .expect("put");
        let got = s.get(&key).await.expect("get").bytes().await.expect("body");
        assert_eq!(got.as_ref(), b"small");
    }
}
