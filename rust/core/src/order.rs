//! Orders: the bijection position -> sample id of an epoch, by kind.

use crate::buffer::zeroed_ids;
use crate::chunked::Chunked;
use crate::cipher::Cipher;
use crate::error::{Error, Result};
use crate::keys::{derive, Domain};
use crate::parallel;
use crate::shuffle::uniform_permutation;
use std::sync::Arc;

/// The largest supported number of samples: ids must fit in int64.
pub const MAX_SAMPLES: u64 = i64::MAX as u64;

/// The kinds' names, as users write them (the order [`Kind::parse`] lists).
pub const KIND_NAMES: [&str; 4] = ["cipher", "uniform", "chunked", "identity"];

/// How the epoch's samples are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The keyed cipher bijection (default): O(1) random access.
    Cipher,
    /// An exactly uniform permutation, materialised.
    Uniform,
    /// Chunk order by cipher, samples shuffled inside windows of chunks.
    Chunked {
        /// Samples per chunk (>= 1).
        chunk_size: u64,
        /// Consecutive chunks shuffled together, a window (>= 1).
        preload_nchunks: u64,
    },
    /// No shuffle: position i holds sample i.
    Identity,
}

impl Kind {
    /// The kind's name as users write it.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Cipher => "cipher",
            Kind::Uniform => "uniform",
            Kind::Chunked { .. } => "chunked",
            Kind::Identity => "identity",
        }
    }

    /// Parses a kind name; `chunked` needs `chunk_size` and takes
    /// `preload_nchunks` (both >= 1; `preload_nchunks` is 1 when not given).
    pub fn parse(
        name: &str,
        chunk_size: Option<u64>,
        preload_nchunks: Option<u64>,
    ) -> Result<Kind> {
        let kind = match name {
            "cipher" => Kind::Cipher,
            "uniform" => Kind::Uniform,
            "identity" => Kind::Identity,
            "chunked" => {
                let chunk_size = chunk_size.ok_or_else(|| {
                    Error::Value("kind='chunked' needs chunk_size (an int >= 1)".into())
                })?;
                let preload_nchunks = preload_nchunks.unwrap_or(1);
                if chunk_size == 0 {
                    return Err(Error::Value("chunk_size must be >= 1, got 0".into()));
                }
                if preload_nchunks == 0 {
                    return Err(Error::Value("preload_nchunks must be >= 1, got 0".into()));
                }
                return Ok(Kind::Chunked {
                    chunk_size,
                    preload_nchunks,
                });
            }
            other => {
                let names: Vec<String> = KIND_NAMES.iter().map(|k| format!("'{k}'")).collect();
                return Err(Error::Value(format!(
                    "kind must be one of {}, got {other:?}",
                    names.join(", ")
                )));
            }
        };
        if chunk_size.is_some() || preload_nchunks.is_some() {
            return Err(Error::Value(format!(
                "chunk_size and preload_nchunks apply to kind='chunked' only, not kind={:?}",
                kind.name()
            )));
        }
        Ok(kind)
    }
}

#[derive(Debug, Clone)]
enum Map {
    Identity,
    Cipher(Cipher),
    Chunked(Chunked),
    Table(Arc<Vec<i64>>),
}

/// The order of one epoch: position -> sample id, a bijection of `[0, n)`.
#[derive(Debug, Clone)]
pub struct Order {
    n: u64,
    kind: Kind,
    map: Map,
}

impl Order {
    /// The order of `n` samples for `(seed, epoch, kind)`. `Uniform` builds
    /// its permutation here (O(n) time and memory); the others are O(1).
    pub fn new(n: u64, seed: u64, epoch: u64, kind: Kind) -> Result<Order> {
        if n > MAX_SAMPLES {
            return Err(Error::Overflow(format!(
                "num_samples must be in [0, 2**63 - 1], got {n}"
            )));
        }
        let map = match kind {
            Kind::Identity => Map::Identity,
            Kind::Cipher => Map::Cipher(Cipher::new(
                n,
                derive(
                    seed,
                    epoch,
                    Domain {
                        kind: "cipher",
                        label: "order",
                    },
                    0,
                ),
            )),
            Kind::Chunked {
                chunk_size,
                preload_nchunks,
            } => Map::Chunked(Chunked::new(n, seed, epoch, chunk_size, preload_nchunks)),
            Kind::Uniform => Map::Table(Arc::new(uniform_permutation(n, seed, epoch)?)),
        };
        Ok(Order { n, kind, map })
    }

    /// The number of samples.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// True when the epoch has no samples.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The kind of the order.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The sample id at `position`, which must be `< len()`.
    pub fn get(&self, position: u64) -> Result<u64> {
        if position >= self.n {
            return Err(Error::Index(format!(
                "position must be in [0, {}), got {position}",
                self.n
            )));
        }
        Ok(match &self.map {
            Map::Identity => position,
            Map::Cipher(c) => c.apply(position),
            Map::Chunked(c) => c.apply(position),
            Map::Table(t) => t[position as usize] as u64,
        })
    }

    /// Replaces positions by ids in place on this thread. The positions must
    /// already lie in `[0, len())`.
    pub fn map_slice(&self, values: &mut [i64]) {
        match &self.map {
            Map::Identity => {}
            Map::Cipher(c) => c.apply_in_place(values),
            Map::Chunked(c) => c.apply_in_place(values),
            Map::Table(t) => values.iter_mut().for_each(|x| *x = t[*x as usize]),
        }
    }

    /// [`Order::map_slice`], in parallel for large inputs.
    pub fn map_in_place(&self, values: &mut [i64]) {
        parallel::for_each_piece(values, parallel::PIECE, |_, v| self.map_slice(v));
    }

    /// Replaces every sample id in `values` (each in `[0, len())`) by its
    /// position: the inverse of [`Order::map_slice`], in parallel for large
    /// inputs. A uniform order has no inverse table: its table is read once
    /// for the whole batch.
    pub fn invert_slice(&self, values: &mut [i64]) {
        match &self.map {
            Map::Identity => {}
            Map::Cipher(c) => parallel::for_each_piece(values, parallel::PIECE, |_, piece| {
                c.invert_in_place(piece)
            }),
            Map::Chunked(c) => parallel::for_each_piece(values, parallel::PIECE, |_, piece| {
                piece
                    .iter_mut()
                    .for_each(|v| *v = c.invert(*v as u64) as i64)
            }),
            Map::Table(t) => {
                let mut wanted: std::collections::HashMap<i64, Vec<usize>> =
                    std::collections::HashMap::with_capacity(values.len());
                for (i, &id) in values.iter().enumerate() {
                    wanted.entry(id).or_default().push(i);
                }
                for (position, id) in t.iter().enumerate() {
                    if let Some(at) = wanted.get(id) {
                        at.iter().for_each(|&i| values[i] = position as i64);
                    }
                }
            }
        }
    }

    /// The ids at arbitrary positions; every position must be in `[0, len())`.
    pub fn take(&self, positions: &[i64]) -> Result<Vec<i64>> {
        if let Some(&bad) = positions.iter().find(|&&p| p < 0 || p as u64 >= self.n) {
            return Err(Error::Index(format!(
                "positions must be in [0, {}), got {bad}",
                self.n
            )));
        }
        let mut out = positions.to_vec();
        self.map_in_place(&mut out);
        Ok(out)
    }

    /// The ids at positions `start, start + step, ...` (`count` of them), all
    /// in `[0, len())`; `step` may be negative.
    pub fn range(&self, start: u64, step: i64, count: u64) -> Result<Vec<i64>> {
        if count > 0 {
            let last = start as i128 + step as i128 * (count as i128 - 1);
            if start >= self.n || last < 0 || last >= self.n as i128 {
                return Err(Error::Index(format!(
                    "positions must be in [0, {}), got a range from {start} to {last}",
                    self.n
                )));
            }
        }
        let mut out = zeroed_ids(count, "the requested ids")?;
        parallel::for_each_piece(&mut out, parallel::PIECE, |offset, v| {
            for (i, x) in v.iter_mut().enumerate() {
                *x = start as i64 + step * (offset + i) as i64;
            }
            self.map_slice(v);
        });
        Ok(out)
    }

    /// The whole order as one array, consuming the order: a materialised
    /// order hands over its table without a copy when nothing else shares it.
    pub fn into_vec(self) -> Result<Vec<i64>> {
        match self.map {
            Map::Table(t) => match Arc::try_unwrap(t) {
                Ok(table) => Ok(table),
                Err(shared) => Order {
                    map: Map::Table(shared),
                    ..self
                }
                .to_vec(),
            },
            _ => self.to_vec(),
        }
    }

    /// The whole order as one array.
    pub fn to_vec(&self) -> Result<Vec<i64>> {
        if let Map::Table(t) = &self.map {
            let mut copy = zeroed_ids(self.n, "a copy of the order")?;
            copy.copy_from_slice(t);
            return Ok(copy);
        }
        self.range(0, 1, self.n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_paths_agree_with_single_positions_on_any_thread_count() {
        // Several parallel pieces, the last one short: each piece must start
        // at its own positions.
        let n = 3 * parallel::PIECE as u64 + 5;
        let kinds = [
            Kind::Cipher,
            Kind::Uniform,
            Kind::Chunked {
                chunk_size: 1000,
                preload_nchunks: 3,
            },
            Kind::Identity,
        ];
        let _threads = parallel::test_threads_lock();
        for kind in kinds {
            let order = Order::new(n, 5, 6, kind).unwrap();
            let single: Vec<i64> = (0..n).map(|p| order.get(p).unwrap() as i64).collect();
            let reversed: Vec<i64> = single.iter().rev().copied().collect();
            let positions: Vec<i64> = (0..n as i64).rev().collect();
            for threads in [1, 2, 3] {
                parallel::set_num_threads(threads);
                let on = format!("{kind:?} on {threads} threads");
                assert_eq!(order.to_vec().unwrap(), single, "{on}");
                assert_eq!(order.range(n - 1, -1, n).unwrap(), reversed, "{on}");
                assert_eq!(order.take(&positions).unwrap(), reversed, "{on}");
            }
        }
        parallel::set_num_threads(0);
    }
}
