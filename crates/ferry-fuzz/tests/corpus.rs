//! Replays every saved fuzz input (`fuzz/corpus/<target>/`, regressions included) and the
//! seeds through the decoders, as CI's guard that no finding comes back. A target without a
//! saved corpus fails: an empty directory would make this test pass without testing.

use std::path::Path;

#[test]
fn every_saved_input_decodes_without_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for target in ferry_fuzz::TARGETS {
        let dir = root.join(target);
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fuzz)", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        assert!(!files.is_empty(), "{}: empty corpus", dir.display());
        for f in &files {
            ferry_fuzz::run(target, &std::fs::read(f).unwrap());
        }
        for s in ferry_fuzz::seeds(target) {
            ferry_fuzz::run(target, &s);
        }
    }
}
