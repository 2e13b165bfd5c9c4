//! Typed settings values parsed from flags and `OXBOW_*` environment variables.

use oxbow_segment_writer::internal_auth::Secrets;
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::str::FromStr;

/// Largest `--internal-auth-secret-file` read: two secrets are a few hundred bytes; a path
/// to something else (a device, a log) must not make the broker read it whole.
const SECRET_FILE_BYTES_MAX: u64 = 64 << 10;

/// Reads `--internal-auth-secret-file` (see [`Secrets::from_file_contents`]). The error
/// names the flag and the path, never a byte of the file.
pub fn read_internal_auth_secrets(path: &Path) -> Result<Secrets, String> {
    let bad = |why: String| format!("--internal-auth-secret-file {}: {why}", path.display());
    let file = std::fs::File::open(path).map_err(|e| bad(format!("cannot open: {e}")))?;
    let mut contents = Vec::new();
    file.take(SECRET_FILE_BYTES_MAX + 1)
        .read_to_end(&mut contents)
        .map_err(|e| bad(format!("cannot read: {e}")))?;
    if contents.len() as u64 > SECRET_FILE_BYTES_MAX {
        return Err(bad(format!(
            "larger than {SECRET_FILE_BYTES_MAX} bytes; expected one or two lines"
        )));
    }
    let secrets = Secrets::from_file_contents(&contents).map_err(|e| bad(e.to_string()));
    // Best effort: overwritten rather than left as is in freed memory.
    contents.fill(0);
    let secrets = secrets?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(path = %path.display(),
                    "--internal-auth-secret-file is readable by other users; chmod 600 it");
            }
        }
    }
    Ok(secrets)
}

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
    fn internal_auth_secret_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, contents: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, contents).expect("write");
            p
        };
        let secret = "s3cr3t-0123456789abcdef0123456789abcdef";
        let ok = write("ok", format!("{secret}\n").as_bytes());
        let read = read_internal_auth_secrets(&ok).expect("a good file");
        assert!(
            !format!("{read:?}").contains("s3cr3t"),
            "Debug shows the secret"
        );
        let rotating = write("rotating", format!("{secret}\n{secret}-old\n").as_bytes());
        assert!(read_internal_auth_secrets(&rotating).is_ok());
        for (path, why) in [
            (dir.path().join("absent"), "cannot open"),
            (write("short", b"s3cr3t\n"), "at least 32"),
            (write("empty", b"\n\n"), "at least 32"),
            (
                write(
                    "three",
                    format!("{secret}\n{secret}\n{secret}\n").as_bytes(),
                ),
                "at most two",
            ),
            (write("huge", &vec![b'x'; 70 << 10]), "larger than"),
            (dir.path().to_path_buf(), "cannot read"),
        ] {
            let err = read_internal_auth_secrets(&path).expect_err(why);
            assert!(err.starts_with("--internal-auth-secret-file "), "{err}");
            assert!(err.contains(why), "{err}");
            assert!(!err.contains("s3cr3t"), "the secret leaked: {err}");
        }
    }

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
