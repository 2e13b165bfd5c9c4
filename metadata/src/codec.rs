//! The versioned value encoding shared by every backend: JSON with a version field,
//! `{"v": 1, ...fields}`.
//!
//! A reader refuses any other version (or bytes that are not such JSON) with
//! [`Error::CorruptValue`] naming the key, instead of guessing or panicking: a value written by
//! a newer build, or damaged on disk or in etcd, must stop the operation that reads it, not
//! be half-understood.

use crate::error::{Error, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The encoding version written into every value.
pub const VALUE_VERSION: u32 = 1;

/// Envelope of every stored value.
#[derive(Serialize, Deserialize)]
struct Versioned<T> {
    v: u32,
    #[serde(flatten)]
    body: T,
}

/// Encodes `value` as `{"v": VALUE_VERSION, ...}`.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(&Versioned {
        v: VALUE_VERSION,
        body: value,
    })
    .map_err(|e| Error::Storage(format!("encoding a value: {e}")))
}

/// Decodes a value stored under `key` (the key is only used to name it in errors).
pub fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T> {
    #[derive(Deserialize)]
    struct VersionOnly {
        v: u32,
    }
    let version: VersionOnly = serde_json::from_slice(bytes).map_err(|e| Error::CorruptValue {
        key: key.to_string(),
        reason: e.to_string(),
    })?;
    if version.v != VALUE_VERSION {
        return Err(Error::CorruptValue {
            key: key.to_string(),
            reason: format!(
                "unknown encoding version {} (this build reads {VALUE_VERSION})",
                version.v
            ),
        });
    }
    let value: Versioned<T> = serde_json::from_slice(bytes).map_err(|e| Error::CorruptValue {
        key: key.to_string(),
        reason: e.to_string(),
    })?;
    Ok(value.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Thing {
        a: i32,
    }

    #[test]
    fn round_trips_and_names_the_key_on_errors() {
        let bytes = encode(&Thing { a: 3 }).expect("encode");
        assert_eq!(bytes, br#"{"v":1,"a":3}"#);
        assert_eq!(
            decode::<Thing>("k", &bytes).expect("decode"),
            Thing { a: 3 }
        );
        let err = decode::<Thing>("/oxbow/c/x", br#"{"v":2,"a":3}"#).expect_err("version");
        assert!(err.to_string().contains("/oxbow/c/x"), "{err}");
        assert!(err.to_string().contains("version 2"), "{err}");
        let err = decode::<Thing>("/oxbow/c/y", b"\xff garbage").expect_err("garbage");
        assert!(err.to_string().contains("/oxbow/c/y"), "{err}");
    }
}
