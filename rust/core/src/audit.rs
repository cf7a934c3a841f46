//! The exactly-once audit's inner loops: a consumption log's records read
//! from its bytes ([`scan_log`]), and sample ids marked in a bitmap of the
//! store, one bit an id (N/8 bytes), each id already marked reported
//! ([`mark_ids`]).
//!
//! A log (written by `epochplan.audit.ConsumptionLog`) is 8 bytes of magic,
//! then records `u32 length | u32 crc32 | payload`, little-endian; a payload
//! is a kind byte and its body: `H` + JSON (the header), `B` + `u64 epoch |
//! u64 step | u32 count | count i64 ids` (a step's samples), `C` + `u64
//! epoch | u64 step` (a commit).

use crate::error::{Error, Result};
use crate::locate::ABSENT;
use crate::plan::Plan;

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
    let mut offset = LOG_MAGIC.len();
    while offset < size {
        if size - offset < FRAME {
            out.torn = Some(format!(
                "a torn last record at byte {offset} (cut inside its frame)"
            ));
            break;
        }
        let length = u32_at(data, offset) as usize;
        let crc = u32_at(data, offset + 4);
        let end = offset + FRAME + length;
        if end > size {
            out.torn = Some(format!(
                "a torn last record at byte {offset} ({} of {} bytes)",
                size - offset,
                end - offset
            ));
            break;
        }
        let payload = &data[offset + FRAME..end];
        if crc32fast::hash(payload) != crc {
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
        push_record(&mut out, payload, offset)
            .map_err(|e| Error::Value(format!("the record at byte {offset} is malformed: {e}")))?;
        offset = end;
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
    let total: u64 = id_counts.iter().sum();
    let mut ids = crate::buffer::vec_with_capacity(total as usize, "a log's ids")?;
    for (&at, &count) in id_offsets.iter().zip(id_counts) {
        let end = at
            .checked_add(8 * count)
            .filter(|&e| e <= data.len() as u64)
            .ok_or_else(|| Error::Value(format!("ids at byte {at} run past the log's end")))?;
        ids.extend(
            data[at as usize..end as usize]
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes"))),
        );
    }
    Ok(ids)
}

/// Sets the bit of every id of `ids` in `words` (id `i` is bit `i % 64` of
/// word `i / 64`) and returns the indices into `ids` of the ids whose bit
/// was already set: by an earlier call, or earlier in `ids`. Every id must
/// have its bit in `words`.
pub fn mark_ids(words: &mut [u64], ids: &[i64]) -> Result<Vec<usize>> {
    let bits = words.len() as u64 * 64;
    if let Some(i) = ids.iter().position(|&v| v < 0 || v as u64 >= bits) {
        return Err(Error::Value(format!(
            "ids[{i}] must be in [0, {bits}) (the bitmap's bits), got {}",
            ids[i]
        )));
    }
    let mut repeated = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let (w, bit) = ((id as u64 / 64) as usize, 1u64 << (id as u64 % 64));
        if words[w] & bit != 0 {
            repeated.push(i);
        }
        words[w] |= bit;
    }
    Ok(repeated)
}

/// Positions of the epoch mapped to ids at once by [`unmarked_ids`].
const SCAN_PIECE: u64 = 1 << 20;

/// The ids at positions `[start, end)` of `plan`'s epoch whose bit in
/// `words` is clear (planned and not consumed), in the epoch's order.
pub fn unmarked_ids(plan: &Plan, words: &[u64], start: u64, end: u64) -> Result<Vec<i64>> {
    let bits = words.len() as u64 * 64;
    if plan.store_size() > bits {
        return Err(Error::Value(format!(
            "the bitmap holds {bits} bits, fewer than the plan's {} store ids",
            plan.store_size()
        )));
    }
    if start > end || end > plan.layout().num_samples() {
        return Err(Error::Value(format!(
            "positions [{start}, {end}) must lie in the epoch's [0, {})",
            plan.layout().num_samples()
        )));
    }
    let mut absent = Vec::new();
    // Fallible: under an address-space limit this is an error, not an abort.
    let mut piece = crate::buffer::vec_with_capacity(
        SCAN_PIECE.min(end - start) as usize,
        "the positions scanned for misses",
    )?;
    let mut at = start;
    while at < end {
        let to = (at + SCAN_PIECE).min(end);
        piece.clear();
        piece.extend(at as i64..to as i64);
        plan.map_positions(&mut piece)?;
        absent.extend(
            piece
                .iter()
                .filter(|&&id| words[id as usize / 64] & (1 << (id as usize % 64)) == 0),
        );
        at = to;
    }
    Ok(absent)
}

/// The indices into `ids` of the ids consumed in another step than `plan`
/// puts them in (`steps[i]` is where `ids[i]` was consumed), with the step
/// planned for each (-1 for an id the epoch does not hold).
pub fn misplaced(plan: &Plan, ids: &[i64], steps: &[i64]) -> Result<(Vec<usize>, Vec<i64>)> {
    if ids.len() != steps.len() {
        return Err(Error::Value(format!(
            "ids and steps must have one length, got {} and {}",
            ids.len(),
            steps.len()
        )));
    }
    let positions = plan.positions_of(ids)?;
    let g = plan.layout().global_batch_size() as i64;
    let planned = |p: i64| if p == ABSENT { ABSENT } else { p / g };
    let wrong: Vec<usize> = (0..ids.len())
        .filter(|&i| planned(positions[i]) != steps[i])
        .collect();
    let planned_steps = wrong.iter().map(|&i| planned(positions[i])).collect();
    Ok((wrong, planned_steps))
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
        mark_ids(&mut words, &all_but_step3).unwrap();
        assert_eq!(unmarked_ids(&plan, &words, 0, 1000).unwrap(), step3);
        assert_eq!(
            unmarked_ids(&plan, &words, 0, 192).unwrap(),
            Vec::<i64>::new()
        );
        assert!(unmarked_ids(&plan, &words[..3], 0, 10).is_err());
        assert!(unmarked_ids(&plan, &words, 5, 1001).is_err());
        let ids = [step3[0], step3[1], epoch[0]];
        let (wrong, planned) = misplaced(&plan, &ids, &[3, 4, 0]).unwrap();
        assert_eq!((wrong, planned), (vec![1], vec![3]));
    }

    #[test]
    fn repeats_are_reported_within_and_across_calls() {
        let mut words = vec![0u64; 2];
        assert_eq!(mark_ids(&mut words, &[3, 70, 3, 127]).unwrap(), vec![2]);
        assert_eq!(mark_ids(&mut words, &[0, 70]).unwrap(), vec![1]);
        assert!(mark_ids(&mut words, &[128]).is_err());
        assert_eq!(words, vec![0b1001, (1 << 6) | (1 << 63)]);
    }
}
