//! Times the cipher over one epoch: `cargo run --release --example cipher_speed -- [N] [threads]`.
use epochplan_core::{parallel, Kind, Order};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000_000);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    parallel::set_num_threads(threads);
    let order = Order::new(n, 0, 0, Kind::Cipher).expect("valid size");
    let mut buf: Vec<i64> = (0..n as i64).collect();
    for round in 0..3 {
        for (i, x) in buf.iter_mut().enumerate() {
            *x = i as i64;
        }
        let t = Instant::now();
        order.map_in_place(&mut buf);
        let dt = t.elapsed().as_secs_f64();
        println!(
            "round {round}: {:.2} ns per element on {threads} thread(s)",
            dt * 1e9 / n as f64
        );
    }
}
