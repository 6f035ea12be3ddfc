//! [`AnyIndex`]: a vector index file of unknown kind, opened as the kind it
//! says it is.

use crate::error::{Error, Result};
use crate::flat::FlatIndex;
use crate::index::Index;
use crate::io::{IndexKind, peek_kind, read_file};
use crate::ivfpq::IvfPqIndex;
use std::path::Path;

/// An index of either kind, as loaded from a file.
// One value per loaded file: the variants' size difference costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum AnyIndex {
    /// Exact index.
    Flat(FlatIndex),
    /// IVF-PQ index, 8-bit or 4-bit fast-scan codes (file kinds `ivfpq` and `fastscan`).
    IvfPq(IvfPqIndex),
}

impl AnyIndex {
    /// Loads whichever kind of index `path` holds.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = read_file(path)?;
        Self::from_bytes(&bytes)
    }

    /// Parses a file image of either kind.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        match peek_kind(bytes)? {
            IndexKind::Flat => Ok(AnyIndex::Flat(FlatIndex::from_bytes(bytes)?)),
            IndexKind::IvfPq | IndexKind::FastScan => Ok(AnyIndex::IvfPq(IvfPqIndex::from_bytes(bytes)?)),
            IndexKind::Lexical => Err(Error::WrongKind {
                found: "lexical".into(),
                expected: "a vector index".into(),
            }),
        }
    }

    /// The file image [`AnyIndex::load`] reads back.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            AnyIndex::Flat(i) => i.to_bytes(),
            AnyIndex::IvfPq(i) => i.to_bytes(),
        }
    }

    /// The index as a trait object.
    pub fn as_index(&self) -> &dyn Index {
        match self {
            AnyIndex::Flat(i) => i,
            AnyIndex::IvfPq(i) => i,
        }
    }

    /// The index as a mutable trait object.
    pub fn as_index_mut(&mut self) -> &mut dyn Index {
        match self {
            AnyIndex::Flat(i) => i,
            AnyIndex::IvfPq(i) => i,
        }
    }
}
