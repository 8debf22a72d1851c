//! Bounds on what a walk of snapshot trees may hold in memory.

/// Memory one entry takes while a walk holds it, counted generously (its path, its node, its
/// place in the walk's lists): the bound below divides free memory by it.
const ENTRY_MEMORY: u64 = 1024;

/// The most entries one walk of snapshot trees (a restore, a diff, a dump) takes on: what
/// half the free memory holds, at least a million. A password holder can write trees that
/// share subtrees at every level, so that a few kilobytes of trees name 2^40 entries; a walk
/// stops at this bound instead of taking all memory.
pub fn walk_entries() -> u64 {
    let free_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .unwrap_or(8 << 20);
    (free_kib * 1024 / 2 / ENTRY_MEMORY).max(1_000_000)
}
