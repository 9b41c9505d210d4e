//! Isobar: a Contour-compatible ingress control plane for Envoy.
//!
//! The host, one module per stage of the pipeline (`ARCHITECTURE.md`):
//! [`provider`] fills the object store (Kubernetes API, manifest files); [`runner`] runs
//! the plugin pipeline over it, splices changes, follows links between objects and
//! writes status back; [`xds`] turns the IR into Envoy resources and serves them;
//! [`admission`] answers the validating webhook; [`cli`] holds the commands (`serve`,
//! `bootstrap`, `translate`, …). Plugins live in `plugins/`.

pub mod admission;
pub mod allocator;
pub mod cli;
pub mod config;
pub mod metrics;
pub mod parallel;
pub mod provider;
pub mod runner;
pub mod tls;
pub mod xds;
