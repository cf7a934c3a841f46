//! Epoch plan invariants for random (N, G, W, b, cursor): exact, equal-step,
//! weighted, elastic and resumable.

use epochplan_core::plan::Plan;
use epochplan_core::{Kind, Order};
use proptest::prelude::*;

fn kinds() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Cipher),
        Just(Kind::Identity),
        Just(Kind::Uniform),
        (1u64..6, 1u64..4).prop_map(|(chunk_size, preload_nchunks)| Kind::Chunked {
            chunk_size,
            preload_nchunks,
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn plans_are_exact_equal_step_weighted_and_elastic(
        n in 0u64..400, g in 1u64..70, w in 1u64..18, b in 1u64..9,
        seed in any::<u64>(), kind in kinds(), drop_last in any::<bool>(), at in 0u64..100,
    ) {
        let order = Order::new(n, seed, 1, kind).unwrap();
        let full = Plan::new(order.clone(), g, drop_last, 0).unwrap();
        let start = at % (full.layout().num_steps() + 1);
        let plan = full.with_cursor(full.layout().cursor_at_step(start)).unwrap();
        let mut seen = vec![];
        for step in plan.layout().start_step()..plan.layout().num_steps() {
            let n_t = plan.layout().step_len(step).unwrap();
            let expected_mb = plan.layout().share(step, 0, w, b).unwrap().micro_batches;
            let mut step_ids = vec![];
            for r in 0..w {
                let mbs = plan.micro_batches(step, r, w, b).unwrap();
                prop_assert_eq!(mbs.len() as u64, expected_mb);
                for (ids, weights) in &mbs {
                    prop_assert!(!ids.is_empty() && ids.len() as u64 <= b);
                    for (&id, &wt) in ids.iter().zip(weights) {
                        if wt > 0.0 {
                            prop_assert_eq!(wt, w as f64 / n_t as f64);
                            step_ids.push(id);
                        } else {
                            prop_assert_eq!(wt, 0.0);
                        }
                    }
                }
            }
            // Elastic: the step holds exactly positions [tG, tG + n_t) of the order.
            let mut want: Vec<i64> = (0..n_t).map(|k| order.get(step * g + k).unwrap() as i64).collect();
            step_ids.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(&step_ids, &want);
            seen.extend(step_ids);
        }
        // Exact: the remaining steps cover their samples once, and rank_indices agree.
        let mut from_ranks: Vec<i64> = (0..w).flat_map(|r| plan.rank_indices(r, w).unwrap()).collect();
        from_ranks.sort_unstable();
        seen.sort_unstable();
        prop_assert_eq!(&from_ranks, &seen);
        let end = if drop_last { full.layout().num_steps() * g } else { n };
        prop_assert_eq!(seen.len() as u64, end - plan.layout().cursor());
        let mut unique = seen.clone();
        unique.dedup();
        prop_assert_eq!(unique.len(), seen.len());
        prop_assert_eq!(
            plan.layout().total_micro_batches(w, b).unwrap(),
            (plan.layout().start_step()..plan.layout().num_steps()).map(|s| plan.layout().share(s, 0, w, b).unwrap().micro_batches).sum::<u64>()
        );
    }
}
