//! How a data-parallel run spreads over devices and machines: `DataParallelConfig`,
//! `MultiNode`.

use std::time::Duration;

use burn_collective::{CollectiveConfig, CollectiveError, GlobalCollectiveError};
use serde::{Deserialize, Serialize};

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
    /// [`Orchestrator`](super::Orchestrator), e.g. `recipe orchestrator`, on any machine the
    /// nodes reach).
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
pub(crate) const MAX_DEVICES: usize = 1024;

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
    pub(super) fn collective(&self) -> Result<CollectiveConfig, ConfigError> {
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
