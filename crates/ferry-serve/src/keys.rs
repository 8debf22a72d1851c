//! Object keys from request paths, checked before anything reaches the backend. The tenant's
//! prefix is the server's to prepend: nothing in a request names a place outside it.

/// Longest key a request may name, after percent-decoding.
pub const MAX_KEY: usize = 1024;

/// The segments of `path` (percent-decoded, without the leading `/`), each checked: UTF-8,
/// not empty, not `.` or `..`, no backslash and no control character. A trailing `/` is
/// returned as `true` (a listing).
pub fn segments(path: &str) -> Result<(Vec<String>, bool), String> {
    let raw = path.strip_prefix('/').unwrap_or(path);
    let dir = raw.ends_with('/');
    let raw = raw.strip_suffix('/').unwrap_or(raw);
    if raw.is_empty() {
        return Ok((Vec::new(), true));
    }
    // Split on the raw path's slashes: an encoded %2F is a character of a name, refused.
    let mut out = Vec::new();
    for seg in raw.split('/') {
        let s = percent_encoding::percent_decode_str(seg)
            .decode_utf8()
            .map_err(|_| "the path is not UTF-8".to_string())?;
        if s.is_empty() || s == "." || s == ".." {
            return Err("empty, . or .. in the path".into());
        }
        if s.chars().any(|c| c == '/' || c == '\\' || c.is_control()) {
            return Err("a slash, backslash or control character in a name".into());
        }
        // The local store's temporary files carry this mark and are left out of its
        // listings: an object named so would be stored but never listed or counted.
        if s.contains(".ferry-tmp") {
            return Err("names containing .ferry-tmp are the server's".into());
        }
        out.push(s.into_owned());
    }
    if out.iter().map(|s| s.len() + 1).sum::<usize>() > MAX_KEY + 1 {
        return Err(format!("the path is longer than {MAX_KEY} bytes"));
    }
    Ok((out, dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_paths_are_refused() {
        for p in [
            "/a/../b",
            "/a/./b",
            "/a//b",
            "/a/%2e%2e/b",
            "/a/b%2Fc",
            "/a/b%5Cc",
            "/a/b\\c",
            "/a/%00",
            "/a/%0a",
            "/a/%ff",
            "/a/x.ferry-tmp-1",
        ] {
            assert!(segments(p).is_err(), "{p} accepted");
        }
        assert!(segments(&format!("/a/{}", "x".repeat(MAX_KEY + 1))).is_err());
    }

    #[test]
    fn names_come_back_decoded() {
        assert_eq!(
            segments("/alice/repo/data/ab%20cd").unwrap(),
            (
                vec!["alice".into(), "repo".into(), "data".into(), "ab cd".into()],
                false
            )
        );
        assert!(segments("/alice/keys/").unwrap().1);
        assert_eq!(segments("/").unwrap(), (vec![], true));
    }
}
