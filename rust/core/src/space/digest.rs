//! Digests of index spaces, for a plan's state to refuse another space.
//!
//! BLAKE3 over a tag, the space's form and everything that decides its ids,
//! as little-endian integers: two spaces with the same digest give the same
//! ids at every index. Ranges and random-split parts are O(1) to digest
//! (O(ranges)); masks O(N/64) words; id arrays O(ids), so callers compute
//! it once per space.

use crate::space::selection::{Selection, SelectionKind};
use crate::space::MixtureEpoch;

fn put(hasher: &mut blake3::Hasher, values: impl IntoIterator<Item = u64>) {
    let mut bytes = [0u8; 8 * 512];
    let mut filled = 0;
    for v in values {
        bytes[filled..filled + 8].copy_from_slice(&v.to_le_bytes());
        filled += 8;
        if filled == bytes.len() {
            hasher.update(&bytes);
            filled = 0;
        }
    }
    hasher.update(&bytes[..filled]);
}

fn hex(hasher: &blake3::Hasher) -> String {
    format!("blake3:{}", hasher.finalize().to_hex())
}

fn feed_selection(hasher: &mut blake3::Hasher, sel: &Selection) {
    hasher.update(sel.kind().name().as_bytes());
    hasher.update(b"\0");
    put(hasher, [sel.num_samples(), sel.len()]);
    match sel.kind() {
        SelectionKind::Ranges => {
            let ranges = sel.as_ranges().unwrap_or_default();
            put(hasher, ranges.iter().flat_map(|&(a, b)| [a, b]));
        }
        SelectionKind::Mask => put(
            hasher,
            sel.as_mask_words().unwrap_or_default().iter().copied(),
        ),
        SelectionKind::Indices => put(
            hasher,
            sel.as_indices()
                .unwrap_or_default()
                .iter()
                .map(|&i| i as u64),
        ),
        SelectionKind::Permuted => {
            let (seed, start, len) = sel.as_split_part().unwrap_or_default();
            put(hasher, [seed, start, len]);
        }
    }
}

impl Selection {
    /// The selection's digest, `"blake3:"` and 64 hex digits.
    pub fn digest(&self) -> String {
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"epochplan selection v1\0");
        feed_selection(&mut hasher, self);
        hex(&hasher)
    }
}

impl MixtureEpoch {
    /// The digest of the mixture this epoch comes from and of its quotas
    /// (not of `consumed`, which a state holds apart).
    pub fn digest(&self) -> String {
        let mixture = self.mixture();
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"epochplan mixture v1\0");
        let k = mixture.num_sources() as u64;
        put(&mut hasher, [mixture.seed(), k]);
        match mixture.selections() {
            Some(sels) => {
                hasher.update(b"selections\0");
                sels.iter().for_each(|s| feed_selection(&mut hasher, s));
            }
            None => {
                hasher.update(b"sizes\0");
                put(&mut hasher, mixture.sizes());
            }
        }
        put(&mut hasher, self.quotas());
        // An epoch that a phase starts inside: its segments too (an epoch of
        // one segment hashes as it always did).
        let segments = self.segments();
        if segments.len() > 1 {
            hasher.update(b"segments\0");
            for (start, quotas) in segments {
                put(&mut hasher, [start]);
                put(&mut hasher, quotas);
            }
        }
        hex(&hasher)
    }
}

#[cfg(test)]
mod tests {
    use crate::space::{random_split, Mixture, Selection};

    #[test]
    fn digests_tell_spaces_apart() {
        let a = Selection::from_ranges(&[(0, 5)], 10).unwrap();
        let b = Selection::from_ranges(&[(0, 5)], 11).unwrap();
        let c = Selection::from_indices(vec![0, 1, 2, 3, 4], 10).unwrap();
        let mut mask = [false; 10];
        mask[..5].iter_mut().for_each(|m| *m = true);
        let d = Selection::from_mask(&mask).unwrap();
        let parts = random_split(10, &[5, 5], 3).unwrap();
        let all = [&a, &b, &c, &d, &parts[0], &parts[1]].map(|s| s.digest());
        for i in 0..all.len() {
            assert!(all[i].starts_with("blake3:") && all[i].len() == 71);
            for j in 0..i {
                assert_ne!(all[i], all[j], "{i} {j}");
            }
        }
        assert_eq!(
            a.digest(),
            Selection::from_ranges(&[(0, 5)], 10).unwrap().digest()
        );
        let m = Mixture::from_sizes(&[3, 4], 1).unwrap();
        let e0 = m.epoch(&[3, 4], &[0, 0]).unwrap();
        let e1 = m.epoch(&[3, 4], &[3, 4]).unwrap();
        let other = m.epoch(&[4, 3], &[0, 0]).unwrap();
        assert_eq!(e0.digest(), e1.digest(), "consumed is not part of it");
        assert_ne!(e0.digest(), other.digest());
        let seeded = Mixture::from_sizes(&[3, 4], 2).unwrap();
        assert_ne!(
            e0.digest(),
            seeded.epoch(&[3, 4], &[0, 0]).unwrap().digest()
        );
    }
}
