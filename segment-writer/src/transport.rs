//! How brokers reach each other's internal port: [`ReplicaTransport`] (dial) and
//! [`ReplicaListener`] (accept), with TCP for production and [`SimNet`], an in-memory
//! network of zones that the simulation can partition.
//!
//! Everything on the internal port goes through these: WAL replication streams
//! ([`crate::replicate`]), the replica server ([`crate::replica`]) and tail requests of
//! recoveries ([`crate::leadership::recover`]). A connection is a byte stream ([`Conn`]); the framing
//! stays in [`crate::replica_proto`].
//!
//! [`SimNet`] addresses are the same strings brokers register as `internal_addr`. A
//! partition between two zones refuses new connections across it and breaks the ones that
//! exist (both ends see an error), as a dropped route with TCP keep-alive would.

use async_trait::async_trait;
use futures::task::AtomicWaker;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

/// A connected byte stream.
pub trait Conn: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Conn for T {}

/// A boxed connection.
pub type BoxConn = Box<dyn Conn>;

/// Dials another broker's internal port.
#[async_trait]
pub trait ReplicaTransport: Send + Sync + 'static {
    async fn connect(&self, addr: &str) -> io::Result<BoxConn>;
}

/// Accepts connections on this broker's internal port.
#[async_trait]
pub trait ReplicaListener: Send + 'static {
    /// The next connection and a name for its peer.
    async fn accept(&mut self) -> io::Result<(BoxConn, String)>;
}

/// Production: TCP with Nagle off (acks are small and latency-bound).
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpTransport;

#[async_trait]
impl ReplicaTransport for TcpTransport {
    async fn connect(&self, addr: &str) -> io::Result<BoxConn> {
        let socket = tokio::net::TcpStream::connect(addr).await?;
        let _ = socket.set_nodelay(true);
        Ok(Box::new(socket))
    }
}

#[async_trait]
impl ReplicaListener for tokio::net::TcpListener {
    async fn accept(&mut self) -> io::Result<(BoxConn, String)> {
        let (socket, peer) = tokio::net::TcpListener::accept(self).await?;
        let _ = socket.set_nodelay(true);
        Ok((Box::new(socket), peer.to_string()))
    }
}

/// Bytes buffered in each direction of a simulated connection.
const SIM_CONN_BUFFER_BYTES: usize = 256 << 10;
/// Connections waiting to be accepted by a simulated listener.
const SIM_BACKLOG: usize = 64;

#[derive(Default)]
struct NetState {
    /// Listening address → (its zone, where its connections go).
    listeners: BTreeMap<String, (String, mpsc::Sender<(BoxConn, String)>)>,
    /// Zone pairs (ordered) that cannot reach each other.
    cut: BTreeSet<(String, String)>,
    /// Live connections: (zone a, zone b, their cut flag).
    conns: Vec<(String, String, Arc<Cut>)>,
    next_port: u64,
}

fn pair(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_owned(), b.to_owned())
    } else {
        (b.to_owned(), a.to_owned())
    }
}

/// An in-memory network of zones; clones share it.
#[derive(Clone, Default)]
pub struct SimNet {
    state: Arc<Mutex<NetState>>,
}

fn lock(m: &Mutex<NetState>) -> MutexGuard<'_, NetState> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SimNet {
    pub fn new() -> SimNet {
        SimNet::default()
    }

    /// Listens at `addr` in `zone`, replacing an earlier listener there (a restarted broker).
    pub fn listen(&self, addr: &str, zone: &str) -> SimListener {
        let (tx, rx) = mpsc::channel(SIM_BACKLOG);
        lock(&self.state)
            .listeners
            .insert(addr.to_owned(), (zone.to_owned(), tx));
        SimListener { rx }
    }

    /// A dialer whose connections start in `zone`.
    pub fn transport(&self, zone: &str) -> Arc<dyn ReplicaTransport> {
        Arc::new(SimDialer {
            net: self.clone(),
            zone: zone.to_owned(),
        })
    }

    /// Cuts `a` from `b` (both ways): new connections are refused, live ones break.
    pub fn partition(&self, a: &str, b: &str) {
        let mut s = lock(&self.state);
        let p = pair(a, b);
        s.conns.retain(|(x, y, cut)| {
            if pair(x, y) == p {
                cut.cut();
                false
            } else {
                true
            }
        });
        s.cut.insert(p);
    }

    /// Ends every partition.
    pub fn heal(&self) {
        lock(&self.state).cut.clear();
    }

    /// Whether `a` can reach `b` now.
    pub fn reachable(&self, a: &str, b: &str) -> bool {
        a == b || !lock(&self.state).cut.contains(&pair(a, b))
    }

    /// Both ends of a new connection from `from_zone` to `addr`, and where the far end is
    /// accepted.
    fn dial(&self, from_zone: &str, addr: &str) -> io::Result<Dialled> {
        let mut s = lock(&self.state);
        let (zone, tx) = s
            .listeners
            .get(addr)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::ConnectionRefused))?;
        if tx.is_closed() {
            return Err(io::ErrorKind::ConnectionRefused.into());
        }
        if from_zone != zone && s.cut.contains(&pair(from_zone, &zone)) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("zone {from_zone} cannot reach {zone}"),
            ));
        }
        let cut = Arc::new(Cut::default());
        s.conns
            .retain(|(_, _, c)| !c.is_cut() && Arc::strong_count(c) > 1);
        s.conns.push((from_zone.to_owned(), zone, cut.clone()));
        s.next_port += 1;
        let peer = format!("{from_zone}:{}", s.next_port);
        let (near, far) = tokio::io::duplex(SIM_CONN_BUFFER_BYTES);
        Ok((
            Box::new(SimConn {
                inner: near,
                cut: cut.clone(),
            }),
            tx,
            Box::new(SimConn { inner: far, cut }),
            peer,
        ))
    }
}

/// (near end, the listener's queue, far end, the far end's name for its peer).
type Dialled = (BoxConn, mpsc::Sender<(BoxConn, String)>, BoxConn, String);

struct SimDialer {
    net: SimNet,
    zone: String,
}

#[async_trait]
impl ReplicaTransport for SimDialer {
    async fn connect(&self, addr: &str) -> io::Result<BoxConn> {
        let (near, tx, far, peer) = self.net.dial(&self.zone, addr)?;
        tx.send((far, peer))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::ConnectionRefused))?;
        Ok(near)
    }
}

/// The accepting side of [`SimNet::listen`]; dropping it closes the port.
pub struct SimListener {
    rx: mpsc::Receiver<(BoxConn, String)>,
}

#[async_trait]
impl ReplicaListener for SimListener {
    async fn accept(&mut self) -> io::Result<(BoxConn, String)> {
        self.rx
            .recv()
            .await
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }
}

/// The shared "this connection is broken" flag of both ends.
#[derive(Default)]
struct Cut {
    cut: AtomicBool,
    read: [AtomicWaker; 2],
}

impl Cut {
    fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        for w in &self.read {
            w.wake();
        }
    }

    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }
}

fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "network partition")
}

struct SimConn {
    inner: tokio::io::DuplexStream,
    cut: Arc<Cut>,
}

impl SimConn {
    /// Registers `cx` to be woken by a cut; returns the error if already cut.
    fn check(&self, cx: &mut Context<'_>, slot: usize) -> io::Result<()> {
        self.cut.read[slot].register(cx.waker());
        if self.cut.is_cut() {
            return Err(broken());
        }
        Ok(())
    }
}

impl AsyncRead for SimConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Err(e) = self.check(cx, 0) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Err(e) = self.check(cx, 1) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Err(e) = self.check(cx, 1) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    //! One conformance suite for both transports, then the simulated network's partitions.
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn conformance(
        dial: Arc<dyn ReplicaTransport>,
        mut listener: Box<dyn ReplicaListener>,
        addr: String,
        absent: &str,
    ) {
        let server = tokio::spawn(async move {
            let (mut conn, peer) = listener.accept().await.expect("accept");
            assert!(!peer.is_empty());
            let mut buf = [0u8; 5];
            conn.read_exact(&mut buf).await.expect("read");
            conn.write_all(&buf).await.expect("echo");
            conn.flush().await.expect("flush");
            // The client closes: end of stream.
            assert_eq!(conn.read(&mut buf).await.expect("eof"), 0);
        });
        let mut c = dial.connect(&addr).await.expect("connect");
        c.write_all(b"hello").await.expect("write");
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).await.expect("read echo");
        assert_eq!(&buf, b"hello");
        drop(c);
        server.await.expect("server");
        assert!(dial.connect(absent).await.is_err(), "nobody listens there");
    }

    #[tokio::test]
    async fn tcp_conforms() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        // A port nobody listens on: bind, read it, close.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let absent = closed.local_addr().expect("addr").to_string();
        drop(closed);
        conformance(Arc::new(TcpTransport), Box::new(listener), addr, &absent).await;
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn sim_net_conforms() {
        let net = SimNet::new();
        let listener = net.listen("b1:internal", "az1");
        conformance(
            net.transport("az2"),
            Box::new(listener),
            "b1:internal".into(),
            "b9:internal",
        )
        .await;
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_partition_breaks_live_connections_and_refuses_new_ones_until_healed() {
        let net = SimNet::new();
        let mut listener = net.listen("b1", "az1");
        let dial = net.transport("az2");
        let mut c = dial.connect("b1").await.expect("connect");
        let (mut s, _) = listener.accept().await.expect("accept");
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 1];
            s.read(&mut buf).await
        });
        tokio::task::yield_now().await;
        net.partition("az1", "az2");
        let r = reader.await.expect("reader");
        assert_eq!(
            r.expect_err("a pending read sees the cut").kind(),
            io::ErrorKind::ConnectionReset
        );
        assert!(c.write_all(b"x").await.is_err(), "the other end too");
        assert!(!net.reachable("az2", "az1"));
        assert!(dial.connect("b1").await.is_err(), "no new connections");
        // The same zone still reaches itself.
        assert!(net.transport("az1").connect("b1").await.is_ok());
        net.heal();
        assert!(dial.connect("b1").await.is_ok());
        // A closed listener refuses.
        drop(listener);
        assert!(dial.connect("b1").await.is_err());
    }
}
