//! The exact index: every live vector scored against every query by the
//! blocked tile kernel.

use crate::backend::default_compute;
use crate::compute::Compute;
use crate::error::{Error, Result};
use crate::index::{Index, check_search, clamp_k};
use crate::io::{IndexKind, Reader, Writer, open, read_file, write_atomic};
use crate::layout::{Floats, Panels};
use crate::rows::RowTable;
use crate::topk::Hit;
use crate::vector::{Precision, check_add};
use crate::views::BaseRef;
use std::path::Path;
use std::sync::Arc;

/// Exact cosine search over f32 or f16 vectors.
///
/// ```
/// use dentate_core::{FlatIndex, Index};
/// let mut index = FlatIndex::new(3);
/// index.add(&[7, 8], &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0])?;
/// let hits = index.search(&[0.9, 0.1, 0.0], 1)?;
/// assert_eq!(hits[0][0].id, 7);
/// # Ok::<(), dentate_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct FlatIndex {
    dim: usize,
    vectors: Panels,
    rows: RowTable,
    compute: Arc<dyn Compute>,
}

impl FlatIndex {
    /// An empty f32 index of dimension `dim` on the default backend.
    ///
    /// # Panics
    /// Never; a zero dimension is rejected at the first `add` or `search`.
    pub fn new(dim: usize) -> Self {
        Self::with_precision(dim, Precision::F32)
    }

    /// An empty index storing vectors in `precision`.
    pub fn with_precision(dim: usize, precision: Precision) -> Self {
        FlatIndex {
            dim,
            vectors: Panels::new(dim, precision),
            rows: RowTable::default(),
            compute: default_compute(),
        }
    }

    /// Replaces the compute backend.
    pub fn set_compute(&mut self, compute: Arc<dyn Compute>) {
        self.compute = compute;
    }

    /// Storage precision.
    pub fn precision(&self) -> Precision {
        self.vectors.precision()
    }

    /// The stored (normalised) vector of a live id.
    pub fn get(&self, id: u64) -> Option<Vec<f32>> {
        self.rows.row_of(id).map(|r| self.vectors.row(r as usize))
    }

    /// The base as the compute interface sees it.
    pub fn base(&self) -> BaseRef<'_> {
        BaseRef {
            panels: &self.vectors,
            ids: Some(&self.rows.ids),
            alive: Some(&self.rows.alive),
            bias: None,
            uid: self.rows.uid,
            epoch: self.rows.epoch,
        }
    }

    /// Serialises to a file image.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u32(self.dim as u32);
        w.u8(self.vectors.precision().code());
        w.u64(self.vectors.len() as u64);
        match self.vectors.data() {
            Floats::F32(v) => w.f32s(v),
            Floats::F16(v) => w.f16s(v),
        }
        self.rows.write(&mut w);
        w.finish(IndexKind::Flat)
    }

    /// Parses a file image.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let (kind, mut r) = open(bytes)?;
        if kind != IndexKind::Flat {
            return Err(Error::WrongKind {
                found: kind.name().into(),
                expected: "flat".into(),
            });
        }
        let idx = Self::read(&mut r)?;
        r.finish()?;
        Ok(idx)
    }

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let dim = r.u32()? as usize;
        if dim == 0 {
            return Err(Error::Corrupt("dimension 0".into()));
        }
        let precision = Precision::from_code(r.u8()?)?;
        let len = usize::try_from(r.u64()?).map_err(|_| Error::Corrupt("row count overflows".into()))?;
        let data = match precision {
            Precision::F32 => Floats::F32(r.f32s()?),
            Precision::F16 => Floats::F16(r.f16s()?),
        };
        let vectors = Panels::from_raw(dim, len, data)
            .ok_or_else(|| Error::Corrupt("vector buffer does not match dimension × rows".into()))?;
        let rows = RowTable::read(r)?;
        if rows.total() != len {
            return Err(Error::Corrupt(format!("{} ids for {len} vectors", rows.total())));
        }
        Ok(FlatIndex {
            dim,
            vectors,
            rows,
            compute: default_compute(),
        })
    }

    /// Loads an index saved with [`Index::save`].
    pub fn load(path: &Path) -> Result<Self> {
        Self::from_bytes(&read_file(path)?)
    }

    /// Rows held, tombstoned ones included (what `compact` would shrink).
    pub fn total_rows(&self) -> usize {
        self.rows.total()
    }
}

impl Index for FlatIndex {
    crate::rows::row_table_ops!();
    fn dim(&self) -> usize {
        self.dim
    }
    fn add(&mut self, ids: &[u64], vectors: &[f32]) -> Result<()> {
        if self.dim == 0 {
            return Err(Error::param("dim", "must be at least 1"));
        }
        let v = check_add(ids, vectors, self.dim)?;
        self.rows.reserve(ids.len())?;
        for &id in ids {
            self.rows.push(id);
        }
        self.vectors.extend(&v);
        Ok(())
    }
    fn search(&self, queries: &[f32], k: usize) -> Result<Vec<Vec<Hit>>> {
        if self.dim == 0 {
            return Err(Error::param("dim", "must be at least 1"));
        }
        let q = check_search(self.len(), queries, self.dim, k)?;
        let res = self.compute.top_k(&q, self.base(), clamp_k(k, self.len()));
        Ok(res.into_iter().map(|v| v.iter().map(|c| c.hit()).collect()).collect())
    }
    fn compact(&mut self) {
        if self.rows.live() == self.rows.total() {
            return;
        }
        let alive = self.rows.alive.clone();
        self.vectors.retain_rows(|r| alive.get(r));
        self.rows.compact();
    }
    fn save(&self, path: &Path) -> Result<()> {
        write_atomic(path, &self.to_bytes())
    }
    fn memory_bytes(&self) -> usize {
        self.vectors.bytes() + self.rows.bytes()
    }
    fn kind(&self) -> IndexKind {
        IndexKind::Flat
    }
}
