//! Names of entries as stored: whoever wrote the snapshot chose them.

use std::fmt;

/// Why a stored name cannot be one directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// The name is `.` or `..`.
    Dots,
    /// The name holds a `/`.
    Slash,
    /// The name holds a NUL byte.
    Nul,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameError::Empty => "empty name",
            NameError::Dots => "name is . or ..",
            NameError::Slash => "name holds a '/'",
            NameError::Nul => "name holds a NUL byte",
        })
    }
}

impl std::error::Error for NameError {}

/// Checks that `name` is one directory entry's name: non-empty, not `.` or `..`, no `/`,
/// no NUL. Anything else would make a path of it, and a path can leave the directory.
pub fn check_name(name: &[u8]) -> Result<(), NameError> {
    match name {
        [] => Err(NameError::Empty),
        b"." | b".." => Err(NameError::Dots),
        _ if name.contains(&b'/') => Err(NameError::Slash),
        _ if name.contains(&0) => Err(NameError::Nul),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_are_refused_and_odd_ones_kept() {
        assert_eq!(check_name(b""), Err(NameError::Empty));
        assert_eq!(check_name(b"."), Err(NameError::Dots));
        assert_eq!(check_name(b".."), Err(NameError::Dots));
        assert_eq!(check_name(b"../etc"), Err(NameError::Slash));
        assert_eq!(check_name(b"/etc"), Err(NameError::Slash));
        assert_eq!(check_name(b"a\0b"), Err(NameError::Nul));
        for ok in [
            &b"..."[..],
            b".a",
            b"a..",
            b"\xff\xfe",
            b" ",
            b"a\\b",
            b"\n",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok:?}");
        }
    }
}
