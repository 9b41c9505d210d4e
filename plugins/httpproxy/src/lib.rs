//! The `httpproxy` source: Contour's `projectcontour.io/v1` HTTPProxy → IR.
//!
//! Reads: HTTPProxy, Service, EndpointSlice, Secret. Writes: one virtual host per valid root (`spec.virtualhost`),
//! its routes and clusters. Conditions: `FQDNNotSpecified`, `HostNotValid`,
//! `NothingDefined`,
//! `PathMatchConditionsNotValid`, `ServiceUnresolvedReference` (the route answers 503),
//! `Orphaned` for non-roots, and `IgnoredField` for fields this version does not act on.
//!
//! Includes are followed across namespaces with their conditions concatenated down the
//! chain; an include that cannot be followed (`IncludeNotFound`, `RootIncludesRoot`)
//! answers 502 for its conditions, a cycle is reported with its path
//! (`IncludeCreatesCycle`), and non-roots no root reaches are `Orphaned`.
//!
//! Unsupported fields that would *restrict* traffic (TLS, auth, JWT)
//! invalidate the proxy instead of being ignored: serving a route more
//! openly than its author asked is worse than not serving it.

mod auth;
mod conditions;
mod jwt;
mod policy;
mod routes;
mod tls;
mod upstream;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use isobar_contour::api::{HTTPProxy, Unsupported};
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::headers::DefaultHeaders;
use isobar_sdk::host::{Host, parse_host};
use isobar_sdk::ir::HTTPS_LISTENER;
use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, parse_config};
use isobar_sdk::{BuildContext, Claim, Ir, Kind, ObjectKey, Objects, Source, StatusReport};

pub const NAME: &str = "httpproxy";

/// The most proxies an include chain (of routes or of a `tcpproxy`) may hold, the root
/// counted: a longer chain is an error on the proxy whose include goes past it, and its
/// conditions answer 502 (Contour follows any length; the fuzzer found chains of 1,150
/// that overflowed a worker's stack).
pub const MAX_INCLUDE_DEPTH: usize = 100;

/// The `plugins.httpproxy` section of `contour.yaml` (set from Contour's top-level
/// `disablePermitInsecure` and `policy` section).
#[derive(Debug, Default, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct HttpProxyConfig {
    /// `permitInsecure` is ignored: plain HTTP to a secure vhost is always redirected.
    pub disable_permit_insecure: bool,
    /// Header changes of every service's requests and responses, under the service's
    /// own (Contour's `policy`).
    pub default_headers: DefaultHeaders,
    /// External authorization of every vhost that does not name its own (Contour's
    /// `globalExtAuth`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global_ext_auth: Option<isobar_contour::extension::GlobalExtAuth>,
    /// Global rate limit descriptors of root vhosts that set no global policy of their
    /// own (Contour's `rateLimitService.defaultGlobalRateLimitPolicy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_global_rate_limit_policy: Option<isobar_contour::api::GlobalRateLimitPolicy>,
}

#[derive(Debug)]
pub struct HttpProxySource {
    disable_permit_insecure: bool,
    default_headers: DefaultHeaders,
    global_ext_auth: Option<isobar_contour::extension::GlobalExtAuth>,
    default_rate_limits: Option<isobar_contour::api::GlobalRateLimitPolicy>,
}

fn build(config: &serde_json::Value) -> Result<Box<dyn Source>, ConfigError> {
    let config: HttpProxyConfig = parse_config(config)?;
    if let Some(policy) = &config.default_global_rate_limit_policy
        && let Err(e) = policy::global_rate_limit(policy)
    {
        return Err(ConfigError(format!(
            "rateLimitService.defaultGlobalRateLimitPolicy: {e}"
        )));
    }
    Ok(Box::new(HttpProxySource {
        disable_permit_insecure: config.disable_permit_insecure,
        default_headers: config.default_headers,
        global_ext_auth: config.global_ext_auth,
        default_rate_limits: config.default_global_rate_limit_policy,
    }))
}

isobar_sdk::inventory::submit! {
    PluginRegistration {
        name: NAME,
        summary: "Contour HTTPProxy (projectcontour.io/v1) virtual hosts and routes",
        factory: Factory::Source(build),
        settings: Some(isobar_sdk::plugin::Settings::of::<HttpProxyConfig>()),
    }
}

/// Contour's top-level keys the source acts on: `disablePermitInsecure`, the `policy`
/// section's default headers, `globalExtAuth` and
/// `rateLimitService.defaultGlobalRateLimitPolicy`.
fn from_top_level(contour: &serde_json::Value) -> isobar_sdk::plugin::FromTopLevel {
    let mut settings = serde_json::Map::new();
    if contour.get("disablePermitInsecure") == Some(&serde_json::Value::Bool(true)) {
        settings.insert("disable-permit-insecure".into(), true.into());
    }
    let defaults = isobar_sdk::headers::ContourPolicy::of(contour).defaults();
    if !defaults.is_empty()
        && let Ok(value) = serde_json::to_value(&defaults)
    {
        settings.insert("default-headers".into(), value);
    }
    if let Some(auth) = contour.get("globalExtAuth").filter(|v| !v.is_null()) {
        settings.insert("global-ext-auth".into(), auth.clone());
    }
    if let Some(limits) = contour
        .pointer("/rateLimitService/defaultGlobalRateLimitPolicy")
        .filter(|v| !v.is_null())
    {
        settings.insert("default-global-rate-limit-policy".into(), limits.clone());
    }
    isobar_sdk::plugin::FromTopLevel {
        settings: settings.into(),
        enable: None,
    }
}

isobar_sdk::inventory::submit! {
    isobar_sdk::plugin::TopLevelKeys { plugin: NAME, read: from_top_level }
}

/// Fields whose absence would widen who reaches a route: not acting on them must fail
/// closed. Every such field of Contour 1.33 is implemented; one a later CRD adds goes
/// here until it is.
const FAIL_CLOSED_FIELDS: &[&str] = &[];

/// The fields of a `T`, by their names in manifests (from its schema).
pub(crate) fn fields_of<T: isobar_sdk::schemars::JsonSchema>(_: &T) -> Vec<String> {
    let schema = isobar_sdk::schemars::schema_for!(T);
    schema
        .get("properties")
        .and_then(|p| p.as_object())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// The known field `field` most likely is a typo of, if one is close enough.
fn closest(field: &str, known: &[String]) -> Option<String> {
    known
        .iter()
        .map(|k| {
            (
                strsim::jaro_winkler(&field.to_ascii_lowercase(), &k.to_ascii_lowercase()),
                k,
            )
        })
        .filter(|(score, _)| *score >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.clone())
}

/// Reports fields this version does not act on, naming the known field a typo was
/// likely meant for (`known`: the fields of the object the unknown ones were found in);
/// returns false if one must fail closed.
pub(crate) fn check_unsupported(
    status: &mut StatusReport,
    key: &ObjectKey,
    at: impl Fn() -> String,
    fields: &Unsupported,
    known: impl Fn() -> Vec<String>,
) -> bool {
    let mut ok = true;
    let known = if fields.is_empty() {
        Vec::new()
    } else {
        known()
    };
    for field in fields.keys() {
        if let Some(meant) = closest(field, &known) {
            status.warning(
                key,
                ConditionType::SpecError,
                Reason::IgnoredField,
                format!(
                    "{}.{field}: unknown field (did you mean `{meant}`?); it is ignored",
                    at()
                ),
            );
            continue;
        }
        if FAIL_CLOSED_FIELDS.contains(&field.as_str()) {
            ok = false;
            status.error(
                key,
                ConditionType::SpecError,
                Reason::IgnoredField,
                format!("{}.{field} is not supported by this version of Isobar; the proxy is not served", at()),
            );
        } else {
            status.warning(
                key,
                ConditionType::SpecError,
                Reason::IgnoredField,
                format!(
                    "{}.{field} is not supported by this version of Isobar and is ignored",
                    at()
                ),
            );
        }
    }
    ok
}

impl Source for HttpProxySource {
    fn local(&self) -> bool {
        true
    }

    fn kinds(&self) -> &'static [Kind] {
        &[isobar_contour::HTTP_PROXY]
    }

    fn reads(&self) -> &'static [Kind] {
        &[Kind::Service, Kind::EndpointSlice, Kind::Secret]
    }

    /// A proxy claims its `virtualhost.fqdn`, includes the proxies of `includes` and
    /// `tcpproxy.include`, and names the Services of its routes and TCP proxy (in its
    /// own namespace).
    fn claim(&self, objects: &Objects, key: &ObjectKey) -> Claim {
        let mut claim = Claim::default();
        let Some(proxy) = objects.get::<HTTPProxy>(&key.namespace, &key.name) else {
            return claim;
        };
        let tcp = proxy.spec.tcpproxy.as_ref();
        let tcp_include = tcp.and_then(|t| t.include.as_ref().or(t.includes.as_ref()));
        let includes = proxy
            .spec
            .includes
            .iter()
            .map(|i| (i.namespace.as_deref(), i.name.as_str()))
            .chain(tcp_include.map(|i| (i.namespace.as_deref(), i.name.as_str())));
        for (child_ns, child) in includes {
            let ns = child_ns.unwrap_or(&key.namespace);
            claim
                .includes
                .push(ObjectKey::new(isobar_contour::HTTP_PROXY, ns, child));
        }
        if let Some(vhost) = &proxy.spec.virtualhost
            && let Ok(host) = parse_host(&vhost.fqdn)
        {
            claim.hosts.push(host.fqdn);
        }
        // The ExtensionServices its checks call: its own authorization's, and
        // `globalExtAuth`'s (whose validity every proxy's status reports).
        let own = proxy.spec.virtualhost.as_ref().and_then(|v| {
            let reference = &v.authorization.as_ref()?.extension_ref;
            let ns = reference.namespace.as_deref().filter(|ns| !ns.is_empty());
            Some((ns.unwrap_or(&key.namespace), reference.name.as_str()))
        });
        let global = self.global_ext_auth.as_ref().map(|g| g.service());
        for (ns, name) in own.into_iter().chain(global) {
            if !name.is_empty() {
                let used = ObjectKey::new(isobar_contour::EXTENSION_SERVICE, ns, name);
                if !claim.uses.contains(&used) {
                    claim.uses.push(used);
                }
            }
        }
        let tcp_services = tcp.iter().flat_map(|t| &t.services);
        let route_services = proxy.spec.routes.iter().flat_map(|r| &r.services);
        for service in route_services.chain(tcp_services) {
            let id = (key.namespace.clone(), service.name.clone());
            if !claim.services.contains(&id) {
                claim.services.push(id);
            }
        }
        claim
    }

    fn build(&self, ctx: &BuildContext<'_>, ir: &mut Ir, status: &mut StatusReport) {
        let mut roots: BTreeMap<String, Vec<(ObjectKey, &HTTPProxy, Host)>> = BTreeMap::new();
        let mut children = Vec::new();
        for (key, proxy) in ctx.all::<HTTPProxy>() {
            status.touch(&key);
            let Some(vhost) = &proxy.spec.virtualhost else {
                children.push(key);
                continue;
            };
            if vhost.fqdn.is_empty() {
                status.error(
                    &key,
                    ConditionType::VirtualHostError,
                    Reason::FQDNNotSpecified,
                    "Spec.VirtualHost.Fqdn must be specified",
                );
                continue;
            }
            match parse_host(&vhost.fqdn) {
                Ok(host) if host.fqdn == "*" => status.error(
                    &key,
                    ConditionType::VirtualHostError,
                    Reason::HostNotValid,
                    "Spec.VirtualHost.Fqdn must be a host name, not \"*\"",
                ),
                Ok(host) => roots
                    .entry(host.fqdn.clone())
                    .or_default()
                    .push((key, proxy, host)),
                Err(message) => status.error(
                    &key,
                    ConditionType::VirtualHostError,
                    Reason::HostNotValid,
                    message,
                ),
            }
        }

        let mut reached = BTreeSet::new();
        for claimants in roots.into_values() {
            // Several roots on one FQDN are the `conflicts` processor's to settle: it
            // turns the losers away before this source runs. Without it, they merge.
            for (key, proxy, host) in claimants {
                let Ok(mut plan) = tls::plan(ctx, ir, status, &key, proxy, &host, &mut reached)
                else {
                    continue;
                };
                let Ok(auth) = auth::vhost(
                    ctx,
                    status,
                    &key,
                    proxy,
                    &mut plan,
                    self.global_ext_auth.as_ref(),
                ) else {
                    continue;
                };
                let Ok(jwt) = jwt::vhost(ctx, ir, status, &key, proxy, &mut plan) else {
                    continue;
                };
                let added_secure = match plan.secure {
                    Some(secure)
                        if !ir
                            .secure_virtual_hosts(HTTPS_LISTENER)
                            .contains_key(&host.fqdn) =>
                    {
                        ir.secure_virtual_hosts_mut(HTTPS_LISTENER)
                            .map(|v| v.insert(host.fqdn.clone(), secure))
                            .is_some()
                    }
                    _ => false,
                };
                let mut walk = routes::Walk {
                    ctx,
                    ir,
                    status,
                    host: &host,
                    reached: &mut reached,
                    mode: plan.mode,
                    permit_insecure: !self.disable_permit_insecure,
                    default_headers: &self.default_headers,
                    auth: auth.as_ref(),
                    default_rate_limits: self.default_rate_limits.as_ref(),
                    jwt: jwt.as_ref(),
                };
                let valid = walk.visit(
                    &key,
                    proxy,
                    &conditions::Matches::default(),
                    &mut Vec::new(),
                );
                if valid {
                    if let Some((sds, secret)) = plan.secret {
                        ir.add_secret(&sds, secret);
                    }
                    if let Some((sds, secret)) = plan.fallback {
                        ir.add_secret(&sds, secret);
                        if let Some(https) = ir.listeners.get_mut(HTTPS_LISTENER) {
                            https.fallback_secret = Some(sds);
                        }
                    }
                } else if added_secure
                    && let Some(secure) = ir.secure_virtual_hosts_mut(HTTPS_LISTENER)
                {
                    secure.remove(&host.fqdn);
                }
            }
        }
        for key in children {
            if !reached.contains(&key) {
                status.orphan(&key);
            }
        }
    }
}
