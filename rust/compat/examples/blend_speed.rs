//! Times the blending indices against Megatron's loop as written:
//! `cargo run --release -p epochplan-compat --example blend_speed -- K SIZE`.

use epochplan_compat::megatron::blend;
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("K and SIZE are integers"))
        .collect();
    let (k, size) = (
        args.first().copied().unwrap_or(128),
        args.get(1).copied().unwrap_or(10_000_000),
    );
    // Weights from a fixed linear congruential sequence, normalized.
    let mut x = 12345u64;
    let raw: Vec<f64> = (0..k)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect();
    let total: f64 = raw.iter().sum();
    let w: Vec<f64> = raw.iter().map(|r| r / total).collect();
    let mut index = vec![0i16; size];
    let mut sample = vec![0i64; size];
    let t = Instant::now();
    blend::build_blending_indices(&mut index, &mut sample, &w, k as i64, size as i64).unwrap();
    let fast = t.elapsed().as_secs_f64();
    if std::env::var_os("FAST_ONLY").is_some() {
        println!("{:.1} ns/sample", fast * 1e9 / size as f64);
        return;
    }
    let t = Instant::now();
    let (ri, rs) = blend::reference_blending_indices(&w, size);
    let slow = t.elapsed().as_secs_f64();
    assert!(ri == index && rs == sample, "outputs differ");
    println!(
        "K={k} size={size}: {:.1} ns/sample, the loop {:.1} ns/sample ({:.1}x)",
        fast * 1e9 / size as f64,
        slow * 1e9 / size as f64,
        slow / fast
    );
}
