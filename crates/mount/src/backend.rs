//! The object operations the file system needs, as a trait of its own, so
//! the mount does not depend on how the store is put together (in-process
//! nodes today, a network client later).

use std::future::Future;

use bytes::Bytes;
use quarry_store_api::{
    BucketName, Chunking, Condition, Manifest, ObjectKey, ObjectStore, Result, StoreNode,
};
use tokio::io::AsyncRead;

/// What the mount needs to know of one object version: no chunk list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The key.
    pub key: ObjectKey,
    /// The version (grows with every put of the key, across deletes).
    pub version: u64,
    /// Size in bytes.
    pub size_bytes: u64,
    /// When this version was created (ms since the Unix epoch).
    pub created_unix_ms: u64,
}

impl From<&Manifest> for ObjectMeta {
    fn from(m: &Manifest) -> Self {
        Self {
            key: m.key().clone(),
            version: m.version(),
            size_bytes: m.size(),
            created_unix_ms: m.created_unix_ms(),
        }
    }
}

/// An object store as the mount uses it. Every method has the meaning of
/// the `quarry_store_api::ObjectStore` method of the same name (see
/// `docs/store.md`); errors are the store's, so the mount can map them to
/// errno values.
///
/// Futures must be `Send`: the mount drives them on a tokio runtime from
/// FUSE threads, and spawns read-ahead.
pub trait ObjectBackend: Send + Sync + 'static {
    /// Every bucket, by name.
    fn buckets(&self) -> impl Future<Output = Result<Vec<BucketName>>> + Send;

    /// Creates a bucket with the store's default chunking.
    fn create_bucket(&self, bucket: &BucketName) -> impl Future<Output = Result<()>> + Send;

    /// Deletes an empty bucket.
    fn delete_bucket(&self, bucket: &BucketName) -> impl Future<Output = Result<()>> + Send;

    /// The current version of an object.
    fn head(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<ObjectMeta>> + Send;

    /// Bytes `offset .. offset + len` of the current version (cut at its
    /// end), all from the version returned with them.
    fn get_range(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> impl Future<Output = Result<(ObjectMeta, Bytes)>> + Send;

    /// [`ObjectBackend::get_range`] as pieces whose concatenation is the
    /// bytes (a store's chunks), for a reader that serves them a piece at a
    /// time and so never joins them.
    fn get_range_pieces(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> impl Future<Output = Result<(ObjectMeta, Vec<Bytes>)>> + Send {
        async move {
            let (meta, data) = self.get_range(bucket, key, offset, len).await?;
            Ok((meta, vec![data]))
        }
    }

    /// Stores `data` as a new version of `key` if `condition` holds.
    fn put_bytes(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        data: Bytes,
        condition: Condition,
    ) -> impl Future<Output = Result<ObjectMeta>> + Send;

    /// Stores what `source` yields (to its end) as a new version of `key`
    /// if `condition` holds.
    fn put_reader<R: AsyncRead + Send + Unpin>(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        source: R,
        condition: Condition,
    ) -> impl Future<Output = Result<ObjectMeta>> + Send;

    /// Deletes an object if `condition` holds; returns the deleted version.
    fn delete(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        condition: Condition,
    ) -> impl Future<Output = Result<ObjectMeta>> + Send;

    /// Up to `limit` current objects of `bucket` whose keys start with
    /// `prefix`, after `after`, in key (byte) order.
    fn list(
        &self,
        bucket: &BucketName,
        prefix: &str,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ObjectMeta>>> + Send;
}

impl<N: StoreNode> ObjectBackend for ObjectStore<N> {
    async fn buckets(&self) -> Result<Vec<BucketName>> {
        Ok(ObjectStore::buckets(self)
            .await?
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }

    async fn create_bucket(&self, bucket: &BucketName) -> Result<()> {
        ObjectStore::create_bucket(self, bucket, Chunking::default()).await?;
        Ok(())
    }

    async fn delete_bucket(&self, bucket: &BucketName) -> Result<()> {
        ObjectStore::delete_bucket(self, bucket).await
    }

    async fn head(&self, bucket: &BucketName, key: &ObjectKey) -> Result<ObjectMeta> {
        Ok(ObjectMeta::from(
            &ObjectStore::head(self, bucket, key).await?,
        ))
    }

    async fn get_range(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<(ObjectMeta, Bytes)> {
        let (m, data) = ObjectStore::get_range(self, bucket, key, offset, len).await?;
        Ok((ObjectMeta::from(&m), data))
    }

    async fn get_range_pieces(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<(ObjectMeta, Vec<Bytes>)> {
        let (m, pieces) = ObjectStore::get_range_pieces(self, bucket, key, offset, len).await?;
        Ok((ObjectMeta::from(&m), pieces))
    }

    async fn put_bytes(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        data: Bytes,
        condition: Condition,
    ) -> Result<ObjectMeta> {
        let m = ObjectStore::put_bytes(self, bucket, key, &data, condition).await?;
        Ok(ObjectMeta::from(&m))
    }

    async fn put_reader<R: AsyncRead + Send + Unpin>(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        source: R,
        condition: Condition,
    ) -> Result<ObjectMeta> {
        let m = ObjectStore::put(self, bucket, key, source, condition).await?;
        Ok(ObjectMeta::from(&m))
    }

    async fn delete(
        &self,
        bucket: &BucketName,
        key: &ObjectKey,
        condition: Condition,
    ) -> Result<ObjectMeta> {
        Ok(ObjectMeta::from(
            &ObjectStore::delete(self, bucket, key, condition).await?,
        ))
    }

    async fn list(
        &self,
        bucket: &BucketName,
        prefix: &str,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Result<Vec<ObjectMeta>> {
        Ok(ObjectStore::list(self, bucket, prefix, after, limit)
            .await?
            .iter()
            .map(ObjectMeta::from)
            .collect())
    }
}
