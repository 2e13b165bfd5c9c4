//! A server TLS stream that never leaves written bytes stranded in rustls' buffer.
//!
//! tokio-rustls' `poll_write` accepts plaintext into the session and returns `Ready(n)` even
//! when the socket would block before all of the resulting TLS records went out; the rest
//! goes out on the next write or flush. A writer that writes a response and then waits for
//! the next request without flushing (the Kafka connection loop does exactly that; a plain
//! socket needs no flush) would leave the tail of a response unsent, and the client waits
//! for it forever. So every read and write here first pushes buffered records out: the
//! connection's reader is always waiting on the socket, so its wake-up on writability
//! finishes the flush.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::server::TlsStream;

/// A server-side TLS stream that flushes on every read and write (see the module doc).
pub struct FlushingTls<S> {
    inner: TlsStream<S>,
}

impl<S> FlushingTls<S> {
    pub fn new(inner: TlsStream<S>) -> Self {
        FlushingTls { inner }
    }

    pub fn get_ref(&self) -> &TlsStream<S> {
        &self.inner
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for FlushingTls<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // Pending registers for writability, which wakes this reader to flush the rest; an
        // error here shows again on the next write.
        let _ = Pin::new(&mut self.inner).poll_flush(cx);
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for FlushingTls<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(_))) {
            let _ = Pin::new(&mut self.inner).poll_flush(cx);
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{args, connector};
    use super::super::TlsSource;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Writes like the Kafka connection loop: `write` until all is accepted, never flush,
    /// then wait for the next request.
    async fn write_unflushed<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) {
        let mut done = 0;
        while done < bytes.len() {
            done += w.write(&bytes[done..]).await.expect("write");
        }
    }

    #[tokio::test]
    async fn a_response_written_without_a_flush_reaches_the_client_whole() {
        let source = TlsSource::load(&args("server.pem", "server.key")).expect("load");
        // A small pipe, so the socket blocks part-way through every large write.
        let (client, server) = tokio::io::duplex(4096);
        let connector = connector(None);
        let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
        let (c, s) = tokio::join!(
            connector.connect(name, client),
            source.accept(server, Duration::from_secs(5))
        );
        let mut client = c.expect("client");
        let (server, _) = s.expect("server");
        let response: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let expected = response.clone();
        let server_task = tokio::spawn(async move {
            let (mut r, mut w) = tokio::io::split(server);
            write_unflushed(&mut w, &response).await;
            // Now only reading, as a connection waiting for its next request does.
            let mut next = [0u8; 1];
            let _ = r.read(&mut next).await;
        });
        let mut got = vec![0u8; expected.len()];
        tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut got))
            .await
            .expect("the whole response arrives without a flush")
            .expect("read");
        assert_eq!(got, expected);
        client.write_all(b"x").await.expect("next request");
        server_task.await.expect("server");
    }
}
