//! Token plans wired end to end, for random (N, G, W, caps, cursor) and
//! lengths read by sample id through the order: every remaining sample once,
//! the same step sets for every W (those of the strided plan), the same
//! number of micro-batches on every rank, both caps, the balance bound, the
//! weights summing to W over the step's loss tokens, the micro-batches
//! agreeing with the step's shares, and a resumed plan dealing its steps as
//! the whole epoch does. `tests/token_properties.rs` covers one step's
//! dealing on its own; this covers the plan around it.

use epochplan_core::dealing::Dealing;
use epochplan_core::plan::Plan;
use epochplan_core::tokens::{Caps, Cost, Normalization};
use epochplan_core::{Kind, Order};
use proptest::collection::vec;
use proptest::prelude::*;

fn kinds() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Cipher),
        Just(Kind::Identity),
        (1u64..6, 1u64..4).prop_map(|(chunk_size, preload_nchunks)| Kind::Chunked {
            chunk_size,
            preload_nchunks,
        }),
    ]
}

/// Lengths of `n` samples: all equal, one huge, spread out, mostly tiny.
fn lengths(n: usize) -> impl Strategy<Value = Vec<u32>> {
    prop_oneof![
        (0u32..40).prop_map(move |l| vec![l; n]),
        (
            vec(0u32..20, n),
            500u32..100_000,
            any::<prop::sample::Index>()
        )
            .prop_map(move |(mut v, huge, at)| {
                if n > 0 {
                    v[at.index(n)] = huge;
                }
                v
            }),
        vec(0u32..300, n),
        vec(prop_oneof![Just(0u32), 1u32..6], n),
    ]
}

/// Loss tokens: none (the lengths count), many zeros, all zeros.
fn loss_tokens(n: usize) -> impl Strategy<Value = Option<Vec<u32>>> {
    prop_oneof![
        2 => Just(None),
        2 => vec(prop_oneof![3 => Just(0u32), 1 => 0u32..500], n).prop_map(Some),
        1 => Just(Some(vec![0u32; n])),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    n: u64,
    g: u64,
    seed: u64,
    kind: Kind,
    drop_last: bool,
    at: u64,
    lengths: Vec<u32>,
    loss_tokens: Option<Vec<u32>>,
    worlds: Vec<u64>,
    micro_batch_size: Option<u64>,
    /// Added to the longest length for the token cap, when there is one.
    headroom: Option<u32>,
    quadratic: bool,
}

fn cases() -> impl Strategy<Value = Case> {
    (0usize..160, 1u64..30).prop_flat_map(|(n, g)| {
        // World sizes up to the step and beyond it (W > G).
        let world = prop_oneof![1u64..=9, (g + 1)..(g + 5)];
        let caps = prop_oneof![
            (1u64..6).prop_map(|b| (Some(b), None)),
            (0u32..400).prop_map(|h| (None, Some(h))),
            (1u64..6, 0u32..400).prop_map(|(b, h)| (Some(b), Some(h))),
        ];
        (
            (any::<u64>(), kinds(), any::<bool>(), 0u64..50),
            lengths(n),
            loss_tokens(n),
            vec(world, 2..4),
            caps,
            prop::bool::weighted(0.2),
        )
            .prop_map(
                move |(
                    (seed, kind, drop_last, at),
                    lengths,
                    loss_tokens,
                    worlds,
                    (micro_batch_size, headroom),
                    quadratic,
                )| Case {
                    n: n as u64,
                    g,
                    seed,
                    kind,
                    drop_last,
                    at,
                    lengths,
                    loss_tokens,
                    worlds,
                    micro_batch_size,
                    headroom,
                    quadratic,
                },
            )
    })
}

fn plans(case: &Case) -> (Plan, Plan) {
    let order = Order::new(case.n, case.seed, 1, case.kind).unwrap();
    let strided = Plan::new(order.clone(), case.g, case.drop_last, 0).unwrap();
    let cost = if case.quadratic {
        Cost::quadratic(1.0, 1.0 / 64.0).unwrap()
    } else {
        Cost::Tokens
    };
    let layout = strided
        .layout()
        .with_dealing(Dealing::Balanced { cost }, Normalization::Tokens)
        .unwrap();
    (Plan::from_parts(layout, order).unwrap(), strided)
}

fn caps(case: &Case) -> Caps {
    let longest = case.lengths.iter().copied().max().unwrap_or(0).max(1);
    let max_tokens = case.headroom.map(|h| u64::from(longest) + u64::from(h));
    Caps::new(case.micro_batch_size, max_tokens).unwrap()
}

fn len_of(case: &Case, id: i64) -> u64 {
    u64::from(case.lengths[id as usize])
}

fn loss_of(case: &Case, id: i64) -> u64 {
    let loss = case.loss_tokens.as_ref().unwrap_or(&case.lengths);
    u64::from(loss[id as usize])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn token_plans_are_exact_elastic_equal_capped_balanced_and_weighted(case in cases()) {
        let (full, strided) = plans(&case);
        let start = case.at % (full.layout().num_steps() + 1);
        let plan = full.with_cursor(full.layout().cursor_at_step(start)).unwrap();
        let caps = caps(&case);
        let lengths = &case.lengths;
        let loss = case.loss_tokens.as_ref();
        let loss_dyn = loss.map(|l| l as &dyn epochplan_core::dealing::SampleLengths);
        let cost = |id: i64| -> f64 {
            let l = len_of(&case, id) as f64;
            if case.quadratic { l + l * l / 64.0 } else { l }
        };
        let mut seen_by_world = vec![vec![]; case.worlds.len()];
        for step in plan.layout().start_step()..plan.layout().num_steps() {
            // In position order: the filler is the shortest, ties by position.
            let mut want = strided.step_ids(step).unwrap();
            let shortest = *want.iter().min_by_key(|&&id| len_of(&case, id)).unwrap();
            want.sort_unstable();
            let step_tokens: u64 = want.iter().map(|&id| loss_of(&case, id)).sum();
            let largest = want.iter().map(|&id| cost(id)).fold(0.0, f64::max);
            for (k, &w) in case.worlds.iter().enumerate() {
                let mut got = vec![];
                let mut loads = vec![];
                let mut counts = vec![];
                let mut weighted = 0.0f64;
                for r in 0..w {
                    let share = plan.balanced_step_indices(step, r, w, lengths, loss_dyn).unwrap();
                    let batches = plan
                        .balanced_micro_batches(step, r, w, caps, lengths, loss_dyn)
                        .unwrap();
                    counts.push(batches.len());
                    let mut real = vec![];
                    let mut fillers = 0usize;
                    for (ids, weights) in &batches {
                        prop_assert!(!ids.is_empty());
                        prop_assert_eq!(ids.len(), weights.len());
                        if let Some(b) = caps.micro_batch_size() {
                            prop_assert!(ids.len() as u64 <= b);
                        }
                        if let Some(cap) = caps.max_tokens() {
                            let tokens: u64 = ids.iter().map(|&id| len_of(&case, id)).sum();
                            prop_assert!(tokens <= cap, "{} tokens over the cap {}", tokens, cap);
                        }
                        if real.len() < share.len() {
                            real.extend_from_slice(ids);
                        } else {
                            // Fillers: after the real ones, the step's shortest sample, weight 0.
                            prop_assert_eq!(&ids[..], &[shortest][..]);
                            prop_assert_eq!(weights[0], 0.0);
                            fillers += 1;
                        }
                        for (&id, &wt) in ids.iter().zip(weights) {
                            weighted += wt * loss_of(&case, id) as f64;
                        }
                    }
                    // The micro-batches are the share, in its order, then fillers
                    // only for a share smaller than the count.
                    prop_assert_eq!(&real, &share);
                    prop_assert_eq!(fillers, batches.len().saturating_sub(share.len()));
                    loads.push(share.iter().map(|&id| cost(id)).sum::<f64>());
                    got.extend(share);
                }
                // Equal micro-batch counts on every rank.
                prop_assert!(counts.iter().all(|&c| c == counts[0]), "{:?}", counts);
                // Elastic: the step's samples are the strided plan's, for every W.
                got.sort_unstable();
                prop_assert_eq!(&got, &want);
                seen_by_world[k].extend(got);
                // Balance: max - min over all W ranks <= the largest single cost.
                let max = loads.iter().copied().fold(0.0, f64::max);
                let min = loads.iter().copied().fold(f64::INFINITY, f64::min);
                let slack = loads.iter().sum::<f64>() * 1e-12;
                prop_assert!(max - min <= largest + slack, "spread {} above {}", max - min, largest);
                // Weights: sum over the step of weight * loss tokens is W (0 if T_t = 0).
                let target = if step_tokens > 0 { w as f64 } else { 0.0 };
                prop_assert!((weighted - target).abs() <= 1e-9 * w as f64, "{} vs {}", weighted, target);
            }
        }
        // Exact: the remaining samples once each, the same for every W.
        let end = if case.drop_last { full.layout().num_steps() * case.g } else { case.n };
        let mut remaining: Vec<i64> = (plan.layout().cursor()..end)
            .map(|p| plan.order().get(p).unwrap() as i64)
            .collect();
        remaining.sort_unstable();
        for mut seen in seen_by_world {
            seen.sort_unstable();
            prop_assert_eq!(&seen, &remaining);
        }
    }

    #[test]
    fn a_resumed_token_plan_deals_its_steps_as_the_whole_epoch(case in cases()) {
        let (full, _) = plans(&case);
        let start = case.at % (full.layout().num_steps() + 1);
        let resumed = full.with_cursor(full.layout().cursor_at_step(start)).unwrap();
        let caps = caps(&case);
        let loss = case.loss_tokens.as_ref();
        let loss_dyn = loss.map(|l| l as &dyn epochplan_core::dealing::SampleLengths);
        let w = case.worlds[0];
        for step in resumed.layout().start_step()..resumed.layout().num_steps() {
            for r in 0..w.min(case.g + 2) {
                prop_assert_eq!(
                    resumed.balanced_micro_batches(step, r, w, caps, &case.lengths, loss_dyn).unwrap(),
                    full.balanced_micro_batches(step, r, w, caps, &case.lengths, loss_dyn).unwrap()
                );
            }
        }
    }
}
