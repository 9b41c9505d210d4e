//! xDS: IR → Envoy resources → versioned snapshots → ADS over gRPC, by stage.
//!
//! [`translate`]: one module per resource type ([`listener`], [`route`], [`cluster`],
//! [`endpoint`], [`secret`]; [`filter`] for HTTP filters; [`proto`] for the encoding
//! they share): pure functions from IR to protobuf, none importing another's caller.
//! [`encoder`] runs them over a build, keeping each vhost's share so a change
//! re-encodes only what it touches; [`snapshot`] versions the result; [`validate`] and
//! [`semantic`] check it against Envoy's rules before it is published; [`serve`]
//! ([`server`], [`delta`], [`grpc`], [`wire`], with `sotw`, `stream` and `request`)
//! serves it.

pub mod encoder;
pub mod proto;
pub mod resource;
pub mod semantic;
pub mod serve;
pub mod settings;
pub mod snapshot;
pub mod translate;
pub mod validate;

// Each stage's modules keep their paths under `xds` (`xds::cluster`, `xds::server`, ...).
pub use serve::{delta, grpc, server, wire};
use serve::{request, sotw, stream};
pub use translate::{
    cluster, endpoint, extension, filter, listener, route, route_rule, runtime, secret, shard,
};

pub use encoder::{Encoder, translate, translate_after, translate_keeping};
#[doc(hidden)]
pub use request::agrees_with_prost;
pub use resource::{Changes, Encoded, Name, Resources, XdsType};
pub use settings::{
    AccessLogSettings, ClusterSettings, Compressor, EnvoySettings, HttpSettings, ListenerSettings,
    RuntimeSettings, TlsSettings, UpstreamTlsSettings,
};
pub use snapshot::{ResourceMap, Snapshot};
pub use stream::Rejection;
