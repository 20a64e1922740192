//! The errors of the applications: what went wrong, and with which file.

use std::fmt;
use std::path::PathBuf;

/// What went wrong in an application.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done (`"reading"`, `"writing"`).
        doing: &'static str,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// An input (a file, or text given as one) is malformed.
    Format {
        /// The file name (or `<input>`).
        file: String,
        /// 1-based line number; 0 when the problem is the whole file.
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// A parameter is not valid: an unknown name, a value out of range, inputs that do not fit
    /// together.
    Invalid(String),
}

/// The result of an application call.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A malformed input, `file:line: msg` (line 0: the whole file).
    pub fn format(file: impl fmt::Display, line: usize, msg: impl Into<String>) -> Error {
        Error::Format {
            file: file.to_string(),
            line,
            msg: msg.into(),
        }
    }

    /// A failed read or write of `path`.
    pub fn io(path: impl Into<PathBuf>, doing: &'static str, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            doing,
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io {
                path,
                doing,
                source,
            } => write!(f, "{}: {doing}: {source}", path.display()),
            Error::Format { file, line: 0, msg } => write!(f, "{file}: {msg}"),
            Error::Format { file, line, msg } => write!(f, "{file}:{line}: {msg}"),
            Error::Invalid(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn messages_name_the_file_and_keep_the_cause() {
        assert_eq!(Error::format("a.fa", 3, "bad").to_string(), "a.fa:3: bad");
        assert_eq!(Error::format("a.fa", 0, "empty").to_string(), "a.fa: empty");
        let e = Error::io(
            "/x/d.bin",
            "reading",
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert!(e.to_string().starts_with("/x/d.bin: reading: "));
        assert!(e.source().is_some());
        assert!(Error::Invalid("no".into()).source().is_none());
    }
}
