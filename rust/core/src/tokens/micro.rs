//! Micro-batches of a step: each rank's share packed under the caps, every
//! rank brought to the same count by splitting, then by fillers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::packing::Packing;
use super::shares::StepShares;
use super::Cost;
use crate::buffer::vec_with_capacity;
use crate::error::{Error, Result};
use crate::split::check_rank;

/// The limits of one micro-batch: at most `micro_batch_size` samples and at
/// most `max_tokens` tokens (the sum of its samples' lengths, as a packed
/// sequence holds them). At least one is set, and neither is 0. The
/// [`Packing`] says how a share is cut under them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Caps {
    micro_batch_size: Option<u64>,
    max_tokens: Option<u64>,
    packing: Packing,
}

impl Caps {
    /// Checked caps: either may be `None`, not both; neither may be 0.
    pub fn new(micro_batch_size: Option<u64>, max_tokens: Option<u64>) -> Result<Caps> {
        if micro_batch_size.is_none() && max_tokens.is_none() {
            return Err(Error::Value(
                "micro_batch_size and max_tokens cannot both be None: give at least one \
                 (each >= 1)"
                    .into(),
            ));
        }
        if micro_batch_size == Some(0) {
            return Err(Error::Value("micro_batch_size must be >= 1, got 0".into()));
        }
        if max_tokens == Some(0) {
            return Err(Error::Value("max_tokens must be >= 1, got 0".into()));
        }
        Ok(Caps {
            micro_batch_size,
            max_tokens,
            packing: Packing::Sorted,
        })
    }

    /// The same caps, shares cut by `packing`.
    pub fn with_packing(self, packing: Packing) -> Caps {
        Caps { packing, ..self }
    }

    /// How a share is cut under the caps.
    pub fn packing(&self) -> Packing {
        self.packing
    }

    /// The most samples in a micro-batch, if capped.
    pub fn micro_batch_size(&self) -> Option<u64> {
        self.micro_batch_size
    }

    /// The most tokens in a micro-batch, if capped.
    pub fn max_tokens(&self) -> Option<u64> {
        self.max_tokens
    }

    /// Whether a micro-batch of `count` samples and `tokens` tokens fits.
    pub fn allows(&self, count: u64, tokens: u128) -> bool {
        self.micro_batch_size.is_none_or(|b| count <= b)
            && self.max_tokens.is_none_or(|m| tokens <= u128::from(m))
    }

    /// The first sample longer than `max_tokens`, which no micro-batch can
    /// hold (for a caller that names it by its id).
    pub fn first_over(&self, lengths: &[u64]) -> Option<usize> {
        let cap = self.max_tokens?;
        lengths.iter().position(|&l| l > cap)
    }

    /// An error naming the first sample longer than `max_tokens`, if any.
    pub fn check_lengths(&self, lengths: &[u64]) -> Result<()> {
        match (self.first_over(lengths), self.max_tokens) {
            (Some(i), Some(cap)) => Err(Error::Value(format!(
                "lengths[{i}] must be <= max_tokens ({cap}), got {}: a sample longer than \
                 the token cap fits in no micro-batch",
                lengths[i]
            ))),
            _ => Ok(()),
        }
    }
}

/// One micro-batch of a rank: indices into the step's samples. A filler
/// micro-batch holds one zero-weight copy of the step's shortest sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MicroBatchRef<'a> {
    /// The samples (indices into the step), in dealing order.
    pub samples: &'a [usize],
    /// Whether this is a filler (its one sample weighs 0).
    pub filler: bool,
}

impl MicroBatchRef<'_> {
    /// The loss weight of each of its samples when a real sample of the
    /// step weighs `step_weight`.
    pub fn weight(&self, step_weight: f64) -> f64 {
        if self.filler {
            0.0
        } else {
            step_weight
        }
    }
}

/// The dealing of one step: every rank's share and its micro-batches, the
/// same number `M` on every rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepDealing {
    shares: StepShares,
    caps: Caps,
    micro_batches: usize,
    filler: usize,
    /// The end (in the flat dealing order) of each real micro-batch of
    /// each of the first `min(W, n)` ranks, rank by rank.
    ends: Vec<usize>,
    /// Where each of those ranks' ends start in `ends` (`min(W, n) + 1`).
    end_starts: Vec<usize>,
}

/// Deals a step whose samples have `lengths` tokens to `world_size` ranks,
/// balanced by `cost`, in micro-batches under `caps`. See the [parent
/// module](super) for the rules. O(n log n) for `n` samples, whatever `W`.
pub fn deal_step(lengths: &[u64], cost: Cost, world_size: u64, caps: Caps) -> Result<StepDealing> {
    if lengths.is_empty() {
        return Err(Error::Value(
            "lengths must hold at least one sample: a step is never empty".into(),
        ));
    }
    caps.check_lengths(lengths)?;
    let shares = StepShares::new(lengths, cost, world_size)?;
    StepDealing::new(shares, lengths, caps)
}

impl StepDealing {
    /// Cuts `shares` (of a step whose samples have `lengths` tokens) into
    /// micro-batches under `caps`.
    pub fn new(mut shares: StepShares, lengths: &[u64], caps: Caps) -> Result<StepDealing> {
        if shares.len() != lengths.len() || lengths.is_empty() {
            return Err(Error::Value(format!(
                "lengths must hold the step's {} samples (at least one), got {}",
                shares.len(),
                lengths.len()
            )));
        }
        caps.check_lengths(lengths)?;
        if caps.packing() == Packing::FirstFit {
            shares.pack_first_fit(lengths, caps)?;
        }
        let active = shares.active_ranks();
        let mut ends = vec_with_capacity(lengths.len(), "the step's micro-batches")?;
        let mut end_starts = vec_with_capacity(active + 1, "the step's micro-batches")?;
        end_starts.push(0);
        // Next-fit over each share (in dealing order) under the caps.
        for r in 0..active {
            let share = shares.share_unchecked(r as u64);
            next_fit(
                share.len(),
                |k| lengths[share[k]],
                caps,
                shares.start(r),
                &mut ends,
            );
            end_starts.push(ends.len());
        }
        let micro_batches = end_starts
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0)
            .max(1);
        // Ranks with fewer micro-batches split their own, largest first.
        let mut split_ends = vec_with_capacity(lengths.len(), "the step's micro-batches")?;
        let mut split_starts = vec_with_capacity(active + 1, "the step's micro-batches")?;
        split_starts.push(0);
        for r in 0..active {
            let share = shares.share_unchecked(r as u64);
            let packed = &ends[end_starts[r]..end_starts[r + 1]];
            let length = |k: usize| lengths[share[k]];
            let base = shares.start(r);
            reach(
                share.len(),
                length,
                base,
                packed,
                micro_batches,
                &mut split_ends,
            )?;
            split_starts.push(split_ends.len());
        }
        let filler = (0..lengths.len())
            .min_by_key(|&i| (lengths[i], i))
            .unwrap_or(0);
        Ok(StepDealing {
            shares,
            caps,
            micro_batches,
            filler,
            ends: split_ends,
            end_starts: split_starts,
        })
    }

    /// The ranks' shares, in dealing order.
    pub fn shares(&self) -> &StepShares {
        &self.shares
    }

    /// The caps the micro-batches respect.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Micro-batches of every rank in this step (`M`).
    pub fn num_micro_batches(&self) -> u64 {
        self.micro_batches as u64
    }

    /// The step's shortest sample (ties: the lowest position), the one a
    /// filler copies.
    pub fn filler(&self) -> usize {
        self.filler
    }

    /// Rank `rank`'s samples in dealing order: its real micro-batches
    /// flattened.
    pub fn share(&self, rank: u64) -> Result<&[usize]> {
        self.shares.share(rank)
    }

    /// Rank `rank`'s `M` micro-batches: its real ones in dealing order, then
    /// its fillers.
    pub fn micro_batches(&self, rank: u64) -> Result<MicroBatches<'_>> {
        check_rank(rank, self.shares.world_size())?;
        let share = self.shares.share_unchecked(rank);
        let (offset, ends) = match usize::try_from(rank) {
            Ok(r) if r < self.shares.active_ranks() => (
                self.shares.start(r),
                &self.ends[self.end_starts[r]..self.end_starts[r + 1]],
            ),
            _ => (0, &[][..]),
        };
        Ok(MicroBatches {
            dealing: self,
            share,
            offset,
            ends,
            next: 0,
        })
    }
}

/// Next-fit of a share of `count` samples (the `k`-th of `length(k)`
/// tokens, in dealing order) under `caps`: appends the end of each run, plus
/// `base`, to `out`. A sample over the token cap makes a run of its own.
fn next_fit(
    count: usize,
    length: impl Fn(usize) -> u64,
    caps: Caps,
    base: usize,
    out: &mut Vec<usize>,
) {
    let (mut samples, mut tokens) = (0u64, 0u128);
    for k in 0..count {
        let l = u128::from(length(k));
        if samples > 0 && !caps.allows(samples + 1, tokens + l) {
            out.push(base + k);
            (samples, tokens) = (0, 0);
        }
        samples += 1;
        tokens += l;
    }
    if samples > 0 {
        out.push(base + count);
    }
}

/// Brings a share of `count` samples, packed into the runs `packed` (ends
/// from `base`), to `min(micro_batches, count)` micro-batches by splitting
/// (see [`split`]); appends the ends to `out`. A share with as many runs or
/// more keeps them.
fn reach(
    count: usize,
    length: impl Fn(usize) -> u64,
    base: usize,
    packed: &[usize],
    micro_batches: usize,
    out: &mut Vec<usize>,
) -> Result<()> {
    let target = micro_batches.min(count);
    if packed.len() >= target {
        out.extend_from_slice(packed);
    } else if count == target {
        out.extend((1..=count).map(|k| base + k));
    } else {
        split(count, length, base, packed, target, out)?;
    }
    Ok(())
}

/// One rank's micro-batches of a step, cut from its own share alone: what
/// a reader of plan files computes from the lengths of its ids (in dealing
/// order) and the step's micro-batch count `M`, without the other ranks'
/// samples. The same cuts as [`StepDealing`] makes for that rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareCuts {
    /// The end of each real micro-batch in the share (the last is the
    /// share's length); the rank's other `M - ends.len()` micro-batches are
    /// fillers.
    pub ends: Vec<usize>,
    /// The runs of next-fit under the caps, before any split: the step's
    /// `M` is the largest of these over all ranks (at least 1).
    pub runs: usize,
}

/// Cuts a share whose samples have `lengths` tokens (in dealing order)
/// into micro-batches under `caps`, split towards `micro_batches` (`M`).
/// Lengths over the token cap are not refused here (each makes a run of
/// its own, so a checker finds it); a share with more runs than `M` keeps
/// them all (`ends.len() > M`), for the caller to refuse.
pub fn cut_share(lengths: &[u64], caps: Caps, micro_batches: u64) -> Result<ShareCuts> {
    let mut packed = vec_with_capacity(lengths.len(), "the share's micro-batches")?;
    next_fit(lengths.len(), |k| lengths[k], caps, 0, &mut packed);
    let runs = packed.len();
    let m = usize::try_from(micro_batches).unwrap_or(usize::MAX);
    let mut ends = vec_with_capacity(runs.max(m.min(lengths.len())), "the share's micro-batches")?;
    reach(lengths.len(), |k| lengths[k], 0, &packed, m, &mut ends)?;
    Ok(ShareCuts { ends, runs })
}

/// Splits the micro-batches `packed` (ends in the flat order, from `base`)
/// of a share of `count` samples (the `k`-th of `length(k)` tokens) until
/// there are `target` (more than `packed.len()` and fewer than `count`):
/// the one with the most samples first (ties: the most tokens, then the
/// earliest), into a first half of `ceil(k/2)` samples and a second of
/// `floor(k/2)`. Appends the ends to `out`.
fn split(
    count: usize,
    length: impl Fn(usize) -> u64,
    base: usize,
    packed: &[usize],
    target: usize,
    out: &mut Vec<usize>,
) -> Result<()> {
    let mut prefix = vec_with_capacity(count + 1, "the share's token sums")?;
    prefix.push(0u128);
    let mut sum = 0u128;
    for k in 0..count {
        sum += u128::from(length(k));
        prefix.push(sum);
    }
    let entry = |start: usize, end: usize| {
        (
            end - start,
            prefix[end] - prefix[start],
            Reverse(start),
            end,
        )
    };
    let mut heap = BinaryHeap::new();
    heap.try_reserve_exact(target)
        .map_err(|_| Error::Memory("cannot allocate the share's micro-batches".into()))?;
    let mut start = 0;
    for &end in packed {
        heap.push(entry(start, end - base));
        start = end - base;
    }
    while heap.len() < target {
        let Some((count, _, Reverse(start), end)) = heap.pop() else {
            break;
        };
        if count < 2 {
            // Unreachable while target < share.len(); kept whole, not split.
            heap.push(entry(start, end));
            break;
        }
        let mid = start + count.div_ceil(2);
        heap.push(entry(start, mid));
        heap.push(entry(mid, end));
    }
    let mut cuts: Vec<usize> = heap.into_iter().map(|(_, _, _, end)| end).collect();
    cuts.sort_unstable();
    out.extend(cuts.into_iter().map(|end| base + end));
    Ok(())
}

/// The `M` micro-batches of one rank in one step, real ones first.
#[derive(Debug, Clone)]
pub struct MicroBatches<'a> {
    dealing: &'a StepDealing,
    share: &'a [usize],
    offset: usize,
    ends: &'a [usize],
    next: usize,
}

impl<'a> Iterator for MicroBatches<'a> {
    type Item = MicroBatchRef<'a>;

    fn next(&mut self) -> Option<MicroBatchRef<'a>> {
        let m = self.next;
        if m >= self.dealing.micro_batches {
            return None;
        }
        self.next += 1;
        Some(match self.ends.get(m) {
            Some(&end) => {
                let start = if m == 0 {
                    self.offset
                } else {
                    self.ends[m - 1]
                };
                MicroBatchRef {
                    samples: &self.share[start - self.offset..end - self.offset],
                    filler: false,
                }
            }
            None => MicroBatchRef {
                samples: std::slice::from_ref(&self.dealing.filler),
                filler: true,
            },
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.dealing.micro_batches.saturating_sub(self.next);
        (left, Some(left))
    }
}

impl ExactSizeIterator for MicroBatches<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(dealing: &StepDealing, rank: u64) -> Vec<(usize, bool)> {
        dealing
            .micro_batches(rank)
            .unwrap()
            .map(|mb| (mb.samples.len(), mb.filler))
            .collect()
    }

    #[test]
    fn next_fit_packs_the_sorted_share_under_the_token_cap() {
        let caps = Caps::new(None, Some(8)).unwrap();
        let dealing = deal_step(&[5, 1, 3, 2, 8, 4], Cost::Tokens, 1, caps).unwrap();
        let batches: Vec<&[usize]> = dealing
            .micro_batches(0)
            .unwrap()
            .map(|mb| mb.samples)
            .collect();
        assert_eq!(batches, vec![&[1, 3, 2][..], &[5], &[0], &[4]]);
        assert_eq!(dealing.share(0).unwrap(), &[1, 3, 2, 5, 0, 4]);
        assert_eq!(dealing.num_micro_batches(), 4);
    }

    #[test]
    fn a_rank_with_fewer_micro_batches_splits_its_largest_first() {
        // Greedy: rank 0 gets 4, 4 and four 1s (runs [1, 1, 1, 1], [4], [4]
        // under a cap of 6), rank 1 gets 4 and eight 1s (runs of six 1s and
        // [1, 1, 4]): rank 1 splits its run of six into two of three.
        let mut lengths = vec![4, 4, 4];
        lengths.extend([1; 12]);
        let caps = Caps::new(None, Some(6)).unwrap();
        let dealing = deal_step(&lengths, Cost::Tokens, 2, caps).unwrap();
        assert_eq!(dealing.shares().method(), super::super::Method::Greedy);
        assert_eq!(dealing.num_micro_batches(), 3);
        let real = |n| (n, false);
        assert_eq!(sizes(&dealing, 0), vec![real(4), real(1), real(1)]);
        assert_eq!(sizes(&dealing, 1), vec![real(3), real(3), real(3)]);
        let last: Vec<usize> = dealing
            .micro_batches(1)
            .unwrap()
            .last()
            .unwrap()
            .samples
            .to_vec();
        assert_eq!(last, vec![12, 14, 1]);
    }

    #[test]
    fn splits_come_before_fillers_and_fillers_copy_the_shortest_sample() {
        // Rank 0 gets the 10, rank 1 the six 1s: two runs of at most 4 on
        // rank 1, so rank 0 needs a filler, a copy of position 1.
        let caps = Caps::new(Some(4), Some(10)).unwrap();
        let dealing = deal_step(&[10, 1, 1, 1, 1, 1, 1], Cost::Tokens, 2, caps).unwrap();
        assert_eq!(sizes(&dealing, 0), vec![(1, false), (1, true)]);
        assert_eq!(sizes(&dealing, 1), vec![(4, false), (2, false)]);
        let filler = dealing.micro_batches(0).unwrap().nth(1).unwrap();
        assert_eq!(filler.samples, &[1]);
        assert_eq!(filler.weight(0.5), 0.0);
        assert_eq!(dealing.filler(), 1);
    }

    #[test]
    fn ranks_without_samples_get_only_fillers() {
        let caps = Caps::new(Some(1), None).unwrap();
        let dealing = deal_step(&[4, 2], Cost::Tokens, 4, caps).unwrap();
        assert_eq!(dealing.num_micro_batches(), 1);
        for rank in 2..4 {
            let batches: Vec<MicroBatchRef> = dealing.micro_batches(rank).unwrap().collect();
            assert_eq!(
                batches,
                vec![MicroBatchRef {
                    samples: &[1],
                    filler: true
                }]
            );
        }
        assert_eq!(dealing.micro_batches(0).unwrap().len(), 1);
        assert!(dealing.micro_batches(4).is_err());
        let far = deal_step(&[3], Cost::Tokens, u64::MAX, caps).unwrap();
        assert_eq!(far.micro_batches(u64::MAX - 1).unwrap().count(), 1);
    }

    #[test]
    fn bad_caps_and_long_samples_are_errors_naming_the_argument() {
        let message = |r: Result<Caps>| r.unwrap_err().to_string();
        assert!(message(Caps::new(None, None)).starts_with("micro_batch_size and max_tokens"));
        assert_eq!(
            message(Caps::new(Some(0), None)),
            "micro_batch_size must be >= 1, got 0"
        );
        assert_eq!(
            message(Caps::new(Some(2), Some(0))),
            "max_tokens must be >= 1, got 0"
        );
        let caps = Caps::new(None, Some(5)).unwrap();
        let err = deal_step(&[1, 5, 9, 7], Cost::Tokens, 2, caps).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("lengths[2] must be <= max_tokens (5), got 9"),
            "{err}"
        );
        assert_eq!(caps.first_over(&[1, 5, 9]), Some(2));
        let err = deal_step(&[], Cost::Tokens, 2, caps).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("lengths must hold at least one sample"),
            "{err}"
        );
        assert!(deal_step(&[1], Cost::Tokens, 0, caps).is_err());
    }

    #[test]
    fn a_share_cut_alone_gives_the_dealing_s_micro_batches() {
        // A small linear congruential stream of lengths, with runs of equal
        // lengths and zeros, over world sizes and caps.
        let mut x = 12345u64;
        for n in 1..40usize {
            let lengths: Vec<u64> = (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 33) % 9
                })
                .collect();
            for w in 1..6u64 {
                for ((b, m), packing) in [(Some(2), None), (None, Some(9)), (Some(3), Some(12))]
                    .into_iter()
                    .flat_map(|c| [(c, Packing::Sorted), (c, Packing::FirstFit)])
                {
                    let caps = Caps::new(b, m).unwrap().with_packing(packing);
                    let dealing = deal_step(&lengths, Cost::Tokens, w, caps).unwrap();
                    let mut most = 0;
                    for r in 0..w {
                        let share = dealing.share(r).unwrap();
                        let own: Vec<u64> = share.iter().map(|&i| lengths[i]).collect();
                        let cuts = cut_share(&own, caps, dealing.num_micro_batches()).unwrap();
                        most = most.max(cuts.runs);
                        let mut start = 0;
                        let mut want = Vec::new();
                        for mb in dealing.micro_batches(r).unwrap().filter(|mb| !mb.filler) {
                            want.push(start + mb.samples.len());
                            start += mb.samples.len();
                        }
                        assert_eq!(cuts.ends, want, "n={n} w={w} r={r}");
                    }
                    assert_eq!(most.max(1) as u64, dealing.num_micro_batches());
                }
            }
        }
    }

    #[test]
    fn first_fit_packs_fuller_micro_batches_than_sorted_runs() {
        // Sorted runs under 10: [1, 2, 3, 4] [5] [6] [7]; first fit
        // decreasing: [7, 3] [6, 4] [5, 2, 1].
        let lengths = [5, 1, 7, 3, 6, 2, 4];
        let sorted = Caps::new(None, Some(10)).unwrap();
        let first_fit = sorted.with_packing(Packing::FirstFit);
        let runs = deal_step(&lengths, Cost::Tokens, 1, sorted).unwrap();
        assert_eq!(runs.num_micro_batches(), 4);
        let packed = deal_step(&lengths, Cost::Tokens, 1, first_fit).unwrap();
        let batches: Vec<&[usize]> = packed
            .micro_batches(0)
            .unwrap()
            .map(|mb| mb.samples)
            .collect();
        assert_eq!(batches, vec![&[2, 3][..], &[4, 6], &[0, 5, 1]]);
        assert_eq!(packed.caps().packing(), Packing::FirstFit);
    }

    #[test]
    fn huge_lengths_are_packed_without_overflow() {
        let caps = Caps::new(None, Some(u64::MAX)).unwrap();
        let dealing = deal_step(&[u64::MAX, u64::MAX, 1], Cost::Tokens, 1, caps).unwrap();
        assert_eq!(dealing.num_micro_batches(), 3);
    }
}
