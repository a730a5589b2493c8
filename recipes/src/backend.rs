//! The backend the `recipe` binary trains on, chosen by cargo feature: `cuda` before `wgpu`
//! before the CPU (`Flex`, the default).

#[cfg(feature = "cuda")]
mod selected {
    /// Inference backend.
    pub type Inner = burn::backend::Cuda;
    /// Human-readable name.
    pub const NAME: &str = "cuda";
    /// Whether `--augment-ahead` defaults to on: no. Two threads working on one cubecl device
    /// at once changed results on wgpu (docs/gpu.md); and a GPU overlaps the augmentation's
    /// kernels with the step's anyway, since launching them does not wait for them.
    pub const AUGMENT_AHEAD: bool = false;
    /// Whether `--view-threads` defaults to on: no, as `AUGMENT_AHEAD` (and the backward pass
    /// keeps a GPU busy from one thread).
    pub const VIEW_THREADS: bool = false;
    /// Whether the small ResNet's stem runs as banded products: no, cuDNN-class kernels do
    /// better.
    pub const BANDED_STEM: bool = false;

    /// The CUDA device `--device` names (`None`: device 0), after checking that a driver and
    /// that device are there: CUDA is loaded at run time, and without a driver burn panics at
    /// the first tensor.
    pub fn device(index: Option<usize>) -> anyhow::Result<burn::backend::cuda::CudaDevice> {
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

#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
mod selected {
    /// Inference backend.
    pub type Inner = burn::backend::Wgpu;
    /// Human-readable name.
    pub const NAME: &str = "wgpu";
    /// Whether `--augment-ahead` defaults to on: no (see the CUDA backend's; measured on wgpu).
    pub const AUGMENT_AHEAD: bool = false;
    /// Whether `--view-threads` defaults to on: no (see the CUDA backend's).
    pub const VIEW_THREADS: bool = false;
    /// Whether the small ResNet's stem runs as banded products (see the CUDA backend's).
    pub const BANDED_STEM: bool = false;

    /// The wgpu device `--device` names: `None` is wgpu's default adapter; `N` the N-th
    /// discrete GPU, and on a machine without one `0` is the default adapter (an integrated GPU,
    /// or a software device such as Mesa's lavapipe). Each candidate is checked by making a
    /// tensor on it: wgpu panics at the first tensor of a device it cannot open.
    pub fn device(index: Option<usize>) -> anyhow::Result<burn::backend::wgpu::WgpuDevice> {
        use burn::backend::wgpu::WgpuDevice;
        let opens = |device: &WgpuDevice| {
            let probe = device.clone();
            super::quietly(move || {
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

#[cfg(all(not(feature = "wgpu"), not(feature = "cuda")))]
mod selected {
    /// Inference backend.
    pub type Inner = burn::backend::Flex;
    /// Human-readable name.
    pub const NAME: &str = "cpu (flex)";
    /// Whether `--augment-ahead` defaults to on.
    pub const AUGMENT_AHEAD: bool = true;
    /// Whether `--view-threads` defaults to on: the convolutions' backward passes run mostly on
    /// one core, so two of them side by side use both.
    pub const VIEW_THREADS: bool = true;
    /// Whether the small ResNet's stem runs as banded products
    /// (`curriculum_ssl_models::banded_conv`): Flex's own kernels for a 1-channel 7×7
    /// convolution are scalar (forward) and gather an im2col copy element by element (weight
    /// gradient); the banded products are GEMMs.
    pub const BANDED_STEM: bool = true;

    /// The CPU device: the backend has one (`--device 0`).
    pub fn device(index: Option<usize>) -> anyhow::Result<burn::backend::flex::FlexDevice> {
        match index {
            None | Some(0) => Ok(Default::default()),
            Some(n) => Err(crate::usage::usage(format!(
                "--device {n}: the CPU backend has one device (--device 0); a build with \
                 --features cuda or --features wgpu chooses among GPUs"
            ))),
        }
    }
}

pub use selected::{device, Inner, AUGMENT_AHEAD, BANDED_STEM, NAME, VIEW_THREADS};

/// Autodiff backend the recipes train on.
pub type Train = burn::backend::Autodiff<Inner>;
/// Its device.
pub type Device = <Train as burn::tensor::backend::BackendTypes>::Device;

/// The devices of `replicas` data-parallel replicas from `--device` on: on the CPU backend
/// (one device) every replica shares it; on a GPU backend replica `i` takes device
/// `--device + i`, each checked as [`device`] checks one.
pub fn devices(
    first: Option<usize>,
    replicas: usize,
) -> anyhow::Result<Vec<<Inner as burn::tensor::backend::BackendTypes>::Device>> {
    if NAME.starts_with("cpu") {
        let device = device(first)?;
        return Ok(vec![device; replicas]);
    }
    let first = first.unwrap_or(0);
    (first..first + replicas)
        .map(|index| device(Some(index)))
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
