//! Restore points found in archived WAL: where `pg_create_restore_point(name)` wrote its
//! record. `pg restore --target-name` reads them to start from the newest backup that ends
//! before the point, as `--target-time` does; PostgreSQL itself would only find out after
//! replaying the whole archive that a backup started too late.
//!
//! A segment is read as PostgreSQL writes it: pages of `xlp_xlog_blcksz` bytes, each opening
//! with a page header, records running on across page boundaries, each record starting at the
//! 8-byte boundary after the one before. The page headers are taken out (a page whose address
//! is not its own ends the segment's valid part: a recycled file keeps stale pages), and the
//! records are walked from the first that starts in the segment, each one's CRC-32C checked; a
//! record that does not check, or a zero length, ends the walk (the end of the WAL written, or
//! the padding after a WAL switch). Walking, rather than searching, keeps bytes that a
//! database user wrote into a row from passing for a restore point. Only the restore point
//! records are interpreted beyond their length.

use crate::lsn::Lsn;

/// `XLP_LONG_HEADER` in `xlp_info`.
const XLP_LONG_HEADER: u16 = 0x0002;
/// `SizeOfXLogShortPHD` and `SizeOfXLogLongPHD`.
const SHORT_PAGE_HEADER: usize = 24;
const LONG_PAGE_HEADER: usize = 40;
/// `SizeOfXLogRecord`: total length, xid, previous record, info, resource manager, CRC.
const RECORD_HEADER: usize = 24;
/// `RM_XLOG_ID` and `XLOG_RESTORE_POINT`.
const RM_XLOG: u8 = 0;
const XLOG_RESTORE_POINT: u8 = 0x70;
/// Block ids that precede a record's main data (`XLR_BLOCK_ID_*`).
const DATA_SHORT: u8 = 255;
const DATA_LONG: u8 = 254;
const ORIGIN: u8 = 253;
const TOPLEVEL_XID: u8 = 252;
/// `xl_restore_point`: a timestamp and a name of at most `MAXFNAMELEN` bytes with its NUL.
const POINT_DATA: usize = 8 + 64;
/// The longest restore point record: header, origin, top-level xid, long data header, data.
const MAX_POINT_RECORD: usize = RECORD_HEADER + 3 + 5 + 5 + POINT_DATA;
/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// A restore point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestorePoint {
    /// Where its record starts.
    pub lsn: Lsn,
    /// The name it was given.
    pub name: String,
    /// When it was made, microseconds since the Unix epoch.
    pub time: i64,
}

/// Reads consecutive segments, keeping a short record that runs on into the next segment so
/// that it is found there.
#[derive(Default)]
pub struct Scanner {
    /// The unfinished record's bytes (page headers taken out), and the LSN each page's part
    /// of them starts at: `(offset in carry, lsn)`.
    carry: Vec<u8>,
    pieces: Vec<(usize, u64)>,
    /// Where the last segment read ended, when its record ran on past the end.
    next: Option<u64>,
}

impl Scanner {
    /// The restore points whose records end in `seg`, the segment starting at `seg_start`.
    pub fn scan(&mut self, seg: &[u8], seg_start: u64) -> Vec<RestorePoint> {
        let (body, pieces) = bodies(seg, seg_start);
        let whole = pieces.len() * page_size(seg) == seg.len() && !pieces.is_empty();
        let (mut stream, all, from) = match self.next.take() == Some(seg_start) {
            true => {
                let (mut carry, mut all) = (
                    std::mem::take(&mut self.carry),
                    std::mem::take(&mut self.pieces),
                );
                let carried = carry.len();
                all.extend(pieces.into_iter().map(|(o, lsn)| (o + carried, lsn)));
                carry.extend_from_slice(&body);
                (carry, all, 0)
            }
            // The segment opens with the rest of a record that began before it.
            false => (body, pieces, first_record(seg)),
        };
        let (found, unfinished) = walk(&stream, &all, from);
        self.carry.clear();
        self.pieces.clear();
        if let Some(at) = unfinished.filter(|_| whole) {
            self.pieces.push((0, lsn_of(&all, at)));
            self.pieces.extend(
                all.iter()
                    .filter(|(o, _)| *o > at)
                    .map(|&(o, l)| (o - at, l)),
            );
            self.carry = stream.split_off(at);
            self.next = Some(seg_start + seg.len() as u64);
        }
        found
    }
}

/// Where the first record starting in `seg` is, in its record bytes: after the part of a
/// record begun in the segment before (`xlp_rem_len`, 8-byte aligned).
fn first_record(seg: &[u8]) -> usize {
    seg.get(16..20)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
        .unwrap_or(0)
        .next_multiple_of(8)
}

/// The page size a segment's long header names (8 KiB unless built otherwise).
fn page_size(seg: &[u8]) -> usize {
    if seg.len() < LONG_PAGE_HEADER {
        return 0;
    }
    let n = u32::from_le_bytes(seg[36..40].try_into().expect("4 bytes")) as usize;
    if n.is_power_of_two() && (1024..=65536).contains(&n) {
        n
    } else {
        0
    }
}

/// The valid pages of `seg`: each page's bytes after its header and the LSN they start at.
fn pages(seg: &[u8], seg_start: u64) -> impl Iterator<Item = (&[u8], u64)> {
    let size = page_size(seg);
    let magic = seg.get(0..2).map(|m| [m[0], m[1]]);
    let chunks = if size == 0 {
        [].chunks(1)
    } else {
        seg.chunks(size)
    };
    chunks.enumerate().map_while(move |(i, page)| {
        let at = seg_start + (i * size) as u64;
        let ok = page.len() == size
            && Some([page[0], page[1]]) == magic
            && u64::from_le_bytes(page[8..16].try_into().expect("8 bytes")) == at;
        if !ok {
            return None;
        }
        let info = u16::from_le_bytes([page[2], page[3]]);
        let header = if info & XLP_LONG_HEADER != 0 {
            LONG_PAGE_HEADER
        } else {
            SHORT_PAGE_HEADER
        };
        Some((&page[header..], at + header as u64))
    })
}

/// The record bytes of `seg`, page headers taken out, and where each page's part starts in
/// them: `(offset, lsn)`.
fn bodies(seg: &[u8], seg_start: u64) -> (Vec<u8>, Vec<(usize, u64)>) {
    let mut out = Vec::with_capacity(seg.len());
    let mut pieces = Vec::new();
    for (body, lsn) in pages(seg, seg_start) {
        pieces.push((out.len(), lsn));
        out.extend_from_slice(body);
    }
    (out, pieces)
}

/// The LSN of `offset` in a stream whose pieces start as `pieces` says.
fn lsn_of(pieces: &[(usize, u64)], offset: usize) -> u64 {
    let i = pieces.partition_point(|(o, _)| *o <= offset);
    let (o, lsn) = pieces[i.saturating_sub(1)];
    lsn + (offset - o) as u64
}

/// Walks the records of `stream` from `at`: the restore points among them, and where a
/// record that may be one runs past the end.
fn walk(
    stream: &[u8], pieces: &[(usize, u64)], mut at: usize,
) -> (Vec<RestorePoint>, Option<usize>) {
    let mut out = Vec::new();
    if pieces.is_empty() {
        return (out, None);
    }
    while at < stream.len() {
        let rec = &stream[at..];
        let Some(total) = rec.get(0..4) else {
            return (out, Some(at));
        };
        let total = u32::from_le_bytes(total.try_into().expect("4 bytes")) as usize;
        if total < RECORD_HEADER {
            break;
        }
        if total > rec.len() {
            return (out, (total <= MAX_POINT_RECORD).then_some(at));
        }
        if !crc_holds(&rec[..total]) {
            break;
        }
        if let Some((name, time)) = point(&rec[..total]) {
            out.push(RestorePoint {
                lsn: Lsn(lsn_of(pieces, at)),
                name,
                time,
            });
        }
        at += total.next_multiple_of(8);
    }
    (out, None)
}

/// Whether a record's CRC-32C (of its data, then of its header up to the CRC) holds.
fn crc_holds(rec: &[u8]) -> bool {
    let crc = u32::from_le_bytes(rec[20..24].try_into().expect("4 bytes"));
    let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    d.update(&rec[RECORD_HEADER..]);
    d.update(&rec[..20]);
    d.finalize() as u32 == crc
}

/// The name and time of the restore point `rec` records, if it is one.
fn point(rec: &[u8]) -> Option<(String, i64)> {
    if rec[17] != RM_XLOG || rec[16] & 0xF0 != XLOG_RESTORE_POINT || rec.len() > MAX_POINT_RECORD {
        return None;
    }
    let mut p = RECORD_HEADER;
    let data = loop {
        match *rec.get(p)? {
            ORIGIN => p += 3,
            TOPLEVEL_XID => p += 5,
            DATA_SHORT => break rec.get(p + 2..p + 2 + *rec.get(p + 1)? as usize)?,
            DATA_LONG => {
                let n = u32::from_le_bytes(rec.get(p + 1..p + 5)?.try_into().ok()?) as usize;
                break rec.get(p + 5..(p + 5).checked_add(n)?)?;
            }
            _ => return None,
        }
    };
    if data.len() != POINT_DATA {
        return None;
    }
    let time = i64::from_le_bytes(data[0..8].try_into().ok()?);
    let name = &data[8..];
    let name = &name[..name.iter().position(|b| *b == 0)?];
    Some((
        String::from_utf8_lossy(name).into_owned(),
        time.saturating_add(PG_EPOCH_US),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 1024;
    const SEG: usize = 4 * PAGE;

    /// A record with a valid CRC.
    fn record(rmid: u8, info: u8, body: &[u8]) -> Vec<u8> {
        let mut r = vec![0u8; RECORD_HEADER];
        r[0..4].copy_from_slice(&((RECORD_HEADER + body.len()) as u32).to_le_bytes());
        r[16] = info;
        r[17] = rmid;
        r.extend_from_slice(body);
        let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
        d.update(&r[RECORD_HEADER..]);
        d.update(&r[..20]);
        let crc = d.finalize() as u32;
        r[20..24].copy_from_slice(&crc.to_le_bytes());
        r
    }

    fn restore_point(name: &str, time: i64) -> Vec<u8> {
        let mut body = vec![DATA_SHORT, POINT_DATA as u8];
        body.extend_from_slice(&time.to_le_bytes());
        let mut n = name.as_bytes().to_vec();
        n.resize(64, 0);
        body.extend_from_slice(&n);
        record(RM_XLOG, XLOG_RESTORE_POINT, &body)
    }

    /// A heap-insert-like record of `len` bytes of data.
    fn filler(len: usize, fill: u8) -> Vec<u8> {
        let mut body = vec![DATA_LONG];
        body.extend_from_slice(&((len - 5) as u32).to_le_bytes());
        body.resize(len, fill);
        record(10, 0, &body)
    }

    /// Lays `records` out as PostgreSQL does from LSN 0: segments of pages with headers,
    /// records 8-byte aligned and running on across pages. Returns the segments and each
    /// record's LSN.
    fn lay_out(records: &[Vec<u8>]) -> (Vec<Vec<u8>>, Vec<u64>) {
        let mut stream = Vec::new();
        let mut spans = Vec::new();
        for r in records {
            spans.push((stream.len(), r.len()));
            stream.extend_from_slice(r);
            stream.resize(stream.len().next_multiple_of(8), 0);
        }
        let mut lsns = vec![0; records.len()];
        let mut segs: Vec<Vec<u8>> = Vec::new();
        let mut at = 0;
        while at < stream.len() || segs.is_empty() {
            let mut seg = Vec::with_capacity(SEG);
            for p in 0..SEG / PAGE {
                let addr = (segs.len() * SEG + p * PAGE) as u64;
                let long = p == 0;
                let header = if long {
                    LONG_PAGE_HEADER
                } else {
                    SHORT_PAGE_HEADER
                };
                let rem = spans
                    .iter()
                    .find(|(s, l)| *s < at && s + l > at)
                    .map_or(0, |(s, l)| s + l - at);
                let mut page = vec![0u8; PAGE];
                page[0..2].copy_from_slice(&0xD116u16.to_le_bytes());
                page[2..4].copy_from_slice(&(if long { XLP_LONG_HEADER } else { 0 }).to_le_bytes());
                page[8..16].copy_from_slice(&addr.to_le_bytes());
                page[16..20].copy_from_slice(&(rem as u32).to_le_bytes());
                if long {
                    page[32..36].copy_from_slice(&(SEG as u32).to_le_bytes());
                    page[36..40].copy_from_slice(&(PAGE as u32).to_le_bytes());
                }
                for (i, (s, _)) in spans.iter().enumerate() {
                    if (at..at + PAGE - header).contains(s) {
                        lsns[i] = addr + (header + s - at) as u64;
                    }
                }
                let n = (PAGE - header).min(stream.len().saturating_sub(at));
                if n > 0 {
                    page[header..header + n].copy_from_slice(&stream[at..at + n]);
                }
                at += PAGE - header;
                seg.extend_from_slice(&page);
            }
            segs.push(seg);
        }
        (segs, lsns)
    }

    fn names(found: &[RestorePoint]) -> Vec<(&str, u64)> {
        found.iter().map(|p| (p.name.as_str(), p.lsn.0)).collect()
    }

    #[test]
    fn finds_points_across_pages_and_segments() {
        // Record bytes per segment: the first page's body is shorter (long header).
        let seg_body = PAGE - LONG_PAGE_HEADER + 3 * (PAGE - SHORT_PAGE_HEADER);
        let mut records = vec![filler(100, 1), restore_point("one", 7)];
        let fill_to = |records: &mut Vec<Vec<u8>>, at: usize| {
            let used: usize = records.iter().map(|r| r.len().next_multiple_of(8)).sum();
            records.push(filler(at - used, 2));
        };
        // "two" across the boundary of pages 0 and 1, "three" across that of segments 0 and 1.
        fill_to(&mut records, PAGE - LONG_PAGE_HEADER - 48);
        records.push(restore_point("two", 8));
        fill_to(&mut records, seg_body - 48);
        records.push(restore_point("three", 9));
        records.push(filler(300, 5));
        records.push(restore_point("four", 10));
        let (segs, lsns) = lay_out(&records);
        assert_eq!(segs.len(), 2);
        let (two, three) = (lsns[3] as usize, lsns[5] as usize);
        assert!(two < PAGE && two + 98 > PAGE, "two at {two}");
        assert!(three < SEG && three + 98 > SEG, "three at {three}");

        let mut s = Scanner::default();
        let mut found = s.scan(&segs[0], 0);
        found.extend(s.scan(&segs[1], SEG as u64));
        let want = [
            ("one", lsns[1]),
            ("two", lsns[3]),
            ("three", lsns[5]),
            ("four", lsns[7]),
        ];
        assert_eq!(names(&found), want);
        assert_eq!(found[0].time, 7 + PG_EPOCH_US);

        // Read alone, the second segment starts after the record it opens with.
        let alone = Scanner::default().scan(&segs[1], SEG as u64);
        assert_eq!(names(&alone), [("four", lsns[7])]);
    }

    #[test]
    fn bytes_inside_another_record_are_not_a_point() {
        // A row holding a well-formed restore point record, 8-byte aligned in the stream.
        let fake = restore_point("planted", 1);
        let mut body = vec![DATA_LONG, 0, 0, 0, 0, 0, 0, 0];
        body.extend_from_slice(&fake);
        body.resize(400, 0);
        let n = (body.len() - 5) as u32;
        body[1..5].copy_from_slice(&n.to_le_bytes());
        let records = vec![record(10, 0, &body), restore_point("real", 2)];
        let (segs, lsns) = lay_out(&records);
        let found = Scanner::default().scan(&segs[0], 0);
        assert_eq!(names(&found), [("real", lsns[1])]);
    }

    #[test]
    fn a_stale_page_or_a_bad_crc_ends_the_walk() {
        let records = vec![
            restore_point("a", 1),
            filler(PAGE, 1),
            restore_point("b", 2),
        ];
        let (segs, lsns) = lay_out(&records);
        assert_eq!(
            names(&Scanner::default().scan(&segs[0], 0)),
            [("a", lsns[0]), ("b", lsns[2])]
        );

        // A recycled file: page 1 still carries the address it had before.
        let mut stale = segs[0].clone();
        stale[PAGE + 8..PAGE + 16].copy_from_slice(&(9 * SEG as u64).to_le_bytes());
        assert_eq!(names(&Scanner::default().scan(&stale, 0)), [("a", lsns[0])]);

        // A torn write in the filler: nothing after it is trusted.
        let mut torn = segs[0].clone();
        torn[PAGE + 100] ^= 0xFF;
        assert_eq!(names(&Scanner::default().scan(&torn, 0)), [("a", lsns[0])]);

        // Not a segment at all.
        assert!(Scanner::default().scan(&[0u8; 100], 0).is_empty());
        assert!(Scanner::default().scan(&[], 0).is_empty());
    }

    #[test]
    fn damaged_segments_never_panic() {
        let records = vec![
            restore_point("a", 1),
            filler(PAGE, 1),
            restore_point("b", 2),
            filler(3 * PAGE, 2),
            restore_point("c", 3),
        ];
        let (segs, _) = lay_out(&records);
        assert_eq!(segs.len(), 2);
        // xorshift: reproducible damage without a dependency.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..3000 {
            let mut s = segs[0].clone();
            for _ in 0..1 + next() % 8 {
                let at = next() as usize % s.len();
                s[at] = next() as u8;
            }
            // Lengths, page sizes and the first record's offset are what damage moves.
            if next() % 4 == 0 {
                let at = [0, 16, 36, PAGE, PAGE + 16][next() as usize % 5];
                s[at..at + 4].copy_from_slice(&(next() as u32).to_le_bytes());
            }
            s.truncate(next() as usize % (s.len() + 1));
            let mut sc = Scanner::default();
            sc.scan(&s, 0);
            sc.scan(&segs[1], SEG as u64);
        }
    }
}
