//! Record values: a 16-byte header (run nonce, intended send time) and incompressible filler.
//!
//! The send time is nanoseconds since this process's clock anchor ([`crate::clock`]); the
//! producer and the consumer run in the same process, so their clocks agree exactly. The
//! nonce makes a consumer ignore records of another run that share a topic.

/// Header bytes at the start of every value: nonce (u64 LE) then send time (u64 LE, ns).
pub const HEADER_BYTES: usize = 16;

/// Different filler offsets, so records in a batch differ.
const VARIANTS: usize = 4096;

/// A source of record values of one size.
pub struct Payloads {
    filler: Vec<u8>,
    record_size: usize,
    nonce: u64,
}

impl Payloads {
    pub fn new(record_size: usize, nonce: u64) -> Self {
        Payloads {
            filler: random_bytes(nonce, record_size + VARIANTS),
            record_size,
            nonce,
        }
    }

    pub fn record_size(&self) -> usize {
        self.record_size
    }

    /// Writes record `i`'s value, stamped with `sent_ns`, into `out` (resized to fit).
    pub fn fill(&self, out: &mut Vec<u8>, i: u64, sent_ns: u64) {
        let offset = (i.wrapping_mul(61) % VARIANTS as u64) as usize;
        out.clear();
        out.extend_from_slice(&self.filler[offset..offset + self.record_size]);
        write_header(out, self.nonce, sent_ns);
    }
}

pub fn write_header(buf: &mut [u8], nonce: u64, sent_ns: u64) {
    if buf.len() >= HEADER_BYTES {
        buf[..8].copy_from_slice(&nonce.to_le_bytes());
        buf[8..16].copy_from_slice(&sent_ns.to_le_bytes());
    }
}

/// The send time of a value written by the run with `nonce`, else `None`.
pub fn read_header(buf: &[u8], nonce: u64) -> Option<u64> {
    let head: [u8; 8] = buf.get(..8)?.try_into().ok()?;
    if u64::from_le_bytes(head) != nonce {
        return None;
    }
    let sent: [u8; 8] = buf.get(8..16)?.try_into().ok()?;
    Some(u64::from_le_bytes(sent))
}

/// xorshift64* bytes: deterministic per seed, and incompressible enough that a codec cannot
/// make throughput look better than the bytes the user would send.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_checks_the_nonce() {
        let p = Payloads::new(100, 42);
        let mut v = Vec::new();
        p.fill(&mut v, 7, 123_456);
        assert_eq!(v.len(), 100);
        assert_eq!(read_header(&v, 42), Some(123_456));
        assert_eq!(read_header(&v, 43), None);
        assert_eq!(read_header(&v[..10], 42), None);
    }

    #[test]
    fn values_differ_between_records() {
        let p = Payloads::new(64, 1);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        p.fill(&mut a, 0, 5);
        p.fill(&mut b, 1, 5);
        assert_ne!(a[HEADER_BYTES..], b[HEADER_BYTES..]);
    }

    #[test]
    fn random_bytes_have_the_length_and_spread() {
        let bytes = random_bytes(9, 4096);
        assert_eq!(bytes.len(), 4096);
        let distinct = bytes.iter().collect::<std::collections::HashSet<_>>().len();
        assert!(distinct > 200, "{distinct} distinct byte values");
    }
}
