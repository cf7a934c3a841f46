//! The exactly-once audit's inner loop: sample ids marked in a bitmap of the
//! store, one bit an id (N/8 bytes), each id already marked reported.

use crate::error::{Error, Result};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_reported_within_and_across_calls() {
        let mut words = vec![0u64; 2];
        assert_eq!(mark_ids(&mut words, &[3, 70, 3, 127]).unwrap(), vec![2]);
        assert_eq!(mark_ids(&mut words, &[0, 70]).unwrap(), vec![1]);
        assert!(mark_ids(&mut words, &[128]).is_err());
        assert_eq!(words, vec![0b1001, (1 << 6) | (1 << 63)]);
    }
}
