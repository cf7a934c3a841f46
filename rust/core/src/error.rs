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
}

/// Shorthand used across the core.
pub type Result<T> = std::result::Result<T, Error>;

/// Checks `lo <= value <= hi` and names the argument when it is not.
pub fn check_range(name: &str, value: u64, lo: u64, hi: u64) -> Result<u64> {
    if value < lo || value > hi {
        return Err(Error::Value(format!(
            "{name} must be in [{lo}, {hi}], got {value}"
        )));
    }
    Ok(value)
}
