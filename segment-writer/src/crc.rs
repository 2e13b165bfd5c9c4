//! CRC-32C arithmetic: the checksum of a concatenation from the checksums of its parts
//! ([`combine`]), so a CRC already known — a record batch's own, verified when it was
//! produced — need not be computed again over the same bytes for the WAL entry or the
//! sealed object's chunk that holds them.
//!
//! Why not `crc32c::crc32c_combine`: it builds zlib's 32×32 GF(2) matrices for every call,
//! 15–33 µs each on this project's VMs (longer than the hardware CRC of the 16 KiB–1 MiB
//! batches producers send). Here a combine is one multiplication by x^(8n) modulo the
//! polynomial, with x^(2^k) precomputed: a few hundred shifts and xors, well under a
//! microsecond whatever `n`.
//!
//! Representation: CRC-32C is reflected, so bit 31 of a `u32` holds the coefficient of x^0
//! and bit 0 that of x^31; multiplying by x is a right shift, reduced by the reversed
//! polynomial when a bit falls off.

/// The Castagnoli polynomial, reversed (x^32 implied).
const POLY: u32 = 0x82F6_3B78;

/// `a(x)·b(x) mod P`.
const fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut product = 0u32;
    let mut bit = 1u32 << 31; // x^0
    while bit != 0 {
        if a & bit != 0 {
            product ^= b;
        }
        bit >>= 1;
        // b·x
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

/// `X_POW_2K[k]` = x^(2^k) mod P.
const X_POW_2K: [u32; 64] = {
    let mut t = [0u32; 64];
    t[0] = 1 << 30; // x^1
    let mut k = 1;
    while k < 64 {
        t[k] = mul_mod(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// x^(8·len) mod P: what appending `len` zero bytes multiplies a register by.
fn x_pow_8n(len: u64) -> u32 {
    let mut result = 1u32 << 31; // x^0
    let mut n = len;
    // x^(8n) = Π over the set bits k of n of x^(2^(k+3)).
    let mut k = 3;
    while n != 0 && k < 64 {
        if n & 1 != 0 {
            result = mul_mod(result, X_POW_2K[k]);
        }
        n >>= 1;
        k += 1;
    }
    result
}

/// The CRC-32C of `a ‖ b` from `crc_a` = CRC-32C(a), `crc_b` = CRC-32C(b) and `len_b` =
/// b's length in bytes. (The initial and final inversions of CRC-32C cancel out here.)
pub fn combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    mul_mod(x_pow_8n(len_b), crc_a) ^ crc_b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        // x^0 times anything is itself; the empty suffix changes nothing.
        assert_eq!(mul_mod(1 << 31, 0x1234_5678), 0x1234_5678);
        assert_eq!(combine(0xDEAD_BEEF, 0, 0), 0xDEAD_BEEF);
        let data = b"123456789";
        // CRC-32C's check value.
        assert_eq!(crc32c::crc32c(data), 0xE306_9283);
        for split in 0..=data.len() {
            let (a, b) = data.split_at(split);
            assert_eq!(
                combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len() as u64),
                0xE306_9283,
                "split at {split}"
            );
        }
    }

    #[test]
    fn agrees_with_the_crc32c_crate_on_large_lengths() {
        // Lengths the matrix method handles slowly but surely.
        for len in [1u64 << 20, (1 << 27) + 12345, u64::from(u32::MAX) + 7] {
            assert_eq!(
                combine(0x0BAD_F00D, 0x1234_5678, len),
                crc32c::crc32c_combine(0x0BAD_F00D, 0x1234_5678, len as usize),
                "len {len}"
            );
        }
    }

    proptest! {
        #[test]
        fn combine_is_the_crc_of_the_concatenation(
            a in proptest::collection::vec(any::<u8>(), 0..600),
            b in proptest::collection::vec(any::<u8>(), 0..3000),
        ) {
            let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
            prop_assert_eq!(
                combine(crc32c::crc32c(&a), crc32c::crc32c(&b), b.len() as u64),
                crc32c::crc32c(&whole)
            );
        }
    }
}
