use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quarry_device::DeviceConfig;
use quarry_fabric::FabricConfig;
use quarry_kernels::{ReadSetting, ReadTuner};
use quarry_proto::{NodeId, SessionLimits};
use serde::{Deserialize, Serialize};

use crate::NodeError;

/// One node's configuration, read from TOML:
///
/// ```toml
/// cluster = "lab"             # nodes of other clusters are refused links
/// id = 0
/// listen = "127.0.0.1:7400"
/// data_dir = "node0"          # relative to the config file's folder
/// [device]
/// backend = "mem"
/// [[peers]]
/// id = 1
/// addr = "127.0.0.1:7401"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// The cluster's name, the same on every member (default `quarry`). The
    /// fabric refuses links with nodes of any other cluster, so two clusters
    /// on one network never mix even when one reuses the other's addresses.
    #[serde(default = "default_cluster_name")]
    pub cluster: String,
    /// This node's id, unique in the cluster.
    pub id: NodeId,
    /// Listen address, `host:port` (port 0 picks a free port).
    pub listen: String,
    /// Folder for the device's files and metadata.
    pub data_dir: PathBuf,
    /// The device (`quarry_device::DeviceConfig`).
    #[serde(default)]
    pub device: DeviceConfig,
    /// The nodes this node has a fabric link to (its neighbours). Every
    /// other member is found by flooding discovery and reached hop by hop;
    /// listing every member makes a full mesh.
    #[serde(default)]
    pub peers: Vec<PeerConfig>,
    /// Bounds and timeouts; every field has a default.
    #[serde(default)]
    pub limits: NodeLimits,
    /// Raw pages or managed storage (the `[storage]` table).
    #[serde(default)]
    pub storage: StorageConfig,
    /// How the node reads its data into kernels (the `[compute]` table).
    #[serde(default)]
    pub compute: ComputeConfig,
    /// Where the memcached face listens, `host:port`; none: no memcached
    /// port (the key-value service still answers Quarry's own calls).
    #[serde(default)]
    pub memcached_listen: Option<String>,
    /// The key-value tenants and settings (the `[kv]` table).
    #[serde(default)]
    pub kv: quarry_kv::KvConfig,
}

fn default_cluster_name() -> String {
    quarry_fabric::DEFAULT_CLUSTER_NAME.to_string()
}

/// The `[compute]` table: how local runs read pages into kernels.
///
/// ```toml
/// [compute]
/// read_depth = 2   # reads at the disk at once, for the whole node
/// read_ahead = 2   # reads held beyond those, waiting for the kernels
/// ```
///
/// Both or neither: with both, the node's read tuner is pinned to that
/// setting (benchmarks sweep settings this way); with neither (the
/// default), it picks them by measuring. Values must be on the tuner's grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ComputeConfig {
    /// Reads at the disk at once, for the whole node.
    pub read_depth: Option<usize>,
    /// Reads held beyond those (read, waiting for the kernels), for the
    /// whole node.
    pub read_ahead: Option<usize>,
}

impl ComputeConfig {
    /// The pinned read setting, if any; an error says what is wrong.
    pub fn read_setting(&self) -> Result<Option<ReadSetting>, String> {
        let allowed = |values: &[usize]| {
            values
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (depth, read_ahead) = match (self.read_depth, self.read_ahead) {
            (None, None) => return Ok(None),
            (Some(d), Some(b)) => (d, b),
            (Some(_), None) | (None, Some(_)) => {
                return Err(
                    "compute.read_depth and compute.read_ahead go together: set both \
                     (to pin the read setting) or neither (the node tunes it)"
                        .into(),
                )
            }
        };
        if !ReadTuner::depths().contains(&depth) {
            return Err(format!(
                "compute.read_depth = {depth} is not one of the tuner's depths: {}",
                allowed(ReadTuner::depths())
            ));
        }
        if !ReadTuner::read_aheads().contains(&read_ahead) {
            return Err(format!(
                "compute.read_ahead = {read_ahead} is not one of the tuner's read-aheads: {}",
                allowed(ReadTuner::read_aheads())
            ));
        }
        Ok(Some(ReadSetting { depth, read_ahead }))
    }

    /// The node's read tuner: pinned, or adaptive by default.
    pub fn tuner(&self) -> Result<ReadTuner, String> {
        match self.read_setting()? {
            None => Ok(ReadTuner::new()),
            Some(s) => ReadTuner::pinned(s)
                .ok_or_else(|| format!("read setting {s:?} is not on the tuner's grid")),
        }
    }
}

/// Whether the node serves its device's pages as they are, or runs the
/// space manager, the object store and block volumes on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StorageMode {
    /// Page reads, programs and erases go to the device as sent (issue 1's
    /// face, and what the page benchmarks measure). No object store.
    #[default]
    Raw,
    /// A space manager owns the device (log-structured writes, garbage
    /// collection, wear leveling, crash recovery); the object store and
    /// block volumes run on it. Raw page reads still work (they show what
    /// is on flash); raw programs and erases are refused, since they would
    /// corrupt what the space manager keeps there.
    Managed,
}

/// The `[storage]` table.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Raw or managed.
    pub mode: StorageMode,
    /// The space manager's tunables (managed mode).
    pub volume: quarry_volume::VolumeConfig,
}

/// One peer of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// Its id.
    pub id: NodeId,
    /// Its listen address, `host:port`.
    pub addr: String,
}

/// A node's bounds and timeouts (the `[limits]` table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeLimits {
    /// Open client and peer connections; further connections are closed at once.
    pub max_connections: usize,
    /// Requests in flight per connection (also per outgoing link).
    pub max_in_flight: usize,
    /// Time to connect to a peer before it counts as unreachable.
    pub connect_timeout_ms: u64,
    /// Time a forwarded request may take.
    pub request_timeout_ms: u64,
    /// Most fabric links a request may cross.
    pub max_hops: u8,
    /// After a failed connect to a peer, fail requests to it at once for this long.
    pub retry_backoff_ms: u64,
    /// On shutdown, time the requests in flight get to finish.
    pub shutdown_grace_ms: u64,
    /// A fabric link with nothing to send sends a keepalive this often.
    pub keepalive_interval_ms: u64,
    /// A fabric link silent this long is declared dead and routed around.
    pub link_dead_after_ms: u64,
    /// How long a request waits for a route to its node to (re)appear.
    pub route_wait_ms: u64,
    /// Receive buffer of each link's control channel, in 2 KiB fragments.
    pub link_window_fragments: u32,
    /// Size of the fragments bulk data crosses a link in (what this node
    /// receives; its neighbours cut to it).
    pub link_data_fragment_bytes: u32,
    /// Receive buffer of each link's data channel, bytes.
    pub link_data_window_bytes: u32,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            max_connections: 256,
            max_in_flight: 1024,
            connect_timeout_ms: 1500,
            request_timeout_ms: 30_000,
            max_hops: 8,
            retry_backoff_ms: 500,
            shutdown_grace_ms: 5000,
            keepalive_interval_ms: 200,
            link_dead_after_ms: 1000,
            route_wait_ms: 1000,
            link_window_fragments: 128,
            link_data_fragment_bytes: quarry_fabric::DEFAULT_DATA_FRAGMENT_BYTES,
            link_data_window_bytes: quarry_fabric::DEFAULT_DATA_WINDOW_BYTES,
        }
    }
}

impl NodeLimits {
    /// Limits for served connections and outgoing links.
    pub fn session_limits(&self) -> SessionLimits {
        SessionLimits {
            max_in_flight: self.max_in_flight,
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            request_timeout: Duration::from_millis(self.request_timeout_ms),
        }
    }

    /// The fabric's configuration for a node of `cluster`.
    pub fn fabric_config(&self, cluster: &str) -> FabricConfig {
        FabricConfig {
            cluster: cluster.to_string(),
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            request_timeout: Duration::from_millis(self.request_timeout_ms),
            max_hops: self.max_hops,
            retry_backoff: Duration::from_millis(self.retry_backoff_ms),
            keepalive_interval: Duration::from_millis(self.keepalive_interval_ms),
            dead_after: Duration::from_millis(self.link_dead_after_ms),
            route_wait: Duration::from_millis(self.route_wait_ms),
            window_fragments: self.link_window_fragments,
            data_fragment_bytes: self.link_data_fragment_bytes,
            data_window_bytes: self.link_data_window_bytes,
            max_streams_per_link: self.max_in_flight.max(1024),
            max_nodes: quarry_fabric::MAX_MEMBERS,
        }
    }
}

fn check_addr(what: &str, addr: &str) -> Result<(), String> {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(format!("{what} {addr:?} is not host:port"));
    };
    if host.is_empty() {
        return Err(format!("{what} {addr:?} has no host"));
    }
    if port.parse::<u16>().is_err() {
        return Err(format!(
            "{what} {addr:?}: port {port:?} is not a number in 0..=65535"
        ));
    }
    Ok(())
}

impl NodeConfig {
    /// Reads and checks a TOML file. A relative `data_dir` (and device `path`)
    /// is taken relative to the file's folder. Errors name the file and what
    /// was wrong with it.
    pub fn load(path: &Path) -> Result<NodeConfig, NodeError> {
        let config_error = |reason: String| NodeError::Config {
            path: path.display().to_string(),
            reason,
        };
        let text =
            std::fs::read_to_string(path).map_err(|e| config_error(format!("cannot read: {e}")))?;
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        NodeConfig::from_toml(&text, base).map_err(|e| match e {
            NodeError::Config { reason, .. } => config_error(reason),
            other => other,
        })
    }

    /// Parses and checks TOML text; relative paths are taken relative to `base_dir`.
    pub fn from_toml(text: &str, base_dir: &Path) -> Result<NodeConfig, NodeError> {
        let config_error = |reason: String| NodeError::Config {
            path: "<text>".to_string(),
            reason,
        };
        let mut config: NodeConfig =
            toml::from_str(text).map_err(|e| config_error(e.to_string()))?;
        if config.data_dir.is_relative() {
            config.data_dir = base_dir.join(&config.data_dir);
        }
        if let Some(device_path) = &config.device.path {
            if device_path.is_relative() {
                config.device.path = Some(base_dir.join(device_path));
            }
        }
        config.validate().map_err(config_error)?;
        Ok(config)
    }

    /// The fabric's configuration: this node's cluster and its limits.
    pub fn fabric_config(&self) -> FabricConfig {
        self.limits.fabric_config(&self.cluster)
    }

    /// Checks addresses, peer ids and limits; the error says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        quarry_fabric::check_cluster_name(&self.cluster)?;
        check_addr("listen address", &self.listen)?;
        if self.id == quarry_proto::ENTRY_NODE {
            return Err(format!(
                "node id {} is reserved (it means \"the entry node\" in requests)",
                self.id
            ));
        }
        let mut seen = HashSet::new();
        for peer in &self.peers {
            check_addr(&format!("peer {} address", peer.id), &peer.addr)?;
            if peer.id == self.id {
                return Err(format!(
                    "peer {} at {} has this node's own id",
                    peer.id, peer.addr
                ));
            }
            if !seen.insert(peer.id) {
                return Err(format!("duplicate peer id {}", peer.id));
            }
        }
        if self.peers.len() >= quarry_fabric::MAX_MEMBERS {
            return Err(format!(
                "{} peers, at most {} allowed",
                self.peers.len(),
                quarry_fabric::MAX_MEMBERS - 1
            ));
        }
        self.storage
            .volume
            .validate()
            .map_err(|e| format!("storage.volume: {e}"))?;
        self.compute.read_setting()?;
        if let Some(addr) = &self.memcached_listen {
            check_addr("memcached listen address", addr)?;
        }
        self.kv.validate()?;
        let limits = &self.limits;
        if limits.max_connections == 0 {
            return Err("limits.max_connections must be above zero".into());
        }
        if limits.shutdown_grace_ms == 0 {
            return Err("limits.shutdown_grace_ms must be above zero".into());
        }
        limits
            .session_limits()
            .validate()
            .map_err(|e| format!("limits: {e}"))?;
        limits
            .fabric_config(&self.cluster)
            .validate()
            .map_err(|e| format!("limits: {e}"))?;
        Ok(())
    }
}
