//! The VICRegL loss (documented on `VicRegLLoss`).

use burn::prelude::*;

use crate::base::error::{in_range, non_negative, positive, ConfigError};

/// Configuration of [`VicRegLLoss`] (lightly's `VICRegLLoss` defaults).
#[derive(Config, Debug)]
pub struct VicRegLLossConfig {
    /// Weight `λ` of the invariance terms (the paper's and lightly's 25).
    #[config(default = 25.0)]
    pub invariance: f64,
    /// Weight `μ` of the variance terms (25).
    #[config(default = 25.0)]
    pub variance: f64,
    /// Weight `ν` of the global covariance term (1); the local terms take `ν / 2` (lightly's
    /// factor: the authors' VICRegL code halves VICReg's covariance).
    #[config(default = 1.0)]
    pub covariance: f64,
    /// `α`: the loss is `α·global + (1 − α)·local` (the paper's 0.75 for a ResNet).
    #[config(default = 0.75)]
    pub alpha: f64,
    /// `ε` inside the standard deviation (1e-4).
    #[config(default = 1e-4)]
    pub epsilon: f64,
    /// The matches kept by each nearest-neighbour search: `[first, second]` for the search
    /// from the first view of a pair into the second and back (lightly's and the authors' code:
    /// 20 and 4, whatever the views; the paper says 20 for global and 4 for local views). Each is
    /// capped at the searching view's number of positions.
    #[config(default = "[20, 4]")]
    pub num_matches: [usize; 2],
}

impl VicRegLLossConfig {
    /// Validates the hyperparameters and builds the loss.
    ///
    /// # Errors
    /// A negative or non-finite weight, `α` outside `[0, 1]`, `ε ≤ 0` or a zero match count,
    /// named.
    pub fn init(&self) -> Result<VicRegLLoss, ConfigError> {
        non_negative("invariance", self.invariance)?;
        non_negative("variance", self.variance)?;
        non_negative("covariance", self.covariance)?;
        in_range("alpha", self.alpha, 0.0, 1.0, false)?;
        positive("epsilon", self.epsilon)?;
        if self.num_matches.contains(&0) {
            return Err(ConfigError::new(
                "num_matches",
                format!("must both be at least 1, got {:?}", self.num_matches),
            ));
        }
        Ok(VicRegLLoss {
            weights: [self.invariance, self.variance, self.covariance],
            alpha: self.alpha,
            epsilon: self.epsilon,
            num_matches: self.num_matches,
        })
    }
}

/// One view of a batch as [`VicRegLLoss`] reads it: its images' global projections, their
/// local projections on the feature map's positions, and where each position lies in the input
/// image.
#[derive(Debug, Clone)]
pub struct VicRegLView<B: Backend> {
    /// The global projections, `[N, D]`.
    pub global: Tensor<B, 2>,
    /// The local projections, `[N, P, E]`: the feature map's `P = h·w` positions in row-major
    /// order (position `r·w + c`).
    pub local: Tensor<B, 3>,
    /// Each position's location `[x, y]` in the input image, `N·P` of them (image `n`'s
    /// position `p` at `n·P + p`), in any unit common to the views (lightly's grids: pixels).
    pub grid: Vec<[f64; 2]>,
}

/// The VICRegL loss of a batch ([`VicRegLLoss::terms`]): the total and its two parts.
#[derive(Debug, Clone)]
pub struct VicRegLTerms<B: Backend> {
    /// `α·global + (1 − α)·local`, `[1]`.
    pub loss: Tensor<B, 1>,
    /// The global part, `λ·s + μ·v + ν·c` on the global projections, `[1]`.
    pub global: Tensor<B, 1>,
    /// The local part, the mean over the view pairs of the matched local projections' VICReg
    /// losses, `[1]`.
    pub local: Tensor<B, 1>,
}

/// The VICRegL loss. Build it with [`VicRegLLossConfig::init`].
///
/// The VICRegL loss (Bardes, Ponce & LeCun, "VICRegL: Self-Supervised Learning of Local Visual
/// Features", NeurIPS 2022, <https://arxiv.org/abs/2210.01571>; see `docs/methods.md#vicregl`),
/// as lightly 1.6's `VICRegLLoss` computes it (which follows the authors' code):
///
/// ```text
/// L      = α·L_global + (1 − α)·L_local
/// L_global = λ·mean_{(a,b)} mse(z_a, z_b) + μ·mean_v v(z_v) + ν·mean_v c(z_v)
///            (pairs: every ordered pair of global views a ≠ b, and every global a with every
///             local view b; v, c over every view)
/// L_local  = mean_{(a,b)} [ ℓ_feat(a, b) + ℓ_loc(a, b) ]        (the same pairs)
/// ℓ(a, b)  = ½·[ V(a → b, k₁) + V(b → a, k₂) ]
/// V(a → b, k) = VICReg(A, B') with weights λ, μ, ν/2 on the k matches of a in b:
///            each position of a's map paired with its nearest position of b's map (by the
///            L2 distance of the local projections for ℓ_feat, of the grid locations for ℓ_loc),
///            and the k pairs of smallest distance kept, in increasing distance: A, B' [N, k, E]
/// VICReg(A, B) = λ·mse(A, B) + μ·[v(A) + v(B)]/2 + ν/2·[c(A) + c(B)]
/// v(X)   = mean_{k,e} max(0, 1 − √(Var_n X[·,k,e] + ε))           (unbiased variance)
/// c(X)   = mean_k Σ_{e≠f} Cov_n(X[·,k,·])_ef² / E                 (Cov with N − 1)
/// ```
///
/// `k₁, k₂` are [`VicRegLLossConfig::num_matches`], each capped at the searching view's
/// positions. The matches carry no gradient; the matched projections do. Ties go to the lowest
/// index: a position's nearest candidate is the first of equally near ones, and equally near
/// positions are kept in their order (lightly's `torch.topk` leaves the order of ties
/// unspecified, so lightly and this loss agree exactly wherever no two distances tie).
#[derive(Debug, Clone)]
pub struct VicRegLLoss {
    weights: [f64; 3],
    alpha: f64,
    epsilon: f64,
    num_matches: [usize; 2],
}

impl VicRegLLoss {
    /// The loss of the global views `global_views` and the local views `local_views`.
    ///
    /// # Shapes
    /// - every view: `global` `[N, D]`, `local` `[N, P_v, E]`, `grid` `N·P_v` points; output
    ///   `[1]`
    ///
    /// # Panics
    /// Without a global view, with fewer than two views in all, a batch of fewer than two
    /// images, or views whose shapes do not fit.
    pub fn forward<B: Backend>(
        &self,
        global_views: &[VicRegLView<B>],
        local_views: &[VicRegLView<B>],
    ) -> Tensor<B, 1> {
        self.terms(global_views, local_views).loss
    }

    /// The loss and its global and local parts ([`VicRegLLoss::forward`]).
    pub fn terms<B: Backend>(
        &self,
        global_views: &[VicRegLView<B>],
        local_views: &[VicRegLView<B>],
    ) -> VicRegLTerms<B> {
        self.terms_gathered(global_views, local_views, &|rows| rows)
    }

    /// [`VicRegLLoss::terms`] with every statistic over the batch taken on `gather(rows)`: the
    /// global projections and the matched local projections (matched image by image first),
    /// each as `[N, ·]` rows, handed through `gather` before the invariance, variance and
    /// covariance terms. On replicas `gather` is the replica's gather (`[N, ·]` → `[W·N, ·]`),
    /// and every replica computes the one-device loss of the global batch; on one device it is
    /// the identity ([`VicRegLLoss::terms`]).
    ///
    /// # Panics
    /// As [`VicRegLLoss::forward`].
    pub fn terms_gathered<B: Backend>(
        &self,
        global_views: &[VicRegLView<B>],
        local_views: &[VicRegLView<B>],
        gather: &dyn Fn(Tensor<B, 2>) -> Tensor<B, 2>,
    ) -> VicRegLTerms<B> {
        check_views(global_views, local_views);
        let [lambda, mu, nu] = self.weights;
        let eps = self.epsilon;
        let views: Vec<&VicRegLView<B>> = global_views.iter().chain(local_views).collect();

        // The global part: the invariance over the pairs, the variance and covariance over the
        // views.
        let z: Vec<Tensor<B, 3>> = views
            .iter()
            .map(|v| gather(v.global.clone()).unsqueeze_dim(1))
            .collect();
        let pairs = pairs(global_views.len(), local_views.len());
        let invariance = mean(pairs.iter().map(|&(a, b)| mse(z[a].clone(), z[b].clone())));
        let variance = mean(z.iter().map(|z| variance_term(z.clone(), eps)));
        let covariance = mean(z.iter().map(|z| covariance_term(z.clone())));
        let global =
            invariance.mul_scalar(lambda) + variance.mul_scalar(mu) + covariance.mul_scalar(nu);

        // The local part: each pair's matches by the projections and by the locations.
        let local_weights = [lambda, mu, 0.5 * nu];
        let vicreg = |(x, y): (Tensor<B, 3>, Tensor<B, 3>)| {
            local_vicreg(
                gather_rows(gather, x),
                gather_rows(gather, y),
                local_weights,
                eps,
            )
        };
        let local = mean(pairs.iter().map(|&(a, b)| {
            let (va, vb) = (views[a], views[b]);
            let [k1, k2] = self.matches(va, vb);
            let [by_features_ab, by_features_ba] = feature_matches(&va.local, &vb.local, [k1, k2]);
            let by_location_ab = location_matches(va, vb, k1);
            let by_location_ba = location_matches(vb, va, k2);
            let features = (vicreg(by_features_ab) + vicreg(by_features_ba)).mul_scalar(0.5);
            let locations = (vicreg(by_location_ab) + vicreg(by_location_ba)).mul_scalar(0.5);
            features + locations
        }));
        let alpha = self.alpha;
        VicRegLTerms {
            loss: global.clone().mul_scalar(alpha) + local.clone().mul_scalar(1.0 - alpha),
            global,
            local,
        }
    }

    /// The match counts of the pair `(a, b)`: `a → b` capped at `a`'s positions, `b → a` at
    /// `b`'s.
    fn matches<B: Backend>(&self, a: &VicRegLView<B>, b: &VicRegLView<B>) -> [usize; 2] {
        [
            self.num_matches[0].min(a.local.dims()[1]),
            self.num_matches[1].min(b.local.dims()[1]),
        ]
    }
}

/// The pairs of view indices the loss compares (global views first, then local views): every
/// ordered pair of distinct global views, and after each global view its pairs with every local
/// view, in lightly's order.
fn pairs(globals: usize, locals: usize) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for a in 0..globals {
        pairs.extend((0..globals).filter(|&b| b != a).map(|b| (a, b)));
        pairs.extend((0..locals).map(|l| (a, globals + l)));
    }
    pairs
}

/// The mean of `[1]` tensors.
fn mean<B: Backend>(terms: impl Iterator<Item = Tensor<B, 1>>) -> Tensor<B, 1> {
    Tensor::cat(terms.collect(), 0).mean()
}

/// `[N, k, E]` rows through `gather` as `[N, k·E]` and back.
fn gather_rows<B: Backend>(
    gather: &dyn Fn(Tensor<B, 2>) -> Tensor<B, 2>,
    x: Tensor<B, 3>,
) -> Tensor<B, 3> {
    let [n, k, e] = x.dims();
    let rows = gather(x.reshape([n, k * e]));
    let total = rows.dims()[0];
    rows.reshape([total, k, e])
}

/// `mean (x − y)²` over every entry.
fn mse<B: Backend>(x: Tensor<B, 3>, y: Tensor<B, 3>) -> Tensor<B, 1> {
    (x - y).powi_scalar(2).mean()
}

/// VICReg's loss of two `[N, k, E]` tensors, its statistics over `N` for each of the `k`
/// matches: `λ·mse + μ·[v(x) + v(y)]/2 + ν·[c(x) + c(y)]` with `weights = [λ, μ, ν]` (lightly's
/// `VICRegLoss` on three-dimensional inputs).
fn local_vicreg<B: Backend>(
    x: Tensor<B, 3>,
    y: Tensor<B, 3>,
    [lambda, mu, nu]: [f64; 3],
    eps: f64,
) -> Tensor<B, 1> {
    let invariance = mse(x.clone(), y.clone());
    let variance = (variance_term(x.clone(), eps) + variance_term(y.clone(), eps)).mul_scalar(0.5);
    let covariance = covariance_term(x) + covariance_term(y);
    invariance.mul_scalar(lambda) + variance.mul_scalar(mu) + covariance.mul_scalar(nu)
}

/// `mean_{k,e} max(0, 1 − √(Var_n x[·,k,e] + ε))` with the unbiased variance, of `[N, K, E]`.
/// (The loss multiplies by inverses rather than dividing by scalars: upstream burn-autodiff
/// 0.21 back-propagates a `div_scalar` through its divisor's f32 inverse; patched in this
/// workspace, not in one that embeds the crate.)
fn variance_term<B: Backend>(x: Tensor<B, 3>, eps: f64) -> Tensor<B, 1> {
    let n = x.dims()[0];
    let centred = x.clone() - x.mean_dim(0);
    let variance = centred
        .powi_scalar(2)
        .sum_dim(0)
        .mul_scalar(1.0 / (n - 1) as f64);
    (variance.add_scalar(eps).sqrt().neg() + 1.0)
        .clamp_min(0.0)
        .mean()
}

/// `mean_k Σ_{e≠f} Cov_n(x[·,k,·])_ef² / E` (`Cov` with `N − 1`) of `[N, K, E]`, as
/// `(Σ Cov² − Σ_e Var_e²) / E` (no mask to build).
fn covariance_term<B: Backend>(x: Tensor<B, 3>) -> Tensor<B, 1> {
    let [n, k, e] = x.dims();
    let centred = (x.clone() - x.mean_dim(0)).swap_dims(0, 1); // [K, N, E]
    let scale = 1.0 / (n - 1) as f64;
    let cov = centred
        .clone()
        .swap_dims(1, 2)
        .matmul(centred.clone())
        .mul_scalar(scale); // [K, E, E]
    let variance = centred.powi_scalar(2).sum_dim(1).mul_scalar(scale); // [K, 1, E]
    (cov.powi_scalar(2).sum() - variance.powi_scalar(2).sum()).mul_scalar(1.0 / (k * e) as f64)
}

/// The matches of `a` in `b` and of `b` in `a` by the L2 distance of the local projections
/// (`[N, Pa, E]`, `[N, Pb, E]`), `k[0]` and `k[1]` of them: the matched rows `(A, B')`, each
/// `[N, k, E]`. The distances are the detached projections'; the rows keep their gradient.
#[allow(clippy::type_complexity)]
fn feature_matches<B: Backend>(
    a: &Tensor<B, 3>,
    b: &Tensor<B, 3>,
    k: [usize; 2],
) -> [(Tensor<B, 3>, Tensor<B, 3>); 2] {
    let distances = squared_distances(a.clone().detach(), b.clone().detach());
    let (input_ab, candidate_ab) = nearest_selection(distances.clone(), k[0]);
    let (input_ba, candidate_ba) = nearest_selection(distances.swap_dims(1, 2), k[1]);
    [
        (input_ab.matmul(a.clone()), candidate_ab.matmul(b.clone())),
        (input_ba.matmul(b.clone()), candidate_ba.matmul(a.clone())),
    ]
}

/// `‖a_i − b_j‖²` of `[N, Pa, E]` and `[N, Pb, E]`, `[N, Pa, Pb]`.
fn squared_distances<B: Backend>(a: Tensor<B, 3>, b: Tensor<B, 3>) -> Tensor<B, 3> {
    let a_norms = a.clone().powi_scalar(2).sum_dim(2); // [N, Pa, 1]
    let b_norms = b.clone().powi_scalar(2).sum_dim(2).swap_dims(1, 2); // [N, 1, Pb]
    let cross = a.matmul(b.swap_dims(1, 2));
    a_norms + b_norms - cross.mul_scalar(2.0)
}

/// The `k` matches of `distances` (`[N, Pa, Pb]`, input positions by candidate positions) as
/// one-hot selections `[N, k, Pa]` (the inputs kept, in increasing distance to their nearest
/// candidate) and `[N, k, Pb]` (each one's nearest candidate), with ties to the lowest index,
/// on the device (no sort: burn 0.21 has none on the GPU).
fn nearest_selection<B: Backend>(
    distances: Tensor<B, 3>,
    k: usize,
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let [n, pa, pb] = distances.dims();
    let device = distances.device();
    let positions = |count: usize, shape: [usize; 3]| {
        let values: Vec<f64> = (0..count).map(|i| i as f64).collect();
        Tensor::<B, 3>::from_data(TensorData::new(values, shape), &device)
    };
    // Each input's nearest candidate: the lowest index among those at the smallest distance.
    let nearest = distances.clone().min_dim(2); // [N, Pa, 1]
    let at_min = distances.equal(nearest.clone().expand([n, pa, pb]));
    let candidates = positions(pb, [1, 1, pb]).expand([n, pa, pb]);
    let first = candidates
        .clone()
        .mask_where(at_min.bool_not(), candidates.clone().add_scalar(pb as f64))
        .min_dim(2); // [N, Pa, 1]
    let candidate_of = candidates.equal(first.expand([n, pa, pb])).float(); // [N, Pa, Pb]
                                                                            // Each input's rank among the inputs: the inputs nearer than it, and the equally near ones
                                                                            // of a lower index.
    let d = nearest.reshape([n, 1, pa]);
    let others = d.clone().expand([n, pa, pa]); // [n, i, i'] = d_i'
    let own = d.reshape([n, pa, 1]).expand([n, pa, pa]); // [n, i, i'] = d_i
    let lower_index: Vec<f64> = (0..pa * pa)
        .map(|e| f64::from(u8::from(e % pa < e / pa)))
        .collect();
    let lower_index = Tensor::<B, 3>::from_data(TensorData::new(lower_index, [1, pa, pa]), &device);
    let rank = others.clone().lower(own.clone()).float()
        + others.equal(own).float() * lower_index.expand([n, pa, pa]);
    let rank = rank.sum_dim(2).reshape([n, 1, pa]); // [N, 1, Pa]
    let input = rank
        .expand([n, k, pa])
        .equal(positions(k, [1, k, 1]).expand([n, k, pa]))
        .float(); // [N, k, Pa]
    let candidate = input.clone().matmul(candidate_of);
    (input, candidate)
}

/// The `k` matches of `a` in `b` by their grid locations (found on the host), as the matched
/// local projections `(A, B')`, `[N, k, E]` each.
fn location_matches<B: Backend>(
    a: &VicRegLView<B>,
    b: &VicRegLView<B>,
    k: usize,
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let [n, pa, _] = a.local.dims();
    let pb = b.local.dims()[1];
    let (inputs, candidates) = nearest_locations(&a.grid, &b.grid, n, k);
    let device = a.local.device();
    // The indices go to the device (`n·k` values) and become one-hot rows there.
    let one_hot = |indices: Vec<usize>, p: usize| {
        let indices: Vec<f64> = indices.into_iter().map(|i| i as f64).collect();
        let indices = Tensor::<B, 3>::from_data(TensorData::new(indices, [n, k, 1]), &device);
        let positions: Vec<f64> = (0..p).map(|i| i as f64).collect();
        let positions = Tensor::<B, 3>::from_data(TensorData::new(positions, [1, 1, p]), &device);
        indices
            .expand([n, k, p])
            .equal(positions.expand([n, k, p]))
            .float()
    };
    (
        one_hot(inputs, pa).matmul(a.local.clone()),
        one_hot(candidates, pb).matmul(b.local.clone()),
    )
}

/// For each of `n` images, the `k` positions of grid `a` (`n·Pa` points) nearest to grid `b`
/// (`n·Pb` points) and the nearest position of `b` to each: `(inputs, candidates)`, `n·k`
/// indices each (image `i`'s at `i·k ..`), the inputs in increasing distance to their nearest
/// candidate. Squared Euclidean distances; ties to the lowest index (a candidate replaces the
/// nearest only when strictly nearer; a stable sort keeps equally near inputs in order).
pub(crate) fn nearest_locations(
    a: &[[f64; 2]],
    b: &[[f64; 2]],
    n: usize,
    k: usize,
) -> (Vec<usize>, Vec<usize>) {
    let (pa, pb) = (a.len() / n, b.len() / n);
    assert!(k <= pa, "VICRegL: {k} matches of {pa} positions");
    let mut inputs = Vec::with_capacity(n * k);
    let mut candidates = Vec::with_capacity(n * k);
    for image in 0..n {
        let (a, b) = (
            &a[image * pa..(image + 1) * pa],
            &b[image * pb..(image + 1) * pb],
        );
        let nearest: Vec<(f64, usize)> = a
            .iter()
            .map(|p| {
                let mut best = (f64::INFINITY, 0);
                for (j, q) in b.iter().enumerate() {
                    let d = (p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2);
                    if d < best.0 {
                        best = (d, j);
                    }
                }
                best
            })
            .collect();
        let mut order: Vec<usize> = (0..pa).collect();
        order.sort_by(|&i, &j| nearest[i].0.total_cmp(&nearest[j].0));
        for &i in &order[..k] {
            inputs.push(i);
            candidates.push(nearest[i].1);
        }
    }
    (inputs, candidates)
}

/// The views' shapes fit together; otherwise a panic naming what does not.
fn check_views<B: Backend>(global_views: &[VicRegLView<B>], local_views: &[VicRegLView<B>]) {
    assert!(!global_views.is_empty(), "VICRegL: no global view");
    assert!(
        global_views.len() + local_views.len() >= 2,
        "VICRegL: one view has nothing to be compared with"
    );
    let [n, d] = global_views[0].global.dims();
    let e = global_views[0].local.dims()[2];
    assert!(n >= 2, "VICRegL: a batch of {n} has no variance");
    for (kind, views) in [("global", global_views), ("local", local_views)] {
        for (v, view) in views.iter().enumerate() {
            let [nl, p, el] = view.local.dims();
            assert_eq!(
                (view.global.dims(), [nl, el]),
                ([n, d], [n, e]),
                "VICRegL: {kind} view {v}: global {:?} and local {:?}, the first global view's \
                 [{n}, {d}] and [{n}, P, {e}]",
                view.global.dims(),
                view.local.dims()
            );
            assert_eq!(
                view.grid.len(),
                n * p,
                "VICRegL: {kind} view {v}: {} grid points for {n} images of {p} positions",
                view.grid.len()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    fn host<const D: usize>(x: Tensor<B, D>) -> Vec<f64> {
        x.into_data().to_vec().unwrap()
    }

    fn tensor3(values: Vec<f64>, shape: [usize; 3]) -> Tensor<B, 3> {
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }

    /// The brute force the matching must equal: every input's nearest candidate by a full
    /// sort of `(distance, index)`, then the inputs sorted by `(distance, index)`.
    fn brute_force(a: &[Vec<f64>], b: &[Vec<f64>], k: usize) -> Vec<(usize, usize)> {
        let dist =
            |p: &[f64], q: &[f64]| p.iter().zip(q).map(|(x, y)| (x - y).powi(2)).sum::<f64>();
        let mut nearest: Vec<(f64, usize, usize)> = a
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut all: Vec<(f64, usize)> =
                    b.iter().enumerate().map(|(j, q)| (dist(p, q), j)).collect();
                all.sort_by(|x, y| x.partial_cmp(y).unwrap());
                (all[0].0, i, all[0].1)
            })
            .collect();
        nearest.sort_by(|x, y| x.partial_cmp(y).unwrap());
        nearest[..k].iter().map(|&(_, i, j)| (i, j)).collect()
    }

    /// The location matches equal the brute force on grids with many exact ties (integer
    /// points, two images): ties to the lowest index, the inputs in increasing distance.
    #[test]
    fn location_matches_equal_a_brute_force_with_ties() {
        // Image 0: a 3 × 3 grid and the same grid moved by (1, 0): every distance 1 ties.
        // Image 1: a and b interleaved, with equal distances between several pairs.
        let grid = |dx: f64, dy: f64| -> Vec<[f64; 2]> {
            (0..9)
                .map(|p| [(p % 3) as f64 * 2.0 + dx, (p / 3) as f64 * 2.0 + dy])
                .collect()
        };
        let a: Vec<[f64; 2]> = [grid(0.0, 0.0), grid(0.0, 0.0)].concat();
        let b: Vec<[f64; 2]> = [grid(1.0, 0.0), grid(1.0, 1.0)].concat();
        for k in [1, 4, 9] {
            let (inputs, candidates) = nearest_locations(&a, &b, 2, k);
            for image in 0..2 {
                let rows = |g: &[[f64; 2]]| -> Vec<Vec<f64>> {
                    g[image * 9..(image + 1) * 9]
                        .iter()
                        .map(|p| p.to_vec())
                        .collect()
                };
                let expected = brute_force(&rows(&a), &rows(&b), k);
                let got: Vec<(usize, usize)> = (0..k)
                    .map(|r| (inputs[image * k + r], candidates[image * k + r]))
                    .collect();
                assert_eq!(got, expected, "image {image}, k = {k}");
            }
        }
        // By hand, image 0: every point of a is at distance 1 from its nearest point of b, so
        // the inputs keep their order; (0, 0) is nearest to b's (1, 0) (index 0), (2, 0) to
        // (1, 0) and (3, 0) alike (the first, 0), (4, 0) to (3, 0) and (5, 0) (index 1).
        let (inputs, candidates) = nearest_locations(&a, &b, 2, 3);
        assert_eq!(inputs[..3], [0, 1, 2]);
        assert_eq!(candidates[..3], [0, 0, 1]);
    }

    /// The device's matching by the projections equals the brute force, ties included
    /// (features with repeated rows), in both directions of a pair.
    #[test]
    fn feature_matches_equal_a_brute_force_with_ties() {
        let (n, pa, pb, e) = (2, 5, 4, 2);
        let a: Vec<f64> = (0..n * pa * e)
            .map(|i| ((i * 7) % 5) as f64 - 2.0)
            .collect();
        let b: Vec<f64> = (0..n * pb * e)
            .map(|i| ((i * 3) % 4) as f64 - 1.0)
            .collect();
        let (ta, tb) = (
            tensor3(a.clone(), [n, pa, e]),
            tensor3(b.clone(), [n, pb, e]),
        );
        for k in [[1, 1], [3, 2], [5, 4]] {
            let [(xa, ya), (xb, yb)] = feature_matches(&ta, &tb, k);
            let rows = |v: &[f64], image: usize, p: usize| -> Vec<Vec<f64>> {
                v[image * p * e..(image + 1) * p * e]
                    .chunks(e)
                    .map(|r| r.to_vec())
                    .collect()
            };
            for (x, y, input, cand, kk) in [
                (xa.clone(), ya.clone(), (&a, pa), (&b, pb), k[0]),
                (xb.clone(), yb.clone(), (&b, pb), (&a, pa), k[1]),
            ] {
                let (x, y) = (host(x), host(y));
                for image in 0..n {
                    let ri = rows(input.0, image, input.1);
                    let rc = rows(cand.0, image, cand.1);
                    for (r, (i, j)) in brute_force(&ri, &rc, kk).into_iter().enumerate() {
                        let at = (image * kk + r) * e;
                        assert_eq!(x[at..at + e], ri[i][..], "k {k:?} image {image} rank {r}");
                        assert_eq!(y[at..at + e], rc[j][..], "k {k:?} image {image} rank {r}");
                    }
                }
            }
        }
    }

    /// Two global views and no local view: the global part is VICReg's with the pair counted
    /// both ways and the variance and covariance averaged (so VICReg's 25/25/1 loss with the
    /// covariance halved); the local part, on one position per image (its only match), is the
    /// same VICReg loss of the local projections with ν/2, taken twice (by projections and by
    /// locations).
    #[test]
    fn one_position_reduces_to_vicreg() {
        let device = Default::default();
        let z1 = Tensor::<B, 2>::from_floats([[1.0, 0.0], [-1.0, 0.0], [0.5, 2.0]], &device);
        let z2 = Tensor::<B, 2>::from_floats([[1.0, 1.0], [-1.0, -1.0], [0.0, 0.5]], &device);
        let l1 = Tensor::<B, 3>::from_floats([[[0.3, 1.0]], [[2.0, -1.0]], [[0.1, 0.2]]], &device);
        let l2 = Tensor::<B, 3>::from_floats([[[1.3, 0.0]], [[0.0, 1.5]], [[-0.4, 0.2]]], &device);
        let view = |g: &Tensor<B, 2>, l: &Tensor<B, 3>, x: f64| VicRegLView {
            global: g.clone(),
            local: l.clone(),
            grid: vec![[x, 0.0]; 3],
        };
        let views = [view(&z1, &l1, 0.0), view(&z2, &l2, 5.0)];
        let loss = VicRegLLossConfig::new().init().unwrap();
        let terms = loss.terms::<B>(&views, &[]);
        let vicreg = |w: [f64; 3], a: Tensor<B, 2>, b: Tensor<B, 2>| -> f64 {
            let [l, m, v] = w;
            let t = crate::loss::VicRegLossConfig::new()
                .with_invariance(l)
                .with_variance(m)
                .with_covariance(v)
                .init()
                .unwrap()
                .terms(a, b);
            host(t.loss)[0]
        };
        let global = vicreg([25.0, 25.0, 0.5], z1.clone(), z2.clone());
        let local_pair = vicreg([25.0, 25.0, 0.5], l1.reshape([3, 2]), l2.reshape([3, 2]));
        let (g, l, total) = (
            host(terms.global)[0],
            host(terms.local)[0],
            host(terms.loss)[0],
        );
        assert!((g - global).abs() < 1e-12, "{g} {global}");
        assert!((l - 2.0 * local_pair).abs() < 1e-12, "{l} {local_pair}");
        assert!((total - (0.75 * g + 0.25 * l)).abs() < 1e-12);
    }

    #[test]
    fn the_pairs_are_lightlys() {
        assert_eq!(pairs(2, 0), [(0, 1), (1, 0)]);
        assert_eq!(
            pairs(2, 2),
            [(0, 1), (0, 2), (0, 3), (1, 0), (1, 2), (1, 3)]
        );
    }

    #[test]
    fn rejects_bad_settings_by_name() {
        let field = |c: VicRegLLossConfig| c.init().unwrap_err().field;
        assert_eq!(field(VicRegLLossConfig::new().with_alpha(1.5)), "alpha");
        assert_eq!(
            field(VicRegLLossConfig::new().with_variance(-1.0)),
            "variance"
        );
        assert_eq!(field(VicRegLLossConfig::new().with_epsilon(0.0)), "epsilon");
        assert_eq!(
            field(VicRegLLossConfig::new().with_num_matches([0, 4])),
            "num_matches"
        );
    }
}
