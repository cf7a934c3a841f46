//! Times numpy's legacy shuffle as reimplemented, and the generator alone:
//! `cargo run --release -p epochplan-compat --example shuffle_speed -- N`.

use epochplan_compat::megatron::random_state::{Mt19937, RandomState};
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(10_000_000, |a| a.parse().expect("N is an integer"));
    let mut items: Vec<i32> = (0..n as i32).collect();
    let t = Instant::now();
    RandomState::new(1234).shuffle(&mut items);
    let shuffle = t.elapsed().as_secs_f64();
    let mut mt = Mt19937::new(1234);
    let t = Instant::now();
    let mut acc = 0u32;
    for _ in 0..n {
        acc ^= mt.next_u32();
    }
    let draws = t.elapsed().as_secs_f64();
    println!(
        "n={n}: shuffle {:.2} ns/item, generator {:.2} ns/draw ({acc})",
        shuffle * 1e9 / n as f64,
        draws * 1e9 / n as f64
    );
}
