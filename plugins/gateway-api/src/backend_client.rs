//! A Gateway's `spec.tls.backend.clientCertificateRef`: the certificate Envoy presents
//! to backends it speaks TLS to (a BackendTLSPolicy's) for the Gateway's routes. It
//! resolves to a Secret of the Gateway's namespace, or another's under a ReferenceGrant;
//! the Gateway's `ResolvedRefs` says whether it did.

use isobar_sdk::condition::Condition;
use isobar_sdk::{BuildContext, Ir, ObjectKey, StatusReport};

use crate::grants::Grants;
use crate::kinds::Gateway;

/// The SDS name of the Gateway's backend client certificate (added to the IR), `None`
/// without one; with a reference, the Gateway's `ResolvedRefs` says whether it resolved.
pub fn certificate(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    key: &ObjectKey,
    gateway: &Gateway,
    ir: &mut Ir,
    status: &mut StatusReport,
) -> Option<String> {
    let reference = gateway
        .spec
        .tls
        .as_ref()
        .and_then(|t| t.backend.as_ref())
        .and_then(|b| b.client_certificate_ref.as_ref());
    let resolved = reference.map(|r| {
        let group = r.group.as_deref().unwrap_or("");
        let kind = r.kind.as_deref().unwrap_or("Secret");
        if !group.is_empty() || kind != "Secret" {
            return Err((
                "InvalidClientCertificateRef",
                format!("clientCertificateRef: {kind} of group {group:?} is not a Secret"),
            ));
        }
        let namespace = r.namespace.as_deref().unwrap_or(&key.namespace);
        if namespace != key.namespace
            && !grants.permits(&key.namespace, key.kind, namespace, "", "Secret", &r.name)
        {
            return Err((
                "RefNotPermitted",
                format!(
                    "no ReferenceGrant in {namespace} lets Gateways of {} use Secret {}",
                    key.namespace, r.name
                ),
            ));
        }
        ctx.certificate(namespace, &r.name)
            .map_err(|(_, message)| ("InvalidClientCertificateRef", message))
    });
    let gw = status.gateway(key);
    match resolved {
        None => None,
        Some(Ok((sds, secret))) => {
            gw.set(Condition::new("ResolvedRefs", true, "ResolvedRefs", ""));
            ir.add_secret(&sds, secret);
            Some(sds)
        }
        Some(Err((reason, message))) => {
            gw.set(Condition::new("ResolvedRefs", false, reason, message));
            None
        }
    }
}
