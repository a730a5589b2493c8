//! The backend the `recipe` binary trains on, chosen by cargo feature: `cuda` before `wgpu`
//! before the CPU (`Flex`, the default).
//!
//! Each backend's module is compiled whenever its feature is on, chosen or not, so that one
//! `cargo clippy --features wgpu,cuda` checks all three (CI's lint step).

#[cfg(feature = "cuda")]
mod cuda {
    /// Inference backend.
    pub type Inner = burn::backend::Cuda;
    /// Human-readable name.
    pub const NAME: &str = "cuda";
    /// Whether `--augment-ahead` defaults to on: no. Two threads working on one cubecl device
    /// at once changed results on wgpu (docs/gpu.md); and a GPU overlaps the augmentation's
    /// kernels with the step's anyway, since launching them does not wait for them.
    pub const AUGMENT_AHEAD: bool = false;
    /// How a two-view method passes its views without `--view-threads`: as one batch whose
    /// batch norms take the views apart (`ViewPasses::Joint`: half the kernel launches of a
    /// step, which bound it on a GPU; docs/gpu.md). Not on two threads: as `AUGMENT_AHEAD`,
    /// and the backward pass keeps a GPU busy from one thread.
    pub const VIEW_PASSES: curriculum_ssl::method::ViewPasses =
        curriculum_ssl::method::ViewPasses::Joint;
    /// Whether the small ResNet's stem runs as banded products: no, cuDNN-class kernels do
    /// better.
    pub const BANDED_STEM: bool = false;
    /// The largest error `recipe worked_values` accepts: 1e-3. burn's CUDA matmuls (cubek-matmul
    /// 0.2, `adjust_dtypes`) stage f32 operands as TF32 in their tensor-core kernels, which
    /// autotune picks where they are faster: 10-bit significands, each operand rounded by up to
    /// 2^-11, so a product is off by up to about 1e-3 relative, less on a sum of many. Measured
    /// on an H200: 1.34e-4 (curricular loss, t_prev 0.8); the bound is that measurement with a
    /// margin, not a proof.
    pub const WORKED_VALUE_TOLERANCE: f64 = 1e-3;

    /// What cubecl's memory management holds on `device` now (see [`super::DeviceMemory`]).
    pub fn memory(device: &burn::backend::cuda::CudaDevice) -> Option<super::DeviceMemory> {
        use burn::cubecl::Runtime;
        let usage = burn::cubecl::cuda::CudaRuntime::client(device)
            .memory_usage()
            .ok()?;
        Some(super::DeviceMemory {
            in_use: usage.bytes_in_use,
            reserved: usage.bytes_reserved,
        })
    }

    /// The CUDA device `--device` names (`None`: device 0), after checking that a driver and
    /// that device are there: CUDA is loaded at run time, and without a driver burn panics at
    /// the first tensor.
    #[allow(unsafe_code)]
    pub fn device(
        index: Option<usize>,
        _precision: super::Precision,
    ) -> anyhow::Result<burn::backend::cuda::CudaDevice> {
        use cudarc::driver::CudaContext;
        // SAFETY: loads the driver's shared library by name to see whether it is there; no
        // function of it is called.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            anyhow::bail!(
                "no CUDA device: the NVIDIA driver's library (libcuda.so) was not found; this \
                 `recipe` was built with --features cuda and needs an NVIDIA GPU and its driver \
                 (a build without the feature trains on the CPU)"
            );
        }
        let count = match CudaContext::device_count() {
            Ok(count) => usize::try_from(count).unwrap_or(0),
            Err(e) => anyhow::bail!("no CUDA device: the NVIDIA driver did not start ({e})"),
        };
        if count == 0 {
            anyhow::bail!("no CUDA device: the NVIDIA driver sees none");
        }
        let index = super::within(index.unwrap_or(0), count, "CUDA devices")?;
        Ok(burn::backend::cuda::CudaDevice { index })
    }
}

#[cfg(feature = "wgpu")]
#[cfg_attr(feature = "cuda", allow(dead_code))]
mod wgpu {
    /// Inference backend.
    pub type Inner = burn::backend::Wgpu;
    /// Human-readable name.
    pub const NAME: &str = "wgpu";
    /// Whether `--augment-ahead` defaults to on: no (see the CUDA backend's; measured on wgpu).
    pub const AUGMENT_AHEAD: bool = false;
    /// How a two-view method passes its views without `--view-threads`: as one batch (see
    /// the CUDA backend's).
    pub const VIEW_PASSES: curriculum_ssl::method::ViewPasses =
        curriculum_ssl::method::ViewPasses::Joint;
    /// Whether the small ResNet's stem runs as banded products (see the CUDA backend's).
    pub const BANDED_STEM: bool = false;
    /// The largest error `recipe worked_values` accepts: f32 (measured on lavapipe, which has no
    /// tensor cores: 4e-7; a GPU whose Vulkan adapter reports TF32 may need CUDA's 1e-3).
    pub const WORKED_VALUE_TOLERANCE: f64 = 1e-4;

    /// What cubecl's memory management holds on `device` now (see [`super::DeviceMemory`]).
    pub fn memory(device: &burn::backend::wgpu::WgpuDevice) -> Option<super::DeviceMemory> {
        use burn::cubecl::Runtime;
        let usage = burn::backend::wgpu::WgpuRuntime::client(device)
            .memory_usage()
            .ok()?;
        Some(super::DeviceMemory {
            in_use: usage.bytes_in_use,
            reserved: usage.bytes_reserved,
        })
    }

    /// The wgpu device `--device` names: `None` is wgpu's default adapter; `N` the N-th
    /// discrete GPU, and on a machine without one `0` is the default adapter (an integrated GPU,
    /// or a software device such as Mesa's lavapipe). Each candidate is checked by making a
    /// tensor on it: wgpu panics at the first tensor of a device it cannot open.
    pub fn device(
        index: Option<usize>,
        precision: super::Precision,
    ) -> anyhow::Result<burn::backend::wgpu::WgpuDevice> {
        use burn::backend::wgpu::WgpuDevice;
        let opens = |device: &WgpuDevice| {
            let probe = device.clone();
            super::quietly(move || {
                // The probe's tensor fixes the device's float type: the precision asked for
                // first (whether the device supports it, `super::set_precision` says after).
                // Inside `quietly`: asking whether a type is supported opens the adapter, which
                // panics where there is none.
                let _ = super::set_precision_on::<Inner>(&probe, precision, NAME);
                burn::tensor::Tensor::<Inner, 1>::from_floats([1.0], &probe).into_scalar()
            })
        };
        let none = |why: String| {
            anyhow::anyhow!(
                "no wgpu device: wgpu could not open an adapter (no Vulkan, Metal or DX12 \
                 driver? on Linux `apt-get install mesa-vulkan-drivers` gives a software one) \
                 ({why})"
            )
        };
        let Some(n) = index else {
            let device = WgpuDevice::DefaultDevice;
            opens(&device).map_err(none)?;
            return Ok(device);
        };
        if opens(&WgpuDevice::DiscreteGpu(n)).is_ok() {
            return Ok(WgpuDevice::DiscreteGpu(n));
        }
        let discrete = (0..n)
            .take_while(|&i| opens(&WgpuDevice::DiscreteGpu(i)).is_ok())
            .count();
        if n == 0 {
            let device = WgpuDevice::DefaultDevice;
            opens(&device).map_err(none)?;
            return Ok(device);
        }
        if discrete == 0 {
            return Err(crate::usage::usage(format!(
                "--device {n}: wgpu finds no discrete GPU, only its default adapter (--device 0)"
            )));
        }
        super::within(n, discrete, "discrete GPUs").map(WgpuDevice::DiscreteGpu)
    }
}

#[cfg(feature = "cpu")]
#[cfg_attr(any(feature = "cuda", feature = "wgpu"), allow(dead_code))]
mod cpu {
    /// Inference backend.
    pub type Inner = burn::backend::Flex;
    /// Human-readable name.
    pub const NAME: &str = "cpu (flex)";
    /// Whether `--augment-ahead` defaults to on.
    pub const AUGMENT_AHEAD: bool = true;
    /// How a two-view method passes its views without `--view-threads`: on two threads
    /// (`ViewPasses::Threads`). Written when burn's convolution backward ran mostly on one
    /// core, so two side by side used both. With the models crate's kernels
    /// (`curriculum_ssl_models::kernels`, parallel GEMMs) it is neither faster nor slower
    /// (MoCo v3 on `small-2x`, one subset epoch, alternated: 489 / 486 images/s on, 470 / 493
    /// off; 2026-11-27); kept, as the runs measured so far (the same numbers as one graph).
    pub const VIEW_PASSES: curriculum_ssl::method::ViewPasses =
        curriculum_ssl::method::ViewPasses::Threads;
    /// Whether the small ResNet's stem runs as banded products
    /// (`curriculum_ssl_models::banded_conv`): Flex's own kernels for a 1-channel 7×7
    /// convolution are scalar (forward) and gather an im2col copy element by element (weight
    /// gradient); the banded products are GEMMs.
    pub const BANDED_STEM: bool = true;
    /// The largest error `recipe worked_values` accepts: f32 throughout.
    pub const WORKED_VALUE_TOLERANCE: f64 = 1e-4;

    /// None: the CPU backend allocates from the process's heap, without a pool to read.
    pub fn memory(_device: &burn::backend::flex::FlexDevice) -> Option<super::DeviceMemory> {
        None
    }

    /// The CPU device: the backend has one (`--device 0`).
    pub fn device(
        index: Option<usize>,
        _precision: super::Precision,
    ) -> anyhow::Result<burn::backend::flex::FlexDevice> {
        match index {
            None | Some(0) => Ok(Default::default()),
            Some(n) => Err(crate::usage::usage(format!(
                "--device {n}: the CPU backend has one device (--device 0); a build with \
                 --features cuda or --features wgpu chooses among GPUs"
            ))),
        }
    }
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
use cpu as selected;
#[cfg(feature = "cuda")]
use cuda as selected;
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
use wgpu as selected;

pub use selected::{
    memory, Inner, AUGMENT_AHEAD, BANDED_STEM, NAME, VIEW_PASSES, WORKED_VALUE_TOLERANCE,
};

/// The most independent blocks of operations burn's fusion search follows at once on the GPU
/// backends (`fusion.beam_search.max_blocks` of burn's configuration; burn's default is 5).
///
/// burn's fusion server thread searches every new operation's place in up to that many blocks
/// (each fuser tried, its trace cloned, blocks merged) before a stored plan takes over, on
/// every step, and that search is most of the host's work per step: measured with
/// `benches/host_time.sh` on lavapipe (ResNet-18, batch 8 at 16 px), one block cut the fusion
/// thread's own work per step from 66.2 to 27.3 ms for SimCLR, 64.4 to 33.4 for MoCo v2 and
/// 86.8 to 39.1 for BYOL, with kernels per step 559.75 → 536, 612.75 → 629 and 825.75 → 796
/// (docs/gpu.md, "The host's work per step").
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub const FUSION_MAX_BLOCKS: usize = 1;

/// burn's configuration for a GPU build, set before the first tensor (burn reads it once):
/// `FUSION_MAX_BLOCKS`, and burn's environment (`BURN_FUSION_LOG`) as burn reads it. A
/// `burn.toml` (or `Burn.toml`) in the working directory or above is the user's and is left to
/// burn, which reads it instead. The CPU backend has no fusion: nothing to set.
pub fn configure_burn() {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    {
        use burn_std::config::{BurnConfig, RuntimeConfig};
        let users_file = std::env::current_dir().is_ok_and(|dir| {
            dir.ancestors()
                .any(|d| d.join("burn.toml").is_file() || d.join("Burn.toml").is_file())
        });
        if !users_file {
            let mut config = BurnConfig::default().override_from_env();
            config.fusion.beam_search.max_blocks = FUSION_MAX_BLOCKS;
            BurnConfig::set(config);
        }
    }
}

/// A GPU backend's device memory as cubecl's memory management reports it
/// (`ComputeClient::memory_usage`), read after a synchronisation: the device memory of the
/// calling thread's stream (cubecl keeps one memory manager per stream; a single-threaded step
/// such as `recipe bench_step` uses one), not pinned host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Bytes of the live allocations (tensors, kernels' scratch buffers), padding excluded.
    pub in_use: u64,
    /// Bytes of the pages cubecl holds from the driver: the live allocations, their padding
    /// and the pages' free space. Its default pools (`MemoryConfiguration::SubSlices`) give
    /// a page back only when asked (`memory_cleanup`, which no step calls), so after a step
    /// this is the stream's high-water mark of pages (the CUDA context aside).
    pub reserved: u64,
}

/// The float type of a run's tensors (`--precision`): parameters, activations, gradients and
/// optimiser state alike. burn 0.21 has no automatic mixed precision (no per-operation casting
/// with f32 master weights), so a half-precision run is one whose device creates every float
/// tensor in that type (`burn::tensor::set_default_dtypes`, fixed before the first tensor);
/// docs/gpu.md says what that means for accuracy and which backends support which type.
#[derive(
    clap::ValueEnum,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// 32-bit floats everywhere (the default).
    #[default]
    F32,
    /// bfloat16 everywhere (8-bit exponent as f32, 8-bit significand): no loss scaling needed.
    Bf16,
    /// IEEE half: refused. Without f32 master weights and loss scaling (burn 0.21 has neither)
    /// its 5-bit exponent and f16 arithmetic were measured to break training (docs/gpu.md).
    F16,
}

impl Precision {
    /// Whether this is f32 (what a run record leaves out).
    pub fn is_f32(&self) -> bool {
        *self == Precision::F32
    }

    /// The name `--precision` takes.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        }
    }

    fn dtype(self) -> burn::tensor::FloatDType {
        match self {
            Precision::F32 => burn::tensor::FloatDType::F32,
            Precision::Bf16 => burn::tensor::FloatDType::BF16,
            Precision::F16 => burn::tensor::FloatDType::F16,
        }
    }
}

/// Makes `precision` the float type of the tensors created on `device` from now on. Must come
/// before the device's first tensor; f32 (the backend's own) changes nothing. A type the
/// backend does not support on this device is a usage error naming both, and f16 is refused
/// everywhere (see [`Precision::F16`]).
pub fn set_precision(device: &Device, precision: Precision) -> anyhow::Result<()> {
    set_precision_on::<Inner>(device, precision, NAME)
}

/// [`set_precision`] on backend `B` (named `name` in its errors).
fn set_precision_on<B: burn::tensor::backend::Backend>(
    device: &B::Device,
    precision: Precision,
    name: &str,
) -> anyhow::Result<()> {
    use burn::tensor::backend::{get_device_settings, set_default_float_dtype, DeviceError};
    match precision {
        Precision::F32 => {
            // f32 is the backends' own type: set unless the device was given another before.
            let dtype = get_device_settings::<B>(device).float_dtype;
            if dtype != burn::tensor::FloatDType::F32 {
                anyhow::bail!("the device's float type is already {dtype:?}, not f32");
            }
            return Ok(());
        }
        Precision::F16 => {
            return Err(crate::usage::usage(
                "--precision f16: not offered: without f32 master weights and loss scaling \
                 (burn 0.21 has neither) an all-f16 run went wrong from its first step (NaN \
                 after one SimCLR step on wgpu; the first loss of a ResNet-18 13 % off f32's on \
                 the CPU, against 1.6 % for bf16); use --precision bf16",
            ))
        }
        Precision::Bf16 => {}
    }
    match set_default_float_dtype::<B>(device, precision.dtype()) {
        Ok(()) => Ok(()),
        Err(DeviceError::AlreadyInitialized { .. })
            if get_device_settings::<B>(device).float_dtype == precision.dtype() =>
        {
            Ok(())
        }
        Err(DeviceError::UnsupportedDType { .. }) => Err(crate::usage::usage(format!(
            "--precision {}: the {name} backend does not support {} tensors on this device \
             (--precision f32 does)",
            precision.name(),
            precision.name()
        ))),
        Err(e) => anyhow::bail!(
            "--precision {}: the device's float type could not be set ({e})",
            precision.name()
        ),
    }
}

/// The device `--device` names (see each backend's `device`), its float type set to
/// `precision` before anything is made on it.
pub fn open(index: Option<usize>, precision: Precision) -> anyhow::Result<Device> {
    let device = selected::device(index, precision)?;
    set_precision(&device, precision)?;
    Ok(device)
}

/// The device `--device` names, in f32.
pub fn device(index: Option<usize>) -> anyhow::Result<Device> {
    open(index, Precision::F32)
}

/// Autodiff backend the recipes train on.
pub type Train = burn::backend::Autodiff<Inner>;
/// Its device.
pub type Device = <Train as burn::tensor::backend::BackendTypes>::Device;

/// Whether this build trains on the CPU (burn's Flex): the recipes' CPU defaults follow it.
pub fn on_cpu() -> bool {
    NAME.starts_with("cpu")
}

/// The devices of `replicas` data-parallel replicas from `--device` on: on the CPU backend
/// (one device) every replica shares it; on a GPU backend replica `i` takes device
/// `--device + i`, each checked as [`device`] checks one. (Two replicas on one GPU are not
/// offered: with burn 0.21's fusion, two threads' tensors on one device meet in the collective's
/// all-reduce and burn panics, "Should have handle for tensor", seen on wgpu; docs/gpu.md.)
pub fn devices(
    first: Option<usize>,
    replicas: usize,
    precision: Precision,
) -> anyhow::Result<Vec<<Inner as burn::tensor::backend::BackendTypes>::Device>> {
    if NAME.starts_with("cpu") {
        let device = open(first, precision)?;
        return Ok(vec![device; replicas]);
    }
    let first = first.unwrap_or(0);
    (first..first + replicas)
        .map(|index| open(Some(index), precision))
        .collect()
}

/// `index` if it is below `count`, else a usage error naming how many `what` there are.
#[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(dead_code))]
fn within(index: usize, count: usize, what: &str) -> anyhow::Result<usize> {
    if index < count {
        Ok(index)
    } else {
        Err(crate::usage::usage(format!(
            "--device {index}: {count} {what} present (--device 0 to {})",
            count - 1
        )))
    }
}

/// Runs `probe`, turning a panic into its message without printing it or the runtime's log
/// lines: for the first contact with a GPU runtime, which panics (and logs the driver's
/// complaints) where there is no device. Called on the main thread before the run's own threads
/// start (the panic hook and the log level are process-wide).
#[cfg_attr(any(not(feature = "wgpu"), feature = "cuda"), allow(dead_code))]
fn quietly<T>(probe: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T, String> {
    let hook = std::panic::take_hook();
    let level = log::max_level();
    std::panic::set_hook(Box::new(|_| {}));
    log::set_max_level(log::LevelFilter::Off);
    let result = std::panic::catch_unwind(probe);
    log::set_max_level(level);
    std::panic::set_hook(hook);
    result.map_err(|panic| {
        let text = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic without a message");
        text.lines().next().unwrap_or_default().to_string()
    })
}
