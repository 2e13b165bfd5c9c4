//! Choosing the backend from `--metadata`: `embedded` (the default: a `redb` file in the data
//! directory) or `etcd://host1:2379,host2:2379,host3:2379[/cluster-name]`.

use crate::embedded::EmbeddedStore;
use crate::error::{Error, Result};
use crate::etcd::{EtcdSettings, EtcdStore};
use crate::store::MetadataStore;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

/// Cluster name used when an etcd URL names none.
pub const DEFAULT_CLUSTER: &str = "default";

/// Where cluster metadata lives.
#[derive(Clone, Debug)]
pub enum MetadataLocation {
    /// `{data-dir}/metadata.redb` on this node.
    Embedded,
    /// An etcd cluster.
    Etcd(EtcdSettings),
}

impl FromStr for MetadataLocation {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if s == "embedded" {
            return Ok(MetadataLocation::Embedded);
        }
        let Some(rest) = s.strip_prefix("etcd://") else {
            return Err(Error::InvalidRequest(format!(
                "--metadata '{s}': expected 'embedded' or 'etcd://host:port[,host:port...][/cluster]'"
            )));
        };
        let (hosts, cluster) = match rest.split_once('/') {
            Some((h, c)) if !c.is_empty() => (h, c),
            Some((h, _)) => (h, DEFAULT_CLUSTER),
            None => (rest, DEFAULT_CLUSTER),
        };
        if cluster.contains('/') {
            return Err(Error::InvalidRequest(format!(
                "--metadata '{s}': the cluster name cannot contain '/'"
            )));
        }
        let endpoints: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|h| format!("http://{h}"))
            .collect();
        if endpoints.is_empty() {
            return Err(Error::InvalidRequest(format!(
                "--metadata '{s}': no etcd endpoints"
            )));
        }
        Ok(MetadataLocation::Etcd(EtcdSettings::new(
            endpoints, cluster,
        )))
    }
}

/// Opens the store at `location`; `data_dir` holds the embedded file.
pub async fn open_store(
    location: &MetadataLocation,
    data_dir: &Path,
) -> Result<Arc<dyn MetadataStore>> {
    match location {
        MetadataLocation::Embedded => {
            let path = data_dir.join("metadata.redb");
            Ok(Arc::new(EmbeddedStore::open(&path).map_err(|e| {
                Error::Storage(format!(
                    "{e} (is another broker using this data directory?)"
                ))
            })?))
        }
        MetadataLocation::Etcd(settings) => {
            Ok(Arc::new(EtcdStore::connect(settings.clone()).await?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_metadata_urls() {
        assert!(matches!(
            "embedded".parse::<MetadataLocation>(),
            Ok(MetadataLocation::Embedded)
        ));
        let Ok(MetadataLocation::Etcd(s)) = "etcd://h1:2379,h2:2379,h3:2379/prod".parse() else {
            panic!("etcd url");
        };
        assert_eq!(s.endpoints.len(), 3);
        assert_eq!(s.endpoints[0], "http://h1:2379");
        assert_eq!(s.cluster, "prod");
        let Ok(MetadataLocation::Etcd(s)) = "etcd://h1:2379".parse() else {
            panic!("etcd url");
        };
        assert_eq!(s.cluster, DEFAULT_CLUSTER);
        assert!("zk://h".parse::<MetadataLocation>().is_err());
        assert!("etcd://".parse::<MetadataLocation>().is_err());
    }
}
