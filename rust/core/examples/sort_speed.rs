//! Profiling helper: times the py1e sort on py1e-like keys.
use epochplan_core::streaming::numpy_rng::Generator;
use epochplan_core::streaming::shuffle::SortScratch;
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_562_500);
    let c: f64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(126_000.0);
    let mut g = Generator::new(1);
    let nf = n as f64;
    let keys: Vec<f64> = (0..n)
        .map(|j| {
            let j = j as f64;
            let lo = (-c).max(-j);
            let hi = c.min(nf - 1.0 - j);
            j + g.uniform(lo, hi)
        })
        .collect();
    let mut s = SortScratch::default();
    for _ in 0..4 {
        let mut v: Vec<i64> = (0..n as i64).collect();
        let t = std::time::Instant::now();
        s.sort(&keys, &mut v);
        let d = t.elapsed();
        println!(
            "{:?} {:.1} ns/item {}",
            d,
            d.as_secs_f64() * 1e9 / n as f64,
            v[0]
        );
    }
}
