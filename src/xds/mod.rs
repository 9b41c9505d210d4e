//! xDS: IR → Envoy resources → versioned snapshots → ADS over gRPC.

pub mod delta;
pub mod encoder;
pub mod grpc;
pub mod server;
pub mod snapshot;
pub mod tls;
pub mod translate;
pub mod wire;

pub use encoder::{Changes, Encoder};
pub use snapshot::{ResourceMap, Snapshot, XdsType};
pub use translate::{EnvoySettings, Resources, translate, translate_keeping};
