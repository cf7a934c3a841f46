//! Tests of the partition: small cases worked by hand, the errors, exact
//! coverage, and the fast paths (parts, windows, runs, threads) against the
//! element-by-element arithmetic.

use super::*;

fn args(n: u64, c: u64, p: u64, r: u64, w: u64, b: u64, d: u64) -> PartitionArgs {
    PartitionArgs {
        num_samples: n,
        num_canonical_nodes: c,
        num_physical_nodes: p,
        ranks_per_node: r,
        workers_per_rank: w,
        batch_size: b,
        drop_first: d,
        initial_physical_nodes: None,
    }
}

#[test]
fn one_node_one_rank_is_the_identity_in_batches() {
    let part = Partition::new(Algo::Orig, &args(10, 1, 1, 1, 1, 4, 0)).unwrap();
    assert_eq!(part.shape(), [1, 1, 1, 3, 4]);
    assert_eq!(
        part.to_vec().unwrap(),
        vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, -1, -1]
    );
}

#[test]
fn nodes_and_ranks_interleave() {
    // 8 samples, 2 canonical = 2 physical nodes, 2 ranks, 1 worker,
    // batch 2: node rows [0..4) and [4..8), dealt column by column.
    let part = Partition::new(Algo::Orig, &args(8, 2, 2, 2, 1, 2, 0)).unwrap();
    assert_eq!(part.shape(), [2, 2, 1, 1, 2]);
    assert_eq!(part.to_vec().unwrap(), vec![0, 2, 1, 3, 4, 6, 5, 7]);
}

#[test]
fn short_rows_repeat_their_last_sample() {
    // 5 samples over 2 canonical nodes: rows [0, 1, 1] and [2, 3, 4].
    let part = Partition::new(Algo::Orig, &args(5, 2, 1, 1, 1, 6, 0)).unwrap();
    assert_eq!(part.to_vec().unwrap(), vec![0, 2, 1, 3, 1, 4]);
}

#[test]
fn errors_name_the_problem() {
    let e = Partition::new(Algo::Orig, &args(10, 3, 2, 1, 1, 1, 0)).unwrap_err();
    assert!(
        matches!(e, Error::Value(m) if m.starts_with("Either canonical or physical nodes must be evenly divisible") && m.contains("num_canonical_nodes (3)"))
    );
    let e = Partition::new(Algo::Orig, &args(10, 1, 1, 1, 1, 1, 12)).unwrap_err();
    assert!(
        matches!(e, Error::Value(m) if m.starts_with("Resuming further into the dataset (12) than it has samples (10)") && m.contains("drop_first"))
    );
    // Streaming's checks come before the refusal of a zero count it
    // would divide by later.
    let e = Partition::new(Algo::Orig, &args(10, 3, 2, 1, 0, 0, 0)).unwrap_err();
    assert!(matches!(e, Error::Value(m) if m.starts_with("Either canonical")));
    let e = Partition::new(Algo::Orig, &args(10, 0, 1, 1, 1, 1, 12)).unwrap_err();
    assert!(matches!(e, Error::Value(m) if m.starts_with("Resuming further")));
    for (zero, name) in [
        (1, "num_canonical_nodes"),
        (0, "num_samples"),
        (4, "workers_per_rank"),
        (5, "batch_size"),
    ] {
        let mut counts = [10, 2, 2, 1, 1, 1];
        counts[zero] = 0;
        let [n, c, p, r, w, b] = counts;
        let e = Partition::new(Algo::Orig, &args(n, c, p, r, w, b, 0)).unwrap_err();
        assert!(
            matches!(&e, Error::Value(m) if m.starts_with(name)),
            "{e:?}"
        );
    }
    let e = Partition::new(Algo::Orig, &args(5, 1, 4, 1, 1, 1, 0)).unwrap_err();
    assert!(matches!(e, Error::Value(m) if m.contains("too few")));
    let e = Partition::new(Algo::Orig, &args(u64::MAX / 2, 1, 1, 1, 1, 2, 0)).unwrap_err();
    assert!(matches!(e, Error::Overflow(_)));
}

#[test]
fn everything_dropped_with_huge_workers_is_empty() {
    // No batches: the size bounds no stride (a debug build checks the
    // arithmetic for overflow).
    let big = 1u64 << 62;
    let p = Partition::new(Algo::Orig, &args(10, 1, 1, 1, big, big, 10)).unwrap();
    assert_eq!(p.len(), 0);
    assert_eq!(p.to_vec().unwrap(), Vec::<i64>::new());
}

#[test]
fn covers_every_sample_once_when_nothing_is_padded() {
    for (n, c, p, r, w, b) in [
        (96, 4, 2, 3, 2, 4),
        (96, 2, 4, 2, 3, 2),
        (96, 8, 8, 1, 1, 3),
    ] {
        let part = Partition::new(Algo::Orig, &args(n, c, p, r, w, b, 0)).unwrap();
        let mut ids = part.to_vec().unwrap();
        ids.retain(|&x| x >= 0);
        ids.sort_unstable();
        assert_eq!(
            ids,
            (0..n as i64).collect::<Vec<_>>(),
            "{n} {c} {p} {r} {w} {b}"
        );
    }
}

#[test]
fn parts_and_windows_match_the_whole() {
    let cases = [
        (Algo::Orig, args(1000, 4, 2, 3, 2, 5, 6), None),
        (Algo::Orig, args(37, 8, 4, 3, 5, 1, 3), None),
        (Algo::Orig, args(3, 8, 4, 3, 5, 2, 0), None),
        (Algo::Relaxed, args(1000, 4, 3, 2, 2, 2, 12), Some(2)),
        (Algo::Relaxed, args(999, 8, 3, 2, 3, 40, 0), Some(4)),
    ];
    for (algo, mut a, initial) in cases {
        a.initial_physical_nodes = initial;
        let part = Partition::new(algo, &a).unwrap();
        let full = part.to_vec().unwrap();
        let [nodes, ranks, ..] = part.shape();
        let len = part.part_len() as usize;
        for node in 0..nodes {
            for rank in 0..ranks {
                let at = part.part_offset(node, rank).unwrap() as usize;
                assert_eq!(part.part(node, rank).unwrap(), full[at..at + len]);
            }
        }
        for (lo, hi) in [(0, 1), (3, 17), (5, full.len())] {
            let hi = hi.min(full.len());
            let mut window = vec![0; hi - lo];
            part.fill(lo as u64, &mut window);
            assert_eq!(window, full[lo..hi], "{a:?}");
        }
        assert!(matches!(part.part(nodes, 0), Err(Error::Index(_))));
        assert!(matches!(part.part(0, ranks), Err(Error::Index(_))));
    }
}

#[test]
fn runs_match_elements_computed_one_by_one() {
    // Windows of one slot take no run shortcut (periods, progressions,
    // batch walks); whole fills take all of them.
    let cases = [
        args(5000, 12, 4, 1, 2, 33, 0),   // period 3
        args(10007, 512, 8, 8, 8, 32, 8), // period 8
        args(999, 16, 4, 2, 1, 40, 4),    // period 2, short rows
        args(4099, 16, 4, 8, 8, 64, 0),   // one row per run
        args(777, 3, 6, 5, 3, 17, 12),    // padded rows
        args(50, 4, 4, 8, 2, 20, 0),      // added columns wrap
        args(3000, 7, 7, 3, 4, 2, 21),    // short batches, column-wise
    ];
    for a in cases {
        let part = Partition::new(Algo::Orig, &a).unwrap();
        let full = part.to_vec().unwrap();
        for (k, &want) in full.iter().enumerate() {
            let mut one = [0];
            part.fill(k as u64, &mut one);
            assert_eq!(one[0], want, "{a:?} at {k}");
        }
    }
}

#[test]
fn relaxed_keeps_the_global_order() {
    // Resuming 2 nodes x batch 3 on 3 nodes x batch 2: the global batches
    // in training order are the same.
    let mut a = args(120, 4, 2, 1, 1, 3, 0);
    let before = Partition::new(Algo::Orig, &a).unwrap().to_vec().unwrap();
    a.num_physical_nodes = 3;
    a.batch_size = 2;
    a.initial_physical_nodes = Some(2);
    let after = Partition::new(Algo::Relaxed, &a).unwrap();
    let [_, _, _, steps, _] = after.shape();
    let after = after.to_vec().unwrap();
    // One worker, one rank: (node, step, slot).
    for t in 0..steps as usize {
        let old: Vec<i64> = (0..2)
            .flat_map(|p| before[(p * 20 + t) * 3..][..3].to_vec())
            .collect();
        let new: Vec<i64> = (0..3)
            .flat_map(|p| after[(p * 20 + t) * 2..][..2].to_vec())
            .collect();
        assert_eq!(old, new);
    }
}

#[test]
fn any_thread_count_gives_the_same_output() {
    let _threads = crate::test_threads_lock();
    let part = Partition::new(Algo::Orig, &args(1 << 20, 8, 4, 2, 3, 7, 40)).unwrap();
    parallel::set_num_threads(1);
    let one = part.to_vec().unwrap();
    parallel::set_num_threads(3);
    let three = part.to_vec().unwrap();
    parallel::set_num_threads(0);
    assert_eq!(one, three);
}
