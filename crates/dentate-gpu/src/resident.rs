//! Data kept on the device between calls: base vectors, re-rank stores, ids
//! and inverted lists, keyed on the `uid`/`epoch` identity the core gives
//! them. Appends upload only the new rows; anything else (a new epoch, a
//! shrink) uploads afresh. Data larger than one storage binding lives in
//! chunks of whole 64-row blocks, one buffer each.

use crate::device::Gpu;
use crate::error::{GpuError, Result};
use dentate_core::Floats;
use dentate_core::fastscan::{BLOCK, block_bytes};
use dentate_core::simd::PANEL;
use dentate_core::{BaseRef, Bitset, InvertedRef, PointsRef, RerankStore, StoreFormat, StoreRef};

/// Rows of `row_bytes` bytes in chunks of at most `chunk_rows` rows; each
/// chunk is one storage buffer that grows by doubling (copied on the
/// device, never re-sent from the host).
pub(crate) struct RowBuffers {
    row_bytes: u64,
    chunk_rows: usize,
    chunks: Vec<(wgpu::Buffer, usize)>,
}

impl RowBuffers {
    /// Chunks of at most `chunk_rows` rows (a multiple of 64).
    pub fn new(row_bytes: u64, chunk_rows: usize) -> Self {
        RowBuffers {
            row_bytes,
            chunk_rows,
            chunks: Vec::new(),
        }
    }

    /// The most rows of `row_bytes` bytes one binding of `gpu` holds, in
    /// whole 64-row blocks.
    pub fn rows_per_binding(gpu: &Gpu, row_bytes: u64) -> Result<usize> {
        let rows = (gpu.max_binding() / row_bytes.max(1)) as usize / 64 * 64;
        if rows == 0 {
            return Err(GpuError::Unsupported(format!(
                "a row of {row_bytes} bytes exceeds 64 rows per storage binding"
            )));
        }
        Ok(rows)
    }

    pub fn chunk_rows(&self) -> usize {
        self.chunk_rows
    }

    /// Rows the chunks can hold now.
    fn capacity(&self) -> usize {
        self.chunks
            .last()
            .map_or(0, |last| (self.chunks.len() - 1) * self.chunk_rows + last.1)
    }

    /// Makes room for `rows` rows in total.
    fn reserve(&mut self, gpu: &Gpu, rows: usize) {
        let mut enc: Option<wgpu::CommandEncoder> = None;
        loop {
            let have = self.capacity();
            if have >= rows {
                break;
            }
            let chunk_rows = self.chunk_rows;
            match self.chunks.last_mut() {
                Some(last) if last.1 < chunk_rows => {
                    let need = rows - (have - last.1);
                    let cap = need.max(2 * last.1).next_multiple_of(64).min(chunk_rows);
                    let buf = gpu.zeroed("rows", cap as u64 * self.row_bytes);
                    let e = enc.get_or_insert_with(|| gpu.encoder());
                    e.copy_buffer_to_buffer(&last.0, 0, &buf, 0, last.1 as u64 * self.row_bytes);
                    *last = (buf, cap);
                }
                _ => {
                    let cap = (rows - have).next_multiple_of(64).clamp(64, chunk_rows);
                    self.chunks.push((gpu.zeroed("rows", cap as u64 * self.row_bytes), cap));
                }
            }
        }
        if let Some(e) = enc {
            gpu.submit(e);
        }
    }

    /// Writes `bytes` (whole rows) starting at row `row0`, growing as needed.
    pub fn write(&mut self, gpu: &Gpu, row0: usize, bytes: &[u8]) -> Result<()> {
        let rows = bytes.len() / self.row_bytes as usize;
        self.reserve(gpu, row0 + rows);
        let mut r = row0;
        let mut off = 0usize;
        while r < row0 + rows {
            let c = r / self.chunk_rows;
            let local = r % self.chunk_rows;
            let take = (self.chunk_rows - local).min(row0 + rows - r);
            let len = take * self.row_bytes as usize;
            gpu.upload(&self.chunks[c].0, local as u64 * self.row_bytes, &bytes[off..off + len])?;
            r += take;
            off += len;
        }
        Ok(())
    }

    /// Buffer of chunk `c`.
    pub fn chunk(&self, c: usize) -> &wgpu::Buffer {
        &self.chunks[c].0
    }

    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }
}

/// The bytes of panels `p0..p1` (f32 or f16 components).
fn panel_bytes(data: &Floats, dim: usize, p0: usize, p1: usize) -> &[u8] {
    let (a, b) = (p0 * PANEL * dim, p1 * PANEL * dim);
    match data {
        Floats::F32(v) => bytemuck::cast_slice(&v[a..b]),
        Floats::F16(v) => bytemuck::cast_slice(&v[a..b]),
    }
}

/// Base vectors (panel layout) and their ids on the device.
pub(crate) struct ResidentBase {
    key: (u64, u64, usize, bool, bool),
    rows: usize,
    pub vecs: RowBuffers,
    pub ids: Option<RowBuffers>,
}

impl ResidentBase {
    fn key(base: &BaseRef<'_>) -> (u64, u64, usize, bool, bool) {
        let f16 = matches!(base.panels.data(), Floats::F16(_));
        (base.uid, base.epoch, base.panels.dim(), f16, base.ids.is_some())
    }

    /// Uploads `base` from scratch.
    pub fn new(gpu: &Gpu, base: &BaseRef<'_>) -> Result<Self> {
        let key = Self::key(base);
        let elem = if key.3 { 2 } else { 4 };
        let row_bytes = (base.panels.dim() * elem) as u64;
        let chunk_rows = RowBuffers::rows_per_binding(gpu, row_bytes)?.min(RowBuffers::rows_per_binding(gpu, 8)?);
        let mut r = ResidentBase {
            key,
            rows: 0,
            vecs: RowBuffers::new(row_bytes, chunk_rows),
            ids: base.ids.map(|_| RowBuffers::new(8, chunk_rows)),
        };
        r.append(gpu, base)?;
        Ok(r)
    }

    /// Brings the device copy up to date; false when it cannot be extended
    /// (another storage, epoch or shape; fewer rows).
    pub fn sync(&mut self, gpu: &Gpu, base: &BaseRef<'_>) -> Result<bool> {
        if Self::key(base) != self.key || base.panels.len() < self.rows {
            return Ok(false);
        }
        self.append(gpu, base)?;
        Ok(true)
    }

    fn append(&mut self, gpu: &Gpu, base: &BaseRef<'_>) -> Result<()> {
        let n = base.panels.len();
        if n == self.rows {
            return Ok(());
        }
        // From the start of the last partial panel, which the new rows fill.
        let p0 = self.rows / PANEL;
        let p1 = n.div_ceil(PANEL);
        let bytes = panel_bytes(base.panels.data(), base.panels.dim(), p0, p1);
        self.vecs.write(gpu, p0 * PANEL, bytes)?;
        if let (Some(buf), Some(ids)) = (&mut self.ids, base.ids) {
            buf.write(gpu, self.rows, bytemuck::cast_slice(&ids[self.rows..n]))?;
        }
        self.rows = n;
        Ok(())
    }
}

/// A row-major store of vectors for re-ranking (rows padded to whole u32
/// words): f32 (a word a component), f16 (two) or 8-bit codes (four).
pub(crate) struct ResidentStore {
    key: (u64, u64, usize, StoreFormat),
    rows: usize,
    pub vecs: RowBuffers,
    /// u32 words per row.
    pub words: usize,
    pub format: StoreFormat,
}

impl ResidentStore {
    fn key(store: &StoreRef<'_>) -> (u64, u64, usize, StoreFormat) {
        (store.uid, store.epoch, store.store.dim(), store.store.format())
    }

    pub fn new(gpu: &Gpu, store: &StoreRef<'_>) -> Result<Self> {
        let key = Self::key(store);
        let d = store.store.dim();
        let words = match key.3 {
            StoreFormat::F32 => d,
            StoreFormat::F16 => d.div_ceil(2),
            StoreFormat::Sq8 => d.div_ceil(4),
        };
        let chunk_rows = RowBuffers::rows_per_binding(gpu, words as u64 * 4)?;
        let mut s = ResidentStore {
            key,
            rows: 0,
            vecs: RowBuffers::new(words as u64 * 4, chunk_rows),
            words,
            format: key.3,
        };
        s.append(gpu, store)?;
        Ok(s)
    }

    pub fn sync(&mut self, gpu: &Gpu, store: &StoreRef<'_>) -> Result<bool> {
        if Self::key(store) != self.key || store.store.len() < self.rows {
            return Ok(false);
        }
        self.append(gpu, store)?;
        Ok(true)
    }

    fn append(&mut self, gpu: &Gpu, store: &StoreRef<'_>) -> Result<()> {
        let n = store.store.len();
        if n == self.rows {
            return Ok(());
        }
        let d = store.store.dim();
        let (a, b) = (self.rows * d, n * d);
        match store.store {
            RerankStore::Floats(rows) => match rows.data() {
                Floats::F32(v) => self.vecs.write(gpu, self.rows, bytemuck::cast_slice(&v[a..b]))?,
                Floats::F16(v) if d.is_multiple_of(2) => {
                    self.vecs.write(gpu, self.rows, bytemuck::cast_slice(&v[a..b]))?
                }
                Floats::F16(v) => {
                    // Odd dimension: pad every row to a whole word.
                    let mut padded = Vec::with_capacity((n - self.rows) * (d + 1));
                    for row in v[a..b].chunks_exact(d) {
                        padded.extend_from_slice(row);
                        padded.push(half::f16::ZERO);
                    }
                    self.vecs.write(gpu, self.rows, bytemuck::cast_slice(&padded))?;
                }
            },
            RerankStore::Sq8(s) => {
                // Four codes a word, every row padded to whole words.
                let w = 4 * self.words;
                let mut padded = vec![0u8; (n - self.rows) * w];
                for (dst, row) in padded.chunks_exact_mut(w).zip(s.codes()[a..b].chunks_exact(d)) {
                    dst[..d].copy_from_slice(row);
                }
                self.vecs.write(gpu, self.rows, &padded)?;
            }
        }
        self.rows = n;
        Ok(())
    }
}

/// Ids (u64 as lo/hi words) of every row, in one binding.
pub(crate) struct ResidentIds {
    key: (u64, u64),
    rows: usize,
    pub buf: RowBuffers,
}

impl ResidentIds {
    pub fn new(gpu: &Gpu, uid: u64, epoch: u64, ids: &[u64]) -> Result<Self> {
        let chunk_rows = RowBuffers::rows_per_binding(gpu, 8)?;
        if ids.len() > chunk_rows {
            return Err(GpuError::Unsupported(format!(
                "{} rows of ids exceed one storage binding ({chunk_rows})",
                ids.len()
            )));
        }
        let mut r = ResidentIds {
            key: (uid, epoch),
            rows: 0,
            buf: RowBuffers::new(8, chunk_rows),
        };
        r.sync(gpu, uid, epoch, ids)?;
        Ok(r)
    }

    /// Appends new ids; false when the copy belongs to another storage.
    pub fn sync(&mut self, gpu: &Gpu, uid: u64, epoch: u64, ids: &[u64]) -> Result<bool> {
        if (uid, epoch) != self.key || ids.len() < self.rows {
            return Ok(false);
        }
        if ids.len() > self.buf.chunk_rows() {
            return Err(GpuError::Unsupported(format!(
                "{} rows of ids exceed one storage binding",
                ids.len()
            )));
        }
        if ids.len() > self.rows {
            self.buf
                .write(gpu, self.rows, bytemuck::cast_slice(&ids[self.rows..]))?;
            self.rows = ids.len();
        }
        Ok(true)
    }

    pub fn buffer(&self) -> Option<&wgpu::Buffer> {
        (self.buf.chunks() > 0).then(|| self.buf.chunk(0))
    }
}

/// How an arena stores the codes of its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// 8-bit codes, one entry per `⌈m/4⌉` u32 words (bytes past `m` zero).
    Rows,
    /// 4-bit fast-scan blocks of 32 entries, byte for byte as the core packs
    /// them (`dentate_core::fastscan`); spans start and grow by whole blocks.
    Packed,
}

/// The inverted lists in one arena: list `l` owns slots `off..off+cap`, of
/// which `len` are used; appends fill the tail, a list that outgrows its
/// slots moves to the end of the arena (rewritten from the host copy), and
/// the arena is laid out afresh when it is full.
pub(crate) struct ResidentLists {
    key: (u64, u64, usize, Layout),
    /// (offset, len, capacity) in slots; with [`Layout::Packed`] offsets
    /// and capacities are multiples of 32.
    pub spans: Vec<(usize, usize, usize)>,
    used: usize,
    capacity: usize,
    layout: Layout,
    /// Code bytes per slot: `4·⌈m/4⌉` (rows) or `block_bytes(m) / 32` (packed).
    slot_bytes: usize,
    pub codes: wgpu::Buffer,
    pub rows: wgpu::Buffer,
}

/// Slots rounded up to what a span of `layout` holds.
fn span_slots(layout: Layout, n: usize) -> usize {
    match layout {
        Layout::Rows => n,
        Layout::Packed => n.div_ceil(BLOCK) * BLOCK,
    }
}

impl ResidentLists {
    pub fn new(gpu: &Gpu, lists: &InvertedRef<'_>, layout: Layout) -> Result<Self> {
        let slot_bytes = match layout {
            Layout::Rows => lists.m.div_ceil(4) * 4,
            Layout::Packed => block_bytes(lists.m) / BLOCK,
        };
        let lens: Vec<usize> = lists.lists.iter().map(|l| l.rows.len()).collect();
        let caps: Vec<usize> = lens.iter().map(|&n| span_slots(layout, (n + n / 2).max(4))).collect();
        let total: usize = caps.iter().sum();
        let capacity = span_slots(layout, total + total / 4 + 64);
        let max_slots = (gpu.max_binding() / slot_bytes.max(4) as u64).min(gpu.max_binding() / 4) as usize;
        if capacity > max_slots {
            return Err(GpuError::Unsupported(format!(
                "inverted lists of {total} entries exceed one storage binding ({max_slots} slots)"
            )));
        }
        let mut spans = Vec::with_capacity(caps.len());
        let mut off = 0;
        for &cap in &caps {
            spans.push((off, 0, cap));
            off += cap;
        }
        let mut r = ResidentLists {
            key: (lists.uid, lists.epoch, lists.m, layout),
            spans,
            used: off,
            capacity,
            layout,
            slot_bytes,
            codes: gpu.zeroed("codes", (capacity * slot_bytes).max(16) as u64),
            rows: gpu.zeroed("slot rows", (capacity * 4).max(16) as u64),
        };
        for (l, list) in lists.lists.iter().enumerate() {
            r.write_tail(gpu, l, list, lists.m);
        }
        Ok(r)
    }

    /// Brings the arena up to date; false when it must be laid out afresh.
    pub fn sync(&mut self, gpu: &Gpu, lists: &InvertedRef<'_>, layout: Layout) -> bool {
        if (lists.uid, lists.epoch, lists.m, layout) != self.key || lists.lists.len() != self.spans.len() {
            return false;
        }
        if lists.lists.iter().zip(&self.spans).any(|(l, s)| l.rows.len() < s.1) {
            return false;
        }
        for (l, list) in lists.lists.iter().enumerate() {
            let (_, len, cap) = self.spans[l];
            let n = list.rows.len();
            if n == len {
                continue;
            }
            if n > cap {
                // Outgrown: the whole list moves to fresh slots at the end
                // of the arena (written from the host copy).
                let new_cap = span_slots(self.layout, (2 * n).max(16));
                if self.used + new_cap > self.capacity {
                    return false;
                }
                self.spans[l] = (self.used, 0, new_cap);
                self.used += new_cap;
            }
            self.write_tail(gpu, l, list, lists.m);
        }
        true
    }

    fn write_tail(&mut self, gpu: &Gpu, l: usize, list: &dentate_core::InvList, m: usize) {
        let (off, len, cap) = self.spans[l];
        let n = list.rows.len();
        if n <= len {
            return;
        }
        match self.layout {
            Layout::Rows => {
                let w = self.slot_bytes;
                let codes = &list.codes[len * m..n * m];
                let bytes: std::borrow::Cow<'_, [u8]> = if m == w {
                    codes.into()
                } else {
                    let mut padded = vec![0u8; (n - len) * w];
                    for (dst, src) in padded.chunks_exact_mut(w).zip(codes.chunks_exact(m)) {
                        dst[..m].copy_from_slice(src);
                    }
                    padded.into()
                };
                gpu.write(&self.codes, ((off + len) * w) as u64, &bytes);
            }
            Layout::Packed => {
                // From the block holding entry `len` (appends fill it in
                // place) to the list's last block.
                let bb = block_bytes(m);
                let (b0, b1) = (len / BLOCK, n.div_ceil(BLOCK));
                if let Some(bytes) = list.codes.get(b0 * bb..b1 * bb) {
                    gpu.write(&self.codes, ((off / BLOCK + b0) * bb) as u64, bytes);
                }
            }
        }
        gpu.write(
            &self.rows,
            ((off + len) * 4) as u64,
            bytemuck::cast_slice(&list.rows[len..n]),
        );
        self.spans[l] = (off, n, cap);
    }
}

/// A small least-recently-used cache of device copies, keyed by storage
/// uid. Uid 0 (data without an identity) is never kept: it is made afresh
/// on every call.
pub(crate) struct Lru<T> {
    cap: usize,
    clock: u64,
    items: Vec<(u64, u64, T)>,
    transient: Option<T>,
}

impl<T> Lru<T> {
    pub fn new(cap: usize) -> Self {
        Lru {
            cap,
            clock: 0,
            items: Vec::new(),
            transient: None,
        }
    }

    /// The entry of `uid`, brought up to date by `sync` (which returns false
    /// when the copy cannot be extended) or made afresh by `make`, evicting
    /// the least recently used entry when full.
    pub fn get(
        &mut self,
        uid: u64,
        sync: impl FnOnce(&mut T) -> Result<bool>,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<&mut T> {
        if uid == 0 {
            return Ok(self.transient.insert(make()?));
        }
        self.clock += 1;
        let now = self.clock;
        let i = match self.items.iter().position(|(u, _, _)| *u == uid) {
            Some(i) => {
                if !sync(&mut self.items[i].2)? {
                    self.items[i].2 = make()?;
                }
                i
            }
            None => {
                let item = make()?;
                if self.items.len() >= self.cap
                    && let Some(old) = (0..self.items.len()).min_by_key(|&j| self.items[j].1)
                {
                    self.items.swap_remove(old);
                }
                self.items.push((uid, now, item));
                self.items.len() - 1
            }
        };
        self.items[i].1 = now;
        Ok(&mut self.items[i].2)
    }
}

/// Device copies of one state of an alive bitset (keyed on its
/// [`Bitset::generation`], which no other state shares, so a copy is never
/// stale): one buffer per range of words a kernel binds, uploaded on first
/// use. A search after deletes uploads the bitset again; one without
/// changes uploads nothing.
#[derive(Default)]
pub(crate) struct AliveCopies {
    ranges: Vec<(usize, usize, wgpu::Buffer)>,
}

/// Words `lo..hi` of `bits` on the device, from `cache` when this state of
/// the bits was uploaded before.
pub(crate) fn alive_words(
    cache: &mut Lru<AliveCopies>,
    gpu: &Gpu,
    bits: &Bitset,
    (lo, hi): (usize, usize),
) -> Result<wgpu::Buffer> {
    let copies = cache.get(bits.generation(), |_| Ok(true), || Ok(AliveCopies::default()))?;
    if let Some((_, _, buf)) = copies.ranges.iter().find(|(l, h, _)| (*l, *h) == (lo, hi)) {
        return Ok(buf.clone());
    }
    let buf = gpu.storage("alive", bytemuck::cast_slice(&bits.words()[lo..hi]));
    copies.ranges.push((lo, hi, buf.clone()));
    Ok(buf)
}

/// The points of one k-means training on the device (`PointsRef`): rows
/// padded to whole vec4s, in chunks of whole rows within one binding each,
/// uploaded once and kept while steps pass the same uid and shape.
pub(crate) struct ResidentPoints {
    key: (u64, usize, usize),
    /// vec4s per row.
    pub dp4: usize,
    /// Rows per chunk (the last may hold fewer).
    pub chunk_rows: usize,
    /// Each chunk's buffer and row count.
    pub chunks: Vec<(wgpu::Buffer, usize)>,
}

impl ResidentPoints {
    pub fn new(gpu: &Gpu, points: &PointsRef<'_>) -> Result<Self> {
        let (n, d) = (points.len(), points.dim);
        let dp4 = d.div_ceil(4);
        let row_bytes = dp4 as u64 * 16;
        let chunk_rows = (gpu.max_binding() / row_bytes) as usize;
        if chunk_rows == 0 {
            return Err(GpuError::Unsupported(format!(
                "a point of {d} dimensions exceeds one storage binding"
            )));
        }
        let mut chunks = Vec::with_capacity(n.div_ceil(chunk_rows));
        let mut r0 = 0;
        while r0 < n {
            let rows = (n - r0).min(chunk_rows);
            let src = &points.rows[r0 * d..(r0 + rows) * d];
            let buf = gpu.zeroed("points", rows as u64 * row_bytes);
            if dp4 * 4 == d {
                gpu.upload(&buf, 0, bytemuck::cast_slice(src))?;
            } else {
                let mut padded = vec![0f32; rows * dp4 * 4];
                for (dst, row) in padded.chunks_exact_mut(dp4 * 4).zip(src.chunks_exact(d)) {
                    dst[..d].copy_from_slice(row);
                }
                gpu.upload(&buf, 0, bytemuck::cast_slice(&padded))?;
            }
            chunks.push((buf, rows));
            r0 += rows;
        }
        Ok(ResidentPoints {
            key: (points.uid, n, d),
            dp4,
            chunk_rows,
            chunks,
        })
    }

    /// The copy holds these points (same uid and shape; a uid promises
    /// its rows do not change).
    pub fn holds(&self, points: &PointsRef<'_>) -> bool {
        self.key == (points.uid, points.len(), points.dim)
    }
}
