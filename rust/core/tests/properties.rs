//! Properties of the orders at every scale up to `2^63 - 1`, where exhaustive
//! checks are impossible: the cipher's inverse undoes it, ids stay in range,
//! the batch paths agree with the per-position path, and distinct positions
//! give distinct ids.

use epochplan_core::cipher::Cipher;
use epochplan_core::keys::{derive, Domain};
use epochplan_core::{Kind, Order, MAX_SAMPLES};
use proptest::prelude::*;

/// Sizes spread over every bit length from 1 to 63.
fn any_size() -> impl Strategy<Value = u64> {
    (1u32..=63).prop_flat_map(|bits| {
        let lo = 1u64 << (bits - 1);
        let hi = ((1u128 << bits) - 1).min(u128::from(MAX_SAMPLES)) as u64;
        lo..=hi
    })
}

/// A size and up to 64 positions inside it (the ends always included).
fn size_and_positions() -> impl Strategy<Value = (u64, Vec<u64>)> {
    any_size().prop_flat_map(|n| {
        proptest::collection::vec(0..n, 1..64).prop_map(move |mut v| {
            v.extend([0, n - 1, n / 2]);
            (n, v)
        })
    })
}

/// Chunk layouts, small to absurd (a window or chunk wider than the data).
fn chunked_kind() -> impl Strategy<Value = Kind> {
    (
        prop_oneof![1u64..=8, 9u64..=5000, Just(1u64 << 40), 1..=MAX_SAMPLES],
        prop_oneof![1u64..=64, Just(1u64 << 40), 1..=MAX_SAMPLES],
    )
        .prop_map(|(chunk_size, window)| Kind::Chunked {
            chunk_size,
            preload_nchunks: window,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn cipher_inverse_undoes_it(
        (n, positions) in size_and_positions(),
        key in any::<[u64; 2]>(),
    ) {
        let c = Cipher::new(n, key);
        for &p in &positions {
            let id = c.apply(p);
            prop_assert!(id < n);
            prop_assert_eq!(c.invert(id), p);
            prop_assert_eq!(c.apply(c.invert(p)), p);
        }
    }

    #[test]
    fn cipher_order_paths_agree(
        (n, positions) in size_and_positions(),
        seed in any::<u64>(),
        epoch in any::<u64>(),
    ) {
        let order = Order::new(n, seed, epoch, Kind::Cipher).unwrap();
        let cipher = Cipher::new(n, derive(seed, epoch, Domain { kind: "cipher", label: "order" }, 0));
        let mut batch: Vec<i64> = positions.iter().map(|&p| p as i64).collect();
        order.map_slice(&mut batch);
        for (&p, &id) in positions.iter().zip(&batch) {
            prop_assert_eq!(order.get(p), Ok(id as u64));
            prop_assert_eq!(cipher.invert(id as u64), p);
        }
    }

    #[test]
    fn chunked_ids_are_in_range_and_distinct(
        (n, mut positions) in size_and_positions(),
        kind in chunked_kind(),
        seed in any::<u64>(),
    ) {
        positions.sort_unstable();
        positions.dedup();
        let order = Order::new(n, seed, 1, kind).unwrap();
        let mut ids: Vec<i64> = positions.iter().map(|&p| p as i64).collect();
        order.map_slice(&mut ids);
        for (&p, &id) in positions.iter().zip(&ids) {
            prop_assert!(id >= 0 && (id as u64) < n);
            prop_assert_eq!(order.get(p), Ok(id as u64));
        }
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), positions.len());
    }

    #[test]
    fn ranges_match_single_positions(
        n in any_size(),
        start_frac in 0.0f64..1.0,
        step in prop_oneof![1i64..=3, -3i64..=-1, Just(1 << 40), Just(-(1 << 40))],
        count in 1u64..200,
        kind in prop_oneof![Just(Kind::Cipher), Just(Kind::Identity), chunked_kind()],
    ) {
        let order = Order::new(n, 3, 4, kind).unwrap();
        let start = ((n - 1) as f64 * start_frac) as u64;
        let last = start as i128 + i128::from(step) * (count as i128 - 1);
        let result = order.range(start, step, count);
        if last < 0 || last >= n as i128 {
            prop_assert!(result.is_err());
        } else {
            let ids = result.unwrap();
            for (i, &id) in ids.iter().enumerate() {
                let p = (start as i128 + i128::from(step) * i as i128) as u64;
                prop_assert_eq!(order.get(p), Ok(id as u64));
            }
        }
    }
}

#[test]
fn positions_out_of_range_are_errors() {
    for n in [0, 1, 1000, MAX_SAMPLES] {
        let order = Order::new(n, 0, 0, Kind::Cipher).unwrap();
        assert!(order.get(n).is_err());
        assert!(order.take(&[-1]).is_err());
        assert!(order.take(&[n as i64]).is_err());
        assert!(order.range(0, 1, n.saturating_add(1)).is_err());
        // A range may not start past the end, even going down into range.
        assert!(order.range(n, -1, 1).is_err());
        assert!(order.range(n, -1, 2).is_err());
    }
    assert!(Order::new(MAX_SAMPLES + 1, 0, 0, Kind::Cipher).is_err());
}
