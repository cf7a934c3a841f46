//! Times the pieces of Streaming's shuffles (minimum of several runs):
//! `cargo run --release --example streaming_shuffle_speed -- [algo] [shards]
//! [shard_size] [ncn]`.
use epochplan_core::streaming::numpy_rng::Generator;
use epochplan_core::streaming::shuffle::{get_shuffle, Algo};
use std::time::{Duration, Instant};

fn best(runs: usize, mut f: impl FnMut() -> u64) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let algo = Algo::parse(args.get(1).map_or("py1s", |s| s.as_str())).expect("algo");
    let shards: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1_000);
    let size: i64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let ncn: u64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(64);
    let sizes = vec![size; shards];
    let n = shards as u64 * size as u64;
    let per = |d: Duration| d.as_secs_f64() * 1e9 / n as f64;
    let mut g = Generator::new(1);
    let d = best(5, || {
        (0..n).fold(0u64, |a, _| a ^ g.bit_generator().next_u64())
    });
    println!("u64 draws        {:6.2} ns/item", per(d));
    let d = best(5, || {
        (0..n).fold(0u64, |a, _| a ^ u64::from(g.bit_generator().next_u32()))
    });
    println!("u32 draws        {:6.2} ns/item", per(d));
    let mut v: Vec<i64> = (0..n as i64).collect();
    let d = best(5, || {
        for c in v.chunks_mut(size as usize) {
            g.shuffle(c);
        }
        v[0] as u64
    });
    println!("span shuffles    {:6.2} ns/item", per(d));
    let d = best(5, || {
        for _ in 0..shards {
            g.skip_shuffle(size as usize);
        }
        0
    });
    println!("span skips       {:6.2} ns/item", per(d));
    let d = best(3, || {
        let out = get_shuffle(algo, &sizes, ncn, 17, 1, 1 << 18).expect("shuffle");
        out.ids[0] as u64
    });
    println!(
        "{} total       {:6.2} ns/item ({:?})",
        algo.name(),
        per(d),
        d
    );
}
