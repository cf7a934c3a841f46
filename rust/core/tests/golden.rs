//! Golden vectors: the frozen order format (DESIGN.md section 3).
//!
//! Every entry pins, for one (kind, num_samples, seed, epoch), the first 32 hex
//! digits of the sha256 of the little-endian int64 bytes of the first
//! `min(num_samples, 4096)` ids (the whole array for `uniform`), and the first
//! 8 ids. `tests/core/test_golden.py` pins the same table through Python.
//!
//! THESE VECTORS ARE FROZEN (format_version 1). An order that changes any of
//! them is a breaking change: it needs a new, selectable format_version with
//! its own table, never an edit of this one.

use epochplan_core::{Kind, Order, FORMAT_VERSION};

const PREFIX: u64 = 4096;
const CHUNKED: Kind = Kind::Chunked {
    chunk_size: 64,
    preload_nchunks: 4,
};
const SIZES: [u64; 9] = [
    0,
    1,
    2,
    3,
    10,
    1000,
    (1 << 20) + 1,
    1_000_000_000,
    i64::MAX as u64,
];
const SEEDS: [u64; 3] = [0, 1, u64::MAX];
const EPOCHS: [u64; 2] = [0, 7];
const UNIFORM_MAX: u64 = (1 << 20) + 1;

/// `kind num_samples seed epoch sha256[:32]`, then the first 4 ids, then the
/// next 4 (`-` when there are none).
const GOLDEN_V1: &str = include_str!("../../../tests/golden/v1.txt");

struct Entry {
    kind: String,
    n: u64,
    seed: u64,
    epoch: u64,
    hash: String,
    first: Vec<i64>,
}

fn table() -> Vec<Entry> {
    let lines: Vec<Vec<&str>> = GOLDEN_V1
        .trim()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    lines
        .chunks(3)
        .map(|e| {
            let first = e[1]
                .iter()
                .chain(&e[2])
                .filter(|x| **x != "-")
                .map(|x| x.parse().unwrap())
                .collect();
            Entry {
                kind: e[0][0].to_string(),
                n: e[0][1].parse().unwrap(),
                seed: e[0][2].parse().unwrap(),
                epoch: e[0][3].parse().unwrap(),
                hash: e[0][4].to_string(),
                first,
            }
        })
        .collect()
}

fn kind_of(name: &str) -> Kind {
    match name {
        "cipher" => Kind::Cipher,
        "uniform" => Kind::Uniform,
        "chunked" => CHUNKED,
        "identity" => Kind::Identity,
        other => panic!("unknown kind {other}"),
    }
}

fn ids_of(entry: &Entry) -> Vec<i64> {
    let order = Order::new(entry.n, entry.seed, entry.epoch, kind_of(&entry.kind)).unwrap();
    if entry.kind == "uniform" {
        order.to_vec().unwrap()
    } else {
        order.range(0, 1, entry.n.min(PREFIX)).unwrap()
    }
}

#[test]
fn format_version_is_1() {
    assert_eq!(FORMAT_VERSION, 1);
}

#[test]
fn table_covers_the_grid() {
    let mut expected = vec![];
    for kind in ["cipher", "uniform", "chunked", "identity"] {
        for n in SIZES {
            for seed in SEEDS {
                for epoch in EPOCHS {
                    if kind != "uniform" || n <= UNIFORM_MAX {
                        expected.push(format!("{kind} {n} {seed} {epoch}"));
                    }
                }
            }
        }
    }
    let got: Vec<String> = table()
        .iter()
        .map(|e| format!("{} {} {} {}", e.kind, e.n, e.seed, e.epoch))
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn golden_vectors() {
    for entry in table() {
        let ids = ids_of(&entry);
        let what = format!("{} {} {} {}", entry.kind, entry.n, entry.seed, entry.epoch);
        assert_eq!(ids[..ids.len().min(8)], entry.first[..], "{what}");
        let bytes: Vec<u8> = ids.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(hex(&sha256(&bytes))[..32], entry.hash, "{what}");
    }
}

/// The table itself is frozen: one regenerated from a changed build would
/// pass [`golden_vectors`].
#[test]
fn table_is_the_frozen_one() {
    assert_eq!(
        hex(&sha256(GOLDEN_V1.as_bytes())),
        "f0a2a5052f76f9cec0f1c62d1ce9cd71ce32530f6947b1471e6447832afb9ec6"
    );
}

#[test]
fn sha256_reference_values() {
    assert_eq!(
        hex(&sha256(b"")),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        hex(&sha256(b"abc")),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    let long = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    assert_eq!(
        hex(&sha256(long)),
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 (FIPS 180-4), enough for hashing test vectors.
fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&(data.len() as u64 * 8).to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (chunk, word) in out.chunks_mut(4).zip(h) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}
