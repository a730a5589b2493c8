//! k-means with k-means++ seeding on host data, and the per-class cluster index of SPL-ADVisE
//! (documented on `kmeans` and `cluster_per_class`).

use burn::config::Config;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::checks::{finite_f64, same_length};
use crate::base::error::ConfigError;
use crate::base::seed::mix_seed;
use crate::error::SplAdviseError;

/// Configuration of [`kmeans`] and [`cluster_per_class`].
#[derive(Config, Debug)]
pub struct KMeansConfig {
    /// Number of clusters `K >= 1` (per class in [`cluster_per_class`]; 8 in SPL-ADVisE).
    #[config(default = 8)]
    pub clusters: usize,
    /// Most Lloyd iterations of one run, `>= 1`.
    #[config(default = 100)]
    pub max_iterations: usize,
    /// Independent seedings `>= 1`; the run with the lowest inertia is kept (ties: the first).
    #[config(default = 1)]
    pub restarts: usize,
}

impl KMeansConfig {
    /// Checks that every count is at least 1, naming the field otherwise.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("clusters", self.clusters),
            ("max_iterations", self.max_iterations),
            ("restarts", self.restarts),
        ] {
            if value == 0 {
                return Err(ConfigError::new(field, "must be at least 1, got 0"));
            }
        }
        Ok(())
    }
}

/// The result of [`kmeans`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KMeans {
    /// Dimension `D` of a point.
    pub dim: usize,
    /// `K × D` row-major centroids; each is the mean of its points.
    pub centroids: Vec<f64>,
    /// The cluster of each point, in `0..K`; every cluster has at least one point.
    pub assignments: Vec<usize>,
    /// Sum over points of the squared distance to their centroid.
    pub inertia: f64,
    /// Lloyd iterations of the kept run.
    pub iterations: usize,
}

impl KMeans {
    /// Number of clusters `K`.
    pub fn clusters(&self) -> usize {
        self.centroids.len() / self.dim
    }

    /// The centroid of `cluster`.
    ///
    /// # Panics
    /// If `cluster >= K`.
    pub fn centroid(&self, cluster: usize) -> &[f64] {
        &self.centroids[cluster * self.dim..(cluster + 1) * self.dim]
    }
}

/// Clusters the `N = data.len() / dim` points of row-major `data` into
/// [`KMeansConfig::clusters`] clusters, with k-means++ seeding from `seed`.
///
/// Seeding follows Arthur & Vassilvitskii, "k-means++: The Advantages of Careful Seeding"
/// (SODA 2007): the first centre is a uniformly drawn point, each further centre a point drawn
/// with probability proportional to its squared distance to the nearest centre chosen so far.
/// Lloyd iterations then alternate assigning every point to its nearest centroid (ties go to the
/// lower cluster id) and moving every centroid to the mean of its points, until no assignment
/// changes or [`KMeansConfig::max_iterations`] is reached.
///
/// A cluster left without points (possible when points coincide) takes the point farthest from
/// its own centroid among the clusters that have two or more, so as long as there are at least as
/// many points as clusters, every cluster of a result has at least one point and its centroid is
/// the mean of its points.
///
/// Data are row-major `N × D` slices of `f32` or `f64`; the arithmetic is in `f64`. Every random
/// draw comes from a `StdRng` seeded with `seed`, so a seed gives the same clusters on any
/// thread. The math, the defaults and the worked values are in
/// `docs/methods.md#k-means-clustering`.
///
/// # Errors
/// If the config is invalid (`clusters == 0`, …), `dim == 0`, `data.len()` is not a multiple of
/// `dim`, there is no point, a value is not finite, or there are fewer points than clusters.
pub fn kmeans<T: Copy + Into<f64>>(
    data: &[T],
    dim: usize,
    config: &KMeansConfig,
    seed: u64,
) -> Result<KMeans, SplAdviseError> {
    let (points, n) = checked_points(data, dim, config)?;
    if config.clusters > n {
        return Err(SplAdviseError::TooFewPoints {
            clusters: config.clusters,
            points: n,
        });
    }
    Ok(fit(&points, n, dim, config.clusters, config, seed))
}

/// Validates the config and the data and converts the data to `f64`; returns the point count.
fn checked_points<T: Copy + Into<f64>>(
    data: &[T],
    dim: usize,
    config: &KMeansConfig,
) -> Result<(Vec<f64>, usize), SplAdviseError> {
    config.validate()?;
    if dim == 0 {
        return Err(ConfigError::new("dim", "must be at least 1, got 0").into());
    }
    if !data.len().is_multiple_of(dim) {
        return Err(SplAdviseError::Ragged {
            len: data.len(),
            dim,
        });
    }
    if data.is_empty() {
        return Err(SplAdviseError::NoPoints);
    }
    Ok((finite_f64("data", data)?, data.len() / dim))
}

/// k-means of `n >= k >= 1` finite points, the best of `config.restarts` seedings.
fn fit(points: &[f64], n: usize, dim: usize, k: usize, config: &KMeansConfig, seed: u64) -> KMeans {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut best: Option<KMeans> = None;
    for _ in 0..config.restarts {
        let run = lloyd(points, n, dim, k, config.max_iterations, &mut rng);
        if best.as_ref().is_none_or(|b| run.inertia < b.inertia) {
            best = Some(run);
        }
    }
    best.expect("restarts >= 1 was validated")
}

fn squared_distance(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// The nearest centroid of `point` and its squared distance (ties: the lower id).
fn nearest(point: &[f64], centroids: &[f64], dim: usize) -> (usize, f64) {
    let mut best = (0, f64::INFINITY);
    for (c, centroid) in centroids.chunks_exact(dim).enumerate() {
        let d = squared_distance(point, centroid);
        if d < best.1 {
            best = (c, d);
        }
    }
    best
}

fn assign(points: &[f64], centroids: &[f64], dim: usize) -> Vec<usize> {
    points
        .chunks_exact(dim)
        .map(|p| nearest(p, centroids, dim).0)
        .collect()
}

/// k-means++ seeding: `k` centres drawn from the points.
fn seed_centroids(points: &[f64], n: usize, dim: usize, k: usize, rng: &mut StdRng) -> Vec<f64> {
    let point = |i: usize| &points[i * dim..(i + 1) * dim];
    let first = rng.random_range(0..n);
    let mut centroids = Vec::with_capacity(k * dim);
    centroids.extend_from_slice(point(first));
    let mut weights: Vec<f64> = (0..n)
        .map(|i| squared_distance(point(i), point(first)))
        .collect();
    for _ in 1..k {
        let total: f64 = weights.iter().sum();
        let chosen = if total > 0.0 {
            let target = rng.random::<f64>() * total;
            let mut cumulative = 0.0;
            let mut chosen = None;
            for (i, &w) in weights.iter().enumerate() {
                if w > 0.0 {
                    cumulative += w;
                    chosen = Some(i);
                    if cumulative > target {
                        break;
                    }
                }
            }
            chosen.expect("a positive weight exists when the total is positive")
        } else {
            // Every point coincides with a centre: any point will do.
            rng.random_range(0..n)
        };
        centroids.extend_from_slice(point(chosen));
        for (i, w) in weights.iter_mut().enumerate() {
            *w = w.min(squared_distance(point(i), point(chosen)));
        }
    }
    centroids
}

/// Moves every centroid to the mean of its points (an empty cluster keeps its centroid).
fn update_centroids(points: &[f64], assignments: &[usize], dim: usize, centroids: &mut [f64]) {
    let k = centroids.len() / dim;
    let mut sums = vec![0.0; k * dim];
    let mut counts = vec![0usize; k];
    for (p, &c) in points.chunks_exact(dim).zip(assignments) {
        counts[c] += 1;
        for (s, x) in sums[c * dim..(c + 1) * dim].iter_mut().zip(p) {
            *s += x;
        }
    }
    for (c, &count) in counts.iter().enumerate() {
        if count > 0 {
            for (centroid, s) in centroids[c * dim..(c + 1) * dim]
                .iter_mut()
                .zip(&sums[c * dim..(c + 1) * dim])
            {
                *centroid = s / count as f64;
            }
        }
    }
}

/// Gives every empty cluster the point farthest from its centroid among clusters with two or
/// more points (ties: the lower point index). Needs at least as many points as clusters.
fn fill_empty_clusters(
    points: &[f64],
    dim: usize,
    centroids: &mut [f64],
    assignments: &mut [usize],
) {
    let k = centroids.len() / dim;
    let mut counts = vec![0usize; k];
    for &c in assignments.iter() {
        counts[c] += 1;
    }
    for empty in 0..k {
        if counts[empty] > 0 {
            continue;
        }
        let mut farthest: Option<(usize, f64)> = None;
        for (i, p) in points.chunks_exact(dim).enumerate() {
            let own = assignments[i];
            if counts[own] < 2 {
                continue;
            }
            let d = squared_distance(p, &centroids[own * dim..(own + 1) * dim]);
            if farthest.is_none_or(|(_, best)| d > best) {
                farthest = Some((i, d));
            }
        }
        let (i, _) = farthest.expect("with n >= k some cluster holds two points");
        counts[assignments[i]] -= 1;
        assignments[i] = empty;
        counts[empty] = 1;
        centroids[empty * dim..(empty + 1) * dim].copy_from_slice(&points[i * dim..(i + 1) * dim]);
    }
}

/// One k-means++ seeding followed by Lloyd iterations.
fn lloyd(
    points: &[f64],
    n: usize,
    dim: usize,
    k: usize,
    max_iterations: usize,
    rng: &mut StdRng,
) -> KMeans {
    let mut centroids = seed_centroids(points, n, dim, k, rng);
    let mut assignments = assign(points, &centroids, dim);
    let mut iterations = 0;
    loop {
        fill_empty_clusters(points, dim, &mut centroids, &mut assignments);
        update_centroids(points, &assignments, dim, &mut centroids);
        iterations += 1;
        let next = assign(points, &centroids, dim);
        let converged = next == assignments;
        assignments = next;
        if converged || iterations >= max_iterations {
            break;
        }
    }
    // The last assignment may have emptied a cluster or moved points: leave centroids that are
    // the means of non-empty clusters.
    fill_empty_clusters(points, dim, &mut centroids, &mut assignments);
    update_centroids(points, &assignments, dim, &mut centroids);
    let inertia = points
        .chunks_exact(dim)
        .zip(&assignments)
        .map(|(p, &c)| squared_distance(p, &centroids[c * dim..(c + 1) * dim]))
        .sum();
    KMeans {
        dim,
        centroids,
        assignments,
        inertia,
        iterations,
    }
}

/// Clusters of a labelled data set, each holding examples of one class: SPL-ADVisE's cluster
/// index, built by [`cluster_per_class`] (or from given assignments with [`ClusterIndex::new`]).
///
/// Cluster ids are global, `0..C`. Every cluster has at least one example and a centroid that is
/// the mean of its examples.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterIndex {
    dim: usize,
    centroids: Vec<f64>,
    cluster_classes: Vec<usize>,
    assignments: Vec<usize>,
    members: Vec<Vec<usize>>,
}

/// The saveable form of a [`ClusterIndex`] (for a checkpoint taken between two refreshes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterIndexState {
    /// Dimension of the embedding.
    pub dim: usize,
    /// `C × dim` row-major centroids.
    pub centroids: Vec<f64>,
    /// The class of each cluster.
    pub cluster_classes: Vec<usize>,
    /// The cluster of each example.
    pub assignments: Vec<usize>,
}

impl ClusterIndex {
    /// An index from given cluster `assignments` (ids `0..C`, every id used) of the examples of
    /// row-major `data` (`N × dim`) with class `labels`; the centroids are the cluster means.
    ///
    /// # Errors
    /// If `dim == 0`, the lengths disagree, there is no example, a value is not finite, a cluster
    /// id below the largest has no example, or a cluster holds two classes.
    pub fn new<T: Copy + Into<f64>>(
        data: &[T],
        dim: usize,
        labels: &[usize],
        assignments: Vec<usize>,
    ) -> Result<Self, SplAdviseError> {
        let (points, n) = checked_points(data, dim, &KMeansConfig::new())?;
        same_length("labels", n, labels.len())?;
        same_length("assignments", n, assignments.len())?;
        let clusters = assignments.iter().max().map_or(0, |&m| m + 1);
        let mut cluster_classes: Vec<Option<usize>> = vec![None; clusters];
        for (&c, &label) in assignments.iter().zip(labels) {
            match cluster_classes[c] {
                None => cluster_classes[c] = Some(label),
                Some(first) if first != label => {
                    return Err(SplAdviseError::MixedCluster {
                        cluster: c,
                        first,
                        second: label,
                    })
                }
                Some(_) => {}
            }
        }
        let cluster_classes = cluster_classes
            .into_iter()
            .enumerate()
            .map(|(cluster, class)| class.ok_or(SplAdviseError::EmptyCluster { cluster }))
            .collect::<Result<Vec<_>, _>>()?;
        let mut centroids = vec![0.0; clusters * dim];
        update_centroids(&points, &assignments, dim, &mut centroids);
        Ok(Self::assemble(dim, centroids, cluster_classes, assignments))
    }

    fn assemble(
        dim: usize,
        centroids: Vec<f64>,
        cluster_classes: Vec<usize>,
        assignments: Vec<usize>,
    ) -> Self {
        let mut members = vec![Vec::new(); cluster_classes.len()];
        for (i, &c) in assignments.iter().enumerate() {
            members[c].push(i);
        }
        Self {
            dim,
            centroids,
            cluster_classes,
            assignments,
            members,
        }
    }

    /// Rebuilds an index from its saved form.
    ///
    /// # Errors
    /// If `dim == 0`, the centroids do not hold `dim` finite values per cluster, an assignment is
    /// out of range, or a cluster has no example.
    pub fn from_state(state: ClusterIndexState) -> Result<Self, SplAdviseError> {
        let ClusterIndexState {
            dim,
            centroids,
            cluster_classes,
            assignments,
        } = state;
        if dim == 0 {
            return Err(ConfigError::new("dim", "must be at least 1, got 0").into());
        }
        same_length("centroids", cluster_classes.len() * dim, centroids.len())?;
        finite_f64("centroids", &centroids)?;
        let mut counts = vec![0usize; cluster_classes.len()];
        for &c in &assignments {
            if c >= counts.len() {
                return Err(SplAdviseError::OutOfRange {
                    what: "assignments",
                    index: c,
                    len: counts.len(),
                });
            }
            counts[c] += 1;
        }
        if let Some(cluster) = counts.iter().position(|&c| c == 0) {
            return Err(SplAdviseError::EmptyCluster { cluster });
        }
        Ok(Self::assemble(dim, centroids, cluster_classes, assignments))
    }

    /// The saveable form of this index.
    pub fn state(&self) -> ClusterIndexState {
        ClusterIndexState {
            dim: self.dim,
            centroids: self.centroids.clone(),
            cluster_classes: self.cluster_classes.clone(),
            assignments: self.assignments.clone(),
        }
    }

    /// Dimension of the embedding.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of clusters `C`.
    pub fn num_clusters(&self) -> usize {
        self.cluster_classes.len()
    }

    /// Number of examples `N`.
    pub fn num_examples(&self) -> usize {
        self.assignments.len()
    }

    /// `C × dim` row-major centroids.
    pub fn centroids(&self) -> &[f64] {
        &self.centroids
    }

    /// The centroid of `cluster`.
    ///
    /// # Panics
    /// If `cluster >= C`.
    pub fn centroid(&self, cluster: usize) -> &[f64] {
        &self.centroids[cluster * self.dim..(cluster + 1) * self.dim]
    }

    /// The class of each cluster.
    pub fn cluster_classes(&self) -> &[usize] {
        &self.cluster_classes
    }

    /// The cluster of each example (the groups of [`Spld::select`](super::Spld::select)).
    pub fn assignments(&self) -> &[usize] {
        &self.assignments
    }

    /// The examples of `cluster`, ascending.
    ///
    /// # Panics
    /// If `cluster >= C`.
    pub fn members(&self, cluster: usize) -> &[usize] {
        &self.members[cluster]
    }
}

/// Clusters each class of a labelled data set separately: [`KMeansConfig::clusters`] clusters
/// per class, or as many as the class has examples when it has fewer. Classes are taken in
/// ascending label order and their clusters numbered consecutively, so the clusters of the
/// smallest label come first. Class `c` is clustered with the seed `mix_seed(seed, c)`
/// ([`mix_seed`]), so its clusters depend only on its own examples (in data order) and `seed`.
///
/// SPL-ADVisE (Thangarasa & Taylor, "Self-Paced Learning with Adaptive Deep Visual Embeddings",
/// <https://arxiv.org/abs/1807.09200>, §3.1) clusters the embedding of each class separately, K
/// clusters per class (8 in SPL-ADVisE), and refreshes this index once per epoch. Each class is
/// clustered by [`kmeans`] (k-means++ seeding, Lloyd iterations, in `f64`), so a seed gives the
/// same clusters on any thread, and one class's clusters do not depend on the other classes.
///
/// # Errors
/// As [`kmeans`], and if `labels` does not hold one label per point.
pub fn cluster_per_class<T: Copy + Into<f64>>(
    data: &[T],
    dim: usize,
    labels: &[usize],
    config: &KMeansConfig,
    seed: u64,
) -> Result<ClusterIndex, SplAdviseError> {
    let (points, n) = checked_points(data, dim, config)?;
    same_length("labels", n, labels.len())?;
    let mut classes: Vec<usize> = labels.to_vec();
    classes.sort_unstable();
    classes.dedup();
    let mut centroids = Vec::new();
    let mut cluster_classes = Vec::new();
    let mut assignments = vec![0usize; n];
    for class in classes {
        let examples: Vec<usize> = (0..n).filter(|&i| labels[i] == class).collect();
        let class_points: Vec<f64> = examples
            .iter()
            .flat_map(|&i| points[i * dim..(i + 1) * dim].iter().copied())
            .collect();
        let k = config.clusters.min(examples.len());
        let result = fit(
            &class_points,
            examples.len(),
            dim,
            k,
            config,
            mix_seed(seed, class as u64),
        );
        let offset = cluster_classes.len();
        for (&i, &c) in examples.iter().zip(&result.assignments) {
            assignments[i] = offset + c;
        }
        centroids.extend_from_slice(&result.centroids);
        cluster_classes.extend(std::iter::repeat_n(class, k));
    }
    Ok(ClusterIndex::assemble(
        dim,
        centroids,
        cluster_classes,
        assignments,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `per_blob` points around each centre, uniform noise in `[-0.5, 0.5]` per coordinate;
    /// returns the row-major data and the blob of each point.
    fn blobs(centres: &[[f64; 2]], per_blob: usize, seed: u64) -> (Vec<f64>, Vec<usize>) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut data = Vec::new();
        let mut truth = Vec::new();
        for i in 0..per_blob * centres.len() {
            // Interleave the blobs so that data order says nothing about the clusters.
            let blob = i % centres.len();
            for centre in centres[blob] {
                data.push(centre + rng.random::<f64>() - 0.5);
            }
            truth.push(blob);
        }
        (data, truth)
    }

    /// The mean of the points of `data` whose `truth` is `blob`.
    fn blob_mean(data: &[f64], truth: &[usize], blob: usize) -> [f64; 2] {
        let mut sum = [0.0; 2];
        let mut count = 0.0;
        for (p, &t) in data.chunks_exact(2).zip(truth) {
            if t == blob {
                sum[0] += p[0];
                sum[1] += p[1];
                count += 1.0;
            }
        }
        [sum[0] / count, sum[1] / count]
    }

    /// The map from true blob to found cluster, asserting that it is one-to-one and that every
    /// point of a blob is in that blob's cluster.
    fn permutation(truth: &[usize], found: &[usize], k: usize) -> Vec<usize> {
        let mut map = vec![usize::MAX; k];
        for (&t, &f) in truth.iter().zip(found) {
            if map[t] == usize::MAX {
                map[t] = f;
            }
            assert_eq!(map[t], f, "blob {t} is split between clusters");
        }
        let mut sorted = map.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            (0..k).collect::<Vec<_>>(),
            "two blobs share a cluster"
        );
        map
    }

    const CENTRES: [[f64; 2]; 4] = [[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]];

    #[test]
    fn kmeans_recovers_separated_blobs() {
        let (data, truth) = blobs(&CENTRES, 25, 1);
        let config = KMeansConfig::new().with_clusters(4);
        for seed in 0..5 {
            let result = kmeans(&data, 2, &config, seed).unwrap();
            let map = permutation(&truth, &result.assignments, 4);
            let mut inertia = 0.0;
            for (blob, &cluster) in map.iter().enumerate() {
                let mean = blob_mean(&data, &truth, blob);
                let centroid = result.centroid(cluster);
                assert!((centroid[0] - mean[0]).abs() < 1e-12);
                assert!((centroid[1] - mean[1]).abs() < 1e-12);
                for (p, &t) in data.chunks_exact(2).zip(&truth) {
                    if t == blob {
                        inertia += (p[0] - mean[0]).powi(2) + (p[1] - mean[1]).powi(2);
                    }
                }
            }
            assert!((result.inertia - inertia).abs() < 1e-9);
            assert!(result.iterations <= 3, "{} iterations", result.iterations);
        }
    }

    #[test]
    fn kmeans_accepts_f32_data() {
        let (data, truth) = blobs(&CENTRES, 10, 2);
        let data32: Vec<f32> = data.iter().map(|&x| x as f32).collect();
        let result = kmeans(&data32, 2, &KMeansConfig::new().with_clusters(4), 7).unwrap();
        permutation(&truth, &result.assignments, 4);
    }

    #[test]
    fn kmeans_same_seed_same_result_other_seeds_differ() {
        // Uniform points have no natural clusters, so the seeding decides the result.
        let mut rng = StdRng::seed_from_u64(3);
        let data: Vec<f64> = (0..400).map(|_| rng.random::<f64>()).collect();
        let config = KMeansConfig::new().with_clusters(5);
        let a = kmeans(&data, 2, &config, 11).unwrap();
        let b = kmeans(&data, 2, &config, 11).unwrap();
        assert_eq!(a, b);
        let distinct: Vec<KMeans> = (0..8).fold(Vec::new(), |mut seen, seed| {
            let r = kmeans(&data, 2, &config, seed).unwrap();
            if !seen.contains(&r) {
                seen.push(r);
            }
            seen
        });
        assert!(distinct.len() >= 2, "8 seeds gave one result");
        // A thread of its own gives the same result: nothing depends on process-wide state.
        let again = std::thread::spawn(move || kmeans(&data, 2, &config, 11).unwrap())
            .join()
            .unwrap();
        assert_eq!(again, a);
    }

    #[test]
    fn kmeans_restarts_keep_the_lowest_inertia() {
        let mut rng = StdRng::seed_from_u64(5);
        let data: Vec<f64> = (0..300).map(|_| rng.random::<f64>()).collect();
        let single = KMeansConfig::new().with_clusters(6);
        // The draws of restart r continue the generator of restarts 0..r, so the best of 4
        // restarts is at most the first run's inertia.
        let first = kmeans(&data, 3, &single, 9).unwrap();
        let best = kmeans(&data, 3, &single.clone().with_restarts(4), 9).unwrap();
        assert!(best.inertia <= first.inertia);
    }

    #[test]
    fn kmeans_coincident_points_leave_no_cluster_empty() {
        let data = [2.0f64; 5 * 3];
        let result = kmeans(&data, 3, &KMeansConfig::new().with_clusters(3), 0).unwrap();
        let mut counts = [0; 3];
        for &c in &result.assignments {
            counts[c] += 1;
        }
        assert!(counts.iter().all(|&c| c >= 1), "counts {counts:?}");
        assert_eq!(counts.iter().sum::<usize>(), 5);
        assert_eq!(result.inertia, 0.0);
        assert!(result.centroids.iter().all(|&x| x == 2.0));
    }

    #[test]
    fn kmeans_empty_cluster_takes_the_farthest_point() {
        // 1-D points 0, 1, 2, 10 all in cluster 0 (centroid 1); cluster 1 is empty. The point
        // farthest from its centroid is 10 (squared distance 81): it moves to cluster 1.
        let points = [0.0, 1.0, 2.0, 10.0];
        let mut centroids = [1.0, 100.0];
        let mut assignments = [0, 0, 0, 0];
        fill_empty_clusters(&points, 1, &mut centroids, &mut assignments);
        assert_eq!(assignments, [0, 0, 0, 1]);
        assert_eq!(centroids, [1.0, 10.0]);
    }

    #[test]
    fn kmeans_rejects_bad_input_without_panicking() {
        let data = [0.0f64, 1.0, 2.0, 3.0];
        let zero_k = kmeans(&data, 2, &KMeansConfig::new().with_clusters(0), 0).unwrap_err();
        assert!(matches!(zero_k, SplAdviseError::Config(ref e) if e.field == "clusters"));
        let none: [f64; 0] = [];
        assert_eq!(
            kmeans(&none, 2, &KMeansConfig::new(), 0).unwrap_err(),
            SplAdviseError::NoPoints
        );
        assert_eq!(
            kmeans(&data, 2, &KMeansConfig::new().with_clusters(3), 0).unwrap_err(),
            SplAdviseError::TooFewPoints {
                clusters: 3,
                points: 2
            }
        );
        assert_eq!(
            kmeans(&data, 3, &KMeansConfig::new().with_clusters(1), 0).unwrap_err(),
            SplAdviseError::Ragged { len: 4, dim: 3 }
        );
        let zero_dim = kmeans(&data, 0, &KMeansConfig::new(), 0).unwrap_err();
        assert!(matches!(zero_dim, SplAdviseError::Config(ref e) if e.field == "dim"));
        let nan = [0.0, f64::NAN];
        assert!(matches!(
            kmeans(&nan, 1, &KMeansConfig::new().with_clusters(1), 0).unwrap_err(),
            SplAdviseError::NonFinite {
                what: "data",
                index: 1,
                ..
            }
        ));
        let zero_iter = KMeansConfig::new().with_max_iterations(0);
        assert_eq!(zero_iter.validate().unwrap_err().field, "max_iterations");
        assert_eq!(
            cluster_per_class(&data, 1, &[0, 0], &KMeansConfig::new(), 0).unwrap_err(),
            SplAdviseError::Length {
                what: "labels",
                expected: 4,
                got: 2
            }
        );
    }

    #[test]
    fn cluster_per_class_clusters_each_class_apart() {
        // Label 7: two blobs of 10 points (at x = 0 and x = 10); label 3: three points only.
        let mut data = Vec::new();
        let mut labels = Vec::new();
        for i in 0..20 {
            data.extend([(i % 2) as f64 * 10.0 + 0.01 * i as f64, 0.0]);
            labels.push(7);
        }
        for i in 0..3 {
            data.extend([5.0, i as f64]);
            labels.push(3);
        }
        let config = KMeansConfig::new().with_clusters(2);
        let index = cluster_per_class(&data, 2, &labels, &config, 4).unwrap();
        // Label 3 comes first with min(2, 3) = 2 clusters, then label 7 with 2.
        assert_eq!(index.cluster_classes(), [3, 3, 7, 7]);
        assert_eq!(index.num_examples(), 23);
        for c in 0..4 {
            for &i in index.members(c) {
                assert_eq!(labels[i], index.cluster_classes()[c]);
                assert_eq!(index.assignments()[i], c);
            }
        }
        // Label 7's clusters are its two blobs: even and odd examples.
        let even = index.assignments()[0];
        let odd = index.assignments()[1];
        assert_ne!(even, odd);
        for i in 0..20 {
            assert_eq!(index.assignments()[i], if i % 2 == 0 { even } else { odd });
        }
        // Centroid of the even blob: x = 0.01 · mean(0, 2, …, 18) = 0.09.
        assert!((index.centroid(even)[0] - 0.09).abs() < 1e-12);
        assert!((index.centroid(odd)[0] - 10.1).abs() < 1e-12);

        // A class with fewer points than K gets one cluster per point.
        let small = KMeansConfig::new().with_clusters(8);
        let index = cluster_per_class(&data, 2, &labels, &small, 4).unwrap();
        assert_eq!(index.cluster_classes(), [3, 3, 3, 7, 7, 7, 7, 7, 7, 7, 7]);
        for c in 0..index.num_clusters() {
            assert!(!index.members(c).is_empty());
        }
    }

    #[test]
    fn cluster_per_class_is_independent_of_other_classes() {
        let (data, _) = blobs(&CENTRES, 12, 6);
        let labels: Vec<usize> = (0..48).map(|i| i % 3).collect();
        let config = KMeansConfig::new().with_clusters(3);
        let all = cluster_per_class(&data, 2, &labels, &config, 21).unwrap();
        // Only the examples of label 2, in the same order.
        let keep: Vec<usize> = (0..48).filter(|&i| labels[i] == 2).collect();
        let data2: Vec<f64> = keep
            .iter()
            .flat_map(|&i| [data[2 * i], data[2 * i + 1]])
            .collect();
        let alone = cluster_per_class(&data2, 2, &vec![2; keep.len()], &config, 21).unwrap();
        assert_eq!(&all.centroids()[12..], alone.centroids());
        for (j, &i) in keep.iter().enumerate() {
            assert_eq!(all.assignments()[i] - 6, alone.assignments()[j]);
        }
    }

    #[test]
    fn cluster_index_from_assignments_and_state() {
        let data = [0.0f32, 2.0, 4.0, 10.0, 20.0];
        let index = ClusterIndex::new(&data, 1, &[1, 1, 1, 0, 0], vec![0, 0, 0, 1, 1]).unwrap();
        assert_eq!(index.centroids(), [2.0, 15.0]);
        assert_eq!(index.cluster_classes(), [1, 0]);
        assert_eq!(index.members(1), [3, 4]);
        let json = serde_json::to_string(&index.state()).unwrap();
        let state: ClusterIndexState = serde_json::from_str(&json).unwrap();
        assert_eq!(ClusterIndex::from_state(state).unwrap(), index);

        assert_eq!(
            ClusterIndex::new(&data, 1, &[1, 1, 0, 0, 0], vec![0, 0, 0, 1, 1]).unwrap_err(),
            SplAdviseError::MixedCluster {
                cluster: 0,
                first: 1,
                second: 0
            }
        );
        assert_eq!(
            ClusterIndex::new(&data, 1, &[1, 1, 1, 0, 0], vec![0, 0, 0, 2, 2]).unwrap_err(),
            SplAdviseError::EmptyCluster { cluster: 1 }
        );
        let mut bad = index.state();
        bad.assignments[0] = 5;
        assert!(matches!(
            ClusterIndex::from_state(bad).unwrap_err(),
            SplAdviseError::OutOfRange {
                what: "assignments",
                index: 5,
                len: 2
            }
        ));
    }
}
