//! Token dealing invariants for random steps (lengths all equal, one huge,
//! spread out, near `u64::MAX`; loss tokens with many zeros), world sizes
//! 1..=17 and beyond the step's size, and random caps: exact coverage,
//! equal micro-batch counts, the caps, the balance bound, strided as a
//! floor, weights, determinism and length grouping, under either packing
//! (first fit: each share is its first-fit decreasing bins by the book).

use epochplan_core::tokens::{
    deal_step, sample_weight, step_tokens, token_weight, Caps, Cost, Packing, StepDealing,
    StepShares,
};
use proptest::collection::vec;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Case {
    lengths: Vec<u64>,
    loss_tokens: Vec<u64>,
    world_size: u64,
    micro_batch_size: Option<u64>,
    max_tokens: Option<u64>,
    cost: Cost,
    packing: Packing,
}

fn lengths() -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        (1usize..70, 0u64..50).prop_map(|(n, l)| vec![l; n]),
        (
            vec(0u64..20, 1..70),
            100u64..100_000,
            any::<prop::sample::Index>()
        )
            .prop_map(|(mut v, huge, at)| {
                let i = at.index(v.len());
                v[i] = huge;
                v
            }),
        vec(0u64..200, 1..90),
        vec(prop_oneof![Just(0u64), 1u64..8], 1..60),
        vec(prop_oneof![Just(u64::MAX), any::<u64>()], 1..12),
    ]
}

fn costs() -> impl Strategy<Value = Cost> {
    prop_oneof![
        3 => Just(Cost::Tokens),
        1 => (0u32..4, 1u32..5).prop_map(|(a, b)| Cost::quadratic(a as f64, b as f64 / 64.0).unwrap()),
        1 => (1u32..4).prop_map(|a| Cost::quadratic(a as f64, 0.0).unwrap()),
    ]
}

fn cases() -> impl Strategy<Value = Case> {
    (lengths(), costs()).prop_flat_map(|(lengths, cost)| {
        let n = lengths.len();
        let longest = lengths.iter().copied().max().unwrap_or(0).max(1);
        let loss = prop_oneof![
            2 => vec(prop_oneof![Just(0u64), 0u64..1000], n),
            1 => Just(vec![0u64; n]),
            1 => Just(lengths.clone()),
        ];
        let world = prop_oneof![1u64..=17, (n as u64 + 1)..(n as u64 + 6)];
        let extra = longest.saturating_add(1);
        let max_tokens = (0..extra).prop_map(move |e| longest.saturating_add(e));
        let caps = prop_oneof![
            (1u64..9).prop_map(|b| (Some(b), None)),
            max_tokens.clone().prop_map(|m| (None, Some(m))),
            (1u64..9, max_tokens).prop_map(|(b, m)| (Some(b), Some(m))),
        ];
        let packing = prop_oneof![Just(Packing::Sorted), Just(Packing::FirstFit)];
        (Just(lengths), loss, world, caps, Just(cost), packing).prop_map(
            |(lengths, loss_tokens, world_size, (micro_batch_size, max_tokens), cost, packing)| {
                Case {
                    lengths,
                    loss_tokens,
                    world_size,
                    micro_batch_size,
                    max_tokens,
                    cost,
                    packing,
                }
            },
        )
    })
}

fn caps(case: &Case) -> Caps {
    Caps::new(case.micro_batch_size, case.max_tokens)
        .unwrap()
        .with_packing(case.packing)
}

fn deal(case: &Case) -> StepDealing {
    deal_step(&case.lengths, case.cost, case.world_size, caps(case)).unwrap()
}

/// First-fit decreasing by the book over `share`'s samples: by decreasing
/// length (ties: lower position), each into the first bin it fits under the
/// case's caps; the bins in opening order, concatenated.
fn first_fit_by_the_book(case: &Case, share: &[usize]) -> Vec<usize> {
    let mut items = share.to_vec();
    items.sort_by_key(|&i| (std::cmp::Reverse(case.lengths[i]), i));
    let caps = caps(case);
    let mut bins: Vec<(Vec<usize>, u128)> = vec![];
    for i in items {
        let l = u128::from(case.lengths[i]);
        match bins
            .iter_mut()
            .find(|(bin, tokens)| caps.allows(bin.len() as u64 + 1, tokens + l))
        {
            Some((bin, tokens)) => {
                bin.push(i);
                *tokens += l;
            }
            None => bins.push((vec![i], l)),
        }
    }
    bins.into_iter().flat_map(|(bin, _)| bin).collect()
}

/// The share's samples by length, ties by position.
fn by_length(case: &Case, share: &[usize]) -> Vec<usize> {
    let mut sorted = share.to_vec();
    sorted.sort_by_key(|&i| (case.lengths[i], i));
    sorted
}

/// The spread of the ranks' costs when rank `r` holds `shares[r]` (all `W`
/// ranks, an empty one at 0), as exact rationals for tokens: returned as
/// `(spread, largest single cost)` in f64 for quadratic costs.
fn spread_of(case: &Case, shares: &[Vec<usize>]) -> (f64, f64, f64) {
    let cost = |i: usize| case.cost.of(case.lengths[i]);
    let loads: Vec<f64> = shares
        .iter()
        .map(|s| s.iter().map(|&i| cost(i)).sum())
        .collect();
    let max = loads.iter().copied().fold(0.0, f64::max);
    let mut min = loads.iter().copied().fold(f64::INFINITY, f64::min);
    if (shares.len() as u64) < case.world_size {
        min = 0.0;
    }
    let largest = (0..case.lengths.len()).map(cost).fold(0.0, f64::max);
    (max - min, largest, loads.iter().sum())
}

fn exact_spread(case: &Case, shares: &[Vec<usize>]) -> (u128, u128) {
    let loads: Vec<u128> = shares
        .iter()
        .map(|s| s.iter().map(|&i| u128::from(case.lengths[i])).sum())
        .collect();
    let max = loads.iter().copied().max().unwrap_or(0);
    let mut min = loads.iter().copied().min().unwrap_or(0);
    if (shares.len() as u64) < case.world_size {
        min = 0;
    }
    let largest = case.lengths.iter().copied().max().map_or(0, u128::from);
    (max - min, largest)
}

/// Next-fit over `share` (sorted) under the case's caps: the runs' ends.
fn next_fit(case: &Case, share: &[usize]) -> Vec<usize> {
    let mut ends = vec![];
    let (mut count, mut tokens) = (0u64, 0u128);
    for (k, &i) in share.iter().enumerate() {
        let l = u128::from(case.lengths[i]);
        let fits = case.micro_batch_size.is_none_or(|b| count < b)
            && case.max_tokens.is_none_or(|m| tokens + l <= u128::from(m));
        if count > 0 && !fits {
            ends.push(k);
            (count, tokens) = (0, 0);
        }
        count += 1;
        tokens += l;
    }
    if count > 0 {
        ends.push(share.len());
    }
    ends
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn token_dealings_are_exact_equal_capped_balanced_and_grouped(case in cases()) {
        let dealing = deal(&case);
        let n = case.lengths.len();
        let w = case.world_size;
        let m = dealing.num_micro_batches();
        let shortest = (0..n).min_by_key(|&i| (case.lengths[i], i)).unwrap();
        let ranks = w.min(n as u64 + 3);
        let mut seen = vec![0u32; n];
        let mut shares = vec![];
        let mut packed_most = 0usize;
        for r in 0..ranks {
            let share = dealing.share(r).unwrap().to_vec();
            // Dealing order: by length, ties by position; or packed first fit.
            let sorted = by_length(&case, &share);
            match case.packing {
                Packing::Sorted => prop_assert_eq!(&share, &sorted),
                Packing::FirstFit => prop_assert_eq!(&share, &first_fit_by_the_book(&case, &sorted)),
            }
            let runs = next_fit(&case, &share);
            packed_most = packed_most.max(runs.len());
            let mut flat = vec![];
            let mut fillers = 0u64;
            let mut start = 0usize;
            let mbs: Vec<_> = dealing.micro_batches(r).unwrap().collect();
            prop_assert_eq!(mbs.len() as u64, m);
            for mb in &mbs {
                prop_assert!(!mb.samples.is_empty());
                if let Some(b) = case.micro_batch_size {
                    prop_assert!(mb.samples.len() as u64 <= b);
                }
                if let Some(cap) = case.max_tokens {
                    let tokens: u128 = mb.samples.iter().map(|&i| u128::from(case.lengths[i])).sum();
                    prop_assert!(tokens <= u128::from(cap));
                }
                if mb.filler {
                    prop_assert_eq!(mb.samples, &[shortest][..]);
                    fillers += 1;
                } else {
                    // Each real micro-batch is a consecutive piece of one next-fit run.
                    let end = start + mb.samples.len();
                    prop_assert!(runs.iter().all(|&cut| cut <= start || cut >= end));
                    start = end;
                    flat.extend_from_slice(mb.samples);
                }
            }
            prop_assert_eq!(&flat, &share);
            // Splits before fillers: fillers only for a share smaller than M,
            // and then every real micro-batch holds one sample.
            prop_assert_eq!(fillers, m.saturating_sub(share.len() as u64));
            if fillers > 0 {
                prop_assert!(mbs.iter().all(|mb| mb.samples.len() == 1));
            }
            for &i in &share {
                seen[i] += 1;
            }
            shares.push(share);
        }
        if w > ranks {
            // The last rank, far beyond the step, holds only fillers.
            let last: Vec<_> = dealing.micro_batches(w - 1).unwrap().collect();
            prop_assert_eq!(last.len() as u64, m);
            prop_assert!(last.iter().all(|mb| mb.filler && mb.samples == [shortest]));
        }
        // Exact: every sample once over the ranks.
        prop_assert!(seen.iter().all(|&k| k == 1));
        // M is the most next-fit runs of any rank.
        prop_assert_eq!(m, packed_most.max(1) as u64);

        // Balance: spread <= the largest single cost, and <= strided.
        let shares: Vec<Vec<usize>> = shares.into_iter().take(n.min(w as usize)).collect();
        let strided: Vec<Vec<usize>> = (0..n.min(w as usize))
            .map(|r| (r..n).step_by(w as usize).collect())
            .collect();
        match case.cost {
            Cost::Tokens => {
                let (spread, largest) = exact_spread(&case, &shares);
                prop_assert!(spread <= largest, "spread {} above {}", spread, largest);
                prop_assert!(spread <= exact_spread(&case, &strided).0);
            }
            Cost::Quadratic { .. } => {
                let (spread, largest, total) = spread_of(&case, &shares);
                let slack = total * 1e-12;
                prop_assert!(spread <= largest + slack, "spread {} above {}", spread, largest);
                prop_assert!(spread <= spread_of(&case, &strided).0 + slack);
            }
        }
    }

    #[test]
    fn weights_sum_to_the_world_size_per_step(case in cases()) {
        let dealing = deal(&case);
        let w = case.world_size;
        let by_tokens = token_weight(&case.loss_tokens, w).unwrap();
        let by_samples = sample_weight(case.lengths.len(), w).unwrap();
        let (mut tokens_sum, mut samples_sum) = (0.0f64, 0.0f64);
        for r in 0..w.min(case.lengths.len() as u64 + 1) {
            for mb in dealing.micro_batches(r).unwrap() {
                for &i in mb.samples {
                    tokens_sum += mb.weight(by_tokens) * case.loss_tokens[i] as f64;
                    samples_sum += mb.weight(by_samples);
                    if mb.filler {
                        prop_assert_eq!(mb.weight(by_tokens), 0.0);
                    }
                }
            }
        }
        prop_assert!((samples_sum - w as f64).abs() <= 1e-9 * w as f64);
        if step_tokens(&case.loss_tokens) > 0 {
            prop_assert!((tokens_sum - w as f64).abs() <= 1e-9 * w as f64, "{} vs {}", tokens_sum, w);
        } else {
            prop_assert_eq!(by_tokens, 0.0);
            prop_assert_eq!(tokens_sum, 0.0);
        }
    }

    #[test]
    fn dealings_are_deterministic_and_shares_ignore_the_caps(case in cases(), b in 1u64..5) {
        let first = deal(&case);
        prop_assert_eq!(&first, &deal(&case));
        // Sorted shares are the same under any caps; packed ones hold the
        // same samples in their bins' order.
        let other = Caps::new(Some(b), None).unwrap();
        let again = deal_step(&case.lengths, case.cost, case.world_size, other).unwrap();
        let shares = StepShares::new(&case.lengths, case.cost, case.world_size).unwrap();
        prop_assert_eq!(again.shares(), &shares);
        for r in 0..case.world_size.min(case.lengths.len() as u64 + 1) {
            let mine = first.share(r).unwrap();
            match case.packing {
                Packing::Sorted => prop_assert_eq!(mine, shares.share(r).unwrap()),
                Packing::FirstFit => {
                    prop_assert_eq!(&by_length(&case, mine)[..], shares.share(r).unwrap())
                }
            }
        }
    }

    #[test]
    fn equal_lengths_are_dealt_strided(l in 0u64..100, n in 1usize..60, w in 1u64..20) {
        let lengths = vec![l; n];
        let dealing = deal_step(&lengths, Cost::Tokens, w, Caps::new(Some(2), None).unwrap()).unwrap();
        for r in 0..w {
            let want: Vec<usize> = (r as usize..n).step_by(w as usize).collect();
            prop_assert_eq!(dealing.share(r).unwrap(), &want[..]);
        }
    }

    #[test]
    fn a_sample_over_the_cap_is_refused_by_position(
        lengths in vec(0u64..50, 1..40), at in any::<prop::sample::Index>(), w in 1u64..9,
    ) {
        let mut lengths = lengths;
        let i = at.index(lengths.len());
        lengths[i] = 100;
        let caps = Caps::new(None, Some(99)).unwrap();
        let err = deal_step(&lengths, Cost::Tokens, w, caps).unwrap_err().to_string();
        let want = format!("lengths[{i}] must be <= max_tokens (99), got 100");
        prop_assert!(err.starts_with(&want), "{}", err);
    }
}
