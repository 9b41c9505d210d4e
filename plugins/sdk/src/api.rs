//! The Kubernetes types Isobar reads, for plugins that need them by name. Contour's
//! (`projectcontour.io`) are in the `isobar-contour` crate.

pub use k8s_openapi::api::core::v1::{Secret, Service};
pub use k8s_openapi::api::discovery::v1::EndpointSlice;
pub use k8s_openapi::api::networking::v1::Ingress;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
