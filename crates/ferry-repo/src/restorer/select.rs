//! `--include` / `--exclude` for restore, in [`crate::pattern`]'s syntax. A matching
//! directory selects (or leaves out) everything below it; the directories above an
//! included entry are restored too, so that it has a place.

use std::path::Path;

use ferry_transfer::Result;

use crate::pattern::{Patterns, Source};

/// The compiled patterns.
#[derive(Debug, Clone, Default)]
pub struct Select {
    include: Patterns,
    exclude: Patterns,
}

impl Select {
    /// Compiles the patterns; a bad one is refused, named.
    pub fn new(include: &[String], exclude: &[String]) -> Result<Select> {
        let from = |flag| Source {
            flag,
            case_insensitive: false,
        };
        Ok(Select {
            include: Patterns::new(include, from("--include"))?,
            exclude: Patterns::new(exclude, from("--exclude"))?,
        })
    }

    /// True when any pattern was given: without, nothing need be matched.
    pub fn active(&self) -> bool {
        !self.include.is_empty() || !self.exclude.is_empty()
    }

    /// True when include patterns were given: only what they select (and its parents) is
    /// restored.
    pub fn narrows(&self) -> bool {
        !self.include.is_empty()
    }

    /// `path` (absolute in the snapshot; `dir` when a directory) matches an include
    /// pattern, or none was given.
    pub fn included(&self, path: &Path, dir: bool) -> bool {
        self.include.is_empty() || self.include.matches(path, dir)
    }

    /// `path` matches an exclude pattern.
    pub fn excluded(&self, path: &Path, dir: bool) -> bool {
        self.exclude.matches(path, dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_restic_users_expect() {
        let s = Select::new(
            &["/srv/www".into(), "*.conf".into()],
            &["**/cache".into(), "/srv/www/tmp*".into()],
        )
        .unwrap();
        for (p, inc) in [
            ("/srv/www", true),
            ("/srv/www2", false),
            ("/etc/a.conf", true),
            ("/a.conf", true),
            ("/etc/a.conf.d", false),
            ("/etc/x/a.conf", true),
        ] {
            assert_eq!(s.included(Path::new(p), false), inc, "{p}");
        }
        for (p, exc) in [
            ("/home/u/cache", true),
            ("/cache", true),
            ("/home/u/cache2", false),
            ("/srv/www/tmp1", true),
            ("/srv/www/a/tmp1", false),
        ] {
            assert_eq!(s.excluded(Path::new(p), false), exc, "{p}");
        }
        assert!(Select::new(&["a[".into()], &[]).is_err());
        assert!(!Select::default().narrows());
    }
}
