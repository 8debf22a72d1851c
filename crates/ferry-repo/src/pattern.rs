//! Path patterns as restic and gitignore users write them, for `backup --exclude` and
//! `restore --include/--exclude`: `*` and `?` stay within one path component, `**` crosses
//! them, `[abc]` is a class. A pattern starting with `/` is anchored at the root; any other
//! matches at any depth (`*.log`, `cache/tmp`). A trailing `/` matches directories only. A
//! leading `!` takes back what an earlier pattern matched: the last pattern that matches
//! decides, as in a `.gitignore`. Case-insensitive sets serve `--iexclude`.

use std::path::Path;

use ferry_transfer::{Error, Result};
use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

/// One pattern, as given, and how it was read.
#[derive(Debug, Clone)]
struct Rule {
    negated: bool,
    dir_only: bool,
}

/// Compiled patterns; empty matches nothing.
#[derive(Debug, Clone, Default)]
pub struct Patterns {
    set: Option<GlobSet>,
    globs: Vec<Glob>,
    rules: Vec<Rule>,
}

/// Where patterns came from, for the message that refuses a bad one.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// The flag or setting (`--exclude`).
    pub flag: &'a str,
    /// Match regardless of case (`--iexclude`).
    pub case_insensitive: bool,
}

impl Patterns {
    /// Compiles `patterns`; a bad one is refused, named with `from.flag`. Blank patterns are
    /// refused too: they would match nothing, and were surely meant as something.
    pub fn new(patterns: &[String], from: Source) -> Result<Patterns> {
        let mut p = Patterns::default();
        p.add(patterns, from)?;
        Ok(p)
    }

    /// Adds `patterns` after those held: they win over earlier ones where both match.
    pub fn add(&mut self, patterns: &[String], from: Source) -> Result<()> {
        if patterns.is_empty() {
            return Ok(());
        }
        for pat in patterns {
            let bad = |why: &str| Error::Invalid(format!("{} '{pat}': {why}", from.flag));
            let (negated, body) = match pat.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, pat.as_str()),
            };
            let dir_only = body.len() > 1 && body.ends_with('/');
            let body = body.trim_end_matches('/');
            if body.trim().is_empty() {
                return Err(bad("an empty pattern"));
            }
            let anchored = match body.starts_with('/') {
                true => body.to_string(),
                false => format!("/**/{body}"),
            };
            let glob = GlobBuilder::new(&anchored)
                .literal_separator(true)
                .case_insensitive(from.case_insensitive)
                .backslash_escape(true)
                .build()
                .map_err(|e| bad(&e.kind().to_string()))?;
            self.globs.push(glob);
            self.rules.push(Rule { negated, dir_only });
        }
        // Earlier patterns are compiled again with the new ones: one set, one pass a path.
        let mut set = GlobSetBuilder::new();
        for g in &self.globs {
            set.add(g.clone());
        }
        self.set = Some(
            set.build()
                .map_err(|e| Error::Invalid(format!("{}: {e}", from.flag)))?,
        );
        Ok(())
    }

    /// True when no pattern was given.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// True when `path` (absolute) is matched, by the last pattern that matches it and is
    /// not negated. `dir` says whether it is a directory (for patterns ending in `/`).
    pub fn matches(&self, path: &Path, dir: bool) -> bool {
        let Some(set) = &self.set else {
            return false;
        };
        set.matches(path)
            .into_iter()
            .filter(|&i| dir || !self.rules[i].dir_only)
            .max()
            .is_some_and(|i| !self.rules[i].negated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(p: &[&str], icase: bool) -> Patterns {
        let p: Vec<String> = p.iter().map(|s| s.to_string()).collect();
        let from = Source {
            flag: "--exclude",
            case_insensitive: icase,
        };
        Patterns::new(&p, from).unwrap()
    }

    #[test]
    fn the_last_matching_pattern_decides() {
        let s = set(&["*.log", "!keep.log", "/var/**/keep.log"], false);
        assert!(s.matches(Path::new("/a/b.log"), false));
        assert!(!s.matches(Path::new("/a/keep.log"), false));
        assert!(s.matches(Path::new("/var/x/keep.log"), false));
        assert!(!s.matches(Path::new("/a/b.txt"), false));
    }

    #[test]
    fn a_trailing_slash_matches_directories_only_and_case_can_be_ignored() {
        let s = set(&["build/"], false);
        assert!(s.matches(Path::new("/src/build"), true));
        assert!(!s.matches(Path::new("/src/build"), false));
        let i = set(&["*.JPG"], true);
        assert!(i.matches(Path::new("/p/a.jpg"), false));
        assert!(!set(&["*.JPG"], false).matches(Path::new("/p/a.jpg"), false));
    }

    #[test]
    fn patterns_stay_within_components_unless_told() {
        let s = set(&["/home/*/cache", "a/**/z"], false);
        assert!(s.matches(Path::new("/home/u/cache"), true));
        assert!(!s.matches(Path::new("/home/u/v/cache"), true));
        assert!(s.matches(Path::new("/x/a/b/c/z"), false));
        let bad = Patterns::new(
            &["".into()],
            Source {
                flag: "--exclude",
                case_insensitive: false,
            },
        );
        assert!(bad.unwrap_err().to_string().contains("empty pattern"));
    }
}
