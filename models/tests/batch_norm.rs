//! `BatchNorm2d` follows PyTorch: batch statistics (biased variance) in training, running
//! averages updated with the unbiased variance, running statistics in inference.

use crate::common::{max_abs_diff, Infer, Train};
use burn::module::AutodiffModule;
use burn::prelude::*;
use curriculum_ssl_models::layers::BatchNorm2dConfig;

#[test]
fn train_step_then_inference() {
    let device = Default::default();
    let bn = BatchNorm2dConfig::new(2).init::<Train>(&device);
    // Channel 0 holds 1, 2, 3, 4; channel 1 holds 0, 0, 0, 8 (batch 2, 1×2 maps).
    let x = Tensor::<Train, 1>::from_floats([1.0, 2.0, 0.0, 0.0, 3.0, 4.0, 0.0, 8.0], &device)
        .reshape([2, 2, 1, 2]);
    let y = bn.forward(x);
    // Channel 0: mean 2.5, biased variance 1.25 → (x − 2.5) / sqrt(1.25 + 1e-5).
    let s0 = (1.25f32 + 1e-5).sqrt();
    // Channel 1: mean 2, biased variance 12 → (x − 2) / sqrt(12 + 1e-5).
    let s1 = (12f32 + 1e-5).sqrt();
    let expected = Tensor::<Infer, 1>::from_floats(
        [
            -1.5 / s0,
            -0.5 / s0,
            -2.0 / s1,
            -2.0 / s1,
            0.5 / s0,
            1.5 / s0,
            -2.0 / s1,
            6.0 / s1,
        ],
        &device,
    )
    .reshape([2, 2, 1, 2]);
    assert!(max_abs_diff(y.inner(), expected) < 1e-6);

    // Running averages with momentum 0.1: mean 0.1·[2.5, 2]; variance 0.9 + 0.1·unbiased, where
    // the unbiased variances are 5/3 and 16.
    let valid = bn.valid();
    let mean = Tensor::<Infer, 1>::from_floats([0.25, 0.2], &device);
    let var = Tensor::<Infer, 1>::from_floats([0.9 + 0.5 / 3.0, 0.9 + 1.6], &device);
    assert!(max_abs_diff(valid.running_mean.value(), mean.clone()) < 1e-6);
    assert!(max_abs_diff(valid.running_var.value(), var.clone()) < 1e-6);

    // Inference uses them.
    let x = Tensor::<Infer, 1>::from_floats([1.0, 1.0], &device).reshape([1, 2, 1, 1]);
    let y = valid.forward(x);
    let expected = Tensor::<Infer, 1>::from_floats([1.0, 1.0], &device)
        .sub(mean)
        .div(var.add_scalar(1e-5).sqrt())
        .reshape([1, 2, 1, 1]);
    assert!(max_abs_diff(y, expected) < 1e-6);
}

/// The gradient of a training-mode forward (with respect to the input, γ and β) equals central
/// finite differences of the same forward, in f64: `L = Σ BN(x) ⊙ r` for fixed weights `r`.
#[test]
fn training_gradients_match_finite_differences() {
    use burn::backend::{ndarray::NdArray, Autodiff};
    use burn::module::Param;
    use burn::tensor::TensorData;
    type B = Autodiff<NdArray<f64>>;
    let device = Default::default();
    let shape = [3, 2, 2, 3];
    let len: usize = shape.iter().product();
    // Fixed, irregular values (no generator): inputs, loss weights, γ and β.
    let (xs, rs) = (irregular_inputs(len), loss_weights(len));
    let gamma = [1.7, -0.6];
    let beta = [0.3, -1.1];
    let loss = |x: &[f64], g: [f64; 2], b: [f64; 2]| {
        let mut bn = BatchNorm2dConfig::new(2).init::<B>(&device);
        // f64 data (`from_floats` would round through f32).
        let f64s =
            |v: &[f64]| Tensor::<B, 1>::from_data(TensorData::new(v.to_vec(), [v.len()]), &device);
        bn.weight = Param::from_tensor(f64s(&g));
        bn.bias = Param::from_tensor(f64s(&b));
        let x = f64s(x).reshape(shape).require_grad();
        let r = f64s(&rs).reshape(shape);
        let l = bn.forward(x.clone()).mul(r).sum();
        (l, x, bn)
    };
    let value = |x: &[f64], g: [f64; 2], b: [f64; 2]| -> f64 { loss(x, g, b).0.into_scalar() };
    let (l, x, bn) = loss(&xs, gamma, beta);
    let grads = l.backward();
    let gx: Vec<f64> = x.grad(&grads).unwrap().into_data().to_vec().unwrap();
    let grad_of = |p: &Param<Tensor<B, 1>>| -> Vec<f64> {
        p.val().grad(&grads).unwrap().into_data().to_vec().unwrap()
    };
    let (gg, gb) = (grad_of(&bn.weight), grad_of(&bn.bias));
    let h = 1e-6;
    let close = |analytic: f64, numeric: f64, what: String| {
        let err = (analytic - numeric).abs() / numeric.abs().max(1.0);
        assert!(
            err < 1e-6,
            "{what}: autodiff {analytic}, finite differences {numeric}"
        );
    };
    for i in 0..len {
        let (mut up, mut down) = (xs.clone(), xs.clone());
        up[i] += h;
        down[i] -= h;
        let numeric = (value(&up, gamma, beta) - value(&down, gamma, beta)) / (2.0 * h);
        close(gx[i], numeric, format!("dL/dx[{i}]"));
    }
    for c in 0..2 {
        let (mut up, mut down) = (gamma, gamma);
        up[c] += h;
        down[c] -= h;
        let numeric = (value(&xs, up, beta) - value(&xs, down, beta)) / (2.0 * h);
        close(gg[c], numeric, format!("dL/dgamma[{c}]"));
        let (mut up, mut down) = (beta, beta);
        up[c] += h;
        down[c] -= h;
        let numeric = (value(&xs, gamma, up) - value(&xs, gamma, down)) / (2.0 * h);
        close(gb[c], numeric, format!("dL/dbeta[{c}]"));
    }
    // The input gradient of a batch norm sums to zero over each channel (the mean is removed).
    for c in 0..2 {
        let sum: f64 = (0..len).filter(|i| (i / 6) % 2 == c).map(|i| gx[i]).sum();
        assert!(sum.abs() < 1e-9, "channel {c}: Σ dL/dx = {sum}");
    }
}

/// A training step through the fused CPU kernels (`Autodiff<Flex>`, f64 tensors) equals the
/// composed form (`Autodiff<NdArray<f64>>`, burn's tensor operations, checked against finite
/// differences above): output, the gradients of the input, γ and β, and the running averages.
/// Both are f64 sums of at most 60 terms in another order: 1e-12 relative is far above their
/// rounding and far below a missing term.
#[test]
fn fused_training_step_equals_the_composed_one() {
    use burn::backend::{ndarray::NdArray, Autodiff, Flex};
    use curriculum_ssl_models::kernels;

    let shape = [3, 4, 5, 4];
    let len: usize = shape.iter().product();
    let (xs, rs) = (irregular_inputs(len), loss_weights(len));
    let gamma = vec![1.7, -0.6, 0.9, 1.1];
    let beta = vec![0.3, -1.1, 0.0, 2.0];
    let fused = step::<Autodiff<Flex>>(&xs, &rs, &gamma, &beta, shape);
    let composed = step::<Autodiff<NdArray<f64>>>(&xs, &rs, &gamma, &beta, shape);
    let names = [
        "output",
        "∂x",
        "∂γ",
        "∂β",
        "running mean",
        "running variance",
    ];
    for ((a, b), name) in fused.iter().zip(&composed).zip(names) {
        assert_eq!(a.len(), b.len(), "{name}");
        for (p, q) in a.iter().zip(b) {
            assert!(
                (p - q).abs() <= 1e-12 * (1.0 + p.abs().max(q.abs())),
                "{name}: {p} against {q}"
            );
        }
    }

    // The fused path is the one `Autodiff<Flex>` took (and not under synchronised batch norm,
    // whose moments need the replicas' average: the composed form then).
    type Ad = Autodiff<Flex>;
    let device = Default::default();
    let x = || Tensor::<Ad, 4>::ones(shape, &device);
    let ones = || Tensor::<Ad, 1>::ones([4], &device);
    let running = || kernels::RunningAverages {
        mean: ones(),
        var: ones(),
        momentum: 0.1,
        unbiased: true,
    };
    assert!(kernels::batch_norm_train(x(), ones(), ones(), running(), 1e-5, 1).is_ok());
    struct Alone;
    impl curriculum_ssl_models::replica_stats::ReplicaMean<Ad> for Alone {
        fn mean(&self, values: Tensor<Ad, 1>) -> Tensor<Ad, 1> {
            values
        }
        fn replicas(&self) -> usize {
            1
        }
    }
    let _sync = curriculum_ssl_models::replica_stats::install::<Ad>(std::sync::Arc::new(Alone));
    // Not taken: the running averages come back as they were given, for the composed form.
    let given = kernels::RunningAverages {
        mean: Tensor::<Ad, 1>::from_floats([0.5, -1.0, 2.0, 0.25], &device),
        var: Tensor::<Ad, 1>::from_floats([3.0, 1.5, 0.5, 1.0], &device),
        momentum: 0.1,
        unbiased: true,
    };
    let Err((_, back)) = kernels::batch_norm_train(x(), ones(), ones(), given, 1e-5, 1) else {
        panic!("synchronised batch norm took the fused path");
    };
    let v = |t: Tensor<Ad, 1>| t.into_data().convert::<f32>().to_vec::<f32>().unwrap();
    assert_eq!(v(back.mean), vec![0.5, -1.0, 2.0, 0.25]);
    assert_eq!(v(back.var), vec![3.0, 1.5, 0.5, 1.0]);
}

/// The layer's running averages over three training steps of a batch stacked from two groups
/// (`forward_grouped`), each step moving them by each group's batch moments in turn, against
/// PyTorch's update written out by plain f64 sums (`r ← 0.9·r + 0.1·μ`,
/// `v ← 0.9·v + 0.1·σ²·M/(M − 1)`). On `Autodiff<NdArray<f64>>` the operation falls back,
/// handing the averages back untouched, and the composed form runs; on `Autodiff<Flex>` the
/// operation falls back for two groups and the slice kernels take one call per group. Read
/// with `value()`, not `value_sync()`, right after each step: a thread that trains alone leaves
/// nothing pending (`RunningStat::step`). f64 sums of 6 terms in another order: 1e-12.
#[test]
fn running_averages_over_grouped_steps_follow_pytorch() {
    use burn::backend::{ndarray::NdArray, Autodiff, Flex};
    fn steps<B: burn::tensor::backend::AutodiffBackend>(shape: [usize; 4]) -> Vec<[Vec<f64>; 2]> {
        use burn::module::Param;
        use burn::tensor::{DType, TensorData};
        use curriculum_ssl_models::layers::BatchNorm2d;
        use curriculum_ssl_models::running_stat::RunningStat;
        let device = Default::default();
        let f64s = |v: Vec<f64>| {
            let len = v.len();
            Tensor::<B, 1>::from_data(TensorData::new(v, [len]), (&device, DType::F64))
        };
        let c = shape[1];
        let mut bn: BatchNorm2d<B> = BatchNorm2dConfig::new(c).init(&device);
        bn.weight = Param::from_tensor(f64s(vec![1.0; c]));
        bn.bias = Param::from_tensor(f64s(vec![0.0; c]));
        bn.running_mean = RunningStat::new(f64s(vec![0.0; c]));
        bn.running_var = RunningStat::new(f64s(vec![1.0; c]));
        let v = |t: Tensor<B, 1>| t.into_data().convert::<f64>().to_vec::<f64>().unwrap();
        (0..3)
            .map(|s| {
                let x = f64s(step_inputs(s, shape)).reshape(shape).require_grad();
                let y = bn.forward_grouped(x, 2);
                let _ = y.sum().backward();
                [v(bn.running_mean.value()), v(bn.running_var.value())]
            })
            .collect()
    }
    let shape = [4, 3, 1, 3];
    let [n, c, _, w] = shape;
    // By hand: per step, group (two images) and channel, the 6 values' moments.
    let (mut mean, mut var) = (vec![0.0; c], vec![1.0; c]);
    let mut expected = Vec::new();
    for s in 0..3 {
        let xs = step_inputs(s, shape);
        for g in 0..2 {
            for ch in 0..c {
                let values: Vec<f64> = (g * n / 2..(g + 1) * n / 2)
                    .flat_map(|i| (0..w).map(move |j| (i * c + ch) * w + j))
                    .map(|k| xs[k])
                    .collect();
                let m = values.len() as f64;
                let mu = values.iter().sum::<f64>() / m;
                let unbiased = values.iter().map(|x| (x - mu).powi(2)).sum::<f64>() / (m - 1.0);
                mean[ch] = 0.9 * mean[ch] + 0.1 * mu;
                var[ch] = 0.9 * var[ch] + 0.1 * unbiased;
            }
        }
        expected.push([mean.clone(), var.clone()]);
    }
    for (backend, got) in [
        ("NdArray<f64>", steps::<Autodiff<NdArray<f64>>>(shape)),
        ("Flex", steps::<Autodiff<Flex>>(shape)),
    ] {
        for (s, (got, want)) in got.iter().zip(&expected).enumerate() {
            for (name, got, want) in [("mean", &got[0], &want[0]), ("var", &got[1], &want[1])] {
                for (p, q) in got.iter().zip(want) {
                    assert!(
                        (p - q).abs() <= 1e-12 * (1.0 + q.abs()),
                        "{backend}, step {s}, running {name}: {got:?} against {want:?}"
                    );
                }
            }
        }
    }
}

/// Inputs of step `s` for [`running_averages_over_grouped_steps_follow_pytorch`]: halves and
/// integers of unequal spread per channel.
fn step_inputs(s: usize, shape: [usize; 4]) -> Vec<f64> {
    let len: usize = shape.iter().product();
    (0..len)
        .map(|i| ((i * 7 + s * 5) % 11) as f64 * 0.5 - 2.0 + (i % 3) as f64 * (s as f64 + 1.0))
        .collect()
}

/// One training step of a `BatchNorm2d` on backend `B` in f64: `L = Σ BN(x) ⊙ r`; the output,
/// the gradients of the input, γ and β, and the running averages after it.
fn step<B: burn::tensor::backend::AutodiffBackend>(
    xs: &[f64],
    rs: &[f64],
    gamma: &[f64],
    beta: &[f64],
    shape: [usize; 4],
) -> [Vec<f64>; 6] {
    use burn::module::Param;
    use burn::tensor::{DType, TensorData};
    use curriculum_ssl_models::layers::BatchNorm2d;
    use curriculum_ssl_models::running_stat::RunningStat;
    let device = Default::default();
    let f64s = |v: &[f64]| {
        Tensor::<B, 1>::from_data(
            TensorData::new(v.to_vec(), [v.len()]),
            (&device, DType::F64),
        )
    };
    let mut bn: BatchNorm2d<B> = BatchNorm2dConfig::new(4).init(&device);
    bn.weight = Param::from_tensor(f64s(gamma));
    bn.bias = Param::from_tensor(f64s(beta));
    bn.running_mean = RunningStat::new(f64s(&[0.5, -0.5, 0.0, 1.0]));
    bn.running_var = RunningStat::new(f64s(&[1.0, 2.0, 0.5, 1.5]));
    let x = f64s(xs).reshape(shape).require_grad();
    let y = bn.forward(x.clone());
    let grads = y.clone().mul(f64s(rs).reshape(shape)).sum().backward();
    let v = |t: Tensor<B::InnerBackend, 1>| t.into_data().convert::<f64>().to_vec().unwrap();
    [
        v(y.inner().reshape([len_of(shape)])),
        v(x.grad(&grads).unwrap().reshape([len_of(shape)])),
        v(bn.weight.grad(&grads).unwrap()),
        v(bn.bias.grad(&grads).unwrap()),
        // Synchronised, as a reader on any thread would need (a step on one thread leaves
        // nothing pending: `value()` reads the same here).
        v(bn.running_mean.value_sync().inner()),
        v(bn.running_var.value_sync().inner()),
    ]
}

/// Asserts two training steps' `[output, ∂x, ∂γ, ∂β, running mean, running variance]` equal to
/// 1e-12 relative: f64 sums of a few dozen terms in another order (or split in groups) differ
/// by far less.
fn assert_steps_agree(a: &[Vec<f64>; 6], b: &[Vec<f64>; 6], context: &str) {
    let names = [
        "output",
        "∂x",
        "∂γ",
        "∂β",
        "running mean",
        "running variance",
    ];
    for ((name, a), b) in names.iter().zip(a).zip(b) {
        assert_eq!(a.len(), b.len(), "{name} ({context})");
        for (p, q) in a.iter().zip(b) {
            assert!(
                (p - q).abs() <= 1e-12 * (1.0 + p.abs().max(q.abs())),
                "{name} ({context}): {p} against {q}"
            );
        }
    }
}

/// The number of entries of a tensor of this shape.
fn len_of(shape: [usize; 4]) -> usize {
    shape.iter().product()
}

/// Batch norm in training as one operation in burn's tensor operations
/// (`kernels::batch_norm_op`, what `Autodiff<Wgpu>` and `Autodiff<Cuda>` run) equals the
/// composed form (checked against finite differences above) on `Autodiff<NdArray<f64>>`: the
/// output, the gradients of the input, γ and β, and the running averages it moves, and those
/// against PyTorch's update written out with the batch moments by plain f64 sums (momentum
/// 0.1, the unbiased variance); untracked, the same output and running averages.
/// f64 sums of at most 60 terms in another order: 1e-12 relative, as above.
#[test]
fn tensor_op_training_step_equals_the_composed_one() {
    use burn::backend::{ndarray::NdArray, Autodiff};
    use burn::tensor::{DType, TensorData};
    use curriculum_ssl_models::kernels::batch_norm_op::batch_norm_train_op;
    use curriculum_ssl_models::kernels::RunningAverages;
    type B = Autodiff<NdArray<f64>>;

    let shape = [3, 4, 5, 4];
    let len = len_of(shape);
    let (xs, rs) = (irregular_inputs(len), loss_weights(len));
    let gamma = vec![1.7, -0.6, 0.9, 1.1];
    let beta = vec![0.3, -1.1, 0.0, 2.0];
    let composed = step::<B>(&xs, &rs, &gamma, &beta, shape);

    let device = Default::default();
    let f64s = |v: &[f64]| {
        Tensor::<B, 1>::from_data(
            TensorData::new(v.to_vec(), [v.len()]),
            (&device, DType::F64),
        )
    };
    let x = f64s(&xs).reshape(shape).require_grad();
    let (g, b) = (f64s(&gamma).require_grad(), f64s(&beta).require_grad());
    let (start_mean, start_var) = ([0.5, -0.5, 0.0, 1.0], [1.0, 2.0, 0.5, 1.5]);
    let running = || RunningAverages {
        mean: f64s(&start_mean),
        var: f64s(&start_var),
        momentum: 0.1,
        unbiased: true,
    };
    let out = batch_norm_train_op(x.clone(), g.clone(), b.clone(), running(), 1e-5, 1);
    // Untracked (nothing asks for a gradient: no backward step, no moments kept), the same
    // output and running averages.
    let untracked = batch_norm_train_op(
        f64s(&xs).reshape(shape),
        f64s(&gamma),
        f64s(&beta),
        running(),
        1e-5,
        1,
    );
    assert!(!untracked.output.is_require_grad());
    let y = out.output;
    // The running averages carry no gradient.
    assert!(!out.running.mean.is_require_grad() && !out.running.var.is_require_grad());
    let grads = y.clone().mul(f64s(&rs).reshape(shape)).sum().backward();
    let v = |t: Tensor<NdArray<f64>, 1>| -> Vec<f64> { t.into_data().to_vec().unwrap() };
    let moved = [v(out.running.mean.inner()), v(out.running.var.inner())];
    let op = [
        v(y.inner().reshape([len])),
        v(x.grad(&grads).unwrap().reshape([len])),
        v(g.grad(&grads).unwrap()),
        v(b.grad(&grads).unwrap()),
    ];
    // The moments by hand: channel `c` holds entries whose index / 20 is c modulo 4.
    let positions = shape[2] * shape[3];
    let channel = |c: usize| {
        xs.iter()
            .enumerate()
            .filter(move |(i, _)| (i / positions) % 4 == c)
    };
    let count = (len / 4) as f64;
    let means: Vec<f64> = (0..4)
        .map(|c| channel(c).map(|(_, x)| x).sum::<f64>() / count)
        .collect();
    let vars: Vec<f64> = (0..4)
        .map(|c| channel(c).map(|(_, x)| (x - means[c]).powi(2)).sum::<f64>() / count)
        .collect();
    let by_hand_mean: Vec<f64> = (0..4)
        .map(|c| 0.9 * start_mean[c] + 0.1 * means[c])
        .collect();
    let by_hand_var: Vec<f64> = (0..4)
        .map(|c| 0.9 * start_var[c] + 0.1 * vars[c] * count / (count - 1.0))
        .collect();
    let pairs = [
        ("output", &op[0], &composed[0]),
        ("∂x", &op[1], &composed[1]),
        ("∂γ", &op[2], &composed[2]),
        ("∂β", &op[3], &composed[3]),
        ("running mean", &moved[0], &composed[4]),
        ("running variance", &moved[1], &composed[5]),
        ("running mean by hand", &moved[0], &by_hand_mean),
        ("running variance by hand", &moved[1], &by_hand_var),
        (
            "untracked output",
            &v(untracked.output.inner().reshape([len])),
            &op[0],
        ),
        (
            "untracked running mean",
            &v(untracked.running.mean.inner()),
            &moved[0],
        ),
        (
            "untracked running variance",
            &v(untracked.running.var.inner()),
            &moved[1],
        ),
    ];
    for (name, a, b) in pairs {
        assert_eq!(a.len(), b.len(), "{name}");
        for (p, q) in a.iter().zip(b.iter()) {
            assert!(
                (p - q).abs() <= 1e-12 * (1.0 + p.abs().max(q.abs())),
                "{name}: {p} against {q}"
            );
        }
    }
}

/// Batch norm over two stacked groups (`batch_norm_train_op` with `groups` 2: the two views of
/// a method in one pass, each normalised with its own moments) equals two separate calls, one
/// per group, on `Autodiff<NdArray<f64>>`: the output and `∂x` of each group, `∂γ`, `∂β` as
/// the sum of the two calls' (a parameter used twice), and the running averages (moved by
/// each group's moments in turn) as the second call leaves them after the first moved them. The groups
/// are given different means and scales, so that one set of moments over both would fail.
/// f64 sums of at most 30 terms, in another order or split in two: 1e-12 relative.
#[test]
fn grouped_training_step_equals_one_call_per_group() {
    use burn::backend::{ndarray::NdArray, Autodiff};
    use burn::tensor::{DType, TensorData};
    use curriculum_ssl_models::kernels::batch_norm_op::batch_norm_train_op;
    use curriculum_ssl_models::kernels::RunningAverages;
    type B = Autodiff<NdArray<f64>>;

    let group = [2, 3, 5, 3];
    let shape = [4, 3, 5, 3];
    let (len, half) = (len_of(shape), len_of(group));
    let xs: Vec<f64> = irregular_inputs(len)
        .iter()
        .enumerate()
        .map(|(i, x)| if i < half { *x } else { 3.0 * x - 2.5 })
        .collect();
    let rs = loss_weights(len);
    let gamma = vec![1.7, -0.6, 0.9];
    let beta = vec![0.3, -1.1, 2.0];
    let device = Default::default();
    let f64s = |v: &[f64], dims: [usize; 4]| {
        Tensor::<B, 1>::from_data(
            TensorData::new(v.to_vec(), [v.len()]),
            (&device, DType::F64),
        )
        .reshape(dims)
    };
    let param = |v: &[f64]| {
        Tensor::<B, 1>::from_data(TensorData::new(v.to_vec(), [3]), (&device, DType::F64))
            .require_grad()
    };
    let v = |t: Tensor<NdArray<f64>, 1>| -> Vec<f64> { t.into_data().to_vec().unwrap() };
    let running = |mean: &[f64], var: &[f64]| RunningAverages {
        mean: param(mean).detach(),
        var: param(var).detach(),
        momentum: 0.3,
        unbiased: true,
    };
    // [output, ∂x, ∂γ, ∂β, running mean, running variance] of one call on `x`
    // with loss weights `r`, from the running averages `start`.
    let run = |x: &[f64], r: &[f64], dims: [usize; 4], groups: usize, start: &[Vec<f64>]| {
        let n: usize = dims.iter().product();
        let x = f64s(x, dims).require_grad();
        let (g, b) = (param(&gamma), param(&beta));
        let moving = running(&start[0], &start[1]);
        let out = batch_norm_train_op(x.clone(), g.clone(), b.clone(), moving, 1e-5, groups);
        let grads = out.output.clone().mul(f64s(r, dims)).sum().backward();
        [
            v(out.output.inner().reshape([n])),
            v(x.grad(&grads).unwrap().reshape([n])),
            v(g.grad(&grads).unwrap()),
            v(b.grad(&grads).unwrap()),
            v(out.running.mean.inner()),
            v(out.running.var.inner()),
        ]
    };
    let start = [vec![0.5, -0.5, 1.0], vec![1.0, 2.0, 0.5]];
    let joint = run(&xs, &rs, shape, 2, &start);
    let first = run(&xs[..half], &rs[..half], group, 1, &start);
    let second = run(&xs[half..], &rs[half..], group, 1, &first[4..]);
    let concat = |i: usize| [first[i].clone(), second[i].clone()].concat();
    let sum = |i: usize| -> Vec<f64> {
        first[i]
            .iter()
            .zip(&second[i])
            .map(|(a, b)| a + b)
            .collect()
    };
    let expected = [
        concat(0),
        concat(1),
        sum(2),
        sum(3),
        second[4].clone(),
        second[5].clone(),
    ];
    assert_steps_agree(&joint, &expected, "two groups");
    // The groups' moments differ (the check above would not see one set for both): each
    // group's mean of channel 0 from the running mean its call moved (`r ← 0.7·r + 0.3·μ`).
    let mean_of = |before: f64, after: f64| (after - 0.7 * before) / 0.3;
    let (mean1, mean2) = (
        mean_of(start[0][0], first[4][0]),
        mean_of(first[4][0], second[4][0]),
    );
    assert!((mean1 - mean2).abs() > 1.0, "means {mean1} and {mean2}");
}

/// The operation with a biased running variance (`RunningAverages::unbiased` false: what an
/// MLP head's batch norm runs on the GPU backends, `kernels::batch_norm_1d_train`) on features
/// `[N, C]` seen as `[N, C, 1, 1]` equals burn's own `BatchNorm` on `[N, C]`, one call per group,
/// on `Autodiff<NdArray<f64>>`: the output, the gradients of the input, γ and β (summed over
/// the calls), and the running averages burn's leaves after both calls; with the ReLU inside the
/// operation (`batch_norm_relu_train_op`), burn's `relu` after its `BatchNorm`. Two groups of
/// different scales, so that one set of moments for both would fail. No value before the ReLU
/// lies within 1e-6 of zero (asserted): in f64 both take the same mask. f64 sums of 6 terms in
/// another order: 1e-12 relative.
#[test]
fn biased_running_variance_is_burns_batch_norm() {
    use burn::backend::{ndarray::NdArray, Autodiff};
    use burn::module::Param;
    use burn::nn::BatchNormConfig;
    use burn::tensor::{DType, TensorData};
    use curriculum_ssl_models::kernels::batch_norm_op::{
        batch_norm_relu_train_op, batch_norm_train_op,
    };
    use curriculum_ssl_models::kernels::RunningAverages;
    type B = Autodiff<NdArray<f64>>;

    let (n, c, groups) = (12, 3, 2);
    let xs: Vec<f64> = irregular_inputs(n * c)
        .iter()
        .enumerate()
        .map(|(i, x)| if i < n * c / 2 { *x } else { 2.5 * x + 1.5 })
        .collect();
    let rs = loss_weights(n * c);
    let (gamma, beta) = ([1.7, -0.6, 0.9], [0.3, -1.1, 0.2]);
    let (start_mean, start_var) = ([0.5, -0.5, 1.0], [1.0, 2.0, 0.5]);
    let device = Default::default();
    let f64s = |v: &[f64]| {
        Tensor::<B, 1>::from_data(
            TensorData::new(v.to_vec(), [v.len()]),
            (&device, DType::F64),
        )
    };
    fn v<K: Backend, const D: usize>(t: Tensor<K, D>) -> Vec<f64> {
        t.into_data().to_vec().unwrap()
    }
    for relu in [false, true] {
        // The operation on the stacked groups.
        let x = f64s(&xs).reshape([n, c, 1, 1]).require_grad();
        let (g, b) = (f64s(&gamma).require_grad(), f64s(&beta).require_grad());
        let running = RunningAverages {
            mean: f64s(&start_mean),
            var: f64s(&start_var),
            momentum: 0.1,
            unbiased: false,
        };
        let out = match relu {
            true => batch_norm_relu_train_op(
                x.clone(),
                g.clone(),
                b.clone(),
                running,
                1e-5,
                groups,
                None,
            ),
            false => batch_norm_train_op(x.clone(), g.clone(), b.clone(), running, 1e-5, groups),
        };
        let grads = out
            .output
            .clone()
            .mul(f64s(&rs).reshape([n, c, 1, 1]))
            .sum()
            .backward();
        let op = [
            v(out.output.reshape([n * c])),
            v(x.grad(&grads).unwrap().reshape([n * c])),
            v(g.grad(&grads).unwrap()),
            v(b.grad(&grads).unwrap()),
            v(out.running.mean),
            v(out.running.var),
        ];
        // burn's `BatchNorm`, one call per group, its state carried from one to the next.
        let mut burn_bn = BatchNormConfig::new(c).init::<B>(&device);
        burn_bn.gamma = Param::from_tensor(f64s(&gamma));
        burn_bn.beta = Param::from_tensor(f64s(&beta));
        burn_bn.running_mean = burn::module::RunningState::new(f64s(&start_mean));
        burn_bn.running_var = burn::module::RunningState::new(f64s(&start_var));
        let x = f64s(&xs).reshape([n, c]).require_grad();
        let mut outputs = Vec::new();
        let mut nearest = f64::INFINITY;
        for group in x.clone().chunk(groups, 0) {
            let y = burn_bn.forward(group);
            let values: Vec<f64> = y.clone().into_data().to_vec().unwrap();
            nearest = values.iter().fold(nearest, |m, v| m.min(v.abs()));
            outputs.push(if relu {
                burn::tensor::activation::relu(y)
            } else {
                y
            });
        }
        assert!(
            nearest > 1e-6,
            "a value {nearest} before the ReLU is too near 0"
        );
        let y = Tensor::cat(outputs, 0);
        let grads = y.clone().mul(f64s(&rs).reshape([n, c])).sum().backward();
        let burns = [
            v(y.reshape([n * c])),
            v(x.grad(&grads).unwrap().reshape([n * c])),
            v(burn_bn.gamma.grad(&grads).unwrap()),
            v(burn_bn.beta.grad(&grads).unwrap()),
            v(burn_bn.running_mean.value_sync()),
            v(burn_bn.running_var.value_sync()),
        ];
        assert_steps_agree(&op, &burns, &format!("ReLU {relu}"));
    }
}

/// `batch_norm_relu_train_op` (the batch norm, a residual added and a ReLU as one operation, what
/// a ResNet block's `relu(bn(x) + identity)` runs on the GPU backends) equals burn's composition
/// of `batch_norm_train_op`, `add` and `relu` under autodiff on `Autodiff<NdArray<f64>>`: the
/// output, the gradients of the input, γ, β and the residual, and the running averages, over
/// two groups with a residual and one without. About half the outputs are zeroed (asserted), so
/// the ReLU's mask matters to every gradient. The same f64 operations in the same order but for
/// the ReLU's mask taken by hand: 1e-12 relative.
#[test]
fn relu_epilogue_equals_the_composition() {
    use burn::backend::{ndarray::NdArray, Autodiff};
    use burn::tensor::{activation, DType, TensorData};
    use curriculum_ssl_models::kernels::batch_norm_op::{
        batch_norm_relu_train_op, batch_norm_train_op,
    };
    use curriculum_ssl_models::kernels::RunningAverages;
    type B = Autodiff<NdArray<f64>>;

    let device = Default::default();
    let f64s = |v: &[f64]| {
        Tensor::<B, 1>::from_data(
            TensorData::new(v.to_vec(), [v.len()]),
            (&device, DType::F64),
        )
    };
    let v = |t: Tensor<NdArray<f64>, 1>| -> Vec<f64> { t.into_data().to_vec().unwrap() };
    for (shape, groups, with_residual) in [([4, 3, 5, 3], 2, true), ([3, 4, 5, 4], 1, false)] {
        let len = len_of(shape);
        let c = shape[1];
        let (xs, rs) = (irregular_inputs(len), loss_weights(len));
        let residual: Vec<f64> = (0..len)
            .map(|i| ((i * 29 % 17) as f64 - 8.0) / 6.0)
            .collect();
        let gamma: Vec<f64> = [1.7, -0.6, 0.9, 1.1][..c].to_vec();
        let beta: Vec<f64> = [0.3, -0.4, 0.0, 0.2][..c].to_vec();
        // [output, ∂x, ∂γ, ∂β, ∂residual, running mean, running variance]
        let run = |fused: bool| {
            let x = f64s(&xs).reshape(shape).require_grad();
            let (g, b) = (f64s(&gamma).require_grad(), f64s(&beta).require_grad());
            let r = with_residual.then(|| f64s(&residual).reshape(shape).require_grad());
            let running = RunningAverages {
                mean: f64s(&vec![0.5; c]),
                var: f64s(&vec![1.5; c]),
                momentum: 0.1,
                unbiased: true,
            };
            let (y, moved) = if fused {
                let out = batch_norm_relu_train_op(
                    x.clone(),
                    g.clone(),
                    b.clone(),
                    running,
                    1e-5,
                    groups,
                    r.clone(),
                );
                (out.output, out.running)
            } else {
                let out =
                    batch_norm_train_op(x.clone(), g.clone(), b.clone(), running, 1e-5, groups);
                let y = match &r {
                    Some(r) => out.output + r.clone(),
                    None => out.output,
                };
                (activation::relu(y), out.running)
            };
            let grads = y.clone().mul(f64s(&rs).reshape(shape)).sum().backward();
            [
                v(y.inner().reshape([len])),
                v(x.grad(&grads).unwrap().reshape([len])),
                v(g.grad(&grads).unwrap()),
                v(b.grad(&grads).unwrap()),
                r.map(|r| v(r.grad(&grads).unwrap().reshape([len])))
                    .unwrap_or_default(),
                v(moved.mean.inner()),
                v(moved.var.inner()),
            ]
        };
        let (fused, composed) = (run(true), run(false));
        let zeros = composed[0].iter().filter(|y| **y == 0.0).count() as f64 / len as f64;
        assert!((0.2..0.8).contains(&zeros), "{zeros} of the outputs zeroed");
        let names = [
            "output",
            "∂x",
            "∂γ",
            "∂β",
            "∂residual",
            "running mean",
            "running variance",
        ];
        for ((name, a), b) in names.iter().zip(&fused).zip(&composed) {
            assert_eq!(a.len(), b.len(), "{name}");
            for (p, q) in a.iter().zip(b) {
                assert!(
                    (p - q).abs() <= 1e-12 * (1.0 + p.abs().max(q.abs())),
                    "{name} of {shape:?}: {p} against {q}"
                );
            }
        }
        assert_eq!(fused[4].len(), if with_residual { len } else { 0 });
    }
}

/// Fixed, irregular input values (no generator), of several magnitudes.
fn irregular_inputs(len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| ((i * 37 % 23) as f64 / 7.0 - 1.3) * (1.0 + (i % 3) as f64))
        .collect()
}

/// Fixed loss weights `r` for `L = Σ BN(x) ⊙ r`.
fn loss_weights(len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| ((i * 11 % 13) as f64 - 6.0) / 5.0)
        .collect()
}
