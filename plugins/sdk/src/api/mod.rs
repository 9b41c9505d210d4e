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

/// The Kubernetes types Isobar reads, for plugins that need them by name.
pub use k8s_openapi::api::core::v1::{Secret, Service};
pub use k8s_openapi::api::discovery::v1::EndpointSlice;
pub use k8s_openapi::api::networking::v1::Ingress;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
