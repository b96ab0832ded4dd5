use std::path::{Path, PathBuf};

use quarry_proto::NodeId;
use serde::{Deserialize, Serialize};

use crate::ClientError;

/// Environment variable naming the cluster file.
pub const CLUSTER_ENV: &str = "QUARRY_CLUSTER";
/// Where `quarry up` puts the cluster file by default, relative to the working directory.
pub const DEFAULT_CLUSTER_PATH: &str = ".quarry/cluster.toml";
/// Bound on the members one cluster file may list.
pub const MAX_CLUSTER_NODES: usize = 1024;

/// How clients find a cluster: the members and their addresses (written by
/// `quarry up`, or by hand for a real deployment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// The members.
    #[serde(default)]
    pub nodes: Vec<ClusterNode>,
}

/// One member in a cluster file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterNode {
    /// Node id.
    pub id: NodeId,
    /// Listen address, `host:port`.
    pub addr: String,
    /// The node's configuration file, for clusters started by `quarry up`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<PathBuf>,
    /// The node's log file, for clusters started by `quarry up`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
    /// The node's process id, for clusters started by `quarry up`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The node's memcached port, `host:port`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcached: Option<String>,
}

impl ClusterFile {
    /// The cluster file to use: `explicit` if given, else `$QUARRY_CLUSTER`, else
    /// `./.quarry/cluster.toml`.
    pub fn locate(explicit: Option<&Path>) -> PathBuf {
        if let Some(path) = explicit {
            return path.to_path_buf();
        }
        match std::env::var_os(CLUSTER_ENV) {
            Some(path) if !path.is_empty() => PathBuf::from(path),
            _ => PathBuf::from(DEFAULT_CLUSTER_PATH),
        }
    }

    /// Reads and checks a cluster file.
    pub fn load(path: &Path) -> Result<ClusterFile, ClientError> {
        let fail = |reason: String| ClientError::ClusterFile {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                fail("not found; start a cluster with `quarry up`, or pass --cluster FILE or set QUARRY_CLUSTER".into())
            } else {
                fail(e.to_string())
            }
        })?;
        let file: ClusterFile = toml::from_str(&text).map_err(|e| fail(e.to_string()))?;
        file.validate().map_err(fail)?;
        Ok(file)
    }

    /// Writes the file durably: a crash or power loss leaves the old file
    /// or the new one ([`quarry_geometry::write_file_durably`]).
    pub fn save(&self, path: &Path) -> Result<(), ClientError> {
        let fail = |reason: String| ClientError::ClusterFile {
            path: path.to_path_buf(),
            reason,
        };
        self.validate().map_err(fail)?;
        let text = toml::to_string_pretty(self).map_err(|e| fail(e.to_string()))?;
        quarry_geometry::write_file_durably(path, text.as_bytes()).map_err(|e| fail(e.to_string()))
    }

    fn validate(&self) -> Result<(), String> {
        if self.nodes.is_empty() {
            return Err("lists no nodes".into());
        }
        if self.nodes.len() > MAX_CLUSTER_NODES {
            return Err(format!(
                "lists {} nodes, at most {MAX_CLUSTER_NODES} are allowed",
                self.nodes.len()
            ));
        }
        let mut ids: Vec<NodeId> = self.nodes.iter().map(|n| n.id).collect();
        ids.sort_unstable();
        if let Some(pair) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("node id {} appears twice", pair[0]));
        }
        Ok(())
    }

    /// The member with this id.
    pub fn node(&self, id: NodeId) -> Option<&ClusterNode> {
        self.nodes.iter().find(|n| n.id == id)
    }
}
