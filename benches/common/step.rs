//! The training step the step benches time, shared by `benches/train_step.rs` and
//! `benches/tch/` (the `recipe bench_step` command has its own, with a hook between phases):
//! both views forward, the loss, backward, SGD at 0.05, then the EMA / queue update.

use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl::method::{Progress, SslMethod};

/// The two fixed views: uniform `[0, 1)` images drawn under seeds 1 and 2.
///
/// # Shapes
/// - each view: `[batch, 3, 32, 32]`
pub fn fixed_views<B: Backend>(batch: usize, device: &B::Device) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let view = |seed: u64| {
        B::seed(device, seed);
        Tensor::<B, 4>::random(
            [batch, 3, 32, 32],
            burn::tensor::Distribution::Uniform(0.0, 1.0),
            device,
        )
    };
    (view(1), view(2))
}

/// Step `step` of `method` on `views` (of 1,000 in one epoch), and its loss.
///
/// # Shapes
/// - `views`: two `[N, 3, H, W]` → `[1]`
pub fn train_step<B, S, O>(
    method: &mut S,
    optimizer: &mut O,
    views: &(Tensor<B, 4>, Tensor<B, 4>),
    step: usize,
) -> Tensor<B, 1>
where
    B: AutodiffBackend,
    S: SslMethod<B>,
    O: Optimizer<S::Online, B>,
{
    let progress = Progress {
        step,
        total_steps: 1_000,
        epoch: 0,
        total_epochs: 1,
    };
    let out = method.forward(views.0.clone(), views.1.clone(), progress);
    let grads: GradientsParams = method.gradients(&out.loss);
    let online = optimizer.step(0.05, method.take_online(), grads);
    method.set_online(online);
    method.after_step(progress);
    out.loss
}
