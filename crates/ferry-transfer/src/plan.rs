//! How an object is cut into blocks.
//!
//! A plan is recorded with each object ferry writes (`ferry_blocks` metadata), so that a later
//! download can read the same blocks and check them against the store's digest.

use ferry_store::{Limits, ObjectInfo, META_BLOCKS};

const MIB: u64 = 1 << 20;
/// Default block size: S3's smallest part. Measured on the `wan` bench link (80 ms RTT, 8 MB/s
/// per connection), 5 MiB blocks beat 8 MiB by 1-3%: many connections hide each request's
/// round trip, and smaller blocks drain faster at the end of a transfer.
pub const DEFAULT_BLOCK: u64 = 5 * MIB;
/// Blocks a medium object is cut into, at least, so that it still travels in parallel.
const SPREAD: u64 = 16;
/// A stream of unknown length doubles its block size every this many blocks, so that it never
/// runs out of S3's 10,000 parts (8 MiB x 1000 x (1 + 2 + ... + 512) is about 8 TiB).
const GROW_EVERY: u64 = 1000;
/// Doublings of a growing plan's block size, at most: past them its blocks keep one size.
const MAX_DOUBLINGS: u64 = 16;
/// Blocks a recorded plan may cut an object into, at most. A plan is metadata a store hands
/// back, hostile input like any: `1` for a terabyte would be a trillion blocks to list. Ten
/// times the most any store takes in one object (Azure: 50,000 blocks).
const MAX_RECORDED_BLOCKS: u64 = 500_000;

/// Block sizes of one object: `base`, doubling every `grow_every` blocks (never, when 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockPlan {
    /// Size of the first blocks.
    pub base: u64,
    /// Blocks between doublings; 0 for a fixed size.
    pub grow_every: u64,
}

impl BlockPlan {
    /// The plan for an object of known `size` on a store with `limits`; `forced` is a block size
    /// the user asked for.
    pub fn for_size(size: u64, limits: Limits, forced: Option<u64>) -> Self {
        let by_count = size.div_ceil(limits.max_blocks.max(1));
        let base = match forced {
            Some(b) => b.max(by_count),
            // Cut medium objects into SPREAD blocks (1 MiB granularity), large ones into 8 MiB.
            None => (size / SPREAD)
                .next_multiple_of(MIB)
                .clamp(MIB, DEFAULT_BLOCK)
                .max(by_count),
        };
        Self {
            base: base.clamp(limits.min_block.max(1), limits.max_block),
            grow_every: 0,
        }
    }

    /// The plan for a stream of unknown length.
    pub fn for_stream(limits: Limits, forced: Option<u64>) -> Self {
        let base = forced
            .unwrap_or(DEFAULT_BLOCK)
            .clamp(limits.min_block.max(1), limits.max_block);
        Self {
            base,
            grow_every: GROW_EVERY,
        }
    }

    /// Size of block `idx` (the last block of an object may be shorter).
    pub fn block_len(&self, idx: u64) -> u64 {
        match self.grow_every {
            0 => self.base,
            // Saturating: a recorded base near 2^64 must not double into 0 (a block of no bytes).
            g => self.base.saturating_mul(1 << (idx / g).min(MAX_DOUBLINGS)),
        }
    }

    /// Blocks from `idx` on that have the size of block `idx`: to the next doubling, or all
    /// of them once the size no longer grows.
    fn run_from(&self, idx: u64) -> u64 {
        match self.grow_every {
            0 => u64::MAX,
            g if idx / g >= MAX_DOUBLINGS => u64::MAX,
            g => g - idx % g,
        }
    }

    /// The run of equal blocks the last byte of an object of `size` bytes falls in: its first
    /// block's index, offset and size; None for 0 bytes. Fixed plans settle at once, growing
    /// ones step a run (a thousand blocks) at a time.
    fn last_run(&self, size: u64) -> Option<(u64, u64, u64)> {
        let (mut off, mut idx) = (0, 0);
        while off < size {
            let (len, run) = (self.block_len(idx), self.run_from(idx));
            let span = len.saturating_mul(run);
            if size - off <= span {
                return Some((idx, off, len));
            }
            off += span;
            idx += run;
        }
        None
    }

    /// How many blocks an object of `size` bytes is cut into, without listing them.
    pub fn count(&self, size: u64) -> u64 {
        self.last_run(size)
            .map_or(0, |(idx, off, len)| idx + (size - off).div_ceil(len))
    }

    /// Offsets and lengths of every block of an object of `size` bytes (none for 0 bytes).
    pub fn blocks(&self, size: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut off = 0;
        while off < size {
            let len = self.block_len(out.len() as u64).min(size - off);
            out.push((off, len));
            off += len;
        }
        out
    }

    /// True when a store with `limits` accepts this plan for an object of `size`.
    pub fn fits(&self, size: u64, limits: Limits) -> bool {
        let blocks = self.blocks(size);
        blocks.len() as u64 <= limits.max_blocks
            && blocks.iter().all(|&(_, l)| l <= limits.max_block)
            && blocks
                .iter()
                .rev()
                .skip(1)
                .all(|&(_, l)| l >= limits.min_block)
    }

    /// The plan recorded with an object ferry wrote, if any: none where the recorded one would
    /// cut the object into more blocks than any store takes ([`MAX_RECORDED_BLOCKS`]).
    pub fn recorded(info: &ObjectInfo) -> Option<Self> {
        let plan = info.meta.get(META_BLOCKS).and_then(|p| Self::decode(p))?;
        (plan.count(info.size) <= MAX_RECORDED_BLOCKS).then_some(plan)
    }

    /// Size of the largest block of an object of `size` bytes, without listing the blocks.
    pub fn largest(&self, size: u64) -> u64 {
        self.last_run(size).map_or(0, |(idx, off, len)| {
            len.min(size - off)
                .max(if idx > 0 { self.block_len(idx - 1) } else { 0 })
        })
    }

    /// The metadata form: `BASE` or `BASExGROW`.
    pub fn encode(&self) -> String {
        match self.grow_every {
            0 => self.base.to_string(),
            g => format!("{}x{g}", self.base),
        }
    }

    /// Parses [`BlockPlan::encode`]'s form.
    pub fn decode(s: &str) -> Option<Self> {
        let (b, g) = s.split_once('x').unwrap_or((s, "0"));
        let plan = Self {
            base: b.parse().ok()?,
            grow_every: g.parse().ok()?,
        };
        (plan.base > 0).then_some(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S3: Limits = Limits {
        min_block: 5 * MIB,
        max_block: 5 << 30,
        max_blocks: 10_000,
    };
    const ANY: Limits = Limits {
        min_block: 1,
        max_block: 1 << 32,
        max_blocks: 50_000,
    };

    #[test]
    fn sizes_follow_object_size_and_limits() {
        assert_eq!(BlockPlan::for_size(16 * MIB, ANY, None).base, MIB);
        assert_eq!(BlockPlan::for_size(16 * MIB, S3, None).base, 5 * MIB);
        assert_eq!(BlockPlan::for_size(1 << 30, S3, None).base, DEFAULT_BLOCK);
        // 200 GiB must fit in 10,000 parts.
        let big = BlockPlan::for_size(200 << 30, S3, None);
        assert!(big.fits(200 << 30, S3), "{big:?}");
        assert_eq!(BlockPlan::for_size(100 * MIB, S3, Some(MIB)).base, 5 * MIB);
    }

    #[test]
    fn blocks_cover_the_object_exactly() {
        let p = BlockPlan {
            base: 10,
            grow_every: 2,
        };
        assert_eq!(p.blocks(0), vec![]);
        assert_eq!(p.blocks(45), vec![(0, 10), (10, 10), (20, 20), (40, 5)]);
        let total: u64 = BlockPlan::for_size(12345, ANY, Some(100))
            .blocks(12345)
            .iter()
            .map(|b| b.1)
            .sum();
        assert_eq!(total, 12345);
    }

    #[test]
    fn streams_fit_s3_up_to_terabytes() {
        let p = BlockPlan::for_stream(S3, None);
        assert!(p.fits(4 << 40, S3));
        assert!(p.fits(10 << 30, S3));
    }

    #[test]
    fn largest_block_matches_the_listed_blocks() {
        let g = BlockPlan {
            base: 10,
            grow_every: 2,
        };
        let f = BlockPlan {
            base: 10,
            grow_every: 0,
        };
        for p in [g, f] {
            for size in [0, 1, 10, 11, 35, 40, 45, 1000] {
                let listed = p.blocks(size).iter().map(|b| b.1).max().unwrap_or(0);
                assert_eq!(p.largest(size), listed, "{p:?} {size}");
            }
        }
    }

    #[test]
    fn encoding_round_trips() {
        for p in [
            BlockPlan {
                base: 8 << 20,
                grow_every: 0,
            },
            BlockPlan {
                base: 5,
                grow_every: 1000,
            },
        ] {
            assert_eq!(BlockPlan::decode(&p.encode()), Some(p));
        }
        assert_eq!(BlockPlan::decode("zero"), None);
        assert_eq!(BlockPlan::decode("0"), None);
    }

    #[test]
    fn counts_match_the_listed_blocks() {
        for p in [(10, 2), (10, 0), (1, 1), (7, 3)] {
            let p = BlockPlan {
                base: p.0,
                grow_every: p.1,
            };
            for size in [0, 1, 9, 10, 11, 45, 1000, 1 << 20] {
                assert_eq!(p.count(size), p.blocks(size).len() as u64, "{p:?} {size}");
            }
        }
    }

    /// Hostile metadata: a plan a store hands back that would list a trillion blocks, or
    /// whose doubling wraps to blocks of no bytes, is no plan; nothing hangs or runs out of
    /// memory deciding so.
    #[test]
    fn a_recorded_plan_past_any_store_is_refused() {
        let info = |plan: &str, size: u64| ObjectInfo {
            key: "k".into(),
            size,
            meta: [(META_BLOCKS.to_string(), plan.to_string())].into(),
            ..Default::default()
        };
        assert_eq!(BlockPlan::recorded(&info("1", 1 << 40)), None);
        assert_eq!(BlockPlan::recorded(&info("1x1", u64::MAX)), None);
        let huge = BlockPlan::recorded(&info("9223372036854775808x1", (1 << 63) + 1)).unwrap();
        assert_eq!(huge.blocks((1 << 63) + 1).len(), 2);
        assert_eq!(huge.largest((1 << 63) + 1), 1 << 63);
        let ok = BlockPlan::recorded(&info("5242880", 1 << 30)).unwrap();
        assert_eq!(ok.count(1 << 30), 205);
    }
}
