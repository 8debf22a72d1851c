//! `--include` / `--exclude` for restore, as restic users write them: `*` and `?` stay
//! within one path component, `**` crosses them; a pattern starting with `/` is anchored at
//! the snapshot's root, any other matches at any depth ("*.log", "cache/**"). A matching
//! directory selects (or leaves out) everything below it; the directories above an
//! included entry are restored too, so that it has a place.

use std::path::Path;

use ferry_transfer::{Error, Result};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// The compiled patterns.
#[derive(Debug, Clone, Default)]
pub struct Select {
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
}

fn compile(patterns: &[String], flag: &str) -> Result<Option<GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut set = GlobSetBuilder::new();
    for p in patterns {
        let anchored = match p.strip_prefix('/') {
            Some(_) => p.trim_end_matches('/').to_string(),
            None => format!("/**/{}", p.trim_end_matches('/')),
        };
        let glob = GlobBuilder::new(&anchored)
            .literal_separator(true)
            .build()
            .map_err(|e| Error::Invalid(format!("{flag} '{p}': {e}")))?;
        set.add(glob);
    }
    set.build()
        .map(Some)
        .map_err(|e| Error::Invalid(format!("{flag}: {e}")))
}

impl Select {
    /// Compiles the patterns; a bad one is refused, named.
    pub fn new(include: &[String], exclude: &[String]) -> Result<Select> {
        Ok(Select {
            include: compile(include, "--include")?,
            exclude: compile(exclude, "--exclude")?,
        })
    }

    /// True when any pattern was given: without, nothing need be matched.
    pub fn active(&self) -> bool {
        self.include.is_some() || self.exclude.is_some()
    }

    /// True when include patterns were given: only what they select (and its parents) is
    /// restored.
    pub fn narrows(&self) -> bool {
        self.include.is_some()
    }

    /// `path` (absolute in the snapshot) matches an include pattern, or none was given.
    pub fn included(&self, path: &Path) -> bool {
        self.include.as_ref().is_none_or(|s| s.is_match(path))
    }

    /// `path` matches an exclude pattern.
    pub fn excluded(&self, path: &Path) -> bool {
        self.exclude.as_ref().is_some_and(|s| s.is_match(path))
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
            assert_eq!(s.included(Path::new(p)), inc, "{p}");
        }
        for (p, exc) in [
            ("/home/u/cache", true),
            ("/cache", true),
            ("/home/u/cache2", false),
            ("/srv/www/tmp1", true),
            ("/srv/www/a/tmp1", false),
        ] {
            assert_eq!(s.excluded(Path::new(p)), exc, "{p}");
        }
        assert!(Select::new(&["a[".into()], &[]).is_err());
        assert!(!Select::default().narrows());
    }
}
