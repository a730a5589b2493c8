//! A batch norm's running statistic: burn's `RunningState` without its division by one.
//!
//! Why hand-written: burn's `RunningState` (burn-core 0.21) keeps each thread's newest update
//! pending and, when it is read in sync, averages the pending updates as `sum / count`, dividing
//! even when one thread updated (`count = 1`). In a training step every batch norm reads its
//! two statistics in sync and updates them, so each step paid one division by one per
//! statistic: 80 of MoCo v2's 819 operations of burn's fusion stream (ResNet-18, two encoders),
//! each issued by the host one by one (docs/gpu.md, "The eighth cut").
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

/// A lock that a panicking thread poisoned is taken as it is: the value lock holds a whole
/// value (every write replaces it in one assignment); the pending updates may have lost those
/// being applied when the panic came (burn's `RunningState` panics on every later use instead).
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
        // Detached: a record's tensor loads as a trainable parameter (burn's `Param` record
        // asks for a gradient on autodiff backends), and a statistic that asked for one would
        // pass for a trainable parameter: averaged by a momentum copy's update, or replaced by
        // `SslMethod::take_online`'s stand-ins.
        *value = record.val().detach().to_device(&value.device());
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
    use burn::tensor::{DType, TensorData};

    type B = NdArray<f64>;

    /// `v` as an f64 tensor (the element type named: a device's default may be f32).
    fn f64s<Bk: Backend>(v: &[f64]) -> Tensor<Bk, 1> {
        let device = Default::default();
        Tensor::from_data(
            TensorData::new(v.to_vec(), [v.len()]),
            (&device, DType::F64),
        )
    }

    fn host<Bk: Backend>(t: Tensor<Bk, 1>) -> Vec<f64> {
        t.into_data().convert::<f64>().to_vec().unwrap()
    }

    /// Burn's `RunningState` and this one, fed the same updates (one a read, two in a row, and
    /// from two other threads), read the same values at every point (pending updates behind
    /// `value`, applied by `value_sync`, by the next update and by the record), and each
    /// records what the other loads. Every value is an integer or a third of one: the sums are
    /// exact in any order.
    #[test]
    fn reads_as_burns_running_state_does() {
        let ours = RunningStat::new(f64s::<B>(&[1.0, 2.0]));
        let burns = RunningState::new(f64s::<B>(&[1.0, 2.0]));
        for step in 0..3 {
            let update = f64s::<B>(&[step as f64, -2.0 * step as f64]);
            assert_eq!(host(ours.value_sync()), host(burns.value_sync()));
            ours.update(update.clone());
            burns.update(update);
            assert_eq!(host(ours.value()), host(burns.value()));
        }
        // Two in a row: the second applies the first.
        for values in [[7.0, 9.0], [2.0, -1.0]] {
            ours.update(f64s(&values));
            burns.update(f64s(&values));
            assert_eq!(host(ours.value()), host(burns.value()));
        }
        assert_eq!(host(ours.value()), vec![7.0, 9.0]);
        // Two threads' pending updates besides this thread's last.
        std::thread::scope(|scope| {
            for values in [[3.0, 4.0], [5.0, 8.0]] {
                let (ours, burns) = (ours.clone(), burns.clone());
                scope.spawn(move || {
                    ours.update(f64s(&values));
                    burns.update(f64s(&values));
                });
            }
        });
        // Three pending updates, averaged: (2 + 3 + 5) / 3 and (−1 + 4 + 8) / 3, as burn's.
        let (ours, burns) = (ours.into_record(), burns.into_record());
        assert_eq!(host(ours.val()), host(burns.val()));
        assert_eq!(host(ours.val()), vec![10.0 / 3.0, 11.0 / 3.0]);
        // Each loads the other's record.
        let loaded = RunningStat::new(f64s::<B>(&[0.0, 0.0])).load_record(burns.clone());
        assert_eq!(host(loaded.value()), host(burns.val()));
        assert_eq!(loaded.id, burns.id);
        let loaded = RunningState::new(f64s::<B>(&[0.0, 0.0])).load_record(ours);
        assert_eq!(host(loaded.value()), host(burns.val()));
    }

    /// A lone pending update becomes the value as it is, and the autodiff round trip
    /// (`valid`) keeps the id and the synced value.
    #[test]
    fn value_sync_applies_a_lone_update_and_valid_keeps_the_id() {
        let stat = RunningStat::new(f64s::<Autodiff<B>>(&[0.0; 3]));
        stat.update(f64s(&[0.25, -0.5, 3.0]));
        // Behind by the pending update until it is read in sync.
        assert_eq!(host(stat.value().inner()), vec![0.0; 3]);
        assert_eq!(host(stat.value_sync().inner()), vec![0.25, -0.5, 3.0]);
        let inner = stat.valid();
        assert_eq!(inner.id, stat.id);
        assert_eq!(host(inner.value()), vec![0.25, -0.5, 3.0]);
    }

    /// A record read back through a recorder (as a checkpoint is) loads as a trainable
    /// parameter on an autodiff backend (burn's `Param` record asks for a gradient: checked
    /// here); the statistic's value is detached, so that it is not taken for a trainable
    /// parameter after a resume.
    #[test]
    fn a_loaded_record_is_no_trainable_parameter() {
        use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
        type A = Autodiff<B>;
        let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
        let saved = RunningStat::new(f64s::<A>(&[1.5, -2.0])).into_record();
        let bytes = recorder.record(saved, ()).unwrap();
        let record: Param<Tensor<A, 1>> = recorder.load(bytes, &Default::default()).unwrap();
        assert!(record.val().is_require_grad());
        let loaded = RunningStat::new(f64s::<A>(&[0.0, 0.0])).load_record(record);
        assert!(!loaded.value().is_require_grad());
        assert_eq!(host(loaded.value().inner()), vec![1.5, -2.0]);
    }
}
