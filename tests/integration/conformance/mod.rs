//! Gateway API conformance (v1.6.1), as Isobar's own tests: one test per test of the
//! suite's GATEWAY-HTTP, -TLS, -GRPC, -TCP and -UDP profiles, named after it, with the
//! suite's objects, requests and expectations, through a real Envoy, and the status it
//! reads from the Kubernetes API. `docs/gateway-api.md` maps each suite test to its test
//! here.

mod backend_tls;
pub(crate) mod certs;
pub(crate) mod client;
mod docs;
pub(crate) mod echo;
mod gateway;
pub(crate) mod grpc;
mod grpc_route;
mod http_route;
mod http_route_filters;
mod http_route_matching;
mod http_route_refs;
mod listener_set;
pub(crate) mod suite;
mod tcp_route;
mod tls_route;
mod udp_route;
mod ws;
