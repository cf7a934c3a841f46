//! Key derivation and the named generators the orders are built from.
//!
//! A key is SipHash-2-4 (128-bit output, fixed key) of a domain-separated record
//! `("epochplan", format_version, kind, label, seed, epoch, index)`, every field
//! length-prefixed or fixed-width little-endian. So `(seed=0, epoch=1)` and
//! `(seed=1, epoch=0)` give unrelated keys, unlike `seed + epoch`.
//! Round keys and random streams are expanded from it with SplitMix64 and
//! xoshiro256++ (Blackman and Vigna). All three algorithms are fixed by their
//! papers, so the output never depends on a crate's version.

use siphasher::sip128::{Hasher128, SipHasher24};
use std::hash::Hasher;

/// The version of the order and plan format produced by this crate.
pub const FORMAT_VERSION: u32 = 1;

const SIP_K0: u64 = 0x6570_6f63_6870_6c61; // "epochpla"
const SIP_K1: u64 = 0x6e5f_6b65_7973_5f31; // "n_keys_1"

/// What a key is for, beyond (seed, epoch): a kind and a label inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Domain<'a> {
    /// The order kind ("cipher", "uniform", "chunked", ...).
    pub kind: &'a str,
    /// Which key inside that kind ("order", "chunks", "window", ...).
    pub label: &'a str,
}

/// Derives a 128-bit key for `(seed, epoch, domain, index)`.
pub fn derive(seed: u64, epoch: u64, domain: Domain<'_>, index: u64) -> [u64; 2] {
    let mut h = SipHasher24::new_with_keys(SIP_K0, SIP_K1);
    let mut put = |bytes: &[u8]| {
        h.write(&(bytes.len() as u64).to_le_bytes());
        h.write(bytes);
    };
    put(b"epochplan");
    put(&FORMAT_VERSION.to_le_bytes());
    put(domain.kind.as_bytes());
    put(domain.label.as_bytes());
    put(&seed.to_le_bytes());
    put(&epoch.to_le_bytes());
    put(&index.to_le_bytes());
    let out = h.finish128();
    [out.h1, out.h2]
}

/// SplitMix64 (Steele, Lea and Flood 2014): expands one word into a stream.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A stream starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64-bit output.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// xoshiro256++ (Blackman and Vigna 2019), seeded from a 128-bit key through
/// SplitMix64 as its authors recommend.
#[derive(Debug, Clone)]
pub struct Xoshiro256pp {
    s: [u64; 4],
}

impl Xoshiro256pp {
    /// A generator for `key`.
    pub fn from_key(key: [u64; 2]) -> Self {
        let mut sm = SplitMix64::new(key[0] ^ key[1].rotate_left(32));
        let s = [
            sm.next_u64() ^ key[1],
            sm.next_u64(),
            sm.next_u64(),
            sm.next_u64(),
        ];
        // The all-zero state is the generator's only fixed point; SplitMix64
        // never yields four zero words in a row, but be explicit.
        let s = if s == [0; 4] { [1, 0, 0, 0] } else { s };
        Self { s }
    }

    /// The next 64-bit output.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// An exactly uniform integer in `[0, bound)` for `bound >= 1` (Lemire's
    /// multiply-and-reject method, 2019).
    #[inline]
    pub fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0);
        let mut m = u128::from(self.next_u64()) * u128::from(bound);
        let mut low = m as u64;
        if low < bound {
            let threshold = bound.wrapping_neg() % bound;
            while low < threshold {
                m = u128::from(self.next_u64()) * u128::from(bound);
                low = m as u64;
            }
        }
        (m >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_and_epoch_do_not_commute() {
        let d = Domain {
            kind: "cipher",
            label: "order",
        };
        assert_ne!(derive(0, 1, d, 0), derive(1, 0, d, 0));
        assert_ne!(
            derive(0, 0, d, 0),
            derive(
                0,
                0,
                Domain {
                    kind: "chunked",
                    label: "order"
                },
                0
            )
        );
    }

    #[test]
    fn splitmix_reference_values() {
        // First outputs for seed 1234567, from the reference C implementation.
        let mut g = SplitMix64::new(1_234_567);
        assert_eq!(g.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(g.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn below_is_in_range_and_hits_every_value() {
        let mut g = Xoshiro256pp::from_key([1, 2]);
        let mut seen = [false; 7];
        for _ in 0..1000 {
            let v = g.below(7);
            assert!(v < 7);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(g.below(1), 0);
    }
}
