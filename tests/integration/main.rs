//! Isobar's integration tests: one test binary, one module per area.

mod admission;
mod apiserver;
mod cli;
mod conformance;
mod contour_config;
mod deploy;
mod e2e;
mod extension;
mod extension_servers;
mod extension_services;
mod fuzz;
mod fuzz_gateway;
mod gatekeeper;
mod gateway_api;
mod golden;
mod incremental;
mod kubernetes;
mod mtls;
mod pipeline;
mod policies;
mod routing;
mod support;
mod tls;
mod wasm;
mod webhook_client;
mod xds;
