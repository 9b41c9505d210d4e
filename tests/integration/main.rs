//! Isobar's integration tests: one test binary, one module per area.

mod pipeline;
mod support;
mod xds;
