//! The user's home directory, where libpq's files are (`~/.pgpass`, `~/.postgresql/`).

use std::path::{Path, PathBuf};

/// The user's home directory as libpq finds it: `HOME`, else the password database's entry
/// for the effective user (a service started without `HOME`).
pub fn home() -> Option<PathBuf> {
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Some(h.into()),
        None => from_passwd(),
    }
}

/// The effective user's home in the password database.
fn from_passwd() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; 16 << 10];
    // SAFETY: all-zero is a valid passwd (null pointers, zero ids), filled in below.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found = std::ptr::null_mut();
    // SAFETY: `buf` outlives every use of the strings getpwuid_r points into it; `found`
    // is null or `&mut pw`.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::geteuid(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() || pw.pw_dir.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated string inside `buf`, which is still alive.
    let dir = unsafe { std::ffi::CStr::from_ptr(pw.pw_dir) };
    Some(Path::new(std::ffi::OsStr::from_bytes(dir.to_bytes())).to_path_buf())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_password_database_names_an_existing_home() {
        let home = super::from_passwd().expect("the effective user has a passwd entry");
        assert!(home.is_absolute() && home.is_dir(), "{}", home.display());
    }
}
