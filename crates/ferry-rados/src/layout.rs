//! libradosstriper's layout: how the bytes of one striped object map onto RADOS objects.
//!
//! Stripe units go round-robin over `stripe_count` objects (RAID 0); when those objects hold
//! `object_size` bytes each, the next set of `stripe_count` objects starts. The pieces are named
//! `<name>.%016x` and the first one carries the layout and size as decimal-text xattrs.

use ferry_store::{Error, Result};

/// Xattr with the stripe unit, on the first piece.
pub const XATTR_STRIPE_UNIT: &str = "striper.layout.stripe_unit";
/// Xattr with the stripe count, on the first piece.
pub const XATTR_STRIPE_COUNT: &str = "striper.layout.stripe_count";
/// Xattr with the object size, on the first piece.
pub const XATTR_OBJECT_SIZE: &str = "striper.layout.object_size";
/// Xattr with the striped object's size, on the first piece.
pub const XATTR_SIZE: &str = "striper.size";
/// Suffix of the first piece: listing shows objects by it, as `rados ls --striper` does.
pub const FIRST_SUFFIX: &str = ".0000000000000000";
/// libradosstriper refuses stripe units and object sizes that are not multiples of this.
const MIN_UNIT: u64 = 64 << 10;

/// Stripe unit, stripe count and object size of one striped object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes written to one object before moving to the next object of the set.
    pub stripe_unit: u64,
    /// Objects one stripe is spread over.
    pub stripe_count: u64,
    /// Bytes per object before the next object set starts.
    pub object_size: u64,
}

/// One contiguous run of an object's bytes inside one piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Piece number.
    pub objno: u64,
    /// Offset inside the piece.
    pub obj_off: u64,
    /// Offset relative to the start of the range that was mapped.
    pub buf_off: u64,
    /// Length in bytes.
    pub len: u64,
}

impl Default for Layout {
    /// 4 MiB units on one object of 4 MiB per set; see docs/rados.md for the measurements.
    fn default() -> Self {
        Self {
            stripe_unit: 4 << 20,
            stripe_count: 1,
            object_size: 4 << 20,
        }
    }
}

impl Layout {
    /// A layout libradosstriper accepts, or why not.
    pub fn new(stripe_unit: u64, stripe_count: u64, object_size: u64) -> Result<Self> {
        let bad = |what: String| Err(Error::Invalid(format!("rados layout: {what}")));
        if stripe_unit == 0 || !stripe_unit.is_multiple_of(MIN_UNIT) {
            return bad(format!(
                "stripe unit {stripe_unit} is not a multiple of 64 KiB"
            ));
        }
        if stripe_count == 0 {
            return bad("stripe count 0".into());
        }
        if object_size < stripe_unit || !object_size.is_multiple_of(stripe_unit) {
            return bad(format!(
                "object size {object_size} is not a multiple of the stripe unit {stripe_unit}"
            ));
        }
        // RADOS refuses objects over osd_max_object_size (128 MiB by default).
        if object_size > 128 << 20 || stripe_unit > u32::MAX as u64 {
            return bad(format!("object size {object_size} is over 128 MiB"));
        }
        Ok(Self {
            stripe_unit,
            stripe_count,
            object_size,
        })
    }

    /// The default layout with the sizes given applied; an object size left unset follows
    /// the stripe unit.
    pub fn with_sizes(unit: Option<u64>, count: Option<u64>, size: Option<u64>) -> Result<Self> {
        let d = Self::default();
        let count = count.unwrap_or(d.stripe_count);
        let unit = unit.unwrap_or(d.stripe_unit.min(size.unwrap_or(u64::MAX)));
        Self::new(unit, count, size.unwrap_or(unit.max(d.object_size)))
    }

    /// Bytes in one object set: a block of this size fills whole pieces.
    pub fn set_size(&self) -> u64 {
        self.object_size * self.stripe_count
    }

    /// The piece holding byte `off`, and the offset there.
    fn locate(&self, off: u64) -> (u64, u64) {
        let (su, sc) = (self.stripe_unit, self.stripe_count);
        let per_object = self.object_size / su;
        let blockno = off / su;
        let stripeno = blockno / sc;
        let stripepos = blockno % sc;
        let objsetno = stripeno / per_object;
        let objno = objsetno * sc + stripepos;
        (objno, (stripeno % per_object) * su + off % su)
    }

    /// The extents of bytes `off..off + len`, in order, adjacent runs merged.
    pub fn extents(&self, off: u64, len: u64) -> Vec<Extent> {
        let mut out: Vec<Extent> = Vec::new();
        let mut pos = off;
        while pos < off + len {
            let (objno, obj_off) = self.locate(pos);
            let n = (self.stripe_unit - pos % self.stripe_unit).min(off + len - pos);
            let buf_off = pos - off;
            match out.last_mut() {
                Some(e)
                    if e.objno == objno
                        && e.obj_off + e.len == obj_off
                        && e.buf_off + e.len == buf_off =>
                {
                    e.len += n
                }
                _ => out.push(Extent {
                    objno,
                    obj_off,
                    buf_off,
                    len: n,
                }),
            }
            pos += n;
        }
        out
    }

    /// Pieces an object of `size` bytes occupies: 0..count (the first one always exists).
    pub fn pieces(&self, size: u64) -> u64 {
        if size == 0 {
            return 1;
        }
        let last_block = (size - 1) / self.stripe_unit;
        let first = last_block.saturating_sub(self.stripe_count - 1);
        (first..=last_block)
            .map(|b| self.locate(b * self.stripe_unit).0)
            .max()
            .unwrap_or(0)
            + 1
    }

    /// The xattrs of a first piece for an object of `size` bytes.
    pub fn xattrs(&self, size: u64) -> [(&'static str, String); 4] {
        [
            (XATTR_STRIPE_UNIT, self.stripe_unit.to_string()),
            (XATTR_STRIPE_COUNT, self.stripe_count.to_string()),
            (XATTR_OBJECT_SIZE, self.object_size.to_string()),
            (XATTR_SIZE, size.to_string()),
        ]
    }

    /// Layout and size from a first piece's xattrs; `None` when it is no striped object.
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Option<(Self, u64)> {
        let num = |k: &str| get(k)?.trim_end_matches('\0').trim().parse::<u64>().ok();
        let layout = Self {
            stripe_unit: num(XATTR_STRIPE_UNIT)?,
            stripe_count: num(XATTR_STRIPE_COUNT)?,
            object_size: num(XATTR_OBJECT_SIZE)?,
        };
        let sane = layout.stripe_unit > 0
            && layout.stripe_count > 0
            && layout.object_size >= layout.stripe_unit
            && layout.object_size.is_multiple_of(layout.stripe_unit);
        sane.then_some((layout, num(XATTR_SIZE)?))
    }
}

/// Name of piece `objno` of striped object `name`.
pub fn piece(name: &str, objno: u64) -> String {
    format!("{name}.{objno:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 64 << 10;

    #[test]
    fn one_object_per_set_is_contiguous() {
        let l = Layout::new(4 * K, 1, 8 * K).unwrap();
        let e = l.extents(7 * K, 3 * K);
        assert_eq!(
            e,
            vec![
                Extent {
                    objno: 0,
                    obj_off: 7 * K,
                    buf_off: 0,
                    len: K
                },
                Extent {
                    objno: 1,
                    obj_off: 0,
                    buf_off: K,
                    len: 2 * K
                },
            ]
        );
        assert_eq!(l.pieces(0), 1);
        assert_eq!(l.pieces(8 * K), 1);
        assert_eq!(l.pieces(8 * K + 1), 2);
    }

    #[test]
    fn stripes_go_round_robin_then_next_set() {
        // su = K, sc = 3, os = 2K: set of 3 objects holds 6K.
        let l = Layout::new(K, 3, 2 * K).unwrap();
        let objs: Vec<(u64, u64)> = l
            .extents(0, 7 * K)
            .iter()
            .map(|e| (e.objno, e.obj_off / K))
            .collect();
        assert_eq!(
            objs,
            vec![(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (3, 0)]
        );
        assert_eq!(l.pieces(K), 1);
        assert_eq!(l.pieces(2 * K + 1), 3);
        assert_eq!(l.pieces(6 * K), 3);
        assert_eq!(l.pieces(6 * K + 1), 4);
        // Every byte is mapped exactly once.
        let total: u64 = l.extents(123, 5 * K).iter().map(|e| e.len).sum();
        assert_eq!(total, 5 * K);
    }

    #[test]
    fn layout_rules_and_xattrs_round_trip() {
        assert!(Layout::new(1000, 1, 1000).is_err());
        assert!(Layout::new(K, 0, K).is_err());
        assert!(Layout::new(2 * K, 1, 3 * K).is_err());
        assert!(Layout::new(K, 1, 256 << 20).is_err());
        let l = Layout::new(K, 2, 4 * K).unwrap();
        let x = l.xattrs(12345);
        let got = Layout::parse(|k| x.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()));
        assert_eq!(got, Some((l, 12345)));
        assert_eq!(Layout::parse(|_| None), None);
        assert_eq!(piece("a/b", 10), "a/b.000000000000000a");
    }
}
