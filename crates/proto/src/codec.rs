//! The little-endian field codec the services' own encodings are written
//! with (store and volume calls, store records): [`ByteReader`] checks
//! every read against the bytes left and refuses a count the bytes cannot
//! hold before anything is allocated; [`ByteWriter`] appends. A service
//! adds its own fields (names, definitions, manifests) on top, and turns a
//! [`CodecError`] into its own error with `?`.

use bytes::Bytes;

/// A read past the end, a count the bytes cannot hold, trailing bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {what}: {reason}")]
pub struct CodecError {
    /// What was being read (a call, an answer, a record).
    pub what: &'static str,
    /// What was wrong.
    pub reason: String,
}

/// Bounds-checked little-endian reads off one message.
#[derive(Debug, Clone)]
pub struct ByteReader<'a> {
    what: &'static str,
    buf: &'a [u8],
    at: usize,
}

impl<'a> ByteReader<'a> {
    /// Reads `buf` from its start; `what` names it in errors.
    pub fn new(what: &'static str, buf: &'a [u8]) -> Self {
        ByteReader { what, buf, at: 0 }
    }

    /// What is being read.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// Bytes not read yet.
    pub fn left(&self) -> usize {
        self.buf.len() - self.at
    }

    /// Whether every byte has been read.
    pub fn done(&self) -> bool {
        self.at == self.buf.len()
    }

    /// An error about this message.
    pub fn malformed(&self, reason: String) -> CodecError {
        CodecError {
            what: self.what,
            reason,
        }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.left() < n {
            return Err(self.malformed(format!(
                "needs {n} bytes at offset {}, only {} left",
                self.at,
                self.left()
            )));
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    /// The next `n` bytes as a zero-copy slice of `source`, the buffer
    /// this reader reads.
    pub fn slice_of(&mut self, source: &Bytes, n: usize) -> Result<Bytes, CodecError> {
        debug_assert_eq!(source.len(), self.buf.len(), "the reader's own buffer");
        let start = self.at;
        self.take(n)?;
        Ok(source.slice(start..start + n))
    }

    /// The next `N` bytes.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// A byte.
    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A 0/1 byte.
    pub fn flag(&mut self) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.malformed(format!("flag byte {other}"))),
        }
    }

    /// A u32 count of items of at least `per_item_bytes` each: a count the
    /// bytes left cannot hold is refused before anything is allocated.
    pub fn count(&mut self, per_item_bytes: usize) -> Result<usize, CodecError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(per_item_bytes) > self.left() {
            return Err(self.malformed(format!(
                "{n} items cannot fit in the {} bytes left",
                self.left()
            )));
        }
        Ok(n)
    }

    /// Checks that the message ends here.
    pub fn end(&self) -> Result<(), CodecError> {
        match self.left() {
            0 => Ok(()),
            n => Err(self.malformed(format!("{n} bytes trail the message"))),
        }
    }
}

/// Little-endian appends to a message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ByteWriter(pub Vec<u8>);

impl ByteWriter {
    /// A message that starts with `first` (an op or a status byte).
    pub fn starting(first: u8) -> Self {
        ByteWriter(vec![first])
    }

    /// A byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }

    /// A little-endian u16.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A little-endian u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A little-endian u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Bytes as they are.
    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }

    /// A 0/1 byte.
    pub fn flag(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_short_input_is_an_error() {
        let mut w = ByteWriter::starting(7);
        w.u16(0x1234).u32(5).u64(u64::MAX).flag(true).raw(b"ab");
        let msg = Bytes::from(w.0);
        let mut r = ByteReader::new("test message", &msg);
        assert_eq!(r.u8(), Ok(7));
        assert_eq!(r.u16(), Ok(0x1234));
        assert_eq!(r.u32(), Ok(5));
        assert_eq!(r.u64(), Ok(u64::MAX));
        assert_eq!(r.flag(), Ok(true));
        assert_eq!(&r.slice_of(&msg, 2).unwrap()[..], b"ab");
        assert!(r.end().is_ok());
        let e = r.u8().unwrap_err();
        assert_eq!(e.what, "test message");
        assert!(e.reason.contains("needs 1 bytes"), "{e}");
    }

    #[test]
    fn counts_the_bytes_cannot_hold_are_refused() {
        let msg = [3u8, 0, 0, 0, 1, 2];
        let mut r = ByteReader::new("m", &msg);
        assert!(r.count(1).is_err());
        let mut r = ByteReader::new("m", &msg);
        assert_eq!(r.count(0), Ok(3));
        assert!(r.end().unwrap_err().reason.contains("2 bytes trail"));
        let bad = [2u8];
        assert!(ByteReader::new("m", &bad).flag().is_err());
    }
}
