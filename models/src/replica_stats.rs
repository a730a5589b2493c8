//! Batch statistics over data-parallel replicas: the hook through which every batch norm of the
//! project (this crate's [`BatchNorm2d`](crate::layers::BatchNorm2d), the heads' norms of
//! `curriculum-ssl`) averages its batch moments across replicas, i.e. synchronised batch norm.
//!
//! When a batch is split over `W` replicas (one thread each, equal shards), a replica's batch norm
//! sees only its shard. The one-device run of the whole batch is reproduced when every replica
//! normalises with the moments of the whole batch: each replica's per-channel means are averaged
//! over the replicas, differentiably (their gradients are summed back across replicas in the
//! backward pass, so each replica's activations receive the effect they have on the others'
//! normalisation). The data-parallel trainer installs such an averaging for its replica thread
//! with [`install`]; without one, moments are the shard's own, as on one device.
//!
//! The hook lives in a thread-local slot, keyed by the backend type: it is the replica thread's
//! own state, which no other thread reads or writes, and it is removed when the returned
//! [`Installed`] guard is dropped. A batch norm run on another thread (a thread pool inside a
//! kernel does not matter; a forward pass moved to a thread of its own does) is not synchronised,
//! so the trainer keeps each replica's forward and backward passes on the replica's thread.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use burn::prelude::*;

/// Averages per-channel batch moments over the replicas of a data-parallel run.
pub trait ReplicaMean<B: Backend>: Send + Sync {
    /// The mean over the replicas of `values` (each replica passes its own, of the same shape),
    /// differentiable: the gradient of the result reaches every replica's `values`.
    ///
    /// # Shapes
    /// - `values`: `[C]` → `[C]`
    fn mean(&self, values: Tensor<B, 1>) -> Tensor<B, 1>;

    /// The number of replicas `W`.
    fn replicas(&self) -> usize;
}

type Slots = HashMap<TypeId, Box<dyn Any>>;

thread_local! {
    static HOOKS: RefCell<Slots> = RefCell::new(HashMap::new());
}

/// Removes the hook [`install`] put in place (and restores the one before it) when dropped.
#[must_use = "the hook is removed when the guard is dropped"]
pub struct Installed {
    key: TypeId,
    previous: Option<Box<dyn Any>>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.previous.take();
        HOOKS.with(|slots| {
            let mut slots = slots.borrow_mut();
            match previous {
                Some(previous) => {
                    slots.insert(self.key, previous);
                }
                None => {
                    slots.remove(&self.key);
                }
            }
        });
    }
}

/// Makes the batch norms run by this thread on backend `B` average their batch moments with
/// `hook` until the returned guard is dropped.
pub fn install<B: Backend>(hook: Arc<dyn ReplicaMean<B>>) -> Installed {
    let key = TypeId::of::<B>();
    let previous = HOOKS.with(|slots| slots.borrow_mut().insert(key, Box::new(hook)));
    Installed { key, previous }
}

/// Suspends the hook of backend `B` on this thread until the returned guard is dropped: batch
/// norms then use their shard's own moments (MoCo's shuffling batch norm, whose key encoder
/// must not see the other replicas' statistics).
pub fn suspend<B: Backend>() -> Installed {
    let key = TypeId::of::<B>();
    let previous = HOOKS.with(|slots| slots.borrow_mut().remove(&key));
    Installed { key, previous }
}

/// The hook installed on this thread for backend `B`, if any.
fn hook<B: Backend>() -> Option<Arc<dyn ReplicaMean<B>>> {
    HOOKS.with(|slots| {
        slots
            .borrow()
            .get(&TypeId::of::<B>())
            .and_then(|slot| slot.downcast_ref::<Arc<dyn ReplicaMean<B>>>())
            .cloned()
    })
}

/// Whether this thread's batch norms on backend `B` average their moments over replicas (a hook
/// is installed and not suspended).
pub fn synchronised<B: Backend>() -> bool {
    hook::<B>().is_some()
}

/// Per-channel moments `moments` (shape `[1, C, 1, ...]` or `[1, C]`) averaged over the replicas
/// when a hook is installed on this thread, unchanged otherwise; and the number of replicas that
/// contributed (1 without a hook), which multiplies the count of values behind the moments.
pub fn replica_mean<B: Backend, const D: usize>(moments: Tensor<B, D>) -> (Tensor<B, D>, usize) {
    match hook::<B>() {
        None => (moments, 1),
        Some(hook) => {
            let dims = moments.dims();
            let flat = moments.reshape([dims.iter().product::<usize>()]);
            (hook.mean(flat).reshape(dims), hook.replicas())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    /// Stands for two replicas whose other one always holds `other`.
    struct WithOther(Vec<f64>);

    impl ReplicaMean<B> for WithOther {
        fn mean(&self, values: Tensor<B, 1>) -> Tensor<B, 1> {
            let other = Tensor::from_floats(self.0.as_slice(), &values.device());
            (values + other).div_scalar(2.0)
        }

        fn replicas(&self) -> usize {
            2
        }
    }

    #[test]
    fn moments_are_averaged_only_while_installed_and_only_for_the_backend() {
        let device = Default::default();
        let local = || Tensor::<B, 2>::from_floats([[1.0, 3.0]], &device);
        let (m, w) = replica_mean(local());
        assert_eq!(
            (m.into_data().convert::<f64>().to_vec::<f64>().unwrap(), w),
            (vec![1.0, 3.0], 1)
        );
        {
            let _guard = install::<B>(Arc::new(WithOther(vec![3.0, 5.0])));
            let (m, w) = replica_mean(local());
            assert_eq!(
                (m.into_data().convert::<f64>().to_vec::<f64>().unwrap(), w),
                (vec![2.0, 4.0], 2)
            );
            // Another backend type is not affected.
            let (m, w) = replica_mean(Tensor::<NdArray<f32>, 1>::from_floats([1.0], &device));
            assert_eq!(
                (m.into_data().convert::<f32>().to_vec::<f32>().unwrap(), w),
                (vec![1.0], 1)
            );
            // Another thread is not affected.
            std::thread::spawn(move || {
                let (_, w) = replica_mean(Tensor::<B, 1>::from_floats([1.0], &device));
                assert_eq!(w, 1);
            })
            .join()
            .unwrap();
        }
        let (_, w) = replica_mean(local());
        assert_eq!(w, 1);
        // Suspended, then back.
        let _guard = install::<B>(Arc::new(WithOther(vec![3.0, 5.0])));
        {
            let _local = suspend::<B>();
            assert_eq!(replica_mean(local()).1, 1);
        }
        assert_eq!(replica_mean(local()).1, 2);
    }
}
