//! The AWS shared files: `~/.aws/config` (`[default]`, `[profile NAME]`) and
//! `~/.aws/credentials` (`[NAME]`), or wherever `AWS_CONFIG_FILE` and
//! `AWS_SHARED_CREDENTIALS_FILE` say. Both are INI: `key = value` lines under section headers,
//! `#` and `;` comments. A profile's keys are the two files' merged, the credentials file
//! winning, as in the AWS SDKs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// One profile's settings, keys lower-cased.
pub(super) type Profile = BTreeMap<String, String>;

/// Both files, read once. Its `Debug` names the files and profiles, never a value: the
/// credentials file holds secret keys.
#[derive(Default)]
pub(super) struct Profiles {
    config: BTreeMap<String, Profile>,
    credentials: BTreeMap<String, Profile>,
    /// The files read, for messages.
    pub read: Vec<PathBuf>,
}

impl std::fmt::Debug for Profiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiles")
            .field("config", &self.config.keys().collect::<Vec<_>>())
            .field("credentials", &self.credentials.keys().collect::<Vec<_>>())
            .field("read", &self.read)
            .finish()
    }
}

fn home_file(var: &str, rel: &str) -> Option<PathBuf> {
    match std::env::var_os(var).filter(|v| !v.is_empty()) {
        Some(p) => Some(PathBuf::from(p)),
        None => std::env::var_os("HOME").map(|h| Path::new(&h).join(rel)),
    }
}

impl Profiles {
    /// The files the environment names, each only if it exists.
    pub(super) fn load() -> Result<Self> {
        let mut p = Self::default();
        if let Some(f) = home_file("AWS_CONFIG_FILE", ".aws/config") {
            p.config = read(&f, true, &mut p.read)?;
        }
        if let Some(f) = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials") {
            p.credentials = read(&f, false, &mut p.read)?;
        }
        Ok(p)
    }

    /// The profile `name`, merged from both files; `None` if neither has it.
    pub(super) fn get(&self, name: &str) -> Option<Profile> {
        let (c, k) = (self.config.get(name), self.credentials.get(name));
        if c.is_none() && k.is_none() {
            return None;
        }
        let mut p = c.cloned().unwrap_or_default();
        p.extend(k.cloned().unwrap_or_default());
        Some(p)
    }

    pub(super) fn files(&self) -> String {
        match self.read.is_empty() {
            true => "no ~/.aws/config or ~/.aws/credentials".into(),
            false => self
                .read
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" and "),
        }
    }
}

/// Sections of one file; in the config file `[profile x]` names `x` (and `[default]` default).
fn read(
    path: &Path, config: bool, read_files: &mut Vec<PathBuf>,
) -> Result<BTreeMap<String, Profile>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(Error::io(path.display(), e)),
    };
    read_files.push(path.to_path_buf());
    Ok(parse(&text, config))
}

pub(super) fn parse(text: &str, config: bool) -> BTreeMap<String, Profile> {
    let mut out: BTreeMap<String, Profile> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        // A header may carry a comment after its ']'.
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            let h = h.trim();
            current = match (config, h.strip_prefix("profile ")) {
                (true, Some(name)) => Some(name.trim().to_string()),
                (true, None) if h == "default" => Some(h.to_string()),
                // `[sso-session x]`, `[services x]`: not profiles.
                (true, None) => None,
                (false, _) => Some(h.to_string()),
            };
            if let Some(c) = &current {
                out.entry(c.clone()).or_default();
            }
            continue;
        }
        let (Some(section), Some((k, v))) = (&current, line.split_once('=')) else {
            continue;
        };
        let v = v.trim();
        // A trailing comment needs whitespace before it: secrets may hold '#' or ';'.
        let end = [" #", " ;", "\t#", "\t;"]
            .iter()
            .filter_map(|c| v.find(c))
            .min()
            .unwrap_or(v.len());
        let v = v[..end].trim();
        out.entry(section.clone())
            .or_default()
            .insert(k.trim().to_ascii_lowercase(), v.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_profiles_of_both_file_kinds() {
        let cfg = "[default] # main\nregion = eu-west-1\n[profile dev]\nrole_arn = arn:x\n\
                   source_profile = default ; a comment\n[sso-session s]\nsso_region = x\n";
        let c = parse(cfg, true);
        assert_eq!(c["default"]["region"], "eu-west-1");
        assert_eq!(c["dev"]["role_arn"], "arn:x");
        assert_eq!(c["dev"]["source_profile"], "default");
        assert!(!c.contains_key("s") && !c.contains_key("sso-session s"));
        let creds =
            "# comment\n[dev]\naws_access_key_id=AKIA\naws_secret_access_key = a#b # note\n";
        let k = parse(creds, false);
        assert_eq!(k["dev"]["aws_access_key_id"], "AKIA");
        assert_eq!(k["dev"]["aws_secret_access_key"], "a#b");
        let p = Profiles {
            config: c,
            credentials: k,
            read: Vec::new(),
        };
        let dev = p.get("dev").unwrap();
        assert_eq!(dev["role_arn"], "arn:x");
        assert_eq!(dev["aws_access_key_id"], "AKIA");
        assert!(p.get("nobody").is_none());
        let shown = format!("{p:?}");
        assert!(shown.contains("dev"), "{shown}");
        assert!(!shown.contains("a#b") && !shown.contains("AKIA"), "{shown}");
    }
}
