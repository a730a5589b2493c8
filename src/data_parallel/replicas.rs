//! Starting the replicas of a data-parallel run: one thread per local device, registered with
//! `burn-collective` (and, across machines, with its global orchestrator), each running the
//! caller's function; the first replica that fails ends the run for all, named in the error.
//! Documented on `run` and on the parent module's page.

use std::any::Any;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};

use burn_collective::{CollectiveConfig, PeerId};

use super::config::{DataParallelConfig, MultiNode};
use super::replica::{CollectiveBackend, Replica};
use crate::base::error::ConfigError;

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
/// Across machines ([`DataParallelConfig::nodes`]) each replica also registers with the run's
/// global orchestrator ([`Orchestrator`]). Two data-parallel runs of one backend type in one
/// process take turns: `burn-collective` keeps one server per backend type per process.
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
