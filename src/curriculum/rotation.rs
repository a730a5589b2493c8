//! MICO's rotation curricula (H. Fang, "Curriculum SSL: An Efficient And Effective Data
//! Augmentation For Contrastive Learning", <https://arxiv.org/abs/2301.06916>, §3.2): the angle
//! curriculum of rotation prediction, rotate-and-mix, crop-and-rotate and the heat-map boxes that
//! crop-and-rotate rotates.
//!
//! **Angle curriculum.** RotNet (Gidaris, Singh & Komodakis 2018, "Unsupervised Representation
//! Learning by Predicting Image Rotations", <https://arxiv.org/abs/1803.07728>) predicts which of
//! the rotations 0°, 90°, 180°, 270° an image went through. MICO rotates "gradually from 0 degree
//! to 270 degree with training scheduler": the set of angles in play grows with a k-step
//! scheduler, `{0°}` → `{0°, 90°}` → `{0°, 90°, 180°}` → all four. Here the scheduled value is the
//! number of angles in play (rounded to the nearest integer, clamped to `1..=4`), and each image
//! draws its angle uniformly from that set ([`RotationCurriculum::draw`]). Angles are counted in
//! counter-clockwise quarter turns `k` (label `k` ↔ `90·k°`), as [`crate::augment::rotate`].
//!
//! **Rotate-and-mix** ([`mix_rotated`]): the rotated image blended with the unrotated one,
//! `λ·rot_k(x) + (1 − λ)·x`, so that the network sees rotated and unrotated content together.
//!
//! **Crop-and-rotate** ([`rotate_in_boxes`]): only the part of each image inside a box around its
//! object is rotated; the boxes come from a heat map of the backbone's last feature map
//! ([`boxes_from_heatmap`]) as in ContrastiveCrop (Peng et al. 2022, "Crafting Better Contrastive
//! Views for Siamese Representation Learning", <https://arxiv.org/abs/2202.03278>). MICO
//! recomputes the boxes 4 times per run over the whole training set to bound the cost
//! ([`box_update_epochs`]); the training loop does so with [`object_boxes_of`] on the
//! unaugmented images, keeps them in the checkpoint ([`ObjectBoxes`]), and maps each image's box
//! into its two augmented views ([`box_in_view`]) before every step.

use burn::config::Config;
use burn::tensor::{backend::Backend, Int, Tensor, TensorData};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use curriculum_ssl_models::Backbone;

use crate::base::error::ConfigError;
use crate::base::geometry::CropBox;
use crate::base::geometry::ViewGeometry;
use crate::base::schedule::{Pace, Scheduler, SchedulerConfig};
use crate::base::seed::mix_seed;
use crate::base::Progress;

/// The number of rotations RotNet tells apart (0°, 90°, 180°, 270°).
pub const NUM_ROTATIONS: usize = 4;

/// The stream number that separates the angle draws of [`RotationCurriculum::draw_at`] from
/// other generators keyed by the same seed ("rotation" in ASCII).
pub const ROTATION_STREAM: u64 = 0x726f_7461_7469_6f6e;

/// The angle curriculum (a burn [`Config`], saved in the run's configuration).
///
/// Default: MICO's discrete scheduler with 4 steps per epoch pace, values `(1, 2, 3, 4)` angles in
/// play — over `E` epochs, the first quarter sees only 0°, the second 0° and 90°, the third adds
/// 180°, the last all four.
#[derive(Config, Debug, PartialEq)]
pub struct RotationCurriculumConfig {
    /// Number of angles in play over training (values in `[1, 4]`, rounded to the nearest
    /// integer); `None`: all four throughout (plain RotNet).
    #[config(default = "Some(RotationCurriculumConfig::four_step_schedule())")]
    pub schedule: Option<SchedulerConfig>,
}

impl RotationCurriculumConfig {
    /// The default schedule: `(1, 2, 3, 4)` angles in play, 4 steps per epoch pace.
    pub fn four_step_schedule() -> SchedulerConfig {
        SchedulerConfig::Steps {
            values: vec![1.0, 2.0, 3.0, 4.0],
            pace: Pace::Epoch,
        }
    }

    /// Plain RotNet: all four angles from the start.
    pub fn all_angles() -> Self {
        Self { schedule: None }
    }

    /// Checks the schedule (every value in `[1, 4]`) and builds the curriculum.
    ///
    /// # Errors
    /// Naming `rotation.schedule` when a value falls outside `[1, 4]`.
    pub fn init(&self) -> Result<RotationCurriculum, ConfigError> {
        if let Some(s) = &self.schedule {
            s.validate("rotation.schedule", 1.0, NUM_ROTATIONS as f64)?;
        }
        Ok(RotationCurriculum {
            scheduler: self.schedule.clone().map(Scheduler::from),
        })
    }
}

/// A validated angle curriculum: which rotations are in play at a given progress.
#[derive(Debug, Clone)]
pub struct RotationCurriculum {
    scheduler: Option<Scheduler>,
}

impl RotationCurriculum {
    /// A curriculum whose number of angles comes from a user's scheduler (clamped to `[1, 4]`,
    /// rounded to the nearest integer).
    pub fn with_scheduler(scheduler: Scheduler) -> Self {
        Self {
            scheduler: Some(scheduler),
        }
    }

    /// Whether the set of angles changes over training.
    pub fn is_scheduled(&self) -> bool {
        self.scheduler.is_some()
    }

    /// How many angles are in play at `progress` (1 to 4).
    pub fn num_angles(&self, progress: Progress) -> usize {
        match &self.scheduler {
            None => NUM_ROTATIONS,
            Some(s) => {
                let v = s.value(progress, 1.0, NUM_ROTATIONS as f64).round() as usize;
                v.clamp(1, NUM_ROTATIONS)
            }
        }
    }

    /// The angles in play at `progress`, in quarter turns: `[0]`, `[0, 1]`, `[0, 1, 2]` or
    /// `[0, 1, 2, 3]`.
    pub fn angles_at(&self, progress: Progress) -> Vec<usize> {
        (0..self.num_angles(progress)).collect()
    }

    /// Draws `n` angles (quarter turns, also the RotNet labels) uniformly from the set in play.
    pub fn draw(&self, progress: Progress, rng: &mut StdRng, n: usize) -> Vec<usize> {
        let m = self.num_angles(progress);
        (0..n).map(|_| rng.random_range(0..m)).collect()
    }

    /// [`RotationCurriculum::draw`] from a generator keyed by `(seed, progress.step)`: the same
    /// seed and step give the same angles, whatever was drawn before (a resumed run repeats them).
    /// The seed is first mixed with a stream number of its own ([`ROTATION_STREAM`]), so that
    /// the run's seed can be passed here without repeating the augmenter's `(seed, step)` draws.
    pub fn draw_at(&self, progress: Progress, seed: u64, n: usize) -> Vec<usize> {
        let stream = mix_seed(seed, ROTATION_STREAM);
        let mut rng = StdRng::seed_from_u64(mix_seed(stream, progress.step as u64));
        self.draw(progress, &mut rng, n)
    }
}

/// Rotate-and-mix: sample `n` becomes `λ·rot_{ks[n]}(x_n) + (1 − λ)·x_n`.
///
/// λ is the share of the rotated image. MICO gives no value; the RotNet method defaults to
/// `λ = 0.5`, equal shares of rotated and unrotated content (the value of the paper's plain
/// Mixup baseline). `λ = 1` is plain rotation and `λ = 0` the unrotated image; with `k = 0` the
/// image is unchanged whatever λ.
///
/// # Panics
/// If λ is outside `[0, 1]`, or the images are not square and some `k` is odd.
pub fn mix_rotated<B: Backend>(x: Tensor<B, 4>, ks: &[usize], lambda: f64) -> Tensor<B, 4> {
    assert!(
        (0.0..=1.0).contains(&lambda),
        "rotate-and-mix needs lambda in [0, 1], got {lambda}"
    );
    let rotated = crate::augment::rotate::rotate_k(x.clone(), ks);
    rotated.mul_scalar(lambda).add(x.mul_scalar(1.0 - lambda))
}

/// Crop-and-rotate: rotates by `ks[n]` quarter turns (counter-clockwise) the part of image `n`
/// inside `boxes[n]` made square ([`CropBox::square_in`]); pixels outside the square are left
/// untouched. Exact (one gather of the pixels).
///
/// # Panics
/// If `ks` or `boxes` does not have one entry per image.
pub fn rotate_in_boxes<B: Backend>(
    x: Tensor<B, 4>,
    ks: &[usize],
    boxes: &[CropBox],
) -> Tensor<B, 4> {
    let [n, c, h, w] = x.dims();
    assert_eq!(
        ks.len(),
        n,
        "crop-and-rotate: {} angles for {n} images",
        ks.len()
    );
    assert_eq!(
        boxes.len(),
        n,
        "crop-and-rotate: {} boxes for {n} images",
        boxes.len()
    );
    let mut index: Vec<i64> = Vec::with_capacity(n * h * w);
    for (k, b) in ks.iter().zip(boxes) {
        let sq = b.square_in([h, w]);
        let s = sq.height;
        for i in 0..h {
            for j in 0..w {
                let inside =
                    (sq.top..sq.top + s).contains(&i) && (sq.left..sq.left + s).contains(&j);
                let (si, sj) = if inside {
                    // Output (a, b) of a counter-clockwise rotation reads (as torch.rot90):
                    // k = 1: (b, s−1−a); k = 2: (s−1−a, s−1−b); k = 3: (s−1−b, a).
                    let (a, bb) = (i - sq.top, j - sq.left);
                    let (sa, sb) = match k % 4 {
                        0 => (a, bb),
                        1 => (bb, s - 1 - a),
                        2 => (s - 1 - a, s - 1 - bb),
                        _ => (s - 1 - bb, a),
                    };
                    (sq.top + sa, sq.left + sb)
                } else {
                    (i, j)
                };
                index.push((si * w + sj) as i64);
            }
        }
    }
    let device = x.device();
    let index = Tensor::<B, 3, Int>::from_data(TensorData::new(index, [n, 1, h * w]), &device)
        .repeat_dim(1, c);
    x.reshape([n, c, h * w])
        .gather(2, index)
        .reshape([n, c, h, w])
}

/// The heat map of a feature map: the mean over channels, `[N, C, h, w]` → `[N, h, w]`.
pub fn channel_mean<B: Backend>(features: Tensor<B, 4>) -> Tensor<B, 3> {
    let [n, _, h, w] = features.dims();
    features.mean_dim(1).reshape([n, h, w])
}

/// ContrastiveCrop's box threshold on CIFAR (`box_thresh = 0.10`).
pub const DEFAULT_BOX_THRESHOLD: f64 = 0.1;

/// Boxes from heat maps `[N, h, w]` (on the device; read back to the host): see
/// [`boxes_from_heatmap_host`].
pub fn boxes_from_heatmap<B: Backend>(
    heat: Tensor<B, 3>,
    image_size: [usize; 2],
    threshold: f64,
) -> Vec<CropBox> {
    let shape = heat.dims();
    let values: Vec<f64> = heat.into_data().iter::<f64>().collect();
    boxes_from_heatmap_host(&values, shape, image_size, threshold)
}

/// Boxes from heat maps, as ContrastiveCrop's box update does: each `h × w` map (row-major in
/// `values`, `shape = [N, h, w]`) is min–max normalised to `[0, 1]`, upsampled to `image_size`
/// bilinearly (PyTorch's `interpolate(mode="bilinear")`, `align_corners = False`), and its box is
/// the bounding box of the pixels whose value exceeds `threshold` (so the threshold is a fraction
/// of the map's range above its minimum; ContrastiveCrop uses 0.1, [`DEFAULT_BOX_THRESHOLD`]).
/// A constant map (or one with no pixel above the threshold) gives the whole image.
///
/// # Panics
/// If `values` does not hold `N·h·w` numbers or a side is 0.
pub fn boxes_from_heatmap_host(
    values: &[f64],
    shape: [usize; 3],
    image_size: [usize; 2],
    threshold: f64,
) -> Vec<CropBox> {
    let [n, h, w] = shape;
    let [ih, iw] = image_size;
    assert_eq!(
        values.len(),
        n * h * w,
        "heat maps: {} values for shape {shape:?}",
        values.len()
    );
    assert!(h > 0 && w > 0 && ih > 0 && iw > 0, "heat maps: empty side");
    let rows = bilinear_weights(h, ih);
    let cols = bilinear_weights(w, iw);
    values
        .chunks_exact(h * w)
        .map(|map| {
            let lo = map.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = map.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let range = hi - lo;
            if !(range.is_finite() && range > 0.0) {
                return CropBox::whole(image_size);
            }
            let norm = |r: usize, c: usize| (map[r * w + c] - lo) / range;
            let mut bounds: Option<(usize, usize, usize, usize)> = None;
            for (i, &(r0, r1, lr)) in rows.iter().enumerate() {
                for (j, &(c0, c1, lc)) in cols.iter().enumerate() {
                    let top = (1.0 - lc) * norm(r0, c0) + lc * norm(r0, c1);
                    let bottom = (1.0 - lc) * norm(r1, c0) + lc * norm(r1, c1);
                    let v = (1.0 - lr) * top + lr * bottom;
                    if v > threshold {
                        bounds = Some(match bounds {
                            None => (i, i, j, j),
                            Some((a, b, c, d)) => (a.min(i), b.max(i), c.min(j), d.max(j)),
                        });
                    }
                }
            }
            match bounds {
                None => CropBox::whole(image_size),
                Some((r0, r1, c0, c1)) => CropBox {
                    top: r0,
                    left: c0,
                    height: r1 - r0 + 1,
                    width: c1 - c0 + 1,
                },
            }
        })
        .collect()
}

/// The boxes of a batch of images from the backbone's heat maps: the channel mean
/// ([`channel_mean`]) of [`Backbone::forward_feature_map`], turned into one box per image in the
/// images' pixels by [`boxes_from_heatmap`] with `threshold`. `None` when the backbone has no
/// feature map.
///
/// Call it with an inference backbone (`valid()` of a trained one) on the images as the
/// network sees them (normalised as the views are).
///
/// # Shapes
/// - `images`: `[N, C, H, W]`; the boxes are in `H × W` pixels
pub fn object_boxes_of<B: Backend, M: Backbone<B>>(
    backbone: &M,
    images: Tensor<B, 4>,
    threshold: f64,
) -> Option<Vec<CropBox>> {
    let [_, _, h, w] = images.dims();
    let map = backbone.forward_feature_map(images)?;
    Some(boxes_from_heatmap(channel_mean(map), [h, w], threshold))
}

/// How many times a run computes its object boxes (MICO: 4, to bound the cost).
pub const BOX_UPDATES: usize = 4;

/// The epochs at whose start a run of `total_epochs` epochs computes its object boxes: the
/// start of each quarter, `0, ⌊E/4⌋, ⌊E/2⌋, ⌊3E/4⌋`, without repeats (a run of fewer than 4
/// epochs computes them fewer times).
pub fn box_update_epochs(total_epochs: usize) -> Vec<usize> {
    let mut epochs: Vec<usize> = (0..BOX_UPDATES)
        .map(|q| q * total_epochs / BOX_UPDATES)
        .collect();
    epochs.dedup();
    epochs
}

/// The epoch whose boxes are in use during `epoch`: the latest of [`box_update_epochs`] not after
/// it.
pub fn box_epoch_for(epoch: usize, total_epochs: usize) -> usize {
    box_update_epochs(total_epochs)
        .into_iter()
        .filter(|&e| e <= epoch)
        .max()
        .unwrap_or(0)
}

/// The object boxes of a training set, as the training loop keeps them between two
/// computations and saves them in checkpoints (`curricula.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectBoxes {
    /// The (0-based) epoch at whose start they were computed.
    pub epoch: usize,
    /// The `[height, width]` of the training images, whose pixels the boxes are in.
    pub image_size: [usize; 2],
    /// One box per training image, in dataset index order.
    pub boxes: Vec<CropBox>,
}

impl ObjectBoxes {
    /// Checks that the boxes fit a training set of `len` images of `image_size`.
    ///
    /// # Errors
    /// Saying what does not fit (another dataset, or a box outside its image).
    pub fn check(&self, len: usize, image_size: [usize; 2]) -> Result<(), String> {
        if self.image_size != image_size || self.boxes.len() != len {
            return Err(format!(
                "object boxes for {} images of {:?} pixels, the training set has {len} of {:?}",
                self.boxes.len(),
                self.image_size,
                image_size
            ));
        }
        let [h, w] = image_size;
        match self.boxes.iter().position(|b| {
            b.height == 0 || b.width == 0 || b.top + b.height > h || b.left + b.width > w
        }) {
            Some(i) => Err(format!(
                "object box {i} ({:?}) is empty or leaves its {h}×{w} image",
                self.boxes[i]
            )),
            None => Ok(()),
        }
    }
}

/// Maps an object box given in input-image pixels into a view made from that image: the box is
/// intersected with the view's crop, scaled to the view's output size (rounding outward, so that
/// the mapped box still covers every view pixel whose centre falls on the object: every pixel
/// that is at least half object after the bilinear resize, which only spreads the object's edge
/// thinly beyond), and mirrored when the view was flipped. An object box that the crop misses entirely gives the whole view (no object
/// left to centre the rotation on).
///
/// Along one axis, input pixels `[a, b)` inside a crop starting at `c` of length `L` that is
/// resized to `S` output pixels become `[⌊(a − c)·S / L⌋, ⌈(b − c)·S / L⌉)`; a flip maps columns
/// `[l, r)` to `[W − r, W − l)`.
pub fn box_in_view(object: &CropBox, geometry: &ViewGeometry) -> CropBox {
    let crop = geometry.crop;
    let [out_h, out_w] = geometry.output;
    let axis = |start: usize, len: usize, c_start: usize, c_len: usize, out: usize| {
        let lo = start.max(c_start);
        let hi = (start + len).min(c_start + c_len);
        if hi <= lo || c_len == 0 || out == 0 {
            return None;
        }
        let first = (lo - c_start) * out / c_len;
        let end = ((hi - c_start) * out).div_ceil(c_len).min(out);
        Some((first, end - first))
    };
    let rows = axis(object.top, object.height, crop.top, crop.height, out_h);
    let cols = axis(object.left, object.width, crop.left, crop.width, out_w);
    match (rows, cols) {
        (Some((top, height)), Some((left, width))) => CropBox {
            top,
            left: if geometry.flipped {
                out_w - (left + width)
            } else {
                left
            },
            height,
            width,
        },
        _ => CropBox::whole(geometry.output),
    }
}

/// For each output index of a bilinear resize `input → output` (`align_corners = False`): the two
/// input indices and the weight of the second.
fn bilinear_weights(input: usize, output: usize) -> Vec<(usize, usize, f64)> {
    let scale = input as f64 / output as f64;
    (0..output)
        .map(|o| {
            let src = ((o as f64 + 0.5) * scale - 0.5).max(0.0);
            let i0 = (src.floor() as usize).min(input - 1);
            let i1 = (i0 + 1).min(input - 1);
            (i0, i1, src - i0 as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::rotate::rot90;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    fn ramp(n: usize, c: usize, h: usize, w: usize) -> Tensor<B, 4> {
        let v: Vec<f64> = (0..n * c * h * w).map(|i| i as f64).collect();
        Tensor::from_data(TensorData::new(v, [n, c, h, w]), &Default::default())
    }

    fn values(x: Tensor<B, 4>) -> Vec<f64> {
        x.into_data().iter::<f64>().collect()
    }

    fn epoch(e: usize, total: usize) -> Progress {
        Progress {
            step: e * 10,
            total_steps: total * 10,
            epoch: e,
            total_epochs: total,
        }
    }

    #[test]
    fn each_angle_moves_known_pixels_of_a_3x3_ramp() {
        // [[0,1,2],[3,4,5],[6,7,8]] turned counter-clockwise (torch.rot90, k = 1, 2, 3).
        let x = ramp(4, 1, 3, 3).sub(
            Tensor::<B, 1>::from_floats([0.0, 9.0, 18.0, 27.0], &Default::default())
                .reshape([4, 1, 1, 1]),
        );
        let out = rotate_in_boxes(x, &[0, 1, 2, 3], &[CropBox::whole([3, 3]); 4]);
        let v = values(out);
        assert_eq!(v[0..9], [0., 1., 2., 3., 4., 5., 6., 7., 8.]);
        assert_eq!(v[9..18], [2., 5., 8., 1., 4., 7., 0., 3., 6.]);
        assert_eq!(v[18..27], [8., 7., 6., 5., 4., 3., 2., 1., 0.]);
        assert_eq!(v[27..36], [6., 3., 0., 7., 4., 1., 8., 5., 2.]);
    }

    #[test]
    fn rotate_and_mix_of_a_2x2_ramp() {
        // x = [[0,1],[2,3]]; rot90 = [[1,3],[0,2]]; 0.25·rot + 0.75·x.
        let x = ramp(1, 1, 2, 2);
        assert_eq!(
            values(mix_rotated(x.clone(), &[1], 0.25)),
            [0.25, 1.5, 1.5, 2.75]
        );
        // rot180 = [[3,2],[1,0]]; 0.5·rot + 0.5·x = 1.5 everywhere.
        assert_eq!(values(mix_rotated(x.clone(), &[2], 0.5)), [1.5; 4]);
        assert_eq!(values(mix_rotated(x, &[0], 0.7)), [0.0, 1.0, 2.0, 3.0]);
    }

    #[test]
    fn angle_set_grows_with_the_four_step_schedule() {
        let c = RotationCurriculumConfig::new().init().unwrap();
        let sets: Vec<Vec<usize>> = (0..8).map(|e| c.angles_at(epoch(e, 8))).collect();
        assert_eq!(
            sets,
            [
                vec![0],
                vec![0],
                vec![0, 1],
                vec![0, 1],
                vec![0, 1, 2],
                vec![0, 1, 2],
                vec![0, 1, 2, 3],
                vec![0, 1, 2, 3],
            ]
        );
        let plain = RotationCurriculumConfig::all_angles().init().unwrap();
        assert_eq!(plain.angles_at(epoch(0, 8)), [0, 1, 2, 3]);
        assert!(!plain.is_scheduled());
        // A linear schedule 1 → 4 over 10 epochs: 1 + 3·e/10, rounded.
        let linear = RotationCurriculum::with_scheduler(
            SchedulerConfig::Linear {
                start: 1.0,
                end: 4.0,
                pace: Pace::Epoch,
            }
            .into(),
        );
        let counts: Vec<usize> = (0..10).map(|e| linear.num_angles(epoch(e, 10))).collect();
        assert_eq!(counts, [1, 1, 2, 2, 2, 3, 3, 3, 3, 4]);
        let bad = RotationCurriculumConfig {
            schedule: Some(SchedulerConfig::Constant { value: 5.0 }),
        };
        assert_eq!(bad.init().unwrap_err().field, "rotation.schedule");
    }

    #[test]
    fn config_round_trips_through_json() {
        let c = RotationCurriculumConfig::new();
        let json = serde_json::to_string(&c).unwrap();
        let back: RotationCurriculumConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
        assert_eq!(
            back.schedule,
            Some(SchedulerConfig::Steps {
                values: vec![1.0, 2.0, 3.0, 4.0],
                pace: Pace::Epoch
            })
        );
    }

    #[test]
    fn drawn_labels_stay_in_the_set_in_play_and_repeat_for_a_seed_and_step() {
        let c = RotationCurriculumConfig::new().init().unwrap();
        // Epoch 2 of 8: angles {0, 1}; 4000 draws split about evenly.
        let draws = c.draw_at(epoch(2, 8), 7, 4000);
        let ones = draws.iter().filter(|&&k| k == 1).count();
        assert!(draws.iter().all(|&k| k < 2));
        assert!((ones as f64 / 4000.0 - 0.5).abs() < 0.03, "{ones}");
        // Last quarter: all four, each about a quarter.
        let all = c.draw_at(epoch(7, 8), 7, 4000);
        for k in 0..4 {
            let share = all.iter().filter(|&&d| d == k).count() as f64 / 4000.0;
            assert!((share - 0.25).abs() < 0.03, "{k}: {share}");
        }
        assert_eq!(c.draw_at(epoch(7, 8), 7, 64), c.draw_at(epoch(7, 8), 7, 64));
        assert_ne!(c.draw_at(epoch(7, 8), 7, 64), c.draw_at(epoch(7, 8), 8, 64));
        // Not the stream of another generator keyed by the same (seed, step), e.g. the
        // augmenter's.
        let mut other = StdRng::seed_from_u64(mix_seed(7, epoch(7, 8).step as u64));
        assert_ne!(
            c.draw_at(epoch(7, 8), 7, 64),
            c.draw(epoch(7, 8), &mut other, 64)
        );
        // Labels match angles: rotating by the drawn label gives the drawn rotation.
        let ks = c.draw_at(epoch(7, 8), 3, 6);
        let x = ramp(6, 1, 3, 3);
        let rotated = values(crate::augment::rotate::rotate_k(x.clone(), &ks));
        for (n, &k) in ks.iter().enumerate() {
            let one = x.clone().narrow(0, n, 1);
            assert_eq!(
                rotated[n * 9..(n + 1) * 9],
                values(rot90(one, k))[..],
                "image {n}"
            );
        }
    }

    #[test]
    fn square_boxes_are_centred_and_moved_inside() {
        let b = CropBox {
            top: 1,
            left: 2,
            height: 2,
            width: 4,
        };
        // Centre (2, 4), side 4: rows 0..4, columns 2..6.
        assert_eq!(
            b.square_in([8, 8]),
            CropBox {
                top: 0,
                left: 2,
                height: 4,
                width: 4
            }
        );
        // A corner box: the square would start at row −1, so it moves to row 0; columns 6..8.
        let corner = CropBox {
            top: 0,
            left: 6,
            height: 1,
            width: 2,
        };
        assert_eq!(
            corner.square_in([8, 8]),
            CropBox {
                top: 0,
                left: 6,
                height: 2,
                width: 2
            }
        );
        // Wider than the image is tall: side clipped to 4.
        let wide = CropBox::whole([4, 6]);
        assert_eq!(
            wide.square_in([4, 6]),
            CropBox {
                top: 0,
                left: 1,
                height: 4,
                width: 4
            }
        );
    }

    #[test]
    fn crop_and_rotate_changes_only_the_square() {
        let x = ramp(2, 2, 6, 6);
        let boxes = [
            CropBox {
                top: 1,
                left: 1,
                height: 2,
                width: 3,
            },
            CropBox {
                top: 3,
                left: 3,
                height: 3,
                width: 3,
            },
        ];
        // Squares: image 0 rows 0..3, columns 1..4 (centre (2, 2.5), side 3); image 1 as given.
        let squares = [(0, 1, 3), (3, 3, 3)];
        for (n, (t, l, s)) in squares.iter().enumerate() {
            let sq = boxes[n].square_in([6, 6]);
            assert_eq!((sq.top, sq.left, sq.height), (*t, *l, *s));
        }
        let ks = [1, 3];
        let out = rotate_in_boxes(x.clone(), &ks, &boxes);
        let before = values(x.clone());
        let after = values(out.clone());
        for (n, &(t, l, s)) in squares.iter().enumerate() {
            for ch in 0..2 {
                for i in 0..6 {
                    for j in 0..6 {
                        let at = ((n * 2 + ch) * 6 + i) * 6 + j;
                        let inside = (t..t + s).contains(&i) && (l..l + s).contains(&j);
                        if !inside {
                            assert_eq!(after[at], before[at], "outside pixel {n} {ch} {i} {j}");
                        }
                    }
                }
            }
            let crop = x.clone().slice([n..n + 1, 0..2, t..t + s, l..l + s]);
            let got = out.clone().slice([n..n + 1, 0..2, t..t + s, l..l + s]);
            assert_eq!(
                values(got),
                values(rot90(crop, ks[n])),
                "inside of image {n}"
            );
        }
        // Pixel (0, 0) of image 0's square after a quarter turn is its (0, 2): value 3 (row 0,
        // column 3 of the ramp).
        assert_eq!(after[1], 3.0);
    }

    #[test]
    fn box_of_one_bright_blob() {
        // At image size: blob of 1s in rows 2..5, columns 3..7, background 0.05 → min–max
        // normalised 0 outside, 1 inside.
        let (h, w) = (8, 10);
        let mut map = vec![0.05; h * w];
        for i in 2..5 {
            for j in 3..7 {
                map[i * w + j] = 1.0;
            }
        }
        let boxes = boxes_from_heatmap_host(&map, [1, h, w], [h, w], 0.1);
        assert_eq!(
            boxes,
            [CropBox {
                top: 2,
                left: 3,
                height: 3,
                width: 4
            }]
        );
        // A 4×4 map with one bright cell (1, 2) upsampled to 8×8: the row weights of input row 1
        // are 0.25, 0.75, 0.75, 0.25 on rows 1..5, the column weights of input column 2 the same
        // on columns 3..7. Above 0.1 (0.25·0.75 = 0.1875 passes): rows 1..5, columns 3..7; above
        // 0.5 only the 0.75·0.75 = 0.5625 block: rows 2..4, columns 4..6 — the cell's footprint.
        let mut small = vec![0.0; 16];
        small[6] = 3.0;
        let device = Default::default();
        let heat = Tensor::<B, 3>::from_data(TensorData::new(small.clone(), [1, 4, 4]), &device);
        assert_eq!(
            boxes_from_heatmap(heat, [8, 8], 0.1),
            [CropBox {
                top: 1,
                left: 3,
                height: 4,
                width: 4
            }]
        );
        assert_eq!(
            boxes_from_heatmap_host(&small, [1, 4, 4], [8, 8], 0.5),
            [CropBox {
                top: 2,
                left: 4,
                height: 2,
                width: 2
            }]
        );
        // A constant map: the whole image.
        assert_eq!(
            boxes_from_heatmap_host(&[2.0; 4], [1, 2, 2], [8, 8], 0.1),
            [CropBox::whole([8, 8])]
        );
    }

    fn cb(top: usize, left: usize, height: usize, width: usize) -> CropBox {
        CropBox {
            top,
            left,
            height,
            width,
        }
    }

    fn geometry(crop: CropBox, flipped: bool, output: [usize; 2]) -> ViewGeometry {
        ViewGeometry {
            crop: crate::base::geometry::CropBox {
                top: crop.top,
                left: crop.left,
                height: crop.height,
                width: crop.width,
            },
            flipped,
            output,
        }
    }

    #[test]
    fn object_boxes_map_through_crop_scale_and_flip() {
        // Crop rows 8..24, columns 4..24 of a 32×32 image, resized to 10×10. Object rows 10..18,
        // columns 0..12: inside the crop rows 2..10 (of 16) and columns 0..8 (of 20). Rows:
        // ⌊2·10/16⌋ = 1 to ⌈10·10/16⌉ = ⌈6.25⌉ = 7; columns: 0 to ⌈8·10/20⌉ = 4.
        let crop = cb(8, 4, 16, 20);
        let object = cb(10, 0, 8, 12);
        assert_eq!(
            box_in_view(&object, &geometry(crop, false, [10, 10])),
            cb(1, 0, 6, 4)
        );
        // Flipped: columns 0..4 of 10 become 6..10.
        assert_eq!(
            box_in_view(&object, &geometry(crop, true, [10, 10])),
            cb(1, 6, 6, 4)
        );
        // Upscaled and rounded outward: a crop of rows 2..6, columns 0..3 resized to 8×4. The
        // object's column 1..2 spans 4/3..8/3 of the output, so columns 1..3; its rows 2..7
        // cover the crop's rows, so all 8 output rows.
        assert_eq!(
            box_in_view(&cb(2, 1, 5, 1), &geometry(cb(2, 0, 4, 3), false, [8, 4])),
            cb(0, 1, 8, 2)
        );
        // No crop (the whole image at its size), no flip: the box itself.
        let b = cb(3, 5, 7, 2);
        assert_eq!(
            box_in_view(&b, &geometry(CropBox::whole([16, 12]), false, [16, 12])),
            b
        );
        // Without a crop but flipped: columns 1..4 of 12 become 8..11.
        assert_eq!(
            box_in_view(
                &cb(0, 1, 2, 3),
                &geometry(CropBox::whole([16, 12]), true, [16, 12])
            ),
            cb(0, 8, 2, 3)
        );
    }

    #[test]
    fn an_object_the_crop_misses_gives_the_whole_view() {
        let crop = cb(8, 4, 16, 20);
        // Rows 0..5 end before the crop's row 8.
        assert_eq!(
            box_in_view(&cb(0, 0, 5, 30), &geometry(crop, false, [10, 12])),
            CropBox::whole([10, 12])
        );
        // Columns 24..32 start where the crop's columns end (4 + 20 = 24): touching is missing.
        assert_eq!(
            box_in_view(&cb(8, 24, 4, 8), &geometry(crop, true, [10, 12])),
            CropBox::whole([10, 12])
        );
    }

    /// Through the real resize: a view pixel that is at least half object (bilinear weight of
    /// the object's pixels ≥ 1/2 along both axes) lies inside the mapped box, for random crops
    /// (down- and upscaling) and flips.
    #[test]
    fn mapped_boxes_cover_the_object_in_resized_views() {
        use crate::augment::crop::{resized_crop, RandomResizedCrop};
        use crate::augment::flip::hflip_where;
        let (h, w) = (20, 24);
        let mut rng = StdRng::seed_from_u64(17);
        let crop = RandomResizedCrop::new(16);
        let n = 40;
        let crops = crop.sample(&mut rng, n, h, w);
        let flips: Vec<bool> = (0..n).map(|_| rng.random_bool(0.5)).collect();
        let objects: Vec<CropBox> = (0..n)
            .map(|_| {
                let top = rng.random_range(0..h);
                let left = rng.random_range(0..w);
                cb(
                    top,
                    left,
                    rng.random_range(1..=h - top),
                    rng.random_range(1..=w - left),
                )
            })
            .collect();
        let mut mask = vec![0.0f64; n * h * w];
        for (i, o) in objects.iter().enumerate() {
            for r in o.top..o.top + o.height {
                for c in o.left..o.left + o.width {
                    mask[(i * h + r) * w + c] = 1.0;
                }
            }
        }
        let x = Tensor::<B, 4>::from_data(TensorData::new(mask, [n, 1, h, w]), &Default::default());
        let views: Vec<f64> = hflip_where(resized_crop(x, &crops, 16, 16), &flips)
            .into_data()
            .to_vec()
            .unwrap();
        let mut checked = 0;
        for i in 0..n {
            let g = ViewGeometry {
                crop: crops[i],
                flipped: flips[i],
                output: [16, 16],
            };
            let b = box_in_view(&objects[i], &g);
            for r in 0..16 {
                for c in 0..16 {
                    if views[(i * 16 + r) * 16 + c] > 0.5 + 1e-4 {
                        checked += 1;
                        assert!(
                            (b.top..b.top + b.height).contains(&r)
                                && (b.left..b.left + b.width).contains(&c),
                            "image {i}: view pixel ({r}, {c}) is object but outside {b:?}"
                        );
                    }
                }
            }
        }
        assert!(checked > 100, "{checked} object pixels checked");
    }

    #[test]
    fn boxes_are_recomputed_at_the_start_of_each_quarter() {
        assert_eq!(box_update_epochs(8), [0, 2, 4, 6]);
        assert_eq!(box_update_epochs(6), [0, 1, 3, 4]);
        assert_eq!(box_update_epochs(10), [0, 2, 5, 7]);
        // Short runs: fewer computations, never the same epoch twice.
        assert_eq!(box_update_epochs(1), [0]);
        assert_eq!(box_update_epochs(2), [0, 1]);
        assert_eq!(box_update_epochs(3), [0, 1, 2]);
        let in_use: Vec<usize> = (0..6).map(|e| box_epoch_for(e, 6)).collect();
        assert_eq!(in_use, [0, 1, 1, 3, 4, 4]);
    }

    #[test]
    fn stored_boxes_are_checked_against_the_training_set() {
        let boxes = ObjectBoxes {
            epoch: 2,
            image_size: [8, 8],
            boxes: vec![cb(0, 0, 8, 8), cb(2, 3, 4, 5)],
        };
        assert!(boxes.check(2, [8, 8]).is_ok());
        assert!(boxes.check(3, [8, 8]).unwrap_err().contains("3 of [8, 8]"));
        assert!(boxes.check(2, [8, 9]).is_err());
        let mut outside = boxes.clone();
        outside.boxes[1] = cb(2, 4, 4, 5);
        assert!(outside
            .check(2, [8, 8])
            .unwrap_err()
            .contains("object box 1"));
        let json = serde_json::to_string(&boxes).unwrap();
        assert_eq!(serde_json::from_str::<ObjectBoxes>(&json).unwrap(), boxes);
    }

    /// A backbone with a map gets one box per image from its heat maps; one without gets none.
    #[test]
    fn boxes_of_a_batch_come_from_the_feature_map() {
        use burn::module::Module;
        /// The map is the input itself (one channel), the features its mean.
        #[derive(Module, Clone, Debug)]
        struct Identity {
            with_map: bool,
        }
        impl<B: Backend> Backbone<B> for Identity {
            fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
                let [n, c, _, _] = images.dims();
                images.mean_dim(3).mean_dim(2).reshape([n, c])
            }
            fn feature_dim(&self) -> usize {
                1
            }
            fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
                self.with_map.then_some(images)
            }
        }
        // Image 0: a bright 2×3 block at rows 1..3, columns 2..5 of 6×6; image 1: constant.
        let mut v = vec![0.0; 72];
        for r in 1..3 {
            for c in 2..5 {
                v[r * 6 + c] = 1.0;
            }
        }
        for x in &mut v[36..] {
            *x = 0.5;
        }
        let x = Tensor::<B, 4>::from_data(TensorData::new(v, [2, 1, 6, 6]), &Default::default());
        assert_eq!(
            object_boxes_of(&Identity { with_map: true }, x.clone(), 0.1),
            Some(vec![cb(1, 2, 2, 3), CropBox::whole([6, 6])])
        );
        assert_eq!(object_boxes_of(&Identity { with_map: false }, x, 0.1), None);
    }

    #[test]
    fn channel_mean_of_a_feature_map() {
        // Two channels of a 1×2 map: (1, 3) and (5, 7) → (3, 5).
        let f = Tensor::<B, 4>::from_data(
            TensorData::new(vec![1.0, 3.0, 5.0, 7.0], [1, 2, 1, 2]),
            &Default::default(),
        );
        let m: Vec<f64> = channel_mean(f).into_data().iter::<f64>().collect();
        assert_eq!(m, [3.0, 5.0]);
    }
}
