//! The index: which pack holds each blob. In memory it is one sorted vector of 32-byte ids
//! and 20-byte locations, 52 bytes per blob with no hash-table slack, searched by bisection;
//! on the store, index files list packs and their blobs, written as packs complete so that an
//! interrupted backup's packs are found by the next one.

use std::collections::HashMap;

use ferry_transfer::{Error, Result};

use crate::id::Id;
use crate::pack::{decode_entries, encode_entries, BlobKind, Entry, ENTRY_LEN};

/// Where a blob is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    /// Index into [`Index::packs`].
    pub pack: u32,
    /// Offset in the pack.
    pub offset: u32,
    /// Sealed length.
    pub len: u32,
    /// Plaintext length.
    pub plain_len: u32,
    /// What the blob holds.
    pub kind: BlobKind,
}

/// Every known blob. Fill it with [`Index::add_pack`], then call [`Index::finish`] before
/// looking anything up.
#[derive(Debug, Default)]
pub struct Index {
    packs: Vec<Id>,
    pack_no: HashMap<Id, u32>,
    blobs: Vec<(Id, Loc)>,
    /// Per pack (by number): blobs and their bytes in the fullest listing of it. A blob
    /// stored twice keeps one location, so the blobs located in a pack may be fewer than it
    /// holds (after a prune killed between writing its packs and removing old indexes).
    listed: Vec<(u32, u64)>,
    /// `buckets[p]`: where blobs whose ids start with the 16 bits `p` begin. Ids are uniform
    /// hashes, so a lookup bisects a couple of entries, not the whole vector: an unchanged
    /// backup asks once per chunk it reuses. 256 KiB whatever the index holds.
    buckets: Vec<u32>,
}

fn bucket(id: &Id) -> usize {
    usize::from(u16::from_be_bytes([id.0[0], id.0[1]]))
}

impl Index {
    /// Records a pack's blobs.
    pub fn add_pack(&mut self, pack: Id, entries: &[Entry]) {
        self.buckets.clear(); // stale until the next finish
        let no = *self.pack_no.entry(pack).or_insert_with(|| {
            self.packs.push(pack);
            self.listed.push((0, 0));
            (self.packs.len() - 1) as u32
        });
        let count = entries.len() as u32;
        if count > self.listed[no as usize].0 {
            let bytes = entries.iter().map(|e| u64::from(e.len)).sum();
            self.listed[no as usize] = (count, bytes);
        }
        self.blobs.extend(entries.iter().map(|e| {
            (
                e.id,
                Loc {
                    pack: no,
                    offset: e.offset,
                    len: e.len,
                    plain_len: e.plain_len,
                    kind: e.kind,
                },
            )
        }));
    }

    /// True when some blob is listed at two different places (two packs, or two offsets):
    /// two backups that stored the same chunk at once, a prune cut short, or an index file
    /// put back after a prune removed it, naming a pack that is gone.
    pub fn conflicts(&mut self) -> bool {
        self.sort_preferring(|_| true);
        self.blobs.windows(2).any(|w| {
            w[0].0 == w[1].0 && (w[0].1.pack, w[0].1.offset) != (w[1].1.pack, w[1].1.offset)
        })
    }

    /// Sorts for lookups; a blob stored twice keeps one location, the same whatever order
    /// the index files were read in.
    pub fn finish(&mut self) {
        self.finish_preferring(|_| true);
    }

    /// [`Index::finish`], keeping for a blob stored twice a location that `stored` (each
    /// pack the store holds, with its size) holds whole, where there is one: reads then go
    /// to a copy that exists, whatever a planted index file says of another.
    pub fn finish_stored(&mut self, stored: &HashMap<Id, u64>) {
        let sizes: Vec<Option<u64>> = self.packs.iter().map(|p| stored.get(p).copied()).collect();
        self.finish_preferring(|l| {
            sizes[l.pack as usize]
                .is_some_and(|size| u64::from(l.offset) + u64::from(l.len) <= size)
        });
    }

    /// Sorts by id; of a blob's locations, those `held` says are there come first, then by
    /// pack id, offset and length. Ids almost never tie: the rest is looked at only then.
    fn sort_preferring(&mut self, held: impl Fn(&Loc) -> bool) {
        let packs = &self.packs;
        self.blobs.sort_unstable_by(|(a, la), (b, lb)| {
            a.cmp(b).then_with(|| {
                let key = |l: &Loc| (!held(l), packs[l.pack as usize], l.offset, l.len);
                key(la).cmp(&key(lb))
            })
        });
    }

    fn finish_preferring(&mut self, held: impl Fn(&Loc) -> bool) {
        self.sort_preferring(held);
        self.blobs.dedup_by_key(|(id, _)| *id);
        self.blobs.shrink_to_fit();
        self.pack_no = HashMap::new();
        self.buckets = vec![0; (1 << 16) + 1];
        for (id, _) in &self.blobs {
            self.buckets[bucket(id) + 1] += 1;
        }
        for p in 1..self.buckets.len() {
            self.buckets[p] += self.buckets[p - 1];
        }
    }

    /// Every pack an index lists, with its blob count and the bytes of those blobs, as
    /// its fullest listing has them: what its file must hold.
    pub fn listed(&self) -> impl Iterator<Item = (Id, u32, u64)> + '_ {
        self.packs
            .iter()
            .zip(&self.listed)
            .map(|(p, &(n, bytes))| (*p, n, bytes))
    }

    /// Where `id` is.
    pub fn get(&self, id: &Id) -> Option<Loc> {
        let b = bucket(id);
        let part = match self.buckets.get(b..b + 2) {
            Some(&[lo, hi]) => &self.blobs[lo as usize..hi as usize],
            _ => &self.blobs[..], // not finished: only tests look up before finish
        };
        part.binary_search_by_key(id, |(i, _)| *i)
            .ok()
            .map(|i| part[i].1)
    }

    /// True when the blob is stored.
    pub fn has(&self, id: &Id) -> bool {
        self.get(id).is_some()
    }

    /// The pack with number `no`.
    pub fn pack(&self, no: u32) -> Id {
        self.packs[no as usize]
    }

    /// Every pack the index knows.
    pub fn packs(&self) -> &[Id] {
        &self.packs
    }

    /// Number of blobs.
    pub fn len(&self) -> usize {
        self.blobs.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty()
    }

    /// Every blob with its location.
    pub fn iter(&self) -> impl Iterator<Item = &(Id, Loc)> {
        self.blobs.iter()
    }

    /// Blobs per pack, as index files list them.
    pub fn by_pack(&self) -> Vec<(Id, Vec<Entry>)> {
        let mut v: Vec<(Id, Vec<Entry>)> = self.packs.iter().map(|p| (*p, Vec::new())).collect();
        for (id, l) in &self.blobs {
            v[l.pack as usize].1.push(Entry {
                kind: l.kind,
                id: *id,
                offset: l.offset,
                len: l.len,
                plain_len: l.plain_len,
            });
        }
        for (_, e) in &mut v {
            e.sort_by_key(|e| e.offset);
        }
        v.retain(|(_, e)| !e.is_empty());
        v
    }
}

/// An index file's plaintext: per pack, its id, blob count (u32 LE) and blob entries.
pub fn encode(packs: &[(Id, Vec<Entry>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (id, entries) in packs {
        out.extend_from_slice(&id.0);
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        encode_entries(entries, &mut out);
    }
    out
}

/// Parses an index file's plaintext.
pub fn decode(mut b: &[u8], what: &str) -> Result<Vec<(Id, Vec<Entry>)>> {
    let bad = || Error::Checksum(format!("{what}: malformed index"));
    let mut out = Vec::new();
    while !b.is_empty() {
        if b.len() < 36 {
            return Err(bad());
        }
        let id = Id(b[..32].try_into().expect("32 bytes"));
        let n = u32::from_le_bytes(b[32..36].try_into().expect("4 bytes")) as usize;
        let end = 36 + n.checked_mul(ENTRY_LEN).ok_or_else(bad)?;
        if b.len() < end {
            return Err(bad());
        }
        out.push((id, decode_entries(&b[36..end], what)?));
        b = &b[end..];
    }
    Ok(out)
}

/// Blobs per index file written whole (prune, repair index).
const BLOBS_PER_FILE: usize = 200_000;

/// Writes `packs` as new index files of about [`BLOBS_PER_FILE`] blobs each; how many.
pub(crate) async fn save_all(repo: &crate::Repo, packs: Vec<(Id, Vec<Entry>)>) -> Result<usize> {
    let (mut written, mut batch, mut count) = (0, Vec::new(), 0);
    let mut packs = packs.into_iter().peekable();
    while let Some(p) = packs.next() {
        count += p.1.len();
        batch.push(p);
        if count >= BLOBS_PER_FILE || packs.peek().is_none() {
            repo.save_file(crate::crypto::Kind::Index, &encode(&batch))
                .await?;
            written += 1;
            batch.clear();
            count = 0;
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u8, offset: u32, len: u32) -> Entry {
        Entry {
            kind: BlobKind::Data,
            id: Id([id; 32]),
            offset,
            len,
            plain_len: len,
        }
    }

    #[test]
    fn a_pack_keeps_its_listing_when_its_blobs_are_also_elsewhere() {
        // A prune cut short: blob 1 in the old pack and in the one it was copied to.
        let (old, new) = (Id([10; 32]), Id([20; 32]));
        let mut idx = Index::default();
        idx.add_pack(old, &[entry(1, 0, 100), entry(2, 100, 50)]);
        idx.add_pack(new, &[entry(1, 0, 100)]);
        idx.finish();
        assert_eq!(idx.len(), 2, "blob 1 has one location");
        let listed: Vec<_> = idx.listed().collect();
        assert_eq!(listed, vec![(old, 2, 150), (new, 1, 100)]);
    }

    /// Of a blob's two places, the one kept does not depend on the order index files were
    /// read in; given the store's packs, it is one the store holds whole (not a pack that is
    /// gone, nor an offset past a real pack's end).
    #[test]
    fn a_blob_stored_twice_keeps_a_place_the_store_holds() {
        let (gone, real, short) = (Id([1; 32]), Id([2; 32]), Id([3; 32]));
        let build = |order: &[Id]| {
            let mut idx = Index::default();
            for p in order {
                let off = if *p == short { 900 } else { 0 };
                idx.add_pack(*p, &[entry(7, off, 100)]);
            }
            idx
        };
        let mut a = build(&[gone, real, short]);
        let mut b = build(&[short, real, gone]);
        assert!(a.conflicts() && b.conflicts());
        a.finish();
        b.finish();
        let at = |idx: &Index| idx.pack(idx.get(&Id([7; 32])).unwrap().pack);
        assert_eq!(at(&a), at(&b), "depends on the order");
        assert_eq!(
            at(&a),
            gone,
            "the smallest pack id, when nothing else is known"
        );
        let stored = HashMap::from([(real, 150), (short, 950)]);
        for order in [
            [gone, real, short],
            [short, real, gone],
            [real, gone, short],
        ] {
            let mut idx = build(&order);
            idx.finish_stored(&stored);
            assert_eq!(at(&idx), real, "{order:?}");
        }
        let mut one = Index::default();
        one.add_pack(real, &[entry(7, 0, 100)]);
        one.add_pack(real, &[entry(7, 0, 100)]);
        assert!(!one.conflicts(), "the same place twice is no conflict");
    }
}
