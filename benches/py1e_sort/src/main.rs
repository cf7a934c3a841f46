//! Times `py1e`'s sort of one canonical node against the general sorts of
//! crates.io, on `py1e`'s own keys, one thread:
//! `cargo run --release --manifest-path benches/py1e_sort/Cargo.toml -- [node_len] [rounds]`.
//!
//! The keys are those of Streaming's defaults: pieces of 10,000 positions,
//! each shifted by uniform draws within a block drawn from
//! `[0.75, 1.25) * 2^18`; the default node of 1,562,500 positions is one of
//! 64 canonical nodes of 10^8 samples. Every sort orders the same
//! `(key, sample id)` pairs and must give the same ids (checked). The rounds
//! alternate the sorts; each time includes copying the unsorted pairs in,
//! whose own time is the last row.

use epochplan_compat::streaming::numpy_rng::Generator;
use epochplan_compat::streaming::shuffle::SortScratch;
use std::time::Instant;

const PIECE: i64 = 10_000;
const BLOCK: f64 = (1 << 18) as f64;

/// One node's shifted positions (py1e's bounds: no key leaves the node) and
/// its shuffled sample ids, and how far a key can lie from its position.
fn node(len: i64) -> (Vec<f64>, Vec<i64>, f64) {
    let mut g = Generator::new(2024);
    let (low, high) = ((0.75 * BLOCK) as i64, (1.25 * BLOCK) as i64);
    let mut keys = Vec::with_capacity(len as usize);
    let mut offset = 0;
    while offset < len {
        let size = PIECE.min(len - offset);
        let block = g.integers(low, high).expect("a valid block range");
        let cutoff = ((block - size) as f64 / 2.0).max(0.0);
        let lower = (-cutoff).max(-(offset as f64));
        let upper = cutoff.min((len - offset - size) as f64);
        keys.extend((offset..offset + size).map(|p| p as f64 + g.uniform(lower, upper)));
        offset += size;
    }
    let mut ids: Vec<i64> = (0..len).collect();
    g.shuffle(&mut ids);
    (keys, ids, (high - 1) as f64 / 2.0 + 2.0)
}

/// `py1e`'s sort as it runs: pairs pushed in position order, buckets written
/// out as soon as the pushes have passed them by more than `reach`.
fn windowed(scratch: &mut SortScratch, keys: &[f64], out: &mut [i64], reach: f64) {
    const STRIDE: usize = 2048;
    scratch.begin(out.len());
    let mut j = 0;
    while j < out.len() {
        let stop = (j + STRIDE).min(out.len());
        for p in j..stop {
            scratch.push(keys[p], out[p]);
        }
        j = stop;
        scratch.flush_below(j as f64 - reach, out);
    }
    scratch.finish(out);
    scratch.check_memory().expect("memory for the buckets");
}

/// A pair for `voracious_radix_sort`, which sorts by an `f64` key.
#[derive(Clone, Copy, Debug)]
struct KeyId {
    key: f64,
    id: i64,
}

impl PartialEq for KeyId {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl PartialOrd for KeyId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.key.partial_cmp(&other.key)
    }
}

impl voracious_radix_sort::Radixable<f64> for KeyId {
    type Key = f64;
    fn key(&self) -> f64 {
        self.key
    }
}

/// A pair for `rdst`, which sorts by bytes: the key's bits mapped so that
/// their unsigned order is the float order.
#[derive(Clone, Copy)]
struct BitsId {
    bits: u64,
    id: i64,
}

impl rdst::RadixKey for BitsId {
    const LEVELS: usize = 8;
    fn get_level(&self, level: usize) -> u8 {
        (self.bits >> (level * 8)) as u8
    }
}

fn ordered_bits(key: f64) -> u64 {
    let bits = key.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let len: i64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_562_500);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(9).max(1);
    let (keys, ids, reach) = node(len);
    let pairs: Vec<(f64, i64)> = keys.iter().copied().zip(ids.iter().copied()).collect();
    let mut expect = pairs.clone();
    expect.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(
        expect.windows(2).all(|w| w[0].0 < w[1].0),
        "tied keys: the unstable sorts could differ"
    );
    let expect: Vec<i64> = expect.iter().map(|&(_, id)| id).collect();

    let (keys, ids, pairs) = (&keys, &ids, &pairs);
    let voracious: Vec<KeyId> = pairs.iter().map(|&(key, id)| KeyId { key, id }).collect();
    let rdst: Vec<BitsId> = pairs
        .iter()
        .map(|&(key, id)| BitsId {
            bits: ordered_bits(key),
            id,
        })
        .collect();
    // A sort into buffers of its own, and then (when asked) the ids it
    // gave: the check stays out of the times.
    type Sort<'a> = Box<dyn FnMut(bool) -> Option<Vec<i64>> + 'a>;
    let epochplan = |whole: bool| -> Sort {
        let (mut scratch, mut out) = (SortScratch::default(), ids.clone());
        Box::new(move |check| {
            out.copy_from_slice(ids);
            if whole {
                scratch
                    .sort(keys, &mut out)
                    .expect("memory for the buckets");
            } else {
                windowed(&mut scratch, keys, &mut out, reach);
            }
            check.then(|| out.clone())
        })
    };
    let std_sort = |stable: bool| -> Sort {
        let mut tuples = pairs.clone();
        Box::new(move |check| {
            tuples.copy_from_slice(pairs);
            if stable {
                tuples.sort_by(|a, b| a.0.total_cmp(&b.0));
            } else {
                tuples.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
            }
            check.then(|| tuples.iter().map(|p| p.1).collect())
        })
    };
    let mut voracious_out = voracious.clone();
    let mut rdst_out = rdst.clone();
    let mut sorts: Vec<(&str, Sort)> = vec![
        ("epochplan, as py1e runs it (windowed)", epochplan(false)),
        ("epochplan, every pair pushed first", epochplan(true)),
        (
            "voracious_radix_sort 1.2.0",
            Box::new(move |check| {
                voracious_out.copy_from_slice(&voracious);
                voracious_radix_sort::RadixSort::voracious_sort(&mut voracious_out);
                check.then(|| voracious_out.iter().map(|p| p.id).collect())
            }),
        ),
        (
            "rdst 0.20.14 (unstable)",
            Box::new(move |check| {
                rdst_out.copy_from_slice(&rdst);
                rdst::RadixSort::radix_sort_unstable(&mut rdst_out);
                check.then(|| rdst_out.iter().map(|p| p.id).collect())
            }),
        ),
        ("std sort_by (stable)", std_sort(true)),
        ("std sort_unstable_by", std_sort(false)),
    ];
    let mut times = vec![Vec::new(); sorts.len()];
    let mut copy_times = Vec::new();
    let mut copy_out = pairs.clone();
    for _ in 0..rounds {
        for ((_, sort), times) in sorts.iter_mut().zip(&mut times) {
            let start = Instant::now();
            std::hint::black_box(sort(false));
            times.push(start.elapsed().as_secs_f64());
        }
        let start = Instant::now();
        copy_out.copy_from_slice(std::hint::black_box(pairs));
        std::hint::black_box(&copy_out);
        copy_times.push(start.elapsed().as_secs_f64());
    }
    for (name, sort) in &mut sorts {
        assert!(
            sort(true).as_ref() == Some(&expect),
            "{name} gave another order"
        );
    }
    let per_item = |t: f64| t * 1e9 / len as f64;
    println!("{len} pairs, one thread, medians of {rounds} rounds\n");
    println!("| sort | ns a pair |\n|---|---:|");
    for ((name, _), times) in sorts.iter().zip(times) {
        println!("| {name} | {:.1} |", per_item(median(times)));
    }
    println!(
        "| copying the pairs in, alone | {:.1} |",
        per_item(median(copy_times))
    );
}
