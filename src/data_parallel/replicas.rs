//! Starting the replicas of a data-parallel run: one thread per local device, registered with
//! `burn-collective` (and, across machines, with its global orchestrator), each running the
//! caller's function; the first replica that fails ends the run for all, named in the error.

use std::any::Any;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::Mutex;

use burn_collective::{CollectiveConfig, PeerId};
use serde::{Deserialize, Serialize};

use super::{CollectiveBackend, Replica};
use crate::base::error::ConfigError;

/// How a data-parallel run spreads over devices and machines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataParallelConfig {
    /// Replicas on this machine, one per device (`--devices`).
    pub devices: usize,
    /// The machines, when there are several (`None`: this one alone).
    pub nodes: Option<MultiNode>,
}

/// Several machines, through `burn-collective`'s global level: one orchestrator every node
/// reaches, and a data service on each node that the others download from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultiNode {
    /// Number of machines.
    pub nodes: u32,
    /// This machine's rank, `0 .. nodes`: its replicas hold ranks
    /// `rank·devices .. (rank+1)·devices`.
    pub rank: u32,
    /// The orchestrator's address, e.g. `ws://10.0.0.1:3000` (started by node 0 with
    /// [`orchestrate`], or by any process on a reachable machine).
    pub orchestrator: String,
    /// This machine's address as the others reach it, e.g. `ws://10.0.0.2:3001`.
    pub address: String,
    /// The port this machine's data service listens on (the port of `address`).
    pub data_port: u16,
}

impl DataParallelConfig {
    /// `devices` replicas on this machine alone.
    pub fn local(devices: usize) -> Self {
        Self {
            devices,
            nodes: None,
        }
    }

    /// The number of replicas over every machine.
    pub fn replicas(&self) -> usize {
        self.devices * self.nodes.as_ref().map_or(1, |n| n.nodes as usize)
    }

    /// The rank of this machine's first replica.
    pub fn first_rank(&self) -> usize {
        self.nodes
            .as_ref()
            .map_or(0, |n| n.rank as usize * self.devices)
    }

    /// Checks the counts and ranks.
    ///
    /// # Errors
    /// No device, no machine, a machine rank out of range, or an address without a scheme.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.devices == 0 {
            return Err(ConfigError::new("devices", "must be at least 1"));
        }
        if let Some(nodes) = &self.nodes {
            if nodes.nodes == 0 {
                return Err(ConfigError::new("nodes", "must be at least 1"));
            }
            if nodes.rank >= nodes.nodes {
                return Err(ConfigError::new(
                    "node_rank",
                    format!(
                        "is {} but there are {} nodes (0-based)",
                        nodes.rank, nodes.nodes
                    ),
                ));
            }
            for (field, address) in [
                ("orchestrator", &nodes.orchestrator),
                ("node_address", &nodes.address),
            ] {
                if !address.starts_with("ws://") {
                    return Err(ConfigError::new(
                        field,
                        format!("`{address}` is not a ws://host:port address"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `burn-collective`'s configuration for this machine.
    fn collective(&self) -> Result<CollectiveConfig, ConfigError> {
        let config = CollectiveConfig::default().with_num_devices(self.devices);
        Ok(match &self.nodes {
            None => config,
            Some(nodes) => config
                .with_num_nodes(nodes.nodes)
                .with_global_address(nodes.orchestrator.parse().map_err(|e| {
                    ConfigError::new("orchestrator", format!("not an address: {e}"))
                })?)
                .with_node_address(nodes.address.parse().map_err(|e| {
                    ConfigError::new("node_address", format!("not an address: {e}"))
                })?)
                .with_data_service_port(nodes.data_port),
        })
    }
}

/// Why a data-parallel run ended early.
#[derive(Debug, thiserror::Error)]
pub enum DataParallelError {
    /// An impossible layout (no device, a machine rank out of range, a bad address).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A replica failed (an error, a panic, or a collective operation that could not complete,
    /// e.g. a lost connection); the others were stopped.
    #[error("replica {rank} of {replicas} failed: {reason}{}", others_note(.others))]
    Replica {
        /// The rank of the replica that failed first.
        rank: usize,
        /// The number of replicas.
        replicas: usize,
        /// What went wrong there.
        reason: String,
        /// How the other replicas ended, as a consequence (rank and reason).
        others: Vec<(usize, String)>,
    },
    /// `burn-collective`'s server of this process stopped in an earlier run (it does not
    /// restart): a new process is needed.
    #[error(
        "the collective layer of this process stopped in an earlier run; start a new process \
         to run on several devices again"
    )]
    Collective,
}

fn others_note(others: &[(usize, String)]) -> String {
    if others.is_empty() {
        String::new()
    } else {
        format!(
            " (then {})",
            others
                .iter()
                .map(|(rank, reason)| format!("replica {rank}: {reason}"))
                .collect::<Vec<_>>()
                .join("; ")
        )
    }
}

/// One data-parallel run at a time per process: `burn-collective` keeps one server per backend
/// type per process, which two concurrent runs would share.
static RUNS: Mutex<()> = Mutex::new(());

/// Runs `replica` on one thread per device of `devices` (this machine's replicas, in rank
/// order), each with its [`Replica`] and with its batch norms synchronised over all replicas;
/// returns their results in rank order. When one fails (an error or a panic), the collective
/// layer is reset so that the others' pending operations fail too, and the run's error names the
/// replica that failed first.
///
/// # Errors
/// See [`DataParallelError`].
pub fn run<B, T, E, F>(
    config: &DataParallelConfig,
    devices: &[B::Device],
    replica: F,
) -> Result<Vec<T>, DataParallelError>
where
    B: CollectiveBackend,
    T: Send,
    E: Display,
    F: Fn(Replica<B>, &B::Device) -> Result<T, E> + Sync,
{
    config.validate()?;
    if devices.len() != config.devices {
        return Err(ConfigError::new(
            "devices",
            format!(
                "{} replicas asked for but {} devices given",
                config.devices,
                devices.len()
            ),
        )
        .into());
    }
    let collective = config.collective()?;
    let replicas = config.replicas();
    let first = config.first_rank();
    let _turn = RUNS.lock().unwrap_or_else(|e| e.into_inner());
    if !reset::<B>() {
        return Err(DataParallelError::Collective);
    }
    let remote = config.nodes.as_ref().filter(|n| n.nodes > 1).map(|_| {
        let local = first..first + config.devices;
        let others: Vec<String> = (0..replicas)
            .filter(|r| !local.contains(r))
            .map(|r| r.to_string())
            .collect();
        format!(
            " (across machines, burn-collective panics so when another machine stopped or its \
             connection dropped: replicas {} run on the other machines)",
            others.join(", ")
        )
    });
    let (sender, results) = mpsc::channel::<(usize, Result<T, String>)>();
    let mut ended: Vec<(usize, Result<T, String>)> = Vec::with_capacity(devices.len());
    std::thread::scope(|scope| {
        for (local, device) in devices.iter().enumerate() {
            let rank = first + local;
            let (sender, collective, replica) = (sender.clone(), collective.clone(), &replica);
            let remote = &remote;
            std::thread::Builder::new()
                .name(format!("replica-{rank}"))
                .spawn_scoped(scope, move || {
                    let result = catch_unwind(AssertUnwindSafe(|| {
                        run_one::<B, T, E, F>(rank, replicas, device, collective, replica)
                    }))
                    .unwrap_or_else(|panic| {
                        Err(format!(
                            "panicked: {}{}",
                            panic_text(&panic),
                            remote.as_deref().unwrap_or_default()
                        ))
                    });
                    let _ = sender.send((rank, result));
                })
                .expect("a thread for a replica");
        }
        drop(sender);
        for (rank, result) in results.iter() {
            if result.is_err() && ended.iter().all(|(_, r)| r.is_ok()) {
                // The first failure: make the others' pending collective operations fail.
                reset::<B>();
            }
            ended.push((rank, result));
        }
    });
    let mut failures = ended
        .iter()
        .filter_map(|(rank, r)| r.as_ref().err().map(|e| (*rank, e.clone())));
    if let Some((rank, reason)) = failures.next() {
        return Err(DataParallelError::Replica {
            rank,
            replicas,
            reason,
            others: failures.collect(),
        });
    }
    ended.sort_by_key(|(rank, _)| *rank);
    Ok(ended
        .into_iter()
        .map(|(_, r)| r.unwrap_or_else(|_| unreachable!("failures returned above")))
        .collect())
}

/// One replica's thread: register, synchronise the batch norms, run, unregister.
fn run_one<B, T, E, F>(
    rank: usize,
    replicas: usize,
    device: &B::Device,
    collective: CollectiveConfig,
    replica: &F,
) -> Result<T, String>
where
    B: CollectiveBackend,
    E: Display,
    F: Fn(Replica<B>, &B::Device) -> Result<T, E>,
{
    let peer = PeerId(rank as u32);
    burn_collective::register::<B::InnerBackend>(peer, device.clone(), collective)
        .map_err(|e| format!("could not join the other replicas: {e:?}"))?;
    let handle = Replica::<B>::new(rank, replicas, peer);
    let result = {
        let _sync_bn = curriculum_ssl_models::replica_stats::install(handle.batch_stats());
        replica(handle.clone(), device).map_err(|e| e.to_string())
    };
    // A failed replica stays registered: were it to leave, the others' next all-reduce would
    // complete without it (the server counts the peers registered) instead of failing; the run's
    // reset releases them.
    let value = result?;
    burn_collective::finish_collective::<B::InnerBackend>(peer)
        .map_err(|e| format!("could not leave the other replicas: {e:?}"))?;
    Ok(value)
}

/// Resets `burn-collective`'s server of this process; false when it cannot be reached any more
/// (a failure across machines can stop it: its panics are not returned as errors).
fn reset<B: CollectiveBackend>() -> bool {
    catch_unwind(burn_collective::reset_collective::<B::InnerBackend>).is_ok()
}

fn panic_text(panic: &Box<dyn Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// Runs `burn-collective`'s global orchestrator on `port` until the process is interrupted:
/// what the nodes of a several-machine run register with (one per run, on any reachable
/// machine).
pub fn orchestrate(port: u16) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime for the orchestrator");
    runtime.block_on(burn_collective::start_global_orchestrator(port));
}
