//! Starting the replicas of a data-parallel run: one thread per local device, registered with
//! `burn-collective` (and, across machines, with its global orchestrator), each running the
//! caller's function; the first replica that fails ends the run for all, named in the error.

use std::any::Any;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use burn_collective::{CollectiveConfig, CollectiveError, GlobalCollectiveError, PeerId};
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
    /// [`Orchestrator`], e.g. `recipe orchestrator`, on any machine the nodes reach).
    pub orchestrator: String,
    /// This machine's address as the others reach it, e.g. `ws://10.0.0.2:3001`.
    pub address: String,
    /// The port this machine's data service listens on (the port of `address`; it listens on
    /// the host of `address` only, e.g. a loopback address stays local).
    pub data_port: u16,
    /// The longest wait, in seconds, for the other machines: to reach the orchestrator, for
    /// every machine to register, for every machine to reach a barrier of a collective
    /// operation. Past it the run ends naming the machines that did not arrive. Default
    /// [`DEFAULT_TIMEOUT_S`].
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
}

/// The default [`MultiNode::timeout_s`]: 10 minutes, longer than any wait of a working run
/// between two collective operations (machine 0 alone measures the kNN monitor at the start
/// and after epochs while the others wait at the next one).
pub const DEFAULT_TIMEOUT_S: u64 = 600;

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_S
}

/// The most replicas one machine may run ([`DataParallelConfig::devices`]): a thread each.
pub const MAX_DEVICES: usize = 1024;

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
        if self.devices > MAX_DEVICES {
            return Err(ConfigError::new(
                "devices",
                format!(
                    "{} replicas on one machine: at most {MAX_DEVICES} (one thread and one \
                     device each)",
                    self.devices
                ),
            ));
        }
        if let Some(nodes) = &self.nodes {
            if nodes.nodes == 0 {
                return Err(ConfigError::new("nodes", "must be at least 1"));
            }
            if nodes.timeout_s == 0 {
                return Err(ConfigError::new(
                    "timeout",
                    "must be at least 1 second (the longest wait for the other machines)",
                ));
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
                .with_data_service_port(nodes.data_port)
                .with_global_timeout(Duration::from_secs(nodes.timeout_s)),
        })
    }

    /// The machine of a replica rank (every machine runs [`DataParallelConfig::devices`]).
    fn machine_of(&self, rank: usize) -> usize {
        rank / self.devices.max(1)
    }

    /// A collective layer's error in words a user acts on: which machines did not arrive,
    /// which one was lost, what to check.
    pub fn describe(&self, error: &CollectiveError) -> String {
        let Some(nodes) = &self.nodes else {
            return format!("{error:?}");
        };
        let timeout = nodes.timeout_s;
        let CollectiveError::Global(global) = error else {
            return match error {
                CollectiveError::LocalServerMissing => {
                    "the collective layer of this process stopped (another machine stopped or \
                     its connection dropped)"
                        .into()
                }
                other => format!("{other:?}"),
            };
        };
        match global {
            GlobalCollectiveError::RegisterTimeout {
                expected_nodes,
                registered,
                waited_ms,
            } => {
                let arrived: Vec<usize> = registered
                    .iter()
                    .flat_map(|(_, peers)| peers.iter().map(|p| self.machine_of(p.0 as usize)))
                    .collect();
                let missing: Vec<String> = (0..*expected_nodes as usize)
                    .filter(|m| !arrived.contains(m))
                    .map(|m| {
                        let first = m * self.devices;
                        let last = first + self.devices - 1;
                        if first == last {
                            format!("machine {m} (replica {first})")
                        } else {
                            format!("machine {m} (replicas {first}–{last})")
                        }
                    })
                    .collect();
                let present: Vec<String> = registered
                    .iter()
                    .map(|(address, peers)| {
                        let machine = peers.first().map_or(0, |p| self.machine_of(p.0 as usize));
                        format!("machine {machine} at {address}")
                    })
                    .collect();
                format!(
                    "the run needs {expected_nodes} machines but {} registered with the \
                     orchestrator {} within {} s ({}): {} did not arrive; start {} with \
                     --nodes {expected_nodes} and the same --orchestrator, or raise --timeout",
                    registered.len(),
                    nodes.orchestrator,
                    waited_ms / 1000,
                    present.join(", "),
                    missing.join(", "),
                    if missing.len() == 1 { "it" } else { "them" }
                )
            }
            GlobalCollectiveError::SyncTimeout { missing, waited_ms } => format!(
                "waited {} s at a collective operation for the machines at {}: they stopped, hung \
                 or lost their connection (or their work between two steps takes longer than \
                 --timeout {timeout})",
                waited_ms / 1000,
                missing
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            GlobalCollectiveError::PeerUnreachable(address) => format!(
                "lost the connection to the machine at {address}: it stopped or its network \
                 failed"
            ),
            GlobalCollectiveError::PeerLost(node) => format!(
                "lost the connection to another machine (node {node:?}): it stopped or its \
                 network failed"
            ),
            GlobalCollectiveError::OrchestratorUnreachable => format!(
                "the orchestrator {} could not be reached within {timeout} s: start it there \
                 (`recipe orchestrator --port PORT`), or check --orchestrator",
                nodes.orchestrator
            ),
            GlobalCollectiveError::OrchestratorLost => format!(
                "the orchestrator {} stopped answering (stopped, or its connection dropped)",
                nodes.orchestrator
            ),
            GlobalCollectiveError::RegisterParamsMismatch => format!(
                "another machine registered with another --nodes than this machine's {}",
                nodes.nodes
            ),
            GlobalCollectiveError::DoubleRegister => format!(
                "another machine registered with this machine's address {}: give every machine \
                 its own --node-address",
                nodes.address
            ),
            other => format!("{other:?}"),
        }
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
    if let Some(nodes) = &config.nodes {
        check_data_port(nodes)?;
    }
    let replicas = config.replicas();
    let first = config.first_rank();
    let layout = std::sync::Arc::new(config.clone());
    let _turn = RUNS.lock().unwrap_or_else(|e| e.into_inner());
    if !reset::<B>() {
        return Err(DataParallelError::Collective);
    }
    let (sender, results) = mpsc::channel::<(usize, Result<T, String>)>();
    let mut ended: Vec<(usize, Result<T, String>)> = Vec::with_capacity(devices.len());
    // The threads register only once every one of them exists: a thread the system refuses
    // (too many) ends the run before any replica waits for it.
    let gate = Gate::default();
    let mut refused = None;
    std::thread::scope(|scope| {
        for (local, device) in devices.iter().enumerate() {
            let rank = first + local;
            let (sender, collective, replica) = (sender.clone(), collective.clone(), &replica);
            let (gate, layout) = (&gate, layout.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("replica-{rank}"))
                .spawn_scoped(scope, move || {
                    if !gate.wait() {
                        return;
                    }
                    let result = catch_unwind(AssertUnwindSafe(|| {
                        run_one::<B, T, E, F>(rank, replicas, device, collective, layout, replica)
                    }))
                    .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_text(&panic))));
                    let _ = sender.send((rank, result));
                });
            if let Err(e) = spawned {
                refused = Some(format!(
                    "the system refused a thread for replica {rank} of {replicas} ({e}): ask \
                     for fewer --devices"
                ));
                break;
            }
        }
        drop(sender);
        gate.open(refused.is_none());
        if refused.is_some() {
            return;
        }
        for (rank, result) in results.iter() {
            if result.is_err() && ended.iter().all(|(_, r)| r.is_ok()) {
                // The first failure: make the others' pending collective operations fail.
                reset::<B>();
            }
            ended.push((rank, result));
        }
    });
    if let Some(reason) = refused {
        return Err(ConfigError::new("devices", reason).into());
    }
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

/// Whether the replicas' threads may start: each waits until every thread of the run exists.
#[derive(Default)]
struct Gate {
    open: Mutex<Option<bool>>,
    changed: Condvar,
}

impl Gate {
    /// Lets the threads go (`true`) or stop (`false`).
    fn open(&self, go: bool) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = Some(go);
        self.changed.notify_all();
    }

    /// Waits for [`Gate::open`]; whether to go.
    fn wait(&self) -> bool {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(go) = *open {
                return go;
            }
            open = self.changed.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Checks that this machine's data service can listen on the host and port of its address
/// before the run registers (a port another process holds).
fn check_data_port(nodes: &MultiNode) -> Result<(), ConfigError> {
    let rest = nodes
        .address
        .split_once("://")
        .map_or(nodes.address.as_str(), |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default().to_string(),
        None => authority
            .rsplit_once(':')
            .map_or(authority, |(h, _)| h)
            .to_string(),
    };
    let bound = match std::net::TcpListener::bind((host.as_str(), nodes.data_port)) {
        // Not an address of this machine (a NAT's, a proxy's, a container's port mapping): the
        // data service then listens on every interface (burn-communication's WsServer::on).
        Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {
            log::warn!(
                "{}: {host} is not an address of this machine; its data service listens on every \
                 interface, port {}",
                nodes.address,
                nodes.data_port
            );
            std::net::TcpListener::bind(("0.0.0.0", nodes.data_port))
        }
        bound => bound,
    };
    bound.map(drop).map_err(|e| {
        ConfigError::new(
            "node_address",
            format!(
                "{}: this machine cannot listen on {host}:{} ({e}); give a free port",
                nodes.address, nodes.data_port
            ),
        )
    })
}

/// One replica's thread: register, synchronise the batch norms, run, unregister.
fn run_one<B, T, E, F>(
    rank: usize,
    replicas: usize,
    device: &B::Device,
    collective: CollectiveConfig,
    layout: std::sync::Arc<DataParallelConfig>,
    replica: &F,
) -> Result<T, String>
where
    B: CollectiveBackend,
    E: Display,
    F: Fn(Replica<B>, &B::Device) -> Result<T, E>,
{
    let peer = PeerId(rank as u32);
    burn_collective::register::<B::InnerBackend>(peer, device.clone(), collective)
        .map_err(|e| format!("could not join the other replicas: {}", layout.describe(&e)))?;
    let handle = Replica::<B>::new(rank, replicas, peer, layout.clone());
    let result = {
        let _sync_bn = curriculum_ssl_models::replica_stats::install(handle.batch_stats());
        replica(handle.clone(), device).map_err(|e| e.to_string())
    };
    // A failed replica stays registered: were it to leave, the others' next all-reduce would
    // complete without it (the server counts the peers registered) instead of failing; the run's
    // reset releases them.
    let value = result?;
    burn_collective::finish_collective::<B::InnerBackend>(peer).map_err(|e| {
        format!(
            "could not leave the other replicas: {}",
            layout.describe(&e)
        )
    })?;
    Ok(value)
}

/// Resets `burn-collective`'s server of this process; false when it has stopped.
fn reset<B: CollectiveBackend>() -> bool {
    catch_unwind(burn_collective::reset_collective::<B::InnerBackend>)
        .is_ok_and(|reset| reset.is_ok())
}

fn panic_text(panic: &Box<dyn Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// `burn-collective`'s global orchestrator, bound: what the nodes of a several-machine run
/// register with (one per run, on any machine they reach). A registration that does not
/// complete within the nodes' [`MultiNode::timeout_s`] is answered with the nodes that did
/// register, and forgotten; a node whose connection closes leaves the registration.
#[derive(Debug)]
pub struct Orchestrator {
    listener: std::net::TcpListener,
}

impl Orchestrator {
    /// Binds `address` (`HOST:PORT`, e.g. `127.0.0.1:3000` to stay on this machine or
    /// `0.0.0.0:3000` for every interface; port 0 takes a free one, [`Orchestrator::address`]
    /// tells which).
    ///
    /// # Errors
    /// If the address cannot be bound (a port in use, a host that is not this machine's).
    pub fn bind(address: &str) -> std::io::Result<Self> {
        Ok(Self {
            listener: std::net::TcpListener::bind(address)?,
        })
    }

    /// The address it listens on (with the port chosen for port 0).
    ///
    /// # Errors
    /// If the system cannot say.
    pub fn address(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the process is interrupted (SIGINT, SIGTERM).
    ///
    /// # Errors
    /// If the server fails.
    pub fn serve(self) -> Result<(), String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("no runtime for the orchestrator: {e}"))?;
        runtime
            .block_on(burn_collective::serve_global_orchestrator(self.listener))
            .map_err(|e| format!("the orchestrator stopped: {e:?}"))
    }
}
