//! A batch norm's running statistic: burn's `RunningState` without its division by one, and
//! with a training step's read and update in one call.
//!
//! Why hand-written: burn's `RunningState` (burn-core 0.21) keeps each thread's newest update
//! pending and, when it is read in sync, averages the pending updates as `sum / count`, dividing
//! even when one thread updated (`count = 1`). In a training step every batch norm reads its
//! two statistics in sync and updates them, so each step paid one division by one per
//! statistic: 80 of MoCo v2's 819 operations of burn's fusion stream (ResNet-18, two encoders),
//! each issued by the host one by one (docs/gpu.md, "The eighth cut").
//! [`RunningStat`] is the same state with the same record (`Param<Tensor<B, D>>`: checkpoints of
//! either load in the other), the same sharing between clones and the same averaging over
//! threads; a lone update becomes the value as it is. [`RunningStat::step`] hands the value to
//! the step by move, so that the step's operation frees it instead of a release of its own
//! (docs/gpu.md, "The tenth cut").

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
/// several devices). Clones share the state. A [`RunningStat::step`] of the only thread that
/// updates the statistic makes its update the value at once.
#[derive(Clone, Debug)]
pub struct RunningStat<V> {
    id: ParamId,
    pending: Arc<Mutex<Pending<V>>>,
    /// `None` only while a [`RunningStat::step`] holds the value (under both locks), or after
    /// a step that panicked.
    value: Arc<Mutex<Option<V>>>,
}

/// The updates not yet applied, and which threads have updated the statistic.
#[derive(Debug)]
struct Pending<V> {
    /// Each thread's newest update.
    updates: HashMap<ThreadId, V>,
    /// Which threads have updated (by [`RunningStat::update`] or [`RunningStat::step`]).
    updaters: Updaters,
}

/// The threads that have updated a statistic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Updaters {
    /// None yet.
    None,
    /// One thread, always the same.
    One(ThreadId),
    /// Two or more.
    Many,
}

impl<V> Pending<V> {
    /// Counts `thread` among the updaters; true while it is the only one.
    fn updated_by(&mut self, thread: ThreadId) -> bool {
        self.updaters = match self.updaters {
            Updaters::None => Updaters::One(thread),
            Updaters::One(one) if one == thread => Updaters::One(one),
            _ => Updaters::Many,
        };
        self.updaters == Updaters::One(thread)
    }
}

/// A lock that a panicking thread poisoned is taken as it is: the value lock holds a whole
/// value (every write replaces it in one assignment); the pending updates may have lost those
/// being applied when the panic came (burn's `RunningState` panics on every later use instead).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The value in `slot`.
///
/// # Panics
/// If a [`RunningStat::step`] panicked while it held the value (the value went with it).
fn held<V>(slot: &Option<V>) -> &V {
    slot.as_ref().unwrap_or_else(|| lost())
}

/// The panic of a statistic whose value went with a panicking [`RunningStat::step`].
fn lost() -> ! {
    panic!("a running statistic's value was lost: a training step panicked while it held it")
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
            pending: Arc::new(Mutex::new(Pending {
                updates: HashMap::new(),
                updaters: Updaters::None,
            })),
            value: Arc::new(Mutex::new(Some(value))),
        }
    }

    /// Sets this thread's update (kept pending until it is read in sync: see the type).
    pub fn update(&self, value: Tensor<B, D>) {
        let thread = std::thread::current().id();
        let mut pending = lock(&self.pending);
        pending.updated_by(thread);
        if pending.updates.contains_key(&thread) {
            self.apply(&mut pending);
        }
        pending.updates.insert(thread, value);
    }

    /// The value, without this thread's pending update (one update behind after an
    /// [`RunningStat::update`]; not after a lone thread's [`RunningStat::step`], which leaves
    /// nothing pending).
    pub fn value(&self) -> Tensor<B, D> {
        held(&lock(&self.value)).clone()
    }

    /// The value with this thread's pending update (and every other thread's) applied.
    pub fn value_sync(&self) -> Tensor<B, D> {
        let thread = std::thread::current().id();
        let mut pending = lock(&self.pending);
        if pending.updates.contains_key(&thread) {
            self.apply(&mut pending);
        }
        held(&lock(&self.value)).clone()
    }

    /// A training step's read and update in one: the value as [`RunningStat::value_sync`]
    /// reads it is handed to `step` by move; `step` returns `Ok((update, r))` to update the
    /// statistic, or `Err((value, r))` with the value it was given to leave it as it was.
    ///
    /// Why: on a fusion backend (wgpu, CUDA) a tensor handed to an operation by its last
    /// handle is freed by that operation, while a clone read by `value_sync` and replaced by
    /// [`RunningStat::update`] is freed later by an operation of its own (a release): one per
    /// statistic and step (docs/gpu.md, "The tenth cut"). So where this thread is the only one
    /// that has updated the statistic, the update becomes the value at once: `value_sync`,
    /// `update` and `value_sync` again, with nothing left pending (burn's `RunningState` keeps
    /// it pending, [`RunningStat::value`] one update behind, until the next sync). Once a second
    /// thread has updated it, this is `value_sync` and `update`: every thread's update kept
    /// pending and the updates averaged, as the type says. (So the round in which a second
    /// thread joins differs from burn's: that thread's first read finds the first thread's last
    /// update already the value, where burn's would find the value before it.)
    ///
    /// While it holds the value, other threads' reads and updates of this statistic wait for
    /// `step` to return; `step` must not read or update this statistic itself (it would wait
    /// for itself).
    ///
    /// # Panics
    /// If `step` panics; the statistic then has no value, and every later use panics but
    /// loading a record (`Module::load_record`), which gives it one.
    pub fn step<R>(
        &self,
        step: impl FnOnce(Tensor<B, D>) -> Result<(Tensor<B, D>, R), (Tensor<B, D>, R)>,
    ) -> R {
        let thread = std::thread::current().id();
        let mut pending = lock(&self.pending);
        if !pending.updated_by(thread) {
            drop(pending);
            return match step(self.value_sync()) {
                Ok((update, r)) => {
                    self.update(update);
                    r
                }
                Err((_, r)) => r,
            };
        }
        if !pending.updates.is_empty() {
            // This thread's own update, the only one there can be.
            self.apply(&mut pending);
        }
        let mut slot = lock(&self.value);
        let value = slot.take().unwrap_or_else(|| lost());
        let (value, r) = match step(value) {
            Ok(stepped) | Err(stepped) => stepped,
        };
        *slot = Some(value);
        r
    }

    /// Applies every thread's pending update.
    fn sync(&self) {
        let mut pending = lock(&self.pending);
        if !pending.updates.is_empty() {
            self.apply(&mut pending);
        }
    }

    /// The pending updates become the value: the lone one as it is, several averaged (on the
    /// device of the first).
    fn apply(&self, pending: &mut Pending<Tensor<B, D>>) {
        let count = pending.updates.len();
        let mut updates = pending.updates.drain().map(|(_, value)| value);
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
        *lock(&self.value) = Some(value);
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
        let param = Param::initialized(self.id, held(&lock(&self.value)).clone());
        visitor.visit_float(&param)
    }

    fn map<Mapper: ModuleMapper<B>>(self, mapper: &mut Mapper) -> Self {
        let mut value = lock(&self.value);
        let param = Param::initialized(self.id, held(&value).clone());
        let (_, mapped, _) = mapper.map_float(param).consume();
        *value = Some(mapped);
        drop(value);
        self
    }

    fn into_record(self) -> Self::Record {
        self.sync();
        let value = held(&lock(&self.value)).clone();
        Param::initialized(self.id, value)
    }

    fn load_record(mut self, record: Self::Record) -> Self {
        let mut value = lock(&self.value);
        // Detached: a record's tensor loads as a trainable parameter (burn's `Param` record
        // asks for a gradient on autodiff backends), and a statistic that asked for one would
        // pass for a trainable parameter: averaged by a momentum copy's update, or replaced by
        // `SslMethod::take_online`'s stand-ins.
        // On the device of the value it replaces, or the record's where a panicking step took
        // that value with it (a checkpoint still loads).
        let loaded = record.val().detach();
        *value = Some(match value.as_ref() {
            Some(old) => loaded.to_device(&old.device()),
            None => loaded,
        });
        drop(value);
        self.id = record.id;
        self
    }

    fn to_device(self, device: &B::Device) -> Self {
        let mut value = lock(&self.value);
        *value = Some(held(&value).clone().to_device(device));
        drop(value);
        self
    }

    fn fork(self, device: &B::Device) -> Self {
        // Not trained: nothing to detach.
        self.to_device(device)
    }

    fn collect_devices(&self, mut devices: Vec<B::Device>) -> Vec<B::Device> {
        let device = held(&lock(&self.value)).device();
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

    /// `step` against burn's `RunningState` fed the same reads and updates: while one thread
    /// updates, a step is `value_sync`, `update` and `value_sync` again (its update the value
    /// at once, a pending `update` of the thread applied before it, an `Err` changing nothing);
    /// once a second thread has updated the statistic, a step is `value_sync` and `update`
    /// (pending updates averaged). Every value is an integer or a half of one: exact sums.
    #[test]
    // The steps' `Err` carries the value back with the read (a `Vec`), as `step` asks.
    #[allow(clippy::result_large_err)]
    fn step_reads_and_updates_as_burns_running_state_does() {
        let ours = RunningStat::new(f64s::<B>(&[1.0, 2.0]));
        let burns = RunningState::new(f64s::<B>(&[1.0, 2.0]));
        let burns_step = |update: Tensor<B, 1>| {
            let read = host(burns.value_sync());
            burns.update(update);
            read
        };
        // One thread: its update is the value at once.
        for step in 0..3 {
            let update = f64s::<B>(&[step as f64, 3.0 - step as f64]);
            let read = ours.step(|value| Ok((update.clone(), host(value))));
            assert_eq!(read, burns_step(update));
            assert_eq!(host(ours.value()), host(burns.value_sync()));
        }
        assert_eq!(host(ours.value()), vec![2.0, 1.0]);
        // An `Err` hands the value back: nothing changes.
        let read = ours.step(|value| Err((value, 7)));
        assert_eq!(read, 7);
        assert_eq!(host(ours.value()), vec![2.0, 1.0]);
        // A pending update of this thread is applied before the step reads.
        ours.update(f64s(&[6.0, -4.0]));
        burns.update(f64s(&[6.0, -4.0]));
        let read = ours.step(|value| Ok((f64s(&[8.0, 0.0]), host(value))));
        assert_eq!(read, vec![6.0, -4.0]);
        assert_eq!(burns_step(f64s(&[8.0, 0.0])), read);
        assert_eq!(host(burns.value_sync()), vec![8.0, 0.0]);
        // A second thread's update: from now on every update is pending, the pending averaged.
        std::thread::scope(|scope| {
            let (ours, burns) = (ours.clone(), burns.clone());
            scope.spawn(move || {
                ours.update(f64s(&[4.0, 2.0]));
                burns.update(f64s(&[4.0, 2.0]));
            });
        });
        for (values, expected_read) in [([2.0, 6.0], [8.0, 0.0]), ([0.0, 4.0], [3.0, 4.0])] {
            let update = f64s::<B>(&values);
            let read = ours.step(|value| Ok((update.clone(), host(value))));
            assert_eq!(read, burns_step(update));
            assert_eq!(read, expected_read);
            assert_eq!(host(ours.value()), host(burns.value()));
        }
        // The steps' reads: 8, 0 (the other thread's update still pending, this thread's none);
        // then (2 + 4) / 2, (6 + 2) / 2; the record applies this thread's last.
        assert_eq!(
            host(ours.into_record().val()),
            host(burns.into_record().val())
        );
    }

    /// A step that panics takes the value with it: a later read panics (the statistic's own
    /// message), and loading a record gives it a value again, so a checkpoint still loads.
    #[test]
    // The step's closure returns `step`'s `Result`, whose `Err` carries a tensor.
    #[allow(clippy::result_large_err)]
    fn a_record_loads_into_a_statistic_a_panicking_step_emptied() {
        use std::panic::{catch_unwind, AssertUnwindSafe};
        let stat = RunningStat::new(f64s::<B>(&[1.0, 2.0]));
        let record = RunningStat::new(f64s::<B>(&[5.0, 6.0])).into_record();
        let stepped = catch_unwind(AssertUnwindSafe(|| {
            stat.step::<()>(|_| panic!("a training step that fails"))
        }));
        assert!(stepped.is_err());
        assert!(catch_unwind(AssertUnwindSafe(|| stat.value())).is_err());
        let loaded = stat.load_record(record);
        assert_eq!(host(loaded.value()), vec![5.0, 6.0]);
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
