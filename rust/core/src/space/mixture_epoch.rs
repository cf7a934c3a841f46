//! One epoch of a mixture (see the mixture module): its positions, each an
//! element of some source's sequence of keyed passes, mapped to ids in
//! batches grouped by source and pass.

use crate::error::{Error, Result};
use crate::parallel;
use crate::space::interleave::Interleave;
use crate::space::mixture::{Mixture, Sources};
use crate::space::selection::check_indices_below;

/// A run of an epoch's positions under one phase's quotas, stratified by
/// its own interleave.
#[derive(Debug, Clone)]
struct Segment {
    /// Its first position in the epoch.
    start: u64,
    interleave: Interleave,
    /// Elements of each source taken by the epoch's segments before it.
    before: Vec<u64>,
}

/// One epoch of a mixture: `S` positions, each an id of some source. An
/// epoch inside which a phase starts is cut into segments, one a phase,
/// each its own interleave of that phase's quotas (apportioned to the
/// segment); the sources' sequences run on from segment to segment.
#[derive(Debug, Clone)]
pub struct MixtureEpoch {
    mixture: Mixture,
    segments: Vec<Segment>,
    consumed: Vec<u64>,
}

impl MixtureEpoch {
    /// The epoch taking `quotas[k]` elements of each source's sequence from
    /// element `consumed[k]` on.
    pub(crate) fn new(mixture: Mixture, quotas: &[u64], consumed: &[u64]) -> Result<MixtureEpoch> {
        MixtureEpoch::in_segments(mixture, std::slice::from_ref(&quotas.to_vec()), consumed)
    }

    /// The epoch of consecutive segments of `segments[j]` quotas each, the
    /// sources' sequences taken from element `consumed[k]` on.
    pub(crate) fn in_segments(
        mixture: Mixture,
        segments: &[Vec<u64>],
        consumed: &[u64],
    ) -> Result<MixtureEpoch> {
        let k = mixture.num_sources();
        if segments.is_empty() {
            return Err(Error::Value("an epoch needs at least one segment".into()));
        }
        if consumed.len() != k {
            return Err(Error::Value(format!(
                "consumed must have one entry per source ({k}), got {}",
                consumed.len()
            )));
        }
        let mut taken = vec![0u64; k];
        let mut start = 0u64;
        let mut built = Vec::with_capacity(segments.len());
        for quotas in segments {
            if quotas.len() != k {
                return Err(Error::Value(format!(
                    "quotas must have one entry per source ({k}), got {}",
                    quotas.len()
                )));
            }
            for (s, &q) in quotas.iter().enumerate() {
                if mixture.source_len(s) == 0 && q > 0 {
                    return Err(Error::Value(format!(
                        "quotas[{s}] must be 0: source {s} is empty, got {q}"
                    )));
                }
            }
            let interleave = Interleave::new(quotas)?;
            let len = interleave.len();
            built.push(Segment {
                start,
                interleave,
                before: taken.clone(),
            });
            for (t, &q) in taken.iter_mut().zip(quotas) {
                *t = t.checked_add(q).ok_or_else(|| {
                    Error::Overflow("an epoch's quotas must sum below 2**64".into())
                })?;
            }
            start = start
                .checked_add(len)
                .ok_or_else(|| Error::Overflow("an epoch must be below 2**64 positions".into()))?;
        }
        for s in 0..k {
            if consumed[s].checked_add(taken[s]).is_none() {
                return Err(Error::Overflow(format!(
                    "consumed[{s}] + quotas[{s}] must be below 2**64, got {} + {}",
                    consumed[s], taken[s]
                )));
            }
        }
        Ok(MixtureEpoch {
            mixture,
            segments: built,
            consumed: consumed.to_vec(),
        })
    }

    /// The epoch's positions (`S`, the sum of the quotas).
    pub fn len(&self) -> u64 {
        self.segments
            .last()
            .map_or(0, |s| s.start + s.interleave.len())
    }

    /// True when the epoch has no positions.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The mixture.
    pub fn mixture(&self) -> &Mixture {
        &self.mixture
    }

    /// Each source's positions in the epoch (over all its segments).
    pub fn quotas(&self) -> Vec<u64> {
        (0..self.consumed.len())
            .map(|k| self.segments.iter().map(|s| s.interleave.quota(k)).sum())
            .collect()
    }

    /// The segments: each one's first position and quotas (one segment
    /// unless a phase starts inside the epoch).
    pub fn segments(&self) -> Vec<(u64, Vec<u64>)> {
        self.segments
            .iter()
            .map(|s| {
                let quotas = (0..self.consumed.len()).map(|k| s.interleave.quota(k));
                (s.start, quotas.collect())
            })
            .collect()
    }

    /// Elements of each source's sequence consumed before this epoch.
    pub fn consumed(&self) -> &[u64] {
        &self.consumed
    }

    /// Elements of each source's sequence consumed after this epoch: the
    /// next epoch's `consumed`.
    pub fn consumed_after(&self) -> Vec<u64> {
        // Checked when the epoch was built.
        let quotas = self.quotas();
        (0..self.consumed.len())
            .map(|k| self.consumed[k] + quotas[k])
            .collect()
    }

    /// The segment holding position `j` (which is in the epoch).
    fn segment_of(&self, j: u64) -> &Segment {
        let at = self.segments.partition_point(|s| s.start <= j) - 1;
        &self.segments[at]
    }

    /// Source and element of its sequence at position `j` (checked).
    #[inline]
    fn element(&self, j: u64) -> (usize, u64) {
        let seg = self.segment_of(j);
        let (k, i) = seg.interleave.locate(j - seg.start);
        (k, self.consumed[k] + seg.before[k] + i)
    }

    /// The source of position `j` and the element of the source's sequence
    /// it shows.
    pub fn locate(&self, j: u64) -> Result<(usize, u64)> {
        let len = self.len();
        if j >= len {
            return Err(Error::Index(format!(
                "position must be in [0, {len}) (the epoch's length), got {j}"
            )));
        }
        Ok(self.element(j))
    }

    /// The id at position `j`.
    pub fn get(&self, j: u64) -> Result<u64> {
        let (k, s) = self.locate(j)?;
        Ok(self.mixture.sequence_id_at(k, s))
    }

    /// Writes the id at position `js[i]` to `out[i]`, for every `i`.
    pub fn fill(&self, js: &[i64], out: &mut [i64]) -> Result<()> {
        check_same_len(js, out)?;
        out.copy_from_slice(js);
        self.map_in_place(out)
    }

    /// Replaces every position in `values` by its id, in place; parallel
    /// for large inputs, with the same result on any thread count.
    pub fn map_in_place(&self, values: &mut [i64]) -> Result<()> {
        check_indices_below(values, self.len(), "js")?;
        parallel::try_for_each_piece(values, parallel::PIECE, |_, piece| self.map_slice(piece))
    }

    /// [`MixtureEpoch::map_in_place`] on this thread, for checked values.
    ///
    /// Works on batches of [`MAP_BATCH`] positions: locates each, groups
    /// the batch by source (and a source's elements by pass, when the batch
    /// spans several of its passes), runs each group through its pass's
    /// cipher in one vectorised call and its source's ids in one
    /// [`Selection`](crate::space::Selection) lookup, then puts the ids
    /// back in place. The same ids as [`MixtureEpoch::get`] on each
    /// position; memory O(`MAP_BATCH` + K), reserved first (an error when
    /// it is not there).
    pub(crate) fn map_slice(&self, values: &mut [i64]) -> Result<()> {
        let batch = values.len().min(MAP_BATCH);
        let mut work = BatchBuffers::try_new(self.consumed.len(), batch).ok_or_else(|| {
            Error::Memory(format!(
                "cannot allocate the buffers to map {batch} positions of a mixture: \
                 not enough memory"
            ))
        })?;
        for batch in values.chunks_mut(MAP_BATCH) {
            self.map_batch(batch, &mut work);
        }
        Ok(())
    }

    fn map_batch(&self, batch: &mut [i64], work: &mut BatchBuffers) {
        // Each position's source, and its element of the source's sequence
        // (a u64 kept in the i64 slot).
        work.keys.clear();
        work.keys.resize(batch.len(), 0);
        if let [only] = self.segments.as_slice() {
            only.interleave.locate_in_place(batch, &mut work.keys);
            for (v, &k) in batch.iter_mut().zip(&work.keys) {
                *v = (self.consumed[k] + *v as u64) as i64;
            }
        } else {
            for (v, key) in batch.iter_mut().zip(work.keys.iter_mut()) {
                let (k, element) = self.element(*v as u64);
                (*key, *v) = (k, element as i64);
            }
        }
        let num_sources = self.consumed.len();
        counting_order(
            &work.keys,
            batch,
            num_sources,
            &mut work.starts,
            &mut work.order,
            &mut work.group,
        );
        let BatchBuffers {
            starts,
            group,
            pass_keys,
            pass_starts,
            pass_order,
            scratch,
            ..
        } = work;
        for k in 0..num_sources {
            let elements = &mut group[starts[k]..starts[k + 1]];
            if elements.is_empty() {
                continue;
            }
            let n = self.mixture.source_len(k);
            let first_pass = elements.iter().map(|&s| s as u64).min().unwrap_or(0) / n;
            let last_pass = elements.iter().map(|&s| s as u64).max().unwrap_or(0) / n;
            if first_pass == last_pass {
                self.apply_pass(k, first_pass, elements);
            } else if last_pass - first_pass < elements.len() as u64 {
                // Several passes: by pass, each run through its cipher.
                pass_keys.clear();
                pass_keys.extend(
                    elements
                        .iter()
                        .map(|&s| (s as u64 / n - first_pass) as usize),
                );
                let num_passes = (last_pass - first_pass + 1) as usize;
                counting_order(
                    pass_keys,
                    elements,
                    num_passes,
                    pass_starts,
                    pass_order,
                    scratch,
                );
                for (d, run) in pass_starts.windows(2).enumerate() {
                    self.apply_pass(k, first_pass + d as u64, &mut scratch[run[0]..run[1]]);
                }
                for (&t, &id) in pass_order.iter().zip(scratch.iter()) {
                    elements[t] = id;
                }
            } else {
                // More passes than elements: one cipher for each element.
                for e in elements.iter_mut() {
                    *e = self.mixture.sequence_id_at(k, *e as u64) as i64;
                }
            }
        }
        for (&slot, &id) in work.order.iter().zip(work.group.iter()) {
            batch[slot] = id;
        }
    }

    /// Replaces elements `elements` of source `k`'s sequence, all in pass
    /// `p`, by their ids.
    fn apply_pass(&self, k: usize, p: u64, elements: &mut [i64]) {
        if elements.is_empty() {
            return;
        }
        let n = self.mixture.source_len(k);
        let base = p * n;
        elements
            .iter_mut()
            .for_each(|e| *e = (*e as u64 - base) as i64);
        self.mixture.pass(k, p).apply_in_place(elements);
        match &*self.mixture.sources {
            Sources::Sizes { offsets, .. } => {
                let offset = offsets[k] as i64;
                elements.iter_mut().for_each(|e| *e += offset);
            }
            Sources::Selections(s) => s[k].map_slice(elements),
        }
    }

    /// Writes the source of position `js[i]` to `out[i]`, for every `i`
    /// (for per-source loss logging).
    pub fn fill_sources(&self, js: &[i64], out: &mut [i64]) -> Result<()> {
        check_same_len(js, out)?;
        check_indices_below(js, self.len(), "js")?;
        for (o, &j) in out.iter_mut().zip(js) {
            let seg = self.segment_of(j as u64);
            *o = seg.interleave.locate(j as u64 - seg.start).0 as i64;
        }
        Ok(())
    }
}

/// Positions per batch of [`MixtureEpoch::map_slice`].
pub(crate) const MAP_BATCH: usize = 8192;

/// The buffers of [`MixtureEpoch::map_slice`], reused from batch to batch.
struct BatchBuffers {
    /// Each position's source.
    keys: Vec<usize>,
    /// Where each source's run starts in `order` (K + 1 entries).
    starts: Vec<usize>,
    /// The batch's slots, grouped by source.
    order: Vec<usize>,
    /// The sequence elements (then ids) of `order`'s slots.
    group: Vec<i64>,
    /// The same three for one source's elements grouped by pass.
    pass_keys: Vec<usize>,
    pass_starts: Vec<usize>,
    pass_order: Vec<usize>,
    scratch: Vec<i64>,
}

impl BatchBuffers {
    /// Buffers for batches of up to `batch` positions, each reserved at the
    /// most a batch needs (so that no batch grows one: a failed growth would
    /// abort the process); None when the memory is not there.
    fn try_new(num_sources: usize, batch: usize) -> Option<BatchBuffers> {
        fn room<T>(n: usize) -> Option<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).ok()?;
            Some(v)
        }
        // A counting order holds one slot more than its keys; a source's
        // passes in one batch are fewer than its elements there.
        Some(BatchBuffers {
            keys: room(batch)?,
            starts: room(num_sources + 1)?,
            order: room(batch + 1)?,
            group: room(batch + 1)?,
            pass_keys: room(batch)?,
            pass_starts: room(batch + 1)?,
            pass_order: room(batch + 1)?,
            scratch: room(batch + 1)?,
        })
    }
}

/// Keys up to which [`counting_order`] compacts once per key instead of
/// counting.
const COMPACT_KEYS: usize = 8;

/// A stable sort of `0..keys.len()` by key (each below `num_keys`): `order`
/// gets the indices, key by key, `sorted` the `values` at them, and
/// `starts[d]..starts[d + 1]` is key `d`'s run.
///
/// For a few keys, one pass a key keeps that key's elements without a
/// branch (a counting sort's counters, in memory, would chain consecutive
/// equal keys through store-to-load forwarding); for more, a counting sort.
fn counting_order(
    keys: &[usize],
    values: &[i64],
    num_keys: usize,
    starts: &mut Vec<usize>,
    order: &mut Vec<usize>,
    sorted: &mut Vec<i64>,
) {
    if num_keys <= COMPACT_KEYS {
        let len = keys.len();
        starts.clear();
        starts.push(0);
        // One slot more: each step writes at `at`, then keeps it or not.
        order.clear();
        order.resize(len + 1, 0);
        sorted.clear();
        sorted.resize(len + 1, 0);
        let mut at = 0;
        for d in 0..num_keys {
            for (i, (&key, &v)) in keys.iter().zip(values).enumerate() {
                order[at] = i;
                sorted[at] = v;
                at += usize::from(key == d);
            }
            starts.push(at);
        }
        order.truncate(len);
        sorted.truncate(len);
        return;
    }
    starts.clear();
    starts.resize(num_keys + 1, 0);
    for &d in keys {
        starts[d + 1] += 1;
    }
    for d in 0..num_keys {
        starts[d + 1] += starts[d];
    }
    order.clear();
    order.resize(keys.len(), 0);
    sorted.clear();
    sorted.resize(keys.len(), 0);
    // `starts[d]` walks along key d's run, then is put back.
    for (i, (&d, &v)) in keys.iter().zip(values).enumerate() {
        order[starts[d]] = i;
        sorted[starts[d]] = v;
        starts[d] += 1;
    }
    for d in (1..=num_keys).rev() {
        starts[d] = starts[d - 1];
    }
    if let Some(first) = starts.first_mut() {
        *first = 0;
    }
}

fn check_same_len(js: &[i64], out: &[i64]) -> Result<()> {
    if js.len() != out.len() {
        return Err(Error::Value(format!(
            "out must have the length of js ({}), got {}",
            js.len(),
            out.len()
        )));
    }
    Ok(())
}
