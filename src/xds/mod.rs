//! xDS: IR → Envoy resources → versioned snapshots → ADS over gRPC.
//!
//! Translation is one module per resource type ([`listener`], [`route`], [`cluster`],
//! [`endpoint`], [`secret`]; [`filter`] for HTTP filters, [`proto`] for the encoding
//! they share): pure functions from IR to protobuf, none importing another's caller.
//! [`encoder`] runs them over a build, keeping each vhost's share so a change
//! re-encodes only what it touches; [`snapshot`] versions the result, and [`server`],
//! [`delta`], [`grpc`] and [`wire`] serve it (with `sotw`, `stream` and `request`).

pub mod cluster;
pub mod delta;
pub mod encoder;
pub mod endpoint;
pub mod extension;
pub mod filter;
pub mod grpc;
pub mod listener;
pub mod proto;
mod request;
pub mod resource;
pub mod route;
pub mod route_rule;
pub mod runtime;
pub mod secret;
pub mod semantic;
pub mod server;
pub mod settings;
pub mod snapshot;
mod sotw;
mod stream;
pub mod validate;
pub mod wire;

pub use encoder::{Encoder, translate, translate_keeping};
#[doc(hidden)]
pub use request::agrees_with_prost;
pub use resource::{Changes, Encoded, Name, Resources, XdsType};
pub use settings::{
    AccessLogSettings, ClusterSettings, Compressor, EnvoySettings, HttpSettings, ListenerSettings,
    RuntimeSettings, TlsSettings, UpstreamTlsSettings,
};
pub use snapshot::{ResourceMap, Snapshot};
pub use stream::Rejection;
