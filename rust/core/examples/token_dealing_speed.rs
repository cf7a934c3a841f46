//! Times one step's token dealing (balance, shares, micro-batches) on
//! lognormal lengths: `cargo run --release --example token_dealing_speed
//! [-- first_fit]` (the packing; "sorted" by default).
//!
//! Lengths: `exp(ln 600 + Z)` tokens, `Z` standard normal (Box-Muller over
//! SplitMix64), clamped to `[1, 32768]`; micro-batches capped at 32768 tokens.
use epochplan_core::tokens::{deal_step, Caps, Cost, Packing, StepDealing};
use std::time::Instant;

/// SplitMix64 (Steele, Lea and Flood, 2014).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

const MAX_TOKENS: u64 = 32768;

fn lognormal_step(rng: &mut SplitMix64, g: usize) -> Vec<u64> {
    (0..g)
        .map(|_| ((600f64.ln() + rng.normal()).exp().round() as u64).clamp(1, MAX_TOKENS))
        .collect()
}

fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "sorted".into());
    let packing = Packing::from_name(&name).expect("the packing: sorted or first_fit");
    let caps = Caps::new(None, Some(MAX_TOKENS))
        .expect("valid caps")
        .with_packing(packing);
    let mut rng = SplitMix64(2024);
    println!("G      W    us/step   max/mean load   M");
    for g in [256usize, 1024, 8192, 65536] {
        let steps: Vec<Vec<u64>> = (0..16).map(|_| lognormal_step(&mut rng, g)).collect();
        for w in [8u64, 64, 512] {
            // The best of several rounds over 16 steps: the machine's other
            // work only ever adds time.
            let mut best = f64::INFINITY;
            let start = Instant::now();
            while start.elapsed().as_secs_f64() < 0.5 {
                let round = Instant::now();
                for step in &steps {
                    std::hint::black_box(
                        deal_step(step, Cost::Tokens, w, caps).expect("valid step"),
                    );
                }
                best = best.min(round.elapsed().as_secs_f64() / steps.len() as f64);
            }
            let us = best * 1e6;
            let step = &steps[0];
            let dealing: StepDealing = deal_step(step, Cost::Tokens, w, caps).expect("valid step");
            let loads: Vec<u64> = (0..w)
                .map(|r| {
                    let share = dealing.share(r).expect("rank below W");
                    share.iter().map(|&i| step[i]).sum()
                })
                .collect();
            let mean = loads.iter().sum::<u64>() as f64 / w as f64;
            let max = loads.iter().copied().max().unwrap_or(0) as f64;
            println!(
                "{g:<6} {w:<4} {us:>8.1}   {:>13.4}   {}",
                max / mean,
                dealing.num_micro_batches()
            );
        }
    }
}
