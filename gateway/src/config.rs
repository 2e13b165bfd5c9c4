//! Typed settings values parsed from flags and `OXBOW_*` environment variables.

use std::fmt;
use std::str::FromStr;

/// A size in bytes, written as `1048576`, `512KiB`, `16MiB`, `2GiB` (also `KB`/`MB`/`GB`,
/// which mean the same powers of 1024 here, as in Kafka's docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn as_u64(self) -> u64 {
        self.0
    }
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(split);
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("'{s}' is not a size (examples: 1048576, 512KiB, 16MiB, 2GiB)"))?;
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            other => {
                return Err(format!(
                    "unknown size unit '{other}' in '{s}' (use KiB, MiB, GiB)"
                ))
            }
        };
        n.checked_mul(mult)
            .map(ByteSize)
            .ok_or_else(|| format!("'{s}' is too large"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!("100".parse::<ByteSize>(), Ok(ByteSize(100)));
        assert_eq!("16MiB".parse::<ByteSize>(), Ok(ByteSize(16 << 20)));
        assert_eq!("2GiB".parse::<ByteSize>(), Ok(ByteSize(2 << 30)));
        assert_eq!("512kb".parse::<ByteSize>(), Ok(ByteSize(512 << 10)));
        assert!("lots".parse::<ByteSize>().is_err());
        assert!("5 parsecs".parse::<ByteSize>().is_err());
        assert!("99999999999999999999".parse::<ByteSize>().is_err());
    }
}
