//! The BERT encoder behind [`crate::MiniLm`], written for this crate: the
//! weights are read straight from `model.safetensors`, the four products of
//! a layer go through the `gemm` crate's SIMD micro-kernels, and everything
//! between them (bias, GELU, residual, LayerNorm, softmax) is one pass of
//! vectorised code per row.
//!
//! A batch holds no padding: the tokens of all its sequences are one
//! `tokens × hidden` matrix. The dense layers do not care where one sequence
//! ends, and attention runs per (sequence, head) on that sequence's rows
//! only, so a 10-token sentence in a batch costs what it costs alone.
//!
//! The element-wise kernels are generic code, compiled three times (AVX-512,
//! AVX2 + FMA, baseline) and chosen once at run time on x86-64.

use rayon::prelude::*;

/// The encoder's shape, from `config.json`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Width of a token's vector (384 for MiniLM-L6).
    pub hidden: usize,
    heads: usize,
    layers: usize,
    inter: usize,
    /// Longest sequence the position table covers.
    pub max_pos: usize,
    vocab: usize,
    type_vocab: usize,
    eps: f32,
}

fn field(cfg: &serde_json::Value, name: &str) -> Result<usize, String> {
    let v = cfg
        .get(name)
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| format!("config.json: `{name}` is missing or not a whole number"))?;
    // Far above any BERT's (MiniLM: 384 / 12 / 6 / 1,536 / 512 / 30,522), and
    // the tensors' sizes are checked against the file anyway.
    if v == 0 || v > 1 << 22 {
        return Err(format!("config.json: `{name}` = {v} is out of range"));
    }
    Ok(v as usize)
}

impl Shape {
    /// Reads and checks the fields of a BERT `config.json`.
    pub(crate) fn from_config(text: &str) -> Result<Shape, String> {
        let cfg: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("config.json: {e}"))?;
        let act = cfg.get("hidden_act").and_then(|v| v.as_str()).unwrap_or("gelu");
        if act != "gelu" {
            return Err(format!(
                "config.json: hidden_act `{act}` is not supported (only `gelu`)"
            ));
        }
        let eps = cfg.get("layer_norm_eps").and_then(|v| v.as_f64()).unwrap_or(1e-12);
        if !(eps.is_finite() && eps > 0.0 && eps < 1.0) {
            return Err(format!("config.json: layer_norm_eps {eps} is out of range"));
        }
        let s = Shape {
            hidden: field(&cfg, "hidden_size")?,
            heads: field(&cfg, "num_attention_heads")?,
            layers: field(&cfg, "num_hidden_layers")?,
            inter: field(&cfg, "intermediate_size")?,
            max_pos: field(&cfg, "max_position_embeddings")?,
            vocab: field(&cfg, "vocab_size")?,
            type_vocab: cfg
                .get("type_vocab_size")
                .map_or(Ok(2), |_| field(&cfg, "type_vocab_size"))?,
            eps: eps as f32,
        };
        if !s.hidden.is_multiple_of(s.heads) {
            return Err(format!(
                "config.json: hidden_size {} is not a multiple of num_attention_heads {}",
                s.hidden, s.heads
            ));
        }
        if s.layers > 1024 {
            return Err(format!("config.json: num_hidden_layers {} is out of range", s.layers));
        }
        Ok(s)
    }
}

/// The tensors of a `.safetensors` file (little-endian; F32 only).
struct SafeTensors<'a> {
    data: &'a [u8],
    header: serde_json::Map<String, serde_json::Value>,
}

impl<'a> SafeTensors<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        let len = bytes
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .ok_or("shorter than its 8-byte header length")?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| l.checked_add(8))
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| format!("header length {len} runs past the end of the file"))?;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&bytes[8..end]).map_err(|e| format!("header: {e}"))?;
        Ok(SafeTensors {
            data: &bytes[end..],
            header,
        })
    }

    /// Tensor `name` (or `bert.name`), which must have shape `shape`.
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, String> {
        let prefixed = format!("bert.{name}");
        let (name, meta) = [name, prefixed.as_str()]
            .into_iter()
            .find_map(|n| self.header.get(n).map(|m| (n, m)))
            .ok_or_else(|| format!("tensor `{name}` is missing"))?;
        let dtype = meta.get("dtype").and_then(|d| d.as_str()).unwrap_or("?");
        if dtype != "F32" {
            return Err(format!("tensor `{name}` is {dtype}; only F32 is supported"));
        }
        let found: Option<Vec<usize>> = meta.get("shape").and_then(|s| s.as_array()).and_then(|a| {
            a.iter()
                .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                .collect()
        });
        if found.as_deref() != Some(shape) {
            return Err(format!("tensor `{name}` has shape {found:?}, expected {shape:?}"));
        }
        let offsets: Option<Vec<usize>> = meta.get("data_offsets").and_then(|s| s.as_array()).and_then(|a| {
            a.iter()
                .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                .collect()
        });
        let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let bytes = match (offsets.as_deref(), n) {
            (Some(&[a, b]), Some(n)) if a <= b && b <= self.data.len() && n.checked_mul(4) == Some(b - a) => {
                &self.data[a..b]
            }
            _ => return Err(format!("tensor `{name}`: data offsets {offsets:?} do not fit the file")),
        };
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }
}

/// `y = x Wᵀ + b`. The checkpoint stores `W` as `(out, in)`; it is kept
/// transposed, `(in, out)` row-major, which is `W` column-major: the layout
/// gemm's micro-kernels read in place, so a product with a few rows (one
/// short query) packs nothing.
struct Linear {
    /// `Wᵀ`, `in × out` row-major.
    wt: Vec<f32>,
    /// `Wᵀ` in strips of 32 columns, each `in × 32` contiguous (see
    /// [`few_rows`]); empty when `out` is not a multiple of 32.
    strips: Vec<f32>,
    b: Vec<f32>,
    n_in: usize,
    n_out: usize,
}

struct LayerNorm {
    w: Vec<f32>,
    b: Vec<f32>,
}

struct Layer {
    /// Query, key and value stacked: one product for all three.
    qkv: Linear,
    attn_out: Linear,
    ln_attn: LayerNorm,
    up: Linear,
    down: Linear,
    ln_out: LayerNorm,
}

/// A BERT encoder with mean pooling.
pub(crate) struct Bert {
    /// Its shape.
    pub shape: Shape,
    word: Vec<f32>,
    pos: Vec<f32>,
    token_type: Vec<f32>,
    ln_emb: LayerNorm,
    layers: Vec<Layer>,
}

impl Bert {
    /// Loads the encoder from the bytes of a BERT `model.safetensors`.
    pub(crate) fn load(shape: Shape, bytes: &[u8]) -> Result<Bert, String> {
        let st = SafeTensors::parse(bytes)?;
        let h = shape.hidden;
        let ln = |p: &str| -> Result<LayerNorm, String> {
            Ok(LayerNorm {
                w: st.get(&format!("{p}.weight"), &[h])?,
                b: st.get(&format!("{p}.bias"), &[h])?,
            })
        };
        let linear = |p: &str, n_in: usize, n_out: usize| -> Result<Linear, String> {
            let w = st.get(&format!("{p}.weight"), &[n_out, n_in])?;
            Ok(Linear {
                wt: transpose(&w, n_out, n_in),
                strips: Vec::new(),
                b: st.get(&format!("{p}.bias"), &[n_out])?,
                n_in,
                n_out,
            })
        };
        let mut token_type = st.get("embeddings.token_type_embeddings.weight", &[shape.type_vocab, h])?;
        token_type.truncate(h);
        let mut layers = Vec::with_capacity(shape.layers);
        for i in 0..shape.layers {
            let p = format!("encoder.layer.{i}");
            let (q, k, v) = (
                linear(&format!("{p}.attention.self.query"), h, h)?,
                linear(&format!("{p}.attention.self.key"), h, h)?,
                linear(&format!("{p}.attention.self.value"), h, h)?,
            );
            let qkv = Linear {
                strips: Vec::new(),
                wt: (0..h)
                    .flat_map(|i| [&q.wt, &k.wt, &v.wt].map(|m| &m[i * h..(i + 1) * h]))
                    .flatten()
                    .copied()
                    .collect(),
                b: [q.b, k.b, v.b].concat(),
                n_in: h,
                n_out: 3 * h,
            };
            let mut layer = Layer {
                qkv,
                attn_out: linear(&format!("{p}.attention.output.dense"), h, h)?,
                ln_attn: ln(&format!("{p}.attention.output.LayerNorm"))?,
                up: linear(&format!("{p}.intermediate.dense"), h, shape.inter)?,
                down: linear(&format!("{p}.output.dense"), shape.inter, h)?,
                ln_out: ln(&format!("{p}.output.LayerNorm"))?,
            };
            for l in [&mut layer.qkv, &mut layer.attn_out, &mut layer.up, &mut layer.down] {
                l.strips = strips(&l.wt, l.n_in, l.n_out);
            }
            layers.push(layer);
        }
        Ok(Bert {
            shape,
            word: st.get("embeddings.word_embeddings.weight", &[shape.vocab, h])?,
            pos: st.get("embeddings.position_embeddings.weight", &[shape.max_pos, h])?,
            token_type,
            ln_emb: ln("embeddings.LayerNorm")?,
            layers,
        })
    }

    /// Mean-pooled (not normalised) vectors of `seqs` into `out`
    /// (`seqs.len() × hidden`). Every sequence must be non-empty, no longer
    /// than `max_pos`, with ids below the vocabulary size.
    pub(crate) fn pool(&self, seqs: &[&[u32]], out: &mut [f32]) -> Result<(), String> {
        let s = &self.shape;
        let h = s.hidden;
        if out.len() != seqs.len() * h {
            return Err(format!(
                "output holds {} values, expected {}",
                out.len(),
                seqs.len() * h
            ));
        }
        let mut starts = Vec::with_capacity(seqs.len() + 1);
        let mut t = 0usize;
        for (i, q) in seqs.iter().enumerate() {
            if q.is_empty() || q.len() > s.max_pos {
                return Err(format!(
                    "sequence {i} has {} tokens (1 to {} allowed)",
                    q.len(),
                    s.max_pos
                ));
            }
            if let Some(&id) = q.iter().find(|&&id| id as usize >= s.vocab) {
                return Err(format!("sequence {i}: token id {id} is outside the vocabulary"));
            }
            starts.push(t);
            t += q.len();
        }
        starts.push(t);
        let mut x = vec![0f32; t * h];
        let k = kernels();
        // Embeddings: word + position + token type 0, then LayerNorm.
        for (q, &t0) in seqs.iter().zip(&starts) {
            for (p, &id) in q.iter().enumerate() {
                let row = &mut x[(t0 + p) * h..(t0 + p + 1) * h];
                let w = &self.word[id as usize * h..(id as usize + 1) * h];
                let pe = &self.pos[p * h..(p + 1) * h];
                for (((o, a), b), c) in row.iter_mut().zip(w).zip(pe).zip(&self.token_type) {
                    *o = a + b + c;
                }
            }
        }
        rows_par(&mut x, h, |r| {
            (k.layer_norm)(r, None, &self.ln_emb.w, &self.ln_emb.b, s.eps)
        });
        let mut qkv = vec![0f32; t * 3 * h];
        let mut ctx = vec![0f32; t * h];
        let mut up = vec![0f32; t * s.inter];
        let dh = h / s.heads;
        let scale = 1.0 / (dh as f32).sqrt();
        for layer in &self.layers {
            matmul(&x, &layer.qkv, &mut qkv, t, false);
            attention(&qkv, &mut ctx, &starts, s.heads, dh, scale, &layer.qkv.b, k);
            // x ← LayerNorm(x + ctx Woᵀ + bo)
            matmul(&ctx, &layer.attn_out, &mut x, t, true);
            rows_par(&mut x, h, |r| {
                (k.layer_norm)(r, Some(&layer.attn_out.b), &layer.ln_attn.w, &layer.ln_attn.b, s.eps)
            });
            // up ← GELU(x Wiᵀ + bi); x ← LayerNorm(x + up Wdᵀ + bd)
            matmul(&x, &layer.up, &mut up, t, false);
            rows_par(&mut up, s.inter, |r| (k.bias_gelu)(r, &layer.up.b));
            matmul(&up, &layer.down, &mut x, t, true);
            rows_par(&mut x, h, |r| {
                (k.layer_norm)(r, Some(&layer.down.b), &layer.ln_out.w, &layer.ln_out.b, s.eps)
            });
        }
        for (i, o) in out.chunks_exact_mut(h).enumerate() {
            let rows = &x[starts[i] * h..starts[i + 1] * h];
            o.fill(0.0);
            for r in rows.chunks_exact(h) {
                o.iter_mut().zip(r).for_each(|(a, b)| *a += b);
            }
            let n = (starts[i + 1] - starts[i]) as f32;
            o.iter_mut().for_each(|a| *a /= n);
        }
        Ok(())
    }
}

/// `m` (`rows × cols`, row-major) transposed.
fn transpose(m: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0f32; m.len()];
    for (r, row) in m.chunks_exact(cols).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            t[c * rows + r] = v;
        }
    }
    t
}

/// `wt` (`k × n`, row-major) cut into strips of [`STRIP`] columns, each
/// `k × STRIP` contiguous: a strip is one sequential read, where its
/// columns of `wt` would touch a new page every row. Empty when `n` is not
/// a multiple of [`STRIP`].
fn strips(wt: &[f32], k: usize, n: usize) -> Vec<f32> {
    if !n.is_multiple_of(STRIP) {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(wt.len());
    for s in 0..n / STRIP {
        for row in wt.chunks_exact(n) {
            out.extend_from_slice(&row[s * STRIP..(s + 1) * STRIP]);
        }
    }
    debug_assert_eq!(out.len(), k * n);
    out
}

/// Applies `f` to each `width`-wide row of `m`, in parallel when there is
/// enough work to share.
fn rows_par(m: &mut [f32], width: usize, f: impl Fn(&mut [f32]) + Sync) {
    const ROWS_PER_TASK: usize = 16;
    if m.len() <= width * ROWS_PER_TASK {
        m.chunks_exact_mut(width).for_each(f);
    } else {
        m.par_chunks_mut(width * ROWS_PER_TASK)
            .for_each(|c| c.chunks_exact_mut(width).for_each(&f));
    }
}

/// Products with at most this many rows (tokens) go through [`few_rows`];
/// larger ones through gemm, whose packing pays off there.
const FEW_ROWS: usize = 64;

/// `y (t × out) = x (t × in) Wᵀ`, added to `y` when `accumulate`; the bias
/// is left to the caller's next pass.
fn matmul(x: &[f32], l: &Linear, y: &mut [f32], t: usize, accumulate: bool) {
    assert!(x.len() == t * l.n_in && y.len() == t * l.n_out && l.wt.len() == l.n_in * l.n_out);
    if t <= FEW_ROWS && few_rows(x, l, y, t, accumulate) {
        return;
    }
    let threads = rayon::current_num_threads();
    let par = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the three buffers hold exactly the row-major matrices the
    // strides describe (checked above): x is t × in (row stride in), Wᵀ is
    // in × out (row stride out), y is t × out (row stride out); y does not
    // alias x or Wᵀ.
    unsafe {
        gemm::gemm(
            t,
            l.n_out,
            l.n_in,
            y.as_mut_ptr(),
            1,
            l.n_out as isize,
            accumulate,
            x.as_ptr(),
            1,
            l.n_in as isize,
            l.wt.as_ptr(),
            1,
            l.n_out as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// Output columns of one [`few_rows`] tile.
const STRIP: usize = 32;

/// A raw pointer handed to the pool's threads; each writes its own columns.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: used only by `few_rows`, whose tasks write disjoint column strips.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The pointer (a method, so that closures capture the whole wrapper).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// The product of [`matmul`] for a few rows (one short query is ~15): each
/// 32-column strip of `Wᵀ` is read from memory once for all the rows, by
/// register-tiled FMA kernels (AVX-512 or AVX2), the strips shared between
/// the pool's threads. gemm instead re-reads the weights for every 6 rows,
/// which makes a short query memory-bound. Returns false (nothing done)
/// where there is no such kernel: no AVX2, or `out` not a multiple of 32.
fn few_rows(x: &[f32], l: &Linear, y: &mut [f32], t: usize, accumulate: bool) -> bool {
    let Some(strip) = strip_kernel() else {
        return false;
    };
    let (k, n) = (l.n_in, l.n_out);
    if l.strips.len() != k * n {
        return false;
    }
    let strips = n / STRIP;
    let yp = SendPtr(y.as_mut_ptr());
    let run = |s: usize| {
        // SAFETY: strip s is k × 32 values at s·k·32 of `strips` (k × n in
        // all); it fills columns s·32 .. s·32 + 32 ≤ n of every row of y
        // (t × n); x is t × k; `strip_kernel` was chosen after detecting its
        // features. Strips are disjoint, so no two tasks write the same
        // element.
        unsafe {
            strip(
                x.as_ptr(),
                k,
                t,
                l.strips.as_ptr().add(s * k * STRIP),
                yp.get().add(s * STRIP),
                n,
                accumulate,
            )
        }
    };
    if rayon::current_num_threads() > 1 && strips > 1 {
        (0..strips).into_par_iter().with_min_len(2).for_each(run);
    } else {
        (0..strips).for_each(run);
    }
    true
}

/// `y[r][0..32] (+)= Σₖ x[r][k]·w[k][0..32]` for `rows` rows: x has row
/// stride `k` (its length), the strip w is `k × 32` contiguous, y has row
/// stride `ld`.
type StripFn = unsafe fn(*const f32, usize, usize, *const f32, *mut f32, usize, bool);

fn strip_kernel() -> Option<StripFn> {
    match level() {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => Some(x86::strip512),
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => Some(x86::strip256),
        _ => None,
    }
}

/// Self-attention of every sequence: `qkv` holds each token's query, key
/// and value (before their biases, which are added here), `ctx` receives
/// the heads' outputs side by side.
#[allow(clippy::too_many_arguments)]
fn attention(
    qkv: &[f32],
    ctx: &mut [f32],
    starts: &[usize],
    heads: usize,
    dh: usize,
    scale: f32,
    bias: &[f32],
    k: &Kernels,
) {
    let h = heads * dh;
    let n_seq = starts.len() - 1;
    // One task per (sequence, head); each writes its own block of `out`,
    // laid out head-major (head, token, dh), then scattered into `ctx`.
    let t = starts[n_seq];
    let mut out = vec![0f32; t * h];
    let mut tasks: Vec<(usize, usize, &mut [f32])> = Vec::with_capacity(n_seq * heads);
    for (head, block) in out.chunks_exact_mut(t * dh).enumerate() {
        let mut rest = block;
        for s in 0..n_seq {
            let (mine, tail) = rest.split_at_mut((starts[s + 1] - starts[s]) * dh);
            tasks.push((s, head, mine));
            rest = tail;
        }
    }
    let run = |(s, head, o): (usize, usize, &mut [f32])| {
        let (t0, len) = (starts[s], starts[s + 1] - starts[s]);
        // Gather this head's q, k, v (len × dh each), biases added.
        let mut q = vec![0f32; len * dh];
        let mut kk = vec![0f32; len * dh];
        let mut v = vec![0f32; len * dh];
        for i in 0..len {
            let row = &qkv[(t0 + i) * 3 * h..(t0 + i + 1) * 3 * h];
            for (dst, b) in [(&mut q, 0), (&mut kk, h), (&mut v, 2 * h)] {
                let src = &row[b + head * dh..b + (head + 1) * dh];
                let bb = &bias[b + head * dh..b + (head + 1) * dh];
                dst[i * dh..(i + 1) * dh]
                    .iter_mut()
                    .zip(src.iter().zip(bb))
                    .for_each(|(d, (a, c))| *d = a + c);
            }
        }
        let mut p = vec![0f32; len * len];
        // SAFETY: q, kk are len × dh row-major, p is len × len row-major;
        // kk is read as its transpose (dh × len, column stride dh).
        unsafe {
            gemm::gemm(
                len,
                len,
                dh,
                p.as_mut_ptr(),
                1,
                len as isize,
                false,
                q.as_ptr(),
                1,
                dh as isize,
                kk.as_ptr(),
                dh as isize,
                1,
                0.0,
                scale,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        p.chunks_exact_mut(len).for_each(|r| (k.softmax)(r));
        // SAFETY: p is len × len, v is len × dh, o is len × dh, all
        // row-major and distinct.
        unsafe {
            gemm::gemm(
                len,
                dh,
                len,
                o.as_mut_ptr(),
                1,
                dh as isize,
                false,
                p.as_ptr(),
                1,
                len as isize,
                v.as_ptr(),
                1,
                dh as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    };
    if tasks.len() > 1 && t * t > 4096 {
        tasks.into_par_iter().for_each(run);
    } else {
        tasks.into_iter().for_each(run);
    }
    for (head, block) in out.chunks_exact(t * dh).enumerate() {
        for (i, src) in block.chunks_exact(dh).enumerate() {
            ctx[i * h + head * dh..i * h + (head + 1) * dh].copy_from_slice(src);
        }
    }
}

/// `row ← LayerNorm(row + bias)·w + b` with epsilon `eps`.
type LayerNormFn = fn(&mut [f32], Option<&[f32]>, &[f32], &[f32], f32);

/// The element-wise kernels, compiled for the best instruction set found.
struct Kernels {
    layer_norm: LayerNormFn,
    bias_gelu: fn(&mut [f32], &[f32]),
    softmax: fn(&mut [f32]),
}

/// The instruction sets the encoder's own kernels can use here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Baseline,
    Avx2,
    Avx512,
}

/// The best [`Level`] this CPU has, capped by `DENTATE_SIMD` (`scalar`,
/// `avx2`; the engine's switch, so that a race of the AVX2 path covers the
/// embedder's kernels too — gemm's, used for batches of more than
/// [`FEW_ROWS`] tokens, follow the CPU alone).
fn level() -> Level {
    static L: std::sync::OnceLock<Level> = std::sync::OnceLock::new();
    *L.get_or_init(|| {
        #[allow(unused_mut)]
        let mut best = Level::Baseline;
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                best = Level::Avx2;
                if std::arch::is_x86_feature_detected!("avx512f") {
                    best = Level::Avx512;
                }
            }
        }
        let cap = match std::env::var("DENTATE_SIMD").as_deref().map(str::trim) {
            Ok(w) if w.starts_with("scalar") => Level::Baseline,
            Ok(w) if w.starts_with("avx2") => Level::Avx2,
            _ => Level::Avx512,
        };
        best.min(cap)
    })
}

fn kernels() -> &'static Kernels {
    const GENERIC: Kernels = Kernels {
        layer_norm: generic::layer_norm,
        bias_gelu: generic::bias_gelu,
        softmax: generic::softmax,
    };
    match level() {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => &x86::AVX512,
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => &x86::AVX2,
        _ => &GENERIC,
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Kernels, STRIP, generic};
    use std::arch::x86_64::*;

    /// A [`super::StripFn`] and its tile kernel for one register width:
    /// the 32-column strip is cut into parts of two registers each (one
    /// part on AVX-512, two on AVX2), and each part into tiles of R rows:
    /// the largest R in `$r` that the rows left fill, else 1 (2·R
    /// accumulators, 2 weight registers).
    macro_rules! strip_kernel {
        ($feat:literal, $strip:ident, $tile:ident, $lanes:literal, $zero:ident, $load:ident, $store:ident,
         $set1:ident, $fmadd:ident, $add:ident, [$($r:literal),+]) => {
            /// # Safety
            /// The features must be present; x must hold `rows × k` values,
            /// w `k × 32`, y `rows` rows of stride `ld` with 32 valid
            /// columns each.
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn $strip(
                x: *const f32,
                k: usize,
                rows: usize,
                w: *const f32,
                y: *mut f32,
                ld: usize,
                accumulate: bool,
            ) {
                for part in 0..STRIP / (2 * $lanes) {
                    let mut r = 0;
                    while r < rows {
                        // SAFETY: forwarded from the caller, rows
                        // r .. r + m ≤ rows, columns of this part < 32.
                        unsafe {
                            let c = 2 * $lanes * part;
                            let (x, w, y) = (x.add(r * k), w.add(c), y.add(r * ld + c));
                            r += match rows - r {
                                $(n if n >= $r => $tile::<$r>(x, k, w, ld, y, accumulate),)+
                                _ => $tile::<1>(x, k, w, ld, y, accumulate),
                            };
                        }
                    }
                }
            }

            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn $tile<const R: usize>(
                x: *const f32,
                k: usize,
                w: *const f32,
                ld: usize,
                y: *mut f32,
                accumulate: bool,
            ) -> usize {
                let mut acc = [[$zero(); 2]; R];
                // SAFETY: the caller's bounds (see the strip function).
                unsafe {
                    for kk in 0..k {
                        let wr = w.add(kk * STRIP);
                        let (w0, w1) = ($load(wr), $load(wr.add($lanes)));
                        for (i, a) in acc.iter_mut().enumerate() {
                            let xv = $set1(*x.add(i * k + kk));
                            a[0] = $fmadd(xv, w0, a[0]);
                            a[1] = $fmadd(xv, w1, a[1]);
                        }
                    }
                    for (i, a) in acc.iter().enumerate() {
                        let yr = y.add(i * ld);
                        for (h, &v) in a.iter().enumerate() {
                            let p = yr.add($lanes * h);
                            let v = if accumulate { $add(v, $load(p)) } else { v };
                            $store(p, v);
                        }
                    }
                }
                R
            }
        };
    }
    strip_kernel!(
        "avx512f",
        strip512,
        tile512,
        16,
        _mm512_setzero_ps,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_set1_ps,
        _mm512_fmadd_ps,
        _mm512_add_ps,
        [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2]
    );
    strip_kernel!(
        "avx2,fma",
        strip256,
        tile256,
        8,
        _mm256_setzero_ps,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_set1_ps,
        _mm256_fmadd_ps,
        _mm256_add_ps,
        [6, 5, 4, 3, 2]
    );

    macro_rules! versions {
        ($feat:literal, $name:ident) => {
            pub(super) const $name: Kernels = {
                #[target_feature(enable = $feat)]
                fn ln(r: &mut [f32], bias: Option<&[f32]>, w: &[f32], b: &[f32], eps: f32) {
                    generic::layer_norm(r, bias, w, b, eps)
                }
                #[target_feature(enable = $feat)]
                fn gelu(r: &mut [f32], b: &[f32]) {
                    generic::bias_gelu(r, b)
                }
                #[target_feature(enable = $feat)]
                fn softmax(r: &mut [f32]) {
                    generic::softmax(r)
                }
                // SAFETY (of each call): `kernels()` returns this table only
                // after detecting the features at run time.
                Kernels {
                    layer_norm: |r, bias, w, b, eps| unsafe { ln(r, bias, w, b, eps) },
                    bias_gelu: |r, b| unsafe { gelu(r, b) },
                    softmax: |r| unsafe { softmax(r) },
                }
            };
        };
    }
    versions!("avx512f,avx512vl,avx2,fma", AVX512);
    versions!("avx2,fma", AVX2);
}

/// Plain-Rust kernels written so that the compiler vectorises them: no
/// branches in the loops, reductions over eight independent lanes.
mod generic {
    const LANES: usize = 16;

    /// Σ of `f(x)` over `r`, in `LANES` independent partial sums.
    #[inline(always)]
    fn sum(r: &[f32], f: impl Fn(f32) -> f32) -> f32 {
        let mut acc = [0f32; LANES];
        let mut chunks = r.chunks_exact(LANES);
        for c in &mut chunks {
            for (a, &x) in acc.iter_mut().zip(c) {
                *a += f(x);
            }
        }
        let mut s: f32 = chunks.remainder().iter().map(|&x| f(x)).sum();
        s += acc.iter().sum::<f32>();
        s
    }

    /// `r ← LayerNorm(r + bias)·w + b`.
    #[inline(always)]
    pub(super) fn layer_norm(r: &mut [f32], bias: Option<&[f32]>, w: &[f32], b: &[f32], eps: f32) {
        if let Some(bias) = bias {
            r.iter_mut().zip(bias).for_each(|(x, c)| *x += c);
        }
        let n = r.len() as f32;
        let mean = sum(r, |x| x) / n;
        let var = sum(r, |x| (x - mean) * (x - mean)) / n;
        let inv = 1.0 / (var + eps).sqrt();
        for ((x, w), b) in r.iter_mut().zip(w).zip(b) {
            *x = (*x - mean) * inv * w + b;
        }
    }

    /// `e^x` to about 2 ulp for x in [-87, 88] (clamped outside): the
    /// exponent from rounding `x / ln 2`, the rest from a degree-6 Taylor
    /// polynomial on |r| ≤ ln 2 / 2.
    #[inline(always)]
    pub(super) fn exp(x: f32) -> f32 {
        const LOG2E: f32 = std::f32::consts::LOG2_E;
        const LN2_HI: f32 = 0.693_145_75;
        const LN2_LO: f32 = 1.428_606_8e-6;
        const ROUND: f32 = 12_582_912.0; // 1.5 · 2²³: adding it rounds to an integer
        let x = x.clamp(-87.0, 88.0);
        let k = (x * LOG2E + ROUND) - ROUND;
        let r = x - k * LN2_HI - k * LN2_LO;
        let p = 1.0
            + r * (1.0 + r * (1.0 / 2.0 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
        let scale = f32::from_bits(((k as i32 + 127) as u32) << 23);
        p * scale
    }

    /// erf(x) with an absolute error below 6·10⁻⁷ in f32 (the formula of
    /// Abramowitz & Stegun 7.1.26, 1.5·10⁻⁷ in exact arithmetic, plus f32
    /// rounding).
    #[inline(always)]
    pub(super) fn erf(x: f32) -> f32 {
        let a = x.abs();
        let t = 1.0 / (1.0 + 0.327_591_1 * a);
        let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_8 + t * (-1.453_152 + t * 1.061_405_4))));
        let y = 1.0 - poly * exp(-a * a);
        y.copysign(x)
    }

    /// `r ← GELU(r + b)`, GELU(x) = x·(1 + erf(x/√2))/2 (BERT's exact form).
    #[inline(always)]
    pub(super) fn bias_gelu(r: &mut [f32], b: &[f32]) {
        for (x, c) in r.iter_mut().zip(b) {
            let v = *x + c;
            *x = 0.5 * v * (1.0 + erf(v * std::f32::consts::FRAC_1_SQRT_2));
        }
    }

    /// `r ← softmax(r)`.
    #[inline(always)]
    pub(super) fn softmax(r: &mut [f32]) {
        let mut acc = [f32::NEG_INFINITY; LANES];
        let mut chunks = r.chunks_exact(LANES);
        for c in &mut chunks {
            for (a, &x) in acc.iter_mut().zip(c) {
                *a = a.max(x);
            }
        }
        let m = chunks
            .remainder()
            .iter()
            .chain(&acc)
            .fold(f32::NEG_INFINITY, |a, &x| a.max(x));
        r.iter_mut().for_each(|x| *x = exp(*x - m));
        let inv = 1.0 / sum(r, |x| x);
        r.iter_mut().for_each(|x| *x *= inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Linear` of random weights (`n_out` a multiple of 32 when `strips`).
    fn random_linear(n_in: usize, n_out: usize, seed: u64) -> Linear {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((z >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        let w: Vec<f32> = (0..n_in * n_out).map(|_| next()).collect();
        let wt = transpose(&w, n_out, n_in);
        Linear {
            strips: strips(&wt, n_in, n_out),
            wt,
            b: vec![0.0; n_out],
            n_in,
            n_out,
        }
    }

    /// Every path of the product (the strip kernels on each instruction set
    /// this CPU has, gemm) against an f64 product, for row counts that fill
    /// and split the kernels' tiles, with and without accumulation.
    #[test]
    fn products_agree_on_every_path() {
        let l = random_linear(40, 96, 7);
        assert_eq!(l.strips.len(), 40 * 96);
        assert!(random_linear(40, 80, 7).strips.is_empty(), "80 is not a multiple of 32");
        let mut kernels: Vec<(&str, StripFn)> = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                kernels.push(("avx512", x86::strip512));
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                kernels.push(("avx2", x86::strip256));
            }
        }
        for t in [1, 2, 5, 6, 7, 11, 12, 13, 25, 70] {
            let x: Vec<f32> = (0..t * 40).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
            let y0: Vec<f32> = (0..t * 96).map(|i| (i % 7) as f32).collect();
            let want = |acc: bool| -> Vec<f64> {
                let mut out = vec![0f64; t * 96];
                for r in 0..t {
                    for c in 0..96 {
                        let dot: f64 = (0..40).map(|k| x[r * 40 + k] as f64 * l.wt[k * 96 + c] as f64).sum();
                        out[r * 96 + c] = dot + if acc { y0[r * 96 + c] as f64 } else { 0.0 };
                    }
                }
                out
            };
            for acc in [false, true] {
                let want = want(acc);
                let check = |what: &str, got: &[f32]| {
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (*g as f64 - w).abs() < 1e-4,
                            "{what}, t {t}, acc {acc}, [{i}]: {g} vs {w}"
                        );
                    }
                };
                let mut y = y0.clone();
                matmul(&x, &l, &mut y, t, acc);
                check("matmul", &y);
                for (name, k) in &kernels {
                    let mut y = y0.clone();
                    for s in 0..3 {
                        // SAFETY: the feature was detected above; strip s of
                        // a 40 × 96 product, y is t × 96.
                        unsafe {
                            k(
                                x.as_ptr(),
                                40,
                                t,
                                l.strips.as_ptr().add(s * 40 * 32),
                                y.as_mut_ptr().add(s * 32),
                                96,
                                acc,
                            )
                        };
                    }
                    check(name, &y);
                }
            }
        }
    }

    #[test]
    fn exp_and_erf_are_accurate() {
        let mut worst_exp = 0f64;
        let mut worst_erf = 0f64;
        for i in -80_000..=80_000 {
            let x = i as f32 / 1000.0;
            let e = generic::exp(x) as f64;
            let want = (x as f64).exp();
            worst_exp = worst_exp.max(((e - want) / want).abs());
            let x = i as f32 / 10_000.0;
            worst_erf = worst_erf.max((generic::erf(x) as f64 - libm_erf(x as f64)).abs());
        }
        assert!(worst_exp < 4e-7, "exp relative error {worst_exp}");
        assert!(worst_erf < 6e-7, "erf absolute error {worst_erf}");
        assert_eq!(generic::exp(-1000.0), generic::exp(-87.0));
        assert!(generic::exp(0.0) == 1.0);
        assert_eq!(generic::erf(0.0), 0.0);
        assert!(generic::erf(9.0) > 0.999_999 && generic::erf(-9.0) < -0.999_999);
    }

    /// erf by its Taylor series (|x| ≤ 3) and continued fraction beyond,
    /// in f64: an independent reference for the test above.
    fn libm_erf(x: f64) -> f64 {
        let a = x.abs();
        let v = if a <= 3.0 {
            let (mut term, mut s, mut n) = (a, a, 0.0);
            while term.abs() > 1e-17 {
                n += 1.0;
                term *= -a * a / n;
                s += term / (2.0 * n + 1.0);
            }
            s * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            // erfc(a) = e^{-a²}/√π · 1/(a + 1/2/(a + 1/(a + 3/2/(a + …))))
            let mut f = a;
            for k in (1..60).rev() {
                f = a + (k as f64 / 2.0) / f;
            }
            1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / f
        };
        v.copysign(x)
    }

    #[test]
    fn softmax_and_layer_norm() {
        let mut r: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin() * 5.0).collect();
        let want: Vec<f64> = {
            let m = r.iter().fold(f64::MIN, |a, &x| a.max(x as f64));
            let e: Vec<f64> = r.iter().map(|&x| (x as f64 - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|x| x / s).collect()
        };
        generic::softmax(&mut r);
        for (a, b) in r.iter().zip(&want) {
            assert!((*a as f64 - b).abs() < 1e-7, "{a} vs {b}");
        }
        let mut x: Vec<f32> = (0..40).map(|i| i as f32 * 0.5 - 3.0).collect();
        let bias = vec![1.0f32; 40];
        let w: Vec<f32> = (0..40).map(|i| 1.0 + i as f32 / 40.0).collect();
        let b = vec![0.25f32; 40];
        let x64: Vec<f64> = x.iter().map(|&v| v as f64 + 1.0).collect();
        let mean = x64.iter().sum::<f64>() / 40.0;
        let var = x64.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 40.0;
        generic::layer_norm(&mut x, Some(&bias), &w, &b, 1e-12);
        for (i, v) in x.iter().enumerate() {
            let want = (x64[i] - mean) / var.sqrt() * w[i] as f64 + 0.25;
            assert!((*v as f64 - want).abs() < 1e-5, "{v} vs {want}");
        }
    }
}
