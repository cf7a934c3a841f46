//! Balancing a step's samples over ranks by cost: greedy least-loaded over
//! the samples by decreasing cost, or strided dealing when that is at least
//! as even. The bound and its proof are in the [parent module](super).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::buffer::vec_with_capacity;
use crate::error::{Error, Result};

mod sealed {
    pub trait Sealed {}
    impl Sealed for u64 {}
    impl Sealed for f64 {}
}

/// A rank's total cost under a floating-point cost model, ordered by
/// [`f64::total_cmp`] (costs are finite and `>= 0`, so this is the numeric
/// order, and `0.0 == -0.0` never arises: costs are normalised to `+0.0`).
#[derive(Debug, Clone, Copy, Default)]
pub struct FloatLoad(pub f64);

impl PartialEq for FloatLoad {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for FloatLoad {}

impl PartialOrd for FloatLoad {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for FloatLoad {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The cost of one sample: `u64` (tokens; a rank's load is their exact sum
/// in `u128`) or `f64` (a quadratic model; a rank's load is the binary64 sum
/// of its costs in the order the greedy assigns them, the same on every
/// machine).
pub trait CostValue: Copy + sealed::Sealed {
    /// The sum of the costs on one rank.
    type Load: Copy + Ord + Default + std::fmt::Debug;
    /// This cost as a load (a rank holding only this sample).
    fn as_load(self) -> Self::Load;
    /// `load + self`.
    fn add_to(self, load: Self::Load) -> Self::Load;
    /// `max - min` for `max >= min`.
    fn difference(max: Self::Load, min: Self::Load) -> Self::Load;
    /// A key in the order of the costs (for costs that passed
    /// [`CostValue::check`]).
    fn key(self) -> u64;
    /// An error unless every cost can be summed and ordered.
    fn check(costs: &[Self]) -> Result<()>;
    /// The costs as token counts, when they are.
    fn as_tokens(costs: &[Self]) -> Option<&[u64]> {
        let _ = costs;
        None
    }
}

impl CostValue for u64 {
    type Load = u128;
    fn as_load(self) -> u128 {
        u128::from(self)
    }
    fn add_to(self, load: u128) -> u128 {
        // A load sums at most `usize::MAX < 2^64` costs below `2^64`.
        load.saturating_add(u128::from(self))
    }
    fn difference(max: u128, min: u128) -> u128 {
        max.saturating_sub(min)
    }
    fn key(self) -> u64 {
        self
    }
    fn check(_: &[u64]) -> Result<()> {
        Ok(())
    }
    fn as_tokens(costs: &[u64]) -> Option<&[u64]> {
        Some(costs)
    }
}

impl CostValue for f64 {
    type Load = FloatLoad;
    fn as_load(self) -> FloatLoad {
        FloatLoad(self)
    }
    fn add_to(self, load: FloatLoad) -> FloatLoad {
        FloatLoad(load.0 + self)
    }
    fn difference(max: FloatLoad, min: FloatLoad) -> FloatLoad {
        FloatLoad(max.0 - min.0)
    }
    fn key(self) -> u64 {
        // The bits of a float >= +0.0 ascend with its value.
        (self + 0.0).to_bits()
    }
    fn check(costs: &[f64]) -> Result<()> {
        match costs.iter().position(|c| !(c.is_finite() && *c >= 0.0)) {
            Some(i) => Err(Error::Value(format!(
                "costs[{i}] must be finite and >= 0, got {:?}",
                costs[i]
            ))),
            None => Ok(()),
        }
    }
}

/// Which assignment a [`Balance`] kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// Greedy least-loaded over the samples by decreasing cost.
    Greedy,
    /// Sample `i` of the step to rank `i mod W` (kept when its spread is not
    /// above the greedy one's).
    Strided,
}

/// Every sample of a step assigned to one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balance {
    rank_of: Vec<usize>,
    world_size: u64,
    method: Method,
}

impl Balance {
    /// The rank of each sample of the step (`rank_of()[i]` for sample `i`),
    /// always below `min(W, n)`.
    pub fn rank_of(&self) -> &[usize] {
        &self.rank_of
    }

    /// The number of ranks `W`.
    pub fn world_size(&self) -> u64 {
        self.world_size
    }

    /// Which assignment was kept.
    pub fn method(&self) -> Method {
        self.method
    }

    /// Ranks that can hold samples: `min(W, n)`; the others hold none.
    pub fn active_ranks(&self) -> usize {
        active_ranks(self.rank_of.len(), self.world_size)
    }
}

/// `min(W, n)`, the ranks that hold samples in both dealings.
pub(crate) fn active_ranks(n: usize, world_size: u64) -> usize {
    usize::try_from(world_size).map_or(n, |w| w.min(n))
}

pub(crate) fn check_world_size(world_size: u64) -> Result<()> {
    if world_size == 0 {
        return Err(Error::Value("world_size must be >= 1, got 0".into()));
    }
    Ok(())
}

/// Assigns every sample of a step (`costs[i]` is sample `i`'s cost) to one
/// of `world_size` ranks: the greedy least-loaded assignment or the strided
/// one, whichever has the smaller [`spread`] (strided on a tie).
///
/// O(n log n) time and O(n) memory, whatever `world_size` is.
pub fn balance<C: CostValue>(costs: &[C], world_size: u64) -> Result<Balance> {
    check_world_size(world_size)?;
    C::check(costs)?;
    balance_in_order(costs, world_size, &by_decreasing_cost(costs)?)
}

/// [`balance`] of checked `costs` taken in `by_cost` order (decreasing cost,
/// ties: lower position first), which the caller already has.
pub(crate) fn balance_in_order<C: CostValue>(
    costs: &[C],
    world_size: u64,
    by_cost: &[usize],
) -> Result<Balance> {
    let greedy = greedy_in_order(costs, world_size, by_cost)?;
    let greedy_spread = spread_of(costs, &greedy, world_size)?;
    let (rank_of, method) = if strided_spread(costs, world_size)? <= greedy_spread {
        (strided(costs.len(), world_size)?, Method::Strided)
    } else {
        (greedy, Method::Greedy)
    };
    Ok(Balance {
        rank_of,
        world_size,
        method,
    })
}

/// Greedy least-loaded: samples by decreasing cost (ties: lower position
/// first), each to the rank with the least load (ties: fewer samples, then
/// the lower rank).
pub fn greedy<C: CostValue>(costs: &[C], world_size: u64) -> Result<Vec<usize>> {
    check_world_size(world_size)?;
    C::check(costs)?;
    greedy_in_order(costs, world_size, &by_decreasing_cost(costs)?)
}

/// The positions by decreasing cost, then increasing position.
fn by_decreasing_cost<C: CostValue>(costs: &[C]) -> Result<Vec<usize>> {
    let top = costs.iter().map(|c| c.key()).max().unwrap_or(0);
    order_by_key(
        costs.len(),
        |i| top - costs[i].key(),
        "the step's samples by cost",
    )
}

/// The positions by decreasing length, then increasing position, from
/// `by_length` (by increasing length, then position) in O(n): `by_length`
/// reversed, then each run of equal lengths (rare among a step's lengths)
/// turned back to increasing positions.
pub(crate) fn by_decreasing_length(by_length: &[usize], lengths: &[u64]) -> Result<Vec<usize>> {
    let mut out = vec_with_capacity(by_length.len(), "the step's samples by cost")?;
    out.extend(by_length.iter().rev());
    let mut start = 0;
    while start < out.len() {
        let length = lengths[out[start]];
        let mut end = start + 1;
        while end < out.len() && lengths[out[end]] == length {
            end += 1;
        }
        out[start..end].reverse();
        start = end;
    }
    Ok(out)
}

/// [`greedy`] with the samples taken in `by_cost` order.
fn greedy_in_order<C: CostValue>(
    costs: &[C],
    world_size: u64,
    by_cost: &[usize],
) -> Result<Vec<usize>> {
    match C::as_tokens(costs)
        .map(|tokens| greedy_packed(tokens, world_size, by_cost))
        .transpose()?
        .flatten()
    {
        Some(rank_of) => Ok(rank_of),
        None => greedy_heap(costs, world_size, by_cost),
    }
}

/// [`greedy_in_order`] with a heap of `(load, count, rank)` tuples: any
/// cost model.
fn greedy_heap<C: CostValue>(
    costs: &[C],
    world_size: u64,
    by_cost: &[usize],
) -> Result<Vec<usize>> {
    let n = costs.len();
    let active = active_ranks(n, world_size);
    let mut heap = BinaryHeap::new();
    heap.try_reserve_exact(active)
        .map_err(|_| Error::Memory(format!("cannot allocate {active} ranks: not enough memory")))?;
    heap.extend((0..active).map(|r| Reverse((C::Load::default(), 0usize, r))));
    let mut rank_of = vec_with_capacity(n, "the step's ranks")?;
    rank_of.resize(n, 0usize);
    for &i in by_cost {
        // The heap always holds `active >= 1` ranks when there is a sample;
        // the least-loaded rank takes the sample and sinks to its place.
        let Some(mut least) = heap.peek_mut() else {
            break;
        };
        let Reverse((load, count, rank)) = *least;
        rank_of[i] = rank;
        *least = Reverse((costs[i].add_to(load), count + 1, rank));
    }
    Ok(rank_of)
}

/// [`greedy_in_order`] for token costs whose sum fits in 64 bits (and fewer
/// than `2^32` samples and ranks): a rank's `(load, count, rank)` packed into
/// one integer whose order is that tuple's, so the least loaded rank is
/// found by comparing integers: a `u64` when the three fit in it (a step's
/// tokens, samples and ranks, as bits), else a `u128`. None otherwise.
fn greedy_packed(costs: &[u64], world_size: u64, by_cost: &[usize]) -> Result<Option<Vec<usize>>> {
    let n = costs.len();
    let active = active_ranks(n, world_size);
    let total: u128 = costs.iter().map(|&c| u128::from(c)).sum();
    if total > u128::from(u64::MAX) || n >= 1 << 32 || active >= 1 << 32 {
        return Ok(None);
    }
    let bits = |x: u128| 128 - x.leading_zeros();
    let (rank_bits, count_bits) = (bits(active as u128), bits(n as u128));
    if bits(total) + count_bits + rank_bits <= 64 {
        least_loaded::<u64>(costs, active, by_cost, rank_bits, count_bits).map(Some)
    } else {
        least_loaded::<u128>(costs, active, by_cost, 32, 32).map(Some)
    }
}

/// The greedy assignment over `active` ranks with keys of type `K`: the
/// rank in the low `rank_bits`, its count in the next `count_bits`, its load
/// above; the keys fit (the caller checked). A scan for the least key over
/// a few ranks, a heap over more.
fn least_loaded<K>(
    costs: &[u64],
    active: usize,
    by_cost: &[usize],
    rank_bits: u32,
    count_bits: u32,
) -> Result<Vec<usize>>
where
    K: Copy + Ord + TryFrom<u128> + Into<u128>,
{
    let key = |k: u128| {
        K::try_from(k)
            .ok()
            .unwrap_or_else(|| unreachable!("keys fit"))
    };
    let rank_mask = (1u128 << rank_bits) - 1;
    let one = 1u128 << rank_bits;
    let load_shift = rank_bits + count_bits;
    let mut rank_of = vec_with_capacity(costs.len(), "the step's ranks")?;
    rank_of.resize(costs.len(), 0usize);
    let step = |least: K, i: usize| -> K {
        key(least.into() + (u128::from(costs[i]) << load_shift) + one)
    };
    if active <= 16 {
        let mut keys: Vec<K> = (0..active).map(|r| key(r as u128)).collect();
        for &i in by_cost {
            let (at, &least) = keys
                .iter()
                .enumerate()
                .min_by_key(|(_, &k)| k)
                .unwrap_or_else(|| unreachable!("at least one rank"));
            rank_of[i] = (least.into() & rank_mask) as usize;
            keys[at] = step(least, i);
        }
    } else {
        let mut heap = BinaryHeap::new();
        heap.try_reserve_exact(active).map_err(|_| {
            Error::Memory(format!("cannot allocate {active} ranks: not enough memory"))
        })?;
        heap.extend((0..active).map(|r| Reverse(key(r as u128))));
        for &i in by_cost {
            let Some(mut least) = heap.peek_mut() else {
                break;
            };
            let k = least.0;
            rank_of[i] = (k.into() & rank_mask) as usize;
            least.0 = step(k, i);
        }
    }
    Ok(rank_of)
}

/// The positions `0..n` ordered by `(key(i), i)`. Each pair is packed into
/// one integer (a `u64` when both fit, else a `u128`) and sorted: the keys
/// are distinct, so the unstable sort has one result.
pub(crate) fn order_by_key(n: usize, key: impl Fn(usize) -> u64, what: &str) -> Result<Vec<usize>> {
    let index_bits = usize::BITS - n.saturating_sub(1).leading_zeros();
    let key_bits = 64 - (0..n).map(&key).max().unwrap_or(0).leading_zeros();
    let mut order = vec_with_capacity(n, what)?;
    if index_bits + key_bits <= 64 {
        let mut packed = vec_with_capacity(n, what)?;
        packed.extend((0..n).map(|i| ((u128::from(key(i)) << index_bits) as u64) | i as u64));
        packed.sort_unstable();
        let mask = (1u128 << index_bits) - 1;
        order.extend(packed.iter().map(|&k| (u128::from(k) & mask) as usize));
    } else {
        let mut packed = vec_with_capacity(n, what)?;
        packed.extend((0..n).map(|i| (u128::from(key(i)) << 64) | i as u128));
        packed.sort_unstable();
        order.extend(packed.iter().map(|&k| k as u64 as usize));
    }
    Ok(order)
}

/// Strided dealing: sample `i` to rank `i mod W`.
pub fn strided(n: usize, world_size: u64) -> Result<Vec<usize>> {
    check_world_size(world_size)?;
    let mut rank_of = vec_with_capacity(n, "the step's ranks")?;
    // `i mod W < min(W, n)`, so it fits in `usize`.
    rank_of.extend((0..n as u64).map(|i| (i % world_size) as usize));
    Ok(rank_of)
}

/// `max_r load_r - min_r load_r` over all `world_size` ranks (a rank with
/// no sample has load 0) when sample `i` costs `costs[i]` and is on rank
/// `rank_of[i]`.
pub fn spread<C: CostValue>(costs: &[C], rank_of: &[usize], world_size: u64) -> Result<C::Load> {
    check_world_size(world_size)?;
    if costs.len() != rank_of.len() {
        return Err(Error::Value(format!(
            "rank_of must hold one rank per sample ({}), got {}",
            costs.len(),
            rank_of.len()
        )));
    }
    if let Some((i, &r)) = rank_of
        .iter()
        .enumerate()
        .find(|&(_, &r)| r as u64 >= world_size)
    {
        return Err(Error::Value(format!(
            "rank_of[{i}] must be in [0, {}], got {r}",
            world_size - 1
        )));
    }
    spread_of(costs, rank_of, world_size)
}

/// [`spread`] for ranks known to be below `world_size`.
fn spread_of<C: CostValue>(costs: &[C], rank_of: &[usize], world_size: u64) -> Result<C::Load> {
    Ok(spread_of_loads::<C>(
        &loads(costs, rank_of, world_size)?,
        world_size,
    ))
}

/// `max - min` of the active ranks' `loads` (a rank past them has load 0).
fn spread_of_loads<C: CostValue>(loads: &[C::Load], world_size: u64) -> C::Load {
    let zero = C::Load::default();
    let max = loads.iter().copied().max().unwrap_or(zero);
    let mut min = loads.iter().copied().min().unwrap_or(zero);
    if (loads.len() as u64) < world_size {
        min = zero;
    }
    C::difference(max, min)
}

/// [`spread`] of the strided assignment, without building it: the same
/// loads, each rank's costs summed in position order.
fn strided_spread<C: CostValue>(costs: &[C], world_size: u64) -> Result<C::Load> {
    let active = active_ranks(costs.len(), world_size);
    let mut loads = vec_with_capacity(active, "the ranks' loads")?;
    loads.resize(active, C::Load::default());
    for chunk in costs.chunks(active.max(1)) {
        for (load, &c) in loads.iter_mut().zip(chunk) {
            *load = c.add_to(*load);
        }
    }
    Ok(spread_of_loads::<C>(&loads, world_size))
}

/// The load of each of the ranks that can hold samples (`min(W, n)`), the
/// costs of each rank summed in position order. Ranks outside are ignored.
pub(crate) fn loads<C: CostValue>(
    costs: &[C],
    rank_of: &[usize],
    world_size: u64,
) -> Result<Vec<C::Load>> {
    let active = active_ranks(costs.len().max(rank_of.len()), world_size);
    let mut loads = vec_with_capacity(active, "the ranks' loads")?;
    loads.resize(active, C::Load::default());
    for (&c, &r) in costs.iter().zip(rank_of) {
        if let Some(load) = loads.get_mut(r) {
            *load = c.add_to(*load);
        }
    }
    Ok(loads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strided_spread_is_that_of_the_strided_assignment() {
        let costs: Vec<u64> = (0..37u64).map(|i| (i * 7919) % 101).collect();
        let floats: Vec<f64> = costs.iter().map(|&c| c as f64 * 0.1).collect();
        for w in [1u64, 2, 5, 36, 37, 38, 1000] {
            let rank_of = strided(costs.len(), w).unwrap();
            assert_eq!(
                strided_spread(&costs, w).unwrap(),
                spread(&costs, &rank_of, w).unwrap()
            );
            let (a, b) = (
                strided_spread(&floats, w).unwrap(),
                spread(&floats, &rank_of, w).unwrap(),
            );
            assert_eq!(a.0.to_bits(), b.0.to_bits(), "w={w}");
        }
    }

    #[test]
    fn packed_token_loads_deal_as_the_tuple_heap() {
        let mut x = 7u64;
        for n in [1usize, 2, 5, 40, 333] {
            for w in [1u64, 2, 3, 8, 64, 1000] {
                let costs: Vec<u64> = (0..n)
                    .map(|_| {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        (x >> 40) % 50
                    })
                    .collect();
                // Small loads pack into u64 keys, large ones into u128.
                for scale in [1u64, 1 << 40] {
                    let costs: Vec<u64> = costs.iter().map(|&c| c * scale).collect();
                    let order = by_decreasing_cost(&costs).unwrap();
                    let packed = greedy_packed(&costs, w, &order).unwrap().unwrap();
                    let want = greedy_heap(&costs, w, &order).unwrap();
                    assert_eq!(packed, want, "n={n} w={w} scale={scale}");
                }
            }
        }
        // Loads past 64 bits take the tuple heap.
        assert_eq!(greedy_packed(&[u64::MAX, 1], 1, &[0, 1]).unwrap(), None);
    }

    #[test]
    fn greedy_puts_each_sample_on_the_least_loaded_rank() {
        // By cost: 9 (pos 1), 5 (pos 3), 4 (pos 0), 4 (pos 2), 1 (pos 4).
        let costs = [4u64, 9, 4, 5, 1];
        assert_eq!(greedy(&costs, 2).unwrap(), vec![1, 0, 0, 1, 1]);
        // Loads 13 and 10: spread 3 <= 9; strided gives 4+4+1 = 9 and 14: spread 5.
        let b = balance(&costs, 2).unwrap();
        assert_eq!(b.method(), Method::Greedy);
        assert_eq!(spread(&costs, b.rank_of(), 2).unwrap(), 3);
        assert_eq!(spread(&costs, &strided(5, 2).unwrap(), 2).unwrap(), 5);
    }

    #[test]
    fn equal_costs_keep_the_strided_dealing() {
        let costs = [7u64; 10];
        assert_eq!(greedy(&costs, 3).unwrap(), strided(10, 3).unwrap());
        let b = balance(&costs, 3).unwrap();
        assert_eq!(b.method(), Method::Strided);
        assert_eq!(b.rank_of(), &[0, 1, 2, 0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn strided_is_kept_when_it_is_more_even() {
        // Greedy: 3, 3, then 2, 2, 2 alternately: loads 7 and 5. Strided: 6 and 6.
        let costs = [2u64, 3, 2, 3, 2];
        assert_eq!(spread(&costs, &greedy(&costs, 2).unwrap(), 2).unwrap(), 2);
        let b = balance(&costs, 2).unwrap();
        assert_eq!(b.method(), Method::Strided);
        assert_eq!(spread(&costs, b.rank_of(), 2).unwrap(), 0);
    }

    #[test]
    fn more_ranks_than_samples_leave_ranks_empty() {
        let costs = [3u64, 8];
        let b = balance(&costs, 5).unwrap();
        assert_eq!(b.active_ranks(), 2);
        assert_eq!(b.method(), Method::Strided);
        assert_eq!(spread(&costs, b.rank_of(), 5).unwrap(), 8);
        assert_eq!(balance::<u64>(&[], 4).unwrap().rank_of(), &[] as &[usize]);
        assert_eq!(spread::<u64>(&[], &[], 4).unwrap(), 0);
    }

    #[test]
    fn a_zero_cost_sample_goes_to_an_empty_rank_first() {
        // Ties on load are broken by fewer samples: the second zero goes to rank 1.
        assert_eq!(greedy(&[0u64, 0, 0], 2).unwrap(), vec![0, 1, 0]);
    }

    #[test]
    fn float_costs_balance_like_integer_ones() {
        let ints = [4u64, 9, 4, 5, 1];
        let floats: Vec<f64> = ints.iter().map(|&c| c as f64).collect();
        assert_eq!(
            balance(&floats, 2).unwrap().rank_of(),
            balance(&ints, 2).unwrap().rank_of()
        );
        assert_eq!(
            spread(&floats, &[1, 0, 0, 1, 1], 2).unwrap(),
            FloatLoad(3.0)
        );
    }

    #[test]
    fn huge_token_counts_do_not_overflow() {
        let costs = [u64::MAX; 5];
        let b = balance(&costs, 2).unwrap();
        assert_eq!(
            spread(&costs, b.rank_of(), 2).unwrap(),
            u128::from(u64::MAX)
        );
    }

    #[test]
    fn positions_are_ordered_by_key_then_position_in_both_widths() {
        let small = [3u64, 1, 3, 0, 1];
        assert_eq!(
            order_by_key(5, |i| small[i], "").unwrap(),
            vec![3, 1, 4, 0, 2]
        );
        let wide = [u64::MAX, 1, u64::MAX, 0, 1];
        assert_eq!(
            order_by_key(5, |i| wide[i], "").unwrap(),
            vec![3, 1, 4, 0, 2]
        );
        assert_eq!(order_by_key(1, |_| u64::MAX, "").unwrap(), vec![0]);
        assert_eq!(order_by_key(2, |_| 0, "").unwrap(), vec![0, 1]);
        assert!(order_by_key(0, |_| 0, "").unwrap().is_empty());
    }

    #[test]
    fn decreasing_lengths_keep_increasing_positions_in_ties() {
        // Every mix of runs: lengths from a few values, many ties.
        let mut state = 7u64;
        for n in [0usize, 1, 2, 3, 17, 300] {
            for values in [1u64, 2, 5, 1000] {
                let lengths: Vec<u64> = (0..n)
                    .map(|_| {
                        state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                        (state >> 33) % values
                    })
                    .collect();
                let by_length = order_by_key(n, |i| lengths[i], "").unwrap();
                let mut want: Vec<usize> = (0..n).collect();
                want.sort_by_key(|&i| (std::cmp::Reverse(lengths[i]), i));
                assert_eq!(by_decreasing_length(&by_length, &lengths).unwrap(), want);
            }
        }
    }

    #[test]
    fn bad_arguments_are_errors() {
        assert!(balance(&[1u64], 0).is_err());
        let err = spread(&[1u64, 2], &[0, 3], 2).unwrap_err();
        assert_eq!(err.to_string(), "rank_of[1] must be in [0, 1], got 3");
        assert!(spread(&[1u64, 2], &[0], 2).is_err());
        let err = balance(&[1.0, -2.0], 2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "costs[1] must be finite and >= 0, got -2.0"
        );
        assert!(greedy(&[f64::NAN], 2).is_err());
    }
}
