//! A batch norm's running statistic: burn's `RunningState` without its division by one.
//!
//! Why hand-written: burn's `RunningState` (burn-core 0.21) keeps each thread's newest update
//! pending and, when it is read in sync, averages the pending updates as `sum / count`, dividing
//! even when one thread updated (`count = 1`). In a training step every batch norm reads its
//! two statistics in sync and updates them, so each step paid one division by one and one
//! dropped tensor per statistic: 85 of MoCo v2's 819 operations of burn's fusion stream
//! (ResNet-18, two encoders), each issued by the host one by one (docs/gpu.md, "The eighth cut").
//! [`RunningStat`] is the same state with the same record (`Param<Tensor<B, D>>`: checkpoints of
//! either load in the other), the same sharing between clones and the same averaging over
//! threads; a lone update becomes the value as it is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

use burn::module::{
    AutodiffModule, Content, Module, ModuleDisplay, ModuleDisplayDefault, ModuleMapper,
    ModuleVisitor, Param, ParamId,
};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

/// A running statistic (a batch norm's mean or variance): a value that training updates and
/// inference reads, saved in the module's record but not trained.
///
/// As burn's `RunningState`: an update is kept pending per thread until the next update on that
/// thread, a [`RunningStat::value_sync`] or the record; then the pending updates of every thread
/// become the value, averaged when several threads updated (e.g. replicas of one module on
/// several devices). Clones share the state.
#[derive(Clone, Debug)]
pub struct RunningStat<V> {
    id: ParamId,
    pending: Arc<Mutex<HashMap<ThreadId, V>>>,
    value: Arc<Mutex<V>>,
}

/// A lock that a panicking thread poisoned still holds a whole value (every write below
/// replaces it in one assignment), so it is taken as it is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<B: Backend, const D: usize> RunningStat<Tensor<B, D>> {
    /// A statistic starting at `value`.
    pub fn new(value: Tensor<B, D>) -> Self {
        Self::with_id(ParamId::new(), value)
    }

    /// A statistic starting at `value`, with the record's id `id`.
    pub fn with_id(id: ParamId, value: Tensor<B, D>) -> Self {
        Self {
            id,
            pending: Arc::new(Mutex::new(HashMap::new())),
            value: Arc::new(Mutex::new(value)),
        }
    }

    /// Sets this thread's update (kept pending until it is read in sync: see the type).
    pub fn update(&self, value: Tensor<B, D>) {
        let thread = std::thread::current().id();
        let mut pending = lock(&self.pending);
        if pending.contains_key(&thread) {
            self.apply(&mut pending);
        }
        pending.insert(thread, value);
    }

    /// The value, without this thread's pending update (one update behind after an
    /// [`RunningStat::update`]).
    pub fn value(&self) -> Tensor<B, D> {
        lock(&self.value).clone()
    }

    /// The value with this thread's pending update (and every other thread's) applied.
    pub fn value_sync(&self) -> Tensor<B, D> {
        let thread = std::thread::current().id();
        let mut pending = lock(&self.pending);
        if pending.contains_key(&thread) {
            self.apply(&mut pending);
        }
        lock(&self.value).clone()
    }

    /// Applies every thread's pending update.
    fn sync(&self) {
        let mut pending = lock(&self.pending);
        if !pending.is_empty() {
            self.apply(&mut pending);
        }
    }

    /// The pending updates become the value: the lone one as it is, several averaged (on the
    /// device of the first).
    fn apply(&self, pending: &mut HashMap<ThreadId, Tensor<B, D>>) {
        let count = pending.len();
        let mut updates = pending.drain().map(|(_, value)| value);
        let Some(first) = updates.next() else {
            return;
        };
        let value = if count == 1 {
            first
        } else {
            let device = first.device();
            updates
                .fold(first, |sum, value| value.to_device(&device).add(sum))
                .div_scalar(count as f64)
        };
        *lock(&self.value) = value;
    }
}

impl<V> core::fmt::Display for RunningStat<V> {
    fn fmt(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        write!(f, "RunningStat(id={})", self.id)
    }
}

impl<V> ModuleDisplayDefault for RunningStat<V> {
    fn content(&self, content: Content) -> Option<Content> {
        content.add_formatted(&"RunningStat".to_string()).optional()
    }
}

impl<V> ModuleDisplay for RunningStat<V> {}

impl<B: Backend, const D: usize> Module<B> for RunningStat<Tensor<B, D>> {
    type Record = Param<Tensor<B, D>>;

    fn visit<Visitor: ModuleVisitor<B>>(&self, visitor: &mut Visitor) {
        let param = Param::initialized(self.id, lock(&self.value).clone());
        visitor.visit_float(&param)
    }

    fn map<Mapper: ModuleMapper<B>>(self, mapper: &mut Mapper) -> Self {
        let mut value = lock(&self.value);
        let param = Param::initialized(self.id, value.clone());
        let (_, mapped, _) = mapper.map_float(param).consume();
        *value = mapped;
        drop(value);
        self
    }

    fn into_record(self) -> Self::Record {
        self.sync();
        let value = lock(&self.value).clone();
        Param::initialized(self.id, value)
    }

    fn load_record(mut self, record: Self::Record) -> Self {
        let mut value = lock(&self.value);
        *value = record.val().to_device(&value.device());
        drop(value);
        self.id = record.id;
        self
    }

    fn to_device(self, device: &B::Device) -> Self {
        let mut value = lock(&self.value);
        *value = value.clone().to_device(device);
        drop(value);
        self
    }

    fn fork(self, device: &B::Device) -> Self {
        // Not trained: nothing to detach.
        self.to_device(device)
    }

    fn collect_devices(&self, mut devices: Vec<B::Device>) -> Vec<B::Device> {
        let device = lock(&self.value).device();
        if !devices.contains(&device) {
            devices.push(device)
        }
        devices
    }
}

impl<B: AutodiffBackend, const D: usize> AutodiffModule<B> for RunningStat<Tensor<B, D>> {
    type InnerModule = RunningStat<Tensor<B::InnerBackend, D>>;

    fn valid(&self) -> Self::InnerModule {
        self.sync();
        RunningStat::with_id(self.id, self.value().inner())
    }

    fn from_inner(module: Self::InnerModule) -> Self {
        module.sync();
        RunningStat::with_id(module.id, Tensor::from_inner(module.value()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::ndarray::NdArray;
    use burn::backend::Autodiff;
    use burn::module::RunningState;

    type B = NdArray<f64>;

    fn host(t: Tensor<B, 1>) -> Vec<f64> {
        t.into_data().to_vec().unwrap()
    }

    /// Burn's `RunningState` and this one, fed the same updates from one thread and from two,
    /// read the same values at every point (pending updates behind `value`, applied by
    /// `value_sync` and by the record), and each records what the other loads.
    #[test]
    fn reads_as_burns_running_state_does() {
        let device = Default::default();
        let start = Tensor::<B, 1>::from_floats([1.0, 2.0], &device);
        let ours = RunningStat::new(start.clone());
        let burns = RunningState::new(start);
        for step in 0..3 {
            let update = Tensor::<B, 1>::from_floats([step as f64, -0.5 * step as f64], &device);
            assert_eq!(host(ours.value_sync()), host(burns.value_sync()));
            ours.update(update.clone());
            burns.update(update);
            assert_eq!(host(ours.value()), host(burns.value()));
        }
        // Two threads' pending updates: averaged, 0.5 · (3 + 5) and 0.5 · (4 + 8).
        std::thread::scope(|scope| {
            for values in [[3.0, 4.0], [5.0, 8.0]] {
                let (ours, burns) = (ours.clone(), burns.clone());
                scope.spawn(move || {
                    let device = Default::default();
                    ours.update(Tensor::from_floats(values, &device));
                    burns.update(Tensor::from_floats(values, &device));
                });
            }
        });
        // Three pending updates now (this thread's last and the two threads'): (2 + 3 + 5) / 3
        // and (−1 + 4 + 8) / 3, as burn's.
        let (ours, burns) = (ours.into_record(), burns.into_record());
        assert_eq!(host(ours.val()), host(burns.val()));
        let expected = [10.0 / 3.0, 11.0 / 3.0];
        for (got, want) in host(ours.val()).into_iter().zip(expected) {
            assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        }
        // Each loads the other's record.
        let loaded =
            RunningStat::new(Tensor::<B, 1>::zeros([2], &device)).load_record(burns.clone());
        assert_eq!(host(loaded.value()), host(burns.val()));
        assert_eq!(loaded.id, burns.id);
        let loaded = RunningState::new(Tensor::<B, 1>::zeros([2], &device)).load_record(ours);
        assert_eq!(host(loaded.value()), host(burns.val()));
    }

    /// A lone pending update becomes the value as it is, and the autodiff round trip
    /// (`valid`) keeps the id and the synced value.
    #[test]
    fn value_sync_applies_a_lone_update_and_valid_keeps_the_id() {
        let device = Default::default();
        let stat = RunningStat::new(Tensor::<Autodiff<B>, 1>::zeros([3], &device));
        let update = Tensor::<Autodiff<B>, 1>::from_floats([0.25, -0.5, 3.0], &device);
        stat.update(update);
        // Behind by the pending update until it is read in sync.
        assert_eq!(host(stat.value().inner()), vec![0.0; 3]);
        assert_eq!(host(stat.value_sync().inner()), vec![0.25, -0.5, 3.0]);
        let inner = stat.valid();
        assert_eq!(inner.id, stat.id);
        assert_eq!(host(inner.value()), vec![0.25, -0.5, 3.0]);
    }
}
