//! The `ingress-class` filter: only Ingresses and HTTPProxies of this controller's class
//! take part, as Contour decides it.
//!
//! An object's class is the `projectcontour.io/ingress.class` annotation, else the
//! `kubernetes.io/ingress.class` annotation, else `spec.ingressClassName`. With no class
//! names configured, objects of class `contour` and objects with no class at all are
//! admitted; with names configured (`--ingress-class-name`, comma-separated), exactly
//! the objects whose class is one of them. Objects of another class are not this
//! controller's: they are skipped without a condition.

use serde::{Deserialize, Serialize};

use isobar_contour::api::HTTPProxy;
use isobar_sdk::api::Ingress;
use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, parse_config};
use isobar_sdk::{Filter, Object, StatusReport};

pub const NAME: &str = "ingress-class";

/// Contour's class when none is configured.
pub const DEFAULT_CLASS: &str = "contour";

/// The `plugins.ingress-class` section of `contour.yaml`.
#[derive(
    Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema,
)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct IngressClassConfig {
    /// Class names this controller serves (`--ingress-class-name`); empty: Contour's default.
    #[serde(default)]
    pub names: Vec<String>,
}

#[derive(Debug)]
pub struct IngressClassFilter {
    names: Vec<String>,
}

impl IngressClassFilter {
    pub fn new(config: IngressClassConfig) -> Self {
        // `--ingress-class-name a,b` arrives as one string.
        let names = isobar_sdk::plugin::comma_separated(&config.names);
        IngressClassFilter { names }
    }

    fn matches(&self, class: Option<&str>) -> bool {
        match class {
            None => self.names.is_empty(),
            Some(class) if self.names.is_empty() => class == DEFAULT_CLASS,
            Some(class) => self.names.iter().any(|n| n == class),
        }
    }
}

fn build(config: &serde_json::Value) -> Result<Box<dyn Filter>, ConfigError> {
    let config: IngressClassConfig = parse_config(config)?;
    Ok(Box::new(IngressClassFilter::new(config)))
}

isobar_sdk::inventory::submit! {
    PluginRegistration {
        name: NAME,
        summary: "Admits only Ingresses and HTTPProxies of the configured ingress class",
        factory: Factory::Filter(build),
        settings: Some(isobar_sdk::plugin::Settings::of::<IngressClassConfig>()),
    }
}

impl Filter for IngressClassFilter {
    fn admit(&self, object: &Object, _status: &mut StatusReport) -> bool {
        let annotations = object.metadata().annotations.as_ref();
        let annotation = |name: &str| annotations.and_then(|a| a.get(name)).map(String::as_str);
        let spec = if let Some(i) = object.get::<Ingress>() {
            let spec = i.spec.as_ref();
            spec.and_then(|s| s.ingress_class_name.as_deref())
        } else if let Some(p) = object.get::<HTTPProxy>() {
            p.spec.ingress_class_name.as_deref()
        } else {
            return true;
        };
        let class = annotation("projectcontour.io/ingress.class")
            .or_else(|| annotation("kubernetes.io/ingress.class"))
            .or(spec);
        self.matches(class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(names: &[&str]) -> IngressClassFilter {
        IngressClassFilter::new(IngressClassConfig {
            names: names.iter().map(|s| s.to_string()).collect(),
        })
    }

    #[test]
    fn contours_defaults() {
        let f = filter(&[]);
        assert!(f.matches(None));
        assert!(f.matches(Some("contour")));
        assert!(!f.matches(Some("nginx")));
        let f = filter(&["internal,external"]);
        assert!(!f.matches(None));
        assert!(!f.matches(Some("contour")));
        assert!(f.matches(Some("external")));
    }
}
