//! Streams one rank's share of a plan through the plan-file writer, to show
//! its speed and that its memory does not grow with N.
//!
//!     cargo run --release --example planfile_stream -- N W [FILE]
//!
//! Without FILE the bytes are checksummed and discarded (nothing on disk), so
//! N = 10^10 runs on any machine. Prints ids/s and the peak RSS.

use epochplan_core::plan::Plan;
use epochplan_core::planfile::{stream_ranks, FileSink, NullSink};
use epochplan_core::{Kind, Order};
use std::time::Instant;

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).map_or(Ok(1_000_000_000), |s| s.parse())?;
    let w: u64 = args.get(2).map_or(Ok(8), |s| s.parse())?;
    let plan = Plan::new(Order::new(n, 0, 0, Kind::Cipher)?, 4096, false, 0)?;
    let t = Instant::now();
    let infos = match args.get(3) {
        Some(path) => stream_ranks(
            &plan,
            w,
            &[0],
            FileSink::new(vec![path.into()], false),
            &mut |_| true,
        )?,
        None => stream_ranks(&plan, w, &[0], NullSink, &mut |_| true)?,
    };
    let secs = t.elapsed().as_secs_f64();
    let ids = infos[0].count;
    println!(
        "N={n} W={w}: rank 0, {ids} ids in {secs:.2} s ({:.1} M ids/s), blake3 {}, peak RSS {} MB",
        ids as f64 / secs / 1e6,
        &infos[0].checksum[..16],
        peak_rss_kb() / 1024
    );
    Ok(())
}
