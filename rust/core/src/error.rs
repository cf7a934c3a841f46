//! The one error type of the core. The bindings map each variant to one Python
//! exception class, so the variant says *which* class, the message says why.

use std::path::{Path, PathBuf};

/// An invalid request or a failed file operation. Every message names the
/// argument and its allowed range, or the file.
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
    /// The system failed an operation on a plan file (the plan-file error
    /// that is also the OSError of `kind`: FileNotFoundError,
    /// PermissionError, FileExistsError or OSError).
    #[error("{}: {action}: {text}", path.display())]
    Io {
        /// The file, as the caller named it.
        path: PathBuf,
        /// What was being done, e.g. "cannot open".
        action: String,
        /// The kind of failure.
        kind: std::io::ErrorKind,
        /// The operating system's error number, when it gave one.
        errno: Option<i32>,
        /// The system's description of the failure.
        text: String,
    },
    /// A plan file that is not what its manifest or its plan says
    /// (the plan-file error, a ValueError).
    #[error("{}: {what}", path.display())]
    PlanFile {
        /// The file (or the epoch's directory, for a fault of the whole epoch).
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
}

impl Error {
    /// The failure `err` of `action` (e.g. "cannot open") on `path`.
    pub fn io(path: &Path, action: &str, err: &std::io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            action: action.to_string(),
            kind: err.kind(),
            errno: err.raw_os_error(),
            text: err.to_string(),
        }
    }

    /// A fault of the plan file `path`.
    pub fn plan_file(path: &Path, what: impl std::fmt::Display) -> Error {
        Error::PlanFile {
            path: path.to_path_buf(),
            what: what.to_string(),
        }
    }
}

/// Shorthand used across the core.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_errors_name_their_file_first() {
        let missing = std::io::Error::from_raw_os_error(2);
        let err = Error::io(Path::new("/p/r.npy"), "cannot open", &missing);
        assert!(
            err.to_string().starts_with("/p/r.npy: cannot open: "),
            "{err}"
        );
        assert!(matches!(
            err,
            Error::Io {
                kind: std::io::ErrorKind::NotFound,
                errno: Some(2),
                ..
            }
        ));
        let bad = Error::plan_file(Path::new("/p/r.npy"), "is short");
        assert_eq!(bad.to_string(), "/p/r.npy: is short");
    }
}
