//! `oxbow-loadtest limits`: the machine's own ceilings, so every result can be stated as a
//! fraction of what the hardware allows.
//!
//! - Sequential write with `fdatasync` after every block, 1 MiB and 16 MiB blocks, to a file
//!   in `--dir` (the broker's data dir: same filesystem, same device). The faster of the
//!   two is the ceiling: a WAL that group-commits large batches approaches it.
//! - 4 KiB write + `fdatasync` latency: the floor under an `acks=all` produce on one node.
//! - Loopback TCP: one stream, 1 MiB writes, a reader thread; and a 1-byte ping-pong RTT.
//! - Memory copy: `copy_from_slice` of a 64 MiB buffer, one thread.
//!
//! Each is bounded in bytes and time. All single-threaded, as most per-connection and
//! per-partition work in a broker is.

use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::payload::random_bytes;
use crate::stats::{mib_per_s, new_histogram, record_ns, summarize, LatencySummary};

/// The measured ceilings. Zero means "not measured".
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub dir: String,
    /// The best of the block sizes tried.
    pub disk_write_fsync_mib_s: f64,
    pub disk_write_fsync_block_bytes: u64,
    /// (block bytes, MiB/s) for every block size tried.
    #[serde(default)]
    pub disk_write_fsync_by_block: Vec<(u64, f64)>,
    pub fsync_4k_per_s: f64,
    pub fsync_4k_latency: Option<LatencySummary>,
    pub tcp_loopback_mib_s: f64,
    pub tcp_rtt: Option<LatencySummary>,
    pub memcpy_mib_s: f64,
}

/// Bounds for one `limits` run.
#[derive(Clone, Debug)]
pub struct LimitsPlan {
    pub dir: PathBuf,
    /// Most bytes the sequential write test writes.
    pub disk_bytes: u64,
    /// Time bound of each test.
    pub seconds: f64,
}

pub fn measure(plan: &LimitsPlan, mut progress: impl FnMut(&str)) -> anyhow::Result<Limits> {
    std::fs::create_dir_all(&plan.dir)
        .with_context(|| format!("creating {}", plan.dir.display()))?;
    let budget = Duration::from_secs_f64(plan.seconds);
    let mut by_block = Vec::new();
    for block in [1usize << 20, 16 << 20] {
        progress(&format!(
            "sequential write, fdatasync every {} MiB",
            block >> 20
        ));
        let rate = disk_write_fsync(&plan.dir, block, plan.disk_bytes, budget)?;
        by_block.push((block as u64, rate));
    }
    let (block, disk) =
        by_block
            .iter()
            .copied()
            .fold((0, 0.0), |best, b| if b.1 > best.1 { b } else { best });
    progress("4 KiB write + fdatasync latency");
    let (fsync_4k_per_s, fsync_4k_latency) =
        fsync_small(&plan.dir, budget.min(Duration::from_secs(3)))?;
    progress("loopback TCP");
    let tcp = tcp_bandwidth(budget)?;
    let rtt = tcp_rtt(Duration::from_secs(1))?;
    progress("memory copy");
    let memcpy = memcpy_bandwidth(64 << 20, budget);
    Ok(Limits {
        dir: plan.dir.display().to_string(),
        disk_write_fsync_mib_s: disk,
        disk_write_fsync_block_bytes: block,
        disk_write_fsync_by_block: by_block,
        fsync_4k_per_s,
        fsync_4k_latency,
        tcp_loopback_mib_s: tcp,
        tcp_rtt: rtt,
        memcpy_mib_s: memcpy,
    })
}

/// A file in `dir` removed on drop.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn temp_file(dir: &Path, name: &str) -> anyhow::Result<(TempFile, std::fs::File)> {
    let path = dir.join(format!(
        "oxbow-loadtest-limits-{}-{name}.tmp",
        std::process::id()
    ));
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    Ok((TempFile(path), file))
}

/// MiB/s writing `block`-byte blocks, each followed by `fdatasync`.
pub fn disk_write_fsync(
    dir: &Path,
    block: usize,
    max_bytes: u64,
    budget: Duration,
) -> anyhow::Result<f64> {
    let (_guard, mut file) = temp_file(dir, "seq")?;
    let buf = random_bytes(7, block);
    let started = Instant::now();
    let mut written = 0u64;
    while written < max_bytes && started.elapsed() < budget {
        file.write_all(&buf).context("writing")?;
        file.sync_data().context("fdatasync")?;
        written += block as u64;
    }
    Ok(mib_per_s(written, started.elapsed().as_secs_f64()))
}

/// Rate and latency of 4 KiB append + `fdatasync`.
fn fsync_small(dir: &Path, budget: Duration) -> anyhow::Result<(f64, Option<LatencySummary>)> {
    let (_guard, mut file) = temp_file(dir, "4k")?;
    let buf = random_bytes(11, 4096);
    let mut h = new_histogram();
    let started = Instant::now();
    let mut ops = 0u64;
    while started.elapsed() < budget && ops < 100_000 {
        let t = Instant::now();
        file.write_all(&buf).context("writing")?;
        file.sync_data().context("fdatasync")?;
        record_ns(&mut h, t.elapsed().as_nanos() as u64);
        ops += 1;
    }
    Ok((ops as f64 / started.elapsed().as_secs_f64(), summarize(&h)))
}

/// MiB/s through one loopback TCP stream.
pub fn tcp_bandwidth(budget: Duration) -> anyhow::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding loopback")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut stream, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = stream.read(&mut buf)?;
            if n == 0 {
                return Ok(total);
            }
            total += n as u64;
        }
    });
    let mut stream = TcpStream::connect(addr).context("connecting loopback")?;
    let buf = random_bytes(3, 1 << 20);
    let started = Instant::now();
    while started.elapsed() < budget {
        stream.write_all(&buf).context("writing loopback")?;
    }
    stream.shutdown(std::net::Shutdown::Write)?;
    let total = reader
        .join()
        .map_err(|_| anyhow::anyhow!("loopback reader panicked"))?
        .context("reading loopback")?;
    Ok(mib_per_s(total, started.elapsed().as_secs_f64()))
}

/// Round trip of one byte over loopback TCP (no Nagle).
fn tcp_rtt(budget: Duration) -> anyhow::Result<Option<LatencySummary>> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding loopback")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        let mut b = [0u8; 1];
        while stream.read(&mut b)? == 1 {
            stream.write_all(&b)?;
        }
        Ok(())
    });
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let mut h = new_histogram();
    let started = Instant::now();
    let mut b = [1u8; 1];
    for _ in 0..100_000 {
        if started.elapsed() >= budget {
            break;
        }
        let t = Instant::now();
        stream.write_all(&b)?;
        stream.read_exact(&mut b)?;
        record_ns(&mut h, t.elapsed().as_nanos() as u64);
    }
    drop(stream);
    echo.join()
        .map_err(|_| anyhow::anyhow!("echo thread panicked"))?
        .context("echo")?;
    Ok(summarize(&h))
}

/// MiB/s copied (each byte read once and written once).
pub fn memcpy_bandwidth(bytes: usize, budget: Duration) -> f64 {
    let src = random_bytes(5, bytes);
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src); // fault the pages in before timing
    let started = Instant::now();
    let mut copied = 0u64;
    while started.elapsed() < budget && copied < 64 * bytes as u64 {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        copied += bytes as u64;
    }
    mib_per_s(copied, started.elapsed().as_secs_f64())
}

impl Limits {
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Machine limits (`oxbow-loadtest limits`, dir `{}`):\n",
            self.dir
        );
        let _ = writeln!(s, "| limit | value |");
        let _ = writeln!(s, "|---|---:|");
        if self.disk_write_fsync_by_block.is_empty() {
            let _ = writeln!(
                s,
                "| sequential write, fdatasync every {} KiB | {:.1} MiB/s |",
                self.disk_write_fsync_block_bytes / 1024,
                self.disk_write_fsync_mib_s
            );
        }
        for (block, rate) in &self.disk_write_fsync_by_block {
            let _ = writeln!(
                s,
                "| sequential write, fdatasync every {} KiB{} | {rate:.1} MiB/s |",
                block / 1024,
                if *block == self.disk_write_fsync_block_bytes {
                    " (the limit used)"
                } else {
                    ""
                }
            );
        }
        if let Some(l) = &self.fsync_4k_latency {
            let _ = writeln!(
                s,
                "| 4 KiB write + fdatasync | {:.0}/s, p50 {:.3} ms, p99 {:.3} ms |",
                self.fsync_4k_per_s, l.p50_ms, l.p99_ms
            );
        }
        let _ = writeln!(
            s,
            "| loopback TCP, one stream | {:.0} MiB/s |",
            self.tcp_loopback_mib_s
        );
        if let Some(l) = &self.tcp_rtt {
            let _ = writeln!(
                s,
                "| loopback TCP round trip, 1 byte | p50 {:.3} ms, p99 {:.3} ms |",
                l.p50_ms, l.p99_ms
            );
        }
        let _ = writeln!(
            s,
            "| memory copy, one thread | {:.0} MiB/s |\n",
            self.memcpy_mib_s
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_measures_something_small() {
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = disk_write_fsync(dir.path(), 64 << 10, 1 << 20, Duration::from_millis(200))
            .expect("disk");
        assert!(disk > 0.0);
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("dir").count(),
            0,
            "the test file is removed"
        );
        assert!(tcp_bandwidth(Duration::from_millis(50)).expect("tcp") > 0.0);
        assert!(memcpy_bandwidth(1 << 20, Duration::from_millis(20)) > 0.0);
    }
}
