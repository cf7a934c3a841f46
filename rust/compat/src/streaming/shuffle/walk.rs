//! The walk that makes a sequential generator's work parallel: one thread
//! takes the epoch's generator through the pieces of work in order and hands
//! each piece to a task on the pool, with the output of a sequential run.
//!
//! Streaming draws everything from one numpy generator, so a piece of work can
//! only start from the generator's state after every piece before it. Taking
//! the generator past a piece without doing it is much cheaper than doing it
//! (a shuffle's candidate draws without the items; see
//! [`Generator::skip_shuffle`]), so [`in_pieces`] does that on its own thread
//! and gives a copy of the state at each piece's start to a task. For a
//! shuffle, the walk also records the swap partners it drew
//! ([`draw_partners`]), so that the task only fills the ids and swaps them
//! ([`fill_with_partners`]); a piece too long to record is shuffled by its
//! task from the state at its start ([`fill_shuffled`]). The output does not
//! depend on the thread count, nor on which pieces the walk's thread ran
//! itself.

use super::spans::Span;
use crate::streaming::numpy_rng::{apply_partners, Generator};
use epochplan_core::error::{Error, Result};
use epochplan_core::parallel;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Fills `out` with each span's ids, each span shuffled in turn.
pub(super) fn fill_shuffled(rng: &mut Generator, spans: &[Span], out: &mut [i64]) {
    let mut at = 0usize;
    for &(begin, end) in spans {
        let piece = &mut out[at..at + (end - begin) as usize];
        fill_ids(piece, begin);
        rng.shuffle(piece);
        at += piece.len();
    }
}

/// `begin, begin + 1, ...` into `out`.
pub(super) fn fill_ids(out: &mut [i64], begin: i64) {
    for (slot, id) in out.iter_mut().zip(begin..) {
        *slot = id;
    }
}

/// Buffers of swap partners, reused across the pieces of a run.
pub(super) type PartnerPool = Mutex<Vec<Vec<u32>>>;

/// Pieces of work with more swap partners than this are not recorded but
/// shuffled by the task from the generator's state, so that a partner buffer
/// (4 bytes a sample, one per piece in flight) stays small beside the output.
const MAX_RECORDED: usize = 1 << 22;

/// The swap partners of each span's shuffle, one span after another, in a
/// buffer from `pool`. None, with the generator taken past the spans all
/// the same, when the spans have more than [`MAX_RECORDED`] partners or the
/// buffer cannot be allocated.
pub(super) fn draw_partners(
    rng: &mut Generator,
    spans: &[Span],
    pool: &PartnerPool,
) -> Option<Vec<u32>> {
    let partners_of = |&(begin, end): &Span| ((end - begin) as usize).saturating_sub(1);
    let total = spans
        .iter()
        .try_fold(0usize, |sum, span| sum.checked_add(partners_of(span)))
        .filter(|&total| total <= MAX_RECORDED);
    if let Some(total) = total {
        let mut partners = lock(pool).pop().unwrap_or_default();
        if partners
            .try_reserve(total.saturating_sub(partners.len()))
            .is_ok()
        {
            // A reused buffer is only cut or grown, not cleared: every value
            // is written below.
            partners.resize(total, 0);
            let mut at = 0;
            for span in spans {
                let drawn = rng.shuffle_partners(&mut partners[at..at + partners_of(span)]);
                debug_assert!(drawn);
                at += partners_of(span);
            }
            return Some(partners);
        }
    }
    for &(begin, end) in spans {
        rng.skip_shuffle((end - begin) as usize);
    }
    None
}

/// Fills `out` with each span's ids shuffled by the partners
/// [`draw_partners`] drew for the spans.
pub(super) fn fill_with_partners(spans: &[Span], partners: &[u32], out: &mut [i64]) {
    let (mut at, mut drawn) = (0usize, 0usize);
    for &(begin, end) in spans {
        let piece = &mut out[at..at + (end - begin) as usize];
        fill_ids(piece, begin);
        let count = piece.len().saturating_sub(1);
        apply_partners(piece, &partners[drawn..drawn + count]);
        at += piece.len();
        drawn += count;
    }
}

/// Whether work should be split over the pool.
pub(super) fn go_parallel(num_samples: u64) -> bool {
    parallel::num_threads() > 1 && num_samples >= parallel::PIECE as u64
}

/// Tasks of [`in_pieces`] queued or running, per thread of the pool, past
/// which the generator's thread runs pieces itself.
pub(super) const OUTSTANDING_PER_THREAD: usize = 2;

/// Runs `pieces` of work that draw from one generator in turn (the pieces of
/// spans of `py1s`, the canonical nodes of `py1e`) on the pool, with the
/// output of a sequential run. The generator is sequential, so this thread
/// takes it through the pieces in order: it `hand_off`s a piece (takes the
/// generator past it, much cheaper than the piece, returning whatever part
/// of the work it did) and gives a copy of the state at its start and that
/// part to a task that `run`s the piece. When `max_outstanding` tasks are
/// queued or running already, it runs the piece itself (with no part done),
/// which takes the generator past it at no extra cost. On failure, no
/// further piece is started and the error of the first failing piece is
/// returned, as a sequential run would.
pub(super) fn in_pieces<P: Send, T: Send>(
    rng: &mut Generator,
    pieces: impl Iterator<Item = P> + Send,
    max_outstanding: usize,
    hand_off: impl Fn(&mut Generator, &P) -> Result<T> + Sync,
    run: impl Fn(&mut Generator, P, Option<T>) -> Result<()> + Sync,
) -> Result<()> {
    let outstanding = AtomicUsize::new(0);
    // The lowest failing piece and its error.
    let failure: Mutex<Option<(usize, Error)>> = Mutex::new(None);
    let fail = |index: usize, e: Error| {
        let mut first = lock(&failure);
        if first.as_ref().is_none_or(|(i, _)| index < *i) {
            *first = Some((index, e));
        }
    };
    parallel::install(|| {
        rayon::scope(|scope| {
            for (index, piece) in pieces.enumerate() {
                if lock(&failure).is_some() {
                    return;
                }
                if outstanding.load(Ordering::Relaxed) >= max_outstanding {
                    if let Err(e) = run(rng, piece, None) {
                        return fail(index, e);
                    }
                    continue;
                }
                let start = rng.clone();
                let done = match hand_off(rng, &piece) {
                    Ok(done) => done,
                    Err(e) => return fail(index, e),
                };
                outstanding.fetch_add(1, Ordering::Relaxed);
                let (outstanding, fail, run) = (&outstanding, &fail, &run);
                let failure = &failure;
                scope.spawn(move |_| {
                    // Pieces after a failed one need not run.
                    let after_failure = lock(failure).as_ref().is_some_and(|(i, _)| *i < index);
                    if !after_failure {
                        let mut g = start;
                        if let Err(e) = run(&mut g, piece, Some(done)) {
                            fail(index, e);
                        }
                    }
                    outstanding.fetch_sub(1, Ordering::Relaxed);
                });
            }
        });
    })?;
    match failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// Locks `m`, also after a panic elsewhere (the data are plain buffers).
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streaming::shuffle::{get_shuffle, Algo};

    #[test]
    fn in_pieces_runs_every_piece_once_and_reports_the_first_failure() {
        let _threads = crate::test_threads_lock();
        // Piece k shuffles k + 2 values and records the first; a piece
        // fails if it is in `failing`. Whether pieces are skipped for tasks
        // or run by the generator's thread (max_outstanding 0 forces the
        // latter), the draws and the error are those of a sequential run.
        let run_all = |max_outstanding: usize, failing: &[usize]| {
            let firsts: Vec<Mutex<u32>> = (0..100).map(|_| Mutex::new(0)).collect();
            let mut rng = Generator::new(11);
            let outcome = in_pieces(
                &mut rng,
                0..100usize,
                max_outstanding,
                |rng, &k| {
                    rng.skip_shuffle(k + 2);
                    Ok(())
                },
                |rng, k, _| {
                    if failing.contains(&k) {
                        // Later pieces fail later, so that a later failure
                        // can be recorded after an earlier one.
                        std::thread::sleep(std::time::Duration::from_micros(300 * k as u64));
                        return Err(Error::Value(format!("piece {k}")));
                    }
                    let mut items: Vec<u32> = (0..k as u32 + 2).collect();
                    rng.shuffle(&mut items);
                    *lock(&firsts[k]) = items[0] + 1;
                    Ok(())
                },
            );
            let firsts: Vec<u32> = firsts
                .into_iter()
                .map(|m| m.into_inner().unwrap())
                .collect();
            (outcome, firsts)
        };
        parallel::set_num_threads(1);
        let (ok, expect) = run_all(0, &[]);
        parallel::set_num_threads(0);
        assert!(ok.is_ok() && expect.iter().all(|&f| f > 0));
        for threads in [1, 2, 4] {
            parallel::set_num_threads(threads);
            for max_outstanding in [0, 1, 4, 1000] {
                let (ok, firsts) = run_all(max_outstanding, &[]);
                assert!(ok.is_ok());
                assert_eq!(firsts, expect, "{threads} threads, {max_outstanding}");
                for failing in [&[0usize][..], &[1], &[5, 30], &[99]] {
                    let (err, _) = run_all(max_outstanding, failing);
                    let want = format!("piece {}", failing[0]);
                    assert!(
                        matches!(&err, Err(Error::Value(m)) if *m == want),
                        "{err:?}"
                    );
                }
            }
        }
        parallel::set_num_threads(0);
    }

    #[test]
    fn long_pieces_are_shuffled_by_tasks_from_the_generator() {
        let _threads = crate::test_threads_lock();
        // More than MAX_RECORDED partners in a py1s piece (a long shard) or
        // in a py1e node (two canonical nodes): the piece is handed over as a
        // generator state, not as partners.
        let sizes = [(2 * MAX_RECORDED) as i64, 300_000, 7, 1, 0, 70_000];
        for (algo, ncn) in [(Algo::Py1s, 1), (Algo::Py1e, 2)] {
            parallel::set_num_threads(1);
            let one = get_shuffle(algo, &sizes, ncn, 8, 3, 1 << 18).unwrap();
            for threads in [2, 3] {
                parallel::set_num_threads(threads);
                let many = get_shuffle(algo, &sizes, ncn, 8, 3, 1 << 18).unwrap();
                assert_eq!(one, many, "{algo:?} {threads} threads");
            }
        }
        parallel::set_num_threads(0);
    }
}
