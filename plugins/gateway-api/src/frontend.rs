//! A Gateway's `spec.tls.frontend`: the client certificates its HTTPS listeners ask for
//! (mutual TLS), by default or per port, with CA bundles from ConfigMaps (`ca.crt`).

use gateway_api::apis::experimental::gateways::{
    GatewayTlsFrontend, GatewayTlsFrontendDefaultValidationMode,
    GatewayTlsFrontendPerPortTlsValidationMode,
};
use isobar_sdk::ir::{ClientValidation, PemBundle};
use isobar_sdk::{BuildContext, ObjectKey};

use crate::grants::Grants;
use crate::kinds::{CA_KEY, ConfigMap};

/// A CA certificate reference, whichever generated type spelled it.
struct CaRef<'a> {
    group: &'a str,
    kind: &'a str,
    name: &'a str,
    namespace: Option<&'a str>,
}

/// What validation the frontend settings ask of a listener's clients.
struct Asked<'a> {
    refs: Vec<CaRef<'a>>,
    /// `AllowInsecureFallback`: a client without a valid certificate is let in.
    insecure: bool,
}

macro_rules! ca_refs {
    ($refs:expr) => {
        $refs
            .iter()
            .map(|r| CaRef {
                group: &r.group,
                kind: &r.kind,
                name: &r.name,
                namespace: r.namespace.as_deref(),
            })
            .collect()
    };
}

/// What the frontend settings ask for on `port`: its `perPort` entry, else the default.
fn asked(frontend: &GatewayTlsFrontend, port: i32) -> Option<Asked<'_>> {
    let per_port = frontend.per_port.iter().flatten().find(|p| p.port == port);
    match per_port {
        Some(p) => p.tls.validation.as_ref().map(|v| Asked {
            refs: ca_refs!(v.ca_certificate_refs),
            insecure: v.mode
                == Some(GatewayTlsFrontendPerPortTlsValidationMode::AllowInsecureFallback),
        }),
        None => frontend.default.validation.as_ref().map(|v| Asked {
            refs: ca_refs!(v.ca_certificate_refs),
            insecure: v.mode
                == Some(GatewayTlsFrontendDefaultValidationMode::AllowInsecureFallback),
        }),
    }
}

/// Whether the frontend settings let clients without a valid certificate in on any port
/// (the Gateway then says `InsecureFrontendValidationMode`).
pub fn insecure(frontend: &GatewayTlsFrontend) -> bool {
    let default = frontend.default.validation.as_ref().is_some_and(|v| {
        v.mode == Some(GatewayTlsFrontendDefaultValidationMode::AllowInsecureFallback)
    });
    let per_port = frontend.per_port.iter().flatten().any(|p| {
        p.tls.validation.as_ref().is_some_and(|v| {
            v.mode == Some(GatewayTlsFrontendPerPortTlsValidationMode::AllowInsecureFallback)
        })
    });
    default || per_port
}

/// The client validation of an HTTPS listener of `gateway` on `port`: none when nothing
/// is asked; the CA bundle of every ConfigMap named (in the Gateway's namespace, or
/// another under a ReferenceGrant); or why a reference does not resolve (reason,
/// message), which leaves the listener unserved rather than open.
pub fn validation(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    gateway: &ObjectKey,
    frontend: Option<&GatewayTlsFrontend>,
    port: i32,
) -> Result<Option<Box<ClientValidation>>, (&'static str, String)> {
    let Some(asked) = frontend.and_then(|f| asked(f, port)) else {
        return Ok(None);
    };
    let mut pem = String::new();
    let mut fingerprints = String::new();
    for r in &asked.refs {
        if !r.group.is_empty() || r.kind != "ConfigMap" {
            return Err((
                "InvalidCACertificateKind",
                format!(
                    "caCertificateRef {} of group {:?} is not a ConfigMap",
                    r.kind, r.group
                ),
            ));
        }
        let namespace = r.namespace.unwrap_or(&gateway.namespace);
        if namespace != gateway.namespace
            && !grants.permits(
                &gateway.namespace,
                gateway.kind,
                namespace,
                "",
                "ConfigMap",
                r.name,
            )
        {
            return Err((
                "RefNotPermitted",
                format!(
                    "no ReferenceGrant in {namespace} lets Gateways of {} use ConfigMap {}",
                    gateway.namespace, r.name
                ),
            ));
        }
        let found = ctx
            .store()
            .get::<ConfigMap>(namespace, r.name)
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(CA_KEY));
        let bundle = match found {
            None => Err(format!("no {CA_KEY} in it (or no such ConfigMap)")),
            Some(text) => isobar_sdk::secret::ca_bundle_of(CA_KEY, text),
        }
        .map_err(|e| {
            (
                "InvalidCACertificateRef",
                format!("ConfigMap {namespace}/{}: {e}", r.name),
            )
        })?;
        pem.push_str(&bundle.pem);
        fingerprints.push_str(&bundle.fingerprint);
    }
    if pem.is_empty() {
        return Err((
            "InvalidCACertificateRef",
            "frontend validation names no CA certificate".to_string(),
        ));
    }
    Ok(Some(Box::new(ClientValidation {
        ca: Some(PemBundle {
            pem,
            fingerprint: isobar_sdk::secret::fingerprint(fingerprints.as_bytes()),
        }),
        crl: None,
        crl_only_verify_leaf: false,
        skip_verification: asked.insecure,
        optional: asked.insecure,
        forward: None,
    })))
}
