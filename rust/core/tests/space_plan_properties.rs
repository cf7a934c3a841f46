//! Plans over index spaces: exact coverage of the space's ids (with their
//! multiplicities for mixtures), step sets independent of the world size,
//! equal micro-batch counts, resume at a step boundary on another world
//! size, and a mixture's per-step stratification after the step shuffle.

use epochplan_core::order::{Kind, Order};
use epochplan_core::plan::Plan;
use epochplan_core::space::{random_split, Mixture, Selection, Space};
use proptest::prelude::*;
use std::sync::Arc;

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort_unstable();
    v
}

/// A plan over `space` (of `len` ids) with the order of `kind`.
fn plan_over(space: Space, len: u64, g: u64, kind: Kind, cursor: u64) -> Plan {
    let order = Order::new(len, 3, 1, kind).unwrap();
    Plan::new(order, g, false, cursor)
        .unwrap()
        .with_space(space)
        .unwrap()
}

/// A selection of every form over a store of `n`, from `bits`.
fn selections(n: u64, bits: &[bool], seed: u64) -> Vec<Selection> {
    let ids: Vec<i64> = (0..n as i64).filter(|&i| bits[i as usize]).collect();
    let mut ranges = vec![];
    let mut i = 0;
    while i < bits.len() {
        if bits[i] {
            let start = i;
            while i < bits.len() && bits[i] {
                i += 1;
            }
            ranges.push((start as u64, i as u64));
        } else {
            i += 1;
        }
    }
    let mut reversed = ids.clone();
    reversed.reverse();
    let k = ids.len() as u64;
    vec![
        Selection::from_ranges(&ranges, n).unwrap(),
        Selection::from_mask(bits).unwrap(),
        Selection::from_indices(reversed, n).unwrap(),
        random_split(n, &[k, n - k], seed).unwrap().remove(0),
    ]
}

/// Every rank's ids of every step, for `w` ranks.
fn steps_of(plan: &Plan, w: u64) -> Vec<Vec<i64>> {
    (plan.layout().start_step()..plan.layout().num_steps())
        .map(|t| {
            sorted(
                (0..w)
                    .flat_map(|r| plan.step_indices(t, r, w).unwrap())
                    .collect(),
            )
        })
        .collect()
}

fn kinds() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Cipher),
        Just(Kind::Uniform),
        Just(Kind::Identity),
        (1u64..5, 1u64..3).prop_map(|(c, p)| Kind::Chunked {
            chunk_size: c,
            preload_nchunks: p
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn selection_plans_cover_the_selection_once(
        n in 0u64..120,
        bits_seed in any::<u64>(),
        density in 0u32..=4,
        g in 1u64..20,
        kind in kinds(),
        b in 1u64..4,
    ) {
        let bits: Vec<bool> = (0..n)
            .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ bits_seed) % 4 < u64::from(density))
            .collect();
        for sel in selections(n, &bits, bits_seed) {
            let want = sorted(sel.to_vec().unwrap());
            let len = sel.len();
            let plan = plan_over(Space::Selection(Arc::new(sel.clone())), len, g, kind, 0);
            let reference = steps_of(&plan, 1);
            for w in 1..=17u64 {
                let all = sorted((0..w).flat_map(|r| plan.rank_indices(r, w).unwrap()).collect());
                prop_assert_eq!(&all, &want, "w={}", w);
                prop_assert_eq!(&steps_of(&plan, w), &reference);
                let counts: Vec<u64> = (0..w)
                    .map(|r| (0..plan.layout().num_steps())
                        .map(|t| plan.micro_batches(t, r, w, b).unwrap().len() as u64)
                        .sum())
                    .collect();
                prop_assert!(counts.iter().all(|&c| c == counts[0]));
            }
            // Stop after a step on 3 ranks, resume on 2: the rest exactly once.
            if plan.layout().num_steps() > 1 {
                let stop = plan.layout().num_steps() / 2;
                let p = &plan;
                let before: Vec<i64> = (0..stop)
                    .flat_map(|t| (0..3).flat_map(move |r| p.step_indices(t, r, 3).unwrap()))
                    .collect();
                let resumed = plan.with_cursor(plan.layout().cursor_at_step(stop)).unwrap();
                let after: Vec<i64> = (0..2).flat_map(|r| resumed.rank_indices(r, 2).unwrap()).collect();
                prop_assert_eq!(sorted([before, after].concat()), want.clone());
            }
        }
    }

    #[test]
    fn mixture_plans_cover_each_quota_and_stay_stratified(
        sizes in proptest::collection::vec(1u64..30, 1..5),
        quota_scale in proptest::collection::vec(0u64..60, 4),
        g in 1u64..24,
        epoch in 0u64..3,
    ) {
        let k = sizes.len();
        let quotas: Vec<u64> = (0..k).map(|i| quota_scale[i]).collect();
        let mixture = Mixture::from_sizes(&sizes, 5).unwrap();
        let consumed: Vec<u64> = quotas.iter().map(|q| q * epoch).collect();
        let mix = mixture.epoch(&quotas, &consumed).unwrap();
        let s = mix.len();
        let want = sorted((0..s).map(|j| mix.get(j).unwrap() as i64).collect());
        let space = Space::Mixture { epoch: Arc::new(mix.clone()), seed: 9, plan_epoch: epoch };
        let plan = plan_over(space.clone(), s, g, Kind::Identity, 0);
        let reference = steps_of(&plan, 1);
        let depth = usize::BITS - (k.max(1) - 1).leading_zeros();
        for w in [1u64, 2, 3, 5, 8, 17] {
            let all = sorted((0..w).flat_map(|r| plan.rank_indices(r, w).unwrap()).collect());
            prop_assert_eq!(&all, &want);
            prop_assert_eq!(&steps_of(&plan, w), &reference);
        }
        // Each step holds each source within ceil(log2 K) of its share.
        let offsets: Vec<u64> = sizes.iter().scan(0, |acc, &n| { let o = *acc; *acc += n; Some(o) }).collect();
        for t in 0..plan.layout().num_steps() {
            let len = plan.layout().step_len(t).unwrap();
            let ids = plan.step_indices(t, 0, 1).unwrap();
            let sources = plan.step_sources(t, 0, 1).unwrap();
            for (&id, &src) in ids.iter().zip(&sources) {
                let kk = src as usize;
                prop_assert!(id as u64 >= offsets[kk] && (id as u64) < offsets[kk] + sizes[kk]);
            }
            for (kk, &q) in quotas.iter().enumerate() {
                let count = sources.iter().filter(|&&x| x as usize == kk).count() as f64;
                let share = len as f64 * q as f64 / s as f64;
                prop_assert!((count - share).abs() <= f64::from(depth).max(1.0) + 1e-9,
                    "step {} source {} count {} share {}", t, kk, count, share);
            }
        }
        // A plan over a mixture needs the identity order.
        let order = Order::new(s, 3, 1, Kind::Cipher).unwrap();
        prop_assert!(Plan::new(order, g, false, 0).unwrap().with_space(space).is_err());
    }
}

#[test]
fn a_plan_over_a_space_of_another_size_is_refused() {
    let sel = Selection::from_ranges(&[(0, 5)], 10).unwrap();
    let order = Order::new(6, 0, 0, Kind::Cipher).unwrap();
    let err = Plan::new(order, 2, false, 0)
        .unwrap()
        .with_space(Space::Selection(Arc::new(sel)))
        .unwrap_err();
    assert!(err.to_string().contains("5 ids"), "{err}");
}

#[test]
fn the_step_shuffle_mixes_every_rank() {
    // Two equal sources, one step of 64 over 8 ranks: without the shuffle
    // the stratified arrangement alternates, and rank 0 would see one source.
    let mixture = Mixture::from_sizes(&[32, 32], 0).unwrap();
    let mix = mixture.epoch(&[32, 32], &[0, 0]).unwrap();
    let plan = plan_over(
        Space::Mixture {
            epoch: Arc::new(mix),
            seed: 0,
            plan_epoch: 0,
        },
        64,
        64,
        Kind::Identity,
        0,
    );
    let seen: Vec<usize> = (0..8)
        .map(|r| {
            let s = plan.step_sources(0, r, 8).unwrap();
            s.iter()
                .copied()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
        })
        .collect();
    assert!(seen.iter().filter(|&&k| k == 2).count() >= 6, "{seen:?}");
}
