//! A table-driven Reed-Solomon RS(255, 255-12) codec over GF(2^8) (primitive
//! polynomial 0x11d, first consecutive root alpha^0), code-compatible with the
//! `reed-solomon` 0.2 crate (a test encodes here and decodes there).
//!
//! Why not use that crate directly: measured on this machine it costs ~170 us
//! to encode an 8 KiB page and ~68 us to decode one dirty 1 KiB sector (it
//! multiplies through log/exp tables byte by byte and allocates fixed 255-byte
//! polynomials per step), which would double a NAND read's modeled latency.
//! Here encoding runs all interleaved codewords of a unit in parallel with a
//! 96-bit LFSR register per codeword and one 256-entry table lookup per byte,
//! and decoding computes syndromes with per-root multiplication tables, then
//! Berlekamp-Massey, Chien search and Forney only for a dirty codeword.

/// Parity bytes per codeword.
pub(crate) const NPAR: usize = 12;

const fn build_tables() -> ([u8; 512], [u8; 256]) {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= 0x11d;
        }
        i += 1;
    }
    while i < 512 {
        exp[i] = exp[i - 255];
        i += 1;
    }
    (exp, log)
}

const TABLES: ([u8; 512], [u8; 256]) = build_tables();
static EXP: [u8; 512] = TABLES.0;
static LOG: [u8; 256] = TABLES.1;

#[inline]
fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

#[inline]
fn div(a: u8, b: u8) -> u8 {
    debug_assert!(b != 0);
    if a == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + 255 - LOG[b as usize] as usize]
    }
}

const MASK96: u128 = (1u128 << 96) - 1;

/// The codec's precomputed tables.
pub(crate) struct Rs {
    /// `feedback[fb]`: fb times the generator's coefficients 1..=12, packed so
    /// that coefficient 1 is the most significant of 12 bytes.
    feedback: Box<[u128; 256]>,
    /// `root_mul[j][s]` = s * alpha^j, for syndrome evaluation.
    root_mul: Box<[[u8; 256]; NPAR]>,
}

impl Rs {
    pub(crate) fn new() -> Rs {
        // g(x) = prod_{i<12} (x - alpha^i), highest degree first, g[0] = 1.
        let mut g = [0u8; NPAR + 1];
        g[0] = 1;
        for (deg, &root) in EXP[..NPAR].iter().enumerate() {
            // multiply by (x + root); g has degree `deg` so far
            let mut next = [0u8; NPAR + 1];
            for k in 0..=deg {
                next[k] ^= g[k];
                next[k + 1] ^= mul(g[k], root);
            }
            g = next;
        }
        let mut feedback = Box::new([0u128; 256]);
        for (fb, slot) in feedback.iter_mut().enumerate() {
            let mut v = 0u128;
            for (k, &gk) in g[1..].iter().enumerate() {
                v |= u128::from(mul(fb as u8, gk)) << (8 * (NPAR - 1 - k));
            }
            *slot = v;
        }
        let mut root_mul = Box::new([[0u8; 256]; NPAR]);
        for (j, table) in root_mul.iter_mut().enumerate() {
            for (s, out) in table.iter_mut().enumerate() {
                *out = mul(s as u8, EXP[j]);
            }
        }
        Rs { feedback, root_mul }
    }

    /// Feeds one message byte into a codeword's parity register.
    #[inline]
    pub(crate) fn feed(&self, reg: &mut u128, byte: u8) {
        let fb = byte ^ (*reg >> 88) as u8;
        *reg = ((*reg << 8) & MASK96) ^ self.feedback[fb as usize];
    }

    /// Parity byte `p` (0 = first stored) of a finished register.
    #[inline]
    pub(crate) fn parity_byte(reg: u128, p: usize) -> u8 {
        debug_assert!(p < NPAR);
        (reg >> (8 * (NPAR - 1 - p))) as u8
    }

    /// Encodes a contiguous message, returning its 12 parity bytes.
    #[cfg(test)]
    pub(crate) fn encode(&self, msg: &[u8]) -> [u8; NPAR] {
        let mut reg = 0u128;
        for &b in msg {
            self.feed(&mut reg, b);
        }
        std::array::from_fn(|p| Rs::parity_byte(reg, p))
    }

    fn syndromes(&self, cw: &[u8]) -> [u8; NPAR] {
        let mut s = [0u8; NPAR];
        for &b in cw {
            for (j, sj) in s.iter_mut().enumerate() {
                *sj = self.root_mul[j][*sj as usize] ^ b;
            }
        }
        s
    }

    /// Corrects a codeword (message followed by 12 parity bytes, at most 255
    /// bytes) in place. Returns the number of bytes changed, or `None` when
    /// there are more errors than the code corrects.
    pub(crate) fn correct(&self, cw: &mut [u8]) -> Option<usize> {
        let n = cw.len();
        if !(NPAR < n && n <= 255) {
            return None;
        }
        let synd = self.syndromes(cw);
        if synd.iter().all(|&s| s == 0) {
            return Some(0);
        }
        // Berlekamp-Massey: error locator lambda (lambda[0] = 1, increasing degree).
        let mut c = [0u8; NPAR + 1];
        let mut b = [0u8; NPAR + 1];
        c[0] = 1;
        b[0] = 1;
        let mut l = 0usize;
        let mut m = 1usize;
        let mut bb = 1u8;
        for step in 0..NPAR {
            let mut d = synd[step];
            for i in 1..=l {
                d ^= mul(c[i], synd[step - i]);
            }
            if d == 0 {
                m += 1;
                continue;
            }
            let coef = div(d, bb);
            let t = c;
            for i in 0..=NPAR {
                if i + m <= NPAR {
                    c[i + m] ^= mul(coef, b[i]);
                }
            }
            if 2 * l <= step {
                l = step + 1 - l;
                b = t;
                bb = d;
                m = 1;
            } else {
                m += 1;
            }
        }
        if l == 0 || l > NPAR / 2 {
            return None;
        }
        // Chien search over the degrees present in this (shortened) codeword.
        let mut positions = [0usize; NPAR / 2];
        let mut found = 0;
        for degree in 0..n {
            // evaluate lambda at alpha^-degree
            let inv = (255 - degree % 255) % 255;
            let mut v = 0u8;
            for (i, &ci) in c[..=l].iter().enumerate() {
                if ci != 0 {
                    v ^= EXP[(LOG[ci as usize] as usize + inv * i) % 255];
                }
            }
            if v == 0 {
                if found == l {
                    return None;
                }
                positions[found] = degree;
                found += 1;
            }
        }
        if found != l {
            return None;
        }
        // Forney: omega = S(x) * lambda(x) mod x^12.
        let mut omega = [0u8; NPAR];
        for i in 0..NPAR {
            let mut v = 0u8;
            for k in 0..=i.min(l) {
                v ^= mul(c[k], synd[i - k]);
            }
            omega[i] = v;
        }
        for &degree in &positions[..found] {
            let inv = (255 - degree % 255) % 255;
            let xinv = EXP[inv];
            // omega(xinv)
            let mut num = 0u8;
            let mut pw = 1u8;
            for &o in &omega {
                num ^= mul(o, pw);
                pw = mul(pw, xinv);
            }
            // lambda'(xinv): odd terms
            let mut den = 0u8;
            let mut i = 1;
            while i <= l {
                // c[i] * xinv^(i-1)
                let e = (inv * (i - 1)) % 255;
                den ^= mul(c[i], EXP[e]);
                i += 2;
            }
            if den == 0 {
                return None;
            }
            let xk = EXP[degree % 255];
            let magnitude = mul(xk, div(num, den));
            cw[n - 1 - degree] ^= magnitude;
        }
        if self.syndromes(cw).iter().any(|&s| s != 0) {
            return None;
        }
        Some(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matches_reed_solomon_crate() {
        let rs = Rs::new();
        let enc = reed_solomon::Encoder::new(NPAR);
        let msg: Vec<u8> = (0..243u32).map(|i| (i * 7 + 3) as u8).collect();
        let ours = rs.encode(&msg);
        let theirs = enc.encode(&msg);
        assert_eq!(&ours[..], theirs.ecc());
        let mut cw = msg.clone();
        cw.extend_from_slice(&ours);
        for i in [0, 50, 100, 150, 200, 254] {
            cw[i] ^= 0x33;
        }
        let dec = reed_solomon::Decoder::new(NPAR);
        let fixed = dec.correct(&cw, None).expect("crate decodes our codeword");
        assert_eq!(fixed.data(), &msg[..]);
        assert_eq!(rs.correct(&mut cw), Some(6));
        assert_eq!(&cw[..243], &msg[..]);
    }

    proptest! {
        #[test]
        fn corrects_t_errors(
            msg in proptest::collection::vec(any::<u8>(), 1..=243usize),
            errs in proptest::collection::vec((any::<usize>(), 1u8..=255), 0..=6usize),
        ) {
            let rs = Rs::new();
            let mut cw = msg.clone();
            cw.extend_from_slice(&rs.encode(&msg));
            let clean = cw.clone();
            let mut hit = std::collections::HashSet::new();
            for (pos, x) in errs {
                let pos = pos % cw.len();
                if hit.insert(pos) {
                    cw[pos] ^= x;
                }
            }
            prop_assert_eq!(rs.correct(&mut cw), Some(hit.len()));
            prop_assert_eq!(cw, clean);
        }

        #[test]
        fn too_many_errors_never_silently_wrong(
            msg in proptest::collection::vec(any::<u8>(), 100..=243usize),
            errs in proptest::collection::vec((any::<usize>(), 1u8..=255), 7..=20usize),
        ) {
            let rs = Rs::new();
            let mut cw = msg.clone();
            cw.extend_from_slice(&rs.encode(&msg));
            for (pos, x) in errs {
                let pos = pos % cw.len();
                cw[pos] ^= x;
            }
            // Either refused, or the result is a valid codeword (mis-correction is
            // possible in principle; the page CRC catches it one level up).
            if rs.correct(&mut cw).is_some() {
                prop_assert!(rs.syndromes(&cw).iter().all(|&s| s == 0));
            }
        }
    }
}
