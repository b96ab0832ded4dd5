//! What one file holds that its backing file does not yet: the pages
//! written since the last sync, and the size when a write or a truncate
//! changed it. This is the "volatile cache" of the file system: a sync
//! moves it into the backing file (the durable medium), a power loss drops
//! it or moves a random part of it (writeback that happened to run first).

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The unit of writeback: what a disk writes whole or not at all.
pub(crate) const PAGE_BYTES: u64 = 4096;

enum Page {
    /// Zeros (a punched or zeroed range), without holding 4 KiB of them.
    Zero,
    /// The page's whole content as the program last wrote it.
    Data(Box<[u8]>),
}

/// The unsynced state of one file.
#[derive(Default)]
pub(crate) struct Overlay {
    pages: BTreeMap<u64, Page>,
    /// The size the program sees, when a write or truncate since the last
    /// sync changed it.
    size_bytes: Option<u64>,
    /// The lowest size a truncate cut the file to since the last sync:
    /// backing bytes from here on are gone for the program (read as zeros
    /// when the file grows again) though still in the backing file.
    cut_bytes: Option<u64>,
}

/// What a power loss did to one file.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lost {
    pub pages_dropped: u64,
    pub pages_kept: u64,
    pub size_reverted: bool,
}

impl Overlay {
    /// Whether there is nothing unsynced.
    pub fn is_clean(&self) -> bool {
        self.pages.is_empty() && self.size_bytes.is_none() && self.cut_bytes.is_none()
    }

    /// Bytes held in memory for this file (zero pages count nothing).
    pub fn held_bytes(&self) -> u64 {
        self.pages
            .values()
            .filter(|p| matches!(p, Page::Data(_)))
            .count() as u64
            * PAGE_BYTES
    }

    /// The size the program sees.
    pub fn size_bytes(&self, backing_len: u64) -> u64 {
        self.size_bytes.unwrap_or(backing_len)
    }

    /// Backing bytes below this still belong to the file.
    fn backing_limit(&self, backing_len: u64) -> u64 {
        self.cut_bytes.map_or(backing_len, |c| c.min(backing_len))
    }

    /// The page's content as the program sees it now.
    fn load(&self, file: &File, index: u64, backing_len: u64) -> io::Result<Box<[u8]>> {
        let mut page = vec![0u8; PAGE_BYTES as usize].into_boxed_slice();
        match self.pages.get(&index) {
            Some(Page::Data(d)) => page.copy_from_slice(d),
            Some(Page::Zero) => {}
            None => {
                let start = index * PAGE_BYTES;
                let end = (start + PAGE_BYTES).min(self.backing_limit(backing_len));
                if end > start {
                    file.read_exact_at(&mut page[..(end - start) as usize], start)?;
                }
            }
        }
        Ok(page)
    }

    /// Writes `data` at `offset`, in memory only.
    pub fn write(
        &mut self,
        file: &File,
        offset: u64,
        data: &[u8],
        backing_len: u64,
    ) -> io::Result<()> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        let mut at = offset;
        while at < end {
            let index = at / PAGE_BYTES;
            let in_page = (at % PAGE_BYTES) as usize;
            let n = ((PAGE_BYTES as usize - in_page) as u64).min(end - at) as usize;
            let mut page = if n == PAGE_BYTES as usize {
                vec![0u8; PAGE_BYTES as usize].into_boxed_slice()
            } else {
                self.load(file, index, backing_len)?
            };
            let from = (at - offset) as usize;
            page[in_page..in_page + n].copy_from_slice(&data[from..from + n]);
            self.pages.insert(index, Page::Data(page));
            at += n as u64;
        }
        if end > self.size_bytes(backing_len) {
            self.size_bytes = Some(end);
        }
        Ok(())
    }

    /// Zeros `[offset, offset + len)` without changing the size (a punched
    /// hole or a zeroed range), in memory only.
    pub fn zero(&mut self, file: &File, offset: u64, len: u64, backing_len: u64) -> io::Result<()> {
        let end = offset.saturating_add(len).min(self.size_bytes(backing_len));
        let mut at = offset;
        while at < end {
            let index = at / PAGE_BYTES;
            let in_page = at % PAGE_BYTES;
            let n = (PAGE_BYTES - in_page).min(end - at);
            if n == PAGE_BYTES {
                self.pages.insert(index, Page::Zero);
            } else {
                let mut page = self.load(file, index, backing_len)?;
                page[in_page as usize..(in_page + n) as usize].fill(0);
                self.pages.insert(index, Page::Data(page));
            }
            at += n;
        }
        Ok(())
    }

    /// Sets the size to `size`, in memory only.
    pub fn truncate(&mut self, size: u64, backing_len: u64) {
        if size < self.size_bytes(backing_len) {
            let first_gone = size.div_ceil(PAGE_BYTES);
            self.pages.split_off(&first_gone);
            if size % PAGE_BYTES != 0 {
                if let Some(Page::Data(d)) = self.pages.get_mut(&(size / PAGE_BYTES)) {
                    d[(size % PAGE_BYTES) as usize..].fill(0);
                }
            }
            self.cut_bytes = Some(self.cut_bytes.map_or(size, |c| c.min(size)));
        }
        self.size_bytes = Some(size);
    }

    /// Reads up to `len` bytes at `offset` as the program sees them.
    pub fn read(
        &self,
        file: &File,
        offset: u64,
        len: u64,
        backing_len: u64,
    ) -> io::Result<Vec<u8>> {
        let end = offset.saturating_add(len).min(self.size_bytes(backing_len));
        if end <= offset {
            return Ok(Vec::new());
        }
        let mut out = vec![0u8; (end - offset) as usize];
        // The clean bytes in one request, then the unsynced pages over them.
        let clean_end = end.min(self.backing_limit(backing_len));
        if clean_end > offset {
            file.read_exact_at(&mut out[..(clean_end - offset) as usize], offset)?;
        }
        let first = offset / PAGE_BYTES;
        let last = (end - 1) / PAGE_BYTES;
        for (&index, page) in self.pages.range(first..=last) {
            let page_start = index * PAGE_BYTES;
            let from = page_start.max(offset);
            let to = (page_start + PAGE_BYTES).min(end);
            let dst = &mut out[(from - offset) as usize..(to - offset) as usize];
            match page {
                Page::Zero => dst.fill(0),
                Page::Data(d) => {
                    dst.copy_from_slice(
                        &d[(from - page_start) as usize..(to - page_start) as usize],
                    );
                }
            }
        }
        Ok(out)
    }

    /// Moves everything into the backing file (an fsync), leaving the
    /// overlay clean.
    pub fn sync(&mut self, file: &File, backing_len: u64) -> io::Result<()> {
        self.apply(file, backing_len, &mut || true).map(|_| ())
    }

    /// A power loss: each unsynced page reaches the backing file only if
    /// `survives()` says so, and so does the size change (with the
    /// truncation it may carry). The overlay is clean afterwards.
    pub fn lose(
        &mut self,
        file: &File,
        backing_len: u64,
        survives: &mut dyn FnMut() -> bool,
    ) -> io::Result<Lost> {
        self.apply(file, backing_len, survives)
    }

    fn apply(
        &mut self,
        file: &File,
        backing_len: u64,
        survives: &mut dyn FnMut() -> bool,
    ) -> io::Result<Lost> {
        let mut lost = Lost::default();
        let size_changed = self.size_bytes.is_some() || self.cut_bytes.is_some();
        let size_kept = size_changed && survives();
        lost.size_reverted = size_changed && !size_kept;
        let final_len = if size_kept {
            self.size_bytes(backing_len)
        } else {
            backing_len
        };
        if size_kept {
            if let Some(cut) = self.cut_bytes.filter(|&c| c < backing_len) {
                file.set_len(cut)?;
            }
        }
        let zeros = [0u8; PAGE_BYTES as usize];
        for (index, page) in std::mem::take(&mut self.pages) {
            let start = index * PAGE_BYTES;
            if start >= final_len || !survives() {
                lost.pages_dropped += 1;
                continue;
            }
            let n = (final_len - start).min(PAGE_BYTES) as usize;
            match &page {
                Page::Zero => file.write_all_at(&zeros[..n], start)?,
                Page::Data(d) => file.write_all_at(&d[..n], start)?,
            }
            lost.pages_kept += 1;
        }
        if size_kept && file.metadata()?.len() != final_len {
            file.set_len(final_len)?;
        }
        self.size_bytes = None;
        self.cut_bytes = None;
        Ok(lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backing(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().write_all_at(bytes, 0).unwrap();
        let file = f.reopen().unwrap();
        (f, file)
    }

    fn len(file: &File) -> u64 {
        file.metadata().unwrap().len()
    }

    #[test]
    fn reads_see_writes_and_the_backing_file_does_not_until_a_sync() {
        let (_t, file) = backing(&[1u8; 10_000]);
        let mut o = Overlay::default();
        o.write(&file, 4000, &[2u8; 200], len(&file)).unwrap();
        let got = o.read(&file, 3990, 20, len(&file)).unwrap();
        assert_eq!(&got[..10], &[1u8; 10]);
        assert_eq!(&got[10..], &[2u8; 10]);
        let mut raw = [0u8; 1];
        file.read_exact_at(&mut raw, 4000).unwrap();
        assert_eq!(raw[0], 1, "nothing reached the backing file");
        o.sync(&file, len(&file)).unwrap();
        assert!(o.is_clean());
        file.read_exact_at(&mut raw, 4199).unwrap();
        assert_eq!(raw[0], 2);
        file.read_exact_at(&mut raw, 4200).unwrap();
        assert_eq!(raw[0], 1);
    }

    #[test]
    fn growth_is_lost_with_the_pages_and_kept_by_a_sync() {
        let (_t, file) = backing(&[]);
        let mut o = Overlay::default();
        o.write(&file, 8192, b"tail", 0).unwrap();
        assert_eq!(o.size_bytes(0), 8196);
        assert_eq!(o.read(&file, 0, 4, 0).unwrap(), vec![0u8; 4]);
        let lost = o.lose(&file, 0, &mut || false).unwrap();
        assert_eq!(lost.pages_dropped, 1);
        assert!(lost.size_reverted);
        assert_eq!(len(&file), 0);
        o.write(&file, 8192, b"tail", 0).unwrap();
        o.sync(&file, 0).unwrap();
        assert_eq!(len(&file), 8196);
    }

    #[test]
    fn a_truncated_then_regrown_file_reads_zeros_where_it_was_cut() {
        let (_t, file) = backing(&[9u8; 8192]);
        let mut o = Overlay::default();
        o.truncate(100, len(&file));
        assert_eq!(o.read(&file, 0, 8192, len(&file)).unwrap().len(), 100);
        o.truncate(8192, len(&file));
        let got = o.read(&file, 0, 8192, len(&file)).unwrap();
        assert_eq!(&got[..100], &[9u8; 100]);
        assert!(got[100..].iter().all(|&b| b == 0));
        o.sync(&file, len(&file)).unwrap();
        let mut raw = vec![0u8; 8192];
        file.read_exact_at(&mut raw, 0).unwrap();
        assert_eq!(raw, got);
    }

    #[test]
    fn zeroing_keeps_the_size_and_a_power_loss_may_keep_some_pages() {
        let (_t, file) = backing(&[5u8; 4 * 4096]);
        let mut o = Overlay::default();
        o.zero(&file, 100, 4 * 4096 + 50, len(&file)).unwrap();
        assert_eq!(o.size_bytes(len(&file)), 4 * 4096);
        let got = o.read(&file, 0, 4 * 4096, len(&file)).unwrap();
        assert_eq!(&got[..100], &[5u8; 100]);
        assert!(got[100..].iter().all(|&b| b == 0));
        let mut coin = [true, false, true, false].into_iter().cycle();
        let lost = o
            .lose(&file, len(&file), &mut || coin.next().unwrap())
            .unwrap();
        assert_eq!(lost.pages_kept + lost.pages_dropped, 4);
        assert!(lost.pages_kept > 0 && lost.pages_dropped > 0);
        assert!(o.is_clean());
    }
}
