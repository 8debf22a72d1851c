//! 32-byte identifiers: keyed BLAKE3 of a blob's plaintext, or BLAKE3 of a stored file.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A blob's or a stored file's identifier.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Id(pub [u8; 32]);

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
        let s = String::deserialize(d)?;
        Id::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("bad id '{s}'")))
    }
}
