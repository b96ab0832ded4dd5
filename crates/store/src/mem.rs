//! An object store whose nodes keep everything in memory, for tests,
//! examples and the store's benchmark.

use std::sync::Arc;

use quarry_store_api::{NodeId, ObjectStore, Result};

use crate::data::MemChunkStore;
use crate::node::NodeStore;
use crate::table::MemTableStore;

/// An [`ObjectStore`] whose nodes keep everything in memory.
pub type MemObjectStore = ObjectStore<NodeStore<Arc<MemTableStore>, Arc<MemChunkStore>>>;

/// A store over nodes `ids`, each with in-memory tables and 8 KiB pages.
pub async fn mem_object_store(ids: impl IntoIterator<Item = NodeId>) -> Result<MemObjectStore> {
    let mut nodes = Vec::new();
    for id in ids {
        let (node, _) = NodeStore::open(
            id,
            Arc::new(MemTableStore::new()),
            Arc::new(MemChunkStore::default()),
        )
        .await?;
        nodes.push(Arc::new(node));
    }
    ObjectStore::new(nodes)
}
