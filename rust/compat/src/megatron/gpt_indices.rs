//! All three indices of a `GPTDataset` in one call, the same bytes as
//! building them one after the other ([`super::gpt`]), in less time:
//!
//! - The document index is shuffled as (document, size) pairs. A swap's
//!   cache miss brings the size along with the id, so the sample index then
//!   reads the sizes in order instead of looking each one up at random; the
//!   pairs are then compacted, in place, into the document index.
//! - The partners of every swap depend only on the generator, never on the
//!   array, so a second thread draws them (and then the whole shuffle
//!   index, which continues the same generator) while the first swaps.
//! - Sample `s` starts at token `s * seq_length` of the documents laid end
//!   to end: in the first document whose end reaches `s * seq_length +
//!   add_extra` (the C++ walk stops there), or, past the last document, at
//!   the last one's size less `add_extra`. So the walk splits into pieces
//!   of documents that start from their first token's position, and the
//!   pieces run in parallel.
//!
//! With one thread the same steps run one after the other.

use super::gpt::{build_shuffle_index, checked_size, SampleCut, SampleInt, ShuffleIndex};
use super::random_state::{swap_with_partners, RandomState};
use epochplan_core::buffer::{vec_with_capacity, zeroed};
use epochplan_core::parallel::{for_each_piece, install, num_threads, PIECE};
use epochplan_core::{Error, Result};
use rayon::prelude::*;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Partners handed over at a time.
const BATCH: usize = 1 << 16;
/// Batches drawn and not yet swapped.
const IN_FLIGHT: usize = 4;
/// Below this many swaps a second thread costs more than it saves.
const THREADED_FROM: usize = 1 << 18;

/// What `GPTDataset` decides before it builds its indices.
#[derive(Clone, Copy, Debug)]
pub struct GptLayout {
    /// How the documents are cut into samples (`cut.num_epochs` epochs).
    pub cut: SampleCut,
    /// Shuffle the last epoch's documents apart, after the others.
    pub separate_final_epoch: bool,
    /// Samples of the shuffle index's first range (all of them unless the
    /// final epoch is separate).
    pub shuffled_first: Option<usize>,
}

/// The document, sample and shuffle indices.
#[derive(Debug)]
pub struct GptIndices<S> {
    pub document_index: Vec<i32>,
    /// Flat, `(samples + 1) x 2`.
    pub sample_index: Vec<S>,
    pub shuffle_index: ShuffleIndex,
}

/// Checks every document id and its size, as `_get_num_tokens_per_epoch`
/// reads them.
fn check_documents(sizes: &[i32], documents: &[i32]) -> Result<()> {
    for (j, &doc) in documents.iter().enumerate() {
        checked_size(sizes, doc, ("indices", j), "sequence_lengths")?;
    }
    Ok(())
}

/// `[document, size]` for the (checked) documents once per epoch, filled in
/// parallel pieces so that every core takes its share of the page faults.
fn document_pairs(sizes: &[i32], documents: &[i32], epochs: usize) -> Result<Vec<i32>> {
    let total = documents
        .len()
        .checked_mul(epochs)
        .and_then(|t| t.checked_mul(2))
        .ok_or_else(|| Error::Overflow("the document index does not fit in memory".into()))?;
    let mut pairs: Vec<i32> = zeroed(total, "the document index")?;
    for_each_piece(&mut pairs, 2 * PIECE, |offset, piece| {
        let (piece, _) = piece.as_chunks_mut::<2>();
        for (t, pair) in piece.iter_mut().enumerate() {
            let doc = documents[(offset / 2 + t) % documents.len()];
            let size = usize::try_from(doc)
                .ok()
                .and_then(|d| sizes.get(d))
                .copied()
                .unwrap_or(0);
            *pair = [doc, size];
        }
    });
    Ok(pairs)
}

/// `GPTDataset._build_document_shuffle_sample_indices` for documents
/// `documents` of sizes `sizes`, drawing from `state` as Megatron's
/// `RandomState` draws; `state` is left where Megatron leaves it.
pub fn build_gpt_indices<S: SampleInt>(
    sizes: &[i32],
    documents: &[i32],
    layout: &GptLayout,
    state: &mut RandomState,
) -> Result<GptIndices<S>> {
    let cut = layout.cut;
    let epochs = usize::try_from(cut.num_epochs).unwrap_or(0);
    let positions = documents.len().saturating_mul(epochs);
    let samples = cut.samples::<S>(positions)?;
    let shuffled_first = layout.shuffled_first.unwrap_or(samples);
    if shuffled_first > samples {
        return Err(Error::Value(format!(
            "the shuffle index's first range must hold at most {samples} samples, got {shuffled_first}"
        )));
    }
    check_documents(sizes, documents)?;
    let mut pairs = document_pairs(sizes, documents, epochs)?;
    let split = if layout.separate_final_epoch && epochs > 1 {
        documents.len() * (epochs - 1)
    } else {
        positions
    };
    let threads = num_threads();
    let shuffle_index = {
        let (items, _) = pairs.as_chunks_mut::<2>();
        let (first, last) = items.split_at_mut(split);
        let ranges = [split, positions - split];
        let drawn = if threads >= 2 && positions >= THREADED_FROM {
            shuffle_on_two_threads(first, last, &ranges, state, (shuffled_first, samples))?
        } else {
            None
        };
        match drawn {
            Some(index) => index,
            // One thread, or none could be started: the same steps in turn.
            None => {
                state.shuffle(first);
                state.shuffle(last);
                build_shuffle_index(shuffled_first, samples, state)?
            }
        }
    };
    let pieces = if positions >= THREADED_FROM {
        threads
    } else {
        1
    };
    let sample_index = walk_in_pieces(&pairs, cut, samples, pieces)?;
    // Each id moves to half its pair's place, which the ids before it have
    // already left.
    for i in 0..positions {
        pairs[i] = pairs[2 * i];
    }
    pairs.truncate(positions);
    pairs.shrink_to_fit();
    Ok(GptIndices {
        document_index: pairs,
        sample_index,
        shuffle_index,
    })
}

/// The sample index of the shuffled `[document, size]` pairs, walked in
/// `pieces` pieces of about as many documents each.
fn walk_in_pieces<S: SampleInt>(
    pairs: &[i32],
    cut: SampleCut,
    samples: usize,
    pieces: usize,
) -> Result<Vec<S>> {
    let (items, _) = pairs.as_chunks::<2>();
    let positions = items.len();
    let pieces = pieces.clamp(1, positions.max(1));
    let bounds: Vec<usize> = (0..=pieces).map(|j| j * positions / pieces).collect();
    // The token where each piece's first document starts.
    let mut starts: Vec<i64> = install(|| {
        bounds
            .par_windows(2)
            .map(|w| items[w[0]..w[1]].iter().map(|p| i64::from(p[1])).sum())
            .collect()
    })?;
    let mut before = 0i64;
    for start in &mut starts {
        (*start, before) = (before, before + *start);
    }
    let seq = i64::from(cut.seq_length);
    let extra = i64::from(cut.add_extra);
    // The first sample (from 1) that starts in each piece or later; the
    // last bound is past every sample.
    let mut first: Vec<usize> = starts
        .iter()
        .map(|&t| (((t - extra).div_euclid(seq) + 1).max(1) as usize).min(samples + 1))
        .collect();
    first[0] = 1;
    first.push(samples + 1);
    let rows = (samples + 1) * 2;
    let mut out: Vec<S> = zeroed(rows, "the sample index")?;
    let (head, mut rest) = out.split_at_mut(2);
    head.copy_from_slice(&[S::from_i64(0), S::from_i64(0)]);
    let mut tasks = Vec::with_capacity(pieces);
    for j in 0..pieces {
        let (rows, after) = rest.split_at_mut(2 * (first[j + 1] - first[j]));
        tasks.push((rows, first[j], bounds[j], starts[j]));
        rest = after;
    }
    install(|| {
        tasks
            .into_par_iter()
            .for_each(|(rows, from, position, start)| {
                walk_piece(items, seq, extra, rows, from, position, start);
            });
    })?;
    Ok(out)
}

/// Fills `rows` with samples `from, from + 1, ...`, whose starts lie at
/// `position` (whose first token is `start`) or later.
fn walk_piece<S: SampleInt>(
    items: &[[i32; 2]],
    seq: i64,
    extra: i64,
    rows: &mut [S],
    from: usize,
    mut position: usize,
    mut start: i64,
) {
    let last = items.len() - 1;
    for (k, row) in rows.as_chunks_mut::<2>().0.iter_mut().enumerate() {
        let token = (from + k) as i64 * seq;
        let mut end = start + i64::from(items[position][1]);
        while end < token + extra && position < last {
            position += 1;
            start = end;
            end += i64::from(items[position][1]);
        }
        *row = if end >= token + extra {
            [S::from_i64(position as i64), S::from_i64(token - start)]
        } else {
            [
                S::from_i64(last as i64),
                S::from_i64(i64::from(items[last][1]) - extra),
            ]
        };
    }
}

/// Shuffles `first` then `last` (of `ranges` items) while a second thread
/// draws their partners from `state` and then builds the shuffle index of
/// `(first range, samples)`. `None`, with nothing done, when no thread or
/// buffer can be had.
fn shuffle_on_two_threads(
    first: &mut [[i32; 2]],
    last: &mut [[i32; 2]],
    ranges: &[usize; 2],
    state: &mut RandomState,
    (shuffled_first, samples): (usize, usize),
) -> Result<Option<ShuffleIndex>> {
    let mut buffers = Vec::with_capacity(IN_FLIGHT + 2);
    for _ in 0..IN_FLIGHT + 2 {
        match vec_with_capacity::<usize>(BATCH, "the swap partners") {
            Ok(buffer) => buffers.push(buffer),
            Err(_) => return Ok(None),
        }
    }
    std::thread::scope(|scope| {
        let (partners, batches) = sync_channel(IN_FLIGHT);
        let (spent, reuse) = sync_channel(IN_FLIGHT + 2);
        for buffer in buffers {
            let _ = spent.try_send(buffer);
        }
        let drawer = std::thread::Builder::new().spawn_scoped(scope, move || {
            draw_batches(state, ranges, &partners, &reuse);
            drop(partners);
            build_shuffle_index(shuffled_first, samples, state)
        });
        let Ok(drawer) = drawer else {
            return Ok(None);
        };
        for items in [first, last] {
            swap_batches(items, &batches, &spent);
        }
        drop(batches);
        let index = drawer
            .join()
            .map_err(|_| Error::Value("the partner-drawing thread panicked".into()))??;
        Ok(Some(index))
    })
}

/// The drawing thread: the partners of each range's shuffle, in batches
/// (buffers that come back through `reuse`) that never span two ranges (a
/// range of one item draws none). Stops drawing when the swapping thread
/// has gone.
fn draw_batches(
    state: &mut RandomState,
    ranges: &[usize],
    partners: &SyncSender<Vec<usize>>,
    reuse: &Receiver<Vec<usize>>,
) {
    let Ok(mut batch) = reuse.recv() else {
        return;
    };
    for &len in ranges {
        let mut open = true;
        state.draw_partners(len, |p| {
            if !open {
                return;
            }
            batch.push(p);
            if batch.len() == BATCH {
                open = match reuse.recv() {
                    Ok(next) => partners.send(std::mem::replace(&mut batch, next)).is_ok(),
                    Err(_) => false,
                };
                batch.clear();
            }
        });
        if !open {
            return;
        }
        if !batch.is_empty() {
            let Ok(next) = reuse.recv() else {
                return;
            };
            if partners.send(std::mem::replace(&mut batch, next)).is_err() {
                return;
            }
            batch.clear();
        }
    }
}

/// The swapping thread: one range's swaps, from the batches drawn for it.
fn swap_batches(
    items: &mut [[i32; 2]],
    batches: &Receiver<Vec<usize>>,
    spent: &SyncSender<Vec<usize>>,
) {
    let swaps = items.len().saturating_sub(1);
    let mut done = 0;
    while done < swaps {
        let Ok(batch) = batches.recv() else {
            return;
        };
        swap_with_partners(items, done, &batch);
        done += batch.len();
        let _ = spent.try_send(batch);
    }
}

#[cfg(test)]
mod tests {
    use super::super::gpt::{build_document_index, build_sample_idx};
    use super::*;
    use epochplan_core::parallel::set_num_threads;
    use proptest::prelude::*;

    /// The indices built one after the other, as `GPTDataset` builds them.
    fn one_by_one(
        sizes: &[i32],
        documents: &[i32],
        layout: &GptLayout,
        seed: u32,
    ) -> (Vec<i32>, Vec<i64>, ShuffleIndex, u32) {
        let mut state = RandomState::new(seed);
        let cut = layout.cut;
        let docs = build_document_index(
            documents,
            cut.num_epochs as usize,
            &mut state,
            layout.separate_final_epoch,
        )
        .unwrap();
        let samples = build_sample_idx::<i64>(
            sizes,
            &docs,
            cut.seq_length,
            cut.num_epochs,
            cut.tokens_per_epoch,
            cut.drop_last_partial_sequence,
            cut.add_extra,
        )
        .unwrap();
        let total = samples.len() / 2 - 1;
        let shuffle =
            build_shuffle_index(layout.shuffled_first.unwrap_or(total), total, &mut state).unwrap();
        (docs, samples, shuffle, rest_next(&mut state))
    }

    fn rest_next(state: &mut RandomState) -> u32 {
        state.interval(u64::from(u32::MAX)) as u32
    }

    #[test]
    fn one_call_builds_the_same_bytes_on_any_thread_count() {
        let _threads = crate::test_threads_lock();
        let n: i32 = 600_000;
        let sizes: Vec<i32> = (0..i64::from(n))
            .map(|i| (i * 7919 % 2000) as i32)
            .collect();
        let documents: Vec<i32> = (0..n).rev().step_by(2).collect();
        let tokens: i64 = documents
            .iter()
            .map(|&d| i64::from(sizes[d as usize]))
            .sum();
        for (epochs, separate, extra, drop) in [
            (1, false, 1, true),
            (3, false, 0, true),
            (4, true, 1, false),
        ] {
            let cut = SampleCut {
                seq_length: 4096,
                num_epochs: epochs,
                tokens_per_epoch: tokens,
                drop_last_partial_sequence: drop,
                add_extra: extra,
            };
            let samples = cut
                .samples::<i64>(documents.len() * epochs as usize)
                .unwrap();
            let layout = GptLayout {
                cut,
                separate_final_epoch: separate,
                shuffled_first: separate.then_some(samples * 3 / 4),
            };
            let want = one_by_one(&sizes, &documents, &layout, 1234);
            for threads in [1, 2] {
                set_num_threads(threads);
                let mut state = RandomState::new(1234);
                let got =
                    build_gpt_indices::<i64>(&sizes, &documents, &layout, &mut state).unwrap();
                assert_eq!(
                    got.document_index, want.0,
                    "{epochs} epochs, {threads} threads"
                );
                assert_eq!(got.sample_index, want.1);
                assert_eq!(got.shuffle_index, want.2);
                assert_eq!(rest_next(&mut state), want.3);
            }
            set_num_threads(0);
        }
    }

    #[test]
    fn bad_documents_are_named() {
        let cut = SampleCut {
            seq_length: 4,
            num_epochs: 1,
            tokens_per_epoch: 10,
            drop_last_partial_sequence: true,
            add_extra: 1,
        };
        let layout = GptLayout {
            cut,
            separate_final_epoch: false,
            shuffled_first: None,
        };
        let mut state = RandomState::new(0);
        let e = build_gpt_indices::<i32>(&[5, 5], &[0, 2], &layout, &mut state).unwrap_err();
        assert!(e.to_string().starts_with("indices[1] = 2"), "{e}");
        let e = build_gpt_indices::<i32>(&[5, -5], &[0, 1], &layout, &mut state).unwrap_err();
        assert!(e.to_string().starts_with("sequence_lengths[1]"), "{e}");
    }

    proptest! {
        #[test]
        fn pieces_walk_as_the_cpp_loop(
            sizes in prop::collection::vec(0i32..12, 1..60),
            seq in 2i32..9,
            extra in 0i32..2,
            drop in any::<bool>(),
            pieces in 1usize..6,
        ) {
            let docs: Vec<i32> = (0..sizes.len() as i32).rev().collect();
            let tokens: i64 = sizes.iter().map(|&s| i64::from(s)).sum();
            prop_assume!(tokens > 1);
            let cut = SampleCut {
                seq_length: seq,
                num_epochs: 1,
                tokens_per_epoch: tokens,
                drop_last_partial_sequence: drop,
                add_extra: extra,
            };
            let want = build_sample_idx::<i64>(&sizes, &docs, seq, 1, tokens, drop, extra).unwrap();
            let pairs: Vec<i32> = docs.iter().flat_map(|&d| [d, sizes[d as usize]]).collect();
            let samples = cut.samples::<i64>(docs.len()).unwrap();
            let got = walk_in_pieces::<i64>(&pairs, cut, samples, pieces).unwrap();
            prop_assert_eq!(got, want);
        }
    }
}
