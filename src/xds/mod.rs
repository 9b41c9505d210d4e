//! xDS: IR → Envoy resources → versioned snapshots → ADS over gRPC.

pub mod delta;
pub mod server;
pub mod snapshot;
pub mod tls;
pub mod translate;

pub use snapshot::{ResourceMap, Snapshot, XdsType};
pub use translate::{
    ClustersByService, EnvoySettings, Resources, clusters_by_service, endpoints_of, translate,
};
