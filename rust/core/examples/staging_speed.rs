//! Times staging a token plan's lengths in its epoch's order (the pass in
//! id order, then every batch read back), as the plan-file writer does for
//! a memory-mapped lengths file.
//!
//!     cargo run --release -p epochplan-core --example staging_speed -- [N] [DIR]

use epochplan_core::plan::Plan;
use epochplan_core::planfile::{StagedArrays, TokenArraysRef, TOKEN_BATCH_SAMPLES};
use epochplan_core::{Kind, Order};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).map_or(Ok(100_000_000), |s| s.parse())?;
    let dir = std::path::PathBuf::from(args.get(2).map_or("/var/tmp", String::as_str));
    let lengths: Vec<u32> = (0..n)
        .map(|i| (i.wrapping_mul(2_654_435_761) % 4000 + 1) as u32)
        .collect();
    let plan = Plan::new(Order::new(n, 0, 0, Kind::Cipher)?, 1024, false, 0)?;
    let arrays = TokenArraysRef {
        lengths: &lengths.as_slice(),
        loss_tokens: None,
    };
    let t = Instant::now();
    let staged = StagedArrays::new(&plan, arrays, &dir)?.ok_or("not staged")?;
    let routed = t.elapsed();
    let t = Instant::now();
    let mut reader = staged.reader();
    let steps = plan.layout().num_steps();
    let per_batch = TOKEN_BATCH_SAMPLES / 1024;
    let mut total = 0u64;
    let mut start = 0;
    while start < steps {
        let stop = steps.min(start + per_batch);
        let (batch, _) = reader.steps(&plan, start, stop)?;
        let mut out = Vec::new();
        use epochplan_core::dealing::SampleLengths;
        let first = start * 1024;
        let ids = vec![0i64; ((stop * 1024).min(n) - first) as usize];
        batch.read_at("lengths", first, &ids, &mut out)?;
        total += out.iter().sum::<u64>();
        start = stop;
    }
    println!(
        "N = {n}: routed in {:.3} s, read back in {:.3} s (checksum {total})",
        routed.as_secs_f64(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
