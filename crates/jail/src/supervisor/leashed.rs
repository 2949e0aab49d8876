//! A leashed run's network (see `sandlot_egress`): the namespace, linked to the server's egress gateway, that the
//! run's init joins instead of making one of its own; the proxy variables its program gets; and the connections
//! it made, for its outcome. A leashed run never takes a prepared sandbox nor a conversation's kept namespace, and
//! its namespace is never kept: it goes when the run's init is gone. A leashed live sandbox gets one for its life
//! (`live_build`), its processes the proxy variables, and each call the connections made during it (`sessions`).

use std::sync::Arc;

use sandlot_core::{Job, JobNetwork, RunOutcome};
use sandlot_egress::{Egress, Owner, SandboxNetwork};

use super::error::Error;

/// The server's egress, as the backend's configuration holds it.
#[derive(Clone)]
pub struct EgressHandle(pub Arc<Egress>);

impl std::fmt::Debug for EgressHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Egress")
    }
}

/// The network of `job` if it is leashed: `None` for loopback only.
pub async fn network_for(
    egress: Option<&EgressHandle>,
    job: &Job,
) -> sandlot_core::Result<Option<Arc<SandboxNetwork>>> {
    let Some(wanted) = &job.network else { return Ok(None) };
    let network = leash(egress, wanted).await?;
    network.set_run(Some(job.run_id.clone()));
    Ok(Some(network))
}

/// A sandbox network on `wanted`'s leash, from the server's egress.
pub async fn leash(egress: Option<&EgressHandle>, wanted: &JobNetwork) -> Result<Arc<SandboxNetwork>, Error> {
    let Some(EgressHandle(egress)) = egress else {
        return Err(Error::Setup {
            step: "leash the run's network".into(),
            message: "the native backend was started without the server's egress".into(),
        });
    };
    let (egress, leash) = (egress.clone(), wanted.leash.clone());
    let owner = Owner::new(wanted.tenant.clone(), wanted.conversation.clone());
    let network = tokio::task::spawn_blocking(move || egress.leash(leash, owner))
        .await
        .map_err(|e| Error::Setup { step: "leash the run's network".into(), message: e.to_string() })?
        .map_err(|e| Error::Setup { step: "leash the run's network".into(), message: e.to_string() })?;
    Ok(Arc::new(network))
}

/// `job` with the proxy variables of `network` in its environment (the run's own win: a program may ask for no
/// proxy, and is then caught by the gateway all the same).
pub fn with_proxy_environment(job: &Job, network: &SandboxNetwork) -> Job {
    let mut job = job.clone();
    for (name, value) in network.environment() {
        job.env.entry(name).or_insert(value);
    }
    job
}

/// Puts the connections `network` recorded into `outcome`, once those the run left open have closed (its
/// processes are gone, so they close at once; a second at most).
pub async fn record_connections(outcome: &mut RunOutcome, network: &SandboxNetwork) {
    network.settle(std::time::Duration::from_secs(1)).await;
    let (connections, dropped) = network.take_connections();
    outcome.connections = connections;
    outcome.connections_dropped = dropped;
}
