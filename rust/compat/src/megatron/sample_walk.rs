//! The sample index walked on several threads, identical to the one-thread
//! walk of [`super::gpt::build_sample_idx`].
//!
//! With `cum(d)` the tokens of documents `0..=d` of the document index, the
//! walk's entry `s >= 1` is `(d, s * seq_length - cum(d - 1))` for the first
//! `d` with `cum(d) >= s * seq_length + add_extra` (each sample starts
//! `seq_length` tokens after the previous one), and `(last, size(last) -
//! add_extra)` when no document reaches that far. So the documents can be
//! cut into pieces: a first pass sums each piece's tokens (in parallel), and
//! each piece then writes the entries whose document falls in it, from its
//! own token offset, into its own part of the output.
//!
//! The one-thread walk reads only the documents it reaches, so an invalid
//! document id or a negative size past them is no error there; the first
//! pass here reads every document, and when it meets such a value it gives
//! up ([`walk`] returns `None`) and the caller walks on one thread, with the
//! one-thread walk's errors.

use super::gpt::SampleInt;
use epochplan_core::buffer::prefetch;
use epochplan_core::parallel;
use epochplan_core::Result;
use rayon::prelude::*;

/// Documents per piece.
const PIECE: usize = 1 << 18;
/// Documents between the prefetch of a size and its use.
const AHEAD: usize = 32;

/// The tokens of a piece of the document index; `None` for an id outside
/// `sizes` or a negative size.
fn piece_tokens(sizes: &[i32], docs: &[i32]) -> Option<i64> {
    let mut total = 0i64;
    for (j, &doc) in docs.iter().enumerate() {
        if let Some(&ahead) = docs.get(j + AHEAD) {
            if let Some(size) = usize::try_from(ahead).ok().and_then(|d| sizes.get(d)) {
                prefetch(size);
            }
        }
        let size = *usize::try_from(doc).ok().and_then(|d| sizes.get(d))?;
        if size < 0 {
            return None;
        }
        total += i64::from(size);
    }
    Some(total)
}

/// Entries `s >= 1` (of `count`) whose sample start plus `extra` is at most `tokens`.
fn entries_within(tokens: i64, seq: i64, extra: i64, count: i64) -> i64 {
    (tokens - extra).div_euclid(seq).clamp(0, count)
}

/// The flat sample index of `count` samples, or `None` when the documents
/// hold an invalid id or size (see the module's documentation).
pub fn walk<T: SampleInt>(
    sizes: &[i32],
    docs: &[i32],
    seq_length: i32,
    add_extra: i32,
    count: i64,
    out: &mut [T],
) -> Result<Option<()>> {
    let (seq, extra) = (i64::from(seq_length), i64::from(add_extra));
    let tokens: Vec<Option<i64>> = parallel::install(|| {
        docs.par_chunks(PIECE)
            .map(|p| piece_tokens(sizes, p))
            .collect()
    })?;
    let Some(tokens) = tokens.into_iter().collect::<Option<Vec<i64>>>() else {
        return Ok(None);
    };
    // Token offset of each piece, and the entries before it.
    let mut starts = Vec::with_capacity(tokens.len() + 1);
    let mut sum = 0i64;
    for t in &tokens {
        starts.push(sum);
        sum += t;
    }
    starts.push(sum);
    let before: Vec<i64> = starts
        .iter()
        .map(|&c| entries_within(c, seq, extra, count))
        .collect();
    // out = [entry 0 | piece 0's entries | piece 1's | ... | past the last document].
    let (first, mut rest) = out.split_at_mut(2);
    first[0] = T::from_i64(0);
    first[1] = T::from_i64(0);
    let mut parts = Vec::with_capacity(tokens.len());
    for p in 0..tokens.len() {
        let (part, tail) = rest.split_at_mut(2 * (before[p + 1] - before[p]) as usize);
        parts.push((p, part));
        rest = tail;
    }
    parallel::install(|| {
        parts.into_par_iter().for_each(|(p, part)| {
            let piece = &docs[p * PIECE..((p + 1) * PIECE).min(docs.len())];
            let mut d = 0;
            let mut cum = starts[p];
            for (k, entry) in part.chunks_exact_mut(2).enumerate() {
                let s = before[p] + 1 + k as i64;
                let target = s * seq + extra;
                loop {
                    if let Some(&ahead) = piece.get(d + AHEAD) {
                        prefetch(&sizes[ahead as usize]);
                    }
                    let size = i64::from(sizes[piece[d] as usize]);
                    if cum + size >= target {
                        break;
                    }
                    cum += size;
                    d += 1;
                }
                entry[0] = T::from_i64((p * PIECE + d) as i64);
                entry[1] = T::from_i64(s * seq - cum);
            }
        });
    })?;
    // Samples past the last document: its length less the extra token.
    let last = docs.len() - 1;
    let end = T::from_i64(i64::from(sizes[docs[last] as usize]) - extra);
    for entry in rest.chunks_exact_mut(2) {
        entry[0] = T::from_i64(last as i64);
        entry[1] = end;
    }
    Ok(Some(()))
}

#[cfg(test)]
mod tests {
    use super::super::gpt::{build_sample_idx, num_samples};
    use super::*;

    /// Sizes from a fixed linear congruential sequence, a tenth of them empty.
    fn sizes(n: usize, seed: u64) -> Vec<i32> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let v = (x >> 33) % 700;
                if v < 70 {
                    0
                } else {
                    v as i32
                }
            })
            .collect()
    }

    #[test]
    fn pieces_give_the_one_thread_walk() {
        let n = 3 * PIECE + 123;
        let sizes = sizes(n, 9);
        // Documents in a scrambled order: a stride coprime with n.
        let docs: Vec<i32> = (0..n).map(|i| ((i * 7919) % n) as i32).collect();
        let tokens: i64 = sizes.iter().map(|&s| i64::from(s)).sum();
        for (seq, extra, drop, tpe) in [
            (4096, 1, true, tokens),
            (37, 0, false, tokens),
            (64, 1, false, tokens),
            (1000, 1, false, tokens + 5_000),
        ] {
            let count = num_samples(seq, 1, tpe, drop, extra).unwrap();
            let rows = 2 * (count as usize + 1);
            let mut out = vec![0i64; rows];
            assert!(walk(&sizes, &docs, seq, extra, count, &mut out)
                .unwrap()
                .is_some());
            let one = build_sample_idx::<i64>(&sizes, &docs[..], seq, 1, tpe, drop, extra).unwrap();
            assert_eq!(out, one, "seq {seq} extra {extra} drop {drop}");
        }
    }

    #[test]
    fn an_invalid_document_makes_the_caller_walk_alone() {
        let sizes = vec![5i32; 10];
        let mut docs: Vec<i32> = (0..10).collect();
        docs[9] = 10;
        let mut out = vec![0i64; 8];
        assert!(walk(&sizes, &docs, 4, 1, 3, &mut out).unwrap().is_none());
    }
}
