//! A download whose bytes do not match the digest the store vouches for is refused, and
//! nothing appears under the destination name.

mod common;

use bytes::Bytes;
use common::{fails_with, ferry, ok, s, temp_dir};
use ferry_store::{Meta, Store};

#[test]
fn azure_blob_swapped_under_its_digest_is_refused() {
    let Some(cfg) = ferry_testkit::azure() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (store, container) = rt.block_on(ferry_testkit::azure_container(&cfg));
    let dir = temp_dir();
    for (size, name) in [(1000usize, "small"), (12 << 20, "large")] {
        let src = dir.join(name);
        std::fs::write(&src, ferry_testkit::random_bytes(size, 1)).unwrap();
        let url = format!("az://{container}/{name}");
        ok(&["cp", s(&src), &url]);
        // Another writer replaces the content but keeps ferry's metadata: what bit rot or a
        // buggy tool would leave behind.
        let meta: Meta = rt.block_on(store.head(name)).unwrap().meta;
        let other = Bytes::from(ferry_testkit::random_bytes(size, 2));
        rt.block_on(store.put(name, other, &meta)).unwrap();

        let dst = dir.join(format!("{name}.back"));
        fails_with(&ferry(&["cp", &url, s(&dst)]), "checksum mismatch");
        assert!(!dst.exists(), "a corrupt download appeared under its name");
        let leftovers = std::fs::read_dir(&dir).unwrap().filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("ferry-tmp")
        });
        assert_eq!(leftovers.count(), 0, "temp files left behind");
        fails_with(&ferry(&["cp", &url, "-"]), "checksum mismatch");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
