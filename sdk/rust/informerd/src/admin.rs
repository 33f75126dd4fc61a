//! `client.admin()`: what the daemon runs — its clusters, informers, and queues with the workers
//! on each — and its role in a replica set. These calls go to the configured target, whichever
//! replica it is.
//!
//! ```no_run
//! # async fn f(client: informerd::Client) -> informerd::Result<()> {
//! for q in client.admin().queues().await? {
//!     let info = q.queue.unwrap_or_default();
//!     let name = info.spec.map(|s| s.name).unwrap_or_default();
//!     println!("{name}: {} workers", q.workers.len());
//! }
//! # Ok(()) }
//! ```
use std::time::{Duration, SystemTime};

use informerd_api::v1::{
    self, ClusterInfo, GetReplicaRequest, InformerInfo, ListClustersRequest, ListInformersRequest,
    ListQueuesRequest, QueueDetails, ReplicaInfo,
};

use crate::client::Client;
use crate::error::Result;

/// A daemon's role in its replica set (admin.proto's `ReplicaRole`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReplicaRole {
    /// Leader election is off: the daemon serves everything.
    Standalone,
    /// Holds the Lease: serves Informers, Queues and Work.
    Leader,
    /// Serves Informers; answers Queues and Work with [`crate::Error::NotLeader`] naming the
    /// leader.
    Follower,
    /// A daemon older than leader election, or a role this SDK does not know.
    Unspecified,
}

impl From<v1::ReplicaRole> for ReplicaRole {
    fn from(role: v1::ReplicaRole) -> Self {
        match role {
            v1::ReplicaRole::Standalone => ReplicaRole::Standalone,
            v1::ReplicaRole::Leader => ReplicaRole::Leader,
            v1::ReplicaRole::Follower => ReplicaRole::Follower,
            v1::ReplicaRole::Unspecified => ReplicaRole::Unspecified,
        }
    }
}

/// One daemon's view of its replica set (`Admin.GetReplica`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replica {
    /// The daemon's role.
    pub role: ReplicaRole,
    /// This replica's identity (the Lease's holderIdentity while it leads).
    pub identity: String,
    /// Where this replica serves gRPC, as it advertises it to clients.
    pub address: String,
    /// The leader as last observed ("" when none is known).
    pub leader: String,
    /// The leader's address as last observed ("" when none is known).
    pub leader_address: String,
    /// The Lease, as `namespace/name`.
    pub lease: String,
    /// The cluster that holds the Lease.
    pub cluster: String,
    /// The Lease's leaseTransitions as last observed; while leading, this replica's term.
    pub lease_transitions: i64,
    /// While leading: when this term began.
    pub leading_since: Option<SystemTime>,
    /// While leading: the epoch of this term's tokens (at least the wall clock in Unix ns when
    /// the term began, and above every earlier term's); every token the leader hands out is
    /// greater.
    pub token_epoch: u64,
}

impl Replica {
    /// Whether the replica serves Queues and Work (it leads, or leader election is off).
    pub fn is_leader(&self) -> bool {
        matches!(self.role, ReplicaRole::Leader | ReplicaRole::Standalone)
    }
}

impl From<ReplicaInfo> for Replica {
    fn from(info: ReplicaInfo) -> Self {
        let role = v1::ReplicaRole::try_from(info.role)
            .map(ReplicaRole::from)
            .unwrap_or(ReplicaRole::Unspecified);
        let leading_since = u64::try_from(info.leading_since_unix_ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        Replica {
            role,
            identity: info.identity,
            address: info.address,
            leader: info.leader,
            leader_address: info.leader_address,
            lease: info.lease,
            cluster: info.cluster,
            lease_transitions: info.lease_transitions,
            leading_since,
            token_epoch: info.token_epoch,
        }
    }
}

/// The Admin service.
#[derive(Clone, Debug)]
pub struct Admin {
    client: Client,
}

impl Client {
    /// The Admin API.
    pub fn admin(&self) -> Admin {
        Admin {
            client: self.clone(),
        }
    }
}

impl Admin {
    /// The clusters of the daemon's config, with their last errors.
    pub async fn clusters(&self) -> Result<Vec<ClusterInfo>> {
        let mut rpc = self.client.admin_raw();
        let resp = self
            .client
            .unary("ListClusters", None, ListClustersRequest {}, |r| {
                rpc.list_clusters(r)
            })
            .await?;
        Ok(resp.clusters)
    }

    /// Every informer the daemon runs, with its state.
    pub async fn informers(&self) -> Result<Vec<InformerInfo>> {
        let mut rpc = self.client.admin_raw();
        let resp = self
            .client
            .unary("ListInformers", None, ListInformersRequest {}, |r| {
                rpc.list_informers(r)
            })
            .await?;
        Ok(resp.informers)
    }

    /// The daemon's role in its replica set: [`ReplicaRole::Standalone`] without leader
    /// election, else leader or follower, with the leader it knows and the Lease.
    ///
    /// ```no_run
    /// # async fn f(client: informerd::Client) -> informerd::Result<()> {
    /// let replica = client.admin().get_replica().await?;
    /// if !replica.is_leader() {
    ///     println!("{} follows {} at {}", replica.identity, replica.leader, replica.leader_address);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get_replica(&self) -> Result<Replica> {
        let mut rpc = self.client.admin_raw();
        let info = self
            .client
            .unary("GetReplica", None, GetReplicaRequest {}, |r| {
                rpc.get_replica(r)
            })
            .await?;
        Ok(Replica::from(info))
    }

    /// Every queue, with its state and the Work streams on it.
    pub async fn queues(&self) -> Result<Vec<QueueDetails>> {
        let mut rpc = self.client.admin_raw();
        let resp = self
            .client
            .unary("ListQueues", None, ListQueuesRequest {}, |r| {
                rpc.list_queues(r)
            })
            .await?;
        Ok(resp.queues)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_info_becomes_typed() {
        let r = Replica::from(ReplicaInfo {
            role: v1::ReplicaRole::Leader as i32,
            identity: "a".into(),
            leading_since_unix_ms: 1_500,
            lease_transitions: 2,
            token_epoch: 3 << 40,
            ..Default::default()
        });
        assert_eq!(r.role, ReplicaRole::Leader);
        assert!(r.is_leader());
        assert_eq!(
            r.leading_since,
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_500))
        );
        let r = Replica::from(ReplicaInfo {
            role: 99,
            ..Default::default()
        });
        assert_eq!((r.role, r.leading_since), (ReplicaRole::Unspecified, None));
        assert!(!r.is_leader());
        let r = Replica::from(ReplicaInfo {
            role: v1::ReplicaRole::Follower as i32,
            ..Default::default()
        });
        assert!(!r.is_leader());
    }
}
