//! The one error type of the core. The bindings map each variant to one Python
//! exception class, so the variant says *which* class, the message says why.

/// An invalid request. Every message names the argument and its allowed range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A value outside its allowed range or an inconsistent combination (ValueError).
    #[error("{0}")]
    Value(String),
    /// A position or index outside the sequence (IndexError).
    #[error("{0}")]
    Index(String),
    /// A result that would not fit in the integer types used (OverflowError).
    #[error("{0}")]
    Overflow(String),
    /// A result too large for the machine's memory (OverflowError; the
    /// Streaming functions raise MemoryError, as numpy does there).
    #[error("{0}")]
    Memory(String),
    /// The system refused a thread the work needs, e.g. at the process's
    /// thread limit (RuntimeError, as Python's `threading` raises).
    #[error("{0}")]
    Thread(String),
}

/// Shorthand used across the core.
pub type Result<T> = std::result::Result<T, Error>;
