//! `client.admin()`: what the daemon runs — its clusters, informers, and queues with the workers
//! on each.
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
use informerd_api::v1::{
    ClusterInfo, InformerInfo, ListClustersRequest, ListInformersRequest, ListQueuesRequest,
    QueueDetails,
};

use crate::client::Client;
use crate::error::Result;

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
