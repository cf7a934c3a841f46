//! Splitting `n` positions over `world_size` ranks without padding.

use crate::error::{Error, Result};

/// How positions are dealt to ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitMode {
    /// Rank r gets positions r, r + W, r + 2W, ...
    Strided,
    /// Rank r gets one contiguous block; the first `n % W` ranks get one more.
    Contiguous,
}

impl SplitMode {
    /// Parses "strided" or "contiguous".
    pub fn parse(name: &str) -> Result<SplitMode> {
        match name {
            "strided" => Ok(SplitMode::Strided),
            "contiguous" => Ok(SplitMode::Contiguous),
            other => Err(Error::Value(format!(
                "mode must be 'strided' or 'contiguous', got {other:?}"
            ))),
        }
    }
}

/// Checks a (rank, world_size) pair with torch's wording.
pub fn check_rank(rank: u64, world_size: u64) -> Result<()> {
    if world_size == 0 {
        return Err(Error::Value("world_size must be >= 1, got 0".into()));
    }
    if rank >= world_size {
        return Err(Error::Value(format!(
            "Invalid rank {rank}, rank should be in the interval [0, {}]",
            world_size - 1
        )));
    }
    Ok(())
}

/// One rank's positions as `(start, stop, step)`: the positions are
/// `start, start + step, ...` below `stop`.
pub fn split_range(n: u64, world_size: u64, rank: u64, mode: SplitMode) -> Result<(u64, u64, u64)> {
    check_rank(rank, world_size)?;
    Ok(match mode {
        SplitMode::Strided => (rank.min(n), n, world_size),
        SplitMode::Contiguous => {
            let (base, extra) = (n / world_size, n % world_size);
            let start = rank * base + rank.min(extra);
            let len = base + u64::from(rank < extra);
            (start, start + len, 1)
        }
    })
}

/// The number of positions in a `(start, stop, step)` range.
pub fn range_len(start: u64, stop: u64, step: u64) -> u64 {
    if stop <= start {
        0
    } else {
        (stop - start).div_ceil(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_position_once() {
        for n in 0..40u64 {
            for w in 1..9u64 {
                for mode in [SplitMode::Strided, SplitMode::Contiguous] {
                    let mut all = vec![];
                    let mut lens = vec![];
                    for r in 0..w {
                        let (a, b, s) = split_range(n, w, r, mode).unwrap();
                        let v: Vec<u64> = (a..b).step_by(s as usize).collect();
                        assert_eq!(v.len() as u64, range_len(a, b, s));
                        lens.push(v.len());
                        all.extend(v);
                    }
                    all.sort_unstable();
                    assert_eq!(all, (0..n).collect::<Vec<_>>());
                    assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1);
                }
            }
        }
    }

    #[test]
    fn bad_ranks() {
        assert!(split_range(10, 0, 0, SplitMode::Strided).is_err());
        assert!(split_range(10, 2, 2, SplitMode::Strided).is_err());
    }
}
