//! Salience scores and the selection of the lowest rows on the device
//! (`shaders/select.wgsl`).

use crate::GpuState;
use crate::device::{wgsl, words};
use crate::error::{GpuError, Result};
use crate::resident::alive_words;
use dentate_core::salience::{BonusForm, SalienceParams};
use dentate_core::vector::Bitset;

/// Bytes of the 96-bit selection key.
const KEY_BYTES: u32 = 12;
/// Rows per workgroup of the row-wise kernels.
const WG: usize = 256;

/// Workgroups for `n` rows, as (x, y) within the per-dimension limit (the
/// shaders number rows `x + y × 65535 × 256`).
fn grid(n: usize) -> Result<(u32, u32)> {
    let groups = n.div_ceil(WG);
    let y = groups.div_ceil(65_535);
    if y > 65_535 {
        return Err(GpuError::Unsupported(format!("{n} rows exceed one dispatch")));
    }
    Ok((groups.min(65_535) as u32, y as u32))
}

/// Order-preserving key of a score (−0 = +0), as the shader computes it.
fn sortable(x: f32) -> u32 {
    let b = if x == 0.0 { 0 } else { x.to_bits() };
    if b & 0x8000_0000 != 0 { !b } else { b | 0x8000_0000 }
}

impl GpuState {
    /// Salience of every row at turn `now`.
    pub(crate) async fn salience(
        &mut self,
        added: &[u64],
        last: &[u64],
        now: u64,
        params: &SalienceParams,
    ) -> Result<Vec<f32>> {
        let gpu = &self.gpu;
        let n = added.len().min(last.len());
        if (n as u64) * 8 > gpu.max_binding() {
            return Err(GpuError::Unsupported(format!("{n} rows exceed one binding")));
        }
        let pipe = gpu.pipeline(wgsl::SELECT, "salience", &[], &[], false).await?;
        let a = gpu.storage("added", bytemuck::cast_slice(&added[..n]));
        let l = gpu.storage("last", bytemuck::cast_slice(&last[..n]));
        let out = gpu.zeroed("salience", n as u64 * 4);
        let literal = u32::from(params.bonus == BonusForm::Literal);
        let u = gpu.uniform(&words(&[
            now as u32,
            (now >> 32) as u32,
            params.window as u32,
            (params.window >> 32) as u32,
            params.lambda.to_bits(),
            params.gamma.to_bits(),
            params.beta.to_bits(),
            literal,
            n as u32,
            0,
            0,
            0,
        ]));
        let bind = gpu.bind(&pipe, &[(0, &u), (1, &a), (2, &l), (3, &out)]);
        let mut enc = gpu.encoder();
        gpu.dispatch(&mut enc, &pipe, &bind, grid(n)?);
        let bytes = gpu.submit_and_read(enc, &out, 0, n as u64 * 4).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// The `count` live rows with the lowest (score, id), lowest first.
    pub(crate) async fn lowest(
        &mut self,
        scores: &[f32],
        ids: &[u64],
        alive: &Bitset,
        count: usize,
    ) -> Result<Vec<u32>> {
        let gpu = &self.gpu;
        let n = scores.len().min(ids.len());
        let live = (0..n).filter(|&i| alive.get(i)).count();
        let count = count.min(live);
        if count == 0 {
            return Ok(Vec::new());
        }
        if (n as u64) * 8 > gpu.max_binding() {
            return Err(GpuError::Unsupported(format!("{n} rows exceed one binding")));
        }
        let hist_pipe = gpu.pipeline(wgsl::SELECT, "histogram", &[], &[], false).await?;
        let collect_pipe = gpu.pipeline(wgsl::SELECT, "collect", &[], &[], false).await?;
        let s = gpu.storage("scores", bytemuck::cast_slice(&scores[..n]));
        let i = gpu.storage("ids", bytemuck::cast_slice(&ids[..n]));
        let a = alive_words(&mut self.alive, gpu, alive, (0, alive.words().len()))?;
        let hist = gpu.zeroed("histogram", 257 * 4);
        let picked = gpu.zeroed("picked", count as u64 * 4);
        let groups = grid(n)?;
        let params = |depth: u32, inclusive: u32, prefix: [u32; 3]| {
            gpu.uniform(&words(&[
                n as u32, depth, inclusive, 0, prefix[0], prefix[1], prefix[2], 0,
            ]))
        };
        let mut prefix = [0u32; 3];
        let mut remaining = count;
        let mut depth = 0;
        // Most significant byte first: fix one byte of the threshold key per
        // pass until the rows below it plus those equal to it are `count`.
        while depth < KEY_BYTES {
            let u = params(depth, 0, prefix);
            gpu.write(&hist, 0, &[0u8; 257 * 4]);
            let bind = gpu.bind(&hist_pipe, &[(4, &u), (5, &s), (6, &i), (7, &a), (8, &hist)]);
            let mut enc = gpu.encoder();
            gpu.dispatch(&mut enc, &hist_pipe, &bind, groups);
            let h: Vec<u32> = bytemuck::pod_collect_to_vec(&gpu.submit_and_read(enc, &hist, 0, 256 * 4).await?);
            let mut below = 0usize;
            let mut chosen = None;
            for (b, &c) in h.iter().enumerate() {
                if below + c as usize >= remaining {
                    chosen = Some((b as u32, c as usize));
                    break;
                }
                below += c as usize;
            }
            let Some((b, in_bin)) = chosen else {
                return Err(GpuError::Device("radix select lost rows between passes".into()));
            };
            prefix[(depth / 4) as usize] |= b << (24 - 8 * (depth % 4));
            remaining -= below;
            depth += 1;
            if in_bin == remaining {
                break;
            }
        }
        let u = params(depth, 1, prefix);
        gpu.write(&hist, 0, &[0u8; 257 * 4]);
        let bind = gpu.bind(
            &collect_pipe,
            &[(4, &u), (5, &s), (6, &i), (7, &a), (8, &hist), (9, &picked)],
        );
        let mut enc = gpu.encoder();
        gpu.dispatch(&mut enc, &collect_pipe, &bind, groups);
        gpu.submit(enc);
        let got = u32::from_le_bytes(
            gpu.submit_and_read(gpu.encoder(), &hist, 256 * 4, 4)
                .await?
                .try_into()
                .map_err(|_| GpuError::Device("short read".into()))?,
        ) as usize;
        if got != count {
            return Err(GpuError::Device(format!("radix select picked {got} rows, not {count}")));
        }
        let mut rows: Vec<u32> =
            bytemuck::pod_collect_to_vec(&gpu.submit_and_read(gpu.encoder(), &picked, 0, count as u64 * 4).await?);
        rows.sort_by_key(|&r| (sortable(scores[r as usize]), ids[r as usize]));
        Ok(rows)
    }
}
