//! Selections: a set of ids of a store, with random access to its `j`-th id.
//!
//! Four representations, each with its own cost:
//!
//! | built by | memory | `get(j)` |
//! |---|---|---|
//! | [`Selection::from_ranges`] | O(ranges) | O(log ranges) |
//! | [`Selection::from_mask`] | N/8 bytes + 4.7% | O(log N) |
//! | [`Selection::from_indices`] | the caller's array, shared | O(1) |
//! | [`crate::space::random_split`] | O(1) (a cipher) | O(1) |
//!
//! Ranges and masks hold their ids in ascending order. Indices keep the
//! caller's order: `get(j)` is `ids[j]`, so the array can be shared with the
//! caller without a copy (a plan permutes the selection anyway, so its order
//! only shows in `get` and `to_vec`). The parts of a random split are in the
//! order of their keyed permutation.

use crate::buffer::{prefetch, prefetch_once, vec_with_capacity, zeroed_ids};
use crate::cipher::Cipher;
use crate::error::{Error, Result};
use crate::parallel;
use crate::space::mask::BitMask;
use crate::space::ranges::{check_num_samples, Ranges};
use std::sync::Arc;

/// An id array shared with its owner (e.g. a numpy array kept alive by the
/// bindings): never copied by a selection.
pub type SharedIds = Arc<dyn AsRef<[i64]> + Send + Sync>;

/// Ids given as an array, in the caller's order.
#[derive(Clone)]
pub struct Indices {
    ids: SharedIds,
    ascending: bool,
}

impl std::fmt::Debug for Indices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Indices")
            .field("len", &self.ids().len())
            .field("ascending", &self.ascending)
            .finish()
    }
}

impl Indices {
    /// The ids, in the caller's order.
    pub fn ids(&self) -> &[i64] {
        (*self.ids).as_ref()
    }
}

/// Part of a random split: ids `perm(start + j)` for `j < len` of one keyed
/// permutation `perm` of the store.
#[derive(Debug, Clone)]
pub struct Permuted {
    seed: u64,
    start: u64,
    len: u64,
    cipher: Cipher,
}

impl Permuted {
    pub(crate) fn new(cipher: Cipher, seed: u64, start: u64, len: u64) -> Permuted {
        Permuted {
            seed,
            start,
            len,
            cipher,
        }
    }

    /// The split's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The first position of the part in the split's permutation.
    pub fn start(&self) -> u64 {
        self.start
    }
}

/// Which representation a selection has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SelectionKind {
    /// Sorted disjoint ranges.
    Ranges,
    /// A bit per id of the store.
    Mask,
    /// An id array, in the caller's order.
    Indices,
    /// A part of a random split.
    Permuted,
}

impl SelectionKind {
    /// The kind's name in messages.
    pub fn name(&self) -> &'static str {
        match self {
            SelectionKind::Ranges => "ranges",
            SelectionKind::Mask => "mask",
            SelectionKind::Indices => "indices",
            SelectionKind::Permuted => "random_split part",
        }
    }
}

#[derive(Debug, Clone)]
enum Repr {
    Ranges(Ranges),
    Mask(BitMask),
    Indices(Indices),
    Permuted(Permuted),
}

/// A set of distinct ids of a store of `num_samples` ids, with random access
/// to its `j`-th id.
#[derive(Debug, Clone)]
pub struct Selection {
    num_samples: u64,
    repr: Repr,
}

impl Selection {
    /// Every id of a store of `num_samples`.
    pub fn all(num_samples: u64) -> Result<Selection> {
        Selection::from_ranges(&[(0, num_samples)], num_samples)
    }

    /// The ids of the ranges `[start, stop)`: sorted by start, disjoint
    /// (touching is fine), inside `[0, num_samples]`; empty ranges hold
    /// nothing. Memory O(ranges).
    pub fn from_ranges(ranges: &[(u64, u64)], num_samples: u64) -> Result<Selection> {
        Ok(Selection {
            num_samples,
            repr: Repr::Ranges(Ranges::new(ranges, num_samples)?),
        })
    }

    /// The ids `i` with `mask[i]`, of a store of `mask.len()` ids.
    pub fn from_mask(mask: &[bool]) -> Result<Selection> {
        check_num_samples(mask.len() as u64)?;
        Ok(Selection {
            num_samples: mask.len() as u64,
            repr: Repr::Mask(BitMask::from_bools(mask)?),
        })
    }

    /// The ids whose bit is set in `words` (id `i` is bit `i % 64` of word
    /// `i / 64`), of a store of `num_samples` ids: `ceil(num_samples / 64)`
    /// words, no bit set at or beyond `num_samples`.
    pub fn from_mask_words(words: Vec<u64>, num_samples: u64) -> Result<Selection> {
        check_num_samples(num_samples)?;
        Ok(Selection {
            num_samples,
            repr: Repr::Mask(BitMask::from_words(words, num_samples)?),
        })
    }

    /// The ids `ids`, in this order, of a store of `num_samples` ids: each in
    /// `[0, num_samples)`, no two equal.
    pub fn from_indices(ids: Vec<i64>, num_samples: u64) -> Result<Selection> {
        Selection::from_shared_indices(Arc::new(ids), num_samples)
    }

    /// [`Selection::from_indices`] over an array shared with its owner, kept
    /// without a copy. Checking it reads it once; checking an array that is
    /// not ascending reads it about nine times more at most, with a
    /// temporary of an eighth of its size (64 MiB at least; see
    /// `space::distinct`).
    pub fn from_shared_indices(ids: SharedIds, num_samples: u64) -> Result<Selection> {
        check_num_samples(num_samples)?;
        let ascending = check_indices((*ids).as_ref(), num_samples)?;
        Ok(Selection {
            num_samples,
            repr: Repr::Indices(Indices { ids, ascending }),
        })
    }

    pub(crate) fn from_permuted(part: Permuted, num_samples: u64) -> Selection {
        Selection {
            num_samples,
            repr: Repr::Permuted(part),
        }
    }

    /// The store's size: every id is below it.
    pub fn num_samples(&self) -> u64 {
        self.num_samples
    }

    /// The number of ids.
    pub fn len(&self) -> u64 {
        match &self.repr {
            Repr::Ranges(r) => r.len(),
            Repr::Mask(m) => m.count_ones(),
            Repr::Indices(i) => i.ids().len() as u64,
            Repr::Permuted(p) => p.len,
        }
    }

    /// True when no id is selected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The representation.
    pub fn kind(&self) -> SelectionKind {
        match &self.repr {
            Repr::Ranges(_) => SelectionKind::Ranges,
            Repr::Mask(_) => SelectionKind::Mask,
            Repr::Indices(_) => SelectionKind::Indices,
            Repr::Permuted(_) => SelectionKind::Permuted,
        }
    }

    /// The normalised ranges of a range selection (non-empty, sorted, not
    /// touching).
    pub fn as_ranges(&self) -> Option<&[(u64, u64)]> {
        match &self.repr {
            Repr::Ranges(r) => Some(r.ranges()),
            _ => None,
        }
    }

    /// The words of a mask selection (see [`Selection::from_mask_words`]).
    pub fn as_mask_words(&self) -> Option<&[u64]> {
        match &self.repr {
            Repr::Mask(m) => Some(m.words()),
            _ => None,
        }
    }

    /// The ids of an index selection, in the caller's order.
    pub fn as_indices(&self) -> Option<&[i64]> {
        match &self.repr {
            Repr::Indices(i) => Some(i.ids()),
            _ => None,
        }
    }

    /// The split of a random-split part: its seed, its first position in
    /// the split's permutation and its length.
    pub fn as_split_part(&self) -> Option<(u64, u64, u64)> {
        match &self.repr {
            Repr::Permuted(p) => Some((p.seed, p.start, p.len)),
            _ => None,
        }
    }

    /// Whether `get` is ascending in `j` (ranges and masks always; indices
    /// when the caller gave them so; random-split parts only when short).
    pub fn is_ascending(&self) -> bool {
        match &self.repr {
            Repr::Ranges(_) | Repr::Mask(_) => true,
            Repr::Indices(i) => i.ascending,
            Repr::Permuted(p) => p.len <= 1,
        }
    }

    /// The `j`-th id, for `j < len()`.
    pub fn get(&self, j: u64) -> Result<u64> {
        let len = self.len();
        if j >= len {
            return Err(Error::Index(format!(
                "index must be in [0, {len}) (the selection's length), got {j}"
            )));
        }
        Ok(self.id_at(j))
    }

    /// The `j`-th id; `j < len()` is the caller's contract.
    #[inline]
    pub(crate) fn id_at(&self, j: u64) -> u64 {
        match &self.repr {
            Repr::Ranges(r) => r.id_at(j),
            Repr::Mask(m) => m.select(j),
            Repr::Indices(i) => i.ids()[j as usize] as u64,
            Repr::Permuted(p) => p.cipher.apply(p.start + j),
        }
    }

    /// Whether `id` is selected: O(1) for masks and random-split parts,
    /// O(log ranges) for ranges, O(log len) for ascending indices, O(len)
    /// for other indices.
    pub fn contains(&self, id: u64) -> bool {
        if id >= self.num_samples {
            return false;
        }
        match &self.repr {
            Repr::Ranges(r) => {
                let k = r.ranges().partition_point(|&(_, stop)| stop <= id);
                r.ranges().get(k).is_some_and(|&(start, _)| start <= id)
            }
            Repr::Mask(m) => m.bit(id),
            Repr::Indices(i) if i.ascending => i.ids().binary_search(&(id as i64)).is_ok(),
            Repr::Indices(i) => i.ids().contains(&(id as i64)),
            Repr::Permuted(p) => {
                let at = p.cipher.invert(id);
                at >= p.start && at - p.start < p.len
            }
        }
    }

    /// Replaces every id in `values` (each in `[0, num_samples)`) by its
    /// index in the selection, or -1 when it is not selected: the inverse
    /// of [`Selection::map_in_place`]. O(1) for masks and random-split parts,
    /// O(log ranges) for ranges, O(log len) for ascending indices; other
    /// indices read the array once for the whole batch.
    pub fn index_of_slice(&self, values: &mut [i64]) {
        match &self.repr {
            Repr::Ranges(r) => values.iter_mut().for_each(|v| {
                let id = *v as u64;
                let k = r.ranges().partition_point(|&(_, stop)| stop <= id);
                *v = match r.ranges().get(k) {
                    Some(&(start, _)) if start <= id => (r.before(k) + id - start) as i64,
                    _ => -1,
                };
            }),
            Repr::Mask(m) => values.iter_mut().for_each(|v| {
                let id = *v as u64;
                *v = if m.bit(id) { m.rank(id) as i64 } else { -1 };
            }),
            Repr::Indices(i) if i.ascending => values.iter_mut().for_each(|v| {
                *v = i.ids().binary_search(v).map_or(-1, |j| j as i64);
            }),
            Repr::Indices(i) => {
                let mut wanted: std::collections::HashMap<i64, Vec<usize>> =
                    std::collections::HashMap::with_capacity(values.len());
                for (k, &id) in values.iter().enumerate() {
                    wanted.entry(id).or_default().push(k);
                }
                values.iter_mut().for_each(|v| *v = -1);
                for (j, id) in i.ids().iter().enumerate() {
                    if let Some(at) = wanted.get(id) {
                        at.iter().for_each(|&k| values[k] = j as i64);
                    }
                }
            }
            Repr::Permuted(p) => values.iter_mut().for_each(|v| {
                let at = p.cipher.invert(*v as u64);
                *v = if at >= p.start && at - p.start < p.len {
                    (at - p.start) as i64
                } else {
                    -1
                };
            }),
        }
    }

    /// Writes the `js[i]`-th id to `out[i]`, for every `i`; every `js[i]`
    /// must be in `[0, len())`. Parallel for large inputs, with the same
    /// result on any thread count.
    pub fn fill(&self, js: &[i64], out: &mut [i64]) -> Result<()> {
        if js.len() != out.len() {
            return Err(Error::Value(format!(
                "out must have the length of js ({}), got {}",
                js.len(),
                out.len()
            )));
        }
        out.copy_from_slice(js);
        self.map_in_place(out)
    }

    /// Replaces every index `values[i]` (in `[0, len())`) by its id, in
    /// place: the step after an order, for a plan over a selection.
    pub fn map_in_place(&self, values: &mut [i64]) -> Result<()> {
        check_indices_below(values, self.len(), "js")?;
        parallel::for_each_piece(values, parallel::PIECE, |_, piece| self.map_slice(piece));
        Ok(())
    }

    /// [`Selection::map_in_place`] on this thread, for checked values.
    pub(crate) fn map_slice(&self, values: &mut [i64]) {
        match &self.repr {
            Repr::Permuted(p) => {
                values.iter_mut().for_each(|v| *v += p.start as i64);
                p.cipher.apply_in_place(values);
            }
            Repr::Indices(i) => gather(i.ids(), values),
            Repr::Mask(m) => m.select_in_place(values),
            _ => values
                .iter_mut()
                .for_each(|v| *v = self.id_at(*v as u64) as i64),
        }
    }

    /// Every id, in the selection's order.
    pub fn to_vec(&self) -> Result<Vec<i64>> {
        let mut out = zeroed_ids(self.len(), "the selection's ids")?;
        match &self.repr {
            Repr::Ranges(r) => {
                let mut at = 0;
                for &(start, stop) in r.ranges() {
                    for (slot, id) in out[at..].iter_mut().zip(start..stop) {
                        *slot = id as i64;
                    }
                    at += (stop - start) as usize;
                }
            }
            Repr::Mask(m) => {
                let mut at = 0;
                for (w, &word) in m.words().iter().enumerate() {
                    let mut bits = word;
                    while bits != 0 {
                        out[at] = (w as u64 * 64 + u64::from(bits.trailing_zeros())) as i64;
                        bits &= bits - 1;
                        at += 1;
                    }
                }
            }
            _ => {
                parallel::for_each_piece(&mut out, parallel::PIECE, |offset, piece| {
                    for (i, v) in piece.iter_mut().enumerate() {
                        *v = (offset + i) as i64;
                    }
                    self.map_slice(piece);
                });
            }
        }
        Ok(out)
    }

    /// The same ids as a mask selection (N/8 bytes), for set operations
    /// with masks.
    pub fn to_mask(&self) -> Result<Selection> {
        if let Repr::Mask(_) = self.repr {
            return Ok(self.clone());
        }
        let mut words = BitMask::clear_words(self.num_samples)?;
        let set = |words: &mut [u64], id: u64| words[(id / 64) as usize] |= 1 << (id % 64);
        match &self.repr {
            Repr::Ranges(r) => r
                .ranges()
                .iter()
                .for_each(|&(a, b)| set_range(&mut words, a, b)),
            Repr::Indices(i) => i.ids().iter().for_each(|&id| set(&mut words, id as u64)),
            _ => {
                let mut buf = vec_with_capacity(parallel::PIECE, "a buffer")?;
                let len = self.len();
                let mut from = 0;
                while from < len {
                    let to = len.min(from + parallel::PIECE as u64);
                    buf.clear();
                    buf.extend(from as i64..to as i64);
                    self.map_slice(&mut buf);
                    buf.iter().for_each(|&id| set(&mut words, id as u64));
                    from = to;
                }
            }
        }
        Ok(Selection {
            num_samples: self.num_samples,
            repr: Repr::Mask(BitMask::from_words_unchecked(words, self.num_samples)?),
        })
    }

    /// The ids in both (`&`): two range selections or two masks of one store.
    pub fn intersection(&self, other: &Selection) -> Result<Selection> {
        self.combine(other, "&", |a, b| a.intersection(b), |a, b| a & b)
    }

    /// The ids in either (`|`): two range selections or two masks of one store.
    pub fn union(&self, other: &Selection) -> Result<Selection> {
        self.combine(other, "|", |a, b| a.union(b), |a, b| a | b)
    }

    /// The ids in `self` but not in `other` (`-`): two range selections or
    /// two masks of one store.
    pub fn difference(&self, other: &Selection) -> Result<Selection> {
        self.combine(other, "-", |a, b| a.difference(b), |a, b| a & !b)
    }

    /// The ids of the store not selected (`~`): a range selection or a mask.
    pub fn complement(&self) -> Result<Selection> {
        let repr = match &self.repr {
            Repr::Ranges(r) => Repr::Ranges(r.complement()?),
            Repr::Mask(m) => Repr::Mask(m.complement()?),
            _ => {
                return Err(Error::Value(format!(
                    "'~' needs a ranges or mask selection, got {}: convert it with to_mask() first",
                    self.kind().name()
                )))
            }
        };
        Ok(Selection {
            num_samples: self.num_samples,
            repr,
        })
    }

    fn combine(
        &self,
        other: &Selection,
        op: &str,
        ranges: impl Fn(&Ranges, &Ranges) -> Result<Ranges>,
        words: impl Fn(u64, u64) -> u64,
    ) -> Result<Selection> {
        if self.num_samples != other.num_samples {
            return Err(Error::Value(format!(
                "'{op}' needs two selections of one store, got num_samples {} and {}",
                self.num_samples, other.num_samples
            )));
        }
        let repr = match (&self.repr, &other.repr) {
            (Repr::Ranges(a), Repr::Ranges(b)) => Repr::Ranges(ranges(a, b)?),
            (Repr::Mask(a), Repr::Mask(b)) => Repr::Mask(a.combine(b, words)?),
            _ => {
                return Err(Error::Value(format!(
                    "'{op}' needs two ranges or two mask selections, got {} and {}: \
                     convert both with to_mask() first",
                    self.kind().name(),
                    other.kind().name()
                )))
            }
        };
        Ok(Selection {
            num_samples: self.num_samples,
            repr,
        })
    }
}

/// Sets bits `[a, b)` of `words`, a word at a time.
fn set_range(words: &mut [u64], a: u64, b: u64) {
    let mut i = a;
    while i < b {
        let (w, bit) = ((i / 64) as usize, i % 64);
        let width = (64 - bit).min(b - i);
        words[w] |= (u64::MAX >> (64 - width)) << bit;
        i += width;
    }
}

/// How many reads ahead [`gather`] prefetches: enough to keep a core's
/// misses in flight (16 to 64 measured within 5% of each other, 32 the
/// fastest), few enough that a line arrives before it is evicted.
const GATHER_AHEAD: usize = 32;

/// From this size on, [`gather`]'s prefetches take the non-temporal hint
/// ([`prefetch_once`]). A smaller array stays in the last-level cache from
/// one call to the next, which that hint defeats: a rank's share over an
/// index array of 9 * 10^6 ids (72 MB) took 0.011 s with it against 0.009
/// s without, of 3.6 * 10^7 ids (288 MB) the same both ways, of 9 * 10^7
/// ids (720 MB) 0.13 s against 0.15 s.
const GATHER_ONCE_MIN_BYTES: usize = 1 << 28;

/// Replaces each index `values[i]` (checked below `ids.len()`) by
/// `ids[values[i]]`. The reads are random over the caller's array, which a
/// large selection holds outside the cache, so each is prefetched
/// [`GATHER_AHEAD`] positions before its use.
fn gather(ids: &[i64], values: &mut [i64]) {
    if std::mem::size_of_val(ids) >= GATHER_ONCE_MIN_BYTES {
        gather_prefetching(ids, values, prefetch_once);
    } else {
        gather_prefetching(ids, values, prefetch);
    }
}

#[inline(always)]
fn gather_prefetching(ids: &[i64], values: &mut [i64], fetch: impl Fn(&i64)) {
    for i in 0..values.len() {
        if let Some(&ahead) = values.get(i + GATHER_AHEAD) {
            fetch(&ids[ahead as usize]);
        }
        values[i] = ids[values[i] as usize];
    }
}

/// Checks that every value is in `[0, len)`, naming the first that is not
/// as `name[i]`.
pub(crate) fn check_indices_below(values: &[i64], len: u64, name: &str) -> Result<()> {
    if let Some(i) = values.iter().position(|&v| v < 0 || v as u64 >= len) {
        return Err(Error::Index(format!(
            "{name}[{i}] must be in [0, {len}), got {}",
            values[i]
        )));
    }
    Ok(())
}

/// Checks an id array (inside the store, distinct); returns whether it is
/// ascending.
fn check_indices(ids: &[i64], num_samples: u64) -> Result<bool> {
    if let Some(i) = ids.iter().position(|&v| v < 0 || v as u64 >= num_samples) {
        return Err(Error::Value(format!(
            "ids[{i}] = {} must be in [0, {num_samples}) (num_samples = {num_samples})",
            ids[i]
        )));
    }
    if ids.windows(2).all(|w| w[0] < w[1]) {
        return Ok(true);
    }
    let budget = super::distinct::budget_for(ids.len());
    if let Some(i) = super::distinct::first_repeat(ids, num_samples, budget)? {
        return Err(super::distinct::repeated_error(ids, i));
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_keep_the_callers_order_and_refuse_repeats_and_strays() {
        let sel = Selection::from_indices(vec![5, 1, 9], 10).unwrap();
        assert_eq!(sel.to_vec().unwrap(), vec![5, 1, 9]);
        assert!(!sel.is_ascending());
        assert!(sel.contains(9) && !sel.contains(2));
        let err = Selection::from_indices(vec![3, 1, 3], 10).unwrap_err();
        assert!(
            err.to_string().contains("ids[2] = 3 appears earlier"),
            "{err}"
        );
        // The sorted-copy check (a large store) names the same element.
        let err = Selection::from_indices(vec![3, 1, 3], 1 << 40).unwrap_err();
        assert!(
            err.to_string().contains("ids[2] = 3 appears earlier"),
            "{err}"
        );
        let err = Selection::from_indices(vec![0, 10], 10).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("ids[1] = 10 must be in [0, 10)"),
            "{err}"
        );
        assert!(Selection::from_indices(vec![-1], 10).is_err());
    }

    #[test]
    fn indices_map_each_position_to_its_id() {
        // Lengths around the gather's prefetch distance, and the whole
        // array: every position is looked up, the last ones (with nothing
        // left to prefetch) too.
        let ids: Vec<i64> = (0..5000).map(|i| (i * 7919) % 5003).collect();
        let sel = Selection::from_indices(ids.clone(), 5003).unwrap();
        for len in [
            0,
            1,
            GATHER_AHEAD - 1,
            GATHER_AHEAD,
            GATHER_AHEAD + 1,
            4999,
            5000,
        ] {
            let js: Vec<i64> = (0..len as i64).map(|j| (j * 31 + 7) % 5000).collect();
            let expected: Vec<i64> = js.iter().map(|&j| ids[j as usize]).collect();
            let mut values = js.clone();
            sel.map_in_place(&mut values).unwrap();
            assert_eq!(values, expected, "{len}");
            // The prefetch of arrays too large for the cache, on a small one.
            let mut values = js.clone();
            gather_prefetching(&ids, &mut values, prefetch_once);
            assert_eq!(values, expected, "{len}, read once");
        }
    }

    #[test]
    fn get_names_the_length_and_fill_names_the_bad_element() {
        let sel = Selection::from_ranges(&[(2, 4)], 10).unwrap();
        assert_eq!(sel.get(1).unwrap(), 3);
        let err = sel.get(2).unwrap_err();
        assert!(matches!(err, Error::Index(_)));
        assert!(err.to_string().contains("[0, 2)"), "{err}");
        let mut out = [0; 2];
        let err = sel.fill(&[0, 5], &mut out).unwrap_err();
        assert_eq!(err, Error::Index("js[1] must be in [0, 2), got 5".into()));
        assert!(sel.fill(&[0], &mut out).is_err());
    }

    #[test]
    fn mixed_set_operations_say_what_to_convert() {
        let r = Selection::from_ranges(&[(0, 2)], 4).unwrap();
        let m = Selection::from_mask(&[true, false, true, false]).unwrap();
        let err = r.intersection(&m).unwrap_err().to_string();
        assert!(
            err.contains("ranges and mask") && err.contains("to_mask()"),
            "{err}"
        );
        let both = r.to_mask().unwrap().intersection(&m).unwrap();
        assert_eq!(both.to_vec().unwrap(), vec![0]);
        let other = Selection::from_ranges(&[(0, 2)], 5).unwrap();
        assert!(r
            .union(&other)
            .unwrap_err()
            .to_string()
            .contains("one store"));
    }
}
