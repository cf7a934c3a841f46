//! The exactly-once audit's inner loops: a consumption log's records read
//! from its bytes ([`scan_log`]), and consumed ids located in their epoch
//! and marked in a bitmap of its positions, one bit a position (N/8 bytes),
//! each one already marked reported ([`consume`]).
//!
//! A log (written by `epochplan.audit.ConsumptionLog`) is 8 bytes of magic,
//! then records `u32 length | u32 crc32 | payload`, little-endian; a payload
//! is a kind byte and its body: `H` + JSON (the header), `B` + `u64 epoch |
//! u64 step | u32 count | count i64 ids` (a step's samples), `C` + `u64
//! epoch | u64 step` (a commit).

use crate::error::{Error, Result};
use crate::locate::ABSENT;
use crate::plan::Plan;
use rayon::prelude::*;

/// The magic a consumption log starts with.
pub const LOG_MAGIC: &[u8; 8] = b"EPLOG01\n";
/// The bytes of a record's frame (length and checksum).
const FRAME: usize = 8;
/// The bytes of a `B` record's body before its ids.
const BATCH_HEAD: usize = 20;

/// The records of a consumption log, one entry each in every vector, up to
/// a torn last record (a crash while appending), which `torn` describes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LogRecords {
    /// `b'H'`, `b'B'` or `b'C'`.
    pub kinds: Vec<u8>,
    /// The byte where the record's frame starts.
    pub offsets: Vec<u64>,
    /// Epoch and step of `B` and `C` records (0 for `H`).
    pub epochs: Vec<u64>,
    pub steps: Vec<u64>,
    /// The ids of a `B` record: how many, and the byte of the first.
    pub id_counts: Vec<u64>,
    pub id_offsets: Vec<u64>,
    /// The byte range of an `H` record's JSON (empty for the others).
    pub header_ranges: Vec<(u64, u64)>,
    /// Why the last record was not read, when the file ends inside it.
    pub torn: Option<String>,
}

/// Reads every record of a consumption log's bytes, checking each frame's
/// length and checksum. A file cut inside its last record (or inside the
/// magic) gives the records before it and `torn`; a bad checksum or a
/// malformed body anywhere else is an error, as is a file without the magic.
pub fn scan_log(data: &[u8]) -> Result<LogRecords> {
    let mut out = LogRecords::default();
    if !data.starts_with(LOG_MAGIC) {
        if LOG_MAGIC.starts_with(data) {
            // Cut inside the magic: a process killed as it created the log.
            out.torn = Some(format!(
                "a torn log of {} bytes (cut inside its first bytes)",
                data.len()
            ));
            return Ok(out);
        }
        return Err(Error::Value(
            "not a consumption log (no EPLOG01 magic)".into(),
        ));
    }
    let size = data.len();
    // First the frames (a jump a record), then every checksum on every core,
    // then the bodies in order: the first record that fails, by checksum or
    // by body, decides as it would read one record at a time.
    let mut frames: Vec<(usize, usize)> = Vec::new();
    let mut offset = LOG_MAGIC.len();
    while offset < size {
        if size - offset < FRAME {
            out.torn = Some(format!(
                "a torn last record at byte {offset} (cut inside its frame)"
            ));
            break;
        }
        let end = offset + FRAME + u32_at(data, offset) as usize;
        if end > size {
            out.torn = Some(format!(
                "a torn last record at byte {offset} ({} of {} bytes)",
                size - offset,
                end - offset
            ));
            break;
        }
        frames.push((offset, end));
        offset = end;
    }
    let fails = |&(offset, end): &(usize, usize)| {
        crc32fast::hash(&data[offset + FRAME..end]) != u32_at(data, offset + 4)
    };
    let first_bad = crate::parallel::install(|| frames.par_iter().position_first(fails))
        .unwrap_or_else(|_| frames.iter().position(fails));
    for (i, &(offset, end)) in frames.iter().enumerate() {
        if Some(i) == first_bad {
            if end == size {
                out.torn = Some(format!(
                    "a torn last record at byte {offset} (its checksum fails)"
                ));
                break;
            }
            return Err(Error::Value(format!(
                "the record at byte {offset} is corrupt (checksum)"
            )));
        }
        push_record(&mut out, &data[offset + FRAME..end], offset)
            .map_err(|e| Error::Value(format!("the record at byte {offset} is malformed: {e}")))?;
    }
    Ok(out)
}

fn u32_at(data: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(data: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"))
}

/// Appends the record of `payload` (checked) to `out`.
fn push_record(
    out: &mut LogRecords,
    payload: &[u8],
    offset: usize,
) -> std::result::Result<(), String> {
    let (&kind, body) = payload.split_first().ok_or("it is empty")?;
    let body_at = (offset + FRAME + 1) as u64;
    let (mut epoch, mut step, mut count, mut ids_at, mut header) = (0, 0, 0, 0, (0, 0));
    match kind {
        b'H' => header = (body_at, body_at + body.len() as u64),
        b'B' => {
            if body.len() < BATCH_HEAD {
                return Err(format!(
                    "it holds {} bytes, under a step's head",
                    body.len()
                ));
            }
            (epoch, step) = (u64_at(body, 0), u64_at(body, 8));
            count = u64::from(u32_at(body, 16));
            if (body.len() - BATCH_HEAD) as u64 != 8 * count {
                return Err(format!("it holds {} bytes for {count} ids", body.len()));
            }
            ids_at = body_at + BATCH_HEAD as u64;
        }
        b'C' => {
            if body.len() != 16 {
                return Err(format!("a commit of {} bytes, not 16", body.len()));
            }
            (epoch, step) = (u64_at(body, 0), u64_at(body, 8));
        }
        other => return Err(format!("unknown kind {:?}", char::from(other))),
    }
    out.kinds.push(kind);
    out.offsets.push(offset as u64);
    out.epochs.push(epoch);
    out.steps.push(step);
    out.id_counts.push(count);
    out.id_offsets.push(ids_at);
    out.header_ranges.push(header);
    Ok(())
}

/// The ids of the `B` records at byte offsets `id_offsets` (with
/// `id_counts` ids each) of a log's bytes, one after another.
pub fn gather_log_ids(data: &[u8], id_offsets: &[u64], id_counts: &[u64]) -> Result<Vec<i64>> {
    for (&at, &count) in id_offsets.iter().zip(id_counts) {
        at.checked_add(count.saturating_mul(8))
            .filter(|&e| e <= data.len() as u64)
            .ok_or_else(|| Error::Value(format!("ids at byte {at} run past the log's end")))?;
    }
    let total: u64 = id_counts.iter().sum();
    let mut ids: Vec<i64> = crate::buffer::zeroed(total as usize, "a log's ids")?;
    // Each record's ids into its own run of the output, on every core.
    let mut runs = Vec::with_capacity(id_counts.len());
    let mut rest = ids.as_mut_slice();
    for (&at, &count) in id_offsets.iter().zip(id_counts) {
        let (run, after) = rest.split_at_mut(count as usize);
        runs.push((at as usize, run));
        rest = after;
    }
    let copy = |(at, run): (usize, &mut [i64])| {
        let bytes = &data[at..at + 8 * run.len()];
        for (id, b) in run.iter_mut().zip(bytes.chunks_exact(8)) {
            *id = i64::from_le_bytes(b.try_into().expect("8 bytes"));
        }
    };
    crate::parallel::install(|| runs.into_par_iter().for_each(copy))?;
    Ok(ids)
}

/// Sets the bit of every position of `positions` in `words` (position `p`
/// is bit `p % 64` of word `p / 64`; [`ABSENT`] is skipped) and returns the
/// indices into `positions` of those whose bit was already set: by an
/// earlier call, or earlier in `positions`. Every position must have its
/// bit in `words`.
pub fn mark_positions(words: &mut [u64], positions: &[i64]) -> Result<Vec<usize>> {
    let bits = words.len() as u64 * 64;
    if let Some(i) = positions
        .iter()
        .position(|&p| p != ABSENT && (p < 0 || p as u64 >= bits))
    {
        return Err(Error::Value(format!(
            "positions[{i}] must be in [0, {bits}) (the bitmap's bits), got {}",
            positions[i]
        )));
    }
    let mut repeated = Vec::new();
    for (i, &p) in positions.iter().enumerate() {
        if p == ABSENT {
            continue;
        }
        let (w, bit) = ((p as u64 / 64) as usize, 1u64 << (p as u64 % 64));
        if words[w] & bit != 0 {
            repeated.push(i);
        }
        words[w] |= bit;
    }
    Ok(repeated)
}

/// What [`consume`] finds in a batch of consumed ids: the indices into them
/// of the ids seen before (repeated), and of those consumed in another step
/// than planned (misplaced), with the step planned for each (-1 for an id
/// the epoch does not hold).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Consumed {
    pub repeated: Vec<usize>,
    pub misplaced: Vec<usize>,
    pub planned_steps: Vec<i64>,
}

/// Checks a batch of ids of `plan`'s epoch, read from records: record `k`
/// holds the next `counts[k]` ids, consumed in step `steps[k]`. Marks their
/// positions in the epoch's bitmap `words` (a bit a position: N/8 bytes).
/// Each id is located in the epoch (the order's inverse, on every core); a
/// step's positions are one run of the bitmap, so the marks stay in cache
/// where marks by id would miss it at random.
pub fn consume(
    plan: &Plan,
    words: &mut [u64],
    ids: &[i64],
    steps: &[i64],
    counts: &[u64],
) -> Result<Consumed> {
    if steps.len() != counts.len() {
        return Err(Error::Value(format!(
            "steps and counts must have one length (one per record), got {} and {}",
            steps.len(),
            counts.len()
        )));
    }
    // Where each record's ids end.
    let ends: Vec<u64> = counts
        .iter()
        .scan(0u64, |end, &c| {
            *end = end.saturating_add(c);
            Some(*end)
        })
        .collect();
    if ends.last().copied().unwrap_or(0) != ids.len() as u64 {
        return Err(Error::Value(format!(
            "counts must sum to the {} ids, got {}",
            ids.len(),
            ends.last().copied().unwrap_or(0)
        )));
    }
    check_bitmap(plan, words)?;
    let g = plan.layout().global_batch_size() as i64;
    let planned = |p: i64| if p == ABSENT { ABSENT } else { p / g };
    // Located and checked a piece at a time on every core (each piece's
    // passes stay in cache); then marked in order, so that which of two
    // sightings is the repeated one never depends on the threads.
    let pieces = crate::parallel::install(|| {
        ids.par_chunks(CONSUME_PIECE)
            .enumerate()
            .map(|(k, ids)| {
                let base = k * CONSUME_PIECE;
                // Named by its index in the whole batch, not in the piece.
                plan.check_ids(ids, base)?;
                let positions = plan.positions_of_checked(ids)?;
                let mut record = ends.partition_point(|&e| e <= base as u64);
                let mut misplaced = Vec::new();
                for (i, &p) in positions.iter().enumerate() {
                    while ends[record] <= (base + i) as u64 {
                        record += 1;
                    }
                    if planned(p) != steps[record] {
                        misplaced.push(base + i);
                    }
                }
                Ok((positions, misplaced))
            })
            .collect::<Vec<Result<(Vec<i64>, Vec<usize>)>>>()
    })?;
    let mut found = Consumed::default();
    for (k, piece) in pieces.into_iter().enumerate() {
        let (positions, misplaced) = piece?;
        let base = k * CONSUME_PIECE;
        found
            .planned_steps
            .extend(misplaced.iter().map(|&i| planned(positions[i - base])));
        found.misplaced.extend(misplaced);
        found.repeated.extend(
            mark_positions(words, &positions)?
                .into_iter()
                .map(|i| base + i),
        );
    }
    Ok(found)
}

/// Ids a core locates and checks at once in [`consume`].
const CONSUME_PIECE: usize = 1 << 15;

fn check_bitmap(plan: &Plan, words: &[u64]) -> Result<()> {
    let bits = words.len() as u64 * 64;
    let n = plan.layout().num_samples();
    if n > bits {
        return Err(Error::Value(format!(
            "the bitmap holds {bits} bits, fewer than the epoch's {n} positions"
        )));
    }
    Ok(())
}

/// The ids at positions `[start, end)` of `plan`'s epoch whose bit in
/// `words` is clear (planned and not consumed), in the epoch's order: the
/// bitmap is scanned a word at a time and only the clear positions mapped.
pub fn unmarked_ids(plan: &Plan, words: &[u64], start: u64, end: u64) -> Result<Vec<i64>> {
    check_bitmap(plan, words)?;
    if start > end || end > plan.layout().num_samples() {
        return Err(Error::Value(format!(
            "positions [{start}, {end}) must lie in the epoch's [0, {})",
            plan.layout().num_samples()
        )));
    }
    let mut clear = Vec::new();
    let mut at = start;
    while at < end {
        let (w, bit) = ((at / 64) as usize, at % 64);
        let span = (64 - bit).min(end - at);
        let mask = if span == 64 {
            u64::MAX
        } else {
            ((1u64 << span) - 1) << bit
        };
        let mut free = !words[w] & mask;
        while free != 0 {
            clear.try_reserve(1).map_err(|_| {
                Error::Memory("cannot hold the positions of the missing samples".into())
            })?;
            clear.push(w as i64 * 64 + i64::from(free.trailing_zeros()));
            free &= free - 1;
        }
        at += span;
    }
    plan.map_positions(&mut clear)?;
    Ok(clear)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as u32).to_le_bytes().to_vec();
        out.extend(crc32fast::hash(payload).to_le_bytes());
        out.extend(payload);
        out
    }

    fn batch(epoch: u64, step: u64, ids: &[i64]) -> Vec<u8> {
        let mut p = vec![b'B'];
        p.extend(epoch.to_le_bytes());
        p.extend(step.to_le_bytes());
        p.extend((ids.len() as u32).to_le_bytes());
        ids.iter().for_each(|i| p.extend(i.to_le_bytes()));
        record(&p)
    }

    #[test]
    fn a_log_reads_back_and_every_cut_is_a_torn_tail_or_a_shorter_log() {
        let mut log = LOG_MAGIC.to_vec();
        log.extend(record(b"H{}"));
        log.extend(batch(0, 3, &[5, 9, 2]));
        let mut commit = vec![b'C'];
        commit.extend(1u64.to_le_bytes());
        commit.extend(0u64.to_le_bytes());
        log.extend(record(&commit));
        let all = scan_log(&log).unwrap();
        assert_eq!(all.kinds, b"HBC");
        assert_eq!((all.epochs[1], all.steps[1], all.id_counts[1]), (0, 3, 3));
        assert_eq!((all.epochs[2], all.steps[2]), (1, 0));
        assert_eq!(all.header_ranges[0], (17, 19));
        let ids = gather_log_ids(&log, &all.id_offsets[1..2], &all.id_counts[1..2]).unwrap();
        assert_eq!(ids, vec![5, 9, 2]);
        let ends: Vec<usize> = all.offsets[1..]
            .iter()
            .map(|&o| o as usize)
            .chain([log.len()])
            .collect();
        for cut in 0..log.len() {
            let part = scan_log(&log[..cut]).unwrap();
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            assert_eq!(
                part.torn.is_some(),
                cut != 8 && !ends.contains(&cut),
                "cut {cut}"
            );
            if cut >= 8 {
                assert_eq!(part.kinds.len(), whole, "cut {cut}");
            }
        }
        // A flipped byte before the last record is corruption, not a tear.
        let mut flipped = log.clone();
        flipped[30] ^= 1;
        assert!(scan_log(&flipped).is_err());
        assert!(scan_log(b"NOTALOG!").is_err());
        assert!(gather_log_ids(&log, &[log.len() as u64 - 4], &[1]).is_err());
    }

    #[test]
    fn unmarked_and_misplaced_ids_are_found() {
        let order = crate::order::Order::new(1000, 7, 0, crate::order::Kind::Cipher).unwrap();
        let plan = Plan::new(order, 64, false, 0).unwrap();
        let mut words = vec![0u64; 1000usize.div_ceil(64)];
        let step3 = plan.step_ids(3).unwrap();
        let epoch: Vec<i64> = (0..plan.layout().num_steps())
            .flat_map(|s| plan.step_ids(s).unwrap())
            .collect();
        let all_but_step3: Vec<i64> = epoch
            .iter()
            .copied()
            .filter(|i| !step3.contains(i))
            .collect();
        let steps: Vec<i64> = all_but_step3
            .iter()
            .map(|&id| plan.positions_of(&[id]).unwrap()[0] / 64)
            .collect();
        let ones = vec![1u64; steps.len()];
        let found = consume(&plan, &mut words, &all_but_step3, &steps, &ones).unwrap();
        assert_eq!(found, Consumed::default());
        assert_eq!(unmarked_ids(&plan, &words, 0, 1000).unwrap(), step3);
        assert_eq!(
            unmarked_ids(&plan, &words, 0, 192).unwrap(),
            Vec::<i64>::new()
        );
        assert_eq!(unmarked_ids(&plan, &words, 193, 200).unwrap(), step3[1..8]);
        assert!(unmarked_ids(&plan, &words[..3], 0, 10).is_err());
        assert!(unmarked_ids(&plan, &words, 5, 1001).is_err());
        // Step 3's first id in step 3, its second in step 4, an id of step
        // 0 again, and the first again.
        // As records: [step3[0]] in step 3, [step3[1], epoch[0]] in step 4
        // (the second misplaced too), then [step3[0]] in step 3.
        let ids = [step3[0], step3[1], epoch[0], step3[0]];
        let found = consume(&plan, &mut words, &ids, &[3, 4, 3], &[1, 2, 1]).unwrap();
        assert_eq!(found.misplaced, vec![1, 2]);
        assert_eq!(found.planned_steps, vec![3, 0]);
        assert_eq!(found.repeated, vec![2, 3]);
        assert!(consume(&plan, &mut words, &ids, &[3], &[1]).is_err());
        assert!(consume(&plan, &mut words, &ids, &[3, 4], &[1]).is_err());
    }

    #[test]
    fn repeats_are_reported_within_and_across_calls() {
        let mut words = vec![0u64; 2];
        assert_eq!(
            mark_positions(&mut words, &[3, 70, ABSENT, 3, 127]).unwrap(),
            vec![3]
        );
        assert_eq!(mark_positions(&mut words, &[0, 70]).unwrap(), vec![1]);
        assert!(mark_positions(&mut words, &[128]).is_err());
        assert_eq!(words, vec![0b1001, (1 << 6) | (1 << 63)]);
    }
}
