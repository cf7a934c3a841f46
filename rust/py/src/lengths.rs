//! Token plans' arrays: `lengths` and `loss_tokens` held as the caller's
//! numpy arrays (an `np.memmap` too, of any integer dtype), read per step by
//! id under the GIL (only the step's entries are copied), their digest, and
//! the `cost`, `loss_normalization` and cap arguments.

use crate::args::{int_arg, str_arg, MAX_I64};
use crate::errors::IntoPyResult;
use crate::spec::Tokens;
use epochplan_core::buffer::vec_with_capacity;
use epochplan_core::dealing::{negative_length, LengthsDigest, SampleLengths};
use epochplan_core::pages::Pages;
use epochplan_core::planfile::FileDtype;
use epochplan_core::space::Space;
use epochplan_core::tokens::{
    truncated, Caps, Cost, Normalization, OversizeReport, OversizeScan, Packing,
};
use epochplan_core::{Error, Result};
use numpy::{PyArray1, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyTuple};
use std::sync::{Arc, Mutex, OnceLock};

/// A plan's token arrays and their digests (computed once, when a state
/// is first asked for).
#[derive(Debug)]
pub struct TokenArrays {
    /// Tokens per sample (a 1-d integer array of N entries).
    pub lengths: Py<PyUntypedArray>,
    /// Loss tokens per sample, when not the lengths.
    pub loss_tokens: Option<Py<PyUntypedArray>>,
    /// Samples longer than this are read cut to it (`oversize="truncate"`).
    pub max_length: Option<u64>,
    /// How a rank's share is cut into micro-batches.
    pub packing: Packing,
    digests: OnceLock<(String, Option<String>)>,
    /// The oversize reports made so far, by cap: one pass over the lengths
    /// for each cap a plan is asked for.
    oversize: Mutex<Vec<Arc<OversizeReport>>>,
}

impl TokenArrays {
    /// The arrays of `tokens` for a store of `num_samples` samples (one
    /// entry each), read cut to its `max_length`.
    pub fn of(py: Python<'_>, tokens: &Tokens, num_samples: u64) -> PyResult<TokenArrays> {
        let sized = |array: &Py<PyUntypedArray>, name: &str| -> PyResult<Py<PyUntypedArray>> {
            checked_array(array.bind(py).as_any(), name, Some(num_samples))
        };
        Ok(TokenArrays {
            lengths: sized(&tokens.lengths, "lengths")?,
            loss_tokens: tokens
                .loss_tokens
                .as_ref()
                .map(|l| sized(l, "loss_tokens"))
                .transpose()?,
            max_length: tokens.max_length,
            packing: tokens.packing,
            digests: OnceLock::new(),
            oversize: Mutex::new(Vec::new()),
        })
    }

    /// Readers of the arrays for the duration of a GIL hold, as the plan
    /// sees them (cut to `max_length`).
    pub fn readers<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(NumpyLengths<'py>, Option<NumpyLengths<'py>>)> {
        let (mut lengths, mut loss) = self.raw_readers(py)?;
        if let Some(cap) = self.max_length {
            if let Some(loss) = &mut loss {
                loss.clip = Clip::Loss {
                    cap,
                    lengths: Box::new(NumpyLengths::new(self.lengths.bind(py).clone())?),
                };
            }
            lengths.clip = Clip::Lengths(cap);
        }
        Ok((lengths, loss))
    }

    /// The types a plan file stores the lengths and the loss tokens in:
    /// their arrays' own up to 32 bits, int64 above (the loss tokens' is
    /// the lengths' when there are none).
    pub fn file_dtypes(&self, py: Python<'_>) -> PyResult<(FileDtype, FileDtype)> {
        let of = |array: &Py<PyUntypedArray>| -> PyResult<FileDtype> {
            let dtype = array.bind(py).getattr("dtype")?;
            let kind: String = dtype.getattr("kind")?.extract()?;
            let itemsize: usize = dtype.getattr("itemsize")?.extract()?;
            Ok(FileDtype::for_source(kind == "i", itemsize))
        };
        let lengths = of(&self.lengths)?;
        let loss = self.loss_tokens.as_ref().map(of).transpose()?;
        Ok((lengths, loss.unwrap_or(lengths)))
    }

    /// Readers of the arrays as given.
    fn raw_readers<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(NumpyLengths<'py>, Option<NumpyLengths<'py>>)> {
        let lengths = NumpyLengths::new(self.lengths.bind(py).clone())?;
        let loss = match &self.loss_tokens {
            Some(l) => Some(NumpyLengths::new(l.bind(py).clone())?),
            None => None,
        };
        Ok((lengths, loss))
    }

    /// The samples of `space` longer than `max_tokens` (after any cut to
    /// `max_length`): one pass over the lengths in id order the first time
    /// a cap is asked for, then kept.
    pub fn oversize(
        &self,
        py: Python<'_>,
        max_tokens: u64,
        space: &Space,
    ) -> PyResult<Arc<OversizeReport>> {
        if self.max_length.is_some_and(|m| m <= max_tokens) {
            // Every sample is cut to fit: nothing to read.
            return Ok(Arc::new(OversizeReport {
                max_tokens,
                ids: Vec::new(),
                lengths: Vec::new(),
            }));
        }
        let mut made = self.oversize.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(report) = made.iter().find(|r| r.max_tokens == max_tokens) {
            return Ok(report.clone());
        }
        let (lengths, _) = self.readers(py)?;
        let n = lengths.num_samples();
        let report = Arc::new(
            lengths
                .scan("lengths", max_tokens, |id| space.holds(id, n))
                .py()?,
        );
        made.push(report.clone());
        Ok(report)
    }

    /// The error of the samples of `space` over `max_tokens`, with how many
    /// and the first ids, when there are any (the report is made once a
    /// cap, see [`TokenArrays::oversize`]).
    pub fn refuse_oversize(&self, py: Python<'_>, max_tokens: u64, space: &Space) -> PyResult<()> {
        match self.oversize(py, max_tokens, space)?.error() {
            Some(err) => Err(err).py(),
            None => Ok(()),
        }
    }

    /// The digests of `lengths` and of `loss_tokens` (None when they are
    /// the lengths): O(N) the first time, then kept.
    pub fn digests(&self, py: Python<'_>) -> PyResult<&(String, Option<String>)> {
        if let Some(d) = self.digests.get() {
            return Ok(d);
        }
        let (lengths, loss) = self.raw_readers(py)?;
        let made = (
            lengths.digest("lengths").py()?,
            loss.map(|l| l.digest("loss_tokens")).transpose().py()?,
        );
        Ok(self.digests.get_or_init(|| made))
    }
}

/// `obj` as a 1-d integer numpy array (of `num_samples` entries, when
/// given), held as it is (not copied) when it is one already.
pub fn checked_array(
    obj: &Bound<'_, PyAny>,
    name: &str,
    num_samples: Option<u64>,
) -> PyResult<Py<PyUntypedArray>> {
    let py = obj.py();
    let array = match obj.cast::<PyUntypedArray>() {
        Ok(a) => a.clone(),
        Err(_) => crate::args::asarray(obj, name)?
            .cast_into::<PyUntypedArray>()
            .map_err(|_| PyTypeError::new_err(format!("{name} must be a numpy array")))?,
    };
    let dtype = array.getattr("dtype")?;
    let kind: String = dtype.getattr("kind")?.extract()?;
    if kind != "i" && kind != "u" {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an array of integers, got dtype {}",
            dtype.str()?
        )));
    }
    if !dtype.getattr("isnative")?.extract::<bool>()? {
        return Err(PyTypeError::new_err(format!(
            "{name} must be in the machine's byte order, got dtype {}",
            dtype.str()?
        )));
    }
    if array.ndim() != 1 {
        return Err(PyValueError::new_err(format!(
            "{name} must be a 1-d array, got {} dimensions",
            array.ndim()
        )));
    }
    if let Some(n) = num_samples.filter(|&n| array.len() as u64 != n) {
        return Err(PyValueError::new_err(format!(
            "{name} must hold one value per sample ({n}), got {}",
            array.len()
        )));
    }
    let _ = py;
    Ok(array.unbind())
}

/// A numpy integer array read by id while the GIL is held.
#[derive(Debug)]
pub struct NumpyLengths<'py> {
    array: Bound<'py, PyUntypedArray>,
    clip: Clip<'py>,
}

/// How values are cut as they are read (`oversize="truncate"`).
#[derive(Debug)]
enum Clip<'py> {
    /// As they are.
    None,
    /// Lengths, cut to the cap.
    Lengths(u64),
    /// Loss tokens, less the tokens cut from the sample (its `lengths`).
    Loss {
        cap: u64,
        lengths: Box<NumpyLengths<'py>>,
    },
}

/// Values a pass in id order (the oversize scan, the digest) reads at a
/// time (512 KiB of buffer, whatever N).
const CHUNK: usize = 1 << 16;

macro_rules! by_dtype {
    ($array:expr, $name:expr, |$view:ident| $body:expr) => {{
        let array = $array;
        by_dtype!(@try array, $name, $view, $body; i32, i64, u32, u64, i16, u16, i8, u8)
    }};
    (@try $array:ident, $name:expr, $view:ident, $body:expr; $($t:ty),*) => {{
        $(
            if let Ok(typed) = $array.cast::<PyArray1<$t>>() {
                let readonly = typed.try_readonly().map_err(|e| {
                    Error::Value(format!("{} cannot be read: {e}", $name))
                })?;
                let $view = readonly.as_array();
                return $body;
            }
        )*
        Err(Error::Value(format!("{} must be an array of integers", $name)))
    }};
}

impl<'py> NumpyLengths<'py> {
    fn new(array: Bound<'py, PyUntypedArray>) -> PyResult<Self> {
        Ok(NumpyLengths {
            array,
            clip: Clip::None,
        })
    }

    /// The values as given (never cut), in id order, a chunk of up to
    /// [`CHUNK`] at a time, each passed to `f` (which may change them); an
    /// error for a negative one, naming `name` and its id. A memmap is read
    /// front to back once, its pages given back behind the pass.
    fn each_chunk(&self, name: &str, mut f: impl FnMut(&mut Vec<u64>) -> Result<()>) -> Result<()> {
        let mut buffer: Vec<u64> = vec_with_capacity(CHUNK.min(self.array.len()), name)?;
        by_dtype!(&self.array, name, |view| {
            let n = view.len();
            // A memory-mapped file's pages are given back as the pass
            // leaves them (see `epochplan_core::pages`).
            let whole = view.as_slice();
            let pages = whole.and_then(Pages::of);
            let mut start = 0usize;
            while start < n {
                let end = (start + CHUNK).min(n);
                buffer.clear();
                for (i, value) in view
                    .slice(numpy::ndarray::s![start..end])
                    .iter()
                    .enumerate()
                {
                    let value = i128::from(*value);
                    if value < 0 {
                        return Err(negative_length(name, (start + i) as i64, value));
                    }
                    buffer.push(value as u64);
                }
                f(&mut buffer)?;
                if let (Some(pages), Some(whole)) = (&pages, whole) {
                    pages.release(&whole[start..end]);
                }
                start = end;
            }
            Ok(())
        })
    }

    /// The ids `holds` keeps whose value is above `max_tokens` (after any
    /// cut): one pass in id order.
    fn scan(
        &self,
        name: &str,
        max_tokens: u64,
        holds: impl Fn(u64) -> bool,
    ) -> Result<OversizeReport> {
        let mut scan = OversizeScan::new(max_tokens)?;
        self.each_chunk(name, |values| {
            for v in values.iter_mut() {
                *v = self.clip_length(*v);
            }
            scan.feed(values, &holds)
        })?;
        Ok(scan.finish())
    }

    /// A length as the plan sees it (cut to the cap when truncating).
    fn clip_length(&self, value: u64) -> u64 {
        match self.clip {
            Clip::Lengths(cap) => value.min(cap),
            _ => value,
        }
    }

    /// The digest of the values as given (never cut): one pass in id order.
    fn digest(&self, name: &str) -> Result<String> {
        let mut digest = LengthsDigest::new(self.array.len() as u64);
        self.each_chunk(name, |values| {
            digest.update(values);
            Ok(())
        })?;
        Ok(digest.finish())
    }
}

impl SampleLengths for NumpyLengths<'_> {
    fn num_samples(&self) -> u64 {
        self.array.len() as u64
    }

    fn read(&self, name: &str, ids: &[i64], out: &mut Vec<u64>) -> Result<()> {
        out.try_reserve(ids.len())
            .map_err(|_| Error::Memory("cannot allocate the step's lengths".into()))?;
        let start = out.len();
        (|| -> Result<()> {
            by_dtype!(&self.array, name, |view| {
                for &id in ids {
                    let value = usize::try_from(id)
                        .ok()
                        .and_then(|i| view.get(i))
                        .ok_or_else(|| {
                            Error::Index(format!(
                                "sample id must be in [0, {}), got {id}",
                                view.len()
                            ))
                        })?;
                    let value = i128::from(*value);
                    if value < 0 {
                        return Err(negative_length(name, id, value));
                    }
                    out.push(value as u64);
                }
                Ok(())
            })
        })()?;
        match &self.clip {
            Clip::None => {}
            Clip::Lengths(cap) => {
                for v in &mut out[start..] {
                    *v = (*v).min(*cap);
                }
            }
            Clip::Loss { cap, lengths } => {
                let mut full = Vec::new();
                lengths.read("lengths", ids, &mut full)?;
                for (v, &l) in out[start..].iter_mut().zip(&full) {
                    *v = truncated(l, *v, *cap).1;
                }
            }
        }
        Ok(())
    }
}

/// The `cost` argument: "tokens" or a pair (a, b) for `a*L + b*L^2`.
pub fn cost_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Cost>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    // A pair as a tuple, or as the list JSON makes of it (a state or spec
    // read back from JSON).
    let pair = match obj.cast::<pyo3::types::PyList>() {
        Ok(list) => Some(list.to_tuple()),
        Err(_) => obj.cast::<PyTuple>().ok().cloned(),
    };
    if let Some(tuple) = pair {
        let number = |x: Bound<'_, PyAny>| -> PyResult<f64> {
            if x.is_instance_of::<PyFloat>() || x.is_instance_of::<PyInt>() {
                x.extract()
            } else {
                Err(PyTypeError::new_err(format!(
                    "cost must be \"tokens\" or a pair (a, b) of numbers, got an item of type {}",
                    x.get_type().name()?
                )))
            }
        };
        if tuple.len() == 2 {
            let (a, b) = (number(tuple.get_item(0)?)?, number(tuple.get_item(1)?)?);
            return Cost::quadratic(a, b).py().map(Some);
        }
        return Err(PyValueError::new_err(format!(
            "cost must be \"tokens\" or a pair (a, b), got a tuple of {} items",
            tuple.len()
        )));
    }
    if str_arg(obj, "cost").is_ok_and(|s| s == "tokens") {
        return Ok(Some(Cost::Tokens));
    }
    if str_arg(obj, "cost").is_ok() {
        return Err(PyValueError::new_err(format!(
            "cost must be \"tokens\" or a pair (a, b), got {}",
            obj.repr()?
        )));
    }
    Err(PyTypeError::new_err(format!(
        "cost must be \"tokens\" or a pair (a, b), got {}",
        obj.get_type().name()?
    )))
}

/// The `loss_normalization` argument: "tokens" or "samples".
pub fn normalization_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Normalization>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    match str_arg(obj, "loss_normalization")?.as_str() {
        "tokens" => Ok(Some(Normalization::Tokens)),
        "samples" => Ok(Some(Normalization::Samples)),
        other => Err(PyValueError::new_err(format!(
            "loss_normalization must be \"tokens\" or \"samples\", got {other:?}"
        ))),
    }
}

/// The name of a cost, as a state records it: "tokens" or [a, b].
pub fn cost_value<'py>(py: Python<'py>, cost: Cost) -> PyResult<Bound<'py, PyAny>> {
    Ok(match cost {
        Cost::Tokens => "tokens".into_pyobject(py)?.into_any(),
        Cost::Quadratic { a, b } => PyTuple::new(py, [a, b])?.into_any(),
    })
}

/// The micro-batch caps: `micro_batch_size` and `max_tokens`, each None or
/// an int >= 1, not both None.
pub fn caps_arg(
    micro_batch_size: Option<&Bound<'_, PyAny>>,
    max_tokens: Option<&Bound<'_, PyAny>>,
) -> PyResult<Caps> {
    let b = crate::args::opt_int_arg(micro_batch_size, "micro_batch_size", 1, MAX_I64)?;
    let m = crate::args::opt_int_arg(max_tokens, "max_tokens", 1, MAX_I64)?;
    Caps::new(b, m).py()
}

/// `micro_batch_size` for a plan without lengths: an int >= 1 (max_tokens
/// needs lengths).
pub fn samples_cap_arg(
    micro_batch_size: Option<&Bound<'_, PyAny>>,
    max_tokens: Option<&Bound<'_, PyAny>>,
) -> PyResult<u64> {
    if max_tokens.is_some_and(|m| !m.is_none()) {
        return Err(PyValueError::new_err(
            "max_tokens needs lengths: give the plan lengths= to cap micro-batches by tokens",
        ));
    }
    match micro_batch_size {
        Some(b) if !b.is_none() => int_arg(b, "micro_batch_size", 1, MAX_I64),
        _ => Err(PyTypeError::new_err(
            "micro_batch_size must be an int, got NoneType (a plan without lengths needs it)",
        )),
    }
}
