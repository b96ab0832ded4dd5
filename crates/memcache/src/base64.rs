//! Base64 for meta commands' binary keys, as memcached's base64.c does it:
//! the standard alphabet with `=` padding. Its decoder is lenient, and so
//! is this one, so that the same keys are accepted: bytes outside the
//! alphabet are skipped, the rest must be a whole number of 4-character
//! blocks, and decoding stops after the first padded block.

use bytes::{BufMut, BytesMut};

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn sextet(byte: u8) -> Option<u8> {
    Some(match byte {
        b'A'..=b'Z' => byte - b'A',
        b'a'..=b'z' => byte - b'a' + 26,
        b'0'..=b'9' => byte - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        b'=' => 0,
        _ => return None,
    })
}

/// The bytes `text` encodes, or `None` where memcached's decoder returns 0
/// (nothing to decode, a partial block, bad padding, or no bytes out).
pub(crate) fn decode(text: &[u8]) -> Option<Vec<u8>> {
    let count = text.iter().filter(|&&b| sextet(b).is_some()).count();
    if count == 0 || count % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(count / 4 * 3);
    let mut block = [0u8; 4];
    let mut filled = 0;
    let mut pad = 0;
    for &byte in text {
        let Some(value) = sextet(byte) else { continue };
        if byte == b'=' {
            pad += 1;
        }
        block[filled] = value;
        filled += 1;
        if filled == 4 {
            out.push((block[0] << 2) | (block[1] >> 4));
            out.push((block[1] << 4) | (block[2] >> 2));
            out.push((block[2] << 6) | block[3]);
            filled = 0;
            if pad > 0 {
                if pad > 2 {
                    return None;
                }
                out.truncate(out.len() - pad);
                break;
            }
        }
    }
    if out.is_empty() {
        None
    } else {
        Some(out)
    }
}

/// Bytes `encode` writes for `len` bytes.
pub(crate) fn encoded_len(len: usize) -> usize {
    len.div_ceil(3) * 4
}

/// Appends the padded base64 of `bytes`.
pub(crate) fn encode(bytes: &[u8], out: &mut BytesMut) {
    out.reserve(encoded_len(bytes.len()));
    let symbol = |sextet: u32| ALPHABET[(sextet & 0x3f) as usize];
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.put_u8(symbol(n >> 18));
        out.put_u8(symbol(n >> 12));
        out.put_u8(if chunk.len() > 1 {
            symbol(n >> 6)
        } else {
            b'='
        });
        out.put_u8(if chunk.len() > 2 { symbol(n) } else { b'=' });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(bytes: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode(bytes, &mut out);
        out.to_vec()
    }

    #[test]
    fn encodes_with_padding() {
        assert_eq!(encoded(b""), b"");
        assert_eq!(encoded(b"f"), b"Zg==");
        assert_eq!(encoded(b"fo"), b"Zm8=");
        assert_eq!(encoded(b"foo"), b"Zm9v");
        assert_eq!(encoded(&[0xff, 0xfe, 0x00, 0x01]), b"//4AAQ==");
    }

    #[test]
    fn decodes_like_memcached() {
        assert_eq!(decode(b"Zm9v").as_deref(), Some(&b"foo"[..]));
        assert_eq!(decode(b"Zg==").as_deref(), Some(&b"f"[..]));
        assert_eq!(decode(b"Zm8=").as_deref(), Some(&b"fo"[..]));
        // Unpadded partial blocks are refused, as memcached does.
        assert_eq!(decode(b"Zg"), None);
        assert_eq!(decode(b""), None);
        assert_eq!(decode(b"===="), None);
        // Bytes outside the alphabet are skipped.
        assert_eq!(decode(b"Zm!9v").as_deref(), Some(&b"foo"[..]));
        // Decoding stops after the first padded block.
        assert_eq!(decode(b"Zg==Zm9v").as_deref(), Some(&b"f"[..]));
    }

    #[test]
    fn round_trips() {
        for len in 0..40usize {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let text = encoded(&bytes);
            assert_eq!(text.len(), encoded_len(len));
            if len > 0 {
                assert_eq!(decode(&text), Some(bytes));
            }
        }
    }
}
