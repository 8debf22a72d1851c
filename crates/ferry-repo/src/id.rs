//! 32-byte identifiers: keyed BLAKE3 of a blob's plaintext, or BLAKE3 of a stored file.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A blob's or a stored file's identifier.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Id(pub [u8; 32]);

impl Id {
    /// The bytes as four big-endian words: ordered like the bytes, compared without memcmp.
    fn words(&self) -> [u64; 4] {
        std::array::from_fn(|i| {
            u64::from_be_bytes(self.0[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
        })
    }
}

// The index sorts and bisects millions of ids: word compares beat a memcmp call each.
impl Ord for Id {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.words().cmp(&other.words())
    }
}

impl PartialOrd for Id {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Id {
    /// BLAKE3 of `data`: the name of a stored file, checked when it is read back.
    pub fn of(data: &[u8]) -> Self {
        Id(*blake3::hash(data).as_bytes())
    }

    /// Full hex form.
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The first 8 hex digits, as snapshots are shown.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..4])
    }

    /// Parses the full hex form.
    pub fn parse(s: &str) -> Option<Self> {
        let mut b = [0u8; 32];
        hex::decode_to_slice(s, &mut b).ok()?;
        Some(Id(b))
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.short())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.hex())
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A visitor, not a String: trees hold an id per chunk, and each would allocate.
        struct Hex;
        impl serde::de::Visitor<'_> for Hex {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a 64-digit hex id")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Id, E> {
                Id::parse(s).ok_or_else(|| E::custom(format!("bad id '{s}'")))
            }
        }
        d.deserialize_str(Hex)
    }
}

#[cfg(test)]
mod tests {
    use super::Id;

    #[test]
    fn orders_like_its_bytes() {
        let ids: Vec<Id> = (0..200u32).map(|i| Id::of(&i.to_le_bytes())).collect();
        for a in &ids {
            for b in &ids {
                assert_eq!(a.cmp(b), a.0.cmp(&b.0), "{a} vs {b}");
            }
        }
    }
}
