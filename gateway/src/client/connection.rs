//! One TCP connection to one broker: connect, ApiVersions handshake, request/response.
//!
//! Lifecycle: [`Connection::open`] connects (bounded by the timeout) and immediately does
//! the ApiVersions handshake (v3, or v0 if the broker answers `UNSUPPORTED_VERSION`), so a
//! usable connection always knows which versions to speak. Requests are strictly one at a
//! time: write a frame, read frames until the matching correlation id. Every read and write
//! is bounded by a timeout; with SASL credentials it then authenticates ([`super::sasl`]); after a timeout, I/O error or undecodable frame the connection
//! marks itself broken (the byte stream may be out of step) and the owner replaces it.

use std::time::Duration;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Most bytes reserved for a response before they arrive; larger frames grow as read.
const FRAME_PREALLOCATE_MAX: usize = 1 << 20;

use super::error::{connect_reason, ClientError};
use super::frame::{self, FrameError, LENGTH_PREFIX_BYTES};
use super::versions::ApiVersionTable;

/// ApiVersions version tried first; v3 is the first flexible version and what current
/// Java clients and librdkafka send.
const API_VERSIONS_PREFERRED: i16 = 3;

/// Kafka's error code for UNSUPPORTED_VERSION.
const UNSUPPORTED_VERSION: i16 = 35;

/// A connection's byte stream: plain TCP, or TLS over it.
type Stream = tokio_util::either::Either<TcpStream, tokio_rustls::client::TlsStream<TcpStream>>;

/// A connected, handshaken broker connection.
#[derive(Debug)]
pub struct Connection {
    /// `host:port` as dialled; used in every error message.
    addr: String,
    stream: Stream,
    versions: ApiVersionTable,
    client_id: StrBytes,
    next_correlation_id: i32,
    /// Bound on each network wait (connect, write, read); a request that makes the broker
    /// wait on purpose (fetch `max_wait`, produce `timeout_ms`) adds that wait on top.
    timeout: Duration,
    broken: bool,
}

/// The TLS handshake of a client connection to `addr`, its host the server name checked.
async fn tls_handshake(
    addr: &str,
    stream: TcpStream,
    config: std::sync::Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, ClientError> {
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let name = rustls_pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
        ClientError::Invalid(format!("{addr}: '{host}' is not a TLS server name: {e}"))
    })?;
    let connector = tokio_rustls::TlsConnector::from(config);
    match tokio::time::timeout(timeout, connector.connect(name, stream)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(ClientError::Unreachable {
            addr: addr.to_string(),
            reason: format!("TLS handshake failed: {e}"),
        }),
        Err(_) => Err(ClientError::Unreachable {
            addr: addr.to_string(),
            reason: format!(
                "TLS handshake not done within {}",
                humantime::format_duration(timeout)
            ),
        }),
    }
}

/// A client TLS configuration trusting the CA certificates in `pem` (PEM, one or more).
pub fn tls_config_from_pem(pem: &[u8]) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let mut n = 0;
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("CA certificates: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("CA certificate refused: {e}"))?;
        n += 1;
    }
    if n == 0 {
        return Err("no CA certificate in the PEM given".into());
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(std::sync::Arc::new(config))
}

impl Connection {
    /// Connects to `addr` and performs the ApiVersions handshake.
    pub async fn open(addr: &str, timeout: Duration, client_id: &str) -> Result<Self, ClientError> {
        Self::open_with(addr, timeout, client_id, None, None).await
    }

    /// [`Connection::open`] over TLS with `tls` if given, then SASL authentication as
    /// `sasl` if given.
    pub async fn open_with(
        addr: &str,
        timeout: Duration,
        client_id: &str,
        sasl: Option<&super::sasl::SaslCredentials>,
        tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<Self, ClientError> {
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(err)) => {
                return Err(ClientError::Unreachable {
                    addr: addr.to_string(),
                    reason: connect_reason(&err),
                })
            }
            Err(_) => {
                return Err(ClientError::Unreachable {
                    addr: addr.to_string(),
                    reason: format!("no answer within {}", humantime::format_duration(timeout)),
                })
            }
        };
        // Requests are small and strictly sequential; Nagle would only add latency.
        stream.set_nodelay(true).map_err(|error| ClientError::Io {
            addr: addr.to_string(),
            error,
        })?;
        let stream = match tls {
            None => tokio_util::either::Either::Left(stream),
            Some(config) => tokio_util::either::Either::Right(
                tls_handshake(addr, stream, config.clone(), timeout).await?,
            ),
        };
        let mut conn = Connection {
            addr: addr.to_string(),
            stream,
            versions: ApiVersionTable::default(),
            client_id: StrBytes::from_string(client_id.to_string()),
            next_correlation_id: 0,
            timeout,
            broken: false,
        };
        conn.versions = conn.handshake().await?;
        if let Some(credentials) = sasl {
            super::sasl::authenticate(&mut conn, credentials).await?;
        }
        Ok(conn)
    }

    /// The `host:port` this connection was opened to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the byte stream may be out of step and the connection must be replaced.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// The version ranges the broker advertised in the handshake.
    pub fn versions(&self) -> &ApiVersionTable {
        &self.versions
    }

    /// The version to send `R` at: highest common version, optionally capped at
    /// `max_version` (for versions that need data the caller lacks).
    pub fn pick_version<R: Request>(&self, max_version: Option<i16>) -> Result<i16, ClientError> {
        let mut client = R::VERSIONS;
        if let Some(max) = max_version {
            client.max = client.max.min(max);
        }
        self.versions
            .pick(frame::api_key::<R>(), client)
            .map_err(|e| ClientError::UnsupportedApi {
                addr: self.addr.clone(),
                api: e.api,
                broker: e.broker,
                client: e.client,
            })
    }

    /// Sends `request` at `version` and waits for its response. `server_wait` is how long
    /// the broker may legitimately hold the request (fetch long-poll, produce acks) and is
    /// added to the read timeout.
    pub async fn send<R: Request>(
        &mut self,
        version: i16,
        request: &R,
        server_wait: Duration,
    ) -> Result<R::Response, ClientError> {
        let api = frame::api_key::<R>();
        let result = async {
            let correlation_id = self.write_request(version, request).await?;
            let body = self
                .read_response(api, version, correlation_id, server_wait)
                .await?;
            frame::decode_body(api, version, body).map_err(|e| self.protocol_error(e))
        }
        .await;
        self.note_failure(&result);
        result
    }

    /// Sends `request` without waiting for a response, for produce with `acks=0` (the
    /// broker sends none, so reading one would hang until the timeout).
    pub async fn send_without_response<R: Request>(
        &mut self,
        version: i16,
        request: &R,
    ) -> Result<(), ClientError> {
        let result = self.write_request(version, request).await.map(|_| ());
        self.note_failure(&result);
        result
    }

    fn note_failure<T>(&mut self, result: &Result<T, ClientError>) {
        if let Err(err) = result {
            if err.breaks_connection() {
                self.broken = true;
            }
        }
    }

    async fn handshake(&mut self) -> Result<ApiVersionTable, ClientError> {
        let response = match self.api_versions(API_VERSIONS_PREFERRED).await? {
            Some(response) => response,
            // The broker rejected v3 and answered in the v0 layout, as KIP-511 specifies;
            // v0 is supported by every broker since 0.10.
            None => self
                .api_versions(0)
                .await?
                .ok_or_else(|| ClientError::Protocol {
                    addr: self.addr.clone(),
                    detail: "broker rejected ApiVersions v0 as unsupported".to_string(),
                })?,
        };
        ClientError::check(response.error_code, None, || {
            format!("ApiVersions handshake with {}", self.addr)
        })?;
        Ok(ApiVersionTable::from_response(&response))
    }

    /// One ApiVersions round trip. `Ok(None)` means the broker answered
    /// UNSUPPORTED_VERSION for this version.
    async fn api_versions(
        &mut self,
        version: i16,
    ) -> Result<Option<ApiVersionsResponse>, ClientError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("oxbow"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let result = async {
            let correlation_id = self.write_request(version, &request).await?;
            let body = self
                .read_response(ApiKey::ApiVersions, version, correlation_id, Duration::ZERO)
                .await?;
            // Whatever the version, the body starts with the error code; on
            // UNSUPPORTED_VERSION the rest is in the v0 layout, not the one we asked for.
            if body.len() >= 2 && body.slice(0..2).get_i16() == UNSUPPORTED_VERSION && version > 0 {
                return Ok(None);
            }
            frame::decode_body(ApiKey::ApiVersions, version, body)
                .map(Some)
                .map_err(|e| self.protocol_error(e))
        }
        .await;
        self.note_failure(&result);
        result
    }

    async fn write_request<R: Request>(
        &mut self,
        version: i16,
        request: &R,
    ) -> Result<i32, ClientError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let frame = frame::encode_request(correlation_id, &self.client_id, version, request)
            .map_err(|e| ClientError::Protocol {
                addr: self.addr.clone(),
                detail: e.to_string(),
            })?;
        match tokio::time::timeout(self.timeout, self.stream.write_all(&frame)).await {
            Ok(Ok(())) => Ok(correlation_id),
            Ok(Err(source)) => Err(ClientError::Io {
                addr: self.addr.clone(),
                error: source,
            }),
            Err(_) => Err(ClientError::Timeout {
                addr: self.addr.clone(),
                what: "accept the request",
                waited: self.timeout,
            }),
        }
    }

    async fn read_response(
        &mut self,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        server_wait: Duration,
    ) -> Result<Bytes, ClientError> {
        let waited = self.timeout.saturating_add(server_wait);
        let read = async {
            let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
            self.stream.read_exact(&mut prefix).await?;
            let len = frame::response_len(prefix)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            // Grown as bytes arrive, never sized by the peer's length alone: a hostile
            // broker (a mirror's source, issue 20) could otherwise make every connection
            // allocate the frame limit up front (decision 21).
            let mut buf = Vec::with_capacity(len.min(FRAME_PREALLOCATE_MAX));
            (&mut self.stream)
                .take(len as u64)
                .read_to_end(&mut buf)
                .await?;
            if buf.len() != len {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("response frame ended after {} of {len} bytes", buf.len()),
                ));
            }
            Ok::<_, std::io::Error>(Bytes::from(buf))
        };
        let frame_bytes = match tokio::time::timeout(waited, read).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(source)) if source.kind() == std::io::ErrorKind::InvalidData => {
                return Err(ClientError::Protocol {
                    addr: self.addr.clone(),
                    detail: source.to_string(),
                })
            }
            Ok(Err(source)) if source.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(ClientError::Io {
                    addr: self.addr.clone(),
                    error: std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("broker closed the connection during {api:?} v{version}"),
                    ),
                })
            }
            Ok(Err(source)) => {
                return Err(ClientError::Io {
                    addr: self.addr.clone(),
                    error: source,
                })
            }
            Err(_) => {
                return Err(ClientError::Timeout {
                    addr: self.addr.clone(),
                    what: "answer",
                    waited,
                })
            }
        };
        frame::split_response(api, version, correlation_id, frame_bytes)
            .map_err(|e| self.protocol_error(e))
    }

    fn protocol_error(&self, err: FrameError) -> ClientError {
        ClientError::Protocol {
            addr: self.addr.clone(),
            detail: err.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable, Encodable};
    use tokio::net::TcpListener;

    /// Reads one request frame; returns (api key, version, correlation id).
    async fn read_request(stream: &mut TcpStream) -> (i16, i16, i32) {
        let len = stream.read_i32().await.expect("length");
        let mut buf = vec![0u8; usize::try_from(len).expect("positive")];
        stream.read_exact(&mut buf).await.expect("body");
        let mut bytes = Bytes::from(buf);
        let header = decode_request_header_from_buffer(&mut bytes).expect("header");
        (
            header.request_api_key,
            header.request_api_version,
            header.correlation_id,
        )
    }

    /// Writes a response frame with a v0 header (as ApiVersions always uses) and
    /// `body` encoded at `version`.
    async fn write_response<T: Encodable>(
        stream: &mut TcpStream,
        correlation_id: i32,
        body: &T,
        version: i16,
    ) {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&correlation_id.to_be_bytes());
        body.encode(&mut buf, version).expect("encodes");
        stream
            .write_i32(i32::try_from(buf.len()).expect("small"))
            .await
            .expect("len");
        stream.write_all(&buf).await.expect("frame");
    }

    fn api(key: ApiKey, min: i16, max: i16) -> ApiVersion {
        ApiVersion::default()
            .with_api_key(key as i16)
            .with_min_version(min)
            .with_max_version(max)
    }

    /// An old broker that rejects ApiVersions v3 (answering in the v0 layout, as KIP-511
    /// says), accepts v0, and offers Metadata up to v8 (non-flexible, v0 response header).
    async fn old_broker(listener: TcpListener) {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let (key, version, correlation_id) = read_request(&mut stream).await;
        assert_eq!((key, version), (ApiKey::ApiVersions as i16, 3));
        let rejected = ApiVersionsResponse::default()
            .with_error_code(UNSUPPORTED_VERSION)
            .with_api_keys(vec![api(ApiKey::ApiVersions, 0, 2)]);
        write_response(&mut stream, correlation_id, &rejected, 0).await;

        let (key, version, correlation_id) = read_request(&mut stream).await;
        assert_eq!((key, version), (ApiKey::ApiVersions as i16, 0));
        let accepted = ApiVersionsResponse::default().with_api_keys(vec![
            api(ApiKey::ApiVersions, 0, 2),
            api(ApiKey::Metadata, 0, 8),
        ]);
        write_response(&mut stream, correlation_id, &accepted, 0).await;

        let (key, version, correlation_id) = read_request(&mut stream).await;
        assert_eq!((key, version), (ApiKey::Metadata as i16, 8));
        write_response(&mut stream, correlation_id, &MetadataResponse::default(), 8).await;

        // A stale correlation id must be caught.
        let (_, _, correlation_id) = read_request(&mut stream).await;
        write_response(
            &mut stream,
            correlation_id + 100,
            &MetadataResponse::default(),
            8,
        )
        .await;
    }

    #[tokio::test]
    async fn handshake_falls_back_to_v0_and_versions_are_negotiated() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let client = async {
            let mut conn = Connection::open(&addr, Duration::from_secs(5), "test")
                .await
                .expect("handshake succeeds after fallback");
            let version = conn
                .pick_version::<MetadataRequest>(None)
                .expect("common version");
            assert_eq!(version, 8);
            conn.send(version, &MetadataRequest::default(), Duration::ZERO)
                .await
                .expect("metadata round trip");
            let err = conn
                .send(version, &MetadataRequest::default(), Duration::ZERO)
                .await
                .expect_err("correlation mismatch");
            assert!(err.to_string().contains("correlation id"), "{err}");
            assert!(conn.is_broken());
            // Produce is not offered at all: a clear error, not a guess.
            let err = conn
                .pick_version::<kafka_protocol::messages::ProduceRequest>(None)
                .expect_err("not offered");
            assert!(
                err.to_string().contains("does not support Produce"),
                "{err}"
            );
        };
        tokio::join!(old_broker(listener), client);
    }

    #[tokio::test]
    async fn silent_broker_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let server = async {
            // Accept and read the request, never answer; hold the socket until the
            // client gave up.
            let (mut stream, _) = listener.accept().await.expect("accept");
            let _ = read_request(&mut stream).await;
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
        };
        let client = async {
            let err = Connection::open(&addr, Duration::from_millis(200), "test")
                .await
                .expect_err("no answer");
            assert!(
                matches!(err, ClientError::Timeout { .. }),
                "expected a timeout, got {err}"
            );
            err
        };
        let (_, err) = tokio::join!(server, client);
        drop(err);
    }

    #[test]
    fn decodes_v0_rejection_layout() {
        // Guard for the fallback's assumption: the error code leads the body.
        let rejected = ApiVersionsResponse::default().with_error_code(UNSUPPORTED_VERSION);
        let mut buf = BytesMut::new();
        rejected.encode(&mut buf, 0).expect("encodes");
        let mut bytes = buf.freeze();
        assert_eq!(bytes.slice(0..2).get_i16(), UNSUPPORTED_VERSION);
        let decoded = ApiVersionsResponse::decode(&mut bytes, 0).expect("decodes");
        assert_eq!(decoded.error_code, UNSUPPORTED_VERSION);
    }
}
