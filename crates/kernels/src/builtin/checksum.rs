//! `checksum`: CRC-32C and SHA-256 of a target's bytes.
//!
//! CRC-32C extends and joins (`crc32c_append`, `crc32c_combine`), but
//! SHA-256 is a chain: a range's hash depends on every byte before it. So
//! the kernel is not [`parallel`](ScanKernel::parallel): the engine folds a
//! target's ranges in order, handing on the part, which carries the SHA-256
//! midstate (the eight state words, the bytes short of a 64-byte block, the
//! length so far) that the sha2 crate does not let us serialize.

use serde::{Deserialize, Serialize};
use sha2::block_api::compress256;

use crate::error::KernelError;
use crate::output::{ChecksumOutput, Output};
use crate::scan::{Part, ScanKernel};

/// SHA-256's initial state (FIPS 180-4 §5.3.3).
const SHA256_IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// The part of a range: a CRC-32C of its bytes and the SHA-256 midstate of
/// every byte from the chain's start to its end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecksumPart {
    start: u64,
    end: u64,
    /// CRC-32C of the range's bytes.
    crc32c: u32,
    /// SHA-256 state after the whole 64-byte blocks hashed so far.
    state: [u32; 8],
    /// The bytes after them (fewer than 64).
    pending: Vec<u8>,
}

impl ChecksumPart {
    pub(crate) fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.pending.capacity()
    }
}

/// The compiled kernel.
pub(crate) struct Checksum;

fn part(p: Part) -> Result<ChecksumPart, KernelError> {
    match p {
        Part::Checksum(p) => Ok(p),
        other => Err(KernelError::WrongPart {
            expected: "checksum",
            got: other.kernel_name(),
        }),
    }
}

impl ScanKernel for Checksum {
    fn empty(&self, offset: u64) -> Part {
        Part::Checksum(ChecksumPart {
            start: offset,
            end: offset,
            crc32c: 0,
            state: SHA256_IV,
            pending: Vec::new(),
        })
    }

    fn fold(&self, state: Part, mut bytes: &[u8]) -> Result<Part, KernelError> {
        let mut p = part(state)?;
        p.end += bytes.len() as u64;
        p.crc32c = crc32c::crc32c_append(p.crc32c, bytes);
        if !p.pending.is_empty() {
            let take = (64 - p.pending.len()).min(bytes.len());
            p.pending.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if let Ok(block) = <[u8; 64]>::try_from(p.pending.as_slice()) {
                compress256(&mut p.state, &[block]);
                p.pending.clear();
            }
        }
        // Whole blocks are hashed in place; only the rest is copied.
        let (blocks, rest) = bytes.as_chunks::<64>();
        compress256(&mut p.state, blocks);
        p.pending.extend_from_slice(rest);
        Ok(Part::Checksum(p))
    }

    fn parallel(&self) -> bool {
        false
    }

    fn combine(&self, left: Part, right: Part) -> Result<Part, KernelError> {
        let (left, right) = (part(left)?, part(right)?);
        if left.end != right.start {
            return Err(KernelError::Disjoint {
                left_end: left.end,
                right_start: right.start,
            });
        }
        // Only an empty side joins: an empty right adds nothing, and an
        // empty left is where the right's chain began.
        if right.start == right.end {
            return Ok(Part::Checksum(left));
        }
        if left.start == left.end {
            return Ok(Part::Checksum(right));
        }
        Err(KernelError::Unsupported(
            "SHA-256 states computed apart cannot be joined: fold the target's ranges in order"
                .into(),
        ))
    }

    fn finish(&self, whole: Part) -> Result<Output, KernelError> {
        let p = part(whole)?;
        let bytes = p.end - p.start;
        let mut state = p.state;
        // Standard padding: 0x80, zeros to 56 bytes mod 64, then the length
        // in bits, big-endian.
        let mut last = p.pending;
        last.push(0x80);
        while last.len() % 64 != 56 {
            last.push(0);
        }
        last.extend_from_slice(&bytes.wrapping_mul(8).to_be_bytes());
        let (blocks, _) = last.as_chunks::<64>();
        compress256(&mut state, blocks);
        let mut sha256 = [0u8; 32];
        for (out, word) in sha256.chunks_exact_mut(4).zip(state) {
            out.copy_from_slice(&word.to_be_bytes());
        }
        Ok(Output::Checksum(ChecksumOutput {
            bytes,
            crc32c: p.crc32c,
            sha256,
        }))
    }
}
