//! Index-space invariants: selections of every form against a naive model,
//! set operations, random splits, mixtures (exact multiplicities over
//! epochs with changing quotas) and the stratification bound on every
//! prefix.

use epochplan_core::parallel;
use epochplan_core::space::{
    quotas_from_weights, random_split, split_sizes, IndexSpace, Interleave, Mixture, QuotaRule,
    Selection, SelectionKind, StepShuffle,
};
use proptest::prelude::*;
use std::collections::BTreeSet;

/// A store size and a set of its ids, with the edge cases drawn often.
fn store_and_set() -> impl Strategy<Value = (u64, Vec<bool>)> {
    (0u64..300).prop_flat_map(|n| {
        let n_usize = n as usize;
        let set = prop_oneof![
            Just(vec![false; n_usize]),
            Just(vec![true; n_usize]),
            (0..n.max(1)).prop_map(move |i| (0..n).map(|x| x == i).collect::<Vec<_>>()),
            proptest::collection::vec(any::<bool>(), n_usize),
            // Long runs, so ranges have several ids each.
            proptest::collection::vec(any::<bool>(), n_usize.div_ceil(8))
                .prop_map(move |r| { (0..n_usize).map(|x| r[x / 8]).collect::<Vec<_>>() }),
        ];
        (Just(n), set)
    })
}

fn runs(set: &[bool]) -> Vec<(u64, u64)> {
    let mut out = vec![];
    let mut i = 0;
    while i < set.len() {
        if set[i] {
            let start = i;
            while i < set.len() && set[i] {
                i += 1;
            }
            out.push((start as u64, i as u64));
        } else {
            i += 1;
        }
    }
    out
}

fn ids_of(set: &[bool]) -> Vec<i64> {
    (0..set.len() as i64).filter(|&i| set[i as usize]).collect()
}

/// Checks `sel` against the ids it should hold, in order.
fn agrees(sel: &Selection, want: &[i64]) -> Result<(), TestCaseError> {
    prop_assert_eq!(sel.len(), want.len() as u64);
    prop_assert_eq!(&sel.to_vec().unwrap(), want);
    for (j, &id) in want.iter().enumerate() {
        prop_assert_eq!(sel.get(j as u64).unwrap() as i64, id);
    }
    prop_assert!(sel.get(want.len() as u64).is_err());
    let js: Vec<i64> = (0..want.len() as i64).rev().collect();
    let mut out = vec![-1; js.len()];
    sel.fill(&js, &mut out).unwrap();
    let rev: Vec<i64> = want.iter().rev().copied().collect();
    prop_assert_eq!(out, rev);
    let held: BTreeSet<i64> = want.iter().copied().collect();
    for id in 0..sel.num_samples() + 2 {
        prop_assert_eq!(sel.contains(id), held.contains(&(id as i64)), "id {}", id);
    }
    Ok(())
}

/// The exact per-prefix check: |c - P q / S| <= bound_halves / 2.
fn within(c: u64, p: u64, q: u64, s: u64, bound_halves: u64) -> bool {
    let dev = (2 * s as i128 * c as i128 - 2 * p as i128 * q as i128).abs();
    dev <= bound_halves as i128 * s as i128
}

fn ceil_log2(k: usize) -> u64 {
    (usize::BITS - (k - 1).leading_zeros()) as u64
}

/// Every prefix of the interleave of `quotas`: the proved bound (half the
/// leaf's depth), the contract's `ceil(log2 K)`, and `locate` against
/// `count_before`.
fn check_interleave(quotas: &[u64]) -> Result<(), String> {
    let il = Interleave::new(quotas).map_err(|e| e.to_string())?;
    let (s, k) = (il.len(), quotas.len());
    let mut counts = vec![0u64; k];
    for p in 0..=s {
        for src in 0..k {
            let c = counts[src];
            if !within(c, p, quotas[src], s, u64::from(il.depth(src))) {
                return Err(format!("{quotas:?}: prefix {p}, source {src}, count {c}"));
            }
            if !within(c, p, quotas[src], s, 2 * ceil_log2(k)) {
                return Err(format!("{quotas:?}: above ceil(log2 K) at prefix {p}"));
            }
            if il.count_before(src, p) != c {
                return Err(format!("{quotas:?}: count_before({src}, {p}) != {c}"));
            }
        }
        if p < s {
            let (src, at) = il.locate(p);
            if at != counts[src] {
                return Err(format!("{quotas:?}: position {p} is #{at} of {src}"));
            }
            counts[src] += 1;
        }
    }
    if counts != quotas {
        return Err(format!("{quotas:?}: counts {counts:?}"));
    }
    Ok(())
}

#[test]
fn every_prefix_of_every_small_mixture_is_within_the_bound() {
    // Quotas 0..=12 for every source up to K = 5; K = 6 up to 12 in release
    // builds (4.8 million vectors), up to 5 in debug ones.
    let six = if cfg!(debug_assertions) { 5 } else { 12 };
    for (k, max) in [(1, 12), (2, 12), (3, 12), (4, 12), (5, 12), (6, six)] {
        if cfg!(debug_assertions) && k == 5 {
            continue; // 371 293 vectors: release only
        }
        let mut q = vec![0u64; k];
        loop {
            check_interleave(&q).unwrap();
            let mut i = 0;
            while i < k && q[i] == max {
                q[i] = 0;
                i += 1;
            }
            if i == k {
                break;
            }
            q[i] += 1;
        }
    }
}

#[test]
fn fill_is_the_same_on_any_thread_count() {
    let n = 3 * parallel::PIECE as u64 + 17;
    let mask: Vec<bool> = (0..2 * n).map(|i| i % 3 != 1).collect();
    let sel = Selection::from_mask(&mask).unwrap();
    let part = random_split(2 * n, &[n, n], 4).unwrap().remove(1);
    let mix = Mixture::from_sizes(&[1000, 7, 50_000], 3).unwrap();
    let epoch = mix
        .epoch(&[n - 40_000, 30_000, 10_000], &[5, 3, 0])
        .unwrap();
    let js: Vec<i64> = (0..n as i64).rev().collect();
    let spaces: [&dyn IndexSpace; 3] = [&sel, &part, &epoch];
    for space in spaces {
        let single: Vec<i64> = js
            .iter()
            .map(|&j| space.get(j as u64).unwrap() as i64)
            .collect();
        for threads in [1, 3] {
            parallel::set_num_threads(threads);
            let mut out = vec![0; js.len()];
            space.fill(&js, &mut out).unwrap();
            assert_eq!(out, single, "{threads} threads");
        }
    }
    parallel::set_num_threads(0);
}

#[test]
fn a_split_of_a_trillion_ids_is_o1() {
    let n = 1_000_000_000_000u64;
    let sizes = split_sizes(n, &[0.9, 0.1]).unwrap();
    assert_eq!(sizes, vec![900_000_000_000, 100_000_000_000]);
    let parts = random_split(n, &sizes, 7).unwrap();
    for j in [0, 1, 12_345_678_901, sizes[1] - 1] {
        let id = parts[1].get(j).unwrap();
        assert!(id < n && parts[1].contains(id) && !parts[0].contains(id));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn selections_of_every_form_hold_their_ids((n, set) in store_and_set(), seed in any::<u64>()) {
        let want = ids_of(&set);
        let ranges = Selection::from_ranges(&runs(&set), n).unwrap();
        prop_assert_eq!(ranges.kind(), SelectionKind::Ranges);
        agrees(&ranges, &want)?;
        let mask = Selection::from_mask(&set).unwrap();
        agrees(&mask, &want)?;
        let words = Selection::from_mask_words(mask.as_mask_words().unwrap().to_vec(), n).unwrap();
        agrees(&words, &want)?;
        agrees(&Selection::from_indices(want.clone(), n).unwrap(), &want)?;
        // Indices in another order keep that order.
        let mut shuffled = want.clone();
        let len = shuffled.len();
        for i in (1..len).rev() {
            shuffled.swap(i, (seed.wrapping_mul(i as u64 + 1) >> 7) as usize % (i + 1));
        }
        let indices = Selection::from_indices(shuffled.clone(), n).unwrap();
        agrees(&indices, &shuffled)?;
        // Every form converts to the same mask.
        for sel in [&ranges, &indices] {
            let converted = sel.to_mask().unwrap();
            prop_assert_eq!(converted.as_mask_words(), mask.as_mask_words());
        }
        if let Some(&dup) = want.first() {
            prop_assert!(Selection::from_indices(vec![dup, dup], n).is_err());
        }
        prop_assert!(Selection::from_indices(vec![n as i64], n).is_err());
    }

    #[test]
    fn set_operations_agree_with_a_naive_model(
        (n, a) in store_and_set(), pick in proptest::collection::vec(any::<bool>(), 300),
    ) {
        let b: Vec<bool> = pick[..n as usize].to_vec();
        let naive = |f: &dyn Fn(bool, bool) -> bool| -> Vec<i64> {
            (0..n as usize).filter(|&i| f(a[i], b[i])).map(|i| i as i64).collect()
        };
        let (ra, rb) = (
            Selection::from_ranges(&runs(&a), n).unwrap(),
            Selection::from_ranges(&runs(&b), n).unwrap(),
        );
        let (ma, mb) = (Selection::from_mask(&a).unwrap(), Selection::from_mask(&b).unwrap());
        for (x, y) in [(&ra, &rb), (&ma, &mb)] {
            let and = x.intersection(y).unwrap();
            let or = x.union(y).unwrap();
            let minus = x.difference(y).unwrap();
            let not = x.complement().unwrap();
            for r in [&and, &or, &minus, &not] {
                prop_assert_eq!(r.kind(), x.kind());
            }
            agrees(&and, &naive(&|p, q| p && q))?;
            agrees(&or, &naive(&|p, q| p || q))?;
            agrees(&minus, &naive(&|p, q| p && !q))?;
            agrees(&not, &naive(&|p, _| !p))?;
        }
        // Normalised ranges: the same ids give equal ranges.
        let either: Vec<bool> = (0..n as usize).map(|i| a[i] || b[i]).collect();
        let union = ra.union(&rb).unwrap();
        prop_assert_eq!(union.as_ranges(), Some(&runs(&either)[..]));
        prop_assert!(ra.union(&mb).is_err());
        prop_assert!(Selection::from_indices(vec![], n).unwrap().complement().is_err());
    }

    #[test]
    fn random_split_parts_are_exact_disjoint_covering_and_fixed_by_the_seed(
        n in 0u64..3000, cuts in proptest::collection::vec(0.0f64..1.0, 0..5), seed in any::<u64>(),
    ) {
        let mut bounds: Vec<u64> = cuts.iter().map(|c| (c * n as f64) as u64).collect();
        bounds.sort_unstable();
        let mut sizes = vec![];
        let mut prev = 0;
        for &b in bounds.iter().chain([n].iter()) {
            sizes.push(b - prev);
            prev = b;
        }
        let parts = random_split(n, &sizes, seed).unwrap();
        let again = random_split(n, &sizes, seed).unwrap();
        let mut seen = vec![false; n as usize];
        for (k, part) in parts.iter().enumerate() {
            prop_assert_eq!(part.len(), sizes[k]);
            let ids = part.to_vec().unwrap();
            prop_assert_eq!(&ids, &again[k].to_vec().unwrap());
            for &id in &ids {
                prop_assert!(!seen[id as usize], "id {} twice", id);
                seen[id as usize] = true;
                for (other, p) in parts.iter().enumerate() {
                    prop_assert_eq!(p.contains(id as u64), other == k);
                }
            }
        }
        prop_assert!(seen.iter().all(|&s| s));
        // A part depends on the seed only: the same positions of one
        // permutation whatever the other parts' sizes.
        if sizes.len() >= 2 {
            let merged = [sizes[0] + sizes[1]].iter().chain(&sizes[2..]).copied().collect::<Vec<_>>();
            let coarse = random_split(n, &merged, seed).unwrap();
            let mut both = parts[0].to_vec().unwrap();
            both.extend(parts[1].to_vec().unwrap());
            prop_assert_eq!(coarse[0].to_vec().unwrap(), both);
        }
    }

    #[test]
    fn mixtures_show_exact_multiplicities_over_epochs_with_changing_quotas(
        sizes in proptest::collection::vec(0u64..25, 1..5),
        quotas in proptest::collection::vec(proptest::collection::vec(0u64..60, 5), 4),
        seed in any::<u64>(), as_selections in any::<bool>(),
    ) {
        let k = sizes.len();
        let store: u64 = sizes.iter().sum::<u64>() + 3;
        // The same sources as concatenated sizes or as disjoint ranges of one store.
        let mut offsets = vec![];
        let mut at = 0;
        for &n in &sizes {
            offsets.push(at);
            at += n;
        }
        let mix = if as_selections {
            let sels = sizes.iter().zip(&offsets)
                .map(|(&n, &o)| Selection::from_ranges(&[(o, o + n)], store).unwrap())
                .collect();
            Mixture::from_selections(sels, seed).unwrap()
        } else {
            Mixture::from_sizes(&sizes, seed).unwrap()
        };
        let mut consumed = vec![0u64; k];
        let mut totals = vec![0u64; store as usize];
        for epoch_quotas in &quotas {
            let q: Vec<u64> = (0..k).map(|s| if sizes[s] == 0 { 0 } else { epoch_quotas[s] }).collect();
            let epoch = mix.epoch(&q, &consumed).unwrap();
            prop_assert_eq!(epoch.len(), q.iter().sum::<u64>());
            let js: Vec<i64> = (0..epoch.len() as i64).collect();
            let mut ids = vec![0; js.len()];
            epoch.fill(&js, &mut ids).unwrap();
            let mut sources = vec![0; js.len()];
            epoch.fill_sources(&js, &mut sources).unwrap();
            let mut counts = vec![0u64; store as usize];
            for (&id, &src) in ids.iter().zip(&sources) {
                let src = src as usize;
                prop_assert!(id as u64 >= offsets[src] && (id as u64) < offsets[src] + sizes[src]);
                counts[id as usize] += 1;
            }
            for s in 0..k {
                let n = sizes[s];
                for id in offsets[s]..offsets[s] + n {
                    let c = counts[id as usize];
                    totals[id as usize] += c;
                    let (lo, hi) = (q[s] / n, q[s].div_ceil(n));
                    if consumed[s] % n == 0 {
                        prop_assert!(lo <= c && c <= hi, "epoch count {} of {}", c, id);
                    } else {
                        prop_assert!(lo.saturating_sub(1) <= c && c <= hi + 1);
                    }
                    // Over the run: floor or ceil of consumed / n, so every
                    // sample once before any repeat.
                    let done = consumed[s] + q[s];
                    let t = totals[id as usize];
                    prop_assert!(done / n <= t && t <= done.div_ceil(n), "total {} of {}", t, id);
                }
            }
            consumed = epoch.consumed_after();
        }
        prop_assert!(counts_are_unused_outside(&totals, &offsets, &sizes));
    }

    #[test]
    fn the_stratification_bound_holds_on_every_prefix(
        quotas in proptest::collection::vec(0u64..400, 1..14),
    ) {
        prop_assert!(check_interleave(&quotas).is_ok(), "{:?}", check_interleave(&quotas));
    }

    #[test]
    fn weighted_quotas_sum_to_the_epoch_and_stay_within_one_of_the_share(
        weights in proptest::collection::vec(0u32..1000, 1..8), s in 0u64..100_000,
    ) {
        let w: Vec<f64> = weights.iter().map(|&x| f64::from(x)).collect();
        let total: u64 = weights.iter().map(|&x| u64::from(x)).sum();
        match quotas_from_weights(&w, s) {
            Err(_) => prop_assert!(total == 0 && s > 0),
            Ok(q) => {
                prop_assert_eq!(q.iter().sum::<u64>(), s);
                for (k, &qk) in q.iter().enumerate() {
                    // |q_k - s w_k / W| < 1, exactly.
                    let share = s as i128 * i128::from(weights[k]);
                    let dev = (qk as i128 * total as i128 - share).abs();
                    prop_assert!(total == 0 || dev < total as i128);
                }
            }
        }
        let mix = Mixture::from_sizes(&vec![10; w.len()], 0).unwrap();
        let rule = QuotaRule::Weights { weights: w.clone(), num_samples: None };
        if total > 0 {
            prop_assert_eq!(mix.quotas(&rule).unwrap().iter().sum::<u64>(), 10 * w.len() as u64);
        }
    }

    #[test]
    fn the_step_shuffle_is_a_permutation_of_the_step(
        start in 0u64..1_000_000, len in 0u64..300, seed in any::<u64>(), step in any::<u64>(),
    ) {
        let sh = StepShuffle::new(seed, 1, step, start, len).unwrap();
        let mut ps: Vec<i64> = (start as i64..(start + len) as i64).collect();
        sh.map_in_place(&mut ps).unwrap();
        for (i, &p) in ps.iter().enumerate() {
            prop_assert_eq!(sh.apply(start + i as u64).unwrap() as i64, p);
        }
        ps.sort_unstable();
        prop_assert_eq!(ps, (start as i64..(start + len) as i64).collect::<Vec<_>>());
    }
}

/// No id outside the sources was ever shown.
fn counts_are_unused_outside(totals: &[u64], offsets: &[u64], sizes: &[u64]) -> bool {
    let end = offsets.last().copied().unwrap_or(0) + sizes.last().copied().unwrap_or(0);
    totals[end as usize..].iter().all(|&t| t == 0)
}
