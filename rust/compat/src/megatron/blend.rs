//! megatron-core's blending indices (`helpers_cpp.build_blending_indices` and
//! `build_exhaustive_blending_indices`), bit for bit, and from 33 groups of
//! sources without an O(K) scan per sample.
//!
//! At position `i` Megatron takes the next sample of the source `k` whose
//! error `w_k * max(i, 1) - c_k` is largest (double precision, `c_k` the
//! samples taken from it so far), the lowest `k` on ties; the exhaustive
//! variant weighs each source by its size over the total and retires a
//! source once all its samples are taken. Here the same doubles are compared,
//! so the choice is the same, but few are computed:
//!
//! - Sources of bit-identical weight (and size) form a group. Their errors
//!   differ only by their counts, so the group's best member is the lowest
//!   one among those with the fewest samples taken: a group is taken round
//!   robin, in index order, and acts as one source.
//! - Up to 32 groups, a position compares them all, as Megatron's loop does.
//! - More groups are sorted by weight and cut into blocks of eight (sixteen
//!   from 512 groups). Each block
//!   keeps the largest error it had when last evaluated; an error grows by at
//!   most the block's largest weight per position, so that value plus the
//!   block's largest weight times the positions since (and a margin for the
//!   rounding of both) bounds every error in the block. A position evaluates
//!   the block of largest bound first, then only the blocks whose bound
//!   reaches the best error found: typically one or two blocks of a hundred.
//! - The positions are filled in pieces, one a thread, each from a guess of
//!   the samples taken before it, then mended in order (the `pieces` module).
//! - Where the CPU has AVX-512, 32 pieces a thread are walked at once, each in
//!   a vector lane, by Megatron's own loop over every source (the `lanes`
//!   module), for blends filled in pieces from 2^18 positions, of 4 groups
//!   or more, up to 4,096 sources and 16 times the groups (where measured
//!   faster than the above).

use epochplan_core::{Error, Result};

#[cfg(target_arch = "x86_64")]
mod lanes;
mod pieces;

/// Groups per block: 8 up to [`WIDE_FROM`] groups, 16 from there (measured:
/// at 128 sources 8 is faster, at 1,000 sources 16).
const NARROW: usize = 8;
const WIDE: usize = 16;
const WIDE_FROM: usize = 512;

/// Up to this many groups every position compares them all (measured: the
/// scan is faster than the blocks up to about 32 groups, slower from 48).
const SCAN_UP_TO: usize = 32;

/// The largest number of sources: the dataset index is int16.
pub const MAX_DATASETS: usize = i16::MAX as usize;

/// Checks that both output arrays hold at least `size` entries.
fn check_outputs(dataset_index: &[i16], dataset_sample_index: &[i64], size: usize) -> Result<()> {
    for (name, len) in [
        ("dataset_index", dataset_index.len()),
        ("dataset_sample_index", dataset_sample_index.len()),
    ] {
        if len < size {
            return Err(Error::Value(format!(
                "{name} must hold at least {size} entries, got {len}"
            )));
        }
    }
    Ok(())
}

fn check_num_datasets(num_datasets: i64, given: usize, what: &str) -> Result<usize> {
    if num_datasets < 1 || num_datasets as usize > MAX_DATASETS {
        return Err(Error::Value(format!(
            "num_datasets must be in [1, {MAX_DATASETS}], got {num_datasets}"
        )));
    }
    let k = num_datasets as usize;
    if given < k {
        return Err(Error::Value(format!(
            "{what} must have at least num_datasets ({k}) entries, got {given}"
        )));
    }
    Ok(k)
}

/// One group of sources of equal weight (and size), taken round robin.
#[derive(Clone, Debug)]
struct Group {
    weight: f64,
    /// Sources of the group, ascending.
    members: Vec<u16>,
    /// The member to take next.
    next: usize,
    /// Samples taken from each member before `next`.
    taken: i64,
    /// Exhaustive variant: samples of each member; retired when `taken` reaches it.
    size: Option<i64>,
}

impl Group {
    /// Samples taken from the group's members together.
    fn total(&self) -> i64 {
        self.taken * self.members.len() as i64 + self.next as i64
    }

    /// Sets the samples taken from the members together (round robin).
    fn set_total(&mut self, total: i64) {
        let len = self.members.len() as i64;
        self.taken = total / len;
        self.next = (total % len) as usize;
    }

    fn retired(&self) -> bool {
        self.size == Some(self.taken)
    }
}

/// The groups and, per lane, what a comparison reads: the group's weight,
/// the samples taken from its next member (+inf once retired) and that
/// member. Lanes past the last group have weight 0 and +inf taken (an error
/// of -inf).
#[derive(Debug)]
struct Lanes {
    groups: Vec<Group>,
    weight: Vec<f64>,
    taken: Vec<f64>,
    source: Vec<u16>,
}

impl Lanes {
    /// `lanes` lanes (at least one a group) over `groups` as they stand.
    fn new(groups: Vec<Group>, lanes: usize) -> Lanes {
        let mut weight = vec![0.0; lanes];
        let mut taken = vec![f64::INFINITY; lanes];
        let mut source = vec![u16::MAX; lanes];
        for (g, group) in groups.iter().enumerate() {
            weight[g] = group.weight;
            taken[g] = Lanes::taken_of(group);
            source[g] = group.members[group.next];
        }
        Lanes {
            groups,
            weight,
            taken,
            source,
        }
    }

    fn taken_of(group: &Group) -> f64 {
        if group.retired() {
            f64::INFINITY
        } else {
            group.taken as f64
        }
    }

    /// The best (largest error, then lowest source) of the `L` lanes from
    /// `lo` at `x`: its error, source and lane.
    #[inline(always)]
    fn best<const L: usize>(&self, lo: usize, x: f64) -> Best {
        let weight: &[f64; L] = self.weight[lo..lo + L].try_into().unwrap_or(&[0.0; L]);
        let taken: &[f64; L] = self.taken[lo..lo + L].try_into().unwrap_or(&[0.0; L]);
        let source: &[u16; L] = self.source[lo..lo + L].try_into().unwrap_or(&[0; L]);
        let mut error = [0.0; L];
        for j in 0..L {
            error[j] = weight[j] * x - taken[j];
        }
        // Branch-free: which lane is largest is as good as random, and a
        // mispredicted branch per lane would cost more than the arithmetic.
        // A tree of comparisons rather than a chain: half the latency.
        let mut top = error;
        let mut half = L;
        while half > 1 {
            half /= 2;
            for j in 0..half {
                top[j] = if top[j + half] > top[j] {
                    top[j + half]
                } else {
                    top[j]
                };
            }
        }
        let top = top[0];
        // The lowest source among the lanes at the top, with its lane.
        let mut key = u32::MAX;
        for j in 0..L {
            let candidate = (u32::from(source[j]) << 8) | j as u32;
            let off_top = u32::from(error[j] != top).wrapping_neg();
            key = key.min(candidate | off_top);
        }
        (top, (key >> 8) as u16, lo + (key & 0xff) as usize)
    }

    /// Takes a sample of group `g`: returns its index in its source.
    #[inline(always)]
    fn take(&mut self, g: usize) -> i64 {
        let group = &mut self.groups[g];
        let sample = group.taken;
        group.next += 1;
        if group.next == group.members.len() {
            group.next = 0;
            group.taken += 1;
        }
        self.source[g] = group.members[group.next];
        self.taken[g] = Lanes::taken_of(group);
        sample
    }

    fn totals(&self) -> Vec<i64> {
        self.groups.iter().map(Group::total).collect()
    }
}

/// The best lane of some lanes: its error, source, and lane.
type Best = (f64, u16, usize);

/// How Megatron's choice is found, position after position, from a state
/// of samples taken.
trait Walk {
    /// The walk over `groups` (heaviest first, as [`groups_of`] gives them)
    /// from their samples taken so far, at `x`, for `positions` in all.
    fn start(groups: Vec<Group>, positions: usize, x: f64) -> Self;
    /// The group Megatron takes at `x`, and its source.
    fn choose(&mut self, x: f64) -> (usize, u16);
    /// Takes a sample of group `g` at `x`: returns its index in its source.
    fn take(&mut self, g: usize, x: f64) -> i64;
    /// Samples taken from each group so far.
    fn totals(&self) -> Vec<i64>;
}

/// Every group compared at every position, as Megatron's loop compares its
/// sources: faster than the blocks up to [`SCAN_UP_TO`] groups, where the
/// loop's branches are well predicted.
#[derive(Debug)]
struct Scan {
    lanes: Lanes,
}

impl Walk for Scan {
    fn start(groups: Vec<Group>, _positions: usize, _x: f64) -> Scan {
        let lanes = groups.len();
        Scan {
            lanes: Lanes::new(groups, lanes),
        }
    }

    #[inline(always)]
    fn choose(&mut self, x: f64) -> (usize, u16) {
        let l = &self.lanes;
        let (mut g, mut top, mut source) = (0, l.weight[0] * x - l.taken[0], l.source[0]);
        for j in 1..l.weight.len() {
            let e = l.weight[j] * x - l.taken[j];
            if e > top || (e == top && l.source[j] < source) {
                (g, top, source) = (j, e, l.source[j]);
            }
        }
        (g, source)
    }

    #[inline(always)]
    fn take(&mut self, g: usize, _x: f64) -> i64 {
        self.lanes.take(g)
    }

    fn totals(&self) -> Vec<i64> {
        self.lanes.totals()
    }
}

/// The blocked search over groups: lanes in blocks of `L` (the last padded).
#[derive(Debug)]
struct Search<const L: usize> {
    lanes: Lanes,
    /// Per block: the bound's intercept and slope, `bound(x) = base + x * slope`.
    base: Vec<f64>,
    slope: Vec<f64>,
    bounds: Vec<f64>,
    /// Added to every bound: the rounding of an error and of a bound.
    margin: f64,
}

impl<const L: usize> Search<L> {
    /// The best of block `b` at `x`; the block's bound restarts from it.
    #[inline(always)]
    fn evaluate(&mut self, b: usize, x: f64) -> Best {
        let best = self.lanes.best::<L>(b * L, x);
        self.base[b] = best.0 - x * self.slope[b] + self.margin;
        best
    }
}

impl<const L: usize> Walk for Search<L> {
    fn start(groups: Vec<Group>, positions: usize, x: f64) -> Search<L> {
        let blocks = groups.len().div_ceil(L);
        let largest = groups.iter().map(|g| g.weight.abs()).fold(0.0, f64::max);
        let scale = (largest + 1.0) * (positions as f64 + 2.0);
        let lanes = Lanes::new(groups, blocks * L);
        let slope = (0..blocks)
            .map(|b| {
                lanes.weight[b * L..(b + 1) * L]
                    .iter()
                    .fold(0.0, |a: f64, &w| a.max(w))
            })
            .collect();
        let mut search = Search {
            lanes,
            base: vec![0.0; blocks],
            slope,
            bounds: vec![0.0; blocks],
            margin: scale * f64::EPSILON * 64.0,
        };
        for b in 0..blocks {
            search.evaluate(b, x);
        }
        search
    }

    #[inline(always)]
    fn choose(&mut self, x: f64) -> (usize, u16) {
        let blocks = self.base.len();
        let mut first = 0;
        let mut top = f64::NEG_INFINITY;
        for b in 0..blocks {
            let bound = self.base[b] + x * self.slope[b];
            self.bounds[b] = bound + self.margin;
            let above = bound > top;
            top = if above { bound } else { top };
            first = if above { b } else { first };
        }
        let mut best = self.evaluate(first, x);
        for b in 0..blocks {
            if self.bounds[b] < best.0 || b == first {
                continue;
            }
            let found = self.evaluate(b, x);
            if found.0 > best.0 || (found.0 == best.0 && found.1 < best.1) {
                best = found;
            }
        }
        (best.2, best.1)
    }

    #[inline(always)]
    fn take(&mut self, g: usize, x: f64) -> i64 {
        let sample = self.lanes.take(g);
        self.evaluate(g / L, x);
        sample
    }

    fn totals(&self) -> Vec<i64> {
        self.lanes.totals()
    }
}

/// Megatron's `x` at position `i`: `max(i, 1)`.
fn x_at(i: usize) -> f64 {
    (i as f64).max(1.0)
}

/// Fills positions `first..first + index.len()`: the loop of both variants.
#[inline(always)]
fn fill_with<W: Walk>(search: &mut W, first: usize, index: &mut [i16], sample: &mut [i64]) {
    for (i, (source_out, sample_out)) in index.iter_mut().zip(sample.iter_mut()).enumerate() {
        let x = x_at(first + i);
        let (g, source) = search.choose(x);
        *source_out = source as i16;
        *sample_out = search.take(g, x);
    }
}

/// [`fill_with`] compiled for AVX2, whose wider vectors evaluate a block of
/// the [`Search`] in two instructions (the [`Scan`] neither gains nor loses). (No fused multiply-add: Rust never contracts `a * x -
/// c`, so the errors are rounded as Megatron rounds them.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn fill_avx2<W: Walk>(search: &mut W, first: usize, index: &mut [i16], sample: &mut [i64]) {
    fill_with(search, first, index, sample);
}

fn fill<W: Walk>(search: &mut W, first: usize, index: &mut [i16], sample: &mut [i64]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        #[allow(unsafe_code)]
        // SAFETY: the processor was just seen to have AVX2.
        unsafe {
            fill_avx2(search, first, index, sample);
        }
        return;
    }
    fill_with(search, first, index, sample);
}

/// Sources grouped by weight bits (and size), heaviest first, for a blend
/// of `positions`. A group is taken round robin because a member's error
/// falls by exactly one per sample taken; from 2^53 in magnitude a double
/// cannot tell `e` from `e - 1`, so when an error could pass 2^52 (huge
/// weights) every source is its own group.
fn groups_of(weights: &[f64], sizes: Option<&[i64]>, positions: usize) -> Vec<Group> {
    let largest = weights.iter().fold(0.0, |a: f64, w| a.max(w.abs()));
    let n = positions as f64;
    let together = largest * (n + 1.0) + n < 2f64.powi(52);
    let mut keys: Vec<(u64, i64, u16)> = weights
        .iter()
        .enumerate()
        .map(|(k, w)| (w.to_bits(), sizes.map_or(0, |s| s[k]), k as u16))
        .collect();
    keys.sort_unstable();
    let mut groups: Vec<Group> = Vec::new();
    for (bits, size, k) in keys {
        match groups.last_mut() {
            Some(g) if together && g.weight.to_bits() == bits && g.size.unwrap_or(0) == size => {
                g.members.push(k);
            }
            _ => groups.push(Group {
                weight: f64::from_bits(bits),
                members: vec![k],
                next: 0,
                taken: 0,
                size: sizes.map(|_| size),
            }),
        }
    }
    // Heaviest first, so a block's weights are close and its bound tight.
    groups.sort_by(|a, b| {
        b.weight
            .total_cmp(&a.weight)
            .then(a.members[0].cmp(&b.members[0]))
    });
    groups
}

/// `helpers_cpp.build_blending_indices`: fills the first `size` entries of
/// both outputs.
pub fn build_blending_indices(
    dataset_index: &mut [i16],
    dataset_sample_index: &mut [i64],
    weights: &[f64],
    num_datasets: i64,
    size: i64,
) -> Result<()> {
    let k = check_num_datasets(num_datasets, weights.len(), "weights")?;
    let weights = &weights[..k];
    let size = usize::try_from(size)
        .map_err(|_| Error::Value(format!("size must be non-negative, got {size}")))?;
    // Errors must stay finite (and far from overflow) for the bounds to hold.
    let limit = f64::MAX.sqrt() / (size as f64 + 2.0);
    if let Some((i, w)) = weights
        .iter()
        .enumerate()
        .find(|(_, w)| !w.is_finite() || w.abs() > limit)
    {
        return Err(Error::Value(format!(
            "weights[{i}] must be finite and at most {limit:e} in magnitude, got {w}"
        )));
    }
    check_outputs(dataset_index, dataset_sample_index, size)?;
    let groups = groups_of(weights, None, size);
    // With weights that do not sum to one the errors drift, and a guess of
    // the samples taken rarely meets the true walk: one piece.
    let normalized = (weights.iter().sum::<f64>() - 1.0).abs() <= 1e-9;
    fill_blend(
        &groups,
        (weights, None),
        &mut dataset_index[..size],
        &mut dataset_sample_index[..size],
        normalized,
    );
    Ok(())
}

/// Fills both outputs, in pieces if `in_pieces`: 32 pieces a thread in
/// vector lanes where the CPU has AVX-512 (the `lanes` module), else one a
/// thread by a scan of every group up to [`SCAN_UP_TO`] groups, by blocks of
/// eight groups up to [`WIDE_FROM`], of sixteen from there. `sources` are
/// the weights and, for the exhaustive variant, the sizes.
fn fill_blend(
    groups: &[Group],
    sources: (&[f64], Option<&[i64]>),
    index: &mut [i16],
    sample: &mut [i64],
    in_pieces: bool,
) {
    match groups.len() {
        ..=SCAN_UP_TO => fill_walk::<Scan>(groups, sources, index, sample, in_pieces),
        WIDE_FROM.. => fill_walk::<Search<WIDE>>(groups, sources, index, sample, in_pieces),
        _ => fill_walk::<Search<NARROW>>(groups, sources, index, sample, in_pieces),
    }
}

/// [`fill_blend`] with the walk `W` (of each piece, or of its mend).
fn fill_walk<W: Walk>(
    groups: &[Group],
    (weights, sizes): (&[f64], Option<&[i64]>),
    index: &mut [i16],
    sample: &mut [i64],
    in_pieces: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if in_pieces && lanes::suit(groups.len(), weights.len(), index.len()) {
        lanes::fill_all::<W>(groups, weights, sizes, index, sample);
        return;
    }
    let _ = (weights, sizes);
    let piece = if in_pieces {
        pieces::length(index.len())
    } else {
        index.len()
    };
    pieces::fill_all::<W>(groups, index, sample, piece);
}

/// `helpers_cpp.build_exhaustive_blending_indices`: fills the first
/// `sum(sizes)` entries of both outputs, every sample of every source once.
pub fn build_exhaustive_blending_indices(
    dataset_index: &mut [i16],
    dataset_sample_index: &mut [i64],
    sizes: &[i64],
    num_datasets: i64,
) -> Result<()> {
    let k = check_num_datasets(num_datasets, sizes.len(), "sizes")?;
    let sizes = &sizes[..k];
    // A source of no samples is never retired: Megatron loops past the end.
    if let Some((i, s)) = sizes.iter().enumerate().find(|(_, s)| **s <= 0) {
        return Err(Error::Value(format!(
            "sizes[{i}] must be positive, got {s}"
        )));
    }
    let total = sizes
        .iter()
        .try_fold(0i64, |a, &s| a.checked_add(s))
        .ok_or_else(|| Error::Overflow("the sum of sizes must fit in int64".into()))?;
    let weights: Vec<f64> = sizes.iter().map(|&s| s as f64 / total as f64).collect();
    let total = total as usize;
    check_outputs(dataset_index, dataset_sample_index, total)?;
    let groups = groups_of(&weights, Some(sizes), total);
    fill_blend(
        &groups,
        (&weights, Some(sizes)),
        &mut dataset_index[..total],
        &mut dataset_sample_index[..total],
        true,
    );
    Ok(())
}

/// Megatron's loops as written: one scan of every source per position. The
/// reference of the tests and of the benchmark's checks.
pub fn reference_blending_indices(weights: &[f64], size: usize) -> (Vec<i16>, Vec<i64>) {
    let mut counts = vec![0i64; weights.len()];
    let mut index = Vec::with_capacity(size);
    let mut sample = Vec::with_capacity(size);
    for i in 0..size {
        let x = (i as f64).max(1.0);
        let mut best = 0;
        let mut best_error = weights[0] * x - counts[0] as f64;
        for (k, w) in weights.iter().enumerate().skip(1) {
            let error = w * x - counts[k] as f64;
            if error > best_error {
                best_error = error;
                best = k;
            }
        }
        index.push(best as i16);
        sample.push(counts[best]);
        counts[best] += 1;
    }
    (index, sample)
}

/// The exhaustive loop as written (see [`reference_blending_indices`]).
pub fn reference_exhaustive_blending_indices(sizes: &[i64]) -> (Vec<i16>, Vec<i64>) {
    let total: i64 = sizes.iter().sum();
    let weights: Vec<f64> = sizes.iter().map(|&s| s as f64 / total as f64).collect();
    let mut counts = vec![0i64; sizes.len()];
    let mut open: Vec<usize> = (0..sizes.len()).collect();
    let mut index = Vec::new();
    let mut sample = Vec::new();
    let mut i = 0i64;
    while !open.is_empty() {
        let x = (i as f64).max(1.0);
        let mut best = usize::MAX;
        let mut best_error = f64::MIN;
        for &k in &open {
            let error = weights[k] * x - counts[k] as f64;
            if error > best_error {
                best_error = error;
                best = k;
            }
        }
        index.push(best as i16);
        sample.push(counts[best]);
        counts[best] += 1;
        if sizes[best] as f64 - counts[best] as f64 == 0.0 {
            open.retain(|&k| k != best);
        }
        i += 1;
    }
    (index, sample)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fast(weights: &[f64], size: usize) -> (Vec<i16>, Vec<i64>) {
        let mut index = vec![0i16; size];
        let mut sample = vec![0i64; size];
        build_blending_indices(
            &mut index,
            &mut sample,
            weights,
            weights.len() as i64,
            size as i64,
        )
        .unwrap();
        (index, sample)
    }

    fn normalized(raw: &[f64]) -> Vec<f64> {
        let total: f64 = raw.iter().sum();
        raw.iter().map(|w| w / total).collect()
    }

    #[test]
    fn equal_tiny_and_skewed_weights_match_the_loop() {
        let cases: Vec<Vec<f64>> = vec![
            vec![1.0],
            normalized(&[1.0; 7]),
            normalized(&[1.0; 64]),
            normalized(&[3.0, 1.0, 1.0, 3.0, 2.0]),
            normalized(&[1.0, 1e-12, 1e-300, 1.0, 0.5]),
            normalized(&(1..=40).map(|k| f64::from(k).powi(3)).collect::<Vec<_>>()),
            vec![2.0, 3.0, 0.0, 1.0],
        ];
        for w in cases {
            assert_eq!(
                fast(&w, 5000),
                reference_blending_indices(&w, 5000),
                "{w:?}"
            );
        }
    }

    #[test]
    fn many_groups_take_wide_blocks_and_match_the_loop() {
        let raw: Vec<f64> = (1..=700).map(|k| f64::from(k % 97 + k)).collect();
        let w = normalized(&raw);
        assert!(groups_of(&w, None, 20_000).len() >= WIDE_FROM);
        assert_eq!(fast(&w, 20_000), reference_blending_indices(&w, 20_000));
        let sizes: Vec<i64> = (1..=600).collect();
        let total: i64 = sizes.iter().sum();
        let weights: Vec<f64> = sizes.iter().map(|&s| s as f64 / total as f64).collect();
        assert!(groups_of(&weights, Some(&sizes), total as usize).len() >= WIDE_FROM);
        let mut index = vec![0i16; total as usize];
        let mut sample = vec![0i64; total as usize];
        build_exhaustive_blending_indices(&mut index, &mut sample, &sizes, 600).unwrap();
        assert_eq!(
            (index, sample),
            reference_exhaustive_blending_indices(&sizes)
        );
    }

    #[test]
    fn huge_weights_are_not_taken_round_robin() {
        // 1e17 - 1 == 1e17 in doubles: Megatron takes source 0 every time.
        assert_eq!(
            fast(&[1e17, 1e17], 4),
            reference_blending_indices(&[1e17, 1e17], 4)
        );
        assert_eq!(fast(&[1e17, 1e17], 4).0, [0, 0, 0, 0]);
        // Errors pass 2^53 near position 900,721: from there Megatron no
        // longer alternates between the two sources of equal weight.
        let w = [1e10, 1e10, 3.0];
        assert_eq!(
            fast(&w, 1_000_000),
            reference_blending_indices(&w, 1_000_000)
        );
    }

    #[test]
    fn exhaustive_matches_the_loop() {
        for sizes in [
            vec![5i64],
            vec![3, 3, 3],
            vec![1, 100, 7, 7, 50],
            vec![9; 20],
        ] {
            let total: i64 = sizes.iter().sum();
            let mut index = vec![0i16; total as usize];
            let mut sample = vec![0i64; total as usize];
            build_exhaustive_blending_indices(&mut index, &mut sample, &sizes, sizes.len() as i64)
                .unwrap();
            assert_eq!(
                (index, sample),
                reference_exhaustive_blending_indices(&sizes),
                "{sizes:?}"
            );
        }
    }

    #[test]
    fn bad_inputs_name_the_argument() {
        let mut i = vec![0i16; 4];
        let mut s = vec![0i64; 4];
        let e = build_blending_indices(&mut i, &mut s, &[0.5, 0.5], 2, 5).unwrap_err();
        assert!(e.to_string().starts_with("dataset_index"), "{e}");
        let e = build_blending_indices(&mut i, &mut s, &[0.5, f64::NAN], 2, 4).unwrap_err();
        assert!(e.to_string().starts_with("weights[1]"), "{e}");
        let e = build_blending_indices(&mut i, &mut s, &[0.5], 2, 4).unwrap_err();
        assert!(e.to_string().starts_with("weights"), "{e}");
        let e = build_exhaustive_blending_indices(&mut i, &mut s, &[2, 0], 2).unwrap_err();
        assert!(e.to_string().starts_with("sizes[1]"), "{e}");
    }

    proptest! {
        #[test]
        fn any_weights_match_the_loop(raw in prop::collection::vec(0u32..1000, 1..40), size in 0usize..3000) {
            let w = normalized(&raw.iter().map(|&r| f64::from(r) + 0.5).collect::<Vec<_>>());
            prop_assert_eq!(fast(&w, size), reference_blending_indices(&w, size));
        }

        #[test]
        fn any_sizes_match_the_exhaustive_loop(sizes in prop::collection::vec(1i64..60, 1..30)) {
            let total: i64 = sizes.iter().sum();
            let mut index = vec![0i16; total as usize];
            let mut sample = vec![0i64; total as usize];
            build_exhaustive_blending_indices(&mut index, &mut sample, &sizes, sizes.len() as i64).unwrap();
            prop_assert_eq!((index, sample), reference_exhaustive_blending_indices(&sizes));
        }
    }
}
