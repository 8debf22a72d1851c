//! Links librados when it is installed. Without it the crate still builds (as a workspace
//! member of a ferry built without the `rados` feature) and [`crate::open`] says why it fails.

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(librados)");
    println!("cargo::rerun-if-env-changed=FERRY_LIBRADOS_DIR");
    // FERRY_LIBRADOS=off builds as if librados were missing (to check that such builds work).
    println!("cargo::rerun-if-env-changed=FERRY_LIBRADOS");
    if std::env::var("FERRY_LIBRADOS").is_ok_and(|v| v == "off") {
        return;
    }
    let mut dirs = vec![
        "/usr/lib/x86_64-linux-gnu".to_string(),
        "/usr/lib/aarch64-linux-gnu".into(),
        "/usr/lib64".into(),
        "/usr/lib".into(),
        "/usr/local/lib".into(),
    ];
    if let Ok(d) = std::env::var("FERRY_LIBRADOS_DIR") {
        dirs.insert(0, d);
    }
    match dirs
        .iter()
        .find(|d| Path::new(d).join("librados.so").exists())
    {
        Some(dir) => {
            println!("cargo::rerun-if-changed={dir}/librados.so");
            println!("cargo::rustc-link-search=native={dir}");
            println!("cargo::rustc-link-lib=rados");
            println!("cargo::rustc-cfg=librados");
        }
        None => {
            for d in &dirs {
                println!("cargo::rerun-if-changed={d}");
            }
        }
    }
}
