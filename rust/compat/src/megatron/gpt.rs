//! The document, sample and shuffle indices of megatron-core's `GPTDataset`.
//!
//! - The document index: the exposed documents repeated once per epoch, as
//!   int32, shuffled by the run's `RandomState`; with a separate final epoch,
//!   the first epochs shuffled together and the last one on its own, after.
//! - The sample index (`helpers_cpp.build_sample_idx`): the documents of the
//!   document index laid end to end, cut every `seq_length` tokens; entry `s`
//!   is the (position in the document index, offset in that document) where
//!   sample `s` starts. A sample spans `seq_length + add_extra` tokens, so
//!   with the extra token consecutive samples share one. The walk stops at
//!   the first document whose end reaches the sample's last token; a sample
//!   that runs past the last document is recorded at that document's length
//!   less `add_extra`.
//! - The shuffle index: `0..num_samples` shuffled by the same `RandomState`
//!   (two ranges shuffled apart with a separate final epoch), as uint32
//!   below `2^32 - 2` samples and int64 from there.

use super::random_state::RandomState;
use epochplan_core::buffer::{advise_huge_pages, prefetch, vec_with_capacity, ZeroBits};
use epochplan_core::{Error, Result};

/// Document-index positions between a prefetch of a size and its use.
const AHEAD: usize = 32;

/// An empty vector with room for `count` items, its memory advised to use
/// huge pages: an index is shuffled or filled at random places, and with
/// 4 KiB pages each access would also miss the TLB (and each first touch
/// fault).
fn index_buffer<T>(count: usize, what: &str) -> Result<Vec<T>> {
    let mut items = vec_with_capacity(count, what)?;
    advise_huge_pages(items.spare_capacity_mut());
    Ok(items)
}

/// An integer type of the sample index (int32 or int64).
pub trait SampleInt: Copy + Send + ZeroBits {
    /// The largest value the type holds.
    const MAX: i64;
    /// `value`, which the caller checked fits.
    fn from_i64(value: i64) -> Self;
}

impl SampleInt for i32 {
    const MAX: i64 = i32::MAX as i64;
    fn from_i64(value: i64) -> i32 {
        value as i32
    }
}

impl SampleInt for i64 {
    const MAX: i64 = i64::MAX;
    fn from_i64(value: i64) -> i64 {
        value
    }
}

/// The number of samples `build_sample_idx` makes (rows of its output less
/// one): `(num_epochs * tokens_per_epoch - add_extra) / seq_length`, or, when
/// the last partial sequence is kept, the ceiling of that quotient taken in
/// single precision, as the C++ computes it.
pub fn num_samples(
    seq_length: i32,
    num_epochs: i32,
    tokens_per_epoch: i64,
    drop_last_partial_sequence: bool,
    add_extra: i32,
) -> Result<i64> {
    let tokens = i64::from(num_epochs)
        .checked_mul(tokens_per_epoch)
        .ok_or_else(|| {
            Error::Overflow(format!(
                "num_epochs * tokens_per_epoch must fit in int64, got {num_epochs} * {tokens_per_epoch}"
            ))
        })?
        - i64::from(add_extra);
    Ok(if drop_last_partial_sequence {
        tokens / i64::from(seq_length)
    } else {
        ((tokens as f32) / (seq_length as f32)).ceil() as i64
    })
}

/// `helpers_cpp.build_sample_idx_int32` / `_int64`: the flat `(num_samples +
/// 1) x 2` sample index. Checks what the C++ asserts or reads unchecked:
/// `seq_length > 1`, `num_epochs > 0`, `tokens_per_epoch > 1`, every visited
/// document id inside `sizes` and non-negative sizes.
pub fn build_sample_idx<T: SampleInt>(
    sizes: &[i32],
    document_idx: &[i32],
    seq_length: i32,
    num_epochs: i32,
    tokens_per_epoch: i64,
    drop_last_partial_sequence: bool,
    add_extra: i32,
) -> Result<Vec<T>> {
    let cut = SampleCut {
        seq_length,
        num_epochs,
        tokens_per_epoch,
        drop_last_partial_sequence,
        add_extra,
    };
    let count = cut.samples::<T>(document_idx.len())?;
    let size_of = |position: usize| {
        checked_size(
            sizes,
            document_idx[position],
            ("document_idx", position),
            "sizes",
        )
    };
    let prefetch_size = |position: usize| {
        if let Some(size) = document_idx
            .get(position + AHEAD)
            .and_then(|&doc| usize::try_from(doc).ok())
            .and_then(|d| sizes.get(d))
        {
            prefetch(size);
        }
    };
    cut.walk(count, document_idx.len(), size_of, prefetch_size)
}

/// `sizes[doc]`, checked: `doc` names a size (else the error names
/// `where.0[where.1] = doc` and the array `of`) and the size is not
/// negative.
pub(crate) fn checked_size(
    sizes: &[i32],
    doc: i32,
    (name, at): (&str, usize),
    of: &str,
) -> Result<i64> {
    let size = usize::try_from(doc)
        .ok()
        .and_then(|d| sizes.get(d))
        .ok_or_else(|| {
            Error::Value(format!(
                "{name}[{at}] = {doc} is not a document of {of} (0 to {})",
                sizes.len() as i64 - 1
            ))
        })?;
    if *size < 0 {
        return Err(Error::Value(format!(
            "{of}[{doc}] must be non-negative, got {size}"
        )));
    }
    Ok(i64::from(*size))
}

/// How `build_sample_idx` cuts the documents into samples.
#[derive(Clone, Copy, Debug)]
pub struct SampleCut {
    pub seq_length: i32,
    pub num_epochs: i32,
    pub tokens_per_epoch: i64,
    pub drop_last_partial_sequence: bool,
    /// `add_extra_token_to_sequence`: 0 or 1.
    pub add_extra: i32,
}

impl SampleCut {
    /// The number of samples cut from a document index of `documents`
    /// positions into a sample index of `T`, after the checks of what the
    /// C++ asserts or reads unchecked.
    pub fn samples<T: SampleInt>(&self, documents: usize) -> Result<usize> {
        let SampleCut {
            seq_length,
            num_epochs,
            tokens_per_epoch,
            drop_last_partial_sequence,
            add_extra,
        } = *self;
        if seq_length <= 1 {
            return Err(Error::Value(format!(
                "seq_length must be greater than 1, got {seq_length}"
            )));
        }
        if num_epochs <= 0 {
            return Err(Error::Value(format!(
                "num_epochs must be positive, got {num_epochs}"
            )));
        }
        if tokens_per_epoch <= 1 {
            return Err(Error::Value(format!(
                "tokens_per_epoch must be greater than 1, got {tokens_per_epoch}"
            )));
        }
        if !(0..=1).contains(&add_extra) {
            return Err(Error::Value(format!(
                "add_extra_token_to_sequence must be 0 or 1, got {add_extra}"
            )));
        }
        if documents == 0 {
            return Err(Error::Value("document_idx must not be empty".into()));
        }
        if T::MAX <= i64::from(i32::MAX) && documents as i64 > T::MAX {
            return Err(Error::Overflow(format!(
                "document_idx has {} entries, more than the int32 sample index holds; use int64",
                documents
            )));
        }
        let count = num_samples(
            seq_length,
            num_epochs,
            tokens_per_epoch,
            drop_last_partial_sequence,
            add_extra,
        )?;
        if count < 0 {
            return Err(Error::Value(format!(
                "the sample index would have {count} samples: tokens_per_epoch is too small"
            )));
        }
        usize::try_from(count)
            .map_err(|_| Error::Overflow(format!("{count} samples do not fit in memory")))
    }

    /// The flat `(samples + 1) x 2` index; `ahead(position)` is told each
    /// position as the walk reaches it, to prefetch what comes later.
    pub fn walk<T: SampleInt>(
        &self,
        samples: usize,
        documents: usize,
        size_of: impl Fn(usize) -> Result<i64>,
        ahead: impl Fn(usize),
    ) -> Result<Vec<T>> {
        let rows = samples
            .checked_add(1)
            .and_then(|r| r.checked_mul(2))
            .ok_or_else(|| Error::Overflow(format!("{samples} samples do not fit in memory")))?;
        let mut out: Vec<T> = index_buffer(rows, "the sample index")?;
        let last = documents - 1;
        let mut position = 0usize;
        let mut offset = 0i64;
        out.push(T::from_i64(0));
        out.push(T::from_i64(0));
        let extra = i64::from(self.add_extra);
        for _ in 0..samples {
            let mut remaining = i64::from(self.seq_length) + extra;
            loop {
                ahead(position);
                let length = size_of(position)? - offset;
                remaining -= length;
                if remaining <= 0 {
                    offset += remaining + length - extra;
                    break;
                }
                if position == last {
                    offset = size_of(position)? - extra;
                    break;
                }
                position += 1;
                offset = 0;
            }
            out.push(T::from_i64(position as i64));
            out.push(T::from_i64(offset));
        }
        Ok(out)
    }
}

/// `GPTDataset._get_num_tokens_per_epoch`: the tokens of `documents`, each a
/// document id of `sizes` (checked).
pub fn tokens_per_epoch(sizes: &[i32], documents: &[i32]) -> Result<i64> {
    let mut total = 0i64;
    for (j, &doc) in documents.iter().enumerate() {
        if let Some(ahead) = documents.get(j + AHEAD) {
            if let Some(size) = usize::try_from(*ahead).ok().and_then(|d| sizes.get(d)) {
                prefetch(size);
            }
        }
        let size = usize::try_from(doc)
            .ok()
            .and_then(|d| sizes.get(d))
            .ok_or_else(|| {
                Error::Value(format!(
                    "indices[{j}] = {doc} is not a document of sequence_lengths (0 to {})",
                    sizes.len() as i64 - 1
                ))
            })?;
        total += i64::from(*size);
    }
    Ok(total)
}

/// `_build_document_index`: `documents` once per epoch, shuffled by `state`;
/// with `separate_final_epoch` (and more than one epoch), the first
/// `num_epochs - 1` epochs shuffled together, then the last one alone.
pub fn build_document_index(
    documents: &[i32],
    num_epochs: usize,
    state: &mut RandomState,
    separate_final_epoch: bool,
) -> Result<Vec<i32>> {
    let total = documents
        .len()
        .checked_mul(num_epochs)
        .ok_or_else(|| Error::Overflow("the document index does not fit in memory".into()))?;
    let mut index: Vec<i32> = index_buffer(total, "the document index")?;
    for _ in 0..num_epochs {
        index.extend_from_slice(documents);
    }
    if !separate_final_epoch || num_epochs <= 1 {
        state.shuffle(&mut index);
    } else {
        let split = documents.len() * (num_epochs - 1);
        let (first, last) = index.split_at_mut(split);
        state.shuffle(first);
        state.shuffle(last);
    }
    Ok(index)
}

/// The shuffle index, typed as Megatron types it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShuffleIndex {
    /// Below `2^32 - 2` samples: uint32.
    U32(Vec<u32>),
    /// From `2^32 - 2` samples: int64.
    I64(Vec<i64>),
}

fn shuffled_ranges<T: Copy>(
    num_samples: usize,
    total_size: usize,
    state: &mut RandomState,
    of: impl Fn(usize) -> T,
) -> Result<Vec<T>> {
    let mut index: Vec<T> = index_buffer(total_size, "the shuffle index")?;
    index.extend((0..total_size).map(of));
    let (first, last) = index.split_at_mut(num_samples);
    state.shuffle(first);
    state.shuffle(last);
    Ok(index)
}

/// `_build_shuffle_index`: `[0, num_samples)` shuffled, then, when
/// `total_size` is larger, `[num_samples, total_size)` shuffled after it.
pub fn build_shuffle_index(
    num_samples: usize,
    total_size: usize,
    state: &mut RandomState,
) -> Result<ShuffleIndex> {
    if num_samples > total_size {
        return Err(Error::Value(format!(
            "num_samples must be at most total_size ({total_size}), got {num_samples}"
        )));
    }
    if (total_size as u64) < u64::from(u32::MAX) - 1 {
        Ok(ShuffleIndex::U32(shuffled_ranges(
            num_samples,
            total_size,
            state,
            |i| i as u32,
        )?))
    } else {
        Ok(ShuffleIndex::I64(shuffled_ranges(
            num_samples,
            total_size,
            state,
            |i| i as i64,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C++ walk as written, over the flat layout.
    fn reference(
        sizes: &[i32],
        doc_idx: &[i32],
        seq: i32,
        epochs: i32,
        tpe: i64,
        drop: bool,
        extra: i32,
    ) -> Vec<i64> {
        let n = num_samples(seq, epochs, tpe, drop, extra).unwrap();
        let mut out = vec![0i64, 0];
        let (mut d, mut off) = (0i64, 0i64);
        for _ in 0..n {
            let mut rem = i64::from(seq + extra);
            while rem != 0 {
                let len = i64::from(sizes[doc_idx[d as usize] as usize]) - off;
                rem -= len;
                if rem <= 0 {
                    off += rem + len - i64::from(extra);
                    rem = 0;
                } else {
                    if d as usize == doc_idx.len() - 1 {
                        off = i64::from(sizes[doc_idx[d as usize] as usize] - extra);
                        break;
                    }
                    d += 1;
                    off = 0;
                }
            }
            out.push(d);
            out.push(off);
        }
        out
    }

    #[test]
    fn the_walk_matches_the_cpp_loop() {
        let sizes = [5, 0, 9, 1, 3, 17, 2, 0, 8];
        let docs: Vec<i32> = (0..9).chain(0..9).collect();
        let tpe: i64 = sizes.iter().map(|&s| i64::from(s)).sum();
        for seq in [2, 3, 4, 7, 20] {
            for drop in [true, false] {
                for extra in [0, 1] {
                    let got: Vec<i64> =
                        build_sample_idx::<i64>(&sizes, &docs, seq, 2, tpe, drop, extra).unwrap();
                    let want = reference(&sizes, &docs, seq, 2, tpe, drop, extra);
                    assert_eq!(got, want, "seq {seq} drop {drop} extra {extra}");
                }
            }
        }
    }

    #[test]
    fn bad_inputs_are_errors_naming_the_argument() {
        let e = build_sample_idx::<i32>(&[4, 4], &[0, 2], 2, 1, 8, true, 1).unwrap_err();
        assert!(e.to_string().contains("document_idx[1] = 2"), "{e}");
        let e = build_sample_idx::<i32>(&[4, -1], &[0, 1], 2, 1, 8, true, 1).unwrap_err();
        assert!(e.to_string().contains("sizes[1]"), "{e}");
        let e = build_sample_idx::<i32>(&[4], &[0], 1, 1, 8, true, 1).unwrap_err();
        assert!(e.to_string().contains("seq_length"), "{e}");
    }

    #[test]
    fn shuffle_index_halves_are_permutations_of_their_ranges() {
        let mut state = RandomState::new(3);
        let ShuffleIndex::U32(ix) = build_shuffle_index(10, 15, &mut state).unwrap() else {
            panic!("small indices are uint32");
        };
        let mut first = ix[..10].to_vec();
        let mut last = ix[10..].to_vec();
        first.sort_unstable();
        last.sort_unstable();
        assert_eq!(first, (0..10).collect::<Vec<u32>>());
        assert_eq!(last, (10..15).collect::<Vec<u32>>());
    }
}
