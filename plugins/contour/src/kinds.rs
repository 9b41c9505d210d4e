//! Contour's kinds: their place in the table of kinds, their types and status shapes.

use isobar_sdk::api::ObjectMeta;
use isobar_sdk::kind::decode_object;
use isobar_sdk::status::NoStatus;
use isobar_sdk::{Kind, KindId, KindInfo, Resource};

use crate::api::{ExtensionService, HTTPProxy, TLSCertificateDelegation};
use crate::status::{Conditions, Contour};

/// Contour's API group.
pub const GROUP: &str = "projectcontour.io";

// Listed after Kubernetes' own kinds (ranks 0–3), before every kind of another plugin.
const HTTP_PROXY_ID: KindId = KindId::ranked(4, GROUP, "HTTPProxy");
const TLS_CERTIFICATE_DELEGATION_ID: KindId = KindId::ranked(5, GROUP, "TLSCertificateDelegation");
const EXTENSION_SERVICE_ID: KindId = KindId::ranked(6, GROUP, "ExtensionService");

pub const HTTP_PROXY: Kind = Kind::new(&HTTP_PROXY_ID);
pub const TLS_CERTIFICATE_DELEGATION: Kind = Kind::new(&TLS_CERTIFICATE_DELEGATION_ID);
pub const EXTENSION_SERVICE: Kind = Kind::new(&EXTENSION_SERVICE_ID);

impl Resource for HTTPProxy {
    const KIND: Kind = HTTP_PROXY;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

impl Resource for TLSCertificateDelegation {
    const KIND: Kind = TLS_CERTIFICATE_DELEGATION;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

impl Resource for ExtensionService {
    const KIND: Kind = EXTENSION_SERVICE;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

inventory::submit! {
    KindInfo {
        kind: HTTP_PROXY,
        versions: &["v1"],
        plural: "httpproxies",
        namespaced: true,
        decode: decode_object::<HTTPProxy>,
        status: &Contour,
    }
}

inventory::submit! {
    KindInfo {
        kind: TLS_CERTIFICATE_DELEGATION,
        versions: &["v1"],
        plural: "tlscertificatedelegations",
        namespaced: true,
        decode: decode_object::<TLSCertificateDelegation>,
        status: &NoStatus,
    }
}

inventory::submit! {
    KindInfo {
        kind: EXTENSION_SERVICE,
        versions: &["v1alpha1"],
        plural: "extensionservices",
        namespaced: true,
        decode: decode_object::<ExtensionService>,
        status: &Conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Contour's kinds are found by their manifests' type and listed after Kubernetes'
    /// own, before a kind of another plugin.
    #[test]
    fn contour_kinds_are_found_by_type_and_ordered() {
        assert_eq!(
            Kind::from_type("projectcontour.io/v1", "HTTPProxy"),
            Some(HTTP_PROXY)
        );
        assert_eq!(Kind::from_type("projectcontour.io/v2", "HTTPProxy"), None);
        assert_eq!(
            Kind::from_type("projectcontour.io/v1alpha1", "ExtensionService"),
            Some(EXTENSION_SERVICE)
        );
        assert!(Kind::Ingress < HTTP_PROXY);
        assert!(HTTP_PROXY < TLS_CERTIFICATE_DELEGATION);
        const OTHER: KindId = KindId::new("example.com", "Thing");
        assert!(EXTENSION_SERVICE < Kind::new(&OTHER));
        assert_eq!(
            HTTP_PROXY.info().map(KindInfo::api_version),
            Some("projectcontour.io/v1".to_string())
        );
    }
}
