//! Dealing: which of a step's positions each rank gets.
//!
//! A step is a [`Span`] of positions `[start, start + len)` of the epoch's
//! order; which span is a step does not depend on the world size `W` (that
//! is what makes plans elastic). A dealing gives every position of the span
//! to exactly one of the `W` ranks, in an order inside the rank's share, and
//! names the position whose sample fills a rank that gets none.
//!
//! One dealing exists today, [`Dealing::Strided`]: rank `r` gets the span's
//! positions `r, r + W, ...`, so shares differ by at most one sample. A
//! [`crate::layout::Layout`] asks the dealing only for a share's size, its
//! positions and its filler, so another dealing is one more variant here:
//! the token-balanced one (DESIGN.md section 8) is a deterministic function
//! of the step's samples, their lengths, `W` and a token cap, so its variant
//! holds the lengths and the cap and reads the costs of the span's samples;
//! nothing of the strided arithmetic is copied for it. Index spaces
//! (DESIGN.md section 7) live on the other side of the order: a dealing
//! works on positions, the order maps them to ids, a space maps those ids to
//! the store's.

/// The positions `[start, start + len)` of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The step's first position.
    pub start: u64,
    /// Real samples in the step, over all ranks (`n_t`).
    pub len: u64,
}

/// How a step's positions are dealt to ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dealing {
    /// Rank `r` of `W` gets the step's positions `r, r + W, r + 2W, ...`.
    #[default]
    Strided,
}

impl Dealing {
    /// Whether a rank's share of a step depends on the step's length alone
    /// (not on which samples it holds): sums over steps are then O(1).
    pub fn by_length_only(&self) -> bool {
        match self {
            Dealing::Strided => true,
        }
    }

    /// Real samples of rank `rank` of `world_size` in the step `span`.
    pub fn count(&self, span: Span, rank: u64, world_size: u64) -> u64 {
        match self {
            Dealing::Strided => strided_count(span.len, rank, world_size),
        }
    }

    /// Writes the positions of rank `rank`'s share of `span`, from its
    /// `skip`-th on, into `out` (at most `count - skip` of them).
    pub fn fill_positions(
        &self,
        span: Span,
        rank: u64,
        world_size: u64,
        skip: u64,
        out: &mut [i64],
    ) {
        match self {
            Dealing::Strided => {
                let base = (span.start + rank + skip * world_size) as i64;
                for (k, slot) in out.iter_mut().enumerate() {
                    *slot = base + k as i64 * world_size as i64;
                }
            }
        }
    }

    /// The position whose sample (with weight 0) fills the micro-batches of
    /// a rank whose share of `span` is empty: the span's position
    /// `rank mod n_t`. `span` must not be empty.
    pub fn filler_position(&self, span: Span, rank: u64) -> u64 {
        match self {
            Dealing::Strided => span.start + rank % span.len,
        }
    }
}

/// Real samples of rank `rank` in a strided step of `step_len` samples.
pub fn strided_count(step_len: u64, rank: u64, world_size: u64) -> u64 {
    if rank < step_len {
        (step_len - rank).div_ceil(world_size)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_shares_partition_the_span() {
        for len in [0u64, 1, 5, 16, 17] {
            for w in 1..7 {
                let span = Span { start: 100, len };
                let mut all = Vec::new();
                for r in 0..w {
                    let count = Dealing::Strided.count(span, r, w);
                    let mut out = vec![0; count as usize];
                    Dealing::Strided.fill_positions(span, r, w, 0, &mut out);
                    all.extend(out);
                }
                all.sort_unstable();
                assert_eq!(all, (100..100 + len as i64).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn skipping_starts_inside_the_share() {
        let span = Span { start: 10, len: 9 };
        let mut out = [0; 2];
        Dealing::Strided.fill_positions(span, 1, 2, 2, &mut out);
        assert_eq!(out, [15, 17]);
        assert_eq!(Dealing::Strided.filler_position(span, 12), 13);
    }
}
