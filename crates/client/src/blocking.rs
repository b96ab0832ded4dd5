use bytes::Bytes;
use quarry_proto::LinearSpace;
use quarry_proto::PageRead;
use quarry_proto::{GlobalBlockAddr, GlobalPageAddr, NodeEntry, NodeId, NodeInfo, RoutesInfo};

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

    /// See [`Client::routes`].
    pub fn routes(&self, node: NodeId) -> Result<RoutesInfo, ClientError> {
        self.runtime.block_on(self.client.routes(node))
    }

    /// See [`Client::linear_space`].
    pub fn linear_space(&self) -> Result<LinearSpace, ClientError> {
        self.runtime.block_on(self.client.linear_space())
    }

    /// See [`Client::read_linear`].
    pub fn read_linear(
        &self,
        space: &LinearSpace,
        first: u64,
        count: u64,
        queue_depth: usize,
    ) -> Result<Vec<PageRead>, ClientError> {
        self.runtime
            .block_on(self.client.read_linear(space, first, count, queue_depth))
    }

    /// See [`Client::write_linear`].
    pub fn write_linear(
        &self,
        space: &LinearSpace,
        first: u64,
        data: &[u8],
        queue_depth: usize,
    ) -> Result<u64, ClientError> {
        self.runtime
            .block_on(self.client.write_linear(space, first, data, queue_depth))
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ClientError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ClientError::Runtime)
}
