//! The built-in plugins: the crates the `isobar` binary links. Each registers itself with
//! `inventory`; naming every crate here keeps the linker from dropping a registration
//! nothing else refers to. A new built-in plugin is a crate under `plugins/`, a line in
//! this crate's `Cargo.toml` and one in [`NAMES`]: no file of the host changes.

/// The built-in plugins' names.
pub const NAMES: &[&str] = &[
    isobar_plugin_conflicts::NAME,
    isobar_plugin_extension_service::NAME,
    isobar_plugin_gateway_api::NAME,
    isobar_plugin_httpproxy::NAME,
    isobar_plugin_ingress::NAME,
    isobar_plugin_ingress_class::NAME,
    isobar_plugin_opa::NAME,
    isobar_plugin_root_namespaces::NAME,
    isobar_plugin_tls_delegation::NAME,
    isobar_plugin_wasm::NAME,
];
