//! The `root-namespaces` filter: root HTTPProxies (those with `spec.virtualhost`) are
//! only accepted in the listed namespaces (`--root-namespaces`, comma-separated); an
//! empty list accepts every namespace. A root elsewhere is invalid with Contour's
//! `RootNamespaceError` / `RootProxyNotAllowedInNamespace`. Non-root proxies, which a
//! root includes, may live in any namespace.

use serde::{Deserialize, Serialize};

use isobar_contour::api::HTTPProxy;
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, parse_config};
use isobar_sdk::{Filter, Object, StatusReport};

pub const NAME: &str = "root-namespaces";

/// The `plugins.root-namespaces` section of `contour.yaml`.
#[derive(
    Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema,
)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RootNamespacesConfig {
    /// Namespaces where root HTTPProxies may be defined; empty: all.
    #[serde(default)]
    pub namespaces: Vec<String>,
}

#[derive(Debug)]
pub struct RootNamespacesFilter {
    namespaces: Vec<String>,
}

fn build(config: &serde_json::Value) -> Result<Box<dyn Filter>, ConfigError> {
    let config: RootNamespacesConfig = parse_config(config)?;
    let namespaces = isobar_sdk::plugin::comma_separated(&config.namespaces);
    Ok(Box::new(RootNamespacesFilter { namespaces }))
}

isobar_sdk::inventory::submit! {
    PluginRegistration {
        name: NAME,
        summary: "Accepts root HTTPProxies only in the configured namespaces",
        factory: Factory::Filter(build),
        settings: Some(isobar_sdk::plugin::Settings::of::<RootNamespacesConfig>()),
    }
}

impl Filter for RootNamespacesFilter {
    fn admit(&self, object: &Object, status: &mut StatusReport) -> bool {
        let Some(proxy) = object.get::<HTTPProxy>() else {
            return true;
        };
        if proxy.spec.virtualhost.is_none() || self.namespaces.is_empty() {
            return true;
        }
        let key = object.key();
        if self.namespaces.contains(&key.namespace) {
            return true;
        }
        status.error(
            &key,
            ConditionType::RootNamespaceError,
            Reason::RootProxyNotAllowedInNamespace,
            "root HTTPProxy cannot be defined in this namespace",
        );
        false
    }
}
