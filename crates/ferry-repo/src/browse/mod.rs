//! Reading snapshots without restoring them: what changed between two (`diff`), which hold
//! a path (`find`), one file or directory to a stream (`dump`).
