//! Minerva's fgrep-8: count the occurrences of an 8-byte pattern.

use memchr::memmem;
use serde::{Deserialize, Serialize};

use crate::error::KernelError;
use crate::output::Output;
use crate::scan::{Part, ScanKernel};

/// Bytes of context a range keeps at each edge: a match that straddles an
/// edge has at most this many bytes on either side.
const EDGE_BYTES: usize = 7;

/// The part of a range: the matches wholly inside it and its first and last
/// (up to) seven bytes, where a match across its edges would begin or end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fgrep8Part {
    start: u64,
    end: u64,
    matches: u64,
    /// The range's first `min(7, len)` bytes.
    head: Vec<u8>,
    /// The range's last `min(7, len)` bytes.
    tail: Vec<u8>,
}

impl Fgrep8Part {
    pub(crate) fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.head.len() + self.tail.len()
    }
}

/// The compiled kernel.
pub(crate) struct Fgrep8 {
    pattern: [u8; 8],
    finder: memmem::Finder<'static>,
}

impl Fgrep8 {
    pub(crate) fn new(pattern: [u8; 8]) -> Fgrep8 {
        Fgrep8 {
            pattern,
            finder: memmem::Finder::new(&pattern).into_owned(),
        }
    }

    fn count(&self, bytes: &[u8]) -> u64 {
        // Overlapping matches count: restart one byte after each match.
        let mut n = 0u64;
        let mut at = 0usize;
        while let Some(i) = self.finder.find(&bytes[at..]) {
            n += 1;
            at += i + 1;
        }
        n
    }

    fn summarize(&self, bytes: &[u8], start: u64) -> Fgrep8Part {
        let edge = bytes.len().min(EDGE_BYTES);
        Fgrep8Part {
            start,
            end: start + bytes.len() as u64,
            matches: self.count(bytes),
            head: bytes[..edge].to_vec(),
            tail: bytes[bytes.len() - edge..].to_vec(),
        }
    }

    fn join(&self, left: Fgrep8Part, right: Fgrep8Part) -> Result<Fgrep8Part, KernelError> {
        if left.end != right.start {
            return Err(KernelError::Disjoint {
                left_end: left.end,
                right_start: right.start,
            });
        }
        // Matches that start in the left's tail and end in the right's head:
        // those in tail+head that neither lies wholly inside.
        // The bytes around the cut, on the stack: this runs once per page.
        let mut seam_buf = [0u8; 2 * EDGE_BYTES];
        let seam_len = left.tail.len() + right.head.len();
        seam_buf[..left.tail.len()].copy_from_slice(&left.tail);
        seam_buf[left.tail.len()..seam_len].copy_from_slice(&right.head);
        let seam = &seam_buf[..seam_len];
        let straddling = (0..seam.len().saturating_sub(7))
            .filter(|&i| i < left.tail.len() && i + 8 > left.tail.len())
            .filter(|&i| seam[i..i + 8] == self.pattern)
            .count() as u64;
        let len_left = (left.end - left.start) as usize;
        let len_right = (right.end - right.start) as usize;
        // A short side is all edge: the new edges reach across it.
        let head = if len_left >= EDGE_BYTES {
            left.head
        } else {
            seam[..(len_left + len_right).min(EDGE_BYTES)].to_vec()
        };
        let tail = if len_right >= EDGE_BYTES {
            right.tail
        } else {
            seam[seam.len() - (len_left + len_right).min(EDGE_BYTES)..].to_vec()
        };
        Ok(Fgrep8Part {
            start: left.start,
            end: right.end,
            matches: left.matches + right.matches + straddling,
            head,
            tail,
        })
    }
}

fn part(p: Part) -> Result<Fgrep8Part, KernelError> {
    match p {
        Part::Fgrep8(p) => Ok(p),
        other => Err(KernelError::WrongPart {
            expected: "fgrep8",
            got: other.kernel_name(),
        }),
    }
}

impl ScanKernel for Fgrep8 {
    fn empty(&self, offset: u64) -> Part {
        Part::Fgrep8(self.summarize(&[], offset))
    }

    fn fold(&self, state: Part, bytes: &[u8]) -> Result<Part, KernelError> {
        let state = part(state)?;
        let next = self.summarize(bytes, state.end);
        Ok(Part::Fgrep8(self.join(state, next)?))
    }

    fn parallel(&self) -> bool {
        true
    }

    fn combine(&self, left: Part, right: Part) -> Result<Part, KernelError> {
        Ok(Part::Fgrep8(self.join(part(left)?, part(right)?)?))
    }

    fn finish(&self, whole: Part) -> Result<Output, KernelError> {
        Ok(Output::Count(part(whole)?.matches))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(hay: &[u8], pat: &[u8; 8]) -> u64 {
        hay.windows(8).filter(|w| w == pat).count() as u64
    }

    #[test]
    fn every_split_counts_straddling_matches_once() {
        let k = Fgrep8::new(*b"abababab");
        let hay = b"xabababababab-ab-abababab-abababababababab";
        let want = naive(hay, b"abababab");
        for a in 0..=hay.len() {
            for b in a..=hay.len() {
                let p1 = k.fold(k.empty(0), &hay[..a]).unwrap();
                let p2 = k.fold(k.empty(a as u64), &hay[a..b]).unwrap();
                let p3 = k.fold(k.empty(b as u64), &hay[b..]).unwrap();
                let whole = k.combine(k.combine(p1, p2).unwrap(), p3).unwrap();
                assert_eq!(
                    k.finish(whole).unwrap(),
                    Output::Count(want),
                    "split {a} {b}"
                );
            }
        }
    }

    #[test]
    fn parts_that_do_not_touch_are_refused() {
        let k = Fgrep8::new(*b"abababab");
        let left = k.fold(k.empty(0), b"abc").unwrap();
        let right = k.fold(k.empty(4), b"abc").unwrap();
        assert!(matches!(
            k.combine(left, right),
            Err(KernelError::Disjoint {
                left_end: 3,
                right_start: 4
            })
        ));
    }
}
