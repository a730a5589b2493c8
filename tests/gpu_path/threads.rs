//! Tensors handed from one thread to another on the GPU path (burn 0.21, cubecl 0.10, wgpu).
//!
//! A backward pass run on a second thread, whose gradient the first thread reads after running
//! its own backward pass, reads overwritten values unless the second thread waits for its
//! queued kernels before handing the gradient over ([`finish_for_another_thread`]). The
//! network is the smallest found that shows it: a convolution and batch statistics. This is the
//! hand-over that view threads make (`curriculum_ssl::method::ViewPasses`) and that augmentation
//! ahead makes (`train::ahead`); both call [`finish_for_another_thread`]. (Both stay off on the
//! GPU backends for a second reason, concurrent work of two threads: see `docs/gpu.md`.)

use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use curriculum_ssl::device::finish_for_another_thread;

use crate::harness::*;

fn view<B: Backend>(b: usize, device: &B::Device) -> Tensor<B, 4> {
    let n = 8 * 12 * 12;
    let px: Vec<f32> = (0..n)
        .map(|i| ((i * 31 + b * 17) % 255) as f32 / 255.0)
        .collect();
    Tensor::from_data(TensorData::new(px, [8, 1, 12, 12]), device)
}

/// Convolution, batch statistics, ReLU, pooling: `[8, 1, 12, 12]` → `[8, 4]`.
fn net<B: Backend>(x: Tensor<B, 4>, w: Tensor<B, 4>) -> Tensor<B, 2> {
    let z = conv2d(x, w, None, ConvOptions::new([2, 2], [1, 1], [1, 1], 1));
    let mean = z.clone().mean_dim(0).mean_dim(2).mean_dim(3);
    let var = (z.clone() - mean.clone())
        .powi_scalar(2)
        .mean_dim(0)
        .mean_dim(2)
        .mean_dim(3);
    ((z - mean) / (var + 1e-5).sqrt())
        .clamp_min(0.0)
        .mean_dim(3)
        .mean_dim(2)
        .reshape([8, 4])
}

/// Of 10 rounds, how many gave a wrong gradient on the second thread: view 2's backward pass on
/// a second thread (finishing its work before the hand-over, or not), then view 1's on this
/// thread, then view 2's gradient read here.
fn wrong_rounds<B: AutodiffBackend>(finish: bool, device: &B::Device) -> usize {
    let values: Vec<f32> = (0..36)
        .map(|i| ((i * 5) % 11) as f32 / 11.0 - 0.5)
        .collect();
    let w = Tensor::<B, 4>::from_data(TensorData::new(values, [4, 1, 3, 3]), device).require_grad();
    let reference = host(
        w.grad(&net(view::<B>(1, device), w.clone()).sum().backward())
            .unwrap(),
    );
    (0..10)
        .filter(|_| {
            // Both views through leaves of their own: the reference's backward pass consumed
            // `w`'s (curriculum_ssl::method::fresh_leaves says why that matters).
            let w1 = w.clone().detach().require_grad();
            let w2 = w.clone().detach().require_grad();
            let z1 = net(view::<B>(0, device), w1.clone());
            let z2 = net(view::<B>(1, device), w2.clone());
            let d = device.clone();
            let g2 = std::thread::spawn(move || {
                let g = w2.grad(&z2.sum().backward()).unwrap();
                if finish {
                    finish_for_another_thread::<B>(&d);
                }
                g
            })
            .join()
            .unwrap();
            let _g1 = w1.grad(&z1.sum().backward()).unwrap();
            relative_difference("second thread's gradient", &reference, &host(g2), 0.0) > TOLERANCE
        })
        .count()
}

#[test]
fn tensors_made_on_another_thread_are_finished_before_the_hand_over() {
    let Some(device) = gpu() else { return };
    let unfinished = wrong_rounds::<Autodiff<Gpu>>(false, &device);
    println!(
        "burn 0.21 on wgpu: {unfinished} of 10 gradients handed over unfinished were wrong \
         (0 would mean burn no longer needs the workaround)"
    );
    assert_eq!(
        wrong_rounds::<Autodiff<Gpu>>(true, &device),
        0,
        "gradients handed over after finish_for_another_thread"
    );
    assert_eq!(
        wrong_rounds::<CpuAd>(false, &CpuDevice::default()),
        0,
        "the CPU backend needs no workaround"
    );
}
