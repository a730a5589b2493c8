//! Handing tensors from one thread to another on a GPU backend.
//!
//! Two places of the library make tensors on a thread of their own for the training thread to
//! use: augmentation one batch ahead (`train::ahead`) and the second view's backward pass
//! ([`crate::method::ViewPasses`]). On burn's CPU backend a tensor is finished when the call that
//! makes it returns. On the cubecl backends (wgpu, CUDA) each thread queues its kernels on a
//! stream of its own, and burn 0.21 (cubecl 0.10) does not order the memory a thread's queued
//! kernels still use against the other thread's new allocations: a tensor made on one thread
//! and read on another after that thread has run more work can hold overwritten values
//! (`tests/gpu_path`: view threads gave NaN gradients, augmentation ahead changed the loss of
//! some steps, differently from run to run). The reproduction, in burn alone, is in
//! `docs/gpu.md`.
//!
//! The workaround is [`finish_for_another_thread`]: the thread that made the tensors waits for
//! its own queued work before it hands them over. The other thread does not wait, so the
//! overlap that the second thread is there for is kept.

use burn::tensor::backend::Backend;

/// Waits until the kernels this thread queued on `device` have run, so that the tensors it made
/// can be handed to another thread (see the module docs). A no-op on the CPU backend.
///
/// # Panics
/// If the device reports an execution error (a failed kernel): the tensors to hand over would
/// hold garbage, and the caller's thread has no way to go on correctly.
pub fn finish_for_another_thread<B: Backend>(device: &B::Device) {
    if let Err(e) = B::sync(device) {
        panic!("the device failed while finishing work to hand to another thread: {e}");
    }
}
