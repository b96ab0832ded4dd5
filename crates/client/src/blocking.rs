use bytes::Bytes;
use quarry_device::PageRead;
use quarry_proto::{GlobalBlockAddr, GlobalPageAddr, NodeEntry, NodeId, NodeInfo};

use crate::{Client, ClientError, ClusterFile};

/// A blocking face over [`Client`] for scripts and simple tools: each call runs
/// on a private single-threaded runtime and returns when answered.
pub struct BlockingClient {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl BlockingClient {
    /// Connects to the node at `addr`.
    pub fn connect(addr: &str) -> Result<BlockingClient, ClientError> {
        let runtime = runtime()?;
        let client = runtime.block_on(Client::connect(addr))?;
        Ok(BlockingClient { runtime, client })
    }

    /// Connects to the first member of `cluster` that answers.
    pub fn connect_cluster(cluster: &ClusterFile) -> Result<BlockingClient, ClientError> {
        let runtime = runtime()?;
        let client = runtime.block_on(Client::connect_cluster(cluster))?;
        Ok(BlockingClient { runtime, client })
    }

    /// The async client underneath.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// See [`Client::ping`].
    pub fn ping(&self) -> Result<(), ClientError> {
        self.runtime.block_on(self.client.ping())
    }

    /// See [`Client::read_page`].
    pub fn read_page(&self, addr: GlobalPageAddr) -> Result<PageRead, ClientError> {
        self.runtime.block_on(self.client.read_page(addr))
    }

    /// See [`Client::program_page`].
    pub fn program_page(
        &self,
        addr: GlobalPageAddr,
        data: Bytes,
        oob: Bytes,
    ) -> Result<(), ClientError> {
        self.runtime
            .block_on(self.client.program_page(addr, data, oob))
    }

    /// See [`Client::erase_block`].
    pub fn erase_block(&self, addr: GlobalBlockAddr) -> Result<(), ClientError> {
        self.runtime.block_on(self.client.erase_block(addr))
    }

    /// See [`Client::node_info`].
    pub fn node_info(&self, node: NodeId) -> Result<NodeInfo, ClientError> {
        self.runtime.block_on(self.client.node_info(node))
    }

    /// See [`Client::cluster`].
    pub fn cluster(&self) -> Result<Vec<NodeEntry>, ClientError> {
        self.runtime.block_on(self.client.cluster())
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ClientError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ClientError::Runtime)
}
