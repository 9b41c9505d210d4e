//! Serving: snapshots to Envoys over ADS — the gRPC service ([`server`], [`grpc`]), a
//! stream's core (`stream`) under state of the world (`sotw`) and delta ([`delta`]),
//! the request parser (`request`) and the response encoder ([`wire`]).

pub mod delta;
pub mod grpc;
pub(crate) mod request;
pub mod server;
pub(crate) mod sotw;
pub(crate) mod stream;
pub mod wire;
