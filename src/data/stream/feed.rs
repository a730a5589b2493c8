//! [`Feed`]: the reader of an epoch of a source read front to back (shards), between the files
//! and the loader's workers.
//!
//! One thread reads the epoch's stream in order ([`ImageSource::read_stream`]) and keeps the
//! encoded bytes of each item this loader will build (this replica's rows, from the resumed
//! batch on) until a worker takes it; the others are passed over unread where the source can
//! skip them. The thread reads an item only once a worker has asked for it or for one read
//! after it, so it holds at most the shuffle buffer's worth of items plus those of the batches
//! being built ([`SequentialEpoch`](super::SequentialEpoch)): memory bounded by the buffer and
//! the prefetch depth, not by the dataset.
//!
//! Hand-written: a channel would hand the items over in the order they are read, and the
//! workers take them in the epoch's order (the stream through the shuffle buffer).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use super::source::ImageSource;
use crate::data::error::DataError;

/// An item no worker of this loader takes.
const UNWANTED: u32 = u32::MAX;

/// The reader thread of one epoch and the items it holds (see the module docs).
pub(crate) struct Feed {
    shared: Arc<Shared>,
    reader: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// Each item's place among the wanted items in the order they are read.
    rank: Vec<u32>,
    /// The most items held at once, over every epoch of the loader.
    peak: Arc<AtomicUsize>,
}

#[derive(Default)]
struct State {
    /// Wanted items of rank below this are asked for.
    need: usize,
    held: HashMap<usize, Result<Vec<u8>, DataError>>,
    done: bool,
    stop: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Marks the reader finished however its thread ends (a panic included), so that no worker
/// waits for an item that will never come.
struct Finished(Arc<Shared>);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.lock().done = true;
        self.0.changed.notify_all();
    }
}

impl Feed {
    /// Starts reading `stream` for the workers, who will take each item of `wanted` once.
    pub(crate) fn start<S: ImageSource>(
        source: Arc<S>,
        stream: Vec<usize>,
        wanted: &[usize],
        peak: Arc<AtomicUsize>,
    ) -> Self {
        let mut rank = vec![UNWANTED; source.len()];
        for &i in wanted {
            rank[i] = 0;
        }
        let mut next = 0u32;
        for &i in &stream {
            if rank[i] != UNWANTED {
                rank[i] = next;
                next += 1;
            }
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            rank,
            peak,
        });
        let reader = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                let finished = Finished(Arc::clone(&shared));
                let keep = |i: usize| shared.rank[i] != UNWANTED;
                source.read_stream(&stream, &keep, &mut |i, bytes| {
                    let mut state = shared.lock();
                    state.held.insert(i, bytes);
                    shared.peak.fetch_max(state.held.len(), Ordering::SeqCst);
                    shared.changed.notify_all();
                    // The next item is read once a worker asks for it (or for a later one).
                    let following = shared.rank[i] as usize + 1;
                    while !state.stop && state.need <= following {
                        state = shared.wait(state);
                    }
                    !state.stop
                });
                drop(finished);
            })
        };
        Self {
            shared,
            reader: Some(reader),
        }
    }

    /// The bytes of item `index` (or why they could not be read: a bad item, substituted by
    /// the loader), waiting until the reader has read them. The outer error is the reader's own
    /// failure (it stopped, or the item is not this loader's): the epoch stops on it.
    pub(crate) fn take(&self, index: usize) -> Result<Result<Vec<u8>, DataError>, DataError> {
        let rank = self.shared.rank[index];
        let missing = |why: &str| DataError::Request {
            path: PathBuf::from("<shard reader>"),
            reason: format!("item {index} {why}"),
        };
        if rank == UNWANTED {
            return Err(missing("is not among this loader's items of the epoch"));
        }
        let mut state = self.shared.lock();
        if state.need <= rank as usize {
            state.need = rank as usize + 1;
            self.shared.changed.notify_all();
        }
        loop {
            if let Some(bytes) = state.held.remove(&index) {
                return Ok(bytes);
            }
            if state.done {
                return Err(missing(
                    "was not read: the shard reader stopped before it (it failed; see the log)",
                ));
            }
            state = self.shared.wait(state);
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        if let Some(reader) = self.reader.take() {
            // The reader stops at its next item; a panic in it was already an error for the
            // workers waiting on it (`Finished`).
            let _ = reader.join();
        }
    }
}
