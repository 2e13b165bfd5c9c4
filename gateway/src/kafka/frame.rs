//! Sans-I/O framing: a Kafka frame is a 4-byte big-endian length and that many bytes; a
//! request frame starts with the request header.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{encode_sharing, with_decode_budget, Decodable, Encodable};

/// Why a frame cannot be served; every case closes the connection (as Kafka does), since the
/// stream can no longer be trusted to be in sync.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {size} bytes exceeds --max-request-bytes {max}")]
    TooLarge { size: usize, max: usize },
    #[error("negative frame length {0}")]
    NegativeLength(i32),
    #[error("frame too short for a request header ({0} bytes)")]
    TooShort(usize),
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("{key:?} version {version} is not supported")]
    UnsupportedVersion { key: ApiKey, version: i16 },
    #[error("malformed request: {0}")]
    Malformed(String),
}

/// Checks a frame length prefix against the limit.
pub fn check_length(length: i32, max: usize) -> Result<usize, FrameError> {
    let size = usize::try_from(length).map_err(|_| FrameError::NegativeLength(length))?;
    if size > max {
        return Err(FrameError::TooLarge { size, max });
    }
    Ok(size)
}

/// The first fields of every request header, readable before knowing the header version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prelude {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

pub fn prelude(frame: &[u8]) -> Result<Prelude, FrameError> {
    if frame.len() < 8 {
        return Err(FrameError::TooShort(frame.len()));
    }
    let mut b = frame;
    Ok(Prelude {
        api_key: b.get_i16(),
        api_version: b.get_i16(),
        correlation_id: b.get_i32(),
    })
}

/// Decodes the request header (its version follows from the API and version), leaving
/// `frame` at the request body.
pub fn decode_header(
    key: ApiKey,
    version: i16,
    frame: &mut Bytes,
) -> Result<RequestHeader, FrameError> {
    let header_version = key.request_header_version(version);
    RequestHeader::decode(frame, header_version).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// The most memory decoding one request may build, beyond the frame's own bytes (which
/// strings and records reference without copying). A decoded struct can be far larger than
/// its wire form: a 2-byte null topic name becomes a 128-byte `MetadataRequestTopic`, an
/// empty 3-byte Produce topic a 96-byte struct, so one 100 MiB frame built 3-6 GiB and
/// aborted the broker. Real requests stay far below this (Metadata naming 100,000 topics
/// builds ~13 MiB); the vendored decoder charges every array and unknown tagged field.
pub const REQUEST_DECODE_BYTES_MAX: usize = 64 << 20;

// Returned once per request and destructured at once; boxing the body would only add an
// allocation per request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Request {
    /// A supported API and version: its header and body.
    Decoded {
        key: ApiKey,
        version: i16,
        header: RequestHeader,
        body: RequestKind,
    },
    /// ApiVersions at a version this broker does not support: answered in the v0 layout with
    /// the versions it does (KIP-511), so the client can retry with one of them.
    UnsupportedApiVersions { correlation_id: i32 },
}

/// The whole request decode path, without I/O: the API and version are checked against
/// [`versions::SUPPORTED`](super::versions::SUPPORTED) before the header and body are
/// decoded. `frame` is one frame without its length prefix, `p` its [`prelude`]. The
/// protocol fuzzer (`gateway/tests/fuzz_decode.rs`) drives exactly this function.
pub fn decode_request(p: Prelude, mut frame: Bytes) -> Result<Request, FrameError> {
    let key = ApiKey::try_from(p.api_key).map_err(|_| FrameError::UnknownApiKey(p.api_key))?;
    let version = p.api_version;
    if !super::versions::supports(key, version) {
        if key == ApiKey::ApiVersions {
            return Ok(Request::UnsupportedApiVersions {
                correlation_id: p.correlation_id,
            });
        }
        return Err(FrameError::UnsupportedVersion { key, version });
    }
    let (header, body) = with_decode_budget(REQUEST_DECODE_BYTES_MAX, || {
        let header = decode_header(key, version, &mut frame)?;
        let body = RequestKind::decode(key, &mut frame, version)
            .map_err(|e| FrameError::Malformed(format!("{key:?} v{version}: {e}")))?;
        Ok::<_, FrameError>((header, body))
    })?;
    Ok(Request::Decoded {
        key,
        version,
        header,
        body,
    })
}

/// Encodes a whole response frame: length, header, body.
pub fn encode_response(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> anyhow::Result<Bytes> {
    encode_with(key, version, correlation_id, |buf| {
        body.encode(buf, version)
    })
}

/// Byte fields at least this long are written by reference rather than copied into a
/// response buffer ([`encode_response_frame`]): below it, one more piece in a vectored write
/// costs more than the copy.
pub const SHARED_FIELD_BYTES_MIN: usize = 1024;

/// A response frame as the pieces to write in order. A Fetch response's records are not
/// copied into it: each piece that holds them is the refcounted buffer they were read into
/// (a partition's tail, the read cache), between pieces of the encoded fields around them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResponseFrame {
    parts: Vec<Bytes>,
    len: usize,
}

impl ResponseFrame {
    /// The pieces, in order.
    pub fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// Bytes on the wire, length prefix included.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The frame with `piece` after what it holds.
    pub fn with_piece(mut self, piece: Bytes) -> Self {
        self.len += piece.len();
        self.parts.push(piece);
        self
    }

    /// The frame in one buffer (a copy when it has several pieces; for tests).
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.as_slice() {
            [one] => one.clone(),
            parts => {
                let mut buf = BytesMut::with_capacity(self.len);
                for p in parts {
                    buf.extend_from_slice(p);
                }
                buf.freeze()
            }
        }
    }
}

impl From<Bytes> for ResponseFrame {
    fn from(frame: Bytes) -> Self {
        ResponseFrame {
            len: frame.len(),
            parts: vec![frame],
        }
    }
}

/// Encodes a whole response frame as [`encode_response`] does, but a Fetch response's
/// records (byte fields of [`SHARED_FIELD_BYTES_MIN`] or more) by reference, not copied:
/// the frame is the encoded fields' pieces with the records between them.
pub fn encode_response_frame(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> anyhow::Result<ResponseFrame> {
    if key != ApiKey::Fetch {
        return Ok(encode_response(key, version, correlation_id, body)?.into());
    }
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = key.response_header_version(version);
    // The fields without the records: a few dozen bytes per partition.
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    header.encode(&mut buf, header_version)?;
    let (encoded, shared) =
        encode_sharing(SHARED_FIELD_BYTES_MIN, || body.encode(&mut buf, version));
    encoded?;
    let len = buf.len() + shared.iter().map(|(_, b)| b.len()).sum::<usize>();
    buf[0..4].copy_from_slice(&i32::try_from(len - 4)?.to_be_bytes());
    let buf = buf.freeze();
    let mut parts = Vec::with_capacity(2 * shared.len() + 1);
    let mut at = 0;
    for (offset, bytes) in shared {
        if offset < at || offset > buf.len() {
            anyhow::bail!(
                "a shared field's offset {offset} is outside the encoded {at}..{}",
                buf.len()
            );
        }
        if offset > at {
            parts.push(buf.slice(at..offset));
        }
        parts.push(bytes);
        at = offset;
    }
    if at < buf.len() {
        parts.push(buf.slice(at..));
    }
    Ok(ResponseFrame { parts, len })
}

/// Encodes a whole response frame whose body is written by `body`.
pub fn encode_with(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: impl FnOnce(&mut BytesMut) -> anyhow::Result<()>,
) -> anyhow::Result<Bytes> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = key.response_header_version(version);
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    header.encode(&mut buf, header_version)?;
    body(&mut buf)?;
    let len = i32::try_from(buf.len() - 4)?;
    buf[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::ApiVersionsRequest;

    #[test]
    fn lengths_are_bounded() {
        assert!(check_length(10, 100).is_ok());
        assert!(matches!(
            check_length(101, 100),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(matches!(
            check_length(-1, 100),
            Err(FrameError::NegativeLength(-1))
        ));
    }

    /// A Fetch response at every supported version, with records below and above the
    /// sharing threshold, aborted transactions and tagged fields: the frame's pieces are
    /// byte for byte the plain encoding, and the large records are the caller's buffers.
    #[test]
    fn fetch_frames_are_the_plain_encoding_with_records_by_reference() {
        use kafka_protocol::messages::fetch_response::{
            AbortedTransaction, EpochEndOffset, FetchableTopicResponse, PartitionData,
        };
        use kafka_protocol::messages::{FetchResponse, ProducerId, TopicName};
        let big = Bytes::from((0..5000u32).map(|i| i as u8).collect::<Vec<u8>>());
        let small = Bytes::from_static(b"small records");
        let partition = |i: i32, records: Option<Bytes>| {
            PartitionData::default()
                .with_partition_index(i)
                .with_high_watermark(100 + i64::from(i))
                .with_last_stable_offset(90)
                .with_records(records)
        };
        for version in 4..=18i16 {
            let mut aborted = partition(2, Some(big.slice(1000..)));
            aborted.aborted_transactions = Some(vec![AbortedTransaction::default()
                .with_producer_id(ProducerId(7))
                .with_first_offset(3)]);
            let mut parts = vec![
                partition(0, Some(big.clone())),
                partition(1, Some(small.clone())),
                aborted,
                partition(3, None),
                partition(4, Some(Bytes::new())),
            ];
            if version >= 12 {
                parts[1].diverging_epoch =
                    EpochEndOffset::default().with_epoch(3).with_end_offset(9);
            }
            let topic = FetchableTopicResponse::default()
                .with_topic(TopicName(
                    kafka_protocol::protocol::StrBytes::from_static_str("t"),
                ))
                .with_partitions(parts);
            let body = ResponseKind::Fetch(
                FetchResponse::default()
                    .with_throttle_time_ms(5)
                    .with_responses(vec![topic.clone(), topic]),
            );
            let plain = encode_response(ApiKey::Fetch, version, 9, &body).expect("plain");
            let frame = encode_response_frame(ApiKey::Fetch, version, 9, &body).expect("frame");
            assert_eq!(frame.len(), plain.len(), "v{version}");
            assert_eq!(frame.to_bytes(), plain, "v{version}");
            // The large records are the caller's buffers, not copies.
            let by_ref = frame
                .parts()
                .iter()
                .filter(|p| p.as_ptr() == big.as_ptr() || p.as_ptr() == big[1000..].as_ptr())
                .count();
            assert_eq!(by_ref, 4, "v{version}");
        }
    }

    #[test]
    fn other_responses_are_one_piece() {
        let body =
            ResponseKind::ApiVersions(kafka_protocol::messages::ApiVersionsResponse::default());
        let frame = encode_response_frame(ApiKey::ApiVersions, 3, 1, &body).expect("frame");
        assert_eq!(frame.parts().len(), 1);
        assert_eq!(
            frame.to_bytes(),
            encode_response(ApiKey::ApiVersions, 3, 1, &body).expect("plain")
        );
    }

    #[test]
    fn header_round_trip() {
        let mut buf = BytesMut::new();
        let header = RequestHeader::default()
            .with_request_api_key(18)
            .with_request_api_version(3)
            .with_correlation_id(42);
        header
            .encode(&mut buf, ApiKey::ApiVersions.request_header_version(3))
            .expect("encode");
        ApiVersionsRequest::default()
            .encode(&mut buf, 3)
            .expect("encode");
        let p = prelude(&buf).expect("prelude");
        assert_eq!(
            p,
            Prelude {
                api_key: 18,
                api_version: 3,
                correlation_id: 42
            }
        );
        let mut frame = buf.freeze();
        let h = decode_header(ApiKey::ApiVersions, 3, &mut frame).expect("header");
        assert_eq!(h.correlation_id, 42);
        assert!(ApiVersionsRequest::decode(&mut frame, 3).is_ok());
        assert!(prelude(&[0, 1]).is_err());
    }
}
