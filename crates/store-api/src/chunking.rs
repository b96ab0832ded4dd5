//! Cutting an object into chunks: fixed-size, or content-defined with
//! FastCDC (the 2020 variant of the `fastcdc` crate, normalisation level 1,
//! no seed), over slices, `std::io::Read` and `tokio::io::AsyncRead`.

use std::io::{ErrorKind, Read};

use bytes::{BufMut, Bytes, BytesMut};
use fastcdc::v2020;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::{Result, StoreError};
pub use crate::parquet_cut::CutOutcome;
use crate::parquet_cut::PageWalk;

/// Smallest chunk size a bucket may choose (fixed size, or FastCDC minimum).
pub const MIN_CHUNK_SIZE: u32 = 256;
/// Largest chunk (fixed size, or FastCDC maximum): 4 MiB, 512 pages of 8 KiB.
/// It bounds the memory of a chunker and of a chunk in flight.
pub const MAX_CHUNK_SIZE: u32 = 4 << 20;

/// How a bucket's objects are cut into chunks. Recorded in every manifest,
/// so a bucket's setting may change without touching old objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Chunking {
    /// Chunks of `size` bytes; the last may be shorter. Cheapest to compute;
    /// an insertion shifts every later chunk.
    Fixed {
        /// Chunk size in bytes.
        size: u32,
    },
    /// Content-defined chunks (FastCDC 2020): a cut where a rolling gear hash
    /// of the content matches a mask, so an edit moves only nearby cuts.
    FastCdc {
        /// No chunk is shorter (except the last).
        min: u32,
        /// The target average; a power of two.
        avg: u32,
        /// No chunk is longer.
        max: u32,
    },
    /// A Parquet file is cut at its page boundaries: each page of each
    /// column chunk a chunk of its own (a small dictionary page shares one
    /// with the first data page), the footer one chunk, the bytes outside
    /// column chunks small chunks of their own; the manifest records the
    /// row group and column of each. Anything else, and a damaged file from
    /// the damage on, is cut with FastCDC `min`/`avg`/`max`, with a note.
    Parquet {
        /// FastCDC minimum for what is not cut by pages.
        min: u32,
        /// FastCDC average.
        avg: u32,
        /// FastCDC maximum.
        max: u32,
    },
    /// [`Chunking::Parquet`] for objects that are Parquet files (they start
    /// with `PAR1`), plain FastCDC `min`/`avg`/`max` for the rest, with no
    /// note for an object that does not claim to be Parquet.
    Auto {
        /// FastCDC minimum.
        min: u32,
        /// FastCDC average.
        avg: u32,
        /// FastCDC maximum.
        max: u32,
    },
}

impl Default for Chunking {
    fn default() -> Self {
        Chunking::DEFAULT_FIXED
    }
}

impl Chunking {
    /// The default: fixed 1 MiB chunks. Every chunk costs a store call, a
    /// table record and a round of wake-ups at its node whatever its size;
    /// at 64 KiB those per-chunk costs took half of the nodes' CPU on a put
    /// and a third on a get (docs/store.md, "Why 1 MiB chunks"). A smaller
    /// size dedups a changed region more finely; `fastcdc` finds shifted
    /// content, which fixed chunks of any size miss.
    pub const DEFAULT_FIXED: Chunking = Chunking::Fixed { size: 1 << 20 };
    /// The default content-defined setting: 16 KiB / 64 KiB / 256 KiB.
    pub const DEFAULT_FASTCDC: Chunking = Chunking::FastCdc {
        min: 16 << 10,
        avg: 64 << 10,
        max: 256 << 10,
    };

    /// Parquet pages, the default FastCDC parameters for the rest.
    pub const DEFAULT_PARQUET: Chunking = Chunking::Parquet {
        min: 16 << 10,
        avg: 64 << 10,
        max: 256 << 10,
    };
    /// `auto` with the default FastCDC parameters.
    pub const DEFAULT_AUTO: Chunking = Chunking::Auto {
        min: 16 << 10,
        avg: 64 << 10,
        max: 256 << 10,
    };

    /// The FastCDC setting of a Parquet-aware chunking (for what is not
    /// cut by pages); `None` for `fixed` and `fastcdc`.
    pub fn fallback(&self) -> Option<Chunking> {
        match *self {
            Chunking::Parquet { min, avg, max } | Chunking::Auto { min, avg, max } => {
                Some(Chunking::FastCdc { min, avg, max })
            }
            _ => None,
        }
    }

    /// Fixed-size chunks of `size` bytes, checked.
    pub fn fixed(size: u32) -> Result<Self> {
        let c = Chunking::Fixed { size };
        c.validate()?;
        Ok(c)
    }

    /// FastCDC chunks, checked.
    pub fn fastcdc(min: u32, avg: u32, max: u32) -> Result<Self> {
        let c = Chunking::FastCdc { min, avg, max };
        c.validate()?;
        Ok(c)
    }

    /// Checks the bounds: sizes within [`MIN_CHUNK_SIZE`]..=[`MAX_CHUNK_SIZE`];
    /// for FastCDC also `min <= avg <= max`, `avg` a power of two, `min` and
    /// `max` even, and `max >= 1024` (the `fastcdc` crate's own limits).
    pub fn validate(&self) -> Result<()> {
        let bad = |s: String| Err(StoreError::InvalidChunking(s));
        let range = MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE;
        match *self {
            Chunking::Fixed { size } => {
                if !range.contains(&size) {
                    return bad(format!(
                        "fixed chunk size {size} outside {MIN_CHUNK_SIZE}..={MAX_CHUNK_SIZE}"
                    ));
                }
            }
            Chunking::FastCdc { min, avg, max } => {
                for (name, v) in [("min", min), ("avg", avg), ("max", max)] {
                    if !range.contains(&v) {
                        return bad(format!(
                            "FastCDC {name} {v} outside {MIN_CHUNK_SIZE}..={MAX_CHUNK_SIZE}"
                        ));
                    }
                }
                if !(min <= avg && avg <= max) {
                    return bad(format!(
                        "FastCDC sizes must satisfy min <= avg <= max, got {min} / {avg} / {max}"
                    ));
                }
                if !avg.is_power_of_two() {
                    return bad(format!("FastCDC avg {avg} is not a power of two"));
                }
                if min % 2 != 0 || max % 2 != 0 {
                    return bad(format!("FastCDC min {min} and max {max} must be even"));
                }
                if (max as usize) < v2020::MAXIMUM_MIN {
                    return bad(format!("FastCDC max {max} below {}", v2020::MAXIMUM_MIN));
                }
            }
            Chunking::Parquet { .. } | Chunking::Auto { .. } => {
                self.fallback().map_or(Ok(()), |f| f.validate())?;
            }
        }
        Ok(())
    }

    /// The record form: a kind byte (0 fixed, 1 FastCDC, 2 parquet, 3
    /// auto) and three numbers (fixed: size,0,0; others: min,avg,max).
    pub fn encode_parts(&self) -> (u8, [u32; 3]) {
        match *self {
            Chunking::Fixed { size } => (0, [size, 0, 0]),
            Chunking::FastCdc { min, avg, max } => (1, [min, avg, max]),
            Chunking::Parquet { min, avg, max } => (2, [min, avg, max]),
            Chunking::Auto { min, avg, max } => (3, [min, avg, max]),
        }
    }

    /// The inverse of [`Self::encode_parts`] (unchecked: call
    /// [`Self::validate`]); `None` for an unknown kind or a fixed setting
    /// with stray numbers.
    pub fn decode_parts(kind: u8, [a, b, c]: [u32; 3]) -> Option<Self> {
        Some(match (kind, b, c) {
            (0, 0, 0) => Chunking::Fixed { size: a },
            (1, _, _) => Chunking::FastCdc {
                min: a,
                avg: b,
                max: c,
            },
            (2, _, _) => Chunking::Parquet {
                min: a,
                avg: b,
                max: c,
            },
            (3, _, _) => Chunking::Auto {
                min: a,
                avg: b,
                max: c,
            },
            _ => return None,
        })
    }

    /// The longest chunk these parameters produce.
    pub fn max_chunk(&self) -> u32 {
        match *self {
            Chunking::Fixed { size } => size,
            Chunking::FastCdc { max, .. } => max,
            // A page is cut whole up to the largest chunk.
            Chunking::Parquet { .. } | Chunking::Auto { .. } => MAX_CHUNK_SIZE,
        }
    }

    /// The streaming page cutter for the Parquet-aware modes.
    fn page_walk(&self) -> Option<PageWalk> {
        let fallback = self.fallback()?;
        Some(PageWalk::new(
            fallback,
            matches!(self, Chunking::Parquet { .. }),
        ))
    }

    /// The length of the next chunk of `buf`, which starts at a chunk
    /// boundary. `eof` says no data follows `buf`. `None`: more data is
    /// needed to decide (only when `!eof` and `buf` is shorter than
    /// [`Self::max_chunk`]). Never `Some(0)` unless `buf` is empty.
    /// (The Parquet-aware modes cut with their fallback here: their page
    /// cuts need [`PageWalk`]'s state.)
    pub(crate) fn cut(&self, buf: &[u8], eof: bool) -> Option<usize> {
        if let Some(fallback) = self.fallback() {
            return fallback.cut(buf, eof);
        }
        let max = self.max_chunk() as usize;
        if buf.len() < max && !eof {
            return None;
        }
        if buf.is_empty() {
            return Some(0);
        }
        match *self {
            Chunking::Fixed { size } => Some(buf.len().min(size as usize)),
            Chunking::FastCdc { min, avg, max } => {
                let (mask_s, mask_l) =
                    v2020::select_masks(avg as usize, v2020::Normalization::Level1);
                let (_, n) = v2020::cut(
                    buf,
                    min as usize,
                    avg as usize,
                    max as usize,
                    mask_s,
                    mask_l,
                    mask_s << 1,
                    mask_l << 1,
                );
                Some(n)
            }
            Chunking::Parquet { .. } | Chunking::Auto { .. } => None,
        }
    }

    /// The chunks of an in-memory object, as (offset, length): the same
    /// cuts a [`Chunker`] makes of the same bytes.
    pub fn split(&self, data: &[u8]) -> Vec<(usize, usize)> {
        self.split_with_outcome(data).0
    }

    /// [`Self::split`], and how the object was cut ([`CutOutcome`]).
    pub fn split_with_outcome(&self, data: &[u8]) -> (Vec<(usize, usize)>, CutOutcome) {
        let mut walk = self.page_walk();
        let mut out = Vec::new();
        let mut at = 0;
        while at < data.len() {
            let n = match walk.as_mut() {
                Some(w) => w.cut(&data[at..], true, at as u64),
                None => self.cut(&data[at..], true),
            };
            // With the whole object present every cutter decides.
            let Some(n) = n.filter(|&n| n > 0) else {
                break;
            };
            out.push((at, n));
            at += n;
        }
        let lens: Vec<u32> = out.iter().map(|&(_, n)| n as u32).collect();
        (out, outcome_of(walk.as_ref(), *self, &lens))
    }
}

/// What a cut of `chunking` came to: a page walk's outcome, or plainly
/// the chunking itself.
fn outcome_of(walk: Option<&PageWalk>, chunking: Chunking, lens: &[u32]) -> CutOutcome {
    match walk {
        Some(w) => w.outcome(lens, chunking),
        None => CutOutcome {
            chunking,
            layout: None,
            note: None,
        },
    }
}

/// One chunk cut from a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Where it starts in the object.
    pub offset: u64,
    /// Its bytes.
    pub data: Bytes,
}

/// What both streaming chunkers share: a buffer that never holds more than
/// one maximal chunk.
struct Core {
    chunking: Chunking,
    max: usize,
    buf: BytesMut,
    eof: bool,
    offset: u64,
    /// The page walk of a Parquet-aware chunking.
    walk: Option<PageWalk>,
    /// The length of every chunk cut so far (for the page walk's outcome).
    lens: Vec<u32>,
}

impl Core {
    fn new(chunking: Chunking) -> Result<Self> {
        chunking.validate()?;
        let max = chunking.max_chunk() as usize;
        Ok(Self {
            chunking,
            max,
            buf: BytesMut::new(),
            eof: false,
            offset: 0,
            walk: chunking.page_walk(),
            lens: Vec::new(),
        })
    }

    fn outcome(&self) -> CutOutcome {
        outcome_of(self.walk.as_ref(), self.chunking, &self.lens)
    }

    fn needs_data(&self) -> bool {
        !self.eof && self.buf.len() < self.max
    }

    /// Makes room for up to `max` bytes. A chunk handed out shares the old
    /// allocation, so the unread tail (less than one chunk) is copied into a
    /// fresh buffer of exactly `max` bytes.
    fn make_room(&mut self) {
        if self.buf.capacity() < self.max {
            let mut fresh = BytesMut::with_capacity(self.max);
            fresh.extend_from_slice(&self.buf);
            self.buf = fresh;
        }
    }

    fn next_chunk(&mut self) -> Option<Chunk> {
        let n = match self.walk.as_mut() {
            Some(w) => w.cut(&self.buf, self.eof, self.offset)?,
            None => self.chunking.cut(&self.buf, self.eof)?,
        };
        if n == 0 {
            return None;
        }
        // Past the manifest's limit the put fails anyway: no need to keep more.
        if self.walk.is_some() && self.lens.len() <= crate::MAX_MANIFEST_CHUNKS {
            self.lens.push(n as u32);
        }
        let data = self.buf.split_to(n).freeze();
        let chunk = Chunk {
            offset: self.offset,
            data,
        };
        self.offset += n as u64;
        Some(chunk)
    }
}

/// Cuts a `std::io::Read` into chunks. Holds at most one maximal chunk of
/// unread data (plus the chunks the caller still holds).
pub struct Chunker<R> {
    core: Core,
    source: R,
}

impl<R: Read> Chunker<R> {
    /// A chunker over `source`.
    pub fn new(source: R, chunking: Chunking) -> Result<Self> {
        Ok(Self {
            core: Core::new(chunking)?,
            source,
        })
    }

    /// The next chunk, or `None` at the end of the source.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>> {
        while self.core.needs_data() {
            self.core.make_room();
            let len = self.core.buf.len();
            self.core.buf.resize(self.core.max, 0);
            let got = self.source.read(&mut self.core.buf[len..]);
            match got {
                Ok(0) => {
                    self.core.buf.truncate(len);
                    self.core.eof = true;
                }
                Ok(n) => self.core.buf.truncate(len + n),
                Err(e) if e.kind() == ErrorKind::Interrupted => self.core.buf.truncate(len),
                Err(e) => {
                    self.core.buf.truncate(len);
                    return Err(e.into());
                }
            }
        }
        Ok(self.core.next_chunk())
    }
}

impl<R> Chunker<R> {
    /// How the object was cut, once every chunk has been taken.
    pub fn outcome(&self) -> CutOutcome {
        self.core.outcome()
    }
}

impl<R: Read> Iterator for Chunker<R> {
    type Item = Result<Chunk>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_chunk().transpose()
    }
}

/// Cuts a `tokio::io::AsyncRead` into chunks, with the same cuts and the
/// same memory bound as [`Chunker`].
pub struct AsyncChunker<R> {
    core: Core,
    source: R,
    /// A chunk [`Self::take_single`] cut and gave back: the next one out.
    given_back: Option<Chunk>,
}

impl<R: AsyncRead + Unpin> AsyncChunker<R> {
    /// A chunker over `source`.
    pub fn new(source: R, chunking: Chunking) -> Result<Self> {
        Ok(Self {
            core: Core::new(chunking)?,
            source,
            given_back: None,
        })
    }

    /// Reads once more from the source into the buffer (notes its end).
    async fn fill_once(&mut self) -> Result<()> {
        self.core.make_room();
        let room = self.core.max - self.core.buf.len();
        let n = self
            .source
            .read_buf(&mut (&mut self.core.buf).limit(room))
            .await?;
        if n == 0 {
            self.core.eof = true;
        }
        Ok(())
    }

    /// The next chunk, or `None` at the end of the source.
    pub async fn next_chunk(&mut self) -> Result<Option<Chunk>> {
        if let Some(chunk) = self.given_back.take() {
            return Ok(Some(chunk));
        }
        while self.core.needs_data() {
            self.fill_once().await?;
        }
        Ok(self.core.next_chunk())
    }

    /// How the object was cut (the chunking its manifest records, the
    /// Parquet layout, a warning), once every chunk has been taken.
    pub fn outcome(&self) -> CutOutcome {
        self.core.outcome()
    }

    /// If the whole source, from where the chunker stands, is exactly one
    /// chunk of at most `max_bytes`, takes and returns it (the chunker is
    /// then at its end). Otherwise returns `None` and gives back what it
    /// cut: [`Self::next_chunk`] yields every chunk as if this had not been
    /// called. Reads at most one chunk and one read beyond it.
    pub async fn take_single(&mut self, max_bytes: usize) -> Result<Option<Chunk>> {
        if self.given_back.is_some() {
            return Ok(None);
        }
        let Some(first) = self.next_chunk().await? else {
            return Ok(None);
        };
        // A chunk of exactly the maximum leaves the buffer empty without
        // saying whether the source ended: one more read tells.
        while self.core.buf.is_empty() && !self.core.eof {
            self.fill_once().await?;
        }
        if self.core.buf.is_empty() && first.data.len() <= max_bytes {
            return Ok(Some(first));
        }
        self.given_back = Some(first);
        Ok(None)
    }
}

/// A chunk is 1 ..= [`MAX_CHUNK_SIZE`] bytes: anything else is refused
/// wherever chunk bytes are taken in.
pub fn check_chunk_len(fingerprint: crate::fingerprint::Fingerprint, data: &[u8]) -> Result<()> {
    if data.is_empty() || data.len() > MAX_CHUNK_SIZE as usize {
        return Err(StoreError::InvalidChunk {
            fingerprint,
            reason: format!("{} bytes, not 1..={MAX_CHUNK_SIZE}", data.len()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, RngCore, SeedableRng};

    fn data(len: usize, seed: u64) -> Vec<u8> {
        let mut v = vec![0u8; len];
        rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
        v
    }

    /// A reader that hands out random short reads, to shake the buffering.
    struct Dribble<'a> {
        data: &'a [u8],
        rng: rand::rngs::StdRng,
    }
    impl Read for Dribble<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self
                .rng
                .gen_range(1..=4000)
                .min(out.len())
                .min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn small_cdc() -> Chunking {
        Chunking::fastcdc(2048, 8192, 32768).unwrap()
    }

    fn stream(chunking: Chunking, bytes: &[u8], seed: u64) -> Vec<(usize, usize)> {
        let reader = Dribble {
            data: bytes,
            rng: rand::rngs::StdRng::seed_from_u64(seed),
        };
        let mut chunker = Chunker::new(reader, chunking).unwrap();
        let mut out = Vec::new();
        let mut expect_offset = 0;
        while let Some(c) = chunker.next_chunk().unwrap() {
            assert_eq!(c.offset, expect_offset);
            assert!(chunker.core.buf.capacity() <= chunking.max_chunk() as usize);
            assert_eq!(&c.data[..], &bytes[c.offset as usize..][..c.data.len()]);
            out.push((c.offset as usize, c.data.len()));
            expect_offset += c.data.len() as u64;
        }
        assert_eq!(expect_offset as usize, bytes.len());
        out
    }

    #[test]
    fn same_bytes_chunk_the_same_way_sliced_or_streamed() {
        let bytes = data(1 << 20, 1);
        for chunking in [Chunking::fixed(10_000).unwrap(), small_cdc()] {
            let whole = chunking.split(&bytes);
            assert_eq!(whole, chunking.split(&bytes));
            assert_eq!(whole, stream(chunking, &bytes, 2));
            assert_eq!(whole, stream(chunking, &bytes, 3));
            let total: usize = whole.iter().map(|c| c.1).sum();
            assert_eq!(total, bytes.len());
            for &(_, len) in &whole[..whole.len() - 1] {
                assert!(len <= chunking.max_chunk() as usize);
                if let Chunking::FastCdc { min, .. } = chunking {
                    assert!(len >= min as usize);
                }
            }
        }
    }

    #[test]
    fn async_chunker_matches() {
        let bytes = data(700_000, 4);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for chunking in [Chunking::fixed(4096).unwrap(), small_cdc()] {
            let got = rt.block_on(async {
                // A duplex pipe delivers the bytes in pieces of its own size.
                let (mut tx, rx) = tokio::io::duplex(3000);
                let feed = bytes.clone();
                let writer = tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt;
                    tx.write_all(&feed).await.unwrap();
                });
                let mut chunker = AsyncChunker::new(rx, chunking).unwrap();
                let mut out = Vec::new();
                while let Some(c) = chunker.next_chunk().await.unwrap() {
                    out.push((c.offset as usize, c.data.len()));
                }
                writer.await.unwrap();
                out
            });
            assert_eq!(got, chunking.split(&bytes));
        }
    }

    fn fingerprints(chunking: Chunking, bytes: &[u8]) -> Vec<crate::Fingerprint> {
        chunking
            .split(bytes)
            .into_iter()
            .map(|(o, l)| crate::Fingerprint::of(&bytes[o..o + l]))
            .collect()
    }

    /// How many chunks of `b` are not chunks of `a`.
    fn new_chunks(chunking: Chunking, a: &[u8], b: &[u8]) -> (usize, usize) {
        let old: std::collections::HashSet<_> = fingerprints(chunking, a).into_iter().collect();
        let newer = fingerprints(chunking, b);
        (
            newer.iter().filter(|f| !old.contains(f)).count(),
            newer.len(),
        )
    }

    #[test]
    fn insertion_changes_only_nearby_chunks_with_fastcdc_and_all_later_with_fixed() {
        let a = data(2 << 20, 5);
        let mut b = a.clone();
        let at = a.len() / 2;
        b.splice(
            at..at,
            b"inserted in the middle of the file".iter().copied(),
        );
        let cdc = small_cdc();
        let (changed, total) = new_chunks(cdc, &a, &b);
        // The chunk holding the insertion, and perhaps its neighbour.
        assert!(
            (1..=2).contains(&changed),
            "FastCDC: {changed} of {total} new"
        );
        let fixed = Chunking::fixed(8192).unwrap();
        let (changed, total) = new_chunks(fixed, &a, &b);
        // Every chunk from the insertion on.
        let after = total - at / 8192;
        assert!(
            changed >= after,
            "fixed: {changed} of {total} new, {after} after the insertion"
        );
        // An overwrite in place changes one fixed chunk (or two on a border).
        let mut c = a.clone();
        c[at + 100..at + 120].fill(0xAA);
        let (changed, _) = new_chunks(fixed, &a, &c);
        assert_eq!(changed, 1);
        let (changed, _) = new_chunks(cdc, &a, &c);
        assert!((1..=2).contains(&changed));
    }

    #[test]
    fn bounds_are_checked() {
        assert!(Chunking::fixed(MIN_CHUNK_SIZE).is_ok());
        assert!(Chunking::fixed(MAX_CHUNK_SIZE).is_ok());
        let e = Chunking::fixed(100).unwrap_err().to_string();
        assert!(e.contains("fixed chunk size 100 outside"), "{e}");
        assert!(Chunking::fixed(MAX_CHUNK_SIZE + 1).is_err());
        let e = Chunking::fastcdc(2048, 3000, 8192).unwrap_err().to_string();
        assert!(e.contains("not a power of two"), "{e}");
        let e = Chunking::fastcdc(8192, 4096, 16384)
            .unwrap_err()
            .to_string();
        assert!(e.contains("min <= avg <= max"), "{e}");
        let e = Chunking::fastcdc(4096, 8192, 8 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("max 8388608 outside"), "{e}");
        let e = Chunking::fastcdc(257, 512, 1024).unwrap_err().to_string();
        assert!(e.contains("even"), "{e}");
        let e = Chunking::fastcdc(256, 512, 768).unwrap_err().to_string();
        assert!(e.contains("below 1024"), "{e}");
        Chunking::DEFAULT_FIXED.validate().unwrap();
        Chunking::DEFAULT_FASTCDC.validate().unwrap();
        assert!(Chunker::new(std::io::empty(), Chunking::Fixed { size: 1 }).is_err());
    }

    /// A reader that is interrupted once, then fails.
    struct Flaky(u8);
    impl Read for Flaky {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            self.0 += 1;
            match self.0 {
                1 => Err(ErrorKind::Interrupted.into()),
                2 => {
                    out[..10].fill(1);
                    Ok(10)
                }
                _ => Err(std::io::Error::other("disk on fire")),
            }
        }
    }

    #[test]
    fn read_errors_reach_the_caller_and_interruptions_do_not() {
        let mut c = Chunker::new(Flaky(0), Chunking::fixed(1024).unwrap()).unwrap();
        let e = c.next_chunk().unwrap_err().to_string();
        assert!(e.contains("disk on fire"), "{e}");
    }

    /// Every chunk the async chunker yields after `take_single` gave
    /// nothing, as (offset, length), checked against the bytes.
    async fn rest<R: AsyncRead + Unpin>(
        c: &mut AsyncChunker<R>,
        bytes: &[u8],
    ) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        while let Some(chunk) = c.next_chunk().await.unwrap() {
            let at = chunk.offset as usize;
            assert_eq!(&chunk.data[..], &bytes[at..at + chunk.data.len()]);
            out.push((at, chunk.data.len()));
        }
        out
    }

    #[tokio::test]
    async fn take_single_takes_a_one_chunk_source_and_gives_back_anything_else() {
        let fixed = Chunking::fixed(4096).unwrap();
        for (len, max, single) in [
            (0, 4096, false),
            (1, 4096, true),
            (100, 4096, true),
            (4096, 4096, true),
            (4097, 4096, false),
            (3000, 2000, false),
            (20_000, 1 << 20, false),
        ] {
            let bytes = data(len, len as u64);
            // Two slices: a read ends at 4096 when there is more, so the
            // chunker cannot tell the end of a 4096-byte chunk from it.
            let (a, b) = bytes.split_at(len.min(4096));
            let mut c = AsyncChunker::new(tokio::io::AsyncReadExt::chain(a, b), fixed).unwrap();
            let took = c.take_single(max).await.unwrap();
            assert_eq!(took.is_some(), single, "{len} bytes, at most {max}");
            if let Some(chunk) = took {
                assert_eq!((chunk.offset, &chunk.data[..]), (0, &bytes[..]));
                assert!(c.next_chunk().await.unwrap().is_none());
            } else {
                assert_eq!(rest(&mut c, &bytes).await, fixed.split(&bytes), "{len}");
                assert!(c.take_single(max).await.unwrap().is_none());
            }
        }
        // Content-defined: one chunk only if no cut falls inside.
        let cdc = small_cdc();
        for (len, seed) in [(1000, 1), (2048, 2), (9000, 3), (40_000, 4)] {
            let bytes = data(len, seed);
            let cuts = cdc.split(&bytes);
            let mut c = AsyncChunker::new(&bytes[..], cdc).unwrap();
            match c.take_single(1 << 20).await.unwrap() {
                Some(chunk) => {
                    assert_eq!(cuts, vec![(0, len)]);
                    assert_eq!(&chunk.data[..], &bytes[..]);
                }
                None => assert_eq!(rest(&mut c, &bytes).await, cuts),
            }
        }
    }

    #[test]
    fn empty_and_tiny_inputs() {
        for chunking in [Chunking::DEFAULT_FIXED, Chunking::DEFAULT_FASTCDC] {
            assert!(chunking.split(&[]).is_empty());
            let mut c = Chunker::new(std::io::empty(), chunking).unwrap();
            assert!(c.next_chunk().unwrap().is_none());
            assert_eq!(chunking.split(b"x"), vec![(0, 1)]);
        }
        // Zeros have no content cuts: FastCDC cuts at max.
        let zeros = vec![0u8; 100_000];
        let cuts = small_cdc().split(&zeros);
        assert!(cuts[..cuts.len() - 1].iter().all(|c| c.1 == 32768));
    }
}
