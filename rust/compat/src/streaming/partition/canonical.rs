//! Step 4 of the partition (see the parent module): the canonical matrix of
//! `C` rows over the `N` samples, read in flat (column-major) order, and the
//! row starts `floor(c * N / C)` it is read with, computed or tabled.

use super::Walk;

/// Row starts `floor(c * N / C)` of the canonical matrix, for `c` in `0..=C`.
pub(super) trait RowStarts {
    fn get(&self, c: u64) -> u64;
    /// All `C + 1` starts, when they are in a table.
    fn table(&self) -> Option<&[u64]> {
        None
    }
}

/// Row starts computed on demand (for a window smaller than the row count).
pub(super) struct ComputedStarts {
    pub(super) n: u64,
    pub(super) nodes: u64,
}

impl RowStarts for ComputedStarts {
    #[inline]
    fn get(&self, c: u64) -> u64 {
        (u128::from(c) * u128::from(self.n) / u128::from(self.nodes)) as u64
    }
}

/// Row starts looked up in a table of `C + 1` entries.
pub(super) struct TableStarts(pub(super) Vec<u64>);

impl RowStarts for TableStarts {
    #[inline]
    fn get(&self, c: u64) -> u64 {
        self.0[c as usize]
    }

    fn table(&self) -> Option<&[u64]> {
        Some(&self.0)
    }
}

/// Step 4: the canonical matrix, read in flat (column-major) order.
#[derive(Debug, Clone, Copy)]
pub(super) struct Canonical {
    /// N.
    pub(super) samples: u64,
    /// C, the rows.
    pub(super) nodes: u64,
    /// S = ceil(N / C), the columns before padding.
    pub(super) width: u64,
    /// Sp = S + padding, the columns.
    pub(super) padded_width: u64,
    /// How far back a padding column copies from.
    pub(super) pad_shift: u64,
    /// Fewer samples than rows: the matrix is `0..N` repeated.
    pub(super) wrapped: bool,
}

impl Canonical {
    /// The sample at row `c`, column `j` of a regular matrix, given the row's start.
    #[inline]
    pub(super) fn regular_at(&self, starts: &impl RowStarts, c: u64, j: u64, start: u64) -> u64 {
        if j + 1 < self.width {
            start + j
        } else if j + 1 == self.width {
            // A row shorter than S repeats its last sample in column S - 1.
            let short = starts.get(c + 1) - start < self.width;
            start + j - u64::from(short)
        } else {
            start + j - self.pad_shift
        }
    }

    /// A stride through the flat order, split as `(columns, rows)`.
    pub(super) fn stride(&self, df: u64) -> (u64, u64) {
        (df / self.nodes, df % self.nodes)
    }

    /// Flat position `f` as (column, row).
    pub(super) fn locate(&self, f: u64) -> (u64, u64) {
        (f / self.nodes, f % self.nodes)
    }

    /// The (column, row) a stride further on.
    #[inline]
    pub(super) fn advance(&self, (j, c): (u64, u64), (dj, dc): (u64, u64)) -> (u64, u64) {
        let (j, c) = (j + dj, c + dc);
        if c >= self.nodes {
            (j + 1, c - self.nodes)
        } else {
            (j, c)
        }
    }

    /// Writes the samples at flat positions `f0, f0 + df, ...` into the
    /// `count` slots of `out`, given `(j, c) = self.locate(f0)` and
    /// `stride = self.stride(df)`.
    pub(super) fn run<'a>(
        &self,
        starts: &impl RowStarts,
        (mut j, mut c): (u64, u64),
        (dj, dc): (u64, u64),
        count: u64,
        out: impl Iterator<Item = &'a mut i64>,
    ) {
        let rows = self.nodes;
        if self.wrapped {
            for slot in out.take(count as usize) {
                *slot = ((c * self.padded_width + j) % self.samples) as i64;
                j += dj;
                c += dc;
                if c >= rows {
                    c -= rows;
                    j += 1;
                }
            }
            return;
        }
        if dc == 0 && count > 0 && j + (count - 1) * dj + 1 < self.width {
            // One row, regular columns: an arithmetic progression.
            let first = (starts.get(c) + j) as i64;
            for (k, slot) in out.take(count as usize).enumerate() {
                *slot = first + (k as u64 * dj) as i64;
            }
            return;
        }
        if count > 0 && j + (count - 1) * (dj + 1) + 1 < self.width {
            // Regular columns only (each step moves at most dj + 1 columns).
            if let (Some(table), true) = (starts.table(), dc > 0) {
                // Pass over rows c, c + dc, ... below C, then wrap around.
                let rows = &table[..rows as usize];
                let mut out = out.take(count as usize);
                loop {
                    let mut n = 0;
                    let pass = rows[c as usize..].iter().step_by(dc as usize);
                    for (start, slot) in pass.zip(&mut out) {
                        *slot = (start + j + n * dj) as i64;
                        n += 1;
                    }
                    let next = c + n * dc;
                    if next < self.nodes {
                        break; // out of slots before the end of the rows
                    }
                    (j, c) = (j + n * dj + 1, next - self.nodes);
                }
                return;
            }
            for slot in out.take(count as usize) {
                *slot = (starts.get(c) + j) as i64;
                j += dj;
                c += dc;
                if c >= rows {
                    c -= rows;
                    j += 1;
                }
            }
            return;
        }
        for slot in out.take(count as usize) {
            let start = starts.get(c);
            *slot = if j + 1 < self.width {
                start + j
            } else {
                self.regular_at(starts, c, j, start)
            } as i64;
            j += dj;
            c += dc;
            if c >= rows {
                c -= rows;
                j += 1;
            }
        }
    }

    /// [`Canonical::run`] into a slice, with `walk`'s flat stride: when
    /// every column is regular, only the first period is looked up and the
    /// rest are copies of it, shifted (vectorised).
    pub(super) fn run_slice(
        &self,
        starts: &impl RowStarts,
        at: (u64, u64),
        walk: &Walk,
        out: &mut [i64],
    ) {
        let count = out.len() as u64;
        let (j, c) = at;
        let (dj, _) = walk.stride;
        let regular = !self.wrapped && count > 0 && j + (count - 1) * (dj + 1) + 1 < self.width;
        if !regular || walk.period >= count {
            self.run(starts, at, walk.stride, count, out.iter_mut());
            return;
        }
        if walk.period == 1 {
            // One row: an arithmetic progression.
            let mut value = (starts.get(c) + j) as i64;
            for slot in out.iter_mut() {
                *slot = value;
                value += dj as i64;
            }
            return;
        }
        let mut filled = walk.period as usize;
        self.run(starts, at, walk.stride, filled as u64, out.iter_mut());
        // out[k + m * period] = out[k] + m * delta; copy doubling blocks.
        while filled < out.len() {
            let n = filled.min(out.len() - filled);
            let shift = (filled as u64 / walk.period * walk.delta) as i64;
            let (done, rest) = out.split_at_mut(filled);
            for (slot, &value) in rest[..n].iter_mut().zip(&done[..n]) {
                *slot = value + shift;
            }
            filled += n;
        }
    }

    /// The sample at flat position `f`.
    pub(super) fn at(&self, starts: &impl RowStarts, f: u64) -> i64 {
        let (j, c) = (f / self.nodes, f % self.nodes);
        if self.wrapped {
            return ((c * self.padded_width + j) % self.samples) as i64;
        }
        self.regular_at(starts, c, j, starts.get(c)) as i64
    }
}
