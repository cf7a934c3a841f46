//! Samples longer than the token cap, found before the first batch.
//!
//! A sample longer than `max_tokens` fits in no micro-batch. Found step by
//! step, it stops a run hours in (at the step that holds it); found here,
//! once, by one pass over the lengths in id order (a memmap read front to
//! back, O(N) time and O(k) memory for `k` samples over the cap), it stops
//! the run before the first batch, or a policy decides (section 11 of the
//! design):
//!
//! - [`Oversize::Error`]: an error naming how many and the first ids;
//! - [`Oversize::Truncate`]: each such sample is cut to its first
//!   `max_tokens` tokens ([`truncated`]: its loss tokens lose the tokens cut);
//! - [`Oversize::Skip`]: the samples leave the plan's index space, so no
//!   step holds them and no weight or `step_tokens` counts them.

use crate::dealing::SampleLengths;
use crate::error::{Error, Result};

/// How many oversize samples an error names (all are counted).
pub const NAMED_IDS: usize = 10;

/// What happens to a sample longer than `max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Oversize {
    /// Refuse the plan, naming how many and the first ids.
    #[default]
    Error,
    /// Cut each to its first `max_tokens` tokens.
    Truncate,
    /// Leave them out of the plan.
    Skip,
}

impl Oversize {
    /// The policy named `name` (`"error"`, `"truncate"` or `"skip"`).
    pub fn parse(name: &str) -> Result<Oversize> {
        match name {
            "error" => Ok(Oversize::Error),
            "truncate" => Ok(Oversize::Truncate),
            "skip" => Ok(Oversize::Skip),
            other => Err(Error::Value(format!(
                "oversize must be \"error\", \"truncate\" or \"skip\", got {other:?}"
            ))),
        }
    }

    /// The policy's name.
    pub fn name(&self) -> &'static str {
        match self {
            Oversize::Error => "error",
            Oversize::Truncate => "truncate",
            Oversize::Skip => "skip",
        }
    }
}

/// The samples over a cap: their ids (ascending) and lengths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OversizeReport {
    /// The cap.
    pub max_tokens: u64,
    /// The ids of the samples longer than `max_tokens`, ascending.
    pub ids: Vec<u64>,
    /// Their lengths, in the same order.
    pub lengths: Vec<u64>,
}

impl OversizeReport {
    /// How many samples are over the cap.
    pub fn count(&self) -> usize {
        self.ids.len()
    }

    /// The error of [`Oversize::Error`] when any sample is over the cap:
    /// how many, and the first [`NAMED_IDS`] ids with their lengths.
    pub fn error(&self) -> Option<Error> {
        if self.ids.is_empty() {
            return None;
        }
        let named: Vec<String> = self
            .ids
            .iter()
            .zip(&self.lengths)
            .take(NAMED_IDS)
            .map(|(id, l)| format!("{id} ({l} tokens)"))
            .collect();
        let more = if self.count() > NAMED_IDS {
            format!(" and {} more", self.count() - NAMED_IDS)
        } else {
            String::new()
        };
        let noun = if self.count() == 1 {
            "sample is"
        } else {
            "samples are"
        };
        Some(Error::Value(format!(
            "lengths: {} {noun} longer than max_tokens ({}), which no micro-batch can hold; \
             the first ids: {}{more}. Give oversize=\"skip\" (or \"truncate\", in a sampler), or a \
             larger max_tokens",
            self.count(),
            self.max_tokens,
            named.join(", "),
        )))
    }
}

/// One pass over the lengths in id order, chunk by chunk.
#[derive(Debug, Clone)]
pub struct OversizeScan {
    report: OversizeReport,
    next: u64,
}

impl OversizeScan {
    /// A scan for samples longer than `max_tokens` (>= 1).
    pub fn new(max_tokens: u64) -> Result<OversizeScan> {
        if max_tokens == 0 {
            return Err(Error::Value("max_tokens must be >= 1, got 0".into()));
        }
        Ok(OversizeScan {
            report: OversizeReport {
                max_tokens,
                ids: Vec::new(),
                lengths: Vec::new(),
            },
            next: 0,
        })
    }

    /// The lengths of the next ids (`lengths[0]` is the id after the last
    /// one fed); an id for which `holds` is false (outside the plan's index
    /// space) is passed over.
    pub fn feed(&mut self, lengths: &[u64], holds: impl Fn(u64) -> bool) -> Result<()> {
        let cap = self.report.max_tokens;
        for (i, &length) in lengths.iter().enumerate() {
            if length > cap {
                let id = self.next + i as u64;
                if holds(id) {
                    self.report.ids.try_reserve(1).map_err(|_| {
                        Error::Memory("cannot allocate the ids of the oversize samples".into())
                    })?;
                    self.report.lengths.try_reserve(1).map_err(|_| {
                        Error::Memory("cannot allocate the ids of the oversize samples".into())
                    })?;
                    self.report.ids.push(id);
                    self.report.lengths.push(length);
                }
            }
        }
        self.next += lengths.len() as u64;
        Ok(())
    }

    /// The report of everything fed.
    pub fn finish(self) -> OversizeReport {
        self.report
    }
}

/// A sample of `length` tokens, `loss_tokens` of them in the loss, cut to
/// its first `max_tokens` tokens: `(length, loss_tokens)` afterwards. The
/// tokens cut are the last ones, each counted as a loss token while any are
/// left (the targets of a causal LM and an SFT response are at the end), so
/// `loss_tokens` loses `length - max_tokens`, down to 0. A sample within
/// the cap is unchanged.
pub fn truncated(length: u64, loss_tokens: u64, max_tokens: u64) -> (u64, u64) {
    if length <= max_tokens {
        (length, loss_tokens)
    } else {
        (max_tokens, loss_tokens.saturating_sub(length - max_tokens))
    }
}

/// Lengths read cut to `cap` tokens ([`truncated`]): what a plan that cuts
/// its samples (`oversize="truncate"`) deals, caps and stores.
#[derive(Debug, Clone, Copy)]
pub struct CutLengths<L> {
    /// The lengths as given.
    pub lengths: L,
    /// The most tokens a sample keeps.
    pub cap: u64,
}

impl<L: SampleLengths> SampleLengths for CutLengths<L> {
    fn num_samples(&self) -> u64 {
        self.lengths.num_samples()
    }

    fn read(&self, name: &str, ids: &[i64], out: &mut Vec<u64>) -> Result<()> {
        let start = out.len();
        self.lengths.read(name, ids, out)?;
        out[start..]
            .iter_mut()
            .for_each(|l| *l = (*l).min(self.cap));
        Ok(())
    }

    fn file_mapped(&self) -> bool {
        self.lengths.file_mapped()
    }

    fn read_run(&self, name: &str, start: u64, end: u64, out: &mut Vec<u64>) -> Result<()> {
        let first = out.len();
        self.lengths.read_run(name, start, end, out)?;
        out[first..]
            .iter_mut()
            .for_each(|l| *l = (*l).min(self.cap));
        Ok(())
    }
}

/// Loss tokens of samples cut to `cap` tokens ([`truncated`]: a sample
/// loses its last tokens, each a loss token while any are left).
#[derive(Debug, Clone, Copy)]
pub struct CutLoss<L, M> {
    /// The loss tokens as given.
    pub loss_tokens: L,
    /// The lengths as given.
    pub lengths: M,
    /// The most tokens a sample keeps.
    pub cap: u64,
}

impl<L: SampleLengths, M: SampleLengths> SampleLengths for CutLoss<L, M> {
    fn num_samples(&self) -> u64 {
        self.loss_tokens.num_samples()
    }

    fn read(&self, name: &str, ids: &[i64], out: &mut Vec<u64>) -> Result<()> {
        let start = out.len();
        self.loss_tokens.read(name, ids, out)?;
        let mut lengths = Vec::new();
        self.lengths.read("lengths", ids, &mut lengths)?;
        for (loss, &length) in out[start..].iter_mut().zip(&lengths) {
            *loss = truncated(length, *loss, self.cap).1;
        }
        Ok(())
    }

    fn file_mapped(&self) -> bool {
        self.loss_tokens.file_mapped() || self.lengths.file_mapped()
    }

    fn read_run(&self, name: &str, start: u64, end: u64, out: &mut Vec<u64>) -> Result<()> {
        let first = out.len();
        self.loss_tokens.read_run(name, start, end, out)?;
        let mut lengths = Vec::new();
        self.lengths.read_run("lengths", start, end, &mut lengths)?;
        for (loss, &length) in out[first..].iter_mut().zip(&lengths) {
            *loss = truncated(length, *loss, self.cap).1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_readers_cut_as_truncated_does() {
        let lengths: &[u32] = &[3, 10, 7, 12];
        let loss: &[u32] = &[2, 9, 7, 1];
        let cut = CutLengths { lengths, cap: 7 };
        let cut_loss = CutLoss {
            loss_tokens: loss,
            lengths,
            cap: 7,
        };
        let (mut got, mut got_loss) = (vec![99], vec![99]);
        cut.read("lengths", &[3, 0, 1, 2], &mut got).unwrap();
        cut_loss
            .read("loss_tokens", &[3, 0, 1, 2], &mut got_loss)
            .unwrap();
        assert_eq!(got, [99, 7, 3, 7, 7]);
        // 12 -> 7 loses 5 tokens (1 loss token left: 0); 10 -> 7 loses 3 of 9.
        assert_eq!(got_loss, [99, 0, 2, 6, 7]);
        assert_eq!((cut.num_samples(), cut_loss.num_samples()), (4, 4));
    }

    fn scan(lengths: &[u64], cap: u64, chunk: usize) -> OversizeReport {
        let mut scan = OversizeScan::new(cap).unwrap();
        for part in lengths.chunks(chunk) {
            scan.feed(part, |_| true).unwrap();
        }
        scan.finish()
    }

    #[test]
    fn the_scan_finds_every_sample_over_the_cap_whatever_the_chunks() {
        let lengths: Vec<u64> = (0..1000u64).map(|i| (i * 7919) % 113).collect();
        let expected: Vec<u64> = (0..1000).filter(|&i| lengths[i as usize] > 100).collect();
        for chunk in [1, 3, 64, 1000] {
            let report = scan(&lengths, 100, chunk);
            assert_eq!(report.ids, expected);
            let got: Vec<u64> = report.ids.iter().map(|&i| lengths[i as usize]).collect();
            assert_eq!(report.lengths, got);
        }
        assert!(scan(&lengths, 112, 10).error().is_none());
    }

    #[test]
    fn ids_outside_the_space_are_passed_over() {
        let mut s = OversizeScan::new(5).unwrap();
        s.feed(&[9, 9, 1], |id| id != 0).unwrap();
        s.feed(&[9], |_| true).unwrap();
        assert_eq!(s.finish().ids, vec![1, 3]);
    }

    #[test]
    fn the_error_counts_all_and_names_the_first_ten() {
        let lengths = vec![50u64; 12];
        let err = scan(&lengths, 49, 5).error().unwrap().to_string();
        assert!(err.starts_with("lengths: 12 samples are longer than max_tokens (49)"));
        assert!(err.contains("0 (50 tokens), 1 (50 tokens)"), "{err}");
        assert!(err.contains("9 (50 tokens) and 2 more. Give"), "{err}");
        assert!(!err.contains("10 (50"), "{err}");
        let one = scan(&[1, 60], 49, 5).error().unwrap().to_string();
        assert!(one.contains("1 sample is longer") && one.contains("1 (60 tokens). Give"));
        assert!(OversizeScan::new(0).is_err());
    }

    #[test]
    fn truncation_cuts_the_length_and_the_loss_tokens_of_the_tail() {
        assert_eq!(truncated(10, 9, 4), (4, 3)); // a causal LM: L - 1 targets
        assert_eq!(truncated(10, 10, 4), (4, 4));
        assert_eq!(truncated(10, 3, 4), (4, 0)); // only the tail counted
        assert_eq!(truncated(4, 3, 4), (4, 3));
        assert_eq!(truncated(u64::MAX, u64::MAX, 1), (1, 1));
    }

    #[test]
    fn policies_parse_by_name() {
        for p in [Oversize::Error, Oversize::Truncate, Oversize::Skip] {
            assert_eq!(Oversize::parse(p.name()).unwrap(), p);
        }
        let err = Oversize::parse("drop").unwrap_err().to_string();
        assert!(err.starts_with("oversize must be"), "{err}");
    }
}
