//! I-JEPA's multi-block masks (documented on `IjepaMasks`).

use rand::Rng;

use super::masking::PatchMask;

/// One step's blocks: the context of every image and its target blocks (each list cut to the
/// batch's shortest).
///
/// I-JEPA's multi-block masks (Assran et al. 2023, <https://arxiv.org/abs/2301.08243>, §3; the
/// authors' `MaskCollator`, lightly's `IJEPAMaskCollator`): per step, a few target blocks and a
/// large context block without them for every image. The sampler is described on
/// [`Ijepa`](super::Ijepa); [`IjepaConfig`](super::IjepaConfig) holds its settings.
#[derive(Debug, Clone)]
pub struct IjepaMasks {
    /// The context patches of every image.
    pub context: PatchMask,
    /// The target blocks: one mask per block, each keeping that block's patches of every image.
    pub targets: Vec<PatchMask>,
}

/// A block size from one uniform draw for scale and aspect ratio (the authors'
/// `_sample_block_size`).
fn block_size(
    grid: (usize, usize),
    (s_low, s_high): (f64, f64),
    (a_low, a_high): (f64, f64),
    rng: &mut impl Rng,
) -> (usize, usize) {
    let u: f64 = rng.random();
    let keep = ((grid.0 * grid.1) as f64 * (s_low + u * (s_high - s_low))).floor();
    let aspect = a_low + u * (a_high - a_low);
    let h = ((keep * aspect).sqrt().round() as usize).clamp(1, grid.0.max(2) - 1);
    let w = ((keep / aspect).sqrt().round() as usize).clamp(1, grid.1.max(2) - 1);
    (h, w)
}

/// A block of `size` at a random place: its patches (row-major) and their rectangle.
fn place(grid: (usize, usize), (h, w): (usize, usize), rng: &mut impl Rng) -> Vec<usize> {
    let top = rng.random_range(0..=grid.0 - h);
    let left = rng.random_range(0..=grid.1 - w);
    (top..top + h)
        .flat_map(|r| (left..left + w).map(move |c| r * grid.1 + c))
        .collect()
}

/// The settings of the blocks (as [`IjepaConfig`](super::IjepaConfig) holds them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockSettings {
    /// Target blocks per image.
    pub(crate) targets: usize,
    /// Least and largest share of the patches a target block covers.
    pub(crate) target_scale: (f64, f64),
    /// Least and largest aspect ratio of a target block.
    pub(crate) target_aspect: (f64, f64),
    /// Least and largest share of the patches the context block covers.
    pub(crate) context_scale: (f64, f64),
    /// Fewest patches a block keeps.
    pub(crate) min_keep: usize,
}

impl BlockSettings {
    /// The blocks of `images` images on a `grid` of patches, drawn from `rng` (the sampler
    /// is described on [`Ijepa`](super::Ijepa)).
    pub(crate) fn draw(
        &self,
        images: usize,
        grid: (usize, usize),
        rng: &mut impl Rng,
    ) -> IjepaMasks {
        let target_size = block_size(grid, self.target_scale, self.target_aspect, rng);
        let context_size = block_size(grid, self.context_scale, (1.0, 1.0), rng);
        let mut targets: Vec<Vec<Vec<usize>>> = vec![Vec::new(); self.targets];
        let mut contexts = Vec::with_capacity(images);
        for _ in 0..images {
            let blocks: Vec<Vec<usize>> = (0..self.targets)
                .map(|_| place(grid, target_size, rng))
                .collect();
            let mut tries = 0;
            let context = loop {
                let block = place(grid, context_size, rng);
                // The authors' relaxation: after each failed try one target block fewer
                // constrains the context.
                let binding = blocks.len().saturating_sub(tries);
                let kept: Vec<usize> = block
                    .into_iter()
                    .filter(|p| !blocks[..binding].iter().any(|b| b.contains(p)))
                    .collect();
                if kept.len() >= self.min_keep.max(1) || binding == 0 {
                    break kept;
                }
                tries += 1;
            };
            contexts.push(context);
            for (list, block) in targets.iter_mut().zip(blocks) {
                list.push(block);
            }
        }
        let cut = |lists: Vec<Vec<usize>>| -> PatchMask {
            let shortest = lists.iter().map(Vec::len).min().unwrap_or(0).max(1);
            let lists = lists
                .into_iter()
                .map(|mut l| {
                    l.truncate(shortest);
                    l
                })
                .collect();
            PatchMask::from_visible(grid.0 * grid.1, lists).expect("blocks inside the grid")
        };
        IjepaMasks {
            context: cut(contexts),
            targets: targets.into_iter().map(cut).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block's size from one draw: the authors' formula at scale 0.2, aspect 1.5 (u = 1)
    /// on a 14 × 14 grid: ⌊196 · 0.2⌋ = 39, h = round(√58.5) = 8, w = round(√26) = 5.
    #[test]
    fn the_block_size_follows_the_authors_formula() {
        struct One;
        impl rand::RngCore for One {
            fn next_u32(&mut self) -> u32 {
                u32::MAX
            }
            fn next_u64(&mut self) -> u64 {
                u64::MAX
            }
            fn fill_bytes(&mut self, dest: &mut [u8]) {
                dest.fill(255);
            }
        }
        let (h, w) = block_size((14, 14), (0.15, 0.2), (0.75, 1.5), &mut One);
        assert_eq!((h, w), (8, 5));
    }
}
