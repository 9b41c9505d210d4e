//! Serving: snapshots to Envoys over ADS — the gRPC service ([`server`], [`grpc`]), a
//! stream's core (`stream`) under state of the world (`sotw`) and delta ([`delta`]),
//! the request parser (`request`), the response encoder ([`wire`]) and the
//! connections the server accepts (`listen`).

pub mod delta;
pub mod grpc;
mod listen;
pub(crate) mod request;
pub mod server;
pub(crate) mod sotw;
pub(crate) mod stream;
pub mod wire;
