//! Changing a snapshot's tags: a new snapshot file replaces the old one.
