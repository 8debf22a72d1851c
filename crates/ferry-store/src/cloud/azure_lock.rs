//! Azure version-level immutability, the counterpart of S3's bucket default retention.
//!
//! Azure keeps a default policy for new blobs only on the management plane (ARM), which a
//! storage key or SAS token cannot reach. So the container remembers ferry's retention in its
//! own metadata (set by `init --lock-retention`, read once per process), and every blob ferry
//! commits carries a policy of that many days from the moment it is written. The container
//! must have version-level immutability support enabled by its owner; without it Azure
//! refuses the first write, which `init` makes at once.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

use crate::{Error, LockMode, Result};

/// Container metadata names (Azure lowercases them; no dashes, they must be C# identifiers).
pub(super) const META_DAYS: &str = "ferrylockdays";
pub(super) const META_MODE: &str = "ferrylockmode";

/// The retention every blob written to the container gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AzureLock {
    days: u32,
    mode: LockMode,
}

/// Azure's names: an "unlocked" policy can be shortened or removed by whoever holds the
/// right to (governance); a "locked" one by no one until it ends (compliance).
fn azure_mode(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Governance => "Unlocked",
        LockMode::Compliance => "Locked",
    }
}

impl AzureLock {
    pub(super) fn new(days: u32, mode: LockMode) -> Self {
        Self { days, mode }
    }

    /// The container metadata that records this retention.
    pub(super) fn metadata(&self) -> [(String, String); 2] {
        [
            (format!("x-ms-meta-{META_DAYS}"), self.days.to_string()),
            (
                format!("x-ms-meta-{META_MODE}"),
                azure_mode(self.mode).into(),
            ),
        ]
    }

    /// Reads the retention back from the container's properties; `None` when the container
    /// carries none. Anything else there is refused: the container's metadata is not ours to
    /// trust blindly, and writing unlocked blobs because a value did not parse would be the
    /// silent failure immutability exists to prevent.
    pub(super) fn from_container(h: &HeaderMap, container: &str) -> Result<Option<Self>> {
        let text = |name: &str| {
            h.get(format!("x-ms-meta-{name}"))
                .map(|v| v.to_str().unwrap_or("\u{fffd}").to_string())
        };
        let (days, mode) = match (text(META_DAYS), text(META_MODE)) {
            (None, None) => return Ok(None),
            (Some(d), Some(m)) => (d, m),
            _ => return Err(bad(container, "one of its two lock values")),
        };
        let days = days
            .parse::<u32>()
            .ok()
            .filter(|d| (1..=36_500).contains(d))
            .ok_or_else(|| bad(container, "lock days"))?;
        let mode = match mode.as_str() {
            "Unlocked" => LockMode::Governance,
            "Locked" => LockMode::Compliance,
            _ => return Err(bad(container, "lock mode")),
        };
        Ok(Some(Self { days, mode }))
    }

    /// The headers that put a blob written at `now` under this retention.
    pub(super) fn policy_headers(&self, now: SystemTime) -> [(String, String); 2] {
        let until = now + Duration::from_secs(u64::from(self.days) * 86_400);
        [
            (
                "x-ms-immutability-policy-until-date".into(),
                httpdate::fmt_http_date(until),
            ),
            (
                "x-ms-immutability-policy-mode".into(),
                azure_mode(self.mode).into(),
            ),
        ]
    }
}

fn bad(container: &str, what: &str) -> Error {
    Error::Permanent(format!(
        "container {container}: its metadata holds an unreadable {what} ({META_DAYS}, \
         {META_MODE}): set them again with init --lock-retention, or remove both"
    ))
}

/// Why a blob with these properties may not be deleted at `now`: a legal hold or a policy
/// still running, in words; `None` when nothing holds it.
pub(super) fn retention(h: &HeaderMap, key: &str, now: SystemTime) -> Result<Option<String>> {
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    if text("x-ms-legal-hold").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(Some("under legal hold".into()));
    }
    let Some(until) = text("x-ms-immutability-policy-until-date") else {
        return Ok(None);
    };
    let when = httpdate::parse_http_date(until)
        .map_err(|e| Error::Permanent(format!("{key}: immutability date '{until}': {e}")))?;
    let mode = match text("x-ms-immutability-policy-mode") {
        Some(m) if m.eq_ignore_ascii_case("locked") => "locked",
        _ => "unlocked",
    };
    Ok((when > now).then(|| format!("{mode} until {until}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_container_metadata_reads_back_as_written() {
        for mode in [LockMode::Governance, LockMode::Compliance] {
            let lock = AzureLock::new(30, mode);
            let md = lock.metadata();
            let h = headers(&[(&md[0].0, &md[0].1), (&md[1].0, &md[1].1)]);
            assert_eq!(AzureLock::from_container(&h, "c").unwrap(), Some(lock));
        }
        assert_eq!(
            AzureLock::from_container(&HeaderMap::new(), "c").unwrap(),
            None
        );
    }

    #[test]
    fn hostile_container_metadata_is_refused_not_read_as_unlocked() {
        let days = "x-ms-meta-ferrylockdays";
        let mode = "x-ms-meta-ferrylockmode";
        for bad in [
            vec![(days, "30")],
            vec![(mode, "Locked")],
            vec![(days, "0"), (mode, "Locked")],
            vec![(days, "-1"), (mode, "Locked")],
            vec![(days, "99999999999"), (mode, "Locked")],
            vec![(days, "30"), (mode, "locked")],
            vec![(days, "30"), (mode, "Governance")],
        ] {
            let h = headers(&bad);
            let e = AzureLock::from_container(&h, "c").unwrap_err().to_string();
            assert!(e.contains("container c"), "{e}");
        }
    }

    #[test]
    fn a_written_blob_is_held_for_the_days_given() {
        let now = httpdate::parse_http_date("Thu, 26 Nov 2026 09:00:00 GMT").unwrap();
        let [until, mode] = AzureLock::new(30, LockMode::Compliance).policy_headers(now);
        assert_eq!(until.1, "Sat, 26 Dec 2026 09:00:00 GMT");
        assert_eq!(mode.1, "Locked");
        let [_, mode] = AzureLock::new(1, LockMode::Governance).policy_headers(now);
        assert_eq!(mode.1, "Unlocked");

        let props = headers(&[
            ("x-ms-immutability-policy-until-date", &until.1),
            ("x-ms-immutability-policy-mode", "Locked"),
        ]);
        let why = retention(&props, "k", now).unwrap().unwrap();
        assert_eq!(why, "locked until Sat, 26 Dec 2026 09:00:00 GMT");
        let later = now + Duration::from_secs(31 * 86_400);
        assert_eq!(retention(&props, "k", later).unwrap(), None);
        let held = headers(&[("x-ms-legal-hold", "true")]);
        assert_eq!(
            retention(&held, "k", later).unwrap().as_deref(),
            Some("under legal hold")
        );
        assert_eq!(retention(&HeaderMap::new(), "k", now).unwrap(), None);
        let garbled = headers(&[("x-ms-immutability-policy-until-date", "soon")]);
        assert!(retention(&garbled, "k", now).is_err());
    }
}
