//! VICRegL (documented on `VicRegL`).

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::layers::{LayerNorm, LayerNormConfig};
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::ssl_method::{
    online_in, replica_in, stateless, HasBackbone, MethodOutput, SslMethod, Views,
};
use crate::base::error::ConfigError;
use crate::base::geometry::ViewGeometry;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::{MlpHead, MlpHeadConfig};
use crate::loss::{VicRegLLoss, VicRegLLossConfig, VicRegLView};

/// Configuration of [`VicRegL`] (lightly's example: `BarlowTwinsProjectionHead(512, 2048,
/// 2048)` and `VicRegLLocalProjectionHead(512, 128, 128)` on a ResNet-18).
#[derive(Config, Debug)]
pub struct VicRegLConfig {
    /// Width of the global projector's two hidden layers (lightly's example 2048; the paper
    /// 8192).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Global projection width (lightly's example 2048; the paper 8192).
    #[config(default = 2048)]
    pub output_dim: usize,
    /// Width of the local projector's two hidden layers (lightly's example 128).
    #[config(default = 128)]
    pub local_hidden_dim: usize,
    /// Local projection width (lightly's example 128).
    #[config(default = 128)]
    pub local_output_dim: usize,
    /// Channels of the backbone's feature map
    /// ([`Backbone::forward_feature_map`]), the input of both projectors; `None`: the
    /// backbone's `feature_dim` (a ResNet pooled to one value per channel, a ViT).
    #[config(default = "None")]
    pub map_dim: Option<usize>,
    /// The loss (25 / 25 / 1, `α = 0.75`, `ε = 1e-4`, 20 and 4 matches).
    #[config(default = "VicRegLLossConfig::new()")]
    pub loss: VicRegLLossConfig,
}

impl VicRegLConfig {
    /// Builds VICRegL around the backbone `backbone` makes (called once).
    ///
    /// # Errors
    /// A zero width or an impossible loss setting, named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<VicRegL<B, M>, ConfigError> {
        let backbone = backbone(device);
        let map_dim = self.map_dim.unwrap_or_else(|| backbone.feature_dim());
        if map_dim == 0 {
            return Err(ConfigError::new("map_dim", "must be at least 1"));
        }
        let projector = MlpHeadConfig::new(map_dim, self.hidden_dim, self.output_dim)
            .with_num_layers(3)
            .init(device)?;
        for (field, value) in [
            ("local_hidden_dim", self.local_hidden_dim),
            ("local_output_dim", self.local_output_dim),
        ] {
            if value == 0 {
                return Err(ConfigError::new(field, "must be at least 1"));
            }
        }
        let local_projector = LocalProjector::new(
            map_dim,
            self.local_hidden_dim,
            self.local_output_dim,
            device,
        );
        Ok(VicRegL {
            online: VicRegLNetwork {
                backbone,
                projector,
                local_projector,
            },
            loss: self.loss.init()?,
            geometry: None,
            replica: None,
        })
    }
}

/// VICRegL's local projector (lightly's `VicRegLLocalProjectionHead`): `input → hidden (LN,
/// ReLU) → hidden (LN, ReLU) → output`, applied to every position of the feature map on its own;
/// the two hidden linear layers have no bias (the LayerNorm after each cancels it), the last
/// one has one.
#[derive(Module, Debug)]
pub struct LocalProjector<B: Backend> {
    first: Linear<B>,
    first_norm: LayerNorm<B>,
    second: Linear<B>,
    second_norm: LayerNorm<B>,
    output: Linear<B>,
}

impl<B: Backend> LocalProjector<B> {
    /// `input → hidden → hidden → output`, PyTorch's default initialisation (burn's `Linear`'s),
    /// LayerNorms at 1 and 0 with `ε = 1e-5`.
    pub fn new(input: usize, hidden: usize, output: usize, device: &B::Device) -> Self {
        Self {
            first: LinearConfig::new(input, hidden)
                .with_bias(false)
                .init(device),
            first_norm: LayerNormConfig::new(hidden).init(device),
            second: LinearConfig::new(hidden, hidden)
                .with_bias(false)
                .init(device),
            second_norm: LayerNormConfig::new(hidden).init(device),
            output: LinearConfig::new(hidden, output).init(device),
        }
    }

    /// The width of the feature vectors it takes.
    pub fn input_dim(&self) -> usize {
        self.first.weight.lazy_shape().dims::<2>()[0]
    }

    /// The local projections of feature vectors.
    ///
    /// # Shapes
    /// - `x`: `[R, input]` → `[R, output]`
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let x = relu(self.first_norm.forward(self.first.forward(x)));
        let x = relu(self.second_norm.forward(self.second.forward(x)));
        self.output.forward(x)
    }
}

/// VICRegL's network: a backbone with a feature map, a global projector on the map's mean
/// (lightly's example: `BarlowTwinsProjectionHead`, three layers with BatchNorm and ReLU after
/// the first two) and a [`LocalProjector`] on each of its positions.
#[derive(Module, Debug)]
pub struct VicRegLNetwork<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Global projection head, on the feature map averaged over its positions.
    pub projector: MlpHead<B>,
    /// Local projection head, on each position of the feature map.
    pub local_projector: LocalProjector<B>,
}

impl<B: Backend, M> HasBackbone<M> for VicRegLNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

impl<B: Backend, M: Backbone<B>> VicRegLNetwork<B, M> {
    /// One view through the network: the global projections, the local projections of the
    /// feature map's positions (row-major) and the map's size `[h, w]`.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, D]`, `[N, h·w, E]`
    ///
    /// # Panics
    /// If the backbone has no feature map, or one of another width than the projectors take
    /// (`VicRegLConfig::map_dim`).
    pub fn forward_view(&self, images: Tensor<B, 4>) -> (Tensor<B, 2>, Tensor<B, 3>, [usize; 2]) {
        let map = self.backbone.forward_feature_map(images).expect(
            "VICRegL's local projections are the backbone's feature map's: this backbone has none \
             (Backbone::forward_feature_map)",
        );
        let [n, c, h, w] = map.dims();
        let expected = self.local_projector.input_dim();
        assert_eq!(
            c, expected,
            "VICRegL: the backbone's feature map has {c} channels, the projectors take {expected} \
             (method.map_dim)"
        );
        let tokens = map.reshape([n, c, h * w]);
        let pooled = tokens.clone().mean_dim(2).reshape([n, c]);
        let global = self.projector.forward(pooled);
        let local = self
            .local_projector
            .forward(tokens.swap_dims(1, 2).reshape([n * h * w, c]));
        let e = local.dims()[1];
        (global, local.reshape([n, h * w, e]), [h, w])
    }
}

/// VICRegL. Build it with [`VicRegLConfig::init`].
///
/// VICRegL (Bardes, Ponce & LeCun, "VICRegL: Self-Supervised Learning of Local Visual
/// Features", NeurIPS 2022, <https://arxiv.org/abs/2210.01571>), as lightly's example trains it:
/// each of the two global views through the backbone to its last feature map; the map averaged
/// over its positions through the global projector, and every position through the local
/// projector ([`VicRegLNetwork`]); the [VICRegL loss](crate::loss::VicRegLLoss) of the global
/// projections (VICReg's) and of the local ones, matched between the views by their L2 distance
/// and by their locations in the input image. The locations are lightly's grids
/// ([`location_grid`]) of the pixels each view was cut from: the loss reads the views' crops
/// and flips ([`SslMethod::uses_view_geometry`]; the trainer hands them over before every
/// forward). No local crops (lightly's example: `VICRegLTransform(n_local_views=0)`, its
/// transform's advice for ResNets). Logged: `vicregl_global`, `vicregl_local`.
///
/// On replicas the global projections and the matched local projections (matched image by
/// image on each replica) are gathered before the loss, which every replica computes on the
/// global batch.
///
/// The math, the defaults and where lightly and the paper differ are in
/// `docs/methods.md#vicregl`.
#[derive(Debug, Clone)]
pub struct VicRegL<B: Backend, M: Backbone<B>> {
    online: VicRegLNetwork<B, M>,
    loss: VicRegLLoss,
    /// Where the next forward's views came from ([`SslMethod::set_view_geometry`]), taken by
    /// it.
    geometry: Option<[Vec<ViewGeometry>; 2]>,
    /// This method's replica in a data-parallel run.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> VicRegL<B, M> {
    /// The loss.
    pub fn loss(&self) -> &VicRegLLoss {
        &self.loss
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for VicRegL<B, M> {
    type Online = VicRegLNetwork<B, M>;
    type Backbone = M;
    // The geometry is the batch's; nothing else besides the networks.
    stateless!();

    online_in!(online);

    fn uses_view_geometry(&self) -> bool {
        true
    }

    fn set_view_geometry(&mut self, geometry: [Vec<ViewGeometry>; 2]) {
        self.geometry = Some(geometry);
    }

    /// # Panics
    /// Without the views' geometry ([`SslMethod::set_view_geometry`] before every forward; the
    /// trainer's loops call it) or with another number of images in it, and as
    /// [`VicRegLNetwork::forward_view`].
    fn forward_views(&mut self, views: Views<B>, _: Progress) -> MethodOutput<B> {
        let geometry = self.geometry.take().expect(
            "VICRegL matches positions by where the views came from: \
             SslMethod::set_view_geometry before every forward",
        );
        let [view1, view2] = views.two();
        let n = view1.dims()[0];
        let view = |images: Tensor<B, 4>, geometry: &[ViewGeometry]| {
            assert_eq!(
                geometry.len(),
                n,
                "VICRegL: {n} images and {} geometries",
                geometry.len()
            );
            let (global, local, size) = self.online.forward_view(images);
            let grid = geometry
                .iter()
                .flat_map(|g| location_grid(g, size))
                .collect();
            VicRegLView {
                global,
                local,
                grid,
            }
        };
        let views = [view(view1, &geometry[0]), view(view2, &geometry[1])];
        let replica = self.replica.as_ref();
        let terms = self
            .loss
            .terms_gathered(&views, &[], &|rows| Replica::gather_on(replica, rows));
        let [first, second] = views;
        MethodOutput::new(terms.loss)
            .with_stat("vicregl_global", terms.global)
            .with_stat("vicregl_local", terms.local)
            .with_embeddings([first.global, second.global])
    }

    replica_in!(
        /// The loss compares images across the batch: each replica matches its own images'
        /// positions, gathers the global and matched local projections, and computes the global
        /// batch's loss (the same on every replica); the gather's backward and the average over
        /// replicas give the one-device gradient (`docs/methods.md#on-several-replicas`).
        replica
    );
}

/// The unit of [`location_grid`]'s coordinates for a feature map of `size = [h, w]`: `1/S`
/// pixel with `S = lcm(2h·max(h − 1, 1), 2w·max(w − 1, 1))`, so that every grid coordinate of a
/// crop of whole pixels is an integer (exact in f64, as are the squared distances the matching
/// compares, for images up to ~10⁴ pixels across at 14 × 14 maps): equally distant positions
/// tie exactly and the lowest index wins, rather than the last bit of a rounding.
pub fn grid_unit(size: [usize; 2]) -> f64 {
    let axis = |g: usize| 2 * g * g.saturating_sub(1).max(1);
    let (a, b) = (axis(size[0]), axis(size[1]));
    let gcd = |mut x: usize, mut y: usize| {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    (a / gcd(a, b) * b) as f64
}

/// The locations of a feature map's `size = [h, w]` positions in the input image of a view cut
/// as `geometry` says, row-major (position `r·w + c` at `[x_c, y_r]`), in units of
/// `1/`[`grid_unit`]`(size)` pixel: lightly's `RandomResizedCropAndFlip.location_to_NxN_grid`,
///
/// ```text
/// x_c = left + c·width/(w − 1) + width/(2w)     (c = 0 .. w − 1; left + width/2 when w = 1)
/// y_r = top + r·height/(h − 1) + height/(2h)
/// ```
///
/// (`torch.linspace(left, left + width, w) + cell_width / 2`), with the `x` order reversed when
/// the view was flipped. The points span the crop from half a cell past its left edge to half a
/// cell past its right one (lightly's formula; the cells' centres would be
/// `left + (c + ½)·width/w`).
pub fn location_grid(geometry: &ViewGeometry, size: [usize; 2]) -> Vec<[f64; 2]> {
    let [h, w] = size;
    let unit = grid_unit(size) as u64;
    let axis = |start: usize, len: usize, g: usize| -> Vec<f64> {
        let (start, len, g) = (start as u64, len as u64, g as u64);
        let step = if g > 1 { unit / (g - 1) } else { 0 };
        (0..g)
            .map(|c| (unit * start + c * step * len + unit / (2 * g) * len) as f64)
            .collect()
    };
    let crop = geometry.crop;
    let mut xs = axis(crop.left, crop.width, w);
    if geometry.flipped {
        xs.reverse();
    }
    let ys = axis(crop.top, crop.height, h);
    ys.iter()
        .flat_map(|&y| xs.iter().map(move |&x| [x, y]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::geometry::CropBox;
    use crate::method::testing::{geometry, host, images, progress, Ad, TinyMap};

    fn vicregl() -> VicRegL<Ad, TinyMap<Ad>> {
        crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 11, |d| {
            VicRegLConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .with_local_hidden_dim(6)
                .with_local_output_dim(3)
                .with_loss(VicRegLLossConfig::new().with_num_matches([5, 3]))
                .init(|d| TinyMap::new(1, 5, d), d)
        })
        .unwrap()
    }

    /// lightly's grid of a crop, by hand: rows 2 .. 8 and columns 4 .. 13 on a 2 × 3 map put
    /// the columns at linspace(4, 13, 3) + 9/6 = 5.5, 10, 14.5 and the rows at
    /// linspace(2, 8, 2) + 6/4 = 3.5, 9.5; flipped, the columns run 14.5, 10, 5.5. In the
    /// grid's unit (lcm(2·2·1, 2·3·2) = 12 per pixel) every coordinate is a whole number.
    #[test]
    fn the_grid_of_a_crop_and_of_its_flip_are_lightlys() {
        let crop = CropBox {
            top: 2,
            left: 4,
            height: 6,
            width: 9,
        };
        let unit = grid_unit([2, 3]);
        assert_eq!(unit, 12.0);
        for (flipped, columns) in [(false, [5.5, 10.0, 14.5]), (true, [14.5, 10.0, 5.5])] {
            let g = ViewGeometry {
                crop,
                flipped,
                output: [8, 8],
            };
            let grid = location_grid(&g, [2, 3]);
            let expected: Vec<[f64; 2]> = [3.5, 9.5]
                .iter()
                .flat_map(|&y| columns.iter().map(move |&x| [x, y]))
                .collect();
            let pixels: Vec<[f64; 2]> = grid.iter().map(|p| [p[0] / unit, p[1] / unit]).collect();
            assert_eq!(pixels, expected, "flipped {flipped}");
            assert!(grid.iter().flatten().all(|v| v.fract() == 0.0));
        }
        // A 1 × 1 map: torch.linspace(s, e, 1) = [s], so the one point is the crop's centre.
        let g = ViewGeometry {
            crop,
            flipped: true,
            output: [8, 8],
        };
        let unit = grid_unit([1, 1]);
        assert_eq!(location_grid(&g, [1, 1]), [[8.5 * unit, 5.0 * unit]]);
    }

    /// The step's loss is the VICRegL loss of the network's two views with the grids of their
    /// geometry; the two parts are logged and the global projections are the embeddings.
    #[test]
    fn the_loss_is_vicregls_on_the_views_and_their_grids() {
        let mut m = vicregl();
        let (v1, v2) = (images::<Ad>(6, 0.0), images::<Ad>(6, 1.0));
        let (g1, g2) = (geometry(6, false, 0), geometry(6, true, 2));
        let view = |x: Tensor<Ad, 4>, g: &[ViewGeometry]| {
            let (global, local, size) = m.online().forward_view(x);
            assert_eq!(size, [4, 4]);
            let grid = g.iter().flat_map(|g| location_grid(g, size)).collect();
            VicRegLView {
                global,
                local,
                grid,
            }
        };
        let views = [view(v1.clone(), &g1), view(v2.clone(), &g2)];
        let expected = m.loss().terms(&views, &[]);
        m.set_view_geometry([g1, g2]);
        let out = m.forward(v1, v2, progress(0, 10, 0, 1));
        assert!((host(out.loss.clone())[0] - host(expected.loss)[0]).abs() < 1e-12);
        let names: Vec<_> = out.stats.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["vicregl_global", "vicregl_local"]);
        assert!((host(out.stats[1].1.clone())[0] - host(expected.local)[0]).abs() < 1e-12);
        let [z1, _] = out.embeddings.unwrap();
        assert_eq!(z1.dims(), [6, 4]);
        // The local projector learns: its last layer has a gradient.
        let grads = m.gradients(&out.loss);
        let id = m.online().local_projector.output.weight.id;
        let g: Tensor<burn::backend::NdArray<f64>, 2> = grads.get(id).expect("a gradient");
        assert!(host(g).iter().any(|v| *v != 0.0));
    }

    #[test]
    #[should_panic(expected = "set_view_geometry")]
    fn a_forward_without_the_geometry_is_refused() {
        let mut m = vicregl();
        let _ = m.forward(images(4, 0.0), images(4, 1.0), progress(0, 10, 0, 1));
    }

    #[test]
    fn a_zero_width_is_named() {
        let e = crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 1, |d| {
            VicRegLConfig::new()
                .with_local_hidden_dim(0)
                .init(|d| TinyMap::new(1, 5, d), d)
        })
        .unwrap_err();
        assert_eq!(e.field, "local_hidden_dim");
    }
}
