//! A token plan's numpy arrays as plain slices, for work done without the
//! GIL on every core: each array is borrowed read-only (contiguous; a
//! strided array is copied once) for as long as its guard lives, and read
//! as the plan reads it (cut to its `max_length`).

use crate::lengths::TokenArrays;
use epochplan_core::dealing::SampleLengths;
use epochplan_core::tokens::{CutLengths, CutLoss};
use epochplan_core::Result;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

macro_rules! dtypes {
    ($($variant:ident: $t:ty),*) => {
        /// A read-only borrow of a numpy array of one integer dtype.
        pub enum Guard<'py> {
            $(
                #[allow(missing_docs)]
                $variant(PyReadonlyArray1<'py, $t>),
            )*
        }

        /// An array's values, borrowed from its [`Guard`].
        #[derive(Debug, Clone, Copy)]
        pub enum Slice<'a> {
            $(
                #[allow(missing_docs)]
                $variant(&'a [$t]),
            )*
        }

        impl<'py> Guard<'py> {
            /// A borrow of `array` (contiguous: else a contiguous copy).
            pub fn new(array: &Bound<'py, PyUntypedArray>, name: &str) -> PyResult<Guard<'py>> {
                let array = if array.is_contiguous() {
                    array.clone()
                } else {
                    array
                        .py()
                        .import("numpy")?
                        .call_method1("ascontiguousarray", (array,))?
                        .cast_into::<PyUntypedArray>()?
                };
                $(
                    if let Ok(typed) = array.cast::<PyArray1<$t>>() {
                        return Ok(Guard::$variant(typed.try_readonly()?));
                    }
                )*
                Err(PyTypeError::new_err(format!("{name} must be an array of integers")))
            }

            /// The borrowed values.
            pub fn slice(&self) -> PyResult<Slice<'_>> {
                match self {
                    $(Guard::$variant(a) => Ok(Slice::$variant(a.as_slice()?)),)*
                }
            }
        }

        impl SampleLengths for Slice<'_> {
            fn num_samples(&self) -> u64 {
                match self {
                    $(Slice::$variant(s) => s.len() as u64,)*
                }
            }

            fn read(&self, name: &str, ids: &[i64], out: &mut Vec<u64>) -> Result<()> {
                match self {
                    $(Slice::$variant(s) => s.read(name, ids, out),)*
                }
            }

            fn read_run(&self, name: &str, start: u64, end: u64, out: &mut Vec<u64>) -> Result<()> {
                match self {
                    $(Slice::$variant(s) => s.read_run(name, start, end, out),)*
                }
            }

            fn file_mapped(&self) -> bool {
                match self {
                    $(Slice::$variant(s) => s.file_mapped(),)*
                }
            }
        }
    };
}

dtypes!(I64: i64, I32: i32, U32: u32, U64: u64, I16: i16, U16: u16, I8: i8, U8: u8);

/// An array's values as a plan reads them: as given, or cut to the plan's
/// `max_length` (`oversize="truncate"`).
#[derive(Debug, Clone, Copy)]
pub enum Reader<'a> {
    /// The values as given.
    Given(Slice<'a>),
    /// Lengths cut to the cap.
    CutLengths(CutLengths<Slice<'a>>),
    /// Loss tokens of samples cut to the cap.
    CutLoss(CutLoss<Slice<'a>, Slice<'a>>),
}

impl SampleLengths for Reader<'_> {
    fn num_samples(&self) -> u64 {
        match self {
            Reader::Given(s) => s.num_samples(),
            Reader::CutLengths(c) => c.num_samples(),
            Reader::CutLoss(c) => c.num_samples(),
        }
    }

    fn read(&self, name: &str, ids: &[i64], out: &mut Vec<u64>) -> Result<()> {
        match self {
            Reader::Given(s) => s.read(name, ids, out),
            Reader::CutLengths(c) => c.read(name, ids, out),
            Reader::CutLoss(c) => c.read(name, ids, out),
        }
    }

    fn read_run(&self, name: &str, start: u64, end: u64, out: &mut Vec<u64>) -> Result<()> {
        match self {
            Reader::Given(s) => s.read_run(name, start, end, out),
            Reader::CutLengths(c) => c.read_run(name, start, end, out),
            Reader::CutLoss(c) => c.read_run(name, start, end, out),
        }
    }

    fn file_mapped(&self) -> bool {
        match self {
            Reader::Given(s) => s.file_mapped(),
            Reader::CutLengths(c) => c.file_mapped(),
            Reader::CutLoss(c) => c.file_mapped(),
        }
    }
}

/// The guards of a plan's lengths and loss tokens.
pub struct Guards<'py> {
    lengths: Guard<'py>,
    loss_tokens: Option<Guard<'py>>,
    max_length: Option<u64>,
}

impl<'py> Guards<'py> {
    /// Borrows `tokens`' arrays (read cut to their `max_length`).
    pub fn new(py: Python<'py>, tokens: &TokenArrays) -> PyResult<Guards<'py>> {
        let lengths = Guard::new(tokens.lengths.bind(py), "lengths")?;
        let loss_tokens = match &tokens.loss_tokens {
            Some(l) => Some(Guard::new(l.bind(py), "loss_tokens")?),
            None => None,
        };
        Ok(Guards {
            lengths,
            loss_tokens,
            max_length: tokens.max_length,
        })
    }

    /// The lengths and loss tokens as the plan reads them (cut to its
    /// `max_length`; loss tokens that are the lengths stay None).
    pub fn readers(&self) -> PyResult<(Reader<'_>, Option<Reader<'_>>)> {
        let lengths = self.lengths.slice()?;
        let loss = match &self.loss_tokens {
            Some(g) => Some(g.slice()?),
            None => None,
        };
        Ok(match self.max_length {
            None => (Reader::Given(lengths), loss.map(Reader::Given)),
            Some(cap) => (
                Reader::CutLengths(CutLengths { lengths, cap }),
                loss.map(|loss_tokens| {
                    Reader::CutLoss(CutLoss {
                        loss_tokens,
                        lengths,
                        cap,
                    })
                }),
            ),
        })
    }
}
