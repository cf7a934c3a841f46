//! Every order is a bijection of `[0, n)`: exhaustively for every `n` up to
//! 70,000 (cipher), for `n = 2^k - 1, 2^k, 2^k + 1` with `k <= 24` (cipher and
//! chunked), and for many small chunked layouts. Built for
//! `cargo test --release`; a debug build checks smaller ranges.

use epochplan_core::cipher::Cipher;
use epochplan_core::keys::{derive, Domain};
use epochplan_core::{Kind, Order};
use rayon::prelude::*;

/// The largest `n` checked exhaustively for the cipher.
const EXHAUSTIVE: u64 = if cfg!(debug_assertions) {
    3_000
} else {
    70_000
};
/// The largest `k` of the `2^k +- 1` sizes.
const MAX_K: u32 = if cfg!(debug_assertions) { 16 } else { 24 };

const CIPHER: Domain<'static> = Domain {
    kind: "cipher",
    label: "order",
};

/// A set of `[0, n)` as a bitmap: insert returns false on a repeat.
struct Bitmap(Vec<u64>);

impl Bitmap {
    fn new(n: u64) -> Self {
        Bitmap(vec![0; n.div_ceil(64) as usize])
    }

    fn insert(&mut self, x: u64) -> bool {
        let (word, bit) = ((x / 64) as usize, 1u64 << (x % 64));
        let fresh = self.0[word] & bit == 0;
        self.0[word] |= bit;
        fresh
    }
}

/// Maps every position of `order` with the batch path and checks that the
/// ids are exactly `[0, n)`; returns the ids. Also checks `get` on a sample.
fn assert_bijection(order: &Order, what: &str) -> Vec<i64> {
    let n = order.len();
    let mut ids: Vec<i64> = (0..n as i64).collect();
    order.map_slice(&mut ids);
    let mut seen = Bitmap::new(n);
    for (p, &id) in ids.iter().enumerate() {
        assert!(
            (0..n as i64).contains(&id),
            "{what}: position {p} -> {id} is outside [0, {n})"
        );
        assert!(seen.insert(id as u64), "{what}: id {id} appears twice");
    }
    let stride = (n / 257).max(1) as usize;
    for p in (0..n as usize).step_by(stride) {
        assert_eq!(order.get(p as u64), Ok(ids[p] as u64), "{what}: get({p})");
    }
    ids
}

#[test]
fn cipher_is_a_bijection_for_every_size_up_to_70000() {
    (0..=EXHAUSTIVE).into_par_iter().for_each(|n| {
        let (seed, epoch) = (n.wrapping_mul(0x9E37_79B9), n % 5);
        let order = Order::new(n, seed, epoch, Kind::Cipher).unwrap();
        let ids = assert_bijection(&order, &format!("cipher n={n}"));
        // The inverse undoes the cipher (every position for small n, a
        // sample above).
        let cipher = Cipher::new(n, derive(seed, epoch, CIPHER, 0));
        let stride = if n <= 4096 { 1 } else { 61 };
        for p in (0..n as usize).step_by(stride) {
            assert_eq!(cipher.apply(p as u64), ids[p] as u64, "n={n} p={p}");
            assert_eq!(cipher.invert(ids[p] as u64), p as u64, "n={n} p={p}");
        }
    });
}

/// `2^k - 1, 2^k, 2^k + 1` for `k` in `1..=MAX_K`, deduplicated.
fn power_of_two_sizes() -> Vec<u64> {
    let mut sizes: Vec<u64> = (1..=MAX_K)
        .flat_map(|k| [(1u64 << k) - 1, 1 << k, (1 << k) + 1])
        .collect();
    sizes.dedup();
    sizes
}

#[test]
fn cipher_is_a_bijection_around_powers_of_two() {
    power_of_two_sizes().into_par_iter().for_each(|n| {
        for seed in [0, u64::MAX] {
            let order = Order::new(n, seed, 3, Kind::Cipher).unwrap();
            assert_bijection(&order, &format!("cipher n={n} seed={seed}"));
        }
    });
}

/// Chunk layouts (chunk_size, preload_nchunks) and the largest `k` each is
/// checked at (the chunked path costs about two cipher calls per position).
const LAYOUTS: [((u64, u64), u32); 4] = [
    ((64, 4), MAX_K),
    ((1000, 1), MAX_K - 6),
    ((7, 13), MAX_K - 6),
    ((4096, 3), MAX_K - 6),
];

#[test]
fn chunked_is_a_bijection_around_powers_of_two() {
    let cases: Vec<(u64, (u64, u64))> = power_of_two_sizes()
        .into_iter()
        .flat_map(|n| {
            LAYOUTS
                .into_iter()
                .filter(move |&(_, max_k)| n <= (1 << max_k) + 1)
                .map(move |(layout, _)| (n, layout))
        })
        .collect();
    cases
        .into_par_iter()
        .for_each(|(n, (chunk_size, preload_nchunks))| {
            let kind = Kind::Chunked {
                chunk_size,
                preload_nchunks,
            };
            let order = Order::new(n, 11, 2, kind).unwrap();
            let what =
                format!("chunked n={n} chunk_size={chunk_size} preload_nchunks={preload_nchunks}");
            let ids = assert_bijection(&order, &what);
            assert_window_locality(&ids, chunk_size, preload_nchunks, &what);
        });
}

#[test]
fn chunked_is_a_bijection_for_small_layouts() {
    let max_n = if cfg!(debug_assertions) { 300 } else { 2_000 };
    (0..=max_n).into_par_iter().for_each(|n| {
        for (chunk_size, preload_nchunks) in
            [(1, 1), (1, 3), (2, 2), (3, 1), (5, 4), (16, 2), (100, 7)]
        {
            let kind = Kind::Chunked {
                chunk_size,
                preload_nchunks,
            };
            let order = Order::new(n, n, 0, kind).unwrap();
            let what =
                format!("chunked n={n} chunk_size={chunk_size} preload_nchunks={preload_nchunks}");
            let ids = assert_bijection(&order, &what);
            assert_window_locality(&ids, chunk_size, preload_nchunks, &what);
        }
    });
}

/// Reading positions in order never needs more than `preload_nchunks` chunks at once:
/// every run of `preload_nchunks * chunk_size` consecutive positions touches at most
/// `2 * preload_nchunks` chunks (a run may straddle two windows), and the positions of
/// the first window (shorter by the short chunk's deficit at most) touch at
/// most `preload_nchunks`.
fn assert_window_locality(ids: &[i64], chunk_size: u64, preload_nchunks: u64, what: &str) {
    let span = (preload_nchunks * chunk_size) as usize;
    let n = ids.len() as u64;
    let deficit = (n.div_ceil(chunk_size) * chunk_size - n) as usize;
    let chunks_in = |run: &[i64]| {
        let mut c: Vec<i64> = run.iter().map(|&id| id / chunk_size as i64).collect();
        c.sort_unstable();
        c.dedup();
        c.len() as u64
    };
    if let Some(first) = ids.get(..(span - deficit).min(ids.len())) {
        assert!(chunks_in(first) <= preload_nchunks, "{what}: first window");
    }
    for run in ids.chunks(span) {
        assert!(
            chunks_in(run) <= 2 * preload_nchunks,
            "{what}: a run of {span}"
        );
    }
}

#[test]
fn identity_and_uniform_are_bijections() {
    for n in [
        0u64,
        1,
        2,
        3,
        65_535,
        65_536,
        65_537,
        1 << 20,
        (1 << 20) + 1,
    ] {
        let identity = assert_bijection(&Order::new(n, 0, 0, Kind::Identity).unwrap(), "identity");
        assert!(identity.iter().enumerate().all(|(p, &id)| p as i64 == id));
        let uniform = Order::new(n, 5, 6, Kind::Uniform).unwrap();
        let ids = assert_bijection(&uniform, &format!("uniform n={n}"));
        assert_eq!(uniform.to_vec().unwrap(), ids);
    }
}
