//! Building the object store the broker seals into (`oxbow serve --object-store`).
//!
//! - `local` (the embedded default): a directory `{data-dir}/objects` (`object_store::local`)
//!   with fsync on every write, so a sealed object is as durable as the catalog entry that
//!   points at it, written out a step at a time (`crate::local_store`). `file:///abs/dir`
//!   names another directory.
//! - `s3://bucket[/prefix]`: S3 or any S3-compatible server through `object_store::aws`,
//!   configured from the standard AWS environment variables (`AWS_ACCESS_KEY_ID`,
//!   `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`/`AWS_DEFAULT_REGION`,
//!   `AWS_ENDPOINT_URL`/`AWS_ENDPOINT` for a custom endpoint, `AWS_ALLOW_HTTP=true` for
//!   a plain-http one). Every key lives under `prefix/`. Create-only PUTs (`PutMode::Create`)
//!   are sent as `If-None-Match: *`, which S3 (and moto) answer with 412 if the key exists.
//!
//! Retries: the sealer retries a failed upload on its next tick with everything still in the
//! WAL, so the S3 client's own retries are kept short (a few seconds of backoff, capped at
//! 2 s) — uploads resume within seconds of S3 coming back instead of after a long backoff.

use crate::error::{Error, Result};
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ObjectStore, RetryConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Where sealed objects go, parsed from `--object-store`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectStoreLocation {
    /// A local directory.
    Local(PathBuf),
    /// An S3 bucket; keys under `prefix/` (no leading or trailing slash; empty for the root).
    S3 { bucket: String, prefix: String },
}

impl std::fmt::Display for ObjectStoreLocation {
    /// `s3://bucket/prefix`, or the directory's path.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectStoreLocation::Local(dir) => write!(f, "{}", dir.display()),
            ObjectStoreLocation::S3 { bucket, prefix } if prefix.is_empty() => {
                write!(f, "s3://{bucket}")
            }
            ObjectStoreLocation::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// Parses an `--object-store` value: `local`, `file:///abs/dir` or `s3://bucket[/prefix]`.
pub fn parse_location(url: &str, data_dir: &Path) -> Result<ObjectStoreLocation> {
    let url = url.trim();
    let bad = |why: &str| {
        Error::ObjectStore(format!(
            "--object-store '{url}': {why} (expected `local`, `file:///dir` or `s3://bucket/prefix`)"
        ))
    };
    if url.is_empty() || url == "local" {
        return Ok(ObjectStoreLocation::Local(data_dir.join("objects")));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(bad("not a URL"));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "file" => {
            if !rest.starts_with('/') || rest.len() < 2 {
                return Err(bad("a file URL needs an absolute directory"));
            }
            Ok(ObjectStoreLocation::Local(PathBuf::from(rest)))
        }
        "s3" | "s3a" => {
            if rest.contains(['?', '#']) {
                return Err(bad("query strings and fragments are not supported"));
            }
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("missing bucket name"));
            }
            if !bucket
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            {
                return Err(bad("invalid bucket name"));
            }
            let prefix = prefix.trim_matches('/');
            if !prefix.is_empty() {
                ObjectPath::parse(prefix).map_err(|e| bad(&format!("invalid prefix: {e}")))?;
            }
            Ok(ObjectStoreLocation::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.to_string(),
            })
        }
        other => Err(bad(&format!("unknown scheme '{other}'"))),
    }
}

/// Opens the object store named by an `--object-store` value (see the module docs).
pub fn from_url(url: &str, data_dir: &Path) -> Result<Arc<dyn ObjectStore>> {
    match parse_location(url, data_dir)? {
        ObjectStoreLocation::Local(dir) => local(&dir),
        ObjectStoreLocation::S3 { bucket, prefix } => s3(&bucket, &prefix),
    }
}

/// An S3 store for `bucket`, configured from the AWS environment variables, keys under
/// `prefix/`.
pub fn s3(bucket: &str, prefix: &str) -> Result<Arc<dyn ObjectStore>> {
    let store = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: 6,
            retry_timeout: Duration::from_secs(15),
        })
        .build()
        .map_err(|e| Error::ObjectStore(format!("--object-store s3://{bucket}: {e}")))?;
    if prefix.is_empty() {
        Ok(Arc::new(store))
    } else {
        Ok(Arc::new(PrefixStore::new(store, prefix)))
    }
}

/// A local-directory object store rooted at `dir` (created if missing).
pub fn local(dir: &Path) -> Result<Arc<dyn ObjectStore>> {
    std::fs::create_dir_all(dir)?;
    let store = LocalFileSystem::new_with_prefix(dir)
        .map_err(|e| Error::ObjectStore(format!("opening {}: {e}", dir.display())))?
        .with_fsync(true);
    Ok(Arc::new(crate::local_store::PacedLocalStore::new(store)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<ObjectStoreLocation> {
        parse_location(url, Path::new("/data"))
    }

    fn s3(bucket: &str, prefix: &str) -> ObjectStoreLocation {
        ObjectStoreLocation::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
        }
    }

    #[test]
    fn local_default_and_file_urls() {
        let objects = ObjectStoreLocation::Local(PathBuf::from("/data/objects"));
        assert_eq!(parse("local").ok(), Some(objects.clone()));
        assert_eq!(parse("").ok(), Some(objects));
        assert_eq!(
            parse("file:///var/oxbow").ok(),
            Some(ObjectStoreLocation::Local(PathBuf::from("/var/oxbow")))
        );
        assert!(parse("file://relative").is_err());
    }

    #[test]
    fn s3_bucket_and_prefix() {
        assert_eq!(parse("s3://bucket").ok(), Some(s3("bucket", "")));
        assert_eq!(parse("s3://bucket/").ok(), Some(s3("bucket", "")));
        assert_eq!(parse("s3://b-1.x/oxbow").ok(), Some(s3("b-1.x", "oxbow")));
        assert_eq!(parse("s3://b/a/b/").ok(), Some(s3("b", "a/b")));
        assert_eq!(parse("S3a://b//a").ok(), Some(s3("b", "a")));
    }

    #[test]
    fn errors_name_the_flag() {
        for bad in [
            "gs://bucket/x",
            "bucket/prefix",
            "s3://",
            "s3:///prefix",
            "s3://bu cket",
            "s3://b/a//c",
            "s3://b/../c",
            "s3://b/p?x=1",
        ] {
            let err = parse(bad).expect_err(bad).to_string();
            assert!(err.contains("--object-store"), "{bad}: {err}");
        }
        let err = parse("gs://bucket").expect_err("gs").to_string();
        assert!(err.contains("unknown scheme 'gs'"), "{err}");
    }

    #[test]
    fn s3_builds_from_env_without_network() {
        // Building only validates configuration; no request is sent.
        assert!(from_url("s3://bucket/prefix", Path::new("/data")).is_ok());
    }
}
