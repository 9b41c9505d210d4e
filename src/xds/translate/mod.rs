//! Translation: IR → Envoy messages, one module per resource type ([`listener`],
//! [`route`] and [`route_rule`], [`cluster`], [`endpoint`], [`secret`], [`runtime`]); [`shard`] splits an HTTP listener's routes;
//! [`filter`] and [`extension`] build the HTTP filters and their per-route config. Pure
//! functions from IR to protobuf; the shared encoding is `xds::proto`.

pub mod cluster;
pub mod endpoint;
pub mod extension;
pub mod filter;
pub mod listener;
pub mod route;
pub mod route_rule;
pub mod runtime;
pub mod secret;
pub mod shard;
