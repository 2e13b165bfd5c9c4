//! The protocol fuzzer, bounded run: deterministic seeded mutations of real client frames
//! through the broker's request decode path and of their record batches through the batch
//! path, under an allocator that refuses any single allocation over [`ALLOCATION_MAX`].
//!
//! Seeds: `tests/corpus/requests/` (frames captured from librdkafka, kafka-python, the Java
//! client and kcat by `tests/corpus/capture.py`), one default-valued request and two
//! "count 2^31-1" requests for every API and version in `versions::SUPPORTED`, and every
//! file in `tests/corpus/regressions/` (inputs that once failed; each stays a test).
//!
//! Each target runs a systematic pass (every count/length position of every seed set to
//! 0x7fffffff, 0x7fff and the varint maximum) then random mutations (bit flips, interesting
//! integers, truncation, deletion, insertion, splicing of two seeds), for
//! `OXBOW_FUZZ_SECS` seconds (default 12) from `OXBOW_FUZZ_SEED`. A longer run:
//! `OXBOW_FUZZ_SECS=300 cargo test -p oxbow-gateway --test fuzz_decode -- --nocapture`;
//! coverage-guided: `cargo +nightly fuzz run request -- -max_total_time=300` in `fuzz/`.
//!
//! A panic writes the input to `$CARGO_TARGET_TMPDIR` and fails the test, naming the file
//! to copy into `tests/corpus/regressions/`. A refused allocation aborts the test binary
//! with the target and execution number (see the `alloc-guard` crate in `fuzz/`);
//! `OXBOW_FUZZ_DUMP=<target>:<n>` writes that input instead of running it.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

mod targets;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use oxbow_gateway::kafka::versions::SUPPORTED;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

// -- the allocation guard -----------------------------------------------------------------

/// The largest single allocation any input may cause. The broker's frames are at most
/// `--max-request-bytes` (100 MiB); fuzz inputs are kilobytes, so anything near this is a
/// reservation sized by a claimed count, not by the input.
const ALLOCATION_MAX: usize = 256 << 20;

#[global_allocator]
static GUARD: alloc_guard::Guard = alloc_guard::Guard::new(ALLOCATION_MAX);

/// Runs `f` and returns the most bytes it held at once (on this thread).
fn peak_bytes_of(f: impl FnOnce()) -> usize {
    alloc_guard::peak_bytes_of(f).1
}

// -- deterministic randomness -------------------------------------------------------------

/// SplitMix64: tiny, seedable, and the same sequence on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

// -- mutations ----------------------------------------------------------------------------

/// Values that break length and count fields: the largest, negative, zero, sign bit.
const I32S: [i32; 6] = [i32::MAX, -1, 0, i32::MIN, 1 << 30, 0x0010_0000];
const I16S: [i16; 5] = [i16::MAX, -1, 0, i16::MIN, 0x0100];
/// An unsigned varint of u32::MAX (a compact count or length of 2^32-2 after the -1).
const VARINT_MAX: [u8; 5] = [0xff, 0xff, 0xff, 0xff, 0x0f];

/// How an input is kept consistent after mutation, so mutations reach past the first check.
#[derive(Clone, Copy)]
enum Fixup {
    /// A request stream: the first frame's length prefix is set to the bytes after it.
    FramePrefix,
    /// A record batch: batchLength and the CRC-32C are recomputed.
    BatchCrc,
}

fn fix(data: &mut [u8], fixup: Fixup) {
    match fixup {
        Fixup::FramePrefix => {
            if data.len() >= 4 {
                let n = (data.len() - 4) as u32;
                data[..4].copy_from_slice(&n.to_be_bytes());
            }
        }
        Fixup::BatchCrc => {
            if data.len() >= 61 {
                let n = (data.len() - 12) as u32;
                data[8..12].copy_from_slice(&n.to_be_bytes());
                let crc = crc32c::crc32c(&data[21..]);
                data[17..21].copy_from_slice(&crc.to_be_bytes());
            }
        }
    }
}

fn put_at(data: &mut [u8], at: usize, bytes: &[u8]) {
    if at + bytes.len() <= data.len() {
        data[at..at + bytes.len()].copy_from_slice(bytes);
    }
}

/// One random mutation of `data`; `other` is a second seed for splicing.
fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8]) {
    let len = data.len();
    match rng.below(11) {
        0 if len > 0 => {
            let at = rng.below(len);
            data[at] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let at = rng.below(len);
            data[at] = *rng.pick(&[0x00, 0x01, 0x7f, 0x80, 0xff]);
        }
        2 => put_at(data, rng.below(len), &rng.pick(&I16S).to_be_bytes()),
        3 => put_at(data, rng.below(len), &rng.pick(&I32S).to_be_bytes()),
        4 if len > 0 => {
            // Replace one byte with a maximal varint (a compact count or length).
            let at = rng.below(len);
            data.splice(at..at + 1, VARINT_MAX);
        }
        5 => data.truncate(rng.below(len + 1)),
        6 if len > 0 => {
            let at = rng.below(len);
            let end = (at + 1 + rng.below(16)).min(len);
            data.drain(at..end);
        }
        7 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            data.splice(at..at, bytes);
        }
        8 if !other.is_empty() => {
            // Splice: this seed's head, the other's tail.
            let at = rng.below(len + 1);
            let from = rng.below(other.len());
            data.truncate(at);
            data.extend_from_slice(&other[from..]);
        }
        9 if len > 0 => {
            // Duplicate a range (repeated elements, repeated frames).
            let at = rng.below(len);
            let end = (at + 1 + rng.below(64)).min(len);
            let copy = data[at..end].to_vec();
            data.splice(at..at, copy);
        }
        _ => put_at(data, rng.below(len), &VARINT_MAX[..1 + rng.below(5)]),
    }
}

// -- the run ------------------------------------------------------------------------------

struct Stats {
    executions: u64,
    /// The most bytes one execution held at once, and the input it came from's length.
    peak_bytes: usize,
    peak_input_len: usize,
}

/// Runs one input under the guard; a panic saves the input and fails the test.
fn execute(name: &'static str, target: fn(&[u8]), input: &[u8], stats: &mut Stats) {
    stats.executions += 1;
    let n = stats.executions;
    alloc_guard::set_execution(name, n);
    if std::env::var("OXBOW_FUZZ_DUMP").ok() == Some(format!("{name}:{n}")) {
        let path = save(name, input);
        panic!("{name} execution {n} written to {}", path.display());
    }
    let outcome = std::panic::catch_unwind(|| peak_bytes_of(|| target(input)));
    match outcome {
        Ok(peak) => {
            if peak > stats.peak_bytes {
                stats.peak_bytes = peak;
                stats.peak_input_len = input.len();
            }
        }
        Err(_) => {
            let path = save(name, input);
            panic!(
                "{name}: execution {n} panicked; input saved to {} — copy it into \
                 gateway/tests/corpus/regressions/ once fixed",
                path.display()
            );
        }
    }
}

fn save(name: &str, input: &[u8]) -> PathBuf {
    let path =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-{name}-{:016x}.bin", fnv(input)));
    std::fs::write(&path, input).expect("write the failing input");
    path
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// With `OXBOW_FUZZ_EXPORT=<dir>`, writes the seeds to `<dir>/<target>/` for libFuzzer
/// (`fuzz/run.sh` does this), so both fuzzers start from the same corpus.
fn export(name: &str, seeds: &[Vec<u8>]) {
    let Ok(dir) = std::env::var("OXBOW_FUZZ_EXPORT") else {
        return;
    };
    let dir = Path::new(&dir).join(name);
    std::fs::create_dir_all(&dir).expect("create the export directory");
    for s in seeds {
        std::fs::write(dir.join(format!("{:016x}", fnv(s))), s).expect("export a seed");
    }
}

fn budget() -> Duration {
    let secs = std::env::var("OXBOW_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(12.0);
    Duration::from_secs_f64(secs)
}

fn seed() -> u64 {
    std::env::var("OXBOW_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x0b0b_0f0f_2026_1201)
}

/// The systematic pass, then random mutations until `budget` runs out.
fn fuzz(
    name: &'static str,
    target: fn(&[u8]),
    seeds: &[Vec<u8>],
    fixup: Fixup,
    budget: Duration,
) -> Stats {
    export(name, seeds);
    let started = Instant::now();
    let mut stats = Stats {
        executions: 0,
        peak_bytes: 0,
        peak_input_len: 0,
    };
    for s in seeds {
        execute(name, target, s, &mut stats);
    }
    // Every position of the first 256 bytes of each seed as a count or length field.
    let head = match fixup {
        Fixup::FramePrefix => 4,
        Fixup::BatchCrc => 0,
    };
    for s in seeds {
        for at in head..s.len().min(256) {
            for value in [
                &i32::MAX.to_be_bytes()[..],
                &i16::MAX.to_be_bytes()[..],
                &[0xff][..],
            ] {
                let mut m = s.clone();
                put_at(&mut m, at, value);
                fix(&mut m, fixup);
                execute(name, target, &m, &mut stats);
            }
            let mut m = s.clone();
            m.splice(at..at + 1, VARINT_MAX);
            fix(&mut m, fixup);
            execute(name, target, &m, &mut stats);
        }
    }
    let systematic = stats.executions;
    let mut rng = Rng(seed() ^ fnv(name.as_bytes()));
    while started.elapsed() < budget {
        for _ in 0..64 {
            let mut m = rng.pick(seeds).clone();
            let other = rng.pick(seeds);
            for _ in 0..1 + rng.below(4) {
                mutate_once(&mut rng, &mut m, other);
            }
            // Mostly keep the framing consistent, so the mutation reaches the decoder.
            if rng.below(8) != 0 {
                fix(&mut m, fixup);
            }
            execute(name, target, &m, &mut stats);
        }
    }
    eprintln!(
        "fuzz_decode {name}: {} executions ({systematic} systematic) in {:.1} s from {} \
         seeds, seed {:#x}, 0 crashes; the most one input held at once: {} bytes (from a \
         {}-byte input)",
        stats.executions,
        started.elapsed().as_secs_f64(),
        seeds.len(),
        seed(),
        stats.peak_bytes,
        stats.peak_input_len,
    );
    stats
}

// -- seeds --------------------------------------------------------------------------------

fn corpus_dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(sub)
}

fn read_dir(dir: &Path) -> Vec<Vec<u8>> {
    read_dir_matching(dir, "")
}

/// The `.bin` files of `dir` whose names start with `prefix`, in name order.
fn read_dir_matching(dir: &Path, prefix: &str) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| std::fs::read(p).expect("corpus file"))
        .collect()
}

/// A default-valued request of `key` (empty arrays, null strings).
fn default_request(key: ApiKey) -> RequestKind {
    match key {
        ApiKey::Produce => ProduceRequest::default().into(),
        ApiKey::Fetch => FetchRequest::default().into(),
        ApiKey::ListOffsets => ListOffsetsRequest::default().into(),
        ApiKey::Metadata => MetadataRequest::default().into(),
        ApiKey::OffsetCommit => OffsetCommitRequest::default().into(),
        ApiKey::OffsetFetch => OffsetFetchRequest::default().into(),
        ApiKey::FindCoordinator => FindCoordinatorRequest::default().into(),
        ApiKey::JoinGroup => JoinGroupRequest::default().into(),
        ApiKey::Heartbeat => HeartbeatRequest::default().into(),
        ApiKey::LeaveGroup => LeaveGroupRequest::default().into(),
        ApiKey::SyncGroup => SyncGroupRequest::default().into(),
        ApiKey::DescribeGroups => DescribeGroupsRequest::default().into(),
        ApiKey::ListGroups => ListGroupsRequest::default().into(),
        ApiKey::ApiVersions => ApiVersionsRequest::default().into(),
        ApiKey::CreateTopics => CreateTopicsRequest::default().into(),
        ApiKey::DeleteTopics => DeleteTopicsRequest::default().into(),
        ApiKey::InitProducerId => InitProducerIdRequest::default().into(),
        ApiKey::OffsetForLeaderEpoch => OffsetForLeaderEpochRequest::default().into(),
        ApiKey::DescribeConfigs => DescribeConfigsRequest::default().into(),
        ApiKey::CreatePartitions => CreatePartitionsRequest::default().into(),
        ApiKey::DeleteGroups => DeleteGroupsRequest::default().into(),
        ApiKey::OffsetDelete => OffsetDeleteRequest::default().into(),
        ApiKey::DescribeCluster => DescribeClusterRequest::default().into(),
        ApiKey::DescribeTopicPartitions => DescribeTopicPartitionsRequest::default().into(),
        ApiKey::DescribeLogDirs => DescribeLogDirsRequest::default().into(),
        ApiKey::ElectLeaders => ElectLeadersRequest::default().into(),
        ApiKey::DescribeProducers => DescribeProducersRequest::default().into(),
        ApiKey::AlterPartitionReassignments => AlterPartitionReassignmentsRequest::default().into(),
        ApiKey::ListPartitionReassignments => ListPartitionReassignmentsRequest::default().into(),
        ApiKey::DeleteRecords => DeleteRecordsRequest::default().into(),
        ApiKey::IncrementalAlterConfigs => IncrementalAlterConfigsRequest::default().into(),
        ApiKey::AlterConfigs => AlterConfigsRequest::default().into(),
        ApiKey::SaslHandshake => SaslHandshakeRequest::default().into(),
        ApiKey::SaslAuthenticate => SaslAuthenticateRequest::default().into(),
        ApiKey::DescribeUserScramCredentials => {
            DescribeUserScramCredentialsRequest::default().into()
        }
        ApiKey::AlterUserScramCredentials => AlterUserScramCredentialsRequest::default().into(),
        ApiKey::DescribeClientQuotas => DescribeClientQuotasRequest::default().into(),
        ApiKey::AlterClientQuotas => AlterClientQuotasRequest::default().into(),
        ApiKey::CreateAcls => CreateAclsRequest::default().into(),
        ApiKey::DescribeAcls => DescribeAclsRequest::default().into(),
        ApiKey::DeleteAcls => DeleteAclsRequest::default().into(),
        ApiKey::AddPartitionsToTxn => AddPartitionsToTxnRequest::default().into(),
        ApiKey::AddOffsetsToTxn => AddOffsetsToTxnRequest::default().into(),
        ApiKey::EndTxn => EndTxnRequest::default().into(),
        ApiKey::WriteTxnMarkers => WriteTxnMarkersRequest::default().into(),
        ApiKey::TxnOffsetCommit => TxnOffsetCommitRequest::default().into(),
        ApiKey::DescribeTransactions => DescribeTransactionsRequest::default().into(),
        ApiKey::ListTransactions => ListTransactionsRequest::default().into(),
        other => panic!("{other:?} is in SUPPORTED but has no default request here: add it"),
    }
}

/// A whole frame (length prefix included) with `key`/`version`'s header and `body`.
fn frame_of(key: ApiKey, version: i16, body: &[u8]) -> Vec<u8> {
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")))
        .encode(&mut buf, key.request_header_version(version))
        .expect("a request header encodes");
    buf.put_slice(body);
    let mut frame = buf.to_vec();
    fix(&mut frame, Fixup::FramePrefix);
    frame
}

/// A body that is nothing but a maximal count: a non-flexible array count of 2^31-1, or a
/// compact one of 2^32-2 — the 19-byte frame that aborted the broker.
fn hostile_bodies() -> [Vec<u8>; 2] {
    [i32::MAX.to_be_bytes().to_vec(), VARINT_MAX.to_vec()]
}

fn request_seeds() -> Vec<Vec<u8>> {
    let mut seeds = read_dir(&corpus_dir("requests"));
    assert!(
        seeds.len() >= 50,
        "the captured corpus is missing: run gateway/tests/corpus/capture.py"
    );
    for (key, min, max) in SUPPORTED {
        for version in *min..=*max {
            let mut body = BytesMut::new();
            if default_request(*key).encode(&mut body, version).is_ok() {
                seeds.push(frame_of(*key, version, &body));
            }
            for hostile in hostile_bodies() {
                seeds.push(frame_of(*key, version, &hostile));
            }
        }
    }
    seeds.extend(read_dir_matching(&corpus_dir("regressions"), "request-"));
    seeds
}

/// The record batches inside the captured Produce requests.
fn batch_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for frame in read_dir(&corpus_dir("requests")) {
        let frame = Bytes::from(frame).slice(4..);
        let Ok(p) = oxbow_gateway::kafka::frame::prelude(&frame) else {
            continue;
        };
        if let Ok(oxbow_gateway::kafka::frame::Request::Decoded {
            body: RequestKind::Produce(req),
            ..
        }) = oxbow_gateway::kafka::frame::decode_request(p, frame)
        {
            for t in req.topic_data {
                for part in t.partition_data {
                    seeds.extend(part.records.map(|r| r.to_vec()));
                }
            }
        }
    }
    assert!(
        seeds.len() >= 10,
        "expected the captured Produce requests' batches"
    );
    seeds.extend(read_dir_matching(&corpus_dir("regressions"), "batch-"));
    seeds
}

fn request_target(data: &[u8]) {
    targets::request_stream(data);
}

fn batch_target(data: &[u8]) {
    targets::record_batch(data);
}

// -- tests --------------------------------------------------------------------------------

#[test]
fn fuzz_request_decode_path() {
    let seeds = request_seeds();
    let stats = fuzz(
        "request",
        request_target,
        &seeds,
        Fixup::FramePrefix,
        budget(),
    );
    assert!(stats.executions > seeds.len() as u64);
}

#[test]
fn fuzz_record_batch_path() {
    let seeds = batch_seeds();
    let stats = fuzz("batch", batch_target, &seeds, Fixup::BatchCrc, budget() / 2);
    assert!(stats.executions > seeds.len() as u64);
}

/// Issue 11, defect 2: the 19-byte frame (count 2^31-1, or the compact maximum) of every
/// supported API and version is refused as malformed, holding no more than a few KiB.
#[test]
fn max_count_frames_are_refused_for_every_api_and_version() {
    use oxbow_gateway::kafka::frame::{decode_request, prelude, FrameError, Request};
    for (key, min, max) in SUPPORTED {
        for version in *min..=*max {
            for body in hostile_bodies() {
                let frame = Bytes::from(frame_of(*key, version, &body)).slice(4..);
                let p = prelude(&frame).expect("a whole prelude");
                let mut outcome = None;
                let peak = peak_bytes_of(|| outcome = Some(decode_request(p, frame.clone())));
                assert!(peak < 16 << 10, "{key:?} v{version} held {peak} bytes");
                match outcome.expect("ran") {
                    Err(FrameError::Malformed(_)) => {}
                    // A body that starts with a boolean or an integer may still decode:
                    // what matters is that nothing was reserved for the count.
                    Ok(Request::Decoded { .. }) => {}
                    other => panic!("{key:?} v{version}: {other:?}"),
                }
            }
        }
    }
}

/// The same count in a large frame: the bytes left no longer cap the damage if the
/// reservation counts element slots (a 128-byte struct per byte left), so it counts bytes.
/// And a count the bytes can hold decodes into structs far larger than their wire form
/// (Metadata's null topic names 64x, Produce's empty topics 32x), so decoding one request
/// may build at most `REQUEST_DECODE_BYTES_MAX`.
#[test]
fn large_frames_claiming_many_elements_build_at_most_the_decode_budget() {
    use oxbow_gateway::kafka::frame::{decode_request, prelude, REQUEST_DECODE_BYTES_MAX};
    let decode = |frame: Bytes| {
        let p = prelude(&frame).expect("prelude");
        let mut ok = false;
        let peak = peak_bytes_of(|| ok = decode_request(p, frame.clone()).is_ok());
        (ok, peak)
    };
    // Topic names as null strings (-1), 2 bytes each: the densest MetadataRequestTopic.
    let metadata_v1 = |count: i32, body_bytes: usize| {
        let mut body = count.to_be_bytes().to_vec();
        body.extend(std::iter::repeat_n([0xff, 0xff], body_bytes / 2).flatten());
        Bytes::from(frame_of(ApiKey::Metadata, 1, &body)).slice(4..)
    };
    let (ok, peak) = decode(metadata_v1(i32::MAX, 8 << 20));
    eprintln!("Metadata v1 claiming 2^31-1 topics in 8 MiB: held {peak} bytes");
    assert!(
        !ok && peak <= 64 << 10,
        "a lying count reserved {peak} bytes"
    );

    let (ok, peak) = decode(metadata_v1(1 << 19, 1 << 20));
    eprintln!("Metadata v1 with 2^19 null names (1 MiB): held {peak} bytes, decoded: {ok}");
    assert!(ok, "64 MiB of structs fits the budget");

    let (ok, peak) = decode(metadata_v1(4 << 20, 8 << 20));
    eprintln!("Metadata v1 with 2^22 null names (8 MiB): held {peak} bytes, decoded: {ok}");
    assert!(
        !ok && peak <= 64 << 10,
        "refused before building: {peak} bytes"
    );

    // Produce v9 with empty topics (3 bytes each: empty name, no partitions, no tags),
    // inside a frame a real client may send: refused once the structs pass the budget.
    let topics = 1 << 20;
    let mut body = vec![0x00]; // transactional_id: null
    body.extend(1i16.to_be_bytes()); // acks
    body.extend(1000i32.to_be_bytes()); // timeout_ms
    body.extend([0x81, 0x80, 0x40]); // compact count: 2^20 + 1
    body.extend(std::iter::repeat_n([0x01, 0x01, 0x00], topics).flatten());
    body.push(0);
    let (ok, peak) = decode(Bytes::from(frame_of(ApiKey::Produce, 9, &body)).slice(4..));
    eprintln!("Produce v9 with 2^20 empty topics (3 MiB): held {peak} bytes, decoded: {ok}");
    assert!(
        !ok && peak <= REQUEST_DECODE_BYTES_MAX + (4 << 20),
        "{peak} bytes"
    );

    // Unknown tagged fields: 2^20 distinct tags in a Produce v9 header.
    let mut header = BytesMut::new();
    header.put_i16(ApiKey::Produce as i16);
    header.put_i16(9);
    header.put_i32(7);
    header.put_i16(-1);
    header.extend_from_slice(&[0x80, 0x80, 0x40]); // 2^20 tagged fields
    for tag in 0u32..1 << 20 {
        let mut t = tag;
        while t >= 0x80 {
            header.put_u8((t as u8) | 0x80);
            t >>= 7;
        }
        header.put_u8(t as u8);
        header.put_u8(0); // size 0
    }
    let (ok, peak) = decode(header.freeze());
    eprintln!(
        "Produce v9 header with 2^20 unknown tagged fields: held {peak} bytes, decoded: {ok}"
    );
    assert!(!ok && peak <= 2 * REQUEST_DECODE_BYTES_MAX, "{peak} bytes");
}

/// Every input that once failed still passes.
#[test]
fn regressions_stay_fixed() {
    let mut stats = Stats {
        executions: 0,
        peak_bytes: 0,
        peak_input_len: 0,
    };
    let dir = corpus_dir("regressions");
    let requests = read_dir_matching(&dir, "request-");
    let batches = read_dir_matching(&dir, "batch-");
    assert!(
        !requests.is_empty() && !batches.is_empty(),
        "regressions/ lost its files"
    );
    assert_eq!(
        requests.len() + batches.len(),
        read_dir(&dir).len(),
        "every regression is named request-* or batch-*"
    );
    for input in requests {
        execute("regression-request", request_target, &input, &mut stats);
    }
    for input in batches {
        execute("regression-batch", batch_target, &input, &mut stats);
    }
}
