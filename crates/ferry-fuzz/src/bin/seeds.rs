//! Writes the seeds of every fuzz target into `<dir>/<target>/seed-<n>` (scripts/fuzz runs it
//! before fuzzing): valid inputs made by ferry's own encoders.

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: seeds <corpus directory>");
    for target in ferry_fuzz::TARGETS {
        let d = std::path::Path::new(&dir).join(target);
        std::fs::create_dir_all(&d)?;
        // Seeds hold random salts and nonces: written once, so that a run does not churn them.
        for (n, s) in ferry_fuzz::seeds(target).iter().enumerate() {
            let f = d.join(format!("seed-{n}"));
            if !f.exists() {
                std::fs::write(f, s)?;
            }
        }
    }
    Ok(())
}
