//! Times the candidate walk of numpy's shuffle, as `py1s` and `py1e` take
//! the epoch generator past their pieces:
//! `cargo run --release --example walk_speed -- [pieces] [piece_len]`.
use epochplan_compat::streaming::numpy_rng::Generator;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let pieces: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let len: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let mut partners = vec![0u32; len - 1];
    for round in 0..5 {
        let mut g = Generator::new(round);
        let t = Instant::now();
        for _ in 0..pieces {
            g.skip_shuffle(len);
        }
        let skip = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for _ in 0..pieces {
            g.shuffle_partners(&mut partners);
        }
        let record = t.elapsed().as_secs_f64();
        let items = (pieces * len) as f64;
        println!(
            "round {round}: skip {:.3} s ({:.2} ns an item), record {:.3} s ({:.2} ns an item), check {}",
            skip,
            skip * 1e9 / items,
            record,
            record * 1e9 / items,
            partners[len / 2]
        );
    }
}
