//! The internal port's authentication, end to end on loopback TCP: a real replica server
//! (`serve_internal`) holding broker 1's WAL copy, attacked by peers that skip the
//! handshake, hold the wrong secret, or authenticate as one broker and claim another's
//! WAL. Each is closed having read nothing beyond the challenge, and the copy is intact,
//! byte for byte; the right secret, and a rotated pair, are served.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use oxbow_metadata::clock::{OsRng, SystemClock};
use oxbow_metadata::BrokerId;
use oxbow_segment_writer::internal_auth::{
    ClientHandshake, InternalAuth, Secrets, CHALLENGE_LEN, NONCE_LEN,
};
use oxbow_segment_writer::replica_proto::{read_frame, write_frame, Frame};
use oxbow_segment_writer::{serve_internal, ReplicaStore};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const OLD: &[u8] = b"old-cluster-secret-0123456789abcdef-0123456789";
const NEW: &[u8] = b"new-cluster-secret-fedcba9876543210-fedcba9876";
const WRONG: &[u8] = b"not-this-cluster-0123456789abcdef-0123456789ab";
/// The replica's broker id, the source whose copy it holds, and that copy's incarnation.
const REPLICA: BrokerId = 2;
const SOURCE: BrokerId = 1;
const INCARNATION: u64 = 42;

fn secrets(current: &[u8], previous: Option<&[u8]>) -> Secrets {
    Secrets::new(current, previous).expect("long enough")
}

fn auth(id: BrokerId, s: Secrets) -> InternalAuth {
    InternalAuth::new(id, Some(s), Arc::new(SystemClock), Arc::new(OsRng))
}

/// WAL entries `first..first + n` in the WAL's framing (`len | crc32c | sequence | topic id
/// | partition | leader epoch | batch`, see `wal.rs`).
fn entries(first: u64, n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for seq in first..first + n {
        let mut payload = Vec::new();
        payload.extend_from_slice(&seq.to_be_bytes());
        payload.extend_from_slice(&[7u8; 16]);
        payload.extend_from_slice(&0i32.to_be_bytes());
        payload.extend_from_slice(&3i32.to_be_bytes());
        payload.extend_from_slice(format!("batch {seq} of the source's WAL").as_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&payload).to_be_bytes());
        out.extend_from_slice(&payload);
    }
    out
}

struct Replica {
    addr: String,
    store: Arc<ReplicaStore>,
    auth: InternalAuth,
    stop: CancellationToken,
    server: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Replica {
    /// A replica server holding sequences 0..50 of the source's WAL (small files, so a
    /// trim would delete some).
    async fn start(s: Secrets) -> Replica {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(ReplicaStore::new(
            oxbow_segment_writer::wal_disk::FsDisk::new(dir.path().join("replicas")),
            512,
        ));
        {
            let copy = store.log(SOURCE, INCARNATION).expect("copy");
            let mut copy = copy.lock().expect("lock");
            copy.stream_begins(0, 0..0);
            for first in (0..50).step_by(5) {
                copy.append(&entries(first, 5)).expect("append");
            }
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let auth = auth(REPLICA, s);
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve_internal(
            listener,
            auth.clone(),
            store.clone(),
            stop.clone(),
            TaskTracker::new(),
        ));
        Replica {
            addr,
            store,
            auth,
            stop,
            server,
            _dir: dir,
        }
    }

    fn copy(&self) -> Vec<(u64, Bytes)> {
        self.store.tail(SOURCE).expect("tail")
    }

    async fn stop(self) {
        self.stop.cancel();
        self.server.await.expect("server");
    }
}

/// Everything the server sends until it closes (bounded: it must close, not hang).
async fn read_until_closed(conn: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), async {
        let mut buf = [0u8; 4096];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                // Closed with our unread frames in its buffer: a reset.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("read: {e}"),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the server did not close the connection");
    got
}

/// What an attacker sends once connected: a stream claiming the source's WAL that trims
/// all of it and appends garbage, and (on its own connection) a tail request.
async fn hostile_frames(conn: &mut TcpStream) {
    let frames = [
        Frame::Hello {
            source: SOURCE,
            incarnation: INCARNATION,
            start_sequence: 50,
            skipped: 0..0,
        },
        Frame::Trim { keep_from: 1 << 40 },
        Frame::Entries {
            first_sequence: 50,
            bytes: Bytes::from(entries(50, 3)),
        },
    ];
    for f in &frames {
        // The server may already have closed: what matters is what it did.
        if write_frame(conn, f).await.is_err() {
            return;
        }
    }
    let _ = conn.flush().await;
}

#[tokio::test]
async fn peers_without_the_right_proof_learn_nothing_and_change_nothing() {
    let replica = Replica::start(secrets(NEW, None)).await;
    let before = replica.copy();
    assert_eq!(before.len(), 1, "one incarnation held");
    assert!(!before[0].1.is_empty());

    // 1. No handshake: the old protocol's Hello, Trim and Entries.
    let mut conn = TcpStream::connect(&replica.addr).await.expect("connect");
    hostile_frames(&mut conn).await;
    assert!(
        read_until_closed(&mut conn).await.is_empty(),
        "old protocol"
    );
    // … and the old protocol's tail request: not a byte of the copy.
    let mut conn = TcpStream::connect(&replica.addr).await.expect("connect");
    write_frame(&mut conn, &Frame::FetchTail { source: SOURCE })
        .await
        .expect("write");
    assert!(read_until_closed(&mut conn).await.is_empty(), "old tail");

    // 2. The wrong secret: it proves with WRONG (accepting the server's NEW proof, so the
    //    handshake runs to the server's check of its proof), then tries the frames.
    let mut conn = TcpStream::connect(&replica.addr).await.expect("connect");
    let (hs, hello) = ClientHandshake::start(secrets(WRONG, Some(NEW)), 3, [9; NONCE_LEN]);
    conn.write_all(&hello).await.expect("hello");
    let mut challenge = vec![0u8; CHALLENGE_LEN];
    conn.read_exact(&mut challenge).await.expect("challenge");
    let (server_id, proof) = hs.on_challenge(&challenge).expect("the server proves NEW");
    assert_eq!(server_id, REPLICA as u32);
    conn.write_all(&proof).await.expect("proof");
    hostile_frames(&mut conn).await;
    assert!(
        read_until_closed(&mut conn).await.is_empty(),
        "nothing beyond the challenge for a wrong secret"
    );
    let mut conn = TcpStream::connect(&replica.addr).await.expect("connect");
    let dialed = auth(3, secrets(WRONG, None))
        .dial(&mut conn, REPLICA, &replica.addr)
        .await;
    assert!(
        dialed.is_err(),
        "a dialer refuses a server it cannot verify"
    );
    drop(conn);

    // 3. The right secret as broker 3, claiming broker 1's WAL in its Hello.
    let mut conn = TcpStream::connect(&replica.addr).await.expect("connect");
    auth(3, secrets(NEW, None))
        .dial(&mut conn, REPLICA, &replica.addr)
        .await
        .expect("broker 3 authenticates");
    hostile_frames(&mut conn).await;
    assert!(
        read_until_closed(&mut conn).await.is_empty(),
        "a Hello for another broker's WAL is refused unanswered"
    );

    assert_eq!(replica.copy(), before, "the copy is intact, byte for byte");
    // Counted: two old-protocol connections, the wrong proof, the dialer's wrong secret
    // (the server sees its Proof frame never come: the connection closes mid-handshake),
    // and the false claim.
    wait_failures(&replica.auth, 5).await;

    // 4. The right secret, as the source itself: its stream is served (Ack), and any
    //    authenticated broker may fetch the tail, which is the copy plus what was streamed.
    let source = auth(SOURCE, secrets(NEW, None));
    let mut conn = TcpStream::connect(&replica.addr).await.expect("connect");
    source
        .dial(&mut conn, REPLICA, &replica.addr)
        .await
        .expect("authenticates");
    write_frame(
        &mut conn,
        &Frame::Hello {
            source: SOURCE,
            incarnation: INCARNATION,
            start_sequence: 50,
            skipped: 0..0,
        },
    )
    .await
    .expect("hello");
    write_frame(
        &mut conn,
        &Frame::Entries {
            first_sequence: 50,
            bytes: Bytes::from(entries(50, 3)),
        },
    )
    .await
    .expect("entries");
    let ack = tokio::time::timeout(Duration::from_secs(10), read_frame(&mut conn))
        .await
        .expect("ack in time")
        .expect("ack");
    assert_eq!(ack, Some(Frame::Ack { durable: 53 }));
    drop(conn);
    let tail = fetch_tail(&auth(3, secrets(NEW, None)), &replica.addr)
        .await
        .expect("tail");
    let mut expected = before[0].1.to_vec();
    expected.extend_from_slice(&entries(50, 3));
    assert_eq!(tail, vec![(INCARNATION, Bytes::from(expected))]);
    assert_eq!(replica.auth.failures(), 5, "no failure counted for these");
    replica.stop().await;
}

/// Waits (bounded) for the server's tasks to have counted `n` failures, then checks that
/// it is exactly `n`.
async fn wait_failures(auth: &InternalAuth, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while auth.failures() < n && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(auth.failures(), n);
}

/// A tail request over an authenticated connection.
async fn fetch_tail(dialer: &InternalAuth, addr: &str) -> Result<Vec<(u64, Bytes)>, String> {
    let mut conn = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    dialer
        .dial(&mut conn, REPLICA, addr)
        .await
        .map_err(|e| e.to_string())?;
    write_frame(&mut conn, &Frame::FetchTail { source: SOURCE })
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    loop {
        let f = tokio::time::timeout(Duration::from_secs(10), read_frame(&mut conn))
            .await
            .map_err(|_| "tail timed out".to_string())?
            .map_err(|e| e.to_string())?;
        match f {
            Some(Frame::TailChunk { incarnation, bytes }) => out.push((incarnation, bytes)),
            Some(Frame::TailEnd) => return Ok(out),
            other => return Err(format!("unexpected {other:?}")),
        }
    }
}

#[tokio::test]
async fn a_rotated_pair_authenticates_and_a_stale_secret_does_not() {
    // The replica is at rotation step 1 (prove OLD, accept NEW); dialers at step 2 (prove
    // NEW, accept OLD) and at step 0 (OLD alone) are served; one on NEW alone is not (it
    // cannot verify the replica's OLD proof), nor one with neither.
    let replica = Replica::start(secrets(OLD, Some(NEW))).await;
    let held = replica.copy();
    for (dialer, served) in [
        (secrets(NEW, Some(OLD)), true),
        (secrets(OLD, None), true),
        (secrets(NEW, None), false),
        (secrets(WRONG, None), false),
    ] {
        let r = fetch_tail(&auth(3, dialer), &replica.addr).await;
        assert_eq!(r.is_ok(), served, "{r:?}");
        if served {
            assert_eq!(r.expect("served"), held);
        }
    }
    replica.stop().await;

    // A server at step 2 (NEW, accepting OLD) and a dialer at step 1 (OLD, accepting NEW).
    let replica = Replica::start(secrets(NEW, Some(OLD))).await;
    let r = fetch_tail(&auth(3, secrets(OLD, Some(NEW))), &replica.addr).await;
    assert_eq!(r.expect("served"), replica.copy());
    replica.stop().await;
}

#[tokio::test]
async fn a_dialer_refuses_a_server_that_is_not_the_broker_it_meant() {
    let replica = Replica::start(secrets(NEW, None)).await;
    let dialer = auth(3, secrets(NEW, None));
    let mut conn = TcpStream::connect(&replica.addr).await.expect("connect");
    let err = dialer
        .dial(&mut conn, 5, &replica.addr)
        .await
        .expect_err("broker 2 answered where broker 5 was registered");
    assert!(err.to_string().contains("expected broker 5"), "{err}");
    assert_eq!(dialer.failures(), 1);
    replica.stop().await;
}

#[tokio::test]
async fn a_dialer_with_a_secret_and_a_server_without_do_not_talk() {
    // The server runs without a secret (the old behaviour): it reads the dialer's magic as
    // an oversized frame length and closes; the dialer fails its handshake.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(ReplicaStore::new(
        oxbow_segment_writer::wal_disk::FsDisk::new(dir.path().join("replicas")),
        512,
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let stop = CancellationToken::new();
    let server = tokio::spawn(serve_internal(
        listener,
        InternalAuth::disabled(REPLICA),
        store,
        stop.clone(),
        TaskTracker::new(),
    ));
    let r = fetch_tail(&auth(3, secrets(NEW, None)), &addr).await;
    let err = r.expect_err("refused");
    assert!(err.contains("internal-auth"), "{err}");
    // Without a secret on either side, the old protocol is served as before.
    let tail = fetch_tail(&InternalAuth::disabled(3), &addr).await;
    assert_eq!(tail, Ok(Vec::new()));
    stop.cancel();
    server.await.expect("server");
}
