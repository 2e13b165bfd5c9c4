//! The process's open-file limit, which every socket (Kafka, HTTP, WAL replication), WAL
//! file and object-store connection shares.
//!
//! Many systems start a process with a soft `RLIMIT_NOFILE` of 1024 while allowing far more
//! (the hard limit). At start-up the broker raises its soft limit to the hard limit, as
//! servers commonly do (nginx `worker_rlimit_nofile`, systemd's advice for services), and
//! warns when the connection caps (`--connections-max`, `--http-connections-max`) cannot fit
//! under it: past the limit, accept fails with "Too many open files" and so may a WAL roll.

/// Descriptors kept for everything but client connections (WAL files, replication and
/// object-store sockets, the metadata store).
pub const RESERVED_FDS: u64 = 1_024;

/// Raises the soft open-file limit to the hard limit; returns the limit now in force, or
/// `None` where it cannot be read.
pub fn raise_to_hard_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the open-file limit");
                return None;
            }
        };
        if soft >= hard {
            return Some(soft);
        }
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => {
                tracing::info!(from = soft, to = hard, "raised the open-file limit");
                Some(hard)
            }
            Err(e) => {
                // macOS refuses values above OPEN_MAX; keep what we have.
                tracing::warn!(error = %e, soft, hard, "cannot raise the open-file limit");
                Some(soft)
            }
        }
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Warns when `connections` client connections plus [`RESERVED_FDS`] exceed `limit`.
pub fn check_capacity(limit: Option<u64>, connections: u64) {
    if let Some(limit) = limit {
        let needed = connections.saturating_add(RESERVED_FDS);
        if needed > limit {
            tracing::warn!(
                limit,
                needed,
                "the open-file limit is below the connection caps plus a reserve: lower \
                 --connections-max / --http-connections-max or raise the limit (ulimit -n)"
            );
        }
    }
}
