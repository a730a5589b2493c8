//! DetCon, DetConS and DetConB (documented on `DetCon`).

use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::momentum::MomentumEncoder;
use super::ssl_method::{online_in, replica_in, HasBackbone, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::geometry::{CropBox, ViewGeometry};
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::{MlpHead, MlpHeadConfig};
use crate::loss::{DetConBLoss, DetConBLossConfig, DetConSLoss, DetConSLossConfig};

/// Which DetCon: the SimCLR-style one or the BYOL-style one.
#[derive(Config, Debug, PartialEq, Copy)]
pub enum DetConVariant {
    /// DetConS: one network (backbone and projector), the [`DetConSLoss`] on its projections
    /// (lightly's example).
    S,
    /// DetConB: an online network with a predictor and a momentum target of its backbone and
    /// projector, the [`DetConBLoss`] of the predictions against the target's projections.
    B,
}

/// Configuration of [`DetCon`].
#[derive(Config, Debug)]
pub struct DetConConfig {
    /// DetConS or DetConB (lightly's example: DetConS).
    #[config(default = "DetConVariant::S")]
    pub variant: DetConVariant,
    /// The regions: the image cut into `[rows, columns]` equal cells (the paper's spatial
    /// heuristic; lightly's example's `DetConSTransform(grid_size=(5, 5))`).
    #[config(default = "[5, 5]")]
    pub grid: [usize; 2],
    /// Hidden width of the projector and (DetConB) the predictor (BYOL's 4096, whose heads the
    /// paper reuses; lightly's example 512).
    #[config(default = 4096)]
    pub hidden_dim: usize,
    /// Projection width (BYOL's 256; lightly's example 128).
    #[config(default = 256)]
    pub output_dim: usize,
    /// DetConB: the target's momentum at the start of training, rising to 1 along a cosine
    /// (BYOL's schedule and base 0.996, which the paper reuses). Unused by DetConS.
    #[config(default = 0.996)]
    pub base_momentum: f64,
    /// Temperature of the loss (the paper's and lightly's 0.1).
    #[config(default = 0.1)]
    pub temperature: f64,
    /// Channels of the backbone's feature map ([`Backbone::forward_feature_map`]), the input
    /// of the projector; `None`: the backbone's `feature_dim`.
    #[config(default = "None")]
    pub map_dim: Option<usize>,
}

impl DetConConfig {
    /// Builds DetCon around the backbone `backbone` makes (called once for DetConS; twice for
    /// DetConB, the second a fresh module the target's copy is loaded into).
    ///
    /// # Errors
    /// A grid or width of zero, an impossible temperature or momentum, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<DetCon<B, M>, ConfigError> {
        if self.grid.contains(&0) {
            return Err(ConfigError::new(
                "grid",
                format!(
                    "must have at least one row and one column, got {:?}",
                    self.grid
                ),
            ));
        }
        let loss = match self.variant {
            DetConVariant::S => DetConLoss::S(
                DetConSLossConfig::new()
                    .with_temperature(self.temperature)
                    .init()?,
            ),
            DetConVariant::B => DetConLoss::B(
                DetConBLossConfig::new()
                    .with_temperature(self.temperature)
                    .init()?,
            ),
        };
        let encoder = |device: &B::Device| -> Result<DetConEncoder<B, M>, ConfigError> {
            let backbone = backbone(device);
            let map_dim = self.map_dim.unwrap_or_else(|| backbone.feature_dim());
            if map_dim == 0 {
                return Err(ConfigError::new("map_dim", "must be at least 1"));
            }
            let projector =
                MlpHeadConfig::new(map_dim, self.hidden_dim, self.output_dim).init(device)?;
            Ok(DetConEncoder {
                backbone,
                projector,
            })
        };
        let online_encoder = encoder(device)?;
        let map_dim = self
            .map_dim
            .unwrap_or_else(|| online_encoder.backbone.feature_dim());
        let (predictor, target) = match self.variant {
            DetConVariant::S => (None, None),
            DetConVariant::B => {
                let predictor =
                    MlpHeadConfig::new(self.output_dim, self.hidden_dim, self.output_dim)
                        .init(device)?;
                let target = MomentumEncoder::new(
                    &online_encoder,
                    encoder(device)?,
                    self.base_momentum,
                    true,
                    "base_momentum",
                )?;
                (Some(predictor), Some(target))
            }
        };
        Ok(DetCon {
            online: DetConNetwork {
                encoder: online_encoder,
                predictor,
            },
            target,
            loss,
            grid: self.grid,
            map_dim,
            geometry: None,
            replica: None,
        })
    }
}

/// DetCon's encoder: a backbone with a feature map and a projector applied to each region's
/// mask-pooled feature vector (BatchNorm over every region of every image).
#[derive(Module, Debug)]
pub struct DetConEncoder<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Projection head (`map_dim → hidden (BN, ReLU) → output`).
    pub projector: MlpHead<B>,
}

impl<B: Backend, M: Backbone<B>> DetConEncoder<B, M> {
    /// The backbone's feature map of `images`, its positions as rows: `[N, h·w, C]`, and its
    /// size `[h, w]`.
    ///
    /// # Shapes
    /// - `images`: `[N, C_in, H, W]` → `[N, h·w, C]`
    ///
    /// # Panics
    /// If the backbone has no feature map.
    pub fn feature_map(&self, images: Tensor<B, 4>) -> (Tensor<B, 3>, [usize; 2]) {
        let map = self.backbone.forward_feature_map(images).expect(
            "DetCon pools the backbone's feature map over regions: this backbone has none \
             (Backbone::forward_feature_map)",
        );
        let [n, c, h, w] = map.dims();
        (map.reshape([n, c, h * w]).swap_dims(1, 2), [h, w])
    }

    /// The projections of the regions: the feature map's positions averaged over each region
    /// (`pooling`, the weights [`pooling_weights`] gives) and projected.
    ///
    /// # Shapes
    /// - `tokens`: `[N, h·w, C]`, `pooling`: `[N, M, h·w]` → `[N, M, D]`
    pub fn project_regions(&self, tokens: Tensor<B, 3>, pooling: Tensor<B, 3>) -> Tensor<B, 3> {
        let pooled = pooling.matmul(tokens);
        let [n, m, c] = pooled.dims();
        let z = self.projector.forward(pooled.reshape([n * m, c]));
        let d = z.dims()[1];
        z.reshape([n, m, d])
    }
}

/// DetCon's online network: the [`DetConEncoder`] and, for DetConB, the predictor.
#[derive(Module, Debug)]
pub struct DetConNetwork<B: Backend, M> {
    /// Backbone and projector.
    pub encoder: DetConEncoder<B, M>,
    /// DetConB's predictor (`output → hidden (BN, ReLU) → output`); `None` for DetConS.
    pub predictor: Option<MlpHead<B>>,
}

impl<B: Backend, M> HasBackbone<M> for DetConNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.encoder.backbone
    }
}

/// The checkpointed state of [`DetCon`]: DetConB's momentum target (`None` for DetConS).
#[derive(Record)]
pub struct DetConState<B: Backend, M: Backbone<B>> {
    /// The target's record (weights and batch-norm statistics).
    pub target: Option<<DetConEncoder<B, M> as Module<B>>::Record>,
}

#[derive(Debug, Clone)]
enum DetConLoss {
    S(DetConSLoss),
    B(DetConBLoss),
}

/// DetCon. Build it with [`DetConConfig::init`].
///
/// DetCon (Hénaff et al., "Efficient Visual Pretraining with Contrastive Detection", ICCV 2021,
/// <https://arxiv.org/abs/2103.10957>), as lightly 1.6 has it (its `DetConSLoss` /
/// `DetConBLoss` and its DetConS example): each view's backbone feature map averaged over each
/// region of the image (mask pooling, lightly's `pool_masked`), each region's vector projected
/// (DetConB: and predicted), and the contrastive detection loss between the same region's
/// vectors in the two views, every other region of the batch a negative.
///
/// The regions are the paper's simplest source, the spatial heuristic: the image cut into a
/// regular `grid` of cells ([`grid_regions`]). A region's id is carried through each view's
/// crop and flip ([`SslMethod::uses_view_geometry`]; the trainer hands them over before every
/// forward), so that a region has the same id in both views wherever it is seen. Each image
/// gets `M = rows·columns` slots per view: slot `k` holds region `k` when the view sees it,
/// otherwise one of the regions it sees (in turn), so that no slot pools nothing ([`region_slots`];
/// the loss weighs a region held by several slots once). Felzenszwalb–Huttenlocher and learned
/// masks are not provided.
///
/// DetConS ([`DetConVariant::S`]): one network, its projections both sides of the loss.
/// DetConB ([`DetConVariant::B`]): an online backbone, projector and predictor; a target
/// backbone and projector that follow them by EMA (momentum rising along a cosine to 1); the
/// predictions against the target's projections. Logged: `momentum` (DetConB).
///
/// On replicas each replica pools and projects its images and compares them with every
/// replica's targets (gathered; lightly's `gather_distributed`): the replicas' mean loss and
/// averaged gradients are the one-device ones.
///
/// The math, the defaults and where lightly and the paper differ are in
/// `docs/methods.md#detcon`.
#[derive(Debug, Clone)]
pub struct DetCon<B: Backend, M: Backbone<B>> {
    online: DetConNetwork<B, M>,
    target: Option<MomentumEncoder<DetConEncoder<B, M>>>,
    loss: DetConLoss,
    grid: [usize; 2],
    /// The projector's input width.
    map_dim: usize,
    /// Where the next forward's views came from ([`SslMethod::set_view_geometry`]), taken by
    /// it.
    geometry: Option<[Vec<ViewGeometry>; 2]>,
    /// This method's replica in a data-parallel run.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> DetCon<B, M> {
    /// The variant.
    pub fn variant(&self) -> DetConVariant {
        match self.loss {
            DetConLoss::S(_) => DetConVariant::S,
            DetConLoss::B(_) => DetConVariant::B,
        }
    }

    /// DetConB's momentum target (`None` for DetConS).
    pub fn target(&self) -> Option<&MomentumEncoder<DetConEncoder<B, M>>> {
        self.target.as_ref()
    }
}

/// The smallest box holding both `a` and `b`: what [`grid_regions`] cuts into cells.
pub fn union_box(a: &CropBox, b: &CropBox) -> CropBox {
    let top = a.top.min(b.top);
    let left = a.left.min(b.left);
    let bottom = (a.top + a.height).max(b.top + b.height);
    let right = (a.left + a.width).max(b.left + b.width);
    CropBox {
        top,
        left,
        height: bottom - top,
        width: right - left,
    }
}

/// The region of each position of a view's `size = [h, w]` feature map (row-major): the id
/// `row·columns + column` of the `grid = [rows, columns]` cell of `image` (a box in input
/// pixels) that holds the centre of the position's pixels, found through the view's crop and
/// flip (`geometry`). Position `(r, c)` covers the view's rows `r·H/h .. (r + 1)·H/h` and
/// columns `c·W/w .. (c + 1)·W/w`; its centre lies in the input at
///
/// ```text
/// y = top + (r + ½)·height/h,   x = left + (c' + ½)·width/w,   c' = c (w − 1 − c when flipped)
/// ```
///
/// and its region is `⌊(y − image.top)·rows/image.height⌋·columns + ⌊(x − image.left)·columns/
/// image.width⌋` (clamped to the grid), computed in integers (exact).
///
/// # Panics
/// A zero grid or map size, or an empty `image`.
pub fn grid_regions(
    geometry: &ViewGeometry,
    image: &CropBox,
    size: [usize; 2],
    grid: [usize; 2],
) -> Vec<usize> {
    let [h, w] = size;
    let [rows, columns] = grid;
    assert!(
        h > 0 && w > 0 && rows > 0 && columns > 0 && image.height > 0 && image.width > 0,
        "grid_regions: map {size:?}, grid {grid:?}, image box {image:?}"
    );
    let crop = geometry.crop;
    // The cell along one axis of the centre of part `k` of `g` parts of the crop's
    // `start .. start + len`, in an image axis `origin .. origin + extent` cut into `cells`:
    // ⌊(start + (k + ½)·len/g − origin)·cells/extent⌋ = ⌊(2g·start + (2k + 1)·len − 2g·origin)
    // ·cells / (2g·extent)⌋.
    let cell = |start: usize,
                len: usize,
                g: usize,
                k: usize,
                origin: usize,
                extent: usize,
                cells: usize| {
        let twice = (2 * g * start + (2 * k + 1) * len) as i64 - (2 * g * origin) as i64;
        let index = (twice.max(0) as usize * cells) / (2 * g * extent);
        index.min(cells - 1)
    };
    let mut ids = Vec::with_capacity(h * w);
    for r in 0..h {
        let row = cell(crop.top, crop.height, h, r, image.top, image.height, rows);
        for c in 0..w {
            let source = if geometry.flipped { w - 1 - c } else { c };
            let column = cell(
                crop.left,
                crop.width,
                w,
                source,
                image.left,
                image.width,
                columns,
            );
            ids.push(row * columns + column);
        }
    }
    ids
}

/// The `regions` slots of one image's view whose positions lie in regions `cells`
/// ([`grid_regions`]): slot `k` holds region `k` when some position lies in it, otherwise the
/// regions that do, in increasing order, in turn (so that every slot pools at least one
/// position and each present region is held about as often as the others).
///
/// # Panics
/// No positions, or a region id of `regions` or more.
pub fn region_slots(cells: &[usize], regions: usize) -> Vec<usize> {
    let mut present = vec![false; regions];
    for &id in cells {
        assert!(id < regions, "region_slots: region {id} of {regions}");
        present[id] = true;
    }
    let seen: Vec<usize> = (0..regions).filter(|&k| present[k]).collect();
    assert!(!seen.is_empty(), "region_slots: a view without positions");
    let mut next = 0;
    (0..regions)
        .map(|k| {
            if present[k] {
                k
            } else {
                let id = seen[next % seen.len()];
                next += 1;
                id
            }
        })
        .collect()
}

/// The mask-pooling weights of one image's view: `[M, P]` row-major, row `k` the mean over the
/// positions whose region is `slots[k]` (`1/count` on each of them, 0 elsewhere; lightly's
/// `pool_masked(reduce="mean")`).
pub fn pooling_weights(cells: &[usize], slots: &[usize]) -> Vec<f64> {
    let p = cells.len();
    let mut weights = vec![0.0; slots.len() * p];
    for (k, &id) in slots.iter().enumerate() {
        let count = cells.iter().filter(|&&c| c == id).count();
        for (q, &c) in cells.iter().enumerate() {
            if c == id {
                weights[k * p + q] = 1.0 / count as f64;
            }
        }
    }
    weights
}

/// The regions of a batch's two views: per view, the pooling weights `[N, M, P]` (flat) and the
/// slots' region ids (`N·M`).
fn batch_regions(
    geometry: &[Vec<ViewGeometry>; 2],
    size: [usize; 2],
    grid: [usize; 2],
) -> [(Vec<f64>, Vec<usize>); 2] {
    let regions = grid[0] * grid[1];
    let mut out = [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())];
    for (g0, g1) in geometry[0].iter().zip(&geometry[1]) {
        let image = union_box(&g0.crop, &g1.crop);
        for (v, g) in [g0, g1].into_iter().enumerate() {
            let cells = grid_regions(g, &image, size, grid);
            let slots = region_slots(&cells, regions);
            out[v].0.extend(pooling_weights(&cells, &slots));
            out[v].1.extend(slots);
        }
    }
    out
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for DetCon<B, M> {
    type Online = DetConNetwork<B, M>;
    type Backbone = M;
    type State = DetConState<B, M>;

    online_in!(online);

    fn state(&self) -> Self::State {
        DetConState {
            target: self.target.as_ref().map(|t| t.record()),
        }
    }

    fn load_state(&mut self, state: Self::State) -> Result<(), ConfigError> {
        match (&mut self.target, state.target) {
            (Some(target), Some(record)) => target.load_record(record),
            (None, None) => {}
            _ => {
                return Err(ConfigError::new(
                    "variant",
                    "the checkpoint is of the other DetCon variant (a target for DetConB only)",
                ))
            }
        }
        Ok(())
    }

    fn uses_view_geometry(&self) -> bool {
        true
    }

    fn set_view_geometry(&mut self, geometry: [Vec<ViewGeometry>; 2]) {
        self.geometry = Some(geometry);
    }

    /// # Panics
    /// Without the views' geometry ([`SslMethod::set_view_geometry`] before every forward; the
    /// trainer's loops call it) or with another number of images in it, and as
    /// [`DetConEncoder::feature_map`], and on a feature map of another width than the projector
    /// takes (`method.map_dim`).
    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let geometry = self.geometry.take().expect(
            "DetCon carries its regions through the views' crops and flips: \
             SslMethod::set_view_geometry before every forward",
        );
        let [view1, view2] = views.two();
        let n = view1.dims()[0];
        for g in &geometry {
            assert_eq!(g.len(), n, "DetCon: {n} images and {} geometries", g.len());
        }
        let device = view1.device();
        let encoder = &self.online.encoder;
        let (tokens1, size) = encoder.feature_map(view1.clone());
        let (tokens2, _) = encoder.feature_map(view2.clone());
        let channels = tokens1.dims()[2];
        assert_eq!(
            channels, self.map_dim,
            "DetCon: the backbone's feature map has {channels} channels, the projector takes {} \
             (method.map_dim)",
            self.map_dim
        );
        let m = self.grid[0] * self.grid[1];
        let p = size[0] * size[1];
        let [(w1, ids1), (w2, ids2)] = batch_regions(&geometry, size, self.grid);
        let pooling =
            |w: Vec<f64>| Tensor::<B, 3>::from_data(TensorData::new(w, [n, m, p]), &device);
        let (pool1, pool2) = (pooling(w1), pooling(w2));
        let z1 = encoder.project_regions(tokens1, pool1.clone());
        let z2 = encoder.project_regions(tokens2, pool2.clone());
        let replica = self.replica.as_ref();
        let offset = replica.map_or(0, |r| r.rank() * n);
        let gather = |z: Tensor<B, 3>| {
            let [n, m, d] = z.dims();
            let all = Replica::gather_on(replica, z.reshape([n, m * d]));
            let rows = all.dims()[0];
            all.reshape([rows, m, d])
        };
        let masks = [ids1.as_slice(), ids2.as_slice()];
        let embeddings = |z: &Tensor<B, 3>| {
            let [n, _, d] = z.dims();
            z.clone().mean_dim(1).reshape([n, d])
        };
        let embedded = [embeddings(&z1), embeddings(&z2)];
        match (&self.loss, &self.target, &self.online.predictor) {
            (DetConLoss::S(loss), _, _) => {
                let targets = [gather(z1.clone()), gather(z2.clone())];
                let value = loss.forward_gathered([z1, z2], targets, masks, offset);
                MethodOutput::new(value).with_embeddings(embedded)
            }
            (DetConLoss::B(loss), Some(target), Some(predictor)) => {
                let predict = |z: Tensor<B, 3>| {
                    let [n, m, d] = z.dims();
                    predictor.forward(z.reshape([n * m, d])).reshape([n, m, d])
                };
                let target_of = |view: Tensor<B, 4>, pool: Tensor<B, 3>| {
                    let network = target.network();
                    let (tokens, _) = network.feature_map(view);
                    network.project_regions(tokens, pool).detach()
                };
                let t1 = target_of(view1, pool1);
                let t2 = target_of(view2, pool2);
                let targets = [gather(t1), gather(t2)];
                let value =
                    loss.forward_gathered([predict(z1), predict(z2)], targets, masks, offset);
                let (name, momentum) = target.stat::<B>(progress, &device);
                MethodOutput::new(value)
                    .with_stat(name, momentum)
                    .with_embeddings(embedded)
            }
            (DetConLoss::B(_), _, _) => {
                unreachable!("DetConB is built with its target and predictor")
            }
        }
    }

    fn after_step(&mut self, progress: Progress) {
        if let Some(target) = &mut self.target {
            target.update(&self.online, progress);
        }
    }

    replica_in!(
        /// The loss compares regions across the batch: each replica's rows against every replica's
        /// targets (gathered); the gather's backward and the average over replicas give the
        /// one-device gradient (`docs/methods.md#on-several-replicas`).
        replica
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{geometry, host, images, progress, Ad, TinyMap};

    fn detcon(variant: DetConVariant) -> DetCon<Ad, TinyMap<Ad>> {
        crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 13, |d| {
            DetConConfig::new()
                .with_variant(variant)
                .with_grid([2, 3])
                .with_hidden_dim(8)
                .with_output_dim(4)
                .with_base_momentum(0.9)
                .init(|d| TinyMap::new(1, 5, d), d)
        })
        .unwrap()
    }

    /// An independent computation of a position's region: the image box's id at every input
    /// pixel, the view rendered by nearest-neighbour sampling at its pixels' centres (crop, then
    /// flip), and each position's id read at its centre in floating point.
    fn rendered(
        geometry: &ViewGeometry,
        image: &CropBox,
        size: [usize; 2],
        grid: [usize; 2],
    ) -> Vec<usize> {
        let [vh, vw] = geometry.output;
        // The id of input pixel (y, x) (integer coordinates of its top-left corner).
        let id_at = |y: f64, x: f64| -> usize {
            // 1e-9 past a value that lands on a cell's edge up to rounding (exactly, the cell
            // after the edge holds it).
            let cell = |v: f64, origin: usize, extent: usize, cells: usize| {
                (((v - origin as f64) * cells as f64 / extent as f64 + 1e-9).floor() as usize)
                    .min(cells - 1)
            };
            let row = cell(y, image.top, image.height, grid[0]);
            let col = cell(x, image.left, image.width, grid[1]);
            row * grid[1] + col
        };
        let crop = geometry.crop;
        let (sy, sx) = (
            crop.height as f64 / vh as f64,
            crop.width as f64 / vw as f64,
        );
        // The view's id at a point (in view pixels), through the flip and the crop's scale.
        let view_id = |vy: f64, vx: f64| -> usize {
            let vx = if geometry.flipped { vw as f64 - vx } else { vx };
            id_at(crop.top as f64 + vy * sy, crop.left as f64 + vx * sx)
        };
        let [h, w] = size;
        let mut ids = Vec::new();
        for r in 0..h {
            for c in 0..w {
                let vy = (r as f64 + 0.5) * vh as f64 / h as f64;
                let vx = (c as f64 + 0.5) * vw as f64 / w as f64;
                ids.push(view_id(vy, vx));
            }
        }
        ids
    }

    /// The regions follow each view's crop and flip: every position's region equals the one
    /// read off a rendering of the grid through the crop and the flip, for varied crops, maps
    /// and grids; a flip mirrors a view's regions; a region seen by both views has one id.
    #[test]
    fn the_regions_follow_the_crop_and_the_flip() {
        let crops = [
            CropBox {
                top: 0,
                left: 0,
                height: 24,
                width: 24,
            },
            CropBox {
                top: 3,
                left: 5,
                height: 13,
                width: 17,
            },
            CropBox {
                top: 11,
                left: 2,
                height: 7,
                width: 9,
            },
            CropBox {
                top: 1,
                left: 12,
                height: 20,
                width: 11,
            },
        ];
        for (a, first) in crops.iter().enumerate() {
            for second in &crops[a..] {
                let image = union_box(first, second);
                for size in [[1, 1], [2, 2], [3, 4], [7, 7]] {
                    for grid in [[1, 1], [2, 3], [5, 5]] {
                        for flipped in [false, true] {
                            let g = ViewGeometry {
                                crop: *first,
                                flipped,
                                output: [24, 24],
                            };
                            let got = grid_regions(&g, &image, size, grid);
                            assert_eq!(
                                got,
                                rendered(&g, &image, size, grid),
                                "{g:?} {size:?} {grid:?}"
                            );
                        }
                        let plain = ViewGeometry {
                            crop: *second,
                            flipped: false,
                            output: [16, 16],
                        };
                        let mirror = ViewGeometry {
                            flipped: true,
                            ..plain
                        };
                        let (p, q) = (
                            grid_regions(&plain, &image, size, grid),
                            grid_regions(&mirror, &image, size, grid),
                        );
                        for r in 0..size[0] {
                            for c in 0..size[1] {
                                assert_eq!(p[r * size[1] + c], q[r * size[1] + size[1] - 1 - c]);
                            }
                        }
                    }
                }
            }
        }
        // The whole image and its left half: the half's map sees the left columns' regions.
        let whole = CropBox {
            top: 0,
            left: 0,
            height: 8,
            width: 8,
        };
        let half = CropBox {
            top: 0,
            left: 0,
            height: 8,
            width: 4,
        };
        let image = union_box(&whole, &half);
        let g = ViewGeometry {
            crop: half,
            flipped: false,
            output: [8, 8],
        };
        assert_eq!(grid_regions(&g, &image, [2, 2], [2, 2]), [0, 0, 2, 2]);
        let g = ViewGeometry {
            crop: whole,
            flipped: true,
            output: [8, 8],
        };
        assert_eq!(grid_regions(&g, &image, [2, 2], [2, 2]), [1, 0, 3, 2]);
    }

    /// Absent regions' slots take the present regions in turn; the pooling averages each slot's
    /// positions.
    #[test]
    fn every_slot_pools_a_present_region() {
        let cells = [4, 4, 1, 7];
        let slots = region_slots(&cells, 9);
        assert_eq!(slots, [1, 1, 4, 7, 4, 1, 4, 7, 7]);
        let w = pooling_weights(&cells, &slots);
        assert_eq!(&w[0..4], [0.0, 0.0, 1.0, 0.0]);
        assert_eq!(&w[8..12], [0.5, 0.5, 0.0, 0.0]);
        assert!(w
            .chunks(4)
            .all(|row| (row.iter().sum::<f64>() - 1.0).abs() < 1e-15));
    }

    /// The step's loss is DetConS's (or DetConB's) on the regions pooled and projected by hand;
    /// DetConB logs its momentum and its target follows the online network after a step.
    #[test]
    fn the_loss_is_detcons_on_the_pooled_regions() {
        for variant in [DetConVariant::S, DetConVariant::B] {
            let mut m = detcon(variant);
            let (v1, v2) = (images::<Ad>(5, 0.0), images::<Ad>(5, 1.0));
            let (g1, g2) = (geometry(5, false, 0), geometry(5, true, 2));
            let geometry = [g1.clone(), g2.clone()];
            // By hand: positions' regions, slots and means, then the projector.
            let encoder = &m.online().encoder;
            let (t1, size) = encoder.feature_map(v1.clone());
            let (t2, _) = encoder.feature_map(v2.clone());
            assert_eq!(size, [4, 4]);
            let mut ids = [Vec::new(), Vec::new()];
            let mut pooled = [Vec::new(), Vec::new()];
            for (v, tokens) in [t1, t2].into_iter().enumerate() {
                let values = host(tokens);
                for i in 0..5 {
                    let image = union_box(&geometry[0][i].crop, &geometry[1][i].crop);
                    let cells = grid_regions(&geometry[v][i], &image, size, [2, 3]);
                    let slots = region_slots(&cells, 6);
                    for &id in &slots {
                        let at: Vec<usize> = (0..16).filter(|&q| cells[q] == id).collect();
                        for ch in 0..5 {
                            let sum: f64 = at.iter().map(|&q| values[(i * 16 + q) * 5 + ch]).sum();
                            pooled[v].push(sum / at.len() as f64);
                        }
                    }
                    ids[v].extend(slots);
                }
            }
            let project = |values: &[f64], e: &DetConEncoder<Ad, TinyMap<Ad>>| {
                let x = Tensor::<Ad, 2>::from_data(
                    TensorData::new(values.to_vec(), [30, 5]),
                    &Default::default(),
                );
                e.projector.forward(x).reshape([5, 6, 4])
            };
            let z = [project(&pooled[0], encoder), project(&pooled[1], encoder)];
            let masks = [ids[0].as_slice(), ids[1].as_slice()];
            let expected = match variant {
                DetConVariant::S => DetConSLossConfig::new().init().unwrap().forward(
                    z[0].clone(),
                    z[1].clone(),
                    masks,
                ),
                DetConVariant::B => {
                    let predictor = m.online().predictor.as_ref().unwrap();
                    let predict =
                        |z: Tensor<Ad, 3>| predictor.forward(z.reshape([30, 4])).reshape([5, 6, 4]);
                    let target = m.target().unwrap().network();
                    let t = [project(&pooled[0], target), project(&pooled[1], target)];
                    // The target starts as the online encoder's copy: the same projections.
                    assert!(host(t[0].clone())
                        .iter()
                        .zip(host(z[0].clone()))
                        .all(|(a, b)| (a - b).abs() < 1e-12));
                    DetConBLossConfig::new().init().unwrap().forward(
                        [predict(z[0].clone()), predict(z[1].clone())],
                        [t[0].clone().detach(), t[1].clone().detach()],
                        masks,
                    )
                }
            };
            m.set_view_geometry([g1, g2]);
            let at = progress(2, 10, 0, 1);
            let out = m.forward(v1, v2, at);
            let (got, expected) = (host(out.loss.clone())[0], host(expected)[0]);
            assert!(
                (got - expected).abs() < 1e-12,
                "{variant:?}: {got} vs {expected}"
            );
            let [e1, _] = out.embeddings.clone().unwrap();
            assert_eq!(e1.dims(), [5, 4]);
            let names: Vec<_> = out.stats.iter().map(|(n, _)| *n).collect();
            match variant {
                DetConVariant::S => assert!(names.is_empty()),
                DetConVariant::B => {
                    assert_eq!(names, ["momentum"]);
                    let before = host(m.target().unwrap().network().backbone.fc.weight.val());
                    m.after_step(at);
                    let after = host(m.target().unwrap().network().backbone.fc.weight.val());
                    assert_eq!(before, after, "an EMA of equal networks stays");
                }
            }
            let grads = m.gradients(&out.loss);
            let id = m.online().encoder.backbone.fc.weight.id;
            let g: Tensor<burn::backend::NdArray<f64>, 2> = grads.get(id).expect("a gradient");
            assert!(host(g).iter().any(|v| *v != 0.0));
        }
    }

    #[test]
    #[should_panic(expected = "set_view_geometry")]
    fn a_forward_without_the_geometry_is_refused() {
        let mut m = detcon(DetConVariant::S);
        let _ = m.forward(images(4, 0.0), images(4, 1.0), progress(0, 10, 0, 1));
    }

    #[test]
    fn a_zero_grid_or_width_is_named() {
        for (config, field) in [
            (DetConConfig::new().with_grid([0, 3]), "grid"),
            (DetConConfig::new().with_map_dim(Some(0)), "map_dim"),
            (DetConConfig::new().with_temperature(0.0), "temperature"),
            (
                DetConConfig::new()
                    .with_variant(DetConVariant::B)
                    .with_base_momentum(1.5),
                "base_momentum",
            ),
        ] {
            let e = crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 1, |d| {
                config
                    .with_hidden_dim(4)
                    .with_output_dim(2)
                    .init(|d| TinyMap::new(1, 5, d), d)
            })
            .unwrap_err();
            assert_eq!(e.field, field);
        }
    }
}
