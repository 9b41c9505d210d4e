//! The `tls-delegation` processor: Contour's TLSCertificateDelegation
//! (`projectcontour.io/v1`). A delegation in namespace `ns` lets the namespaces it lists
//! (`*`: all) use the named secrets of `ns`. Without this processor no secret is usable
//! outside its own namespace: an HTTPProxy or Ingress that names one is invalid with
//! `DelegationNotPermitted`, raised where the reference is resolved.
//!
//! Delegations are read on every build, so adding or removing one takes effect live.

use serde::{Deserialize, Serialize};

use isobar_contour::api::TLSCertificateDelegation;
use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, SecretGrants, parse_config};
use isobar_sdk::{BuildContext, Kind, Processor};

pub const NAME: &str = "tls-delegation";

/// The `plugins.tls-delegation` section of `contour.yaml` (no settings yet).
#[derive(
    Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema,
)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TlsDelegationConfig {}

#[derive(Debug)]
pub struct TlsDelegation;

fn build(config: &serde_json::Value) -> Result<Box<dyn Processor>, ConfigError> {
    let _config: TlsDelegationConfig = parse_config(config)?;
    Ok(Box::new(TlsDelegation))
}

isobar_sdk::inventory::submit! {
    PluginRegistration {
        name: NAME,
        summary: "Lets TLSCertificateDelegations share secrets across namespaces",
        factory: Factory::Processor(build),
        settings: Some(isobar_sdk::plugin::Settings::of::<TlsDelegationConfig>()),
    }
}

impl Processor for TlsDelegation {
    fn local(&self) -> bool {
        true
    }

    fn kinds(&self) -> &'static [Kind] {
        &[isobar_contour::TLS_CERTIFICATE_DELEGATION]
    }

    fn grant(&self, ctx: &BuildContext<'_>, grants: &mut SecretGrants) {
        for ((namespace, _), delegation) in ctx.objects.all::<TLSCertificateDelegation>() {
            for d in &delegation.spec.delegations {
                for target in &d.target_namespaces {
                    grants.grant(namespace, &d.secret_name, target);
                }
            }
        }
    }
}
