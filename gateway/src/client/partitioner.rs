//! Key → partition mapping identical to the Java client's default partitioner.
//!
//! Records with a key must land on the same partition whichever client produced them,
//! otherwise per-key ordering breaks when producers in different languages share a topic.
//! Kafka's `BuiltInPartitioner.partitionForKey` is `toPositive(Utils.murmur2(key)) % n`;
//! this is a bit-for-bit port (Java `int` arithmetic is wrapping `i32`, `>>>` is a logical
//! shift). Used by the CLI producer and the HTTP API.

/// Kafka's `Utils.murmur2`: 32-bit MurmurHash2 with Kafka's seed, as a Java `int`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;

    // Java computes `seed ^ length` on ints; the length is truncated the same way.
    let mut h: u32 = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    // Java's switch falls through from case 3 to case 1.
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit (not `abs`, which overflows on MIN).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition the Java client's default partitioner picks for a keyed record.
///
/// # Panics
/// If `partitions <= 0`; every topic has at least one partition, so a caller passing
/// zero has not looked the topic up.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    assert!(partitions > 0, "a topic has at least one partition");
    to_positive(murmur2(key)) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors from Kafka's `UtilsTest.testMurmur2`.
    #[test]
    fn murmur2_matches_java() {
        let cases: [(&str, i32); 6] = [
            ("21", -973932308),
            ("foobar", -790332482),
            ("a-little-bit-long-string", -985981536),
            ("a-little-bit-longer-string", -1486304829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            ("abc", 479470107),
        ];
        for (input, expected) in cases {
            assert_eq!(murmur2(input.as_bytes()), expected, "murmur2({input:?})");
        }
    }

    #[test]
    fn partition_is_stable_and_in_range() {
        for n in 1..20 {
            for key in ["", "a", "abc", "user-42", "foobar"] {
                let p = partition_for_key(key.as_bytes(), n);
                assert!((0..n).contains(&p));
                assert_eq!(p, partition_for_key(key.as_bytes(), n));
            }
        }
        // toPositive(-790332482) = 1357151166; 1357151166 % 3 = 0.
        assert_eq!(partition_for_key(b"foobar", 3), 1357151166 % 3);
    }

    #[test]
    fn to_positive_clears_only_the_sign_bit() {
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(-1), i32::MAX);
        assert_eq!(to_positive(5), 5);
    }
}
