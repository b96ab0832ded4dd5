//! Manifests: what an object is (its name, version, size and chunk list),
//! their binary encoding, and byte-range lookup.

use crate::chunking::Chunking;
use crate::error::{Result, StoreError};
use crate::fingerprint::Fingerprint;
use crate::name::{BucketName, ObjectKey, MAX_BUCKET_LEN, MAX_KEY_LEN};
use quarry_proto::{ByteReader, CodecError};

/// The first bytes of every encoded manifest.
pub const MANIFEST_MAGIC: [u8; 4] = *b"QMAN";
/// The encoding's format version: 1, or 2 for a manifest with a Parquet
/// layout or a note (format 1 and a trailing section). A manifest without
/// either is still written as format 1, so every manifest stored before
/// format 2 reads back, and encodes, as it was.
pub const MANIFEST_FORMAT_VERSION: u8 = 2;
/// Leaf columns a manifest's Parquet layout may name.
pub const MAX_PARQUET_COLUMNS: usize = 4096;
/// Bytes of all column paths of a layout together.
pub const MAX_COLUMN_PATHS_BYTES: usize = 256 << 10;
/// Bytes of one column path.
pub const MAX_COLUMN_PATH_BYTES: usize = 4096;
/// Bytes of a manifest's note (a put's warning).
pub const MAX_NOTE_BYTES: usize = 1024;
/// Encoded bytes of one chunk's role.
const PER_ROLE: usize = 1 + 4 + 2;
/// The longest encoded manifest: the longest names, the most chunks, the
/// longest note and the largest layout (about 11.5 MB, under the 12 MiB a
/// volume-backed table value may hold).
pub const MAX_MANIFEST_BYTES: usize = HEAD
    + MAX_BUCKET_LEN
    + MAX_KEY_LEN
    + MIDDLE
    + PER_CHUNK * MAX_MANIFEST_CHUNKS
    + 2
    + MAX_NOTE_BYTES
    + 1
    + 2
    + 2 * MAX_PARQUET_COLUMNS
    + MAX_COLUMN_PATHS_BYTES
    + PER_ROLE * MAX_MANIFEST_CHUNKS
    + TAIL;
/// Most chunks one manifest may list: 2^18, so a manifest stays under 10 MB
/// (36 bytes a chunk; 11.5 MB with a Parquet layout, [`MAX_MANIFEST_BYTES`]) and an object is at most 256 GiB with the default
/// 1 MiB chunks, 16 GiB with 64 KiB chunks, 1 TiB with 4 MiB chunks.
pub const MAX_MANIFEST_CHUNKS: usize = 1 << 18;

/// Flag bit: the object's one chunk lives on the node that holds its
/// manifest, not on the node its fingerprint names (a small object put in
/// one call: [`Manifest::with_chunk_at_manifest_node`]).
pub const FLAG_CHUNK_AT_MANIFEST_NODE: u8 = 0x01;

/// Encoded bytes before the bucket name: magic, format, flags, name lengths.
const HEAD: usize = 4 + 1 + 1 + 1 + 2;
/// Encoded bytes between the key and the chunk list.
const MIDDLE: usize = 8 + 8 + 8 + 1 + 12 + 4;
/// Encoded bytes per chunk.
const PER_CHUNK: usize = 32 + 4;
/// The trailing CRC-32C.
const TAIL: usize = 4;

/// One entry of a manifest's chunk list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkRef {
    /// The chunk's name.
    pub fingerprint: Fingerprint,
    /// Its length in bytes.
    pub len: u32,
}

/// What one chunk of a Parquet file cut by pages holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChunkRole {
    /// Bytes outside every column chunk: the leading `PAR1`, padding, page
    /// indexes and bloom filters.
    Other,
    /// The footer: file metadata, its length and the trailing `PAR1`.
    Footer,
    /// Pages of one column chunk.
    Page {
        /// The row group.
        row_group: u32,
        /// The leaf column's index (into [`ParquetLayout::columns`]).
        column: u16,
    },
}

/// What each chunk of a Parquet object cut by pages holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParquetLayout {
    /// Leaf column paths, dotted, by leaf column index.
    pub columns: Vec<String>,
    /// The role of each chunk, in object order.
    pub roles: Vec<ChunkRole>,
}

/// Part of a chunk that a byte range covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSlice {
    /// The chunk's position in the manifest.
    pub index: usize,
    /// The chunk.
    pub chunk: ChunkRef,
    /// First byte wanted, within the chunk.
    pub offset_in_chunk: u32,
    /// Bytes wanted from this chunk.
    pub len: u32,
    /// Where those bytes sit in the object.
    pub object_offset: u64,
}

/// One version of an object: immutable once committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    bucket: BucketName,
    key: ObjectKey,
    version: u64,
    size: u64,
    created_unix_ms: u64,
    chunking: Chunking,
    chunks: Vec<ChunkRef>,
    /// `starts[i]` = object offset of chunk `i` (for range lookups).
    starts: Vec<u64>,
    /// Its one chunk is held by the manifest's node (see
    /// [`FLAG_CHUNK_AT_MANIFEST_NODE`]).
    chunk_at_manifest_node: bool,
    /// Row group and column of each chunk of a Parquet file cut by pages.
    /// (Boxed, as the note: most manifests have neither.)
    layout: Option<Box<ParquetLayout>>,
    /// A warning from the put (a file that looked like Parquet and was not
    /// cut as one, and why).
    note: Option<Box<str>>,
}

impl Manifest {
    /// A manifest, checked: the chunking parameters are valid, there are at
    /// most [`MAX_MANIFEST_CHUNKS`] chunks, every chunk is non-empty and no
    /// longer than the chunking allows, and with fixed-size chunking every
    /// chunk but the last has exactly the fixed size. The size is the sum of
    /// the chunk lengths. `version` 0 means "not yet committed": the node
    /// that owns the key assigns the real one.
    pub fn new(
        bucket: BucketName,
        key: ObjectKey,
        version: u64,
        created_unix_ms: u64,
        chunking: Chunking,
        chunks: Vec<ChunkRef>,
    ) -> Result<Self> {
        chunking.validate()?;
        if chunks.len() > MAX_MANIFEST_CHUNKS {
            return Err(StoreError::TooManyChunks {
                limit: MAX_MANIFEST_CHUNKS,
            });
        }
        let max = chunking.max_chunk();
        let mut starts = Vec::with_capacity(chunks.len());
        let mut size = 0u64;
        for (i, c) in chunks.iter().enumerate() {
            let bad = |reason: String| StoreError::Malformed {
                what: "manifest",
                reason: format!("chunk {i} ({}): {reason}", c.fingerprint),
            };
            if c.len == 0 {
                return Err(bad("empty".into()));
            }
            if c.len > max {
                return Err(bad(format!(
                    "{} bytes, longer than the chunking's {max}",
                    c.len
                )));
            }
            if let Chunking::Fixed { size: fixed } = chunking {
                if i + 1 < chunks.len() && c.len != fixed {
                    return Err(bad(format!(
                        "{} bytes, but fixed-size chunks other than the last have {fixed}",
                        c.len
                    )));
                }
            }
            starts.push(size);
            size += u64::from(c.len);
        }
        Ok(Self {
            bucket,
            key,
            version,
            size,
            created_unix_ms,
            chunking,
            chunks,
            starts,
            chunk_at_manifest_node: false,
            layout: None,
            note: None,
        })
    }

    /// Records what each chunk holds. Checked: one role per chunk, column
    /// indexes within the column list, the lists within their limits, and
    /// only for a Parquet-aware chunking.
    pub fn with_parquet_layout(mut self, layout: ParquetLayout) -> Result<Self> {
        let bad = |reason: String| StoreError::Malformed {
            what: "manifest",
            reason: format!("Parquet layout: {reason}"),
        };
        if self.chunking.fallback().is_none() {
            return Err(bad(format!("recorded with {:?} chunking", self.chunking)));
        }
        if layout.roles.len() != self.chunks.len() {
            return Err(bad(format!(
                "{} roles for {} chunks",
                layout.roles.len(),
                self.chunks.len()
            )));
        }
        if layout.columns.len() > MAX_PARQUET_COLUMNS {
            return Err(bad(format!(
                "{} columns, over the limit {MAX_PARQUET_COLUMNS}",
                layout.columns.len()
            )));
        }
        let total: usize = layout.columns.iter().map(String::len).sum();
        if total > MAX_COLUMN_PATHS_BYTES
            || layout
                .columns
                .iter()
                .any(|c| c.len() > MAX_COLUMN_PATH_BYTES)
        {
            return Err(bad(format!(
                "column paths over the limits ({MAX_COLUMN_PATH_BYTES} bytes each, \
                 {MAX_COLUMN_PATHS_BYTES} in all)"
            )));
        }
        for (i, role) in layout.roles.iter().enumerate() {
            if let ChunkRole::Page { column, .. } = role {
                if usize::from(*column) >= layout.columns.len() {
                    return Err(bad(format!(
                        "chunk {i} names column {column} of {}",
                        layout.columns.len()
                    )));
                }
            }
        }
        self.layout = Some(Box::new(layout));
        Ok(self)
    }

    /// Records a warning from the put, cut to [`MAX_NOTE_BYTES`] (on a
    /// character boundary); an empty note records nothing.
    pub fn with_note(mut self, note: &str) -> Self {
        let mut end = note.len().min(MAX_NOTE_BYTES);
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        self.note = (end > 0).then(|| note[..end].into());
        self
    }

    /// What each chunk holds, for a Parquet file cut by pages.
    pub fn parquet_layout(&self) -> Option<&ParquetLayout> {
        self.layout.as_deref()
    }

    /// The put's warning, if it had one.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// Marks this manifest's chunk as held by the node that holds the
    /// manifest (one call stores both, one call reads both). Only for a
    /// manifest of exactly one chunk: anything else is refused.
    pub fn with_chunk_at_manifest_node(mut self) -> Result<Self> {
        if self.chunks.len() != 1 {
            return Err(StoreError::Malformed {
                what: "manifest",
                reason: format!(
                    "{} chunks: only an object of one chunk can keep it with its manifest",
                    self.chunks.len()
                ),
            });
        }
        self.chunk_at_manifest_node = true;
        Ok(self)
    }

    /// Whether the object's one chunk lives on the manifest's node rather
    /// than where its fingerprint places it.
    pub fn chunk_at_manifest_node(&self) -> bool {
        self.chunk_at_manifest_node
    }

    /// The bucket.
    pub fn bucket(&self) -> &BucketName {
        &self.bucket
    }
    /// The key.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }
    /// The version (1, 2, ... per key; 0 before it is committed).
    pub fn version(&self) -> u64 {
        self.version
    }
    /// The object's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// When this version was written, in milliseconds since the Unix epoch.
    pub fn created_unix_ms(&self) -> u64 {
        self.created_unix_ms
    }
    /// How the object was cut.
    pub fn chunking(&self) -> Chunking {
        self.chunking
    }
    /// The chunks, in object order.
    pub fn chunks(&self) -> &[ChunkRef] {
        &self.chunks
    }

    /// Sets the version: the node holding the key numbers each commit.
    pub fn set_version(&mut self, version: u64) {
        self.version = version;
    }

    /// The chunk pieces that hold bytes `offset .. offset + len`, in order.
    /// A range that runs past the end is cut at the end; one that starts past
    /// the end is an error (starting exactly at the end gives nothing).
    pub fn locate(&self, offset: u64, len: u64) -> Result<Vec<ChunkSlice>> {
        if offset > self.size {
            return Err(StoreError::RangeOutOfBounds {
                offset,
                size: self.size,
            });
        }
        let end = offset.saturating_add(len).min(self.size);
        let mut out = Vec::new();
        if end == offset {
            return Ok(out);
        }
        // The chunk holding `offset`: the last start <= offset.
        let mut i = self.starts.partition_point(|&s| s <= offset) - 1;
        let mut at = offset;
        while at < end {
            let start = self.starts[i];
            let chunk = self.chunks[i];
            let within = at - start;
            let take = (u64::from(chunk.len) - within).min(end - at);
            out.push(ChunkSlice {
                index: i,
                chunk,
                offset_in_chunk: within as u32,
                len: take as u32,
                object_offset: at,
            });
            at += take;
            i += 1;
        }
        Ok(out)
    }

    /// The encoded length of this manifest.
    pub fn encoded_len(&self) -> usize {
        HEAD + self.bucket.as_str().len()
            + self.key.as_str().len()
            + MIDDLE
            + PER_CHUNK * self.chunks.len()
            + self.extension_len()
            + TAIL
    }

    /// Whether this manifest needs format 2.
    fn extended(&self) -> bool {
        self.layout.is_some() || self.note.is_some()
    }

    fn extension_len(&self) -> usize {
        if !self.extended() {
            return 0;
        }
        let note = 2 + self.note.as_ref().map_or(0, |n| n.len());
        let layout = self.layout.as_ref().map_or(0, |l| {
            2 + l.columns.iter().map(|c| 2 + c.len()).sum::<usize>() + PER_ROLE * l.roles.len()
        });
        note + 1 + layout
    }

    /// Format 2's section after the chunk list.
    fn encode_extension(&self, out: &mut Vec<u8>) {
        let note = self.note.as_deref().unwrap_or("");
        out.extend_from_slice(&(note.len() as u16).to_le_bytes());
        out.extend_from_slice(note.as_bytes());
        let Some(layout) = &self.layout else {
            out.push(0);
            return;
        };
        out.push(1);
        out.extend_from_slice(&(layout.columns.len() as u16).to_le_bytes());
        for c in &layout.columns {
            out.extend_from_slice(&(c.len() as u16).to_le_bytes());
            out.extend_from_slice(c.as_bytes());
        }
        for role in &layout.roles {
            let (kind, row_group, column) = match *role {
                ChunkRole::Other => (0u8, 0, 0),
                ChunkRole::Footer => (1, 0, 0),
                ChunkRole::Page { row_group, column } => (2, row_group, column),
            };
            out.push(kind);
            out.extend_from_slice(&row_group.to_le_bytes());
            out.extend_from_slice(&column.to_le_bytes());
        }
    }

    /// The binary form (all integers little-endian):
    ///
    /// ```text
    /// "QMAN"  format:u8=1  flags:u8  bucket_len:u8  key_len:u16
    /// bucket  key
    /// version:u64  size:u64  created_unix_ms:u64
    /// chunking:u8 (0 fixed, 1 FastCDC-2020 level 1, 2 parquet, 3 auto)
    ///     a:u32 b:u32 c:u32 (fixed: size,0,0; others: FastCDC min,avg,max)
    /// chunk_count:u32  { sha256:[u8;32]  len:u32 } * chunk_count
    /// format 2 only:
    ///   note_len:u16 note (UTF-8, <= MAX_NOTE_BYTES)
    ///   has_layout:u8 (0 or 1), and if 1:
    ///     column_count:u16 { path_len:u16 path (UTF-8) } * column_count
    ///     { role:u8 (0 other, 1 footer, 2 page) row_group:u32 column:u16 }
    ///       * chunk_count (row_group and column 0 unless a page)
    /// crc32c:u32 (of every byte before it)
    /// ```
    ///
    /// Format 2 is written only when there is a note or a layout, and a
    /// format-2 manifest without either is refused, so each manifest has
    /// exactly one encoding.
    ///
    /// `flags` is 0, or [`FLAG_CHUNK_AT_MANIFEST_NODE`] with exactly one
    /// chunk.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&MANIFEST_MAGIC);
        out.push(if self.extended() { 2 } else { 1 });
        out.push(if self.chunk_at_manifest_node {
            FLAG_CHUNK_AT_MANIFEST_NODE
        } else {
            0
        });
        out.push(self.bucket.as_str().len() as u8);
        out.extend_from_slice(&(self.key.as_str().len() as u16).to_le_bytes());
        out.extend_from_slice(self.bucket.as_str().as_bytes());
        out.extend_from_slice(self.key.as_str().as_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.created_unix_ms.to_le_bytes());
        let (kind, [a, b, c]) = self.chunking.encode_parts();
        out.push(kind);
        for v in [a, b, c] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(self.chunks.len() as u32).to_le_bytes());
        for ch in &self.chunks {
            out.extend_from_slice(&ch.fingerprint.0);
            out.extend_from_slice(&ch.len.to_le_bytes());
        }
        if self.extended() {
            self.encode_extension(&mut out);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), self.encoded_len());
        out
    }

    /// Decodes [`Self::encode`]'s output. Checks, in order: length, magic,
    /// format version, checksum, flags, every length against its limit and
    /// against the bytes present (before allocating), the names, the
    /// chunking, the chunk list (as [`Self::new`]), the recorded size, and
    /// that nothing trails.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let bad = |reason: String| StoreError::Malformed {
            what: "manifest",
            reason,
        };
        let min = HEAD + MIDDLE + TAIL;
        if bytes.len() < min {
            return Err(bad(format!(
                "{} bytes, shorter than the smallest manifest ({min})",
                bytes.len()
            )));
        }
        if bytes[..4] != MANIFEST_MAGIC {
            return Err(bad(format!("does not start with {MANIFEST_MAGIC:?}")));
        }
        if !(1..=MANIFEST_FORMAT_VERSION).contains(&bytes[4]) {
            return Err(bad(format!(
                "format version {}; this build reads versions 1 to {MANIFEST_FORMAT_VERSION}",
                bytes[4]
            )));
        }
        let (body, tail) = bytes.split_at(bytes.len() - TAIL);
        let stored = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
        let computed = crc32c::crc32c(body);
        if stored != computed {
            return Err(bad(format!(
                "checksum {stored:#010x} does not match the contents ({computed:#010x})"
            )));
        }
        Self::decode_body(body).map_err(|e| match e {
            StoreError::Malformed { .. } => e,
            other => bad(other.to_string()),
        })
    }

    fn decode_body(body: &[u8]) -> Result<Self> {
        let bad = |reason: String| StoreError::Malformed {
            what: "manifest",
            reason,
        };
        let mut r = Reader::after("manifest", body, 5)?;
        let flags = r.u8()?;
        if flags & !FLAG_CHUNK_AT_MANIFEST_NODE != 0 {
            return Err(bad(format!("unknown flags {flags:#04x}")));
        }
        let bucket_len = r.u8()? as usize;
        let key_len = r.u16()? as usize;
        if bucket_len > MAX_BUCKET_LEN || key_len > MAX_KEY_LEN {
            return Err(bad(format!(
                "name lengths {bucket_len}/{key_len} over the limits {MAX_BUCKET_LEN}/{MAX_KEY_LEN}"
            )));
        }
        let bucket = BucketName::from_bytes(r.take(bucket_len)?)?;
        let key = ObjectKey::from_bytes(r.take(key_len)?)?;
        let version = r.u64()?;
        let size = r.u64()?;
        let created_unix_ms = r.u64()?;
        let kind = r.u8()?;
        let (a, b, c) = (r.u32()?, r.u32()?, r.u32()?);
        let chunking = Chunking::decode_parts(kind, [a, b, c])
            .ok_or_else(|| bad(format!("unknown chunking {kind} ({a}, {b}, {c})")))?;
        let count = r.u32()? as usize;
        if count > MAX_MANIFEST_CHUNKS {
            return Err(bad(format!(
                "{count} chunks, over the limit {MAX_MANIFEST_CHUNKS}"
            )));
        }
        let left = r.left();
        let extended = body[4] == 2;
        if (!extended && left != count * PER_CHUNK) || left < count * PER_CHUNK {
            return Err(bad(format!(
                "{count} chunks need {} bytes, {left} present",
                count * PER_CHUNK
            )));
        }
        let mut chunks = Vec::with_capacity(count);
        for _ in 0..count {
            let fingerprint = Fingerprint(r.take(32)?.try_into().expect("32 bytes"));
            let len = r.u32()?;
            chunks.push(ChunkRef { fingerprint, len });
        }
        let mut m = Manifest::new(bucket, key, version, created_unix_ms, chunking, chunks)?;
        if flags & FLAG_CHUNK_AT_MANIFEST_NODE != 0 {
            m = m.with_chunk_at_manifest_node()?;
        }
        if extended {
            m = decode_extension(&mut r, m)?;
        }
        if m.size != size {
            return Err(bad(format!(
                "records size {size}, its chunks add up to {}",
                m.size
            )));
        }
        Ok(m)
    }
}

/// Format 2's section (see [`Manifest::encode`]), checked as it is read:
/// every length against its limit and the bytes left before it is taken,
/// the strings UTF-8, the roles canonical, nothing trailing, and a note or
/// a layout present.
fn decode_extension(r: &mut Reader<'_>, mut m: Manifest) -> Result<Manifest> {
    let bad = |reason: String| StoreError::Malformed {
        what: "manifest",
        reason,
    };
    let utf8 = |b: &[u8], what: &str| {
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| bad(format!("{what} is not UTF-8")))
    };
    let note_len = r.u16()? as usize;
    if note_len > MAX_NOTE_BYTES {
        return Err(bad(format!(
            "note of {note_len} bytes, over the limit {MAX_NOTE_BYTES}"
        )));
    }
    let note = utf8(r.take(note_len)?, "the note")?;
    let has_layout = r.u8()?;
    if has_layout > 1 || (has_layout == 0 && note.is_empty()) {
        return Err(bad(format!(
            "format 2 with layout byte {has_layout} and a {note_len}-byte note"
        )));
    }
    if !note.is_empty() {
        m = m.with_note(&note);
    }
    if has_layout == 1 {
        let column_count = r.u16()? as usize;
        if column_count > MAX_PARQUET_COLUMNS {
            return Err(bad(format!(
                "{column_count} columns, over the limit {MAX_PARQUET_COLUMNS}"
            )));
        }
        let mut columns = Vec::with_capacity(column_count.min(r.left() / 2));
        for _ in 0..column_count {
            let len = r.u16()? as usize;
            if len > MAX_COLUMN_PATH_BYTES {
                return Err(bad(format!("a {len}-byte column path")));
            }
            columns.push(utf8(r.take(len)?, "a column path")?);
        }
        let count = m.chunks.len();
        if r.left() != count * PER_ROLE {
            return Err(bad(format!(
                "{count} chunk roles need {} bytes, {} present",
                count * PER_ROLE,
                r.left()
            )));
        }
        let mut roles = Vec::with_capacity(count);
        for _ in 0..count {
            let (kind, row_group, column) = (r.u8()?, r.u32()?, r.u16()?);
            roles.push(match (kind, row_group, column) {
                (0, 0, 0) => ChunkRole::Other,
                (1, 0, 0) => ChunkRole::Footer,
                (2, row_group, column) => ChunkRole::Page { row_group, column },
                _ => {
                    return Err(bad(format!(
                        "unknown chunk role {kind} ({row_group}, {column})"
                    )))
                }
            });
        }
        m = m.with_parquet_layout(ParquetLayout { columns, roles })?;
    }
    if !r.done() {
        return Err(bad(format!("{} bytes trail the manifest", r.left())));
    }
    Ok(m)
}

/// Bounds-checked little-endian reads off an encoding (a manifest, a table
/// record, a store call, the volume-backed log and snapshots): the
/// protocol's field codec, whose errors become [`StoreError::Malformed`]
/// naming `what`, never a panic. The store's own fields are read by
/// methods added here and in `remote.rs`.
pub struct Reader<'a>(pub ByteReader<'a>);

impl<'a> std::ops::Deref for Reader<'a> {
    type Target = ByteReader<'a>;
    fn deref(&self) -> &ByteReader<'a> {
        &self.0
    }
}

impl std::ops::DerefMut for Reader<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<'a> Reader<'a> {
    /// Reads `buf` from its start.
    pub fn new(what: &'static str, buf: &'a [u8]) -> Self {
        Reader(ByteReader::new(what, buf))
    }
    /// Reads `buf` from byte `skip` (a header already checked).
    pub fn after(what: &'static str, buf: &'a [u8], skip: usize) -> Result<Self> {
        let mut r = Reader::new(what, buf);
        r.take(skip)?;
        Ok(r)
    }
    /// An error about this encoding.
    pub fn malformed(&self, reason: String) -> StoreError {
        self.0.malformed(reason).into()
    }
    /// A little-endian `u8`.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.0.u8()?)
    }
    /// A little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16> {
        Ok(self.0.u16()?)
    }
    /// A little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32> {
        Ok(self.0.u32()?)
    }
    /// A little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64> {
        Ok(self.0.u64()?)
    }
}

impl From<CodecError> for StoreError {
    fn from(e: CodecError) -> Self {
        StoreError::Malformed {
            what: e.what,
            reason: e.reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(chunking: Chunking, lens: &[u32]) -> Manifest {
        let chunks = lens
            .iter()
            .enumerate()
            .map(|(i, &len)| ChunkRef {
                fingerprint: Fingerprint::of(&(i as u64).to_le_bytes()),
                len,
            })
            .collect();
        Manifest::new(
            BucketName::new("photos").unwrap(),
            ObjectKey::new("2024/cat.jpg").unwrap(),
            7,
            1_700_000_000_000,
            chunking,
            chunks,
        )
        .unwrap()
    }

    #[test]
    fn encode_decode_and_layout() {
        let m = sample(Chunking::fixed(1000).unwrap(), &[1000, 1000, 17]);
        let enc = m.encode();
        assert_eq!(enc.len(), m.encoded_len());
        assert_eq!(&enc[..4], b"QMAN");
        assert_eq!(Manifest::decode(&enc).unwrap(), m);
        assert_eq!(m.size(), 2017);
        let empty = sample(Chunking::DEFAULT_FASTCDC, &[]);
        assert_eq!(Manifest::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn new_rejects_inconsistent_chunk_lists() {
        let e = Manifest::new(
            BucketName::new("b").unwrap(),
            ObjectKey::new("k").unwrap(),
            1,
            0,
            Chunking::fixed(1000).unwrap(),
            vec![
                ChunkRef {
                    fingerprint: Fingerprint::of(b"a"),
                    len: 999,
                },
                ChunkRef {
                    fingerprint: Fingerprint::of(b"b"),
                    len: 5,
                },
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("chunk 0") && e.contains("fixed-size"), "{e}");
    }

    /// Rewrites the trailing checksum so a mutation reaches the parser.
    fn reseal(bytes: &mut [u8]) {
        if bytes.len() >= 4 {
            let n = bytes.len() - 4;
            let crc = crc32c::crc32c(&bytes[..n]);
            bytes[n..].copy_from_slice(&crc.to_le_bytes());
        }
    }

    #[test]
    fn decoder_errors_are_clear() {
        let m = sample(Chunking::fixed(1000).unwrap(), &[1000, 500]);
        let enc = m.encode();
        let err = |b: &[u8]| Manifest::decode(b).unwrap_err().to_string();
        assert!(err(&enc[..10]).contains("shorter than the smallest"));
        let mut b = enc.clone();
        b[0] = b'X';
        assert!(err(&b).contains("does not start with"));
        let mut b = enc.clone();
        b[4] = 9;
        assert!(err(&b).contains("format version 9; this build reads versions 1 to 2"));
        let mut b = enc.clone();
        b[30] ^= 1;
        assert!(err(&b).contains("checksum"));
        // Size field disagreeing with the chunks.
        let mut b = enc.clone();
        let size_at = HEAD + 6 + 12 + 8;
        b[size_at] ^= 1;
        reseal(&mut b);
        assert!(err(&b).contains("records size"), "{}", err(&b));
        // A chunk count that the bytes cannot hold.
        let mut b = enc.clone();
        let count_at = HEAD + 6 + 12 + MIDDLE - 4;
        b[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        reseal(&mut b);
        assert!(err(&b).contains("over the limit"), "{}", err(&b));
        b[count_at..count_at + 4].copy_from_slice(&3u32.to_le_bytes());
        reseal(&mut b);
        assert!(
            err(&b).contains("3 chunks need 108 bytes, 72 present"),
            "{}",
            err(&b)
        );
        // A bad key inside.
        let mut b = enc.clone();
        b[HEAD + 6] = 0;
        reseal(&mut b);
        assert!(err(&b).contains("invalid object key"), "{}", err(&b));
    }

    #[test]
    fn chunk_at_manifest_node_flag_round_trips_and_is_checked() {
        let one = sample(Chunking::fixed(1000).unwrap(), &[700]);
        assert!(!one.chunk_at_manifest_node());
        let flagged = one.clone().with_chunk_at_manifest_node().unwrap();
        let enc = flagged.encode();
        assert_eq!(enc[5], FLAG_CHUNK_AT_MANIFEST_NODE);
        let back = Manifest::decode(&enc).unwrap();
        assert!(back.chunk_at_manifest_node());
        assert_eq!(back, flagged);
        assert_ne!(back, one, "the flag is part of what a manifest is");
        // Only an object of exactly one chunk may keep it with its manifest.
        let two = sample(Chunking::fixed(1000).unwrap(), &[1000, 5]);
        let e = two.clone().with_chunk_at_manifest_node().unwrap_err();
        assert!(e.to_string().contains("2 chunks"), "{e}");
        let mut b = two.encode();
        b[5] = FLAG_CHUNK_AT_MANIFEST_NODE;
        reseal(&mut b);
        let e = Manifest::decode(&b).unwrap_err().to_string();
        assert!(e.contains("only an object of one chunk"), "{e}");
        let empty = sample(Chunking::fixed(1000).unwrap(), &[]);
        let mut b = empty.encode();
        b[5] = FLAG_CHUNK_AT_MANIFEST_NODE;
        reseal(&mut b);
        assert!(
            Manifest::decode(&b).is_err(),
            "an empty object has no chunk"
        );
        // Bits other than the known one are refused.
        let mut b = one.encode();
        b[5] = 0x02;
        reseal(&mut b);
        let e = Manifest::decode(&b).unwrap_err().to_string();
        assert!(e.contains("unknown flags 0x02"), "{e}");
    }

    #[test]
    fn locate_maps_ranges_to_chunk_pieces() {
        let m = sample(
            Chunking::fastcdc(256, 512, 1024).unwrap(),
            &[300, 1000, 400],
        );
        let r = m.locate(0, 1700).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].offset_in_chunk, r[0].len), (0, 300));
        let r = m.locate(250, 100).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].index, r[0].offset_in_chunk, r[0].len), (0, 250, 50));
        assert_eq!((r[1].index, r[1].offset_in_chunk, r[1].len), (1, 0, 50));
        assert_eq!(r[1].object_offset, 300);
        let r = m.locate(1300, 1).unwrap();
        assert_eq!((r[0].index, r[0].offset_in_chunk, r[0].len), (2, 0, 1));
        let r = m.locate(1600, u64::MAX).unwrap();
        assert_eq!((r[0].index, r[0].offset_in_chunk, r[0].len), (2, 300, 100));
        assert!(m.locate(1700, 10).unwrap().is_empty());
        let e = m.locate(1701, 1).unwrap_err().to_string();
        assert!(
            e.contains("starts at byte 1701, past the end of the 1700-byte"),
            "{e}"
        );
    }

    fn arb_manifest() -> impl Strategy<Value = Manifest> {
        (
            arb_plain_manifest(),
            proptest::collection::vec("[a-z_]{1,8}(\\.[a-zé]{1,6}){0,2}", 0..6),
            proptest::collection::vec((0u8..3, any::<u32>(), any::<u16>()), 40),
            "[ -~é]{0,40}",
            any::<bool>(),
        )
            .prop_map(|(m, columns, raw_roles, note, with_layout)| {
                let mut m = m.with_note(&note);
                if with_layout && m.chunking().fallback().is_some() {
                    let roles = raw_roles[..m.chunks().len()]
                        .iter()
                        .map(|&(kind, row_group, column)| match kind {
                            2 if !columns.is_empty() => ChunkRole::Page {
                                row_group,
                                column: column % columns.len() as u16,
                            },
                            1 => ChunkRole::Footer,
                            _ => ChunkRole::Other,
                        })
                        .collect();
                    m = m
                        .with_parquet_layout(ParquetLayout { columns, roles })
                        .unwrap();
                }
                m
            })
    }

    /// A sample of every chunking with a Parquet layout and a note.
    fn parquet_sample() -> Manifest {
        sample(Chunking::DEFAULT_PARQUET, &[4, 3000, 200, 9000, 500])
            .with_parquet_layout(ParquetLayout {
                columns: vec!["id".into(), "route.origin".into()],
                roles: vec![
                    ChunkRole::Other,
                    ChunkRole::Page {
                        row_group: 0,
                        column: 0,
                    },
                    ChunkRole::Page {
                        row_group: 0,
                        column: 1,
                    },
                    ChunkRole::Page {
                        row_group: 7,
                        column: 1,
                    },
                    ChunkRole::Footer,
                ],
            })
            .unwrap()
            .with_note("a note")
    }

    #[test]
    fn format_2_round_trips_and_format_1_is_still_written_without_it() {
        let plain = sample(Chunking::DEFAULT_FASTCDC, &[300, 400]);
        let enc = plain.encode();
        assert_eq!(enc[4], 1, "no layout, no note: format 1 as before");
        assert_eq!(Manifest::decode(&enc).unwrap(), plain);
        let m = parquet_sample();
        let enc = m.encode();
        assert_eq!((enc[4], enc.len()), (2, m.encoded_len()));
        let back = Manifest::decode(&enc).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.note(), Some("a note"));
        assert_eq!(back.parquet_layout().unwrap().columns[1], "route.origin");
        let auto = sample(Chunking::DEFAULT_AUTO, &[10]).with_note("x");
        assert_eq!(Manifest::decode(&auto.encode()).unwrap(), auto);
        // A note is cut to its bound on a character boundary.
        let long = sample(Chunking::DEFAULT_FASTCDC, &[10]).with_note(&"é".repeat(2000));
        assert_eq!(long.note().unwrap().len(), MAX_NOTE_BYTES);
        // Layouts are checked.
        let e = sample(Chunking::DEFAULT_FIXED, &[10])
            .with_parquet_layout(ParquetLayout {
                columns: vec![],
                roles: vec![ChunkRole::Other],
            })
            .unwrap_err();
        assert!(e.to_string().contains("recorded with Fixed"), "{e}");
        let e = sample(Chunking::DEFAULT_PARQUET, &[10])
            .with_parquet_layout(ParquetLayout {
                columns: vec!["a".into()],
                roles: vec![ChunkRole::Page {
                    row_group: 0,
                    column: 1,
                }],
            })
            .unwrap_err();
        assert!(e.to_string().contains("names column 1 of 1"), "{e}");
    }

    #[test]
    fn every_truncation_and_every_single_byte_change_of_format_2_is_caught() {
        let m = parquet_sample();
        let enc = m.encode();
        for cut in 0..enc.len() {
            let mut b = enc[..cut].to_vec();
            assert!(Manifest::decode(&b).is_err(), "cut at {cut}");
            reseal(&mut b);
            assert!(Manifest::decode(&b).is_err(), "cut at {cut}, resealed");
        }
        for i in 0..enc.len() - 4 {
            for v in [0u8, 1, 2, 3, 0x7f, 0xff, enc[i] ^ 1, enc[i] ^ 0x80] {
                let mut b = enc.clone();
                b[i] = v;
                reseal(&mut b);
                if let Ok(d) = Manifest::decode(&b) {
                    assert_eq!(d.encode(), b, "byte {i} = {v}");
                }
            }
        }
        // Bounds named in the errors.
        let err = |b: &[u8]| Manifest::decode(b).unwrap_err().to_string();
        let tail_at = HEAD
            + m.bucket().as_str().len()
            + m.key().as_str().len()
            + MIDDLE
            + PER_CHUNK * m.chunks().len();
        let mut b = enc.clone();
        b[tail_at..tail_at + 2].copy_from_slice(&5000u16.to_le_bytes());
        reseal(&mut b);
        assert!(err(&b).contains("note of 5000 bytes"), "{}", err(&b));
        let mut b = enc.clone();
        let columns_at = tail_at + 2 + 6 + 1;
        b[columns_at..columns_at + 2].copy_from_slice(&60000u16.to_le_bytes());
        reseal(&mut b);
        assert!(err(&b).contains("60000 columns"), "{}", err(&b));
        // Format 2 with neither a note nor a layout is not canonical.
        let plain = sample(Chunking::DEFAULT_PARQUET, &[10]);
        let mut b = plain.encode();
        let n = b.len() - 4;
        b.truncate(n);
        b.extend_from_slice(&[0, 0, 0]);
        b[4] = 2;
        b.extend_from_slice(&[0; 4]);
        reseal(&mut b);
        assert!(
            err(&b).contains("format 2 with layout byte 0"),
            "{}",
            err(&b)
        );
    }

    fn arb_plain_manifest() -> impl Strategy<Value = Manifest> {
        let chunking = prop_oneof![
            (256u32..=8192).prop_map(|size| Chunking::Fixed { size }),
            (8u32..=12).prop_map(|bits| Chunking::FastCdc {
                min: 256,
                avg: 1 << bits,
                max: 8192
            }),
            (8u32..=12).prop_map(|bits| Chunking::Parquet {
                min: 256,
                avg: 1 << bits,
                max: 8192
            }),
            Just(Chunking::DEFAULT_AUTO),
        ];
        (
            "[a-z0-9][a-z0-9._-]{0,20}",
            "[a-zA-Z0-9 é_]{1,20}(/[a-zA-Z0-9 ü]{1,10}){0,3}",
            any::<u64>(),
            any::<u64>(),
            chunking,
            proptest::collection::vec((any::<[u8; 32]>(), 1u32..=8192), 0..40),
            any::<bool>(),
        )
            .prop_map(|(b, k, version, created, chunking, raw, with_node)| {
                let max = chunking.max_chunk();
                let n = raw.len();
                let chunks = raw
                    .into_iter()
                    .enumerate()
                    .map(|(i, (fp, len))| ChunkRef {
                        fingerprint: Fingerprint(fp),
                        len: match chunking {
                            Chunking::Fixed { size } if i + 1 < n => size,
                            _ => len.min(max),
                        },
                    })
                    .collect();
                let m = Manifest::new(
                    BucketName::new(&b).unwrap(),
                    ObjectKey::new(&k).unwrap(),
                    version,
                    created,
                    chunking,
                    chunks,
                )
                .unwrap();
                if with_node && n == 1 {
                    m.with_chunk_at_manifest_node().unwrap()
                } else {
                    m
                }
            })
    }

    proptest! {
        #[test]
        fn manifest_round_trips(m in arb_manifest()) {
            let enc = m.encode();
            prop_assert_eq!(Manifest::decode(&enc).unwrap(), m);
        }

        #[test]
        fn mutated_manifests_never_panic(
            m in arb_manifest(),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
            cut in any::<usize>(),
            fix_crc in any::<bool>(),
        ) {
            let mut b = m.encode();
            for (at, v) in edits {
                let i = at % b.len();
                b[i] = v;
            }
            if cut % 4 == 0 {
                b.truncate(cut % (b.len() + 1));
            }
            if fix_crc {
                reseal(&mut b);
            }
            // Either a clean error or a manifest that encodes back to the same bytes.
            if let Ok(d) = Manifest::decode(&b) {
                prop_assert_eq!(d.encode(), b);
            }
        }

        #[test]
        fn random_bytes_never_decode_into_a_panic(
            body in proptest::collection::vec(any::<u8>(), 0..400),
            version in 0u8..4,
        ) {
            let mut b = MANIFEST_MAGIC.to_vec();
            b.push(version);
            b.extend_from_slice(&body);
            reseal(&mut b);
            if let Ok(d) = Manifest::decode(&b) {
                prop_assert_eq!(d.encode(), b);
            }
        }

        #[test]
        fn locate_covers_the_range_exactly(m in arb_manifest(), a in any::<u64>(), l in 0u64..100_000) {
            let offset = if m.size() == 0 { 0 } else { a % (m.size() + 1) };
            let pieces = m.locate(offset, l).unwrap();
            let want = l.min(m.size() - offset);
            let got: u64 = pieces.iter().map(|p| u64::from(p.len)).sum();
            prop_assert_eq!(got, want);
            let mut at = offset;
            for p in pieces {
                prop_assert_eq!(p.object_offset, at);
                prop_assert!(p.len > 0);
                prop_assert!(p.offset_in_chunk + p.len <= p.chunk.len);
                at += u64::from(p.len);
            }
        }
    }
}
