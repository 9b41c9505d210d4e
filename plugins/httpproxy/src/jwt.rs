//! JWT verification of a root HTTPProxy's routes (`virtualhost.jwtProviders`, route
//! `jwtVerificationPolicy`), with Contour's rules and messages: providers only on a
//! vhost that terminates TLS (not with the fallback certificate), unique names, one
//! default at most, exactly one of `remoteJWKS` and `localJWKS`, a JWKS URI of http or
//! https. A remote provider's keys are fetched through a DNS cluster of the URI's host
//! (`dnsname/<scheme>/<host>`, Contour's name); a local provider's are read from a key
//! of an `Opaque` Secret in the proxy's namespace, checked to be a JWKS, and sent inline.
//!
//! Where Contour still serves a route requiring a provider its vhost does not define
//! (and Envoy refuses its routes), such a route makes the proxy invalid here.

use std::collections::BTreeSet;
use std::time::Duration;

use isobar_contour::api::{HTTPProxy, JwtProvider, JwtVerificationPolicy, RemoteJwks};
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::ir::{self, Cluster, ClusterOptions};
use isobar_sdk::{BuildContext, Ir, ObjectKey, StatusReport};

use crate::tls::{Plan, RouteMode};

/// The providers of a root's vhost, as its routes (and those of the proxies it
/// includes) name them.
#[derive(Debug, Default)]
pub(crate) struct Providers {
    pub names: BTreeSet<String>,
    /// The provider of routes without a `jwtVerificationPolicy`.
    pub default: Option<String>,
}

impl Providers {
    /// The provider a route requires, or why its policy cannot be used.
    pub(crate) fn route(
        providers: Option<&Providers>,
        policy: Option<&JwtVerificationPolicy>,
    ) -> Result<Option<String>, (Reason, String)> {
        let require = policy
            .and_then(|p| p.require.as_deref())
            .filter(|r| !r.is_empty());
        let disabled = policy.is_some_and(|p| p.disabled);
        if require.is_some() && disabled {
            return Err((
                Reason::InvalidJWTVerificationPolicy,
                "route's JWT verification policy cannot specify both require and disabled"
                    .to_string(),
            ));
        }
        match require {
            Some(name) if providers.is_some_and(|p| p.names.contains(name)) => {
                Ok(Some(name.to_string()))
            }
            Some(name) => Err((
                Reason::JWTProviderNotDefined,
                format!("Route references an undefined JWT provider {name:?}"),
            )),
            None if disabled => Ok(None),
            None => Ok(providers.and_then(|p| p.default.clone())),
        }
    }
}

fn jwt_error(status: &mut StatusReport, key: &ObjectKey, reason: Reason, message: String) {
    status.error(key, ConditionType::JWTVerificationError, reason, message);
}

/// Checks root `proxy`'s JWT providers, puts them on its secure vhost (in `plan`) and
/// their JWKS clusters in `ir`. `Ok(None)`: the vhost has none. `Err`: the proxy must
/// not be served (the reason is in `status`).
pub(crate) fn vhost(
    ctx: &BuildContext<'_>,
    ir: &mut Ir,
    status: &mut StatusReport,
    key: &ObjectKey,
    proxy: &HTTPProxy,
    plan: &mut Plan,
) -> Result<Option<Providers>, ()> {
    let Some(vhost) = &proxy.spec.virtualhost else {
        return Ok(None);
    };
    if vhost.jwt_providers.is_empty() {
        return Ok(None);
    }
    let tls = vhost.tls.as_ref();
    if tls.is_none_or(|t| t.secret_name.is_empty()) {
        jwt_error(
            status,
            key,
            Reason::JWTVerificationNotPermitted,
            "Spec.VirtualHost.JWTProviders can only be defined for root HTTPProxies that terminate TLS".to_string(),
        );
        return Err(());
    }
    if tls.is_some_and(|t| t.enable_fallback_certificate) {
        status.error(
            key,
            ConditionType::TLSError,
            Reason::TLSIncompatibleFeatures,
            "Spec.Virtualhost.TLS fallback & JWT providers are incompatible",
        );
        return Err(());
    }
    let mut providers = Providers::default();
    let mut built = Vec::with_capacity(vhost.jwt_providers.len());
    let mut clusters = Vec::new();
    for p in &vhost.jwt_providers {
        if p.name.is_empty() {
            jwt_error(
                status,
                key,
                Reason::DuplicateProviderName,
                "Spec.VirtualHost.JWTProviders is invalid: a provider needs a name".to_string(),
            );
            return Err(());
        }
        if !providers.names.insert(p.name.clone()) {
            jwt_error(
                status,
                key,
                Reason::DuplicateProviderName,
                format!(
                    "Spec.VirtualHost.JWTProviders is invalid: duplicate name {}",
                    p.name
                ),
            );
            return Err(());
        }
        if p.default {
            if providers.default.is_some() {
                jwt_error(
                    status,
                    key,
                    Reason::MultipleDefaultProvidersSpecified,
                    "Spec.VirtualHost.JWTProviders is invalid: at most one provider can be set as the default".to_string(),
                );
                return Err(());
            }
            providers.default = Some(p.name.clone());
        }
        let (provider, cluster) = provider(ctx, key, p).map_err(|(reason, message)| {
            jwt_error(status, key, reason, message);
        })?;
        built.push(provider);
        clusters.extend(cluster);
    }
    // Only a vhost that terminates TLS here verifies tokens (a TCP proxy has no routes).
    let terminates = plan.mode == RouteMode::Secure;
    if let Some(secure) = plan.secure.as_mut().filter(|_| terminates) {
        secure
            .http
            .extensions
            .get_or_insert_with(Default::default)
            .jwt_providers = built;
        for cluster in clusters {
            ir.add_cluster(cluster);
        }
    }
    Ok(Some(providers))
}

/// One provider and the cluster its keys are fetched through (none for keys from a
/// Secret), with Contour's checks in Contour's order.
fn provider(
    ctx: &BuildContext<'_>,
    key: &ObjectKey,
    p: &JwtProvider,
) -> Result<(ir::JwtProvider, Option<Cluster>), (Reason, String)> {
    let local = p.local_jwks.as_ref().filter(|l| !l.secret_name.is_empty());
    match (p.remote_jwks.uri.is_empty(), local) {
        (false, Some(_)) => {
            return Err((
                Reason::JWKSSourceConflict,
                format!(
                    "Spec.VirtualHost.JWTProviders for provider {:?} is invalid: at most one of remoteJWKS or localJWKS may be set",
                    p.name
                ),
            ));
        }
        (true, None) => {
            return Err((
                Reason::JWKSSourceMissing,
                format!(
                    "Spec.VirtualHost.JWTProviders for provider {:?} is invalid: exactly one of remoteJWKS or localJWKS must be set",
                    p.name
                ),
            ));
        }
        (true, Some(local)) => {
            let jwks = ctx
                .jwks(&key.namespace, &local.secret_name, &local.key)
                .map_err(|e| {
                    (
                        Reason::LocalJWKSInvalid,
                        format!(
                            "Spec.VirtualHost.JWTProviders.LocalJWKS for provider {:?} is invalid: {e}",
                            p.name
                        ),
                    )
                })?;
            return Ok((provider_with(p, ir::Jwks::Local { jwks }), None));
        }
        (false, None) => {}
    }
    let jwks = &p.remote_jwks;
    let uri = url::Url::parse(&jwks.uri).map_err(|e| {
        (
            Reason::RemoteJWKSURIInvalid,
            format!("Spec.VirtualHost.JWTProviders.RemoteJWKS.URI is invalid: {e}"),
        )
    })?;
    let scheme = uri.scheme().to_string();
    if scheme != "http" && scheme != "https" {
        return Err((
            Reason::RemoteJWKSSchemeInvalid,
            format!(
                "Spec.VirtualHost.JWTProviders.RemoteJWKS.URI has invalid scheme {scheme:?}, must be http or https"
            ),
        ));
    }
    let host = uri
        .host_str()
        .map(|h| {
            h.trim_start_matches('[')
                .trim_end_matches(']')
                .to_ascii_lowercase()
        })
        .filter(|h| !h.is_empty())
        .ok_or_else(|| {
            (
                Reason::RemoteJWKSURIInvalid,
                "Spec.VirtualHost.JWTProviders.RemoteJWKS.URI is invalid: no host".to_string(),
            )
        })?;
    let mut options = ClusterOptions {
        external_name: Some(host.clone()),
        ..Default::default()
    };
    if let Some(v) = &jwks.validation {
        options.upstream_validation = Some(Box::new(remote_validation(ctx, key, v, &scheme)?));
    }
    let (timeout, cache_duration) = fetch_times(jwks)?;
    options.dns_lookup_family = dns_lookup_family(jwks.dns_lookup_family.as_deref())?;
    if scheme == "https" {
        options.protocol = Some(ir::UpstreamProtocol::Tls);
        options.sni = Some(host.clone());
    }
    let port = uri.port_or_known_default().unwrap_or(80);
    let name = format!("dnsname/{scheme}/{host}");
    let cluster = Cluster {
        name: name.clone(),
        namespace: String::new(),
        service: String::new(),
        port: i32::from(port),
        port_name: String::new(),
        eds_name: String::new(),
        alt_stat_name: String::new(),
        options,
        localities: Vec::new(),
    };
    let keys = ir::Jwks::Remote {
        uri: jwks.uri.clone(),
        cluster: name,
        timeout,
        cache_duration,
    };
    Ok((provider_with(p, keys), Some(cluster)))
}

/// A remote JWKS's fetch timeout (1 s unless set) and how long its keys are cached
/// (Envoy's default unless set).
fn fetch_times(jwks: &RemoteJwks) -> Result<(Duration, Option<Duration>), (Reason, String)> {
    let timeout = match jwks.timeout.as_deref().filter(|t| !t.is_empty()) {
        None => Duration::from_secs(1),
        Some(text) => duration(text).map_err(|e| {
            (
                Reason::RemoteJWKSTimeoutInvalid,
                format!("Spec.VirtualHost.JWTProviders.RemoteJWKS.Timeout is invalid: {e}"),
            )
        })?,
    };
    let cache_duration = match jwks.cache_duration.as_deref().filter(|t| !t.is_empty()) {
        None => None,
        Some(text) => Some(duration(text).map_err(|e| {
            (
                Reason::RemoteJWKSCacheDurationInvalid,
                format!("Spec.VirtualHost.JWTProviders.RemoteJWKS.CacheDuration is invalid: {e}"),
            )
        })?),
    };
    Ok((timeout, cache_duration))
}

/// A remote JWKS's `upstreamValidation` checked: what its cluster validates the server
/// with.
fn remote_validation(
    ctx: &BuildContext<'_>,
    key: &ObjectKey,
    v: &isobar_contour::api::UpstreamValidation,
    scheme: &str,
) -> Result<ir::UpstreamValidation, (Reason, String)> {
    if scheme == "http" {
        return Err((
            Reason::RemoteJWKSUpstreamValidationInvalid,
            "Spec.VirtualHost.JWTProviders.RemoteJWKS.UpstreamValidation must not be specified when URI scheme is http.".to_string(),
        ));
    }
    let first_matches = v.subject_names.first().is_none_or(|f| *f == v.subject_name);
    if v.subject_name.is_empty() || !first_matches {
        return Err((
            Reason::RemoteJWKSUpstreamValidationInvalid,
            "Spec.VirtualHost.JWTProviders.RemoteJWKS.UpstreamValidation is invalid: subjectName must be set (and be subjectNames' first entry)".to_string(),
        ));
    }
    let ca = ctx.ca_bundle(&key.namespace, &v.ca_secret).map_err(|(reason, message)| {
        if reason == Reason::DelegationNotPermitted {
            (
                Reason::RemoteJWKSCACertificateNotDelegated,
                format!("Spec.VirtualHost.JWTProviders.RemoteJWKS.UpstreamValidation.CACertificate {message}"),
            )
        } else {
            (
                Reason::RemoteJWKSUpstreamValidationInvalid,
                format!("Spec.VirtualHost.JWTProviders.RemoteJWKS.UpstreamValidation is invalid: {message}"),
            )
        }
    })?;
    let names = if v.subject_names.is_empty() {
        vec![v.subject_name.clone()]
    } else {
        v.subject_names.clone()
    };
    if names
        .iter()
        .any(|n| !isobar_sdk::headers::is_header_value(n) || n.contains(char::is_whitespace))
    {
        return Err((
            Reason::RemoteJWKSUpstreamValidationInvalid,
            "Spec.VirtualHost.JWTProviders.RemoteJWKS.UpstreamValidation is invalid: subject names must be host names".to_string(),
        ));
    }
    Ok(ir::UpstreamValidation {
        ca,
        subject_names: names,
        subject_uris: Vec::new(),
    })
}

/// A remote JWKS's `dnsLookupFamily`.
fn dns_lookup_family(text: Option<&str>) -> Result<Option<ir::DnsLookupFamily>, (Reason, String)> {
    match text {
        None | Some("") => Ok(None),
        Some("auto") => Ok(Some(ir::DnsLookupFamily::Auto)),
        Some("v4") => Ok(Some(ir::DnsLookupFamily::V4)),
        Some("v6") => Ok(Some(ir::DnsLookupFamily::V6)),
        Some("all") => Ok(Some(ir::DnsLookupFamily::All)),
        Some(other) => Err((
            Reason::RemoteJWKSDNSLookupFamilyInvalid,
            format!(
                "Spec.VirtualHost.JWTProviders.RemoteJWKS.DNSLookupFamily has an invalid value {other:?}, must be auto, all, v4 or v6"
            ),
        )),
    }
}

fn provider_with(p: &JwtProvider, keys: ir::Jwks) -> ir::JwtProvider {
    ir::JwtProvider {
        name: p.name.clone(),
        issuer: p.issuer.clone().unwrap_or_default(),
        audiences: p.audiences.clone(),
        keys,
        forward: p.forward_jwt,
    }
}

/// A duration in Go's syntax, not zero or `infinity` (Contour parses these with Go's
/// `time.ParseDuration`).
fn duration(text: &str) -> Result<Duration, String> {
    if matches!(text.trim(), "infinity" | "infinite") {
        return Err(format!("time: invalid duration {text:?}"));
    }
    isobar_sdk::policy::timeout(text)
}
