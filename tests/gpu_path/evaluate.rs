//! Evaluation and selection on the GPU path against the CPU: the kNN monitor (features, scores,
//! accuracies), the linear probe, k-means over features computed on the device, and the Fréchet
//! distance (read back to the host, and Newton–Schulz on the device).

use burn::module::{AutodiffModule, Module};
use curriculum_ssl::augment::normalize::{Normalize, FASHION_MNIST_MEAN, FASHION_MNIST_STD};
use curriculum_ssl::curation::{
    frechet_distance_host, frechet_distance_readback, NewtonSchulzConfig,
};
use curriculum_ssl::data::{embedded, ImageArray};
use curriculum_ssl::eval::{extract_features, KnnConfig, KnnMonitor, LinearProbeConfig};
use curriculum_ssl::spl_advise::{cluster_per_class, KMeansConfig};

use crate::harness::*;
use crate::TinyConv;

fn images(range: std::ops::Range<usize>) -> ImageArray {
    embedded::train()
        .unwrap()
        .select(&range.collect::<Vec<_>>())
        .unwrap()
}

fn normalize() -> Normalize {
    Normalize::new(&FASHION_MNIST_MEAN, &FASHION_MNIST_STD)
}

/// The tiny backbone's inference copies on both backends, with the same weights.
fn backbones(device: &GpuDevice) -> (TinyConv<Cpu>, TinyConv<Gpu>) {
    let cpu =
        curriculum_ssl::seed::init_module::<CpuAd, _>(&CpuDevice::default(), 5, TinyConv::new);
    let gpu = TinyConv::<GpuAd>::new(device).load_record(transfer::<CpuAd, GpuAd, _, _>(
        cpu.clone().into_record(),
        device,
    ));
    (cpu.valid(), gpu.valid())
}

type GpuDevice = <Gpu as burn::tensor::backend::BackendTypes>::Device;

/// The kNN monitor's features, the weighted votes of its classifier and its accuracies; the
/// linear probe's loss and accuracies (the probe starts from the same weights on every backend).
#[test]
fn knn_monitor_and_linear_probe_match_the_cpu() {
    let Some(device) = gpu() else { return };
    let (cpu_net, gpu_net) = backbones(&device);
    let (bank, test) = (images(0..64), images(64..96));
    let norm = normalize();
    let mut seen = Comparisons::default();

    let cpu_bank =
        extract_features(&cpu_net, &bank, 32, Some(&norm), &CpuDevice::default()).unwrap();
    let gpu_bank = extract_features(&gpu_net, &bank, 32, Some(&norm), &device).unwrap();
    assert_eq!(gpu_bank.features.device(), device);
    seen.close(
        "bank features",
        &host(cpu_bank.features.clone()),
        &host(gpu_bank.features.clone()),
    );
    let cpu_test =
        extract_features(&cpu_net, &test, 32, Some(&norm), &CpuDevice::default()).unwrap();
    let gpu_test = extract_features(&gpu_net, &test, 32, Some(&norm), &device).unwrap();

    let knn = KnnConfig::new()
        .with_k(10)
        .with_temperature(0.07)
        .with_chunk_size(16);
    let cpu_knn = knn
        .init(
            cpu_bank.features.clone(),
            cpu_bank.labels.clone().unwrap(),
            10,
        )
        .unwrap();
    let gpu_knn = knn
        .init(
            gpu_bank.features.clone(),
            gpu_bank.labels.clone().unwrap(),
            10,
        )
        .unwrap();
    seen.close(
        "kNN vote scores",
        &host(cpu_knn.scores(cpu_test.features.clone())),
        &host(gpu_knn.scores(gpu_test.features.clone())),
    );

    let monitor = KnnMonitor::new(bank, test, Some(norm))
        .unwrap()
        .with_batch_size(32);
    let cpu_results = monitor.evaluate(&cpu_net, &CpuDevice::default()).unwrap();
    let gpu_results = monitor.evaluate(&gpu_net, &device).unwrap();
    assert_eq!(cpu_results, gpu_results, "kNN monitor accuracies");

    let probe = LinearProbeConfig::new()
        .with_epochs(5)
        .with_batch_size(16)
        .with_lr(0.5);
    let cpu_probe = probe
        .fit::<CpuAd>(&cpu_bank, &cpu_test, &CpuDevice::default())
        .unwrap();
    let gpu_probe = probe.fit::<GpuAd>(&gpu_bank, &gpu_test, &device).unwrap();
    seen.scalar(
        "linear probe final loss",
        cpu_probe.final_loss,
        gpu_probe.final_loss,
    );
    assert_eq!(cpu_probe.train, gpu_probe.train, "probe train accuracy");
    assert_eq!(cpu_probe.test, gpu_probe.test, "probe test accuracy");
    seen.report("kNN and linear probe");
}

/// SPL-ADVisE's per-class k-means on features the device computed: the same clusters, centroids
/// and inertia as from the CPU's features.
#[test]
fn kmeans_on_device_features_matches_the_cpu() {
    let Some(device) = gpu() else { return };
    let (cpu_net, gpu_net) = backbones(&device);
    let data = images(0..96);
    let labels: Vec<usize> = data.labels().unwrap().iter().map(|&l| l as usize).collect();
    let norm = normalize();
    let cpu = extract_features(&cpu_net, &data, 32, Some(&norm), &CpuDevice::default()).unwrap();
    let gpu = extract_features(&gpu_net, &data, 32, Some(&norm), &device).unwrap();
    let config = KMeansConfig::new().with_clusters(2);
    let a = cluster_per_class(&host(cpu.features), 4, &labels, &config, 3).unwrap();
    let b = cluster_per_class(&host(gpu.features), 4, &labels, &config, 3).unwrap();
    assert_eq!(a.assignments(), b.assignments(), "cluster of every example");
    assert_eq!(a.cluster_classes(), b.cluster_classes());
    let mut seen = Comparisons::default();
    let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
    seen.close(
        "k-means centroids",
        &f32s(a.centroids()),
        &f32s(b.centroids()),
    );
    seen.report("k-means");
}

/// The Fréchet distance of two batches of projections: read back and computed on the host in
/// f64, and by Newton–Schulz iterations on the device in f32, against the CPU's (and the
/// device's Newton–Schulz against the host's f64 eigendecomposition, within f32's precision of
/// a square root's trace: 1e-3 relative).
#[test]
fn frechet_distances_match_the_cpu() {
    let Some(device) = gpu() else { return };
    let (n, d) = (16, 8);
    let z1 = pixels(1, 1, n, d, 0.2)
        .iter()
        .map(|v| v * 2.0 - 1.0)
        .collect::<Vec<_>>();
    let z2 = pixels(1, 1, n, d, 1.7)
        .iter()
        .map(|v| v * 1.5 - 0.5)
        .collect::<Vec<_>>();
    let exact = frechet_distance_host(
        &z1.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
        &z2.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
        n,
        d,
    )
    .unwrap();
    let ns = NewtonSchulzConfig::new().init().unwrap();
    let cpu_device = CpuDevice::default();
    let on = |z: &[f32]| matrix::<Cpu>(z, n, d, &cpu_device);
    let gon = |z: &[f32]| matrix::<Gpu>(z, n, d, &device);
    let mut seen = Comparisons::default();
    let cpu_read = frechet_distance_readback(on(&z1), on(&z2)).unwrap();
    let gpu_read = frechet_distance_readback(gon(&z1), gon(&z2)).unwrap();
    seen.scalar("Frechet distance read back", cpu_read, gpu_read);
    let cpu_ns = ns.frechet_distance(on(&z1), on(&z2)).unwrap();
    let gpu_ns = ns.frechet_distance(gon(&z1), gon(&z2)).unwrap();
    seen.scalar("Frechet distance Newton-Schulz", cpu_ns, gpu_ns);
    assert!(
        (gpu_ns - exact).abs() <= 1e-3 * exact,
        "Newton-Schulz on wgpu {gpu_ns}, f64 eigendecomposition {exact}"
    );
    seen.report("Frechet distance");
}
