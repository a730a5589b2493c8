//! `bench_step`: the training step of SimCLR, MoCo v2, BYOL or SimSiam with ResNet-18 (CIFAR
//! stem) on fixed views, timed on the selected backend: the same work as
//! `benches/train_step.rs` (the CPU, criterion) and `benches/pytorch/train_step.py` (PyTorch,
//! CPU or CUDA), for the GPU, where the binary is what travels (`scripts/gpu_check.sh`).
//!
//! A step is what the recipes' loop does minus augmentation and data: both views forward, the
//! loss, backward, SGD (momentum 0.9, weight decay 5e-4), the EMA / queue update. The views are
//! fixed pseudo-random images. The device is synchronised after the warm-up steps and after the
//! timed ones, so the time is the device's, not the launches'.
//!
//! What a step costs besides its time, for the GPU path measured without a GPU (wgpu on Mesa's
//! lavapipe, docs/gpu.md):
//! - `--count-kernels` (a wgpu or CUDA build): the kernels launched per timed step, by name, from
//!   cubecl's profiling logger at its `minimal` level (one line `Executing NAME` per launch,
//!   written by cubecl's logging thread; launches stay asynchronous, nothing is timed);
//!   Then one more step with the device synchronised after the forward pass, the backward pass
//!   and the optimiser step: the kernels of each phase, by name;
//! - `--profile-kernels` (a wgpu or CUDA build): the same count with each kernel timed on the
//!   device (cubecl's logger at its `basic` level: every launch waits for the previous one),
//!   summed per step by name (`kernel_ms_by_name`) and in all (`kernel_ms_per_step`, the
//!   device's busy time; the step's own time is then the profiled one, not comparable);
//! - a wgpu or CUDA build: the device memory cubecl's memory management reports, in use at the
//!   end of each phase of that extra step and reserved after it (`memory_mib`; the extra step
//!   runs whenever there are kernels or memory to read);
//! - always: the wall-clock time per step until `step` returns, before the synchronisation
//!   (`issue_ms_per_step`: the host's issuing, which the device overlaps);
//! - always: the CPU time of each of the process's threads per timed step (Linux's
//!   `/proc/self/task/*/stat`), grouped by thread name: the training thread and burn's and
//!   cubecl's server threads are the host's work; on lavapipe the `llvmpipe-*` threads run the
//!   kernels.

use std::time::Instant;

use anyhow::Result;
use burn::optim::Optimizer;
use burn::prelude::*;
use clap::{Parser, ValueEnum};
use curriculum_ssl::method::Progress;
use curriculum_ssl::method::{
    ByolConfig, MocoConfig, SimClrConfig, SimSiamConfig, SslMethod, ViewPasses,
};
use curriculum_ssl::optim::{SgdConfig, StandIns};
use curriculum_ssl_models::{ResNet, ResNetConfig, Stem};

use super::RecipeEntry;
use crate::backend::{self, Precision, Train};

/// The methods timed.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// SimCLR: BN projector, NT-Xent.
    Simclr,
    /// MoCo v2: MLP head, InfoNCE against a queue, momentum encoder.
    #[value(name = "moco_v2")]
    MocoV2,
    /// BYOL: predictor, EMA target.
    Byol,
    /// SimSiam: predictor, stop-gradient.
    Simsiam,
}

/// How the two views go through the networks (`ViewPasses`).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum PassesChoice {
    /// One view after the other.
    Separate,
    /// The second view's backward pass on a thread of its own.
    Threads,
    /// Both views as one batch, the batch norms' moments per view.
    Joint,
}

impl From<PassesChoice> for ViewPasses {
    fn from(choice: PassesChoice) -> Self {
        match choice {
            PassesChoice::Separate => ViewPasses::Separate,
            PassesChoice::Threads => ViewPasses::Threads,
            PassesChoice::Joint => ViewPasses::Joint,
        }
    }
}

/// `recipe bench_step`'s options.
#[derive(Parser, Debug)]
#[command(no_binary_name = true, name = "recipe", args_override_self = true)]
struct BenchArgs {
    /// The method.
    #[arg(long, value_enum, default_value = "simclr")]
    method: Method,
    /// Images per step.
    #[arg(long, default_value_t = 256)]
    batch_size: usize,
    /// Side of the square RGB views.
    #[arg(long, default_value_t = 32)]
    image_size: usize,
    /// Steps timed.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Steps run before the timing (kernels compiled and tuned, memory pools grown).
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// The float type of every tensor (`recipe help simclr`, --precision).
    #[arg(long, value_enum, default_value = "f32")]
    precision: Precision,
    /// The device (as the training recipes' --device).
    #[arg(long)]
    device: Option<usize>,
    /// How the two views go through the networks (default: the training recipes' on this
    /// backend without --view-threads: `threads` on the CPU, `joint` on wgpu and CUDA).
    #[arg(long, value_enum)]
    view_passes: Option<PassesChoice>,
    /// Count the kernels each timed step launches, by name (a wgpu or CUDA build).
    #[arg(long)]
    count_kernels: bool,
    /// Count the kernels and time each one on the device, by name (a wgpu or CUDA build;
    /// cubecl's profiling logger at its `basic` level, which waits for every kernel before
    /// launching the next: the step's own time is then not the unprofiled one, the sum of the
    /// kernels' times is the device's busy time per step).
    #[arg(long)]
    profile_kernels: bool,
}

/// One timing's result.
#[derive(serde::Serialize)]
struct Timing {
    method: &'static str,
    backend: &'static str,
    precision: &'static str,
    /// How the two views went through the networks.
    view_passes: String,
    batch_size: usize,
    image_size: usize,
    steps: usize,
    warmup_s: f64,
    ms_per_step: f64,
    images_per_s: f64,
    first_loss: f32,
    last_loss: f32,
    /// CPU milliseconds per timed step of each group of threads (by name, digits dropped).
    cpu_ms_per_step: std::collections::BTreeMap<String, f64>,
    /// Kernels launched per timed step (`--count-kernels`).
    #[serde(skip_serializing_if = "Option::is_none")]
    kernels_per_step: Option<f64>,
    /// Kernels per timed step by name, most launched first (`--count-kernels`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    kernels_by_name: Vec<(String, f64)>,
    /// The device's time in kernels per timed step, in milliseconds (`--profile-kernels`).
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_ms_per_step: Option<f64>,
    /// Milliseconds per timed step in each kernel, by name, longest first
    /// (`--profile-kernels`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    kernel_ms_by_name: Vec<(String, f64)>,
    /// Wall-clock milliseconds per timed step until `step` returned, before the device's
    /// synchronisation: the host's time to issue the step (its operations, autodiff's graph,
    /// fusion's queue), which the device's work overlaps.
    issue_ms_per_step: f64,
    /// One more step with the device synchronised after each phase (`--count-kernels`): the
    /// kernels of the forward pass with the loss, of the backward pass, and of the optimiser
    /// step with the EMA / queue update, each by name. The synchronisations end fusion's chains
    /// at the phase boundaries, so the three may add up to a few more than a timed step.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    kernels_by_phase: Vec<PhaseKernels>,
    /// Device memory (a wgpu or CUDA build), from cubecl's memory management.
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_mib: Option<StepMemory>,
}

/// A GPU step's device memory in MiB, read from cubecl's memory management
/// ([`backend::DeviceMemory`]) with the device synchronised: in use between two steps, in use
/// at the end of each phase of one more step, and reserved after it.
#[derive(serde::Serialize)]
struct StepMemory {
    /// In use before the phase step: parameters, optimiser state, the EMA copy and the queue
    /// where the method has them, the two views.
    between_steps: f64,
    /// In use after the forward pass and the loss: the above plus what autodiff keeps for
    /// the backward pass (the step's activations).
    after_forward: f64,
    /// In use after the backward pass: the above less the freed activations, plus the
    /// gradients.
    after_backward: f64,
    /// In use after the optimiser step and the EMA / queue update.
    after_optimiser: f64,
    /// Reserved from the driver after the phase step (cubecl's pages: the process's high-water
    /// mark, autotune's benchmark buffers of the first steps included).
    reserved: f64,
}

/// The kernels of one phase of a step (`--count-kernels`).
#[derive(serde::Serialize)]
struct PhaseKernels {
    /// `forward`, `backward` or `optimiser`.
    phase: &'static str,
    /// Kernels launched in it.
    kernels: usize,
    /// By name, most launched first.
    by_name: Vec<(String, f64)>,
}

/// CPU time so far of each thread of this process, by name: `(name, seconds)` from Linux's
/// `/proc/self/task/*/stat` (user + system ticks); empty where there is no such file.
fn thread_cpu() -> Vec<(String, f64)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    // Linux reports these in USER_HZ, 100 on every architecture it runs on today.
    const TICKS_PER_S: f64 = 100.0;
    tasks
        .flatten()
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            // `pid (comm) state ...`: the name may hold spaces and parentheses; the fields
            // after the last `)` are numbered from 3 (state), utime is 14 and stime 15.
            let open = stat.find('(')?;
            let close = stat.rfind(')')?;
            let name = stat[open + 1..close].to_string();
            let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            let ticks = |i: usize| fields.get(i - 3)?.parse::<f64>().ok();
            Some((name, (ticks(14)? + ticks(15)?) / TICKS_PER_S))
        })
        .collect()
}

/// Per timed step, the CPU milliseconds of each group of threads between two readings of
/// [`thread_cpu`] (threads grouped by name with digits dropped: `llvmpipe-0`, `llvmpipe-1` →
/// `llvmpipe-`; a thread that ended in between is not counted).
fn cpu_per_step(
    before: &[(String, f64)],
    after: &[(String, f64)],
    steps: usize,
) -> std::collections::BTreeMap<String, f64> {
    let group = |name: &str| -> String { name.chars().filter(|c| !c.is_ascii_digit()).collect() };
    let mut sums = std::collections::BTreeMap::new();
    let mut start = std::collections::BTreeMap::<String, f64>::new();
    for (name, s) in before {
        *start.entry(group(name)).or_default() += s;
    }
    for (name, s) in after {
        *sums.entry(group(name)).or_insert(0.0) += s;
    }
    sums.into_iter()
        .map(|(g, s)| {
            let spent = s - start.get(&g).copied().unwrap_or(0.0);
            (g, (spent * 1e3 / steps as f64 * 100.0).round() / 100.0)
        })
        .filter(|(_, ms)| *ms > 0.0)
        .collect()
}

/// The kernel log of `--count-kernels` / `--profile-kernels`: cubecl's profiling logger at its
/// `minimal` level (a line `Executing NAME` per launch) or, `timed`, its `basic` level (a line
/// `| DURATION | NAME` per launch, each kernel timed on the device) into `path`, set before the
/// first tensor (cubecl reads its configuration once). The rest of the configuration is what
/// cubecl would read itself — a `cubecl.toml` in the working directory or above (the GPU
/// check's kernel and autotune caches), then the environment (`CUBECL_AUTOTUNE_LEVEL`) — since
/// a configuration set here replaces it.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn log_kernels(path: &std::path::Path, timed: bool) -> Result<()> {
    use burn::cubecl::config::profiling::ProfilingLogLevel;
    use burn::cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
    let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
    config.profiling.logger.level = if timed {
        ProfilingLogLevel::Basic
    } else {
        ProfilingLogLevel::Minimal
    };
    config.profiling.logger.file = Some(path.to_path_buf());
    config.profiling.logger.append = false;
    CubeClRuntimeConfig::set(config);
    Ok(())
}

/// See the wgpu / CUDA build's.
#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn log_kernels(_path: &std::path::Path, _timed: bool) -> Result<()> {
    Err(crate::usage::usage(
        "--count-kernels and --profile-kernels read cubecl's kernels: they need a wgpu or CUDA \
         build of `recipe` (cargo build --release --features wgpu)",
    ))
}

/// The lines of the kernel log once its writer has caught up: cubecl's logging thread writes
/// after the launches, so the file is read until it stops growing (checked every 200 ms).
fn settled_lines(path: &std::path::Path) -> Vec<String> {
    let mut last = None;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if last == Some(text.len()) {
            return text.lines().map(str::to_string).collect();
        }
        last = Some(text.len());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A launch in the kernel log: the kernel type's name (its generic arguments after the first
/// ` | ` dropped) and, at the `basic` level, its time on the device in milliseconds. Other
/// lines (compilations, cubecl's summary tables) are `None`.
fn launch(line: &str) -> Option<(&str, Option<f64>)> {
    let (name, ms) = match line.split("Executing ").nth(1) {
        Some(name) => (name, None),
        None => {
            // `| {duration:<10?} | {name}`: the duration as `Debug` prints one.
            let (duration, name) = line.strip_prefix("| ")?.split_once(" | ")?;
            let duration = duration.trim();
            let ms = [("ns", 1e-6), ("µs", 1e-3), ("ms", 1.0), ("s", 1e3)]
                .into_iter()
                .find_map(|(unit, scale)| {
                    let value: f64 = duration.strip_suffix(unit)?.parse().ok()?;
                    Some(value * scale)
                })?;
            (name, Some(ms))
        }
    };
    Some((name.split(" | ").next().unwrap_or(name).trim(), ms))
}

/// Kernels per step by name from the log lines of the timed steps, most launched first.
fn kernels_by_name(lines: &[String], steps: usize) -> Vec<(String, f64)> {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for (name, _) in lines.iter().filter_map(|line| launch(line)) {
        *counts.entry(name.to_string()).or_default() += 1;
    }
    most_first(counts.into_iter().map(|(name, n)| (name, n as f64)), steps)
}

/// Milliseconds per step in each kernel by name from the timed log lines of
/// `--profile-kernels`, longest first.
fn kernel_ms_by_name(lines: &[String], steps: usize) -> Vec<(String, f64)> {
    let mut times = std::collections::BTreeMap::<String, f64>::new();
    for (name, ms) in lines.iter().filter_map(|line| launch(line)) {
        *times.entry(name.to_string()).or_default() += ms.unwrap_or(0.0);
    }
    most_first(times, steps)
}

/// `(name, total)` as `(name, total / steps)`, the largest first (ties by name).
fn most_first(
    totals: impl IntoIterator<Item = (String, f64)>,
    steps: usize,
) -> Vec<(String, f64)> {
    let mut by_name: Vec<(String, f64)> = totals
        .into_iter()
        .map(|(name, total)| (name, total / steps as f64))
        .collect();
    by_name.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    by_name
}

fn resnet18(device: &backend::Device) -> ResNet<Train> {
    ResNetConfig::resnet18().with_stem(Stem::Cifar).init(device)
}

/// Fixed views in [0, 1): a multiplicative hash of the index and the seed (no generator state).
fn views(n: usize, side: usize, seed: u64, device: &backend::Device) -> Tensor<Train, 4> {
    let len = n * 3 * side * side;
    let values: Vec<f32> = (0..len as u64)
        .map(|i| {
            let h = (i ^ (seed << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (h >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    Tensor::from_data(TensorData::new(values, [n, 3, side, side]), device)
}

fn host_scalar(loss: Tensor<Train, 1>) -> f32 {
    loss.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .map(|v| v[0])
        .unwrap_or(f32::NAN)
}

fn time<S: SslMethod<Train>>(
    mut method: S,
    name: &'static str,
    args: &BenchArgs,
    device: &backend::Device,
    kernel_log: Option<&std::path::Path>,
) -> Result<Timing> {
    let passes = args.view_passes.map_or(backend::VIEW_PASSES, ViewPasses::from);
    method.set_view_passes(passes);
    let mut optimizer = SgdConfig::new().init::<Train, S::Online>()?;
    // Kept from step to step, as the trainer keeps them.
    let mut stand_ins = StandIns::default();
    let (v1, v2) = (
        views(args.batch_size, args.image_size, 1, device),
        views(args.batch_size, args.image_size, 2, device),
    );
    let total = args.warmup + args.steps;
    // The first and the last step's losses, read back once the timing is over.
    let (mut first, mut last) = (None, None);
    // A step; `phase_end` is called after each of its three phases (forward, backward,
    // optimiser).
    let mut step = |i: usize, phase_end: &mut dyn FnMut()| {
        let progress = Progress {
            step: i,
            total_steps: (total + 1).max(1_000),
            epoch: 0,
            total_epochs: 1,
        };
        let out = method.forward(v1.clone(), v2.clone(), progress);
        let loss = out.loss.clone().detach();
        phase_end();
        let grads = method.gradients(&out.loss);
        phase_end();
        let online = optimizer.step(0.05, method.take_online_with(&mut stand_ins), grads);
        method.set_online(online);
        method.after_step(progress);
        phase_end();
        loss
    };
    let sync = |device: &backend::Device| <Train as burn::tensor::backend::Backend>::sync(device);
    let started = Instant::now();
    for i in 0..args.warmup {
        let t = Instant::now();
        first.get_or_insert(step(i, &mut || ()));
        sync(device)?;
        // On a GPU the first steps compile and tune kernels: each one's time says how long.
        let s = t.elapsed().as_secs_f64();
        eprintln!("warm-up step {}/{}: {s:.2} s", i + 1, args.warmup);
    }
    let warmup_s = started.elapsed().as_secs_f64();
    let logged_before = kernel_log.map(|p| settled_lines(p).len());
    let cpu_before = thread_cpu();
    let timed = Instant::now();
    let mut issue_s = 0.0;
    for i in args.warmup..total {
        let t = Instant::now();
        let loss = step(i, &mut || ());
        issue_s += t.elapsed().as_secs_f64();
        // The first loss if the warm-up took none, else the last.
        *if first.is_none() { &mut first } else { &mut last } = Some(loss);
    }
    sync(device)?;
    let seconds = timed.elapsed().as_secs_f64();
    let cpu_ms_per_step = cpu_per_step(&cpu_before, &thread_cpu(), args.steps);
    let (kernels, kernel_times) = timed_kernels(kernel_log, logged_before, args);
    // One more step, phase by phase, for the kernels and the memory of each (on a backend that
    // has either to read).
    let (kernels_by_phase, memory_mib) = by_phase(
        &mut |phase_end: &mut dyn FnMut()| {
            step(total, phase_end);
        },
        device,
        kernel_log,
    )?;
    // What the device ran until here is the measured steps' (burn's fusion log ends with the
    // releases of the whole model when the run ends: benches/fusion_ops.py stops at this line).
    sync(device)?;
    eprintln!("measured steps done");
    let first_loss = first.map(host_scalar).unwrap_or(f32::NAN);
    let last_loss = last.map(host_scalar).unwrap_or(first_loss);
    Ok(Timing {
        method: name,
        backend: backend::NAME,
        precision: args.precision.name(),
        view_passes: format!("{passes:?}").to_lowercase(),
        batch_size: args.batch_size,
        image_size: args.image_size,
        steps: args.steps,
        warmup_s,
        ms_per_step: seconds * 1e3 / args.steps as f64,
        images_per_s: (args.batch_size * args.steps) as f64 / seconds,
        first_loss,
        last_loss,
        cpu_ms_per_step,
        kernels_per_step: kernels.as_ref().map(|k| k.iter().map(|(_, n)| n).sum()),
        kernels_by_name: kernels.unwrap_or_default(),
        kernel_ms_per_step: kernel_times
            .as_ref()
            .map(|t| (t.iter().map(|(_, ms)| ms).sum::<f64>() * 1e3).round() / 1e3),
        kernel_ms_by_name: kernel_times.unwrap_or_default(),
        issue_ms_per_step: issue_s * 1e3 / args.steps as f64,
        kernels_by_phase,
        memory_mib,
    })
}

/// Kernels by name and a number each (a count or milliseconds per step).
type ByName = Vec<(String, f64)>;

/// The kernels the timed steps launched, by name (counts per step), and with
/// `--profile-kernels` their times: the lines `kernel_log` gained after its first
/// `logged_before`.
fn timed_kernels(
    kernel_log: Option<&std::path::Path>,
    logged_before: Option<usize>,
    args: &BenchArgs,
) -> (Option<ByName>, Option<ByName>) {
    let timed_lines = kernel_log.zip(logged_before).map(|(path, before)| {
        let mut lines = settled_lines(path);
        lines.drain(..before.min(lines.len()));
        lines
    });
    let kernels = timed_lines
        .as_ref()
        .map(|lines| kernels_by_name(lines, args.steps));
    let kernel_times = timed_lines
        .as_ref()
        .filter(|_| args.profile_kernels)
        .map(|lines| kernel_ms_by_name(lines, args.steps));
    (kernels, kernel_times)
}

/// One step (`step` calls its argument after each of its three phases) read phase by phase:
/// the kernels each phase launched (from `kernel_log`) and the device's memory after each.
fn by_phase(
    step: &mut dyn FnMut(&mut dyn FnMut()),
    device: &backend::Device,
    kernel_log: Option<&std::path::Path>,
) -> Result<(Vec<PhaseKernels>, Option<StepMemory>)> {
    let sync = |device: &backend::Device| <Train as burn::tensor::backend::Backend>::sync(device);
    let mut kernels_by_phase = Vec::new();
    let mut memory_mib = None;
    if kernel_log.is_some() || backend::memory(device).is_some() {
        let mib = |m: Option<backend::DeviceMemory>| {
            m.map(|m| (m.in_use as f64 / 1048576.0, m.reserved as f64 / 1048576.0))
        };
        let mut readings = vec![mib(backend::memory(device))];
        let mut marks = vec![kernel_log.map(|p| settled_lines(p).len())];
        let mut failed = None;
        step(&mut || {
            if let Err(e) = sync(device) {
                failed.get_or_insert(e);
            }
            marks.push(kernel_log.map(|p| settled_lines(p).len()));
            readings.push(mib(backend::memory(device)));
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        if let [Some(a), Some(b), Some(c), Some(d)] = readings[..] {
            let round = |x: f64| (x * 10.0).round() / 10.0;
            memory_mib = Some(StepMemory {
                between_steps: round(a.0),
                after_forward: round(b.0),
                after_backward: round(c.0),
                after_optimiser: round(d.0),
                reserved: round(d.1),
            });
        }
        let marks: Vec<usize> = marks.into_iter().flatten().collect();
        let lines = kernel_log.map(settled_lines).unwrap_or_default();
        for (phase, bounds) in ["forward", "backward", "optimiser"]
            .into_iter()
            .zip(marks.windows(2))
        {
            let phase_lines = lines.get(bounds[0]..bounds[1]).unwrap_or_default();
            let by_name = kernels_by_name(phase_lines, 1);
            kernels_by_phase.push(PhaseKernels {
                phase,
                kernels: by_name.iter().map(|(_, n)| *n as usize).sum(),
                by_name,
            });
        }
    }
    Ok((kernels_by_phase, memory_mib))
}

/// The most bytes the two views' images of a step may take (f32): 64 GiB, past any GPU's memory
/// with the step's activations on top.
const MAX_VIEW_BYTES: u64 = 64 << 30;

/// Refuses a batch whose two views cannot fit: their images alone above [`MAX_VIEW_BYTES`], or,
/// on the CPU backend, above half the memory the system says is available (`--image-size
/// 100000` grew to 6 GB in seconds before anything said so).
fn check_views_fit(batch_size: usize, image_size: usize) -> Result<()> {
    let bytes = (2 * 3 * 4u64)
        .saturating_mul(batch_size as u64)
        .saturating_mul((image_size as u64).saturating_mul(image_size as u64));
    let mut limit = MAX_VIEW_BYTES;
    if backend::NAME.starts_with("cpu") {
        if let Some(available) = super::common::available_memory() {
            limit = limit.min(available / 2);
        }
    }
    if bytes > limit {
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        return Err(crate::usage::usage(format!(
            "--batch-size {batch_size} --image-size {image_size}: the two views' images alone \
             take {:.1} GiB, more than the {:.1} GiB a step may have here (activations come on \
             top); lower either",
            gib(bytes),
            gib(limit)
        )));
    }
    Ok(())
}

/// `recipe bench_step [--method M] [--batch-size N] [--image-size S] [--steps N] [--warmup N]
/// [--precision P] [--device N] [--count-kernels] [--profile-kernels]`.
pub fn run_cli(args: &[String]) -> Result<()> {
    let args: BenchArgs = super::common::parse_recipe_args("bench_step", args)?;
    if args.steps == 0 || args.batch_size < 2 || args.image_size < 8 {
        return Err(crate::usage::usage(format!(
            "recipe bench_step needs --steps of at least 1, --batch-size of at least 2 and \
             --image-size of at least 8 (got {}, {}, {})",
            args.steps, args.batch_size, args.image_size
        )));
    }
    check_views_fit(args.batch_size, args.image_size)?;
    // The kernel log is set up before the first tensor.
    let kernel_log = (args.count_kernels || args.profile_kernels).then(|| {
        std::env::temp_dir().join(format!(
            "recipe-bench-step-kernels-{}.log",
            std::process::id()
        ))
    });
    if let Some(path) = &kernel_log {
        log_kernels(path, args.profile_kernels)?;
    }
    let log = kernel_log.as_deref();
    let device = backend::open(args.device, args.precision)?;
    // The weights from seed 0: every run of a method starts from the same ones.
    let timing = match args.method {
        Method::Simclr => {
            let method = curriculum_ssl::seed::with_seed::<Train, _>(&device, 0, || {
                SimClrConfig::new().init(|_| resnet18(&device), &device)
            })?;
            time(method, "simclr", &args, &device, log)?
        }
        Method::MocoV2 => {
            let method = curriculum_ssl::seed::with_seed::<Train, _>(&device, 0, || {
                MocoConfig::moco_v2().init(resnet18, args.batch_size, &device)
            })?;
            time(method, "moco_v2", &args, &device, log)?
        }
        Method::Byol => {
            let method = curriculum_ssl::seed::with_seed::<Train, _>(&device, 0, || {
                ByolConfig::new().init(resnet18, &device)
            })?;
            time(method, "byol", &args, &device, log)?
        }
        Method::Simsiam => {
            let method = curriculum_ssl::seed::with_seed::<Train, _>(&device, 0, || {
                SimSiamConfig::new().init(|_| resnet18(&device), &device)
            })?;
            time(method, "simsiam", &args, &device, log)?
        }
    };
    println!("{}", serde_json::to_string(&timing)?);
    if let Some(path) = &kernel_log {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// The recipe of this module.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "bench_step",
    summary: "time the training step of SimCLR, MoCo v2, BYOL or SimSiam with ResNet-18 (CIFAR \
              stem) on fixed views on the selected backend, f32 or half precision (one JSON line)",
    run: run_cli,
}];

#[cfg(test)]
mod tests {
    use super::*;

    /// Views past 64 GiB are refused naming both options (they grew until the system killed
    /// the process); the default step's pass, and overflowing sizes saturate into the refusal.
    #[test]
    fn views_that_cannot_fit_are_refused() {
        check_views_fit(256, 32).unwrap();
        // 2 · 3 · 4 · 2 · 100000² bytes: 447 GiB.
        let e = check_views_fit(2, 100_000).unwrap_err().to_string();
        assert!(
            e.contains("--batch-size 2 --image-size 100000: the two views' images alone take"),
            "{e}"
        );
        assert!(check_views_fit(usize::MAX, usize::MAX).is_err());
    }

    /// Kernel names counted per step from log lines, most launched first; thread CPU grouped by
    /// name without digits, per step.
    #[test]
    fn kernel_lines_and_thread_times_are_counted_per_step() {
        let lines: Vec<String> = [
            "Executing ElemwiseFuse | f32 | CubeTensor",
            "Executing MatmulEntry | f32",
            "Executing ElemwiseFuse | f16",
            "Compiling kernel Foo",
            "Executing CastElement",
            "Executing ElemwiseFuse",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            kernels_by_name(&lines, 2),
            vec![
                ("ElemwiseFuse".to_string(), 1.5),
                ("CastElement".to_string(), 0.5),
                ("MatmulEntry".to_string(), 0.5),
            ]
        );
        let before = [("main".to_string(), 1.0), ("llvmpipe-0".to_string(), 2.0)];
        let after = [
            ("main".to_string(), 1.5),
            ("llvmpipe-0".to_string(), 3.0),
            ("llvmpipe-1".to_string(), 0.5),
            ("idle".to_string(), 0.0),
        ];
        let per_step = cpu_per_step(&before, &after, 10);
        assert_eq!(per_step.get("main"), Some(&50.0));
        assert_eq!(per_step.get("llvmpipe-"), Some(&150.0));
        assert_eq!(per_step.get("idle"), None);
        // This process's own threads are read (Linux).
        if cfg!(target_os = "linux") {
            assert!(!thread_cpu().is_empty());
        }
    }

    /// `--profile-kernels`' lines (`| DURATION | NAME`, the duration as `Debug` prints it):
    /// counted and timed per step by name; cubecl's summary table's rows are not launches.
    #[test]
    fn timed_kernel_lines_are_summed_per_step() {
        let lines: Vec<String> = [
            "| 1.5ms      | MatmulEntry | f32",
            "| 250µs      | ElemwiseFuse",
            "| 500ns      | ElemwiseFuse | f16",
            "| 2s         | Reduce",
            "| Name | Duration | Num Computed | Ratio |",
            "| ElemwiseFuse | 250.5µs | 2 | 3 % |",
            "| Ratios | 1s | 1 | 1 % |",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            kernels_by_name(&lines, 2),
            vec![
                ("ElemwiseFuse".to_string(), 1.0),
                ("MatmulEntry".to_string(), 0.5),
                ("Reduce".to_string(), 0.5),
            ]
        );
        let times = kernel_ms_by_name(&lines, 2);
        let names: Vec<&str> = times.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Reduce", "MatmulEntry", "ElemwiseFuse"]);
        // Per step, in ms: 2 s / 2; 1.5 ms / 2; (250 µs + 500 ns) / 2.
        for ((_, got), want) in times.iter().zip([1000.0, 0.75, 0.12525]) {
            assert!((got - want).abs() < 1e-12, "{got} against {want}");
        }
    }
}
