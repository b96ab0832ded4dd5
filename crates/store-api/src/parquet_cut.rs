//! Cutting a Parquet file at its page boundaries, as the bytes stream in.
//!
//! A Parquet file is `PAR1`, then column chunks (each a run of pages, a
//! page being a Thrift compact `PageHeader` and `compressed_page_size`
//! bytes; zeros between them are padding), then optional page indexes and
//! bloom filters, then the footer
//! (Thrift `FileMetaData`, its length as a `u32`, `PAR1`). The walk reads
//! page headers from the front, so each page can be cut as soon as it has
//! arrived; where no page header parses it holds the rest of the file (at
//! most one maximal chunk), and at the end parses the footer and checks
//! that every column chunk it names ended where a page did. The footer
//! then attributes each page chunk to its row group and column. Whatever
//! does not fit that picture (a truncated or damaged file, a footer or
//! index region over the bound) is cut with FastCDC from where the picture
//! broke, with a note saying why; the bytes are stored either way.

use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::chunking::{Chunking, MAX_CHUNK_SIZE};
use crate::manifest::{ChunkRole, ParquetLayout, MAX_COLUMN_PATHS_BYTES, MAX_PARQUET_COLUMNS};

/// Parquet's magic, at both ends of a file.
const MAGIC: &[u8; 4] = b"PAR1";
/// The longest page header the walk accepts. Headers carry min/max
/// statistics, which writers truncate (arrow-rs to 64 bytes); a "header"
/// longer than this is taken for something else.
const PAGE_HEADER_MAX_BYTES: usize = 256 << 10;
/// Nesting of Thrift structs and lists the header parser follows.
const THRIFT_DEPTH_MAX: u32 = 16;
/// A dictionary page and the first data page after it share a chunk when
/// both together are at most this long (see docs/store.md, "Parquet").
pub const PAGE_GROUP_MAX_BYTES: usize = 64 << 10;

/// Page types of the format (`PageType`).
const DATA_PAGE: i32 = 0;
const INDEX_PAGE: i32 = 1;
const DICTIONARY_PAGE: i32 = 2;
const DATA_PAGE_V2: i32 = 3;

/// A page header read off the front of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageHead {
    /// Bytes of the header itself.
    pub header_len: usize,
    /// Bytes of page data after it.
    pub compressed_len: usize,
    /// `PageType`.
    pub page_type: i32,
}

impl PageHead {
    fn total(&self) -> usize {
        self.header_len + self.compressed_len
    }
}

/// Why no page header was read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeadError {
    /// The buffer ends inside the header.
    Short,
    /// These bytes are not a page header.
    NotHeader(String),
}

/// Thrift compact protocol, only as far as skipping and reading the three
/// integers of a `PageHeader` need. The `parquet` crate's own `PageHeader`
/// is crate-private in 60.x, so the walk carries this small reader.
struct Thrift<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Thrift<'_> {
    fn byte(&mut self) -> Result<u8, HeadError> {
        if self.at >= PAGE_HEADER_MAX_BYTES {
            return Err(HeadError::NotHeader(format!(
                "header longer than {PAGE_HEADER_MAX_BYTES} bytes"
            )));
        }
        let b = *self.buf.get(self.at).ok_or(HeadError::Short)?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, HeadError> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift.min(63);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(HeadError::NotHeader("varint over 10 bytes".into()))
    }

    fn zigzag(&mut self) -> Result<i64, HeadError> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn skip(&mut self, n: u64) -> Result<(), HeadError> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if n > PAGE_HEADER_MAX_BYTES {
            return Err(HeadError::NotHeader(format!("a {n}-byte field")));
        }
        for _ in 0..n {
            self.byte()?;
        }
        Ok(())
    }

    /// Skips one value of compact type `kind`.
    fn skip_value(&mut self, kind: u8, depth: u32) -> Result<(), HeadError> {
        if depth > THRIFT_DEPTH_MAX {
            return Err(HeadError::NotHeader("nested too deep".into()));
        }
        match kind {
            1 | 2 => Ok(()),
            3 => self.byte().map(drop),
            4..=6 => self.varint().map(drop),
            7 => self.skip(8),
            8 => {
                let n = self.varint()?;
                self.skip(n)
            }
            9 | 10 => {
                let head = self.byte()?;
                let elem = head & 0x0f;
                let n = match head >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                for _ in 0..n.min(PAGE_HEADER_MAX_BYTES as u64 + 1) {
                    // A bool inside a list is one byte.
                    if elem == 1 || elem == 2 {
                        self.byte()?;
                    } else {
                        self.skip_value(elem, depth + 1)?;
                    }
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                let kinds = self.byte()?;
                for _ in 0..n.min(PAGE_HEADER_MAX_BYTES as u64 + 1) {
                    for kind in [kinds >> 4, kinds & 0x0f] {
                        // A bool inside a map is one byte too.
                        if kind == 1 || kind == 2 {
                            self.byte()?;
                        } else {
                            self.skip_value(kind, depth + 1)?;
                        }
                    }
                }
                Ok(())
            }
            12 => self.skip_struct(depth + 1, |_, _, _| Ok(false)).map(drop),
            k => Err(HeadError::NotHeader(format!("unknown Thrift type {k}"))),
        }
    }

    /// Walks a struct's fields; `field(self, id, kind)` reads a field it
    /// wants and says so, else the field is skipped. Returns the field ids seen.
    fn skip_struct(
        &mut self,
        depth: u32,
        mut field: impl FnMut(&mut Self, i16, u8) -> Result<bool, HeadError>,
    ) -> Result<Vec<i16>, HeadError> {
        let mut last_id: i16 = 0;
        let mut seen = Vec::new();
        loop {
            let head = self.byte()?;
            if head == 0 {
                return Ok(seen);
            }
            let kind = head & 0x0f;
            let id = match head >> 4 {
                0 => i16::try_from(self.zigzag()?)
                    .map_err(|_| HeadError::NotHeader("field id out of range".into()))?,
                delta => last_id.saturating_add(i16::from(delta)),
            };
            last_id = id;
            if seen.len() >= 64 {
                return Err(HeadError::NotHeader("over 64 fields".into()));
            }
            seen.push(id);
            if !field(self, id, kind)? {
                self.skip_value(kind, depth)?;
            }
        }
    }
}

/// Reads the page header at the front of `buf`: its length, the page's
/// length, and its type, checked for what a page header must hold.
pub(crate) fn read_page_head(buf: &[u8]) -> Result<PageHead, HeadError> {
    let mut t = Thrift { buf, at: 0 };
    let mut ints = [None::<i64>; 3];
    let seen = t.skip_struct(0, |t, id, kind| {
        if (1..=3).contains(&id) {
            if kind != 5 {
                return Err(HeadError::NotHeader(format!(
                    "field {id} has Thrift type {kind}, not i32"
                )));
            }
            ints[(id - 1) as usize] = Some(t.zigzag()?);
            return Ok(true);
        }
        Ok(false)
    })?;
    let [Some(page_type), Some(uncompressed), Some(compressed)] = ints else {
        return Err(HeadError::NotHeader("type or sizes missing".into()));
    };
    let sub_header = match page_type as i32 {
        DATA_PAGE => 5,
        INDEX_PAGE => 6,
        DICTIONARY_PAGE => 7,
        DATA_PAGE_V2 => 8,
        other => return Err(HeadError::NotHeader(format!("page type {other}"))),
    };
    if !seen.contains(&sub_header) {
        return Err(HeadError::NotHeader(format!(
            "page type {page_type} without its header (field {sub_header})"
        )));
    }
    let size = |v: i64| usize::try_from(v).ok().filter(|&v| v <= i32::MAX as usize);
    let (Some(_), Some(compressed_len)) = (size(uncompressed), size(compressed)) else {
        return Err(HeadError::NotHeader(format!(
            "negative page sizes {uncompressed} / {compressed}"
        )));
    };
    Ok(PageHead {
        header_len: t.at,
        compressed_len,
        page_type: page_type as i32,
    })
}

/// Where the walk stands.
#[derive(Clone, Debug)]
enum State {
    /// Nothing cut yet: is it `PAR1`?
    Start,
    /// At a page boundary (`left == 0`) or inside a page longer than a
    /// chunk, `left` bytes of it still to cut.
    Pages { left: u64 },
    /// No page header parsed at `walk_end`: holding the rest of the file.
    Tail,
    /// Cut at the known footer: the held region, then the footer.
    Footer,
    /// FastCDC from here on.
    Fallback,
}

/// What the footer said, for attributing chunks at the end.
#[derive(Debug)]
struct Footer {
    /// Where the footer starts (its Thrift bytes).
    start: u64,
    /// (row group, leaf column, first byte, end) of every column chunk.
    column_chunks: Vec<(u32, u16, u64, u64)>,
    /// Leaf column paths, dotted.
    columns: Vec<String>,
}

/// The streaming Parquet cutter of [`Chunking::Parquet`] and [`Chunking::Auto`].
#[derive(Debug)]
pub(crate) struct PageWalk {
    state: State,
    fallback: Chunking,
    /// `Parquet` mode notes a file that is not Parquet; `Auto` does not.
    note_non_parquet: bool,
    /// Where the page walk stopped (the first byte that was not a page).
    walk_end: u64,
    /// Cuts still owed from the tail: lengths, in order.
    tail_cuts: Vec<usize>,
    footer: Option<Footer>,
    /// Whether the first bytes were `PAR1` (else the whole object is FastCDC).
    started_as_parquet: bool,
    note: Option<String>,
}

impl PageWalk {
    pub(crate) fn new(fallback: Chunking, note_non_parquet: bool) -> Self {
        Self {
            state: State::Start,
            fallback,
            note_non_parquet,
            walk_end: 0,
            tail_cuts: Vec::new(),
            footer: None,
            started_as_parquet: false,
            note: None,
        }
    }

    fn fall_back(&mut self, note: String) {
        self.note.get_or_insert(note);
        self.state = State::Fallback;
    }

    /// The length of the next chunk of `buf`, which starts at object
    /// offset `at` on a chunk boundary; `None` when more bytes are needed
    /// (only when `!eof` and `buf` is shorter than a maximal chunk).
    pub(crate) fn cut(&mut self, buf: &[u8], eof: bool, at: u64) -> Option<usize> {
        if buf.is_empty() && eof {
            return Some(0);
        }
        loop {
            let step = match self.state {
                State::Start => self.cut_start(buf, eof),
                State::Pages { left } => self.cut_pages(buf, eof, at, left),
                State::Tail => self.cut_tail(buf, eof, at),
                State::Footer if self.tail_cuts.is_empty() => {
                    self.state = State::Fallback;
                    Step::Again
                }
                State::Footer => Step::Cut(self.tail_cuts.remove(0)),
                State::Fallback => return self.fallback.cut(buf, eof),
            };
            match step {
                Step::Cut(n) => {
                    if matches!(self.state, State::Footer) && self.tail_cuts.is_empty() {
                        self.state = State::Fallback;
                    }
                    return Some(n);
                }
                Step::More => return None,
                Step::Again => continue,
            }
        }
    }

    fn cut_start(&mut self, buf: &[u8], eof: bool) -> Step {
        if buf.len() < MAGIC.len() && !eof {
            return Step::More;
        }
        if buf.starts_with(MAGIC) {
            self.started_as_parquet = true;
            self.state = State::Pages { left: 0 };
            return Step::Cut(MAGIC.len());
        }
        if self.note_non_parquet {
            self.note =
                Some("not a Parquet file (does not start with PAR1): cut with FastCDC".into());
        }
        self.state = State::Fallback;
        Step::Again
    }

    fn cut_pages(&mut self, buf: &[u8], eof: bool, at: u64, left: u64) -> Step {
        let max = MAX_CHUNK_SIZE as usize;
        if left > 0 {
            let want = usize::try_from(left).unwrap_or(max).min(max);
            if buf.len() >= want {
                self.state = State::Pages {
                    left: left - want as u64,
                };
                return Step::Cut(want);
            }
            if !eof {
                return Step::More;
            }
            self.fall_back(format!(
                "truncated: the page cut at byte {at} runs past the end of the object; \
                 the rest is cut with FastCDC"
            ));
            return Step::Again;
        }
        // Zeros where a page would start are padding (writers that align
        // row groups pad with zeros): a page header, a page index, a bloom
        // filter and the footer all start with a field header, never 0.
        if buf.first() == Some(&0) {
            let zeros = buf.iter().take(max).take_while(|&&b| b == 0).count();
            if zeros == buf.len() && !eof && buf.len() < max {
                return Step::More;
            }
            return Step::Cut(zeros);
        }
        let head = match read_page_head(buf) {
            Ok(head) => head,
            Err(HeadError::Short) if !eof && buf.len() < max => return Step::More,
            Err(_) => {
                self.walk_end = at;
                self.state = State::Tail;
                return Step::Again;
            }
        };
        let total = head.total();
        if head.page_type == DICTIONARY_PAGE && total <= PAGE_GROUP_MAX_BYTES {
            match read_page_head(buf.get(total..).unwrap_or_default()) {
                Ok(next)
                    if matches!(next.page_type, DATA_PAGE | DATA_PAGE_V2)
                        && total + next.total() <= PAGE_GROUP_MAX_BYTES =>
                {
                    if buf.len() >= total + next.total() {
                        return Step::Cut(total + next.total());
                    }
                    if !eof {
                        return Step::More;
                    }
                }
                Err(HeadError::Short) if !eof && buf.len() < max => return Step::More,
                _ => {}
            }
        }
        self.state = State::Pages { left: total as u64 };
        Step::Again
    }

    /// The bytes after the last page: held until the end (they fit in one
    /// maximal chunk) and cut at the footer, or cut with FastCDC if they
    /// do not fit or the footer does not match the pages walked.
    fn cut_tail(&mut self, buf: &[u8], eof: bool, at: u64) -> Step {
        // A tail of a maximal chunk or more is cut with FastCDC whether or
        // not the end is in sight, so that a slice and a stream cut alike.
        if buf.len() < MAX_CHUNK_SIZE as usize && !eof {
            return Step::More;
        }
        if buf.len() >= MAX_CHUNK_SIZE as usize {
            self.fall_back(format!(
                "no page header at byte {at} and over {MAX_CHUNK_SIZE} bytes follow: \
                 cut with FastCDC from there, without column metadata"
            ));
            return Step::Again;
        }
        match self.read_footer(buf, at) {
            Ok(footer) => {
                let region = (footer.start - at) as usize;
                self.tail_cuts = [region, buf.len() - region]
                    .into_iter()
                    .filter(|&n| n > 0)
                    .collect();
                self.footer = Some(footer);
                self.state = State::Footer;
            }
            Err(why) => self.fall_back(format!(
                "{why}; the bytes from {at} on are cut with FastCDC, without column metadata"
            )),
        }
        Step::Again
    }

    /// Parses the footer at the end of `tail` (which starts at object
    /// offset `at`, where the walk stopped) and checks that the walk
    /// reached the end of every column chunk.
    fn read_footer(&self, tail: &[u8], at: u64) -> Result<Footer, String> {
        let size = at + tail.len() as u64;
        let Some(end) = tail.len().checked_sub(8) else {
            return Err(format!(
                "truncated: no footer (page walk stopped at byte {at})"
            ));
        };
        if &tail[end + 4..] != MAGIC {
            return Err("truncated or damaged: the file does not end with PAR1".into());
        }
        let len_bytes: [u8; 4] = tail[end..end + 4].try_into().unwrap_or_default();
        let footer_len = u32::from_le_bytes(len_bytes) as usize;
        let Some(start_in_tail) = end.checked_sub(footer_len) else {
            return Err(format!(
                "damaged: footer of {footer_len} bytes does not fit after the last page (byte {at})"
            ));
        };
        let footer_bytes = &tail[start_in_tail..end];
        // The crate's decoder returns errors for damage (fuzzed here and
        // upstream); a panic it might still hold must not fail a put, which
        // stores any bytes.
        let footer = std::panic::catch_unwind(|| {
            let metadata = ParquetMetaDataReader::decode_metadata(footer_bytes)
                .map_err(|e| format!("damaged: footer does not parse: {e}"))?;
            footer_of(&metadata, at + start_in_tail as u64)
        })
        .unwrap_or_else(|_| Err("damaged: the footer decoder gave up".into()))?;
        for &(rg, col, first, last) in &footer.column_chunks {
            if last > at || first < MAGIC.len() as u64 {
                return Err(format!(
                    "damaged: column chunk of row group {rg} column {col} spans bytes \
                     {first}..{last}, but the pages walked end at {at} (size {size})"
                ));
            }
        }
        Ok(footer)
    }

    /// How the object was cut and what each chunk holds, given the
    /// lengths of the chunks cut, in order.
    pub(crate) fn outcome(&self, lens: &[u32], chunking: Chunking) -> CutOutcome {
        if !self.started_as_parquet {
            return CutOutcome {
                chunking: self.fallback,
                layout: None,
                note: self.note.clone(),
            };
        }
        let layout = match (&self.footer, &self.state) {
            (Some(footer), State::Fallback) if self.note.is_none() => {
                attribute(footer, self.walk_end, lens).map_err(Some)
            }
            _ => Err(None),
        };
        let (layout, note) = match layout {
            Ok(layout) => (Some(layout), None),
            Err(why) => (
                None,
                why.or_else(|| self.note.clone()).or_else(|| {
                    Some("truncated: the file ends after its pages, without a footer".into())
                }),
            ),
        };
        CutOutcome {
            chunking,
            layout,
            note,
        }
    }
}

enum Step {
    Cut(usize),
    More,
    Again,
}

/// How an object was cut: the chunking to record in its manifest, what
/// each chunk holds (a Parquet file cut by pages), and a warning if a file
/// that looked like Parquet was not cut as one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutOutcome {
    /// The chunking the manifest records.
    pub chunking: Chunking,
    /// Row group and column of each chunk, for a Parquet file cut by pages.
    pub layout: Option<ParquetLayout>,
    /// Why a file was not (wholly) cut as Parquet.
    pub note: Option<String>,
}

/// Column chunk ranges and leaf column paths from parsed metadata.
fn footer_of(metadata: &ParquetMetaData, start: u64) -> Result<Footer, String> {
    let schema = metadata.file_metadata().schema_descr();
    if schema.num_columns() > MAX_PARQUET_COLUMNS {
        return Err(format!(
            "{} columns, over the {MAX_PARQUET_COLUMNS} a manifest describes",
            schema.num_columns()
        ));
    }
    let columns: Vec<String> = schema.columns().iter().map(|c| c.path().string()).collect();
    let paths_bytes: usize = columns.iter().map(String::len).sum();
    if paths_bytes > MAX_COLUMN_PATHS_BYTES {
        return Err(format!(
            "column names of {paths_bytes} bytes, over the {MAX_COLUMN_PATHS_BYTES} a manifest holds"
        ));
    }
    let mut column_chunks = Vec::new();
    for (rg, group) in metadata.row_groups().iter().enumerate() {
        for (col, chunk) in group.columns().iter().enumerate() {
            // `byte_range` panics on negative offsets: a damaged footer
            // must give an error, so the same range is computed here.
            let first = chunk
                .dictionary_page_offset()
                .unwrap_or_else(|| chunk.data_page_offset());
            let (Ok(first), Ok(len)) =
                (u64::try_from(first), u64::try_from(chunk.compressed_size()))
            else {
                return Err(format!(
                    "damaged: column chunk of row group {rg} column {col} at {first}, {} bytes",
                    chunk.compressed_size()
                ));
            };
            let end = first
                .checked_add(len)
                .ok_or_else(|| format!("column chunk {rg}/{col} range overflows"))?;
            column_chunks.push((rg as u32, col as u16, first, end));
        }
    }
    column_chunks.sort_by_key(|c| c.2);
    for w in column_chunks.windows(2) {
        if w[0].3 > w[1].2 {
            return Err(format!(
                "damaged: column chunks at {} and {} overlap",
                w[0].2, w[1].2
            ));
        }
    }
    Ok(Footer {
        start,
        column_chunks,
        columns,
    })
}

/// The role of every chunk: each chunk before `walk_end` lies within one
/// column chunk (a page chunk) or outside all (other); the chunk starting
/// at the footer and after is the footer; the rest is other.
fn attribute(footer: &Footer, walk_end: u64, lens: &[u32]) -> Result<ParquetLayout, String> {
    let mut roles = Vec::with_capacity(lens.len());
    let mut at = 0u64;
    let mut next_cc = 0;
    for &len in lens {
        let end = at + u64::from(len);
        let role = if at >= footer.start {
            ChunkRole::Footer
        } else if at >= walk_end {
            ChunkRole::Other
        } else {
            while next_cc < footer.column_chunks.len() && footer.column_chunks[next_cc].3 <= at {
                next_cc += 1;
            }
            match footer.column_chunks.get(next_cc) {
                Some(&(row_group, column, first, last)) if first <= at && end <= last => {
                    ChunkRole::Page { row_group, column }
                }
                Some(&(_, _, first, _)) if end <= first => ChunkRole::Other,
                None => ChunkRole::Other,
                Some(&(rg, col, first, last)) => {
                    return Err(format!(
                        "damaged: the page cut at bytes {at}..{end} crosses the edge of the \
                         column chunk of row group {rg} column {col} ({first}..{last})"
                    ))
                }
            }
        };
        roles.push(role);
        at = end;
    }
    Ok(ParquetLayout {
        columns: footer.columns.clone(),
        roles,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_reader_rejects_what_is_not_a_page_header() {
        // Not a struct: a stop byte at once gives no fields.
        assert!(matches!(read_page_head(&[0]), Err(HeadError::NotHeader(_))));
        assert_eq!(read_page_head(&[0x15]), Err(HeadError::Short));
        // Field 1 as a binary, not an i32.
        assert!(matches!(
            read_page_head(&[0x18, 0x01, b'x', 0]),
            Err(HeadError::NotHeader(_))
        ));
        // type=0 (data page), sizes 10/10, but no data page header.
        assert!(matches!(
            read_page_head(&[0x15, 0x00, 0x15, 0x14, 0x15, 0x14, 0x00]),
            Err(HeadError::NotHeader(_))
        ));
        // The same with an (empty) data page header, field 5.
        let head = read_page_head(&[0x15, 0x00, 0x15, 0x14, 0x15, 0x14, 0x2c, 0x00, 0x00]);
        assert_eq!(
            head,
            Ok(PageHead {
                header_len: 9,
                compressed_len: 10,
                page_type: DATA_PAGE
            })
        );
        // Text is not a header.
        assert!(read_page_head(b"hello, world\n").is_err());
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic_the_header_reader(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        ) {
            if let Ok(head) = read_page_head(&bytes) {
                proptest::prop_assert!(head.header_len <= bytes.len());
            }
            // Behind PAR1, the walk covers every byte exactly once.
            let mut file = MAGIC.to_vec();
            file.extend_from_slice(&bytes);
            let (cuts, _) = Chunking::DEFAULT_PARQUET.split_with_outcome(&file);
            proptest::prop_assert_eq!(cuts.iter().map(|c| c.1).sum::<usize>(), file.len());
        }
    }
}
