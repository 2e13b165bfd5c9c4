//! Test support shared by every crate's tests: real etcd processes on loopback.
//!
//! [`EtcdCluster::start`] runs 1 or 3 `etcd` members (Debian `etcd-server`) in a fresh
//! temporary directory on free loopback ports; dropping it kills and reaps every member and
//! removes the directory. [`etcd_or_skip`] is the one rule for a missing binary: the test
//! fails with a clear message, unless `OXBOW_SKIP_ETCD=1` is set, in which case it is skipped
//! (and says so).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to install etcd, for error messages.
pub const INSTALL_HINT: &str = "apt-get install -y --no-install-recommends etcd-server etcd-client";

/// The `etcd` binary on PATH, if any.
pub fn etcd_binary() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("etcd"))
            .find(|p| p.is_file())
    })
}

/// Whether etcd tests should run: `true` when the binary is there; `false` (skip) when it
/// is not and `OXBOW_SKIP_ETCD=1`; otherwise panics with how to install it.
pub fn etcd_or_skip() -> bool {
    if etcd_binary().is_some() {
        return true;
    }
    if std::env::var("OXBOW_SKIP_ETCD").as_deref() == Ok("1") {
        eprintln!("SKIPPED: no etcd binary and OXBOW_SKIP_ETCD=1");
        return false;
    }
    panic!(
        "etcd tests need the `etcd` binary on PATH ({INSTALL_HINT}); set OXBOW_SKIP_ETCD=1 to skip them"
    );
}

/// A loopback port that was free a moment ago and that no earlier call in this process
/// returned.
///
/// Taken in turn from 10000..32768, below Linux's default ephemeral range (32768..61000):
/// binding port 0 twice before either server has bound can yield the same port twice, and an
/// outgoing connection's local port, taken from the ephemeral range, can take one between
/// the pick and the server's bind. The walk starts at a random place, so test binaries run
/// one after another do not retrace each other's ports.
pub fn free_port() -> std::io::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 10_000;
    const SPAN: u32 = 32_768 - LOW;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let seed = (crate::clock::Rng::next_u64(&crate::clock::OsRng) % u64::from(SPAN)) as u32;
    let _ = NEXT.compare_exchange(u32::MAX, seed, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..SPAN {
        let port = LOW + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN;
        // In range by construction: LOW + SPAN = 32768 <= u16::MAX.
        let port = port as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrNotAvailable,
        "no free loopback port in 10000..32768",
    ))
}

/// One etcd member.
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    data_dir: PathBuf,
    child: Option<Child>,
}

/// A loopback etcd cluster owned by a test.
pub struct EtcdCluster {
    dir: PathBuf,
    members: Vec<Member>,
    initial_cluster: String,
}

impl EtcdCluster {
    /// Starts `size` members and waits until their client ports accept connections.
    pub fn start(size: usize) -> Result<Self, String> {
        let binary = etcd_binary().ok_or_else(|| format!("no etcd binary ({INSTALL_HINT})"))?;
        let dir = std::env::temp_dir().join(format!(
            "oxbow-etcd-{}-{}",
            std::process::id(),
            crate::clock::Rng::uuid(&crate::clock::OsRng).simple()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let mut members = Vec::new();
        for i in 0..size {
            members.push(Member {
                name: format!("m{i}"),
                client_port: free_port().map_err(|e| e.to_string())?,
                peer_port: free_port().map_err(|e| e.to_string())?,
                data_dir: dir.join(format!("m{i}")),
                child: None,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            dir,
            members,
            initial_cluster,
        };
        for i in 0..size {
            cluster.spawn(&binary, i)?;
        }
        for i in 0..size {
            cluster.wait_port(i, Duration::from_secs(10))?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, binary: &Path, i: usize) -> Result<(), String> {
        let initial = self.initial_cluster.clone();
        let m = self
            .members
            .get_mut(i)
            .ok_or_else(|| format!("no member {i}"))?;
        let log = std::fs::File::create(m.data_dir.with_extension("log"))
            .map_err(|e| format!("creating the etcd log: {e}"))?;
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let child = Command::new(binary)
            .arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&m.data_dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-state", "new"])
            // Fast elections on loopback keep failure tests short.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?;
        m.child = Some(child);
        Ok(())
    }

    // Real etcd processes come up on real time, whatever a test's tokio clock does.
    #[allow(clippy::disallowed_methods)]
    fn wait_port(&self, i: usize, timeout: Duration) -> Result<(), String> {
        let m = self
            .members
            .get(i)
            .ok_or_else(|| format!("no member {i}"))?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", m.client_port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "etcd member {} did not listen on {} within {timeout:?}; see {}",
            m.name,
            m.client_port,
            m.data_dir.with_extension("log").display()
        ))
    }

    /// `host:port` of every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The `--metadata` URL of this cluster, keys under `/oxbow/{cluster}/`.
    pub fn url(&self, cluster: &str) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect();
        format!("etcd://{}/{cluster}", hosts.join(","))
    }

    /// Kills member `i` (SIGKILL) and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(m) = self.members.get_mut(i) {
            if let Some(mut c) = m.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// Starts member `i` again on its old data directory and ports.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        self.kill(i);
        let binary = etcd_binary().ok_or("no etcd binary")?;
        // An existing data dir makes etcd rejoin; "new" is ignored then.
        self.spawn(&binary, i)?;
        self.wait_port(i, Duration::from_secs(10))
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
