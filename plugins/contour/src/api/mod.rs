//! Contour's API types (`projectcontour.io/v1`, ExtensionService's `v1alpha1`), as Isobar
//! reads them.

mod authorization;
mod extension_service;
mod httpproxy;
mod route_policy;

pub use authorization::*;
pub use extension_service::*;
pub use httpproxy::*;
pub use route_policy::*;
