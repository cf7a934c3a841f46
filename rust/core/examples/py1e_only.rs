//! Profiling helper: runs one shuffle several times.
use epochplan_core::streaming::shuffle::{get_shuffle, Algo};
fn main() {
    let algo =
        Algo::parse(&std::env::args().nth(1).unwrap_or_else(|| "py1e".into())).expect("algo");
    let shards: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let sizes = vec![10_000i64; shards];
    for _ in 0..1 {
        let t = std::time::Instant::now();
        let out = get_shuffle(algo, &sizes, 64, 17, 1, 1 << 18).expect("shuffle");
        println!("{:?} {}", t.elapsed(), out.ids[0]);
    }
}
