//! A root's `spec.virtualhost.tls` and `spec.tcpproxy`: the secure vhost it gets on the
//! HTTPS listener (terminated with a certificate over SDS, or passed through by SNI) and
//! where its TCP traffic goes.

use isobar_contour::api::{HTTPProxy, Tls};
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::host::Host;
use isobar_sdk::ir::{
    ClientValidation, DownstreamTls, ForwardClientCertificate, SecureVirtualHost, ServedSecret,
    TcpProxy, TlsVersion, WeightedCluster,
};
use isobar_sdk::resolve::{PortRef, service_cluster};
use isobar_sdk::{BuildContext, Ir, ObjectKey, StatusReport};

use crate::check_unsupported;

/// Where a root's HTTP routes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RouteMode {
    /// The plain HTTP listener only.
    Plain,
    /// The secure vhost; on plain HTTP each route redirects to HTTPS (301) unless it
    /// sets `permitInsecure`.
    Secure,
    /// The vhost's TLS traffic is TCP-proxied: routes exist only on plain HTTP, as
    /// redirects to HTTPS unless `permitInsecure` (Contour's behaviour).
    RedirectOnly,
}

/// What a valid root adds besides its routes.
pub(crate) struct Plan {
    pub mode: RouteMode,
    pub secure: Option<SecureVirtualHost>,
    pub secret: Option<(String, ServedSecret)>,
    /// The fallback certificate, when the vhost enables it.
    pub fallback: Option<(String, ServedSecret)>,
}

fn tls_error(status: &mut StatusReport, key: &ObjectKey, reason: Reason, message: String) {
    status.error(key, ConditionType::TLSError, reason, message);
}

fn version(
    status: &mut StatusReport,
    key: &ObjectKey,
    field: &str,
    value: &Option<String>,
) -> Result<Option<TlsVersion>, ()> {
    match value.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => TlsVersion::parse(v).map(Some).ok_or_else(|| {
            tls_error(
                status,
                key,
                Reason::TLSConfigNotValid,
                format!("Spec.VirtualHost.TLS.{field} {v:?} is not \"1.2\" or \"1.3\""),
            )
        }),
    }
}

/// Checks the root's TLS and TCP settings; `Err` when they make it invalid (the
/// conditions are in `status`).
pub(crate) fn plan(
    ctx: &BuildContext<'_>,
    ir: &mut Ir,
    status: &mut StatusReport,
    key: &ObjectKey,
    proxy: &HTTPProxy,
    host: &Host,
    reached: &mut std::collections::BTreeSet<ObjectKey>,
) -> Result<Plan, ()> {
    let tls = proxy.spec.virtualhost.as_ref().and_then(|v| v.tls.as_ref());
    let Some(tls) = tls else {
        if proxy.spec.tcpproxy.is_some() {
            status.error(
                key,
                ConditionType::TCPProxyError,
                Reason::TLSMustBeConfigured,
                "Spec.TCPProxy requires that either Spec.TLS.Passthrough or Spec.TLS.SecretName be set",
            );
            return Err(());
        }
        return Ok(Plan {
            mode: RouteMode::Plain,
            secure: None,
            secret: None,
            fallback: None,
        });
    };
    if !check_unsupported(
        status,
        key,
        || "spec.virtualhost.tls".to_string(),
        &tls.unsupported,
        || crate::fields_of(tls),
    ) {
        return Err(());
    }
    if host.fqdn.starts_with("*.") && tls.passthrough {
        // Envoy can match wildcard SNI, but Contour refuses wildcard passthrough too.
        tls_error(
            status,
            key,
            Reason::TLSConfigNotValid,
            "Spec.VirtualHost.TLS.Passthrough cannot be used with a wildcard fqdn".to_string(),
        );
        return Err(());
    }
    let mut secure = SecureVirtualHost::new(&host.fqdn, None);
    let mut secret = None;
    let mut fallback = None;
    if tls.passthrough {
        if !tls.secret_name.is_empty()
            || tls.client_validation.is_some()
            || tls.enable_fallback_certificate
        {
            tls_error(
                status,
                key,
                Reason::TLSIncompatibleFeatures,
                "Spec.VirtualHost.TLS: passthrough cannot be combined with secretName, clientValidation or enableFallbackCertificate".to_string(),
            );
            return Err(());
        }
        if proxy.spec.tcpproxy.is_none() {
            tls_error(
                status,
                key,
                Reason::TLSConfigNotValid,
                "Spec.VirtualHost.TLS.Passthrough requires Spec.TCPProxy".to_string(),
            );
            return Err(());
        }
    } else {
        let downstream = downstream(ctx, status, key, tls, proxy.spec.tcpproxy.is_none())?;
        let (sds, served) =
            ctx.certificate(&key.namespace, &tls.secret_name)
                .map_err(|(reason, message)| {
                    tls_error(
                        status,
                        key,
                        reason,
                        format!("Spec.VirtualHost.TLS {message}"),
                    )
                })?;
        if tls.enable_fallback_certificate {
            fallback = Some(fallback_certificate(ctx, status, key, tls, &downstream)?);
            secure.fallback = true;
        }
        secure.tls = Some(DownstreamTls {
            secret: sds.clone(),
            ..downstream
        });
        secret = Some((sds, served));
    }
    let mode = match &proxy.spec.tcpproxy {
        Some(_) => {
            let mut chain = Vec::new();
            secure.tcp_proxy = Some(tcp_proxy(ctx, ir, status, key, proxy, &mut chain, reached)?);
            RouteMode::RedirectOnly
        }
        None => RouteMode::Secure,
    };
    Ok(Plan {
        mode,
        secure: Some(secure),
        secret,
        fallback,
    })
}

/// Contour's rules for `enableFallbackCertificate`: configured, delegated to the proxy's
/// namespace, valid, and not combined with client certificates.
fn fallback_certificate(
    ctx: &BuildContext<'_>,
    status: &mut StatusReport,
    key: &ObjectKey,
    tls: &Tls,
    downstream: &DownstreamTls,
) -> Result<(String, ServedSecret), ()> {
    if tls.client_validation.is_some() || !downstream.alpn_http {
        tls_error(
            status,
            key,
            Reason::TLSIncompatibleFeatures,
            "Spec.VirtualHost.TLS: enableFallbackCertificate cannot be combined with clientValidation or tcpproxy".to_string(),
        );
        return Err(());
    }
    let Some((namespace, name)) = ctx.fallback_certificate() else {
        tls_error(
            status,
            key,
            Reason::FallbackNotPresent,
            "Spec.Virtualhost.TLS enabled fallback but the fallback Certificate Secret is not configured in the configuration file (tls.fallback-certificate)".to_string(),
        );
        return Err(());
    };
    if !ctx.grants().permits(namespace, name, &key.namespace) {
        tls_error(
            status,
            key,
            Reason::FallbackNotDelegated,
            format!(
                "Spec.VirtualHost.TLS fallback Secret \"{namespace}/{name}\" is not configured for certificate delegation"
            ),
        );
        return Err(());
    }
    ctx.certificate(&key.namespace, &format!("{namespace}/{name}"))
        .map_err(|(reason, message)| {
            tls_error(
                status,
                key,
                reason,
                format!("Spec.VirtualHost.TLS fallback {message}"),
            )
        })
}

/// Versions, ALPN and client validation; the certificate is filled in by the caller.
fn downstream(
    ctx: &BuildContext<'_>,
    status: &mut StatusReport,
    key: &ObjectKey,
    tls: &Tls,
    http: bool,
) -> Result<DownstreamTls, ()> {
    if tls.secret_name.is_empty() {
        tls_error(
            status,
            key,
            Reason::TLSConfigNotValid,
            "Spec.VirtualHost.TLS needs secretName (or passthrough: true)".to_string(),
        );
        return Err(());
    }
    let min_version = version(
        status,
        key,
        "MinimumProtocolVersion",
        &tls.minimum_protocol_version,
    )?;
    let max_version = version(
        status,
        key,
        "MaximumProtocolVersion",
        &tls.maximum_protocol_version,
    )?;
    if let (Some(min), Some(max)) = (min_version, max_version)
        && min > max
    {
        tls_error(
            status,
            key,
            Reason::TLSConfigNotValid,
            "Spec.VirtualHost.TLS: minimumProtocolVersion is above maximumProtocolVersion"
                .to_string(),
        );
        return Err(());
    }
    let client_validation = match &tls.client_validation {
        None => None,
        Some(v) => {
            let resolve = |what: &str, reference: &str, crl: bool| {
                let found = if crl {
                    ctx.crl(&key.namespace, reference)
                } else {
                    ctx.ca_bundle(&key.namespace, reference)
                };
                found.map_err(|(reason, message)| {
                    (
                        reason,
                        format!("Spec.VirtualHost.TLS.ClientValidation.{what} {message}"),
                    )
                })
            };
            let ca = if v.ca_secret.is_empty() {
                if !v.skip_client_cert_validation {
                    tls_error(
                        status,
                        key,
                        Reason::TLSConfigNotValid,
                        "Spec.VirtualHost.TLS.ClientValidation.CASecret must be specified unless skipClientCertValidation is true".to_string(),
                    );
                    return Err(());
                }
                None
            } else {
                Some(
                    resolve("CASecret", &v.ca_secret, false)
                        .map_err(|(r, m)| tls_error(status, key, r, m))?,
                )
            };
            let crl = if v.crl_secret.is_empty() {
                None
            } else {
                Some(
                    resolve("CRLSecret", &v.crl_secret, true)
                        .map_err(|(r, m)| tls_error(status, key, r, m))?,
                )
            };
            if crl.is_some() && ca.is_none() {
                tls_error(
                    status,
                    key,
                    Reason::TLSConfigNotValid,
                    "Spec.VirtualHost.TLS.ClientValidation: crlSecret needs caSecret".to_string(),
                );
                return Err(());
            }
            Some(ClientValidation {
                ca,
                crl,
                crl_only_verify_leaf: v.crl_only_verify_leaf_cert,
                skip_verification: v.skip_client_cert_validation,
                optional: v.optional_client_certificate,
                forward: v
                    .forward_client_certificate
                    .as_ref()
                    .map(|f| ForwardClientCertificate {
                        subject: f.subject,
                        cert: f.cert,
                        chain: f.chain,
                        dns: f.dns,
                        uri: f.uri,
                    }),
            })
        }
    };
    Ok(DownstreamTls {
        secret: String::new(),
        min_version,
        max_version,
        alpn_http: http,
        client_validation: client_validation.map(Box::new),
    })
}

/// The clusters of a root's `tcpproxy`, following `include` down the chain.
fn tcp_proxy(
    ctx: &BuildContext<'_>,
    ir: &mut Ir,
    status: &mut StatusReport,
    key: &ObjectKey,
    proxy: &HTTPProxy,
    chain: &mut Vec<ObjectKey>,
    reached: &mut std::collections::BTreeSet<ObjectKey>,
) -> Result<TcpProxy, ()> {
    let Some(tcp) = &proxy.spec.tcpproxy else {
        status.error(
            key,
            ConditionType::TCPProxyIncludeError,
            Reason::NoServicesAndIncludes,
            "included HTTPProxy has no Spec.TCPProxy",
        );
        return Err(());
    };
    if !check_unsupported(
        status,
        key,
        || "spec.tcpproxy".to_string(),
        &tcp.unsupported,
        || crate::fields_of(tcp),
    ) {
        return Err(());
    }
    let include = tcp.include.as_ref().or(tcp.includes.as_ref());
    match (tcp.services.is_empty(), include) {
        (false, Some(_)) | (true, None) => {
            status.error(
                key,
                ConditionType::TCPProxyError,
                Reason::NoServicesAndIncludes,
                "Spec.TCPProxy: exactly one of services or include must be set",
            );
            Err(())
        }
        (true, Some(include)) => tcp_include(ctx, ir, status, key, include, chain, reached),
        (false, None) => tcp_services(ctx, ir, status, key, tcp),
    }
}

/// A TCP proxy's `include`: followed (no deeper than the include depth, never in a
/// cycle, never to a root) to the proxy whose services it takes.
fn tcp_include(
    ctx: &BuildContext<'_>,
    ir: &mut Ir,
    status: &mut StatusReport,
    key: &ObjectKey,
    include: &isobar_contour::api::TcpProxyInclude,
    chain: &mut Vec<ObjectKey>,
    reached: &mut std::collections::BTreeSet<ObjectKey>,
) -> Result<TcpProxy, ()> {
    let namespace = include.namespace.as_deref().unwrap_or(&key.namespace);
    let target = ObjectKey::new(isobar_contour::HTTP_PROXY, namespace, &include.name);
    chain.push(key.clone());
    if chain.len() >= crate::MAX_INCLUDE_DEPTH {
        status.error(
            key,
            ConditionType::TCPProxyIncludeError,
            Reason::IncludeTooDeep,
            format!(
                "include {namespace}/{} not followed: an include chain may hold at most {} proxies",
                include.name,
                crate::MAX_INCLUDE_DEPTH
            ),
        );
        return Err(());
    }
    if chain.contains(&target) {
        let path: Vec<String> = chain
            .iter()
            .chain(std::iter::once(&target))
            .map(|k| format!("{}/{}", k.namespace, k.name))
            .collect();
        status.error(
            key,
            ConditionType::TCPProxyIncludeError,
            Reason::IncludeCreatesCycle,
            format!("include creates a cycle: {}", path.join(" -> ")),
        );
        return Err(());
    }
    let Some(child) = ctx.get::<HTTPProxy>(namespace, &include.name) else {
        status.error(
            key,
            ConditionType::TCPProxyIncludeError,
            Reason::IncludeNotFound,
            format!("include {namespace}/{} not found", include.name),
        );
        return Err(());
    };
    if child.spec.virtualhost.is_some() {
        status.error(
            key,
            ConditionType::TCPProxyIncludeError,
            Reason::RootIncludesRoot,
            format!(
                "root httpproxy cannot include another root httpproxy: {namespace}/{}",
                include.name
            ),
        );
        return Err(());
    }
    reached.insert(target.clone());
    let result = tcp_proxy(ctx, ir, status, &target, child, chain, reached);
    chain.pop();
    result
}

/// A TCP proxy's `services`: their clusters (with its balancing and health check),
/// weighted; an error when none resolves.
fn tcp_services(
    ctx: &BuildContext<'_>,
    ir: &mut Ir,
    status: &mut StatusReport,
    key: &ObjectKey,
    tcp: &isobar_contour::api::TcpProxy,
) -> Result<TcpProxy, ()> {
    let mut clusters = Vec::new();
    let mut options = isobar_sdk::ir::ClusterOptions::default();
    if let Some(lb) = &tcp.load_balancer_policy {
        match lb.strategy.as_str() {
            "Cookie" | "RequestHash" => status.warning(
                key,
                ConditionType::TCPProxyError,
                Reason::IgnoredField,
                format!("Spec.TCPProxy.LoadBalancerPolicy strategy {:?} does not apply to TCP and is ignored", lb.strategy),
            ),
            _ => options.lb_policy = crate::policy::load_balancer(lb).0,
        }
    }
    if let Some(h) = &tcp.health_check_policy {
        options.tcp_health_check = Some(
            crate::policy::tcp_health_check(h)
                .map_err(|(type_, reason, message)| status.error(key, type_, reason, message))
                .map(Box::new)?,
        );
    }
    for (i, service) in tcp.services.iter().enumerate() {
        let port = i32::try_from(service.port)
            .ok()
            .filter(|p| (1..=65535).contains(p));
        let Some(port) = port else {
            status.error(
                key,
                ConditionType::ServiceError,
                Reason::ServicePortInvalid,
                format!(
                    "spec.tcpproxy.services[{i}]: service {:?}: port must be in the range 1-65535",
                    service.name
                ),
            );
            return Err(());
        };
        match service_cluster(
            ctx.objects,
            &key.namespace,
            &service.name,
            PortRef::Number(port),
            options.clone(),
            ctx.external_names(),
        ) {
            Ok(cluster) => {
                clusters.push(WeightedCluster {
                    cluster: cluster.name.clone(),
                    weight: service
                        .weight
                        .and_then(|w| u32::try_from(w).ok())
                        .unwrap_or(0),
                    ..Default::default()
                });
                ir.add_cluster(cluster);
            }
            Err(e) => status.error(
                key,
                ConditionType::ServiceError,
                Reason::ServiceUnresolvedReference,
                format!("spec.tcpproxy.services[{i}]: {e}"),
            ),
        }
    }
    crate::routes::settle_weights(&mut clusters);
    // No Service resolved (each already reported): nothing to proxy to, and a
    // TCP proxy without a cluster is refused by Envoy with its whole listener.
    if clusters.is_empty() {
        return Err(());
    }
    Ok(TcpProxy {
        clusters,
        source: key.clone(),
    })
}
