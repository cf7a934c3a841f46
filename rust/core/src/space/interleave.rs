//! The stratified interleave of a mixture's epoch: which source fills each
//! of the epoch's `S = q_0 + ... + q_{K-1}` positions, with random access.
//!
//! # Construction
//!
//! A balanced binary tree over the sources: a node holds the sources
//! `[lo, hi)` and the positions of their quotas, `Q = q_lo + ... + q_{hi-1}`;
//! its left child holds `[lo, mid)`, its right child `[mid, hi)`, with
//! `mid = lo + (hi - lo) / 2`, so every leaf is at depth at most
//! `ceil(log2 K)`. A node's positions are split Bresenham-style: with `qL`
//! the left child's quota, the first `i` positions of the node hold
//!
//! ```text
//! L(i) = floor((i * qL + floor(Q / 2)) / Q)
//! ```
//!
//! positions of the left child and `i - L(i)` of the right one. `L(0) = 0`,
//! `L(Q) = qL`, and `L` grows by 0 or 1 a position, so position `i` of the
//! node is position `L(i)` of the left child when `L(i + 1) > L(i)`, else
//! position `i - L(i)` of the right child. Descending from the root maps an
//! epoch position to (source, index in the source's slice) in O(log K); the
//! same descent with prefix lengths counts a source's positions in any
//! prefix.
//!
//! Each step of [`Interleave::locate`] takes one division, by the node's
//! fixed `Q`, done as a multiplication by a reciprocal kept with the node
//! and one correction (see `Node::div_rem`), and both `L(i)` and the side
//! come from its quotient and remainder. The tree is padded so that every
//! leaf is at depth `ceil(log2 K)` (see `Tree`): a descent is a fixed number
//! of steps whose sides are selected, not branched on.
//!
//! # Bound
//!
//! **Claim.** For every prefix of `P` positions of the epoch and every
//! source `k` at depth `d_k` of the tree, the number `c_k(P)` of source `k`'s
//! positions among them satisfies
//! `|c_k(P) - P * q_k / S| <= d_k / 2 <= ceil(log2 K) / 2`.
//! So two sources are within 1/2 of their share (the best an integer count
//! can do), and K sources within `ceil(log2 K) / 2`, half the
//! `ceil(log2 K)` that DESIGN.md section 7 asks for.
//!
//! **Proof.** One split first. Write `x = i * qL / Q`; the offset
//! `h = floor(Q / 2)` gives `L(i) - x = floor(x + h/Q) - x`, in
//! `(h/Q - 1, h/Q]`; as `L(i)` and `x` differ by a multiple of `1/Q`,
//! `L(i) - x` lies in `[(h - Q + 1)/Q, h/Q]`. Since `h <= Q/2` and
//! `Q - 1 - h = ceil(Q/2) - 1 <= Q/2`, `|L(i) - i * qL / Q| <= 1/2`; the
//! right child's count `i - L(i)` differs from `i * qR / Q` by the same
//! amount with the opposite sign. So each child of a node receives, of the
//! node's first `i` positions, its share `i * q_child / Q` plus an error
//! `e` with `|e| <= 1/2`.
//!
//! Now follow the path from the root (`Q_0 = S`, `x_0 = P`) to leaf `k`
//! (`Q_d = q_k`): the prefix of the node at depth `t` holds `x_t` positions
//! and `x_{t+1} = x_t * Q_{t+1} / Q_t + e_t` with `|e_t| <= 1/2`. Unrolling,
//! `x_d = P * q_k / S + sum_t e_t * (Q_d / Q_{t+1})`, and every ratio
//! `Q_d / Q_{t+1}` is at most 1 (a node's quota is at most its parent's),
//! so `|x_d - P * q_k / S| <= d / 2`. (A node with `Q = 0` receives no
//! position: its descendants' counts and shares are all 0.) ∎
//!
//! The bound is reached: two sources of quota 1 give `c_0(1) = 1` against a
//! share of 1/2. The tests check it on every prefix of every quota vector
//! with K <= 6 sources and quotas up to 12 (fewer for K = 6 in debug
//! builds), and by property tests beyond.

use crate::error::{Error, Result};
use crate::order::MAX_SAMPLES;

#[cfg(target_arch = "x86_64")]
mod avx512;

/// The interleave of one epoch's quotas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interleave {
    /// `before[k]` = the quotas of sources `0..k`; `before[K] = S`.
    before: Vec<u64>,
    /// The tree, ready for [`Interleave::locate`].
    tree: Tree,
}

/// `L(i)` of a node with left quota `ql` and total quota `q >= 1`.
#[inline]
fn left_of(i: u64, ql: u64, q: u64) -> u64 {
    ((u128::from(i) * u128::from(ql) + u128::from(q / 2)) / u128::from(q)) as u64
}

/// One node of the tree, ready to split its positions: its quotas and
/// reciprocals of its total, so that [`Node::split`] multiplies instead of
/// dividing. Four words in this order: the vector descent gathers them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[repr(C)]
struct Node {
    /// The node's quota `Q` (at least 1 when a position reaches it).
    q: u64,
    /// The left child's quota `qL <= Q`.
    ql: u64,
    /// `floor(2**64 / Q)` for `Q >= 2`; 0 for `Q <= 1`.
    reciprocal: u64,
    /// The bits of `1 / Q` in float64 (0 for `Q = 0`), for the vector
    /// descent's estimate of the quotient.
    inverse: u64,
}

impl Node {
    fn new(ql: u64, q: u64) -> Node {
        let reciprocal = if q >= 2 {
            ((1u128 << 64) / u128::from(q)) as u64
        } else {
            0
        };
        let inverse = if q >= 1 {
            (1.0 / q as f64).to_bits()
        } else {
            0
        };
        Node {
            q,
            ql,
            reciprocal,
            inverse,
        }
    }

    /// `(floor(x / Q), x % Q)` for `Q >= 1`. With `m = floor(2**64 / Q)`,
    /// `x * m / 2**64` lies in `(x / Q - 1, x / Q]` (as `x < 2**64`), so its
    /// floor is the quotient or one less: one correction makes it exact.
    #[inline]
    fn div_rem(&self, x: u64) -> (u64, u64) {
        if self.reciprocal == 0 {
            return (x, 0);
        }
        let mut quotient = ((u128::from(x) * u128::from(self.reciprocal)) >> 64) as u64;
        // quotient <= x / Q: no underflow.
        let mut rem = x - quotient * self.q;
        if rem >= self.q {
            quotient += 1;
            rem -= self.q;
        }
        (quotient, rem)
    }

    /// `L(i)` and whether the node's position `i` goes to the left child
    /// (`L(i + 1) > L(i)`), from one division: with `x = i * qL + floor(Q /
    /// 2) = L(i) * Q + r`, `L(i + 1) = L(i) + floor((r + qL) / Q)` and
    /// `r + qL < 2 Q`, so the position goes left exactly when `r + qL >= Q`.
    /// In 64-bit arithmetic when `x` fits, else in 128-bit.
    #[inline]
    fn split(&self, i: u64) -> (u64, bool) {
        let (ql, q) = (self.ql, self.q);
        match i.checked_mul(ql).and_then(|x| x.checked_add(q / 2)) {
            Some(x) => {
                let (left, r) = self.div_rem(x);
                // r < Q <= 2**63 and qL <= Q: no overflow.
                (left, r + ql >= q)
            }
            None => {
                let x = u128::from(i) * u128::from(ql) + u128::from(q / 2);
                let (left, r) = (x / u128::from(q), x % u128::from(q));
                (left as u64, r + u128::from(ql) >= u128::from(q))
            }
        }
    }
}

/// The tree of [`Interleave::locate`], padded to one depth: a leaf above
/// the deepest level continues as a chain of pass-through nodes (`qL = Q`,
/// which send position `i` to the left child as position `i`), so every
/// descent takes the same number of steps, and each step's side is a
/// selection, not a branch (the sides of random positions are coin flips,
/// which branch prediction loses).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tree {
    /// The depth of every leaf: `ceil(log2 K)`.
    depth: u32,
    /// The inner nodes, numbered as a heap (the children of node `t` are
    /// `2 t + 1` and `2 t + 2`): `2**depth - 1` of them, fewer than `2 K`.
    nodes: Vec<Node>,
    /// The source of leaf `2**depth - 1 + l`, for every `l`.
    leaves: Vec<usize>,
}

impl Tree {
    fn new(before: &[u64]) -> Tree {
        let num_sources = before.len() - 1;
        let depth = num_sources.next_power_of_two().trailing_zeros();
        let mut tree = Tree {
            depth,
            nodes: vec![Node::new(0, 0); (1 << depth) - 1],
            leaves: vec![0; 1 << depth],
        };
        tree.fill(before, 0, num_sources, 0, 0);
        tree
    }

    /// Fills the subtree of sources `[lo, hi)` rooted at node `at` of depth
    /// `level`.
    fn fill(&mut self, before: &[u64], lo: usize, hi: usize, at: usize, level: u32) {
        if level == self.depth {
            self.leaves[at + 1 - (1 << self.depth)] = lo;
            return;
        }
        let q = before[hi] - before[lo];
        if hi - lo == 1 {
            self.nodes[at] = Node::new(q, q);
            self.fill(before, lo, hi, 2 * at + 1, level + 1);
            return;
        }
        let mid = lo + (hi - lo) / 2;
        self.nodes[at] = Node::new(before[mid] - before[lo], q);
        self.fill(before, lo, mid, 2 * at + 1, level + 1);
        self.fill(before, mid, hi, 2 * at + 2, level + 1);
    }
}

impl Interleave {
    /// The interleave of `quotas` (at least one source; total at most
    /// `2**63 - 1`).
    pub fn new(quotas: &[u64]) -> Result<Interleave> {
        if quotas.is_empty() {
            return Err(Error::Value("quotas must name at least one source".into()));
        }
        let mut before = Vec::with_capacity(quotas.len() + 1);
        let mut total = 0u64;
        before.push(0);
        for &q in quotas {
            total = total
                .checked_add(q)
                .filter(|&t| t <= MAX_SAMPLES)
                .ok_or_else(|| {
                    Error::Overflow("quotas must sum to at most 2**63 - 1 samples an epoch".into())
                })?;
            before.push(total);
        }
        let tree = Tree::new(&before);
        Ok(Interleave { before, tree })
    }

    /// The number of sources.
    pub fn num_sources(&self) -> usize {
        self.before.len() - 1
    }

    /// The epoch's positions (`S`).
    pub fn len(&self) -> u64 {
        self.before[self.num_sources()]
    }

    /// True when the epoch has no positions.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Source `k`'s quota.
    pub fn quota(&self, k: usize) -> u64 {
        self.before[k + 1] - self.before[k]
    }

    /// The depth of source `k`'s leaf: its bound is half of it.
    pub fn depth(&self, k: usize) -> u32 {
        let (mut lo, mut hi, mut depth) = (0, self.num_sources(), 0);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if k < mid {
                hi = mid;
            } else {
                lo = mid;
            }
            depth += 1;
        }
        depth
    }

    /// The source of position `i` and the index of that position among the
    /// source's positions; `i < len()` is the caller's contract.
    #[inline]
    pub fn locate(&self, mut i: u64) -> (usize, u64) {
        debug_assert!(i < self.len());
        let tree = &self.tree;
        let mut node = 0;
        for _ in 0..tree.depth {
            let (left, goes_left) = tree.nodes[node].split(i);
            i = if goes_left { left } else { i - left };
            node = 2 * node + 2 - usize::from(goes_left);
        }
        (tree.leaves[node + 1 - tree.leaves.len()], i)
    }

    /// [`Interleave::locate`] on every position of `values` (each below
    /// `len()`, the caller's contract): each becomes its index among its
    /// source's positions, and `sources[t]` the source of `values[t]`.
    ///
    /// Eight positions at once with AVX-512 when the CPU has it and the
    /// epoch has at most 2^32 positions (see [`avx512`]); the cipher's
    /// `EPOCHPLAN_CIPHER_PATH` caps this choice too, so that the tests run on
    /// another path run the scalar descent.
    pub(crate) fn locate_in_place(&self, values: &mut [i64], sources: &mut [usize]) {
        self.locate_in_place_on(crate::cipher::Path::active(), values, sources);
    }

    /// [`Interleave::locate_in_place`] on `path` (the vector descent only
    /// on [`Path::Avx512`](crate::cipher::Path::Avx512), when supported).
    #[allow(unsafe_code)]
    pub(crate) fn locate_in_place_on(
        &self,
        path: crate::cipher::Path,
        values: &mut [i64],
        sources: &mut [usize],
    ) {
        assert_eq!(values.len(), sources.len(), "one source slot a position");
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if path == crate::cipher::Path::Avx512
            && path.is_supported()
            && self.len() <= avx512::MAX_LEN
        {
            // SAFETY: the path's CPU support (AVX-512 F, DQ and VL) was
            // detected. (Its node and leaf indices stay in bounds whatever
            // the values; positions below `len()`, at most `MAX_LEN`, make
            // its arithmetic exact.)
            done = unsafe { avx512::locate_lanes(&self.tree, values, sources) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = path;
        for (v, source) in values[done..].iter_mut().zip(&mut sources[done..]) {
            let (k, i) = self.locate(*v as u64);
            (*v, *source) = (i as i64, k);
        }
    }

    /// Source `k`'s positions among the first `prefix` (at most `len()`).
    pub fn count_before(&self, k: usize, prefix: u64) -> u64 {
        let (mut lo, mut hi, mut x) = (0, self.num_sources(), prefix.min(self.len()));
        while hi - lo > 1 && x > 0 {
            let mid = lo + (hi - lo) / 2;
            let q = self.before[hi] - self.before[lo];
            let left = left_of(x, self.before[mid] - self.before[lo], q);
            if k < mid {
                (x, hi) = (left, mid);
            } else {
                (x, lo) = (x - left, mid);
            }
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks every prefix of the interleave of `quotas` against the bound,
    /// and `locate` against `count_before`.
    fn check_all_prefixes(quotas: &[u64]) {
        let il = Interleave::new(quotas).unwrap();
        let s = il.len();
        let mut counts = vec![0u64; quotas.len()];
        for p in 0..=s {
            for (k, &c) in counts.iter().enumerate() {
                // |c - p q / s| <= d / 2, in integers: |2 s c - 2 p q| <= d s.
                let dev = (2 * s as i128 * c as i128 - 2 * p as i128 * quotas[k] as i128).abs();
                assert!(
                    dev <= il.depth(k) as i128 * s as i128,
                    "quotas {quotas:?}, prefix {p}, source {k}: count {c}"
                );
                assert_eq!(il.count_before(k, p), c, "quotas {quotas:?}, prefix {p}");
            }
            if p < s {
                let (k, at) = il.locate(p);
                assert_eq!(at, counts[k], "quotas {quotas:?}, position {p}");
                counts[k] += 1;
            }
        }
        assert_eq!(counts, quotas);
    }

    fn every_quota_vector(k: usize, max: u64, f: &mut impl FnMut(&[u64])) {
        let mut q = vec![0u64; k];
        loop {
            f(&q);
            let mut i = 0;
            while i < k && q[i] == max {
                q[i] = 0;
                i += 1;
            }
            if i == k {
                return;
            }
            q[i] += 1;
        }
    }

    #[test]
    fn every_prefix_is_within_half_the_depth_for_small_mixtures() {
        for (k, max) in [(1, 12), (2, 12), (3, 12), (4, 7), (5, 4), (6, 3)] {
            every_quota_vector(k, max, &mut |q| check_all_prefixes(q));
        }
    }

    #[test]
    fn two_sources_alternate_and_the_bound_is_reached() {
        let il = Interleave::new(&[1, 1]).unwrap();
        assert_eq!(il.count_before(0, 1), 1);
        let il = Interleave::new(&[3, 3]).unwrap();
        let order: Vec<usize> = (0..6).map(|i| il.locate(i).0).collect();
        assert_eq!(order, vec![0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn one_multiplication_decides_the_side_as_two_divisions_do() {
        let mut cases = vec![
            (0, 0, 1),
            (0, 1, 1),
            (5, 0, 7),
            (6, 7, 7),
            (u64::MAX / 3, 5, 9),
        ];
        for q in 1..40u64 {
            for ql in 0..=q {
                cases.extend((0..q).map(|i| (i, ql, q)));
            }
        }
        let big = MAX_SAMPLES;
        for (ql, q) in [
            (big / 3, big),
            (big - 1, big),
            (1, big),
            (big / 2, big / 2 + 1),
        ] {
            cases.extend([0, 1, q / 2, q - 2, q - 1].map(|i| (i, ql, q)));
        }
        // Quotients near the reciprocal's rounding, and 64-bit sums.
        for q in [2, 3, 7, (1 << 32) + 1, (1 << 62) + 3, MAX_SAMPLES] {
            let node = Node::new(1, q);
            for x in [
                0,
                1,
                q - 1,
                q,
                q + 1,
                u64::MAX,
                u64::MAX - 1,
                u64::MAX / q * q - 1,
            ] {
                assert_eq!(node.div_rem(x), (x / q, x % q), "x {x}, q {q}");
            }
        }
        let mut z = 1u64;
        for _ in 0..100_000 {
            z = z
                .wrapping_mul(0x5851_F42D_4C95_7F2D)
                .wrapping_add(1442695040888963407);
            let (x, q) = (z ^ (z >> 17), (z >> (z % 63)).max(1));
            assert_eq!(Node::new(0, q).div_rem(x), (x / q, x % q), "x {x}, q {q}");
        }
        for (i, ql, q) in cases {
            let want = (left_of(i, ql, q), left_of(i + 1, ql, q) > left_of(i, ql, q));
            assert_eq!(Node::new(ql, q).split(i), want, "i {i}, ql {ql}, q {q}");
        }
    }

    #[test]
    fn every_path_locates_as_one_position_at_a_time() {
        let mut z = 3u64;
        let mut next = |bound: u64| {
            z = z
                .wrapping_mul(0x5851_F42D_4C95_7F2D)
                .wrapping_add(1442695040888963407);
            (z >> 11) % bound.max(1)
        };
        let big = 1u64 << 32;
        let mut vectors: Vec<Vec<u64>> = vec![
            vec![big],
            vec![big / 2, big / 2],
            vec![big - 1, 1],
            vec![1, big - 1],
            vec![big - 3, 1, 1, 1],
            vec![big / 3, big / 3, big / 3 + 1],
            // Past 2^32 positions: the scalar descent.
            vec![big / 2, big / 2, 1],
            vec![0, 5, 0],
            vec![1 << 20; 17],
        ];
        for _ in 0..300 {
            let k = 1 + next(20) as usize;
            let scale = [50, 1 << 16, big / k as u64][next(3) as usize];
            vectors.push((0..k).map(|_| next(scale + 1)).collect());
        }
        for quotas in vectors {
            let il = Interleave::new(&quotas).unwrap();
            let s = il.len();
            if s == 0 {
                continue;
            }
            let mut positions: Vec<i64> = if s <= 2000 {
                (0..s as i64).collect()
            } else {
                let ends = (0..64).flat_map(|d| [d, s - 1 - d]);
                ends.chain((0..2000).map(|_| next(s)))
                    .map(|p| p as i64)
                    .collect()
            };
            // A length that is not a multiple of eight: the scalar tail runs too.
            positions.truncate(positions.len() - usize::from(positions.len().is_multiple_of(8)));
            let want: Vec<(usize, u64)> = positions.iter().map(|&p| il.locate(p as u64)).collect();
            for path in crate::cipher::Path::ALL {
                let mut values = positions.clone();
                let mut sources = vec![usize::MAX; values.len()];
                il.locate_in_place_on(path, &mut values, &mut sources);
                let got: Vec<(usize, u64)> = sources
                    .into_iter()
                    .zip(values.into_iter().map(|v| v as u64))
                    .collect();
                assert_eq!(got, want, "quotas {quotas:?}, path {path:?}");
            }
        }
    }

    #[test]
    fn huge_quotas_do_not_overflow() {
        let big = MAX_SAMPLES / 3;
        let il = Interleave::new(&[big, big, big]).unwrap();
        let (k, at) = il.locate(il.len() - 1);
        assert_eq!(at, big - 1);
        assert!(k < 3);
        assert!(Interleave::new(&[MAX_SAMPLES, 1]).is_err());
        assert!(Interleave::new(&[]).is_err());
    }
}
