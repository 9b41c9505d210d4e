//! Isobar: a Contour-compatible ingress control plane for Envoy.
//!
//! The host: CLI, configuration, providers, pipeline runner, xDS server, bootstrap and
//! translate. Plugins live in `plugins/`; the pipeline shape is in `ARCHITECTURE.md`.

pub mod admission;
pub mod allocator;
pub mod bootstrap;
pub mod cli;
pub mod config;
pub mod crds;
pub mod debug;
pub mod http;
pub mod leader;
pub mod links;
pub mod metrics;
pub mod output;
pub mod pipeline;
pub mod provider;
pub mod runner;
pub mod serve;
pub mod status;
pub mod translate;
pub mod xds;
