//! How a rank's share is cut into micro-batches: runs of similar lengths
//! (for padded batches) or first-fit decreasing (fullest packed rows, for
//! varlen attention).
//!
//! Both are expressed as a *dealing order* of the share followed by the same
//! next-fit cut, so a reader that holds a rank's ids in dealing order finds
//! the micro-batches from their lengths alone, whichever packing made them.
//!
//! [`Packing::FirstFit`] reorders the share into its first-fit decreasing
//! bins: the samples by decreasing length (ties: lower position first), each
//! into the first bin it fits under the caps, a new bin when none does; then
//! the bins in the order they were opened, each bin's samples in the order
//! they were placed. Next-fit over that order cuts exactly at the bins'
//! boundaries: within a bin every prefix fits (the bin does), and the sample
//! that opened bin `k + 1` did not fit bin `k` when it was placed; bin `k`
//! only grew since, so it still does not.

use super::balance::by_decreasing_length;
use super::micro::Caps;
use crate::buffer::vec_with_capacity;
use crate::error::Result;

/// How a rank's share of a step is cut into micro-batches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Packing {
    /// Consecutive runs of the share sorted by length (ties: position):
    /// similar lengths share a micro-batch, so padding stays small.
    #[default]
    Sorted,
    /// First-fit decreasing under the caps: fewer, fuller micro-batches when
    /// they are packed into one sequence (varlen attention). Lengths mix in
    /// a micro-batch, so padded batches waste more.
    FirstFit,
}

impl Packing {
    /// Its name in Python, states and plan files: "sorted" or "first_fit".
    pub fn name(self) -> &'static str {
        match self {
            Packing::Sorted => "sorted",
            Packing::FirstFit => "first_fit",
        }
    }

    /// The packing of that name, if any.
    pub fn from_name(name: &str) -> Option<Packing> {
        [Packing::Sorted, Packing::FirstFit]
            .into_iter()
            .find(|p| p.name() == name)
    }
}

/// Reorders `share` (indices into a step whose samples have `lengths`
/// tokens, sorted by length then position) into its first-fit decreasing
/// bins under `caps`: see the [module](self). O(n log b) for `n` samples in
/// `b` bins (a scan while `b` is small). `bins` is scratch space, reused
/// from share to share.
pub(crate) fn first_fit_order(
    share: &mut [usize],
    lengths: &[u64],
    caps: Caps,
    bins: &mut FreeSpace,
) -> Result<()> {
    let n = share.len();
    if n < 2 {
        return Ok(());
    }
    bins.reset(caps);
    // The bin of each sample, in placement order: by decreasing length,
    // ties in increasing position (the greedy balance's order).
    let mut placed = vec_with_capacity(n, "the share's bins")?;
    for i in by_decreasing_length(share, lengths)? {
        placed.push((bins.place(lengths[i])?, i));
    }
    // A counting sort by bin keeps the placement order inside each bin.
    let opened = bins.opened();
    let mut next = vec_with_capacity(opened + 1, "the share's bins")?;
    next.resize(opened + 1, 0usize);
    for &(bin, _) in &placed {
        next[bin + 1] += 1;
    }
    for b in 0..opened {
        next[b + 1] += next[b];
    }
    for (bin, i) in placed {
        share[next[bin]] = i;
        next[bin] += 1;
    }
    Ok(())
}

/// Bins a share opens before their search moves from a scan to a tree.
const SCANNED_BINS: usize = 64;

/// The open bins of one share and their free space, so that the first bin
/// with room is found fast: by a scan while there are few (a share of a step
/// usually fills a handful), then in O(log b) in a tree whose leaves are the
/// open bins and at least one empty one. The first empty leaf is the next
/// bin to open, right of every open bin, so "the first leaf with room" is
/// first fit. The tree doubles when every leaf is open.
#[derive(Debug, Default)]
pub(crate) struct FreeSpace {
    /// While scanning, each open bin's key; then a binary tree over `leaves`
    /// bins (a power of two), leaf `k` at `leaves + k`, an inner node holding
    /// its children's maximum. A bin's key is its room plus one (u64::MAX
    /// when that is larger: a sample's need saturates alike, so `key >=
    /// need` still says whether it fits), 0 once it is full by count.
    /// Without a token cap a bin's room never runs out: its key is 1 while
    /// it takes samples, and every sample needs 1.
    room: Vec<u64>,
    /// Samples in each open bin.
    count: Vec<u64>,
    /// Tokens each open bin has room for, exactly (its key may be saturated).
    left: Vec<u64>,
    /// The tree's leaves; 0 while scanning.
    leaves: usize,
    /// The key of an empty bin.
    empty: u64,
    /// Whether bins are capped in tokens (else only by count), and the cap.
    capped: bool,
    cap: u64,
    micro_batch_size: Option<u64>,
}

impl FreeSpace {
    /// Empty bins under `caps`.
    fn reset(&mut self, caps: Caps) {
        self.capped = caps.max_tokens().is_some();
        self.cap = caps.max_tokens().unwrap_or(0);
        self.empty = caps.max_tokens().map_or(1, |m| m.saturating_add(1));
        self.micro_batch_size = caps.micro_batch_size();
        self.leaves = 0;
        self.count.clear();
        self.left.clear();
        self.room.clear();
    }

    /// Bins opened so far.
    fn opened(&self) -> usize {
        self.count.len()
    }

    /// The tree over twice the leaves (the open bins' keys at first), the new
    /// leaves empty.
    fn grow(&mut self) -> Result<()> {
        let leaves = (2 * self.leaves).max(2 * SCANNED_BINS);
        let mut room = vec_with_capacity(2 * leaves, "the share's bins")?;
        room.resize(2 * leaves, self.empty);
        let open = if self.leaves == 0 {
            &self.room[..]
        } else {
            &self.room[self.leaves..]
        };
        room[leaves..leaves + open.len()].copy_from_slice(open);
        for node in (1..leaves).rev() {
            room[node] = room[2 * node].max(room[2 * node + 1]);
        }
        self.room = room;
        self.leaves = leaves;
        Ok(())
    }

    /// Puts a sample of `length` tokens (within the token cap) into the
    /// first bin with room for it and returns that bin.
    fn place(&mut self, length: u64) -> Result<usize> {
        let need = if self.capped {
            length.saturating_add(1)
        } else {
            1
        };
        let (bin, slot) = if self.leaves == 0 {
            let bin = match self.room.iter().position(|&key| key >= need) {
                Some(bin) => bin,
                None if self.opened() < SCANNED_BINS => {
                    self.room.push(self.empty);
                    self.opened()
                }
                None => {
                    self.grow()?;
                    return self.place(length);
                }
            };
            (bin, bin)
        } else {
            if self.opened() == self.leaves {
                self.grow()?;
            }
            let mut node = 1;
            // Branch-free: left or right is as good as random.
            while node < self.leaves {
                node = 2 * node + usize::from(self.room[2 * node] < need);
            }
            (node - self.leaves, node)
        };
        if bin == self.opened() {
            self.count.push(0);
            self.left.push(self.cap);
        }
        self.count[bin] += 1;
        self.left[bin] -= if self.capped { length } else { 0 };
        let full = self.micro_batch_size.is_some_and(|b| self.count[bin] >= b);
        self.room[slot] = if full {
            0
        } else if self.capped {
            self.left[bin].saturating_add(1)
        } else {
            1
        };
        if self.leaves > 0 {
            let mut node = slot;
            while node > 1 {
                node /= 2;
                let key = self.room[2 * node].max(self.room[2 * node + 1]);
                if self.room[node] == key {
                    break;
                }
                self.room[node] = key;
            }
        }
        Ok(bin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// First-fit decreasing by the book: bins as vectors, scanned in order.
    fn naive(share: &[usize], lengths: &[u64], caps: Caps) -> Vec<usize> {
        let mut items: Vec<usize> = share.to_vec();
        items.sort_by_key(|&i| (std::cmp::Reverse(lengths[i]), i));
        let mut bins: Vec<Vec<usize>> = Vec::new();
        for i in items {
            let fits = |bin: &Vec<usize>| {
                let tokens: u128 = bin.iter().map(|&j| u128::from(lengths[j])).sum();
                caps.allows(bin.len() as u64 + 1, tokens + u128::from(lengths[i]))
            };
            match bins.iter_mut().find(|b| fits(b)) {
                Some(bin) => bin.push(i),
                None => bins.push(vec![i]),
            }
        }
        bins.concat()
    }

    #[test]
    fn the_order_is_first_fit_decreasing_by_the_book() {
        let mut x = 99u64;
        let mut bins = FreeSpace::default();
        // Up to hundreds of bins: the scan, the tree and its doublings.
        for n in (0..60usize).chain([150, 400, 1100]) {
            let lengths: Vec<u64> = (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 33) % 13
                })
                .collect();
            for (b, m) in [(None, Some(13)), (Some(3), None), (Some(4), Some(20))] {
                let caps = Caps::new(b, m).unwrap();
                let mut share: Vec<usize> = (0..n).collect();
                share.sort_by_key(|&i| (lengths[i], i));
                let want = naive(&share, &lengths, caps);
                first_fit_order(&mut share, &lengths, caps, &mut bins).unwrap();
                assert_eq!(share, want, "n={n} caps={caps:?}");
            }
        }
    }

    #[test]
    fn lengths_and_caps_near_u64_max_are_packed_by_the_book() {
        let mut bins = FreeSpace::default();
        let big = [0, 1, 2, 1 << 63, u64::MAX - 1, u64::MAX];
        // Every sequence of four of these, under caps up to u64::MAX.
        for code in 0..big.len().pow(4) {
            let lengths: Vec<u64> = (0..4)
                .map(|d| big[code / big.len().pow(d) % big.len()])
                .collect();
            for (b, m) in [(None, u64::MAX), (Some(2), u64::MAX), (None, u64::MAX - 1)] {
                let caps = Caps::new(b, Some(m)).unwrap();
                if lengths.iter().any(|&l| l > m) {
                    continue;
                }
                let mut share: Vec<usize> = (0..lengths.len()).collect();
                share.sort_by_key(|&i| (lengths[i], i));
                let want = naive(&share, &lengths, caps);
                first_fit_order(&mut share, &lengths, caps, &mut bins).unwrap();
                assert_eq!(share, want, "lengths={lengths:?} caps={caps:?}");
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for p in [Packing::Sorted, Packing::FirstFit] {
            assert_eq!(Packing::from_name(p.name()), Some(p));
        }
        assert_eq!(Packing::from_name("best_fit"), None);
        assert_eq!(Packing::default(), Packing::Sorted);
    }
}
