//! Kafka request/response framing on the client side (sans-I/O).
//!
//! A frame on the wire is a 4-byte big-endian length followed by that many bytes: the
//! header then the body. The request header version comes from
//! [`ApiKey::request_header_version`] and the response header version from
//! [`ApiKey::response_header_version`], both functions of the API version in use; the
//! bodies are encoded and decoded by `kafka-protocol`'s generated types. Nothing here does
//! I/O, so [`super::connection`] only moves the bytes.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
#[cfg(test)]
use kafka_protocol::protocol::Encodable;
use kafka_protocol::protocol::{encode_request_header_into_buffer, Decodable, Request, StrBytes};

/// Size of the length prefix in front of every frame.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Largest response frame this client accepts. Bounds memory if a broker (or something
/// that is not a broker) sends a bogus length; a fetch response is limited by the
/// request's `max_bytes` (at most 64 MiB from the CLI), so this leaves ample room.
pub const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Why a frame could not be built or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("cannot encode {api:?} v{version} request: {detail}")]
    Encode {
        api: ApiKey,
        version: i16,
        detail: String,
    },
    #[error("cannot decode {api:?} v{version} response: {detail}")]
    Decode {
        api: ApiKey,
        version: i16,
        detail: String,
    },
    #[error("response frame length {0} is negative or above the {RESPONSE_BYTES_MAX} byte limit")]
    BadLength(i64),
    #[error("response correlation id {got} does not match request {expected}")]
    CorrelationMismatch { expected: i32, got: i32 },
}

/// The [`ApiKey`] of a generated request type.
pub fn api_key<R: Request>() -> ApiKey {
    ApiKey::try_from(R::KEY).expect("every generated Request type has a known ApiKey")
}

/// Encodes a complete request frame: length prefix, header, body.
pub fn encode_request<R: Request>(
    correlation_id: i32,
    client_id: &StrBytes,
    version: i16,
    request: &R,
) -> Result<Bytes, FrameError> {
    let api = api_key::<R>();
    let encode_err = |e: anyhow::Error| FrameError::Encode {
        api,
        version,
        detail: e.to_string(),
    };
    let mut header = RequestHeader::default();
    header.request_api_key = R::KEY;
    header.request_api_version = version;
    header.correlation_id = correlation_id;
    header.client_id = Some(client_id.clone());

    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0); // patched below once the size is known
    encode_request_header_into_buffer(&mut buf, &header).map_err(encode_err)?;
    request.encode(&mut buf, version).map_err(encode_err)?;
    let body_len =
        i32::try_from(buf.len() - LENGTH_PREFIX_BYTES).map_err(|_| FrameError::Encode {
            api,
            version,
            detail: format!("request of {} bytes is too large", buf.len()),
        })?;
    buf[..LENGTH_PREFIX_BYTES].copy_from_slice(&body_len.to_be_bytes());
    Ok(buf.freeze())
}

/// Parses the length prefix of a response frame.
pub fn response_len(prefix: [u8; LENGTH_PREFIX_BYTES]) -> Result<usize, FrameError> {
    let len = i32::from_be_bytes(prefix);
    match usize::try_from(len) {
        Ok(len) if len <= RESPONSE_BYTES_MAX => Ok(len),
        _ => Err(FrameError::BadLength(i64::from(len))),
    }
}

/// Strips and checks the response header of a frame (without its length prefix),
/// returning the body bytes.
pub fn split_response(
    api: ApiKey,
    version: i16,
    expected_correlation_id: i32,
    mut frame: Bytes,
) -> Result<Bytes, FrameError> {
    let header =
        ResponseHeader::decode(&mut frame, api.response_header_version(version)).map_err(|e| {
            FrameError::Decode {
                api,
                version,
                detail: format!("header: {e}"),
            }
        })?;
    if header.correlation_id != expected_correlation_id {
        return Err(FrameError::CorrelationMismatch {
            expected: expected_correlation_id,
            got: header.correlation_id,
        });
    }
    Ok(frame)
}

/// Decodes a response body and insists that it was consumed completely; leftover bytes
/// mean the two sides disagree about the version's layout.
pub fn decode_body<T: Decodable>(
    api: ApiKey,
    version: i16,
    mut body: Bytes,
) -> Result<T, FrameError> {
    let decoded = T::decode(&mut body, version).map_err(|e| FrameError::Decode {
        api,
        version,
        detail: e.to_string(),
    })?;
    if body.has_remaining() {
        return Err(FrameError::Decode {
            api,
            version,
            detail: format!("{} unexpected trailing bytes", body.remaining()),
        });
    }
    Ok(decoded)
}

/// Encodes a response frame the way a broker would (length prefix, header, body). Only
/// tests need this, to drive the decoder without a broker.
#[cfg(test)]
pub fn encode_response<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Bytes {
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    header
        .encode(&mut buf, api.response_header_version(version))
        .expect("response header encodes");
    body.encode(&mut buf, version)
        .expect("response body encodes");
    let len = i32::try_from(buf.len() - LENGTH_PREFIX_BYTES).expect("test frames are small");
    buf[..LENGTH_PREFIX_BYTES].copy_from_slice(&len.to_be_bytes());
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
    use kafka_protocol::messages::{
        ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
    };
    use kafka_protocol::protocol::decode_request_header_from_buffer;

    fn strip_prefix(mut frame: Bytes) -> Bytes {
        let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
        frame.copy_to_slice(&mut prefix);
        let len = response_len(prefix).expect("valid length");
        assert_eq!(
            len,
            frame.len(),
            "length prefix covers the rest of the frame"
        );
        frame
    }

    #[test]
    fn request_frame_round_trips_for_every_header_version() {
        let client_id = StrBytes::from_static_str("oxbow-test");
        // ApiVersions v0 uses request header v1, v3 uses the flexible header v2.
        for version in [0, 3] {
            let request = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("oxbow"))
                .with_client_software_version(StrBytes::from_static_str("0.1.0"));
            let frame = encode_request(7, &client_id, version, &request).expect("encodes");
            let mut rest = strip_prefix(frame);
            let header = decode_request_header_from_buffer(&mut rest).expect("header decodes");
            assert_eq!(header.request_api_key, ApiKey::ApiVersions as i16);
            assert_eq!(header.request_api_version, version);
            assert_eq!(header.correlation_id, 7);
            assert_eq!(header.client_id, Some(client_id.clone()));
            let decoded = ApiVersionsRequest::decode(&mut rest, version).expect("body decodes");
            if version >= 3 {
                assert_eq!(decoded, request);
            }
            assert!(!rest.has_remaining());
        }
    }

    #[test]
    fn response_frame_round_trips_and_checks_correlation() {
        let mut response = MetadataResponse::default();
        response.brokers.push(
            MetadataResponseBroker::default()
                .with_node_id(1.into())
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(9092),
        );
        // v9+ uses the flexible response header v1; v8 the old v0 header.
        for version in [8, 12] {
            let frame = encode_response(ApiKey::Metadata, version, 42, &response);
            let body = strip_prefix(frame);
            let body_again = body.clone();
            let body = split_response(ApiKey::Metadata, version, 42, body).expect("header ok");
            let decoded: MetadataResponse =
                decode_body(ApiKey::Metadata, version, body).expect("body decodes");
            assert_eq!(decoded.brokers, response.brokers);
            assert_eq!(
                split_response(ApiKey::Metadata, version, 43, body_again),
                Err(FrameError::CorrelationMismatch {
                    expected: 43,
                    got: 42
                })
            );
        }
    }

    #[test]
    fn trailing_bytes_are_a_decode_error() {
        let frame = encode_response(ApiKey::ApiVersions, 0, 1, &ApiVersionsResponse::default());
        let body = split_response(ApiKey::ApiVersions, 0, 1, strip_prefix(frame)).expect("ok");
        let mut longer = BytesMut::from(&body[..]);
        longer.put_u8(0);
        let err = decode_body::<ApiVersionsResponse>(ApiKey::ApiVersions, 0, longer.freeze())
            .expect_err("one byte too many");
        assert!(err.to_string().contains("trailing"), "{err}");
    }

    #[test]
    fn bad_lengths_are_rejected() {
        assert_eq!(
            response_len((-1i32).to_be_bytes()),
            Err(FrameError::BadLength(-1))
        );
        assert!(response_len(((RESPONSE_BYTES_MAX + 1) as i32).to_be_bytes()).is_err());
        assert_eq!(response_len(5i32.to_be_bytes()), Ok(5));
    }

    #[test]
    fn request_type_maps_to_api_key() {
        assert_eq!(api_key::<MetadataRequest>(), ApiKey::Metadata);
    }
}
