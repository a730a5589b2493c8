//! Seeded randomness that other threads cannot disturb.
//!
//! burn draws random tensors (parameter initialisation, the MoCo queue's first keys, dropout and
//! stochastic depth) from ONE generator per backend and process: `B::seed` replaces it, every
//! draw advances it. Two trainings in one process (two tests, or a user's sweep on threads) would
//! otherwise reseed and consume each other's generator, and parameters are initialised lazily, at
//! their first use, so even the moment of the draw moves with the thread timing.
//!
//! Every draw the library makes from the backend's generator therefore happens inside
//! [`with_seed`]: under one process-wide lock of this crate, the generator is seeded with the
//! caller's seed, the work runs, and the lock is released. [`init_module`] builds a module that
//! way and reads every parameter before releasing the lock, so that nothing is left to draw
//! later. The trainer seeds each step's forward pass with `(seed, step)`, so stochastic layers
//! repeat exactly after a resume.
//!
//! What this does not cover: code outside this crate that draws from the same backend generator
//! on another thread without going through [`with_seed`] (for example `Tensor::random` in a
//! user's own thread) can still consume draws meant for a run. Host-side randomness of the crate
//! (batch order, augmentation parameters) never touches the backend generator: it comes from
//! generators seeded by `(seed, epoch)` and `(seed, step)`.
//!
//! Across backends the same seed gives the same batch order and augmentation parameters, but not
//! the same initial weights (each backend has its own generator), and float results differ in
//! the last bits (kernels sum in other orders); runs are bit-exact on one backend and machine.

use std::sync::Mutex;

use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;

/// The lock held around every seeded use of a backend's generator.
static RNG: Mutex<()> = Mutex::new(());

/// Runs `f` with the backend generator seeded with `seed`, while no other [`with_seed`] call of
/// the process can draw from it.
pub fn with_seed<B: Backend, T>(device: &B::Device, seed: u64, f: impl FnOnce() -> T) -> T {
    let _guard = RNG.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    B::seed(device, seed);
    f()
}

/// Builds a module with `build` under [`with_seed`] and reads every parameter before the lock is
/// released, so that its lazily initialised parameters are drawn now, from `seed`.
pub fn init_module<B: Backend, M: Module<B>>(
    device: &B::Device,
    seed: u64,
    build: impl FnOnce(&B::Device) -> M,
) -> M {
    with_seed::<B, _>(device, seed, || {
        let module = build(device);
        materialise(&module);
        module
    })
}

/// Reads every float parameter once, which fixes the value of lazily initialised ones.
pub fn materialise<B: Backend, M: Module<B>>(module: &M) {
    module.visit(&mut Materialise);
}

struct Materialise;

impl<B: Backend> ModuleVisitor<B> for Materialise {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let _ = param.val();
    }
}

/// The number of float values of a module's parameters and running statistics, read from their
/// shapes without drawing or allocating a lazily initialised one: what a caller checks before
/// [`materialise`] allocates them (e.g. against the memory the machine has).
pub fn parameter_count<B: Backend, M: Module<B>>(module: &M) -> u64 {
    struct Count(u64);
    impl<B: Backend> ModuleVisitor<B> for Count {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0 += param.lazy_shape().num_elements() as u64;
        }
    }
    let mut count = Count(0);
    module.visit(&mut count);
    count.0
}

/// Mixes a seed and a stream number into one 64-bit seed (SplitMix64 finaliser).
pub fn mix_seed(seed: u64, stream: u64) -> u64 {
    let mut z = seed
        ^ stream
            .wrapping_add(0x9E37_79B9_7F4A_7C15)
            .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
