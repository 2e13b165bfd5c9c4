//! SCRAM credential admin through real connections (`kafka::conn::run` over in-memory
//! streams, a real `Broker` on the embedded store): concurrent AlterUserScramCredentials of
//! one user from many connections all land (compare-and-swap, retried on conflict), none
//! lost; then a SASL_PLAINTEXT connection logs in with what they wrote.

mod support;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use oxbow_gateway::client::sasl::ScramClient;
use oxbow_gateway::kafka::conn;
use oxbow_gateway::security::sasl::credential::salted_password;
use oxbow_gateway::security::sasl::ScramHash;
use oxbow_gateway::security::{Principal, SecurityProtocol, Session};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio_util::sync::CancellationToken;

/// A client end of one in-process connection.
struct Conn {
    stream: DuplexStream,
    correlation_id: i32,
}

impl Conn {
    fn open(broker: &Arc<oxbow_gateway::broker::Broker>, protocol: SecurityProtocol) -> Self {
        let (client, server) = tokio::io::duplex(1 << 16);
        let session = Session {
            peer: "127.0.0.1:1".parse().expect("addr"),
            listener: "TEST".into(),
            protocol,
            principal: Principal::anonymous(),
        };
        tokio::spawn(conn::run(
            server,
            session,
            broker.clone(),
            Default::default(),
            CancellationToken::new(),
        ));
        Conn {
            stream: client,
            correlation_id: 0,
        }
    }

    async fn call<R: Encodable + kafka_protocol::protocol::Request>(
        &mut self,
        version: i16,
        request: &R,
    ) -> Bytes {
        self.correlation_id += 1;
        let key = ApiKey::try_from(R::KEY).expect("key");
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("test")))
            .encode(&mut buf, key.request_header_version(version))
            .expect("header");
        request.encode(&mut buf, version).expect("body");
        let mut frame = BytesMut::new();
        frame.put_i32(i32::try_from(buf.len()).expect("len"));
        frame.put_slice(&buf);
        self.stream.write_all(&frame).await.expect("write");
        let len = self.stream.read_i32().await.expect("response length");
        let mut body = vec![0u8; usize::try_from(len).expect("len")];
        self.stream.read_exact(&mut body).await.expect("response");
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
            .expect("response header");
        assert_eq!(header.correlation_id, self.correlation_id);
        body
    }
}

fn upsertion(
    user: &str,
    hash: ScramHash,
    iterations: i32,
    password: &str,
) -> ScramCredentialUpsertion {
    let salt = format!("salt-{iterations}").into_bytes();
    let salted = salted_password(hash, &salt, password.as_bytes(), iterations as u32);
    ScramCredentialUpsertion::default()
        .with_name(StrBytes::from_string(user.to_string()))
        .with_mechanism(hash.type_id())
        .with_iterations(iterations)
        .with_salt(salt.into())
        .with_salted_password(salted.into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_alters_of_one_user_all_land_and_the_user_logs_in() {
    let server = support::start(false).await;
    let broker = server.broker.clone();
    // Eight connections at once: SCRAM-SHA-256 and SCRAM-SHA-512 credentials of "alice",
    // each connection writing one mechanism at its own iteration count.
    let mut tasks = Vec::new();
    for i in 0..8i32 {
        let broker = broker.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(&broker, SecurityProtocol::Plaintext);
            let hash = if i % 2 == 0 {
                ScramHash::Sha256
            } else {
                ScramHash::Sha512
            };
            let request = AlterUserScramCredentialsRequest::default()
                .with_upsertions(vec![upsertion("alice", hash, 4096 + i, "pw")]);
            let mut body = c.call(0, &request).await;
            let response = AlterUserScramCredentialsResponse::decode(&mut body, 0).expect("decode");
            assert_eq!(response.results.len(), 1);
            (
                response.results[0].error_code,
                response.results[0].error_message.clone(),
            )
        }));
    }
    for t in tasks {
        let (code, message) = t.await.expect("task");
        assert_eq!(code, 0, "{message:?}");
    }
    // Both mechanisms are there: no alter overwrote another's mechanism.
    let mut c = Conn::open(&broker, SecurityProtocol::Plaintext);
    let request = DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
        UserName::default().with_name(StrBytes::from_static_str("alice")),
    ]));
    let mut body = c.call(0, &request).await;
    let described = DescribeUserScramCredentialsResponse::decode(&mut body, 0).expect("decode");
    let mechanisms: Vec<i8> = described.results[0]
        .credential_infos
        .iter()
        .map(|i| i.mechanism)
        .collect();
    assert_eq!(mechanisms, [1, 2]);

    // And a SASL connection logs in with the SHA-512 credential that won.
    let mut s = Conn::open(&broker, SecurityProtocol::SaslPlaintext);
    let mut body = s
        .call(
            1,
            &SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str("SCRAM-SHA-512")),
        )
        .await;
    assert_eq!(
        SaslHandshakeResponse::decode(&mut body, 1)
            .expect("decode")
            .error_code,
        0
    );
    let mut client = ScramClient::new(ScramHash::Sha512, "alice", "pw", "cnonce".into());
    let mut body = s
        .call(
            2,
            &SaslAuthenticateRequest::default()
                .with_auth_bytes(client.client_first().into_bytes().into()),
        )
        .await;
    let first = SaslAuthenticateResponse::decode(&mut body, 2).expect("decode");
    assert_eq!(first.error_code, 0);
    let final_ = client
        .client_final(&first.auth_bytes)
        .expect("client final");
    let mut body = s
        .call(
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(final_.into_bytes().into()),
        )
        .await;
    let done = SaslAuthenticateResponse::decode(&mut body, 2).expect("decode");
    assert_eq!(done.error_code, 0, "{:?}", done.error_message);
    client
        .verify_server_final(&done.auth_bytes)
        .expect("server signature");
    // Authenticated: Metadata is served now.
    let mut body = s
        .call(1, &MetadataRequest::default().with_topics(None))
        .await;
    assert!(body.remaining() > 0);
    assert!(MetadataResponse::decode(&mut body, 1).is_ok());
}
