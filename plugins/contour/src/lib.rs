//! Contour's API, for the plugins that read it: the `projectcontour.io` kinds
//! (HTTPProxy, TLSCertificateDelegation, ExtensionService), their Rust types and status
//! shapes, and Contour's rules for resolving an ExtensionService into an extension
//! cluster. The SDK core (`isobar-sdk`) knows none of them.

pub mod api;
pub mod extension;
mod kinds;
pub mod status;

pub use kinds::{EXTENSION_SERVICE, GROUP, HTTP_PROXY, TLS_CERTIFICATE_DELEGATION};
