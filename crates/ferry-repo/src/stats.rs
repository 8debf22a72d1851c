//! How much snapshots hold: the size a restore would write, or the stored data they use.
