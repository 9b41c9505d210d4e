//! External authorization of a root HTTPProxy's vhost (`virtualhost.authorization`, or
//! Contour's `globalExtAuth`) and of its routes (`authPolicy`), with Contour's rules:
//! a vhost names its own authorization server only if it terminates TLS (and does not
//! serve the fallback certificate); the global server checks every vhost, plain ones
//! through the plain listener's filter; a route's `authPolicy` turns checks off or on
//! and adds to the context sent with them.

use std::collections::BTreeMap;
use std::sync::Arc;

use isobar_contour::api::{AuthorizationServer, HTTPProxy};
use isobar_contour::extension::{self, GlobalExtAuth};
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::ir::{self, RouteAuth};
use isobar_sdk::{BuildContext, ObjectKey, StatusReport};

use crate::tls::{Plan, RouteMode};

/// How the routes of a root (and of every proxy it includes) are authorized by default:
/// whether checks are off, and the context sent with them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RouteDefaults {
    pub disabled: bool,
    pub context: BTreeMap<String, String>,
}

impl RouteDefaults {
    /// A route's authorization under these defaults and its own `authPolicy`: its
    /// `disabled` wins, its context is merged over the defaults'.
    pub(crate) fn route(
        &self,
        own: Option<&isobar_contour::api::AuthorizationPolicy>,
    ) -> Option<RouteAuth> {
        let mut auth = RouteAuth {
            disabled: self.disabled,
            context: self.context.clone(),
        };
        if let Some(own) = own {
            auth.disabled = own.disabled;
            auth.context
                .extend(own.context.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        (auth.disabled || !auth.context.is_empty()).then_some(auth)
    }
}

/// Sets up the authorization of root `proxy`'s vhost: the server its secure vhost
/// (in `plan`) checks requests with, and the defaults of its routes (`None` when no
/// authorization applies to it at all). `Err` when the proxy must not be served; the
/// reason is in `status`.
pub(crate) fn vhost(
    ctx: &BuildContext<'_>,
    status: &mut StatusReport,
    key: &ObjectKey,
    proxy: &HTTPProxy,
    plan: &mut Plan,
    global: Option<&GlobalExtAuth>,
) -> Result<Option<RouteDefaults>, ()> {
    let Some(vhost) = &proxy.spec.virtualhost else {
        return Ok(None);
    };
    let own = vhost.authorization.as_deref();
    let names_server = own.is_some_and(|a| !a.extension_ref.name.is_empty());
    let tls = vhost.tls.as_ref();
    if tls.is_none() && names_server {
        status.error(
            key,
            ConditionType::AuthError,
            Reason::AuthNotPermitted,
            "Spec.VirtualHost.Authorization.ExtensionServiceRef can only be defined for root HTTPProxies that terminate TLS",
        );
        return Err(());
    }
    let terminates = plan.mode == RouteMode::Secure
        && plan
            .secure
            .as_ref()
            .is_some_and(|s| s.tls.is_some() && s.tcp_proxy.is_none());
    if terminates && own.is_some() && tls.is_some_and(|t| t.enable_fallback_certificate) {
        status.error(
            key,
            ConditionType::TLSError,
            Reason::TLSIncompatibleFeatures,
            "Spec.Virtualhost.TLS fallback & client authorization are incompatible",
        );
        return Err(());
    }
    let global_server = global.map(GlobalExtAuth::as_authorization);
    if terminates {
        let server = match (own, &global_server) {
            (Some(own), _) if names_server => Some(own),
            (_, Some(global)) => Some(global),
            _ => None,
        };
        if let Some(server) = server {
            let authorization = resolve(ctx, status, key, server)?;
            if let Some(secure) = &mut plan.secure {
                secure
                    .http
                    .extensions
                    .get_or_insert_with(Default::default)
                    .authorization = Some(Arc::new(authorization));
            }
        }
    }
    // The plain listener's (global) filter checks this vhost's plain requests: a global
    // server that cannot be used is reported here too, without keeping the vhost off
    // plain HTTP (Contour's).
    let disabled_here = own
        .and_then(|a| a.auth_policy.as_ref())
        .is_some_and(|p| p.disabled);
    // (A secure vhost using the global server has already been judged by it above.)
    if let Some(global) = &global_server
        && !disabled_here
        && (!terminates || names_server)
        && let Err((reason, message)) = extension::authorization(ctx, global, &key.namespace)
    {
        status.error(key, ConditionType::AuthError, reason, message);
    }
    Ok(match (own, global) {
        (Some(own), _) => {
            let policy = own.auth_policy.clone().unwrap_or_default();
            Some(RouteDefaults {
                disabled: policy.disabled,
                context: policy.context,
            })
        }
        (None, Some(global)) => {
            let policy = global.auth_policy.clone().unwrap_or_default();
            Some(RouteDefaults {
                disabled: policy.disabled,
                context: policy.context,
            })
        }
        (None, None) => None,
    })
}

fn resolve(
    ctx: &BuildContext<'_>,
    status: &mut StatusReport,
    key: &ObjectKey,
    server: &AuthorizationServer,
) -> Result<ir::ExtAuthz, ()> {
    extension::authorization(ctx, server, &key.namespace).map_err(|(reason, message)| {
        status.error(key, ConditionType::AuthError, reason, message);
    })
}
