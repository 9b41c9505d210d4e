//! Isobar's integration tests: one test binary, one module per area.

mod apiserver;
mod cli;
mod e2e;
mod golden;
mod kubernetes;
mod pipeline;
mod routing;
mod support;
mod tls;
mod xds;
