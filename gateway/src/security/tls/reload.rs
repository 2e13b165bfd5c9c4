//! Reloading the TLS files without a restart: every `--ssl-reload-interval` the size and
//! mtime of the certificate, key and truststore files are compared with those last seen;
//! on a change the configuration is rebuilt and swapped in for new connections (live ones
//! keep the one they were accepted with). A file that does not load — a half-written
//! certificate, a key that does not fit — is logged once per change and the old
//! configuration kept: a broker never stops serving TLS because of a bad rotation.
//!
//! Polling rather than file notifications: a handful of `stat`s every few seconds is cheap,
//! bounded, and sees a file replaced by rename (how cert-manager and most rotations write).

use super::{server_config, TlsSource};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// What identifies a version of one file: its size and mtime (`None`: cannot be read).
type Stamp = Option<(u64, SystemTime)>;

/// The stamps of the files a [`TlsSource`] was built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint(Vec<Stamp>);

fn files(source: &TlsSource) -> Vec<PathBuf> {
    let a = source.args();
    [
        &a.ssl_certificate_file,
        &a.ssl_key_file,
        &a.ssl_truststore_file,
    ]
    .into_iter()
    .flatten()
    .cloned()
    .collect()
}

/// The files' stamps now.
pub fn fingerprint(source: &TlsSource) -> Fingerprint {
    Fingerprint(
        files(source)
            .iter()
            .map(|p| {
                let m = std::fs::metadata(p).ok()?;
                Some((m.len(), m.modified().ok()?))
            })
            .collect(),
    )
}

/// Reload outcomes, for `/metrics`.
#[derive(Debug, Default)]
pub struct ReloadCounters {
    pub reloads: AtomicU64,
    pub failures: AtomicU64,
}

/// What one check did.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    Unchanged,
    Reloaded,
    /// The files changed but do not load; the old configuration stays.
    Failed(String),
}

/// Compares the files with `seen` and reloads if they changed; `seen` becomes the new
/// stamps either way (a broken file is reported once, not at every poll).
pub fn check(source: &TlsSource, seen: &mut Fingerprint) -> Checked {
    let now = fingerprint(source);
    if now == *seen {
        return Checked::Unchanged;
    }
    *seen = now;
    match server_config(source.args()) {
        Ok(config) => {
            source.replace(config);
            Checked::Reloaded
        }
        Err(e) => Checked::Failed(e.to_string()),
    }
}

/// Polls until `shutdown`; does nothing with a zero interval.
pub async fn run_reloader(
    source: Arc<TlsSource>,
    interval: Duration,
    counters: Arc<ReloadCounters>,
    shutdown: CancellationToken,
) {
    if interval.is_zero() {
        return;
    }
    let mut seen = fingerprint(&source);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let polled = source.clone();
        let prev = seen.clone();
        // stat and read off the runtime's threads (a slow or network file system).
        let outcome = tokio::task::spawn_blocking(move || {
            let mut seen = prev;
            let checked = check(&polled, &mut seen);
            (checked, seen)
        })
        .await;
        let Ok((checked, now)) = outcome else {
            continue;
        };
        seen = now;
        match checked {
            Checked::Unchanged => {}
            Checked::Reloaded => {
                counters.reloads.fetch_add(1, Ordering::Relaxed);
                tracing::info!("TLS certificate files changed: new connections use them");
            }
            Checked::Failed(why) => {
                counters.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %why, "TLS certificate files changed but do not load; new connections keep the previous certificate");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{args, connector, testdata};
    use super::*;
    use rustls_pki_types::CertificateDer;

    /// The certificate a configuration serves (what a client connecting now would see).
    async fn served(source: &TlsSource) -> Vec<u8> {
        let (client, server) = tokio::io::duplex(64 << 10);
        let connector = connector(None);
        let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
        let (c, s) = tokio::join!(
            connector.connect(name, client),
            source.accept(server, Duration::from_secs(5))
        );
        let (_, principal) = s.expect("server handshake");
        assert!(principal.is_anonymous());
        let c = c.expect("client handshake");
        let certs: &[CertificateDer<'_>] = c.get_ref().1.peer_certificates().expect("certs");
        certs[0].to_vec()
    }

    fn pem(name: &str) -> Vec<u8> {
        std::fs::read(testdata(name)).expect("testdata")
    }

    #[tokio::test]
    async fn reload_serves_a_new_certificate_and_keeps_the_old_on_a_broken_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, pem("server.pem")).expect("write");
        std::fs::write(&key, pem("server.key")).expect("write");
        let mut a = args("server.pem", "server.key");
        a.ssl_certificate_file = Some(cert.clone());
        a.ssl_key_file = Some(key.clone());
        let source = TlsSource::load(&a).expect("load");
        let mut seen = fingerprint(&source);
        let first = served(&source).await;
        assert_eq!(check(&source, &mut seen), Checked::Unchanged);

        // A half-done rotation (new certificate, old key) does not load: the old stays.
        std::fs::write(&cert, pem("server2.pem")).expect("write");
        let failed = check(&source, &mut seen);
        assert!(
            matches!(&failed, Checked::Failed(e) if e.contains("--ssl-key-file")),
            "{failed:?}"
        );
        assert_eq!(served(&source).await, first);
        // Reported once, not at every poll.
        assert_eq!(check(&source, &mut seen), Checked::Unchanged);

        // The key arrives: new connections get the new certificate.
        std::fs::write(&key, pem("server2.key")).expect("write");
        assert_eq!(check(&source, &mut seen), Checked::Reloaded);
        let second = served(&source).await;
        assert_ne!(second, first);

        // Garbage, then a file that is gone: the new certificate stays.
        std::fs::write(&cert, b"-----BEGIN CERTIFICATE-----\nnope\n").expect("write");
        assert!(matches!(check(&source, &mut seen), Checked::Failed(_)));
        std::fs::remove_file(&cert).expect("rm");
        assert!(matches!(check(&source, &mut seen), Checked::Failed(_)));
        assert_eq!(served(&source).await, second);
    }
}
