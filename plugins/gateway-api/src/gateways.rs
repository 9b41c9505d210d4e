//! Which Gateways this controller serves, their listeners as Envoy listeners, and the
//! status of GatewayClasses, Gateways and listeners.

use std::collections::BTreeMap;

use gateway_api::apis::experimental::gateways::{
    GatewayListeners, GatewayListenersAllowedRoutesNamespacesFrom, GatewayListenersTlsMode,
    GatewayTlsFrontend,
};
use isobar_sdk::condition::{Condition, RouteGroupKind};
use isobar_sdk::ir::{HTTP_LISTENER, HTTPS_LISTENER, Listener, Misdirected, Protocol, RouteNames};
use isobar_sdk::{BuildContext, ObjectKey, StatusReport};

use std::net::IpAddr;

use crate::GatewayApiConfig;
use crate::addresses::{Asked, Assigner, Placement, Pool};
use crate::grants::Grants;
use crate::hosts;
use crate::kinds::{GROUP, Gateway, GatewayClass, Namespace, every};

mod listeners;

use listeners::{Envoy, Site, serve_listeners};

/// The Gateway API features this controller supports, as GatewayClass
/// `status.supportedFeatures` names them (sorted): those whose conformance tests (v1.6.1)
/// pass; `docs/gateway-api.md` maps each test to Isobar's.
pub const SUPPORTED_FEATURES: &[&str] = &[
    "BackendTLSPolicy",
    "BackendTLSPolicySANValidation",
    "GRPCRoute",
    "GRPCRouteNamedRouteRule",
    "Gateway",
    "GatewayAddressEmpty",
    "GatewayBackendClientCertificate",
    "GatewayFrontendClientCertificateValidation",
    "GatewayFrontendClientCertificateValidationInsecureFallback",
    "GatewayHTTPListenerIsolation",
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    "GatewayPort8080",
    "GatewayStaticAddresses",
    "HTTPRoute",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteBackendTimeout",
    "HTTPRouteCORS",
    "HTTPRouteDestinationPortMatching",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteRetry",
    "HTTPRouteRetryBackendTimeout",
    "HTTPRouteRetryConnectionError",
    "HTTPRouteSchemeRedirect",
    "ListenerSet",
    "ReferenceGrant",
    "TCPRoute",
    "TLSRoute",
    "TLSRouteModeMixed",
    "TLSRouteModeTerminate",
    "UDPRoute",
];

/// Contour's container port for a Gateway listener port: 8000 above it, wrapping past
/// 65535 and kept clear of the privileged ports (`toContainerPort`).
pub fn container_port(port: i32) -> u16 {
    let mut p = port + 8000;
    if p > 65535 {
        p -= 65535;
    }
    if p <= 1023 {
        p += 1023;
    }
    u16::try_from(p).unwrap_or(u16::MAX)
}

/// What a Gateway listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Http,
    Https,
    /// TLS by SNI to TLSRoutes: passed through, or terminated with a certificate.
    Tls,
    Tcp,
    /// UDP datagrams to UDPRoutes.
    Udp,
}

impl Family {
    /// The Envoy listener it is part of: listeners on one port share one when their
    /// families make the same kind of Envoy listener (HTTPS and TLS do).
    pub fn protocol(self) -> Protocol {
        match self {
            Family::Http => Protocol::Http,
            Family::Https | Family::Tls => Protocol::Https,
            Family::Tcp => Protocol::Tcp,
            Family::Udp => Protocol::Udp,
        }
    }

    /// The route kinds it takes.
    pub fn route_kinds(self) -> &'static [&'static str] {
        match self {
            Family::Http | Family::Https => &["HTTPRoute", "GRPCRoute"],
            Family::Tls => &["TLSRoute"],
            Family::Tcp => &["TCPRoute"],
            Family::Udp => &["UDPRoute"],
        }
    }
}

/// Which namespaces a listener takes routes from.
#[derive(Debug, Clone)]
pub enum From {
    Same,
    All,
    Selector(k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector),
}

/// A Gateway listener that is accepted: routes attach to it (and count in its
/// `attachedRoutes`); it serves them when it is programmed.
#[derive(Debug, Clone)]
pub struct Served {
    pub gateway: ObjectKey,
    /// The listener's name (a route's `sectionName`).
    pub name: String,
    /// The Gateway's port (a route's `parentRef.port`).
    pub port: i32,
    pub hostname: Option<String>,
    /// The Envoy listener it is part of.
    pub envoy: String,
    pub family: Family,
    /// HTTPS: the SDS name of its certificate.
    pub secret: Option<String>,
    pub from: From,
    /// The route kinds it takes (of its family's, those `allowedRoutes.kinds` names).
    pub kinds: Vec<&'static str>,
    /// Whether Envoy serves it: false when its certificate does not resolve (routes
    /// still attach, as the spec asks, but go nowhere).
    pub programmed: bool,
    /// HTTPS: the client certificates it asks for (the Gateway's `tls.frontend`).
    pub client_validation: Option<Box<isobar_sdk::ir::ClientValidation>>,
}

impl Served {
    /// Whether a route in `namespace` may attach.
    pub fn admits(&self, ctx: &BuildContext<'_>, namespace: &str) -> bool {
        match &self.from {
            From::Same => namespace == self.gateway.namespace,
            From::All => true,
            From::Selector(selector) => ctx
                .get::<Namespace>("", namespace)
                .is_some_and(|ns| selects(selector, ns.metadata.labels.as_ref())),
        }
    }
}

/// Whether a label selector selects an object with `labels`.
pub(crate) fn selects(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let by_label = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expression = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => !value.is_some_and(|v| values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    by_label && by_expression
}

/// What is on an Envoy port: its family (`None` for neither HTTP nor HTTPS), its Envoy
/// listener and the hostnames Gateway listeners claim on it.
type Port = (Protocol, String, Vec<Option<String>>);

/// An Envoy port: its address (a Gateway's own, or the shared one), number and whether
/// it is UDP's (a UDP listener and a TCP one may share a number).
type PortKey = (Option<IpAddr>, u16, bool);

/// The Gateways served and their listeners.
#[derive(Debug, Default)]
pub struct Gateways {
    /// By Gateway: its served listeners.
    pub listeners: BTreeMap<ObjectKey, Vec<Served>>,
    /// By Gateway (and ListenerSet of one): the SDS name of the certificate Envoy
    /// presents to TLS backends of its routes.
    pub client_certificates: BTreeMap<ObjectKey, String>,
}

impl Gateways {
    /// What the filter chain of the HTTPS listener `listener` answers 421: a Host that
    /// would choose another HTTPS listener on its Envoy listener. A listener without a
    /// hostname (any SNI) sends the hostnames of the others there and answers 404 for
    /// the rest; one with a hostname sends there the more specific hostnames its own
    /// covers, and every Host it does not serve.
    pub fn misdirected(&self, listener: &Served) -> Misdirected {
        let own = listener.hostname.as_deref().map(str::to_ascii_lowercase);
        let mut domains: Vec<String> = self
            .listeners
            .values()
            .flatten()
            .filter(|l| {
                l.envoy == listener.envoy
                    && l.family == Family::Https
                    && l.programmed
                    && !(l.gateway == listener.gateway && l.name == listener.name)
            })
            .filter_map(|l| l.hostname.as_deref().map(str::to_ascii_lowercase))
            .filter(|h| own.as_deref().is_none_or(|o| o != h && hosts::covers(o, h)))
            .collect();
        domains.sort();
        domains.dedup();
        // Gateway API lets a wildcard listener serve every name it covers, whatever
        // the SNI (connections are coalesced).
        Misdirected {
            domains,
            rest: own.is_some(),
            host_is_sni: false,
        }
    }
}

/// The filter chain an HTTPS listener's routes are served on: its hostname (an SNI
/// name or `*.suffix` pattern), or `*` (any SNI) without one.
pub fn chain_name(listener: &Served) -> String {
    listener
        .hostname
        .as_deref()
        .map_or_else(|| "*".to_string(), str::to_ascii_lowercase)
}

/// The classes this controller owns, by name (their status set in `status`).
fn classes(
    ctx: &BuildContext<'_>,
    config: &GatewayApiConfig,
    status: &mut StatusReport,
) -> Vec<String> {
    let mut ours = Vec::new();
    for (key, class) in every::<GatewayClass>(ctx) {
        if class.spec.controller_name != config.controller_name {
            continue;
        }
        let gateway = status.gateway(&key);
        gateway.set(Condition::new(
            "Accepted",
            true,
            "Accepted",
            "GatewayClass is accepted",
        ));
        gateway.set(Condition::new(
            "SupportedVersion",
            true,
            "SupportedVersion",
            "Gateway API v1.5",
        ));
        gateway.supported_features = SUPPORTED_FEATURES.iter().map(|f| f.to_string()).collect();
        ours.push(key.name);
    }
    ours
}

/// The Gateways to serve, oldest first (the first to claim a port keeps it).
fn selected<'a>(
    ctx: &BuildContext<'a>,
    config: &GatewayApiConfig,
    classes: &[String],
) -> Vec<(ObjectKey, &'a Gateway)> {
    let mut gateways: Vec<(ObjectKey, &'a Gateway)> = every::<Gateway>(ctx)
        .filter(|(key, gateway)| match &config.gateway_ref {
            Some(r) => r.namespace == key.namespace && r.name == key.name,
            None => classes.contains(&gateway.spec.gateway_class_name),
        })
        .collect();
    gateways.sort_by(|(ka, a), (kb, b)| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
            .then_with(|| ka.cmp(kb))
    });
    gateways
}

/// Serves the Gateways this controller owns, each with the ListenerSets it allows: an
/// Envoy listener per port and family (and per address, for Gateways with one of their
/// own), listener status, and the routes' view of them.
pub fn serve(
    ctx: &BuildContext<'_>,
    config: &GatewayApiConfig,
    pool: &Pool,
    grants: &Grants<'_>,
    ir: &mut isobar_sdk::Ir,
    status: &mut StatusReport,
) -> Gateways {
    let classes = classes(ctx, config, status);
    let mut out = Gateways::default();
    let mut envoy = envoy_of(ir);
    let mut assigner = Assigner::new(pool);
    let sets = crate::listener_sets::by_gateway(ctx);
    for (key, gateway) in selected(ctx, config, &classes) {
        let Some(site) = site(&mut assigner, &key, gateway, status) else {
            continue;
        };
        envoy.site = site;
        if refuse_parameters(&key, gateway, status) {
            continue;
        }
        let client_certificate =
            crate::backend_client::certificate(ctx, grants, &key, gateway, ir, status);
        let frontend = gateway.spec.tls.as_ref().and_then(|t| t.frontend.as_ref());
        let (served, _) = serve_listeners(
            ctx,
            grants,
            (&key, &key, frontend),
            &gateway.spec.listeners,
            &mut envoy,
            ir,
            status,
        );
        let placed = !matches!(envoy.site, Site::Nowhere(_));
        report_gateway(&key, &gateway.spec.listeners, &served, placed, status);
        crate::defaults::report(&key, gateway, status);
        if let Site::Nowhere(message) = &envoy.site {
            status.gateway(&key).set(Condition::new(
                "Programmed",
                false,
                "AddressNotUsable",
                message.clone(),
            ));
        }
        if frontend.is_some_and(crate::frontend::insecure) {
            status.gateway(&key).set(Condition::new(
                "InsecureFrontendValidationMode",
                true,
                "ConfigurationChanged",
                "clients without a valid certificate are let in (AllowInsecureFallback)",
            ));
        }
        out.listeners.insert(key.clone(), served);
        if let Some(sds) = &client_certificate {
            out.client_certificates.insert(key.clone(), sds.clone());
        }
        // Its ListenerSets, oldest first, after its own listeners.
        let listener_sets = sets.get(&key).into_iter().flatten();
        let attached_sets = serve_listener_sets(
            ctx,
            grants,
            (&key, gateway, frontend),
            listener_sets,
            client_certificate.as_ref(),
            &mut envoy,
            ir,
            &mut out,
            status,
        );
        if sets.contains_key(&key) || gateway.spec.allowed_listeners.is_some() {
            status.gateway(&key).attached_listener_sets = Some(attached_sets);
        }
    }
    out
}

/// The Envoy listeners the configuration made, by port (what is there, its family,
/// `None` for neither HTTP nor HTTPS; its Envoy listener and the hostnames Gateway
/// listeners claim on it): a listener the configuration made (`ingress_http` on 8080,
/// …) is shared as any other.
fn envoy_of(ir: &isobar_sdk::Ir) -> Envoy {
    let ports: BTreeMap<PortKey, Port> = ir
        .listeners
        .values()
        .map(|l| {
            let udp = l.protocol == Protocol::Udp;
            (
                (None, l.port, udp),
                (l.protocol, l.name.clone(), Vec::new()),
            )
        })
        .collect();
    // Contour's addresses: the configured HTTP listener's for HTTP, the HTTPS one's for
    // HTTPS.
    let address = |name: &str| {
        ir.listeners
            .get(name)
            .map_or_else(|| "0.0.0.0".to_string(), |l| l.address.clone())
    };
    Envoy {
        ports,
        http_address: address(HTTP_LISTENER),
        https_address: address(HTTPS_LISTENER),
        site: Site::Shared,
    }
}

/// Where Gateway `key` is served, from its `addresses`: the fleet's address, its own,
/// or nowhere (said in its status); `None` when an address it asks for is not
/// supported (it is not accepted).
fn site(
    assigner: &mut Assigner<'_>,
    key: &ObjectKey,
    gateway: &Gateway,
    status: &mut StatusReport,
) -> Option<Site> {
    let asked: Vec<Asked<'_>> = gateway
        .spec
        .addresses
        .iter()
        .flatten()
        .map(|a| Asked {
            type_: a.r#type.as_deref(),
            value: a.value.as_deref(),
        })
        .collect();
    status.gateway(key).addresses_from_service = true;
    let site = match assigner.place(key, &asked) {
        Placement::Shared => Site::Shared,
        Placement::Own(ip) => {
            status.gateway(key).addresses = vec![("IPAddress".to_string(), ip.to_string())];
            Site::Own(ip)
        }
        Placement::NotUsable(message) => Site::Nowhere(message),
        Placement::Unsupported(message) => {
            let gw = status.gateway(key);
            gw.set(Condition::new(
                "Accepted",
                false,
                "UnsupportedAddress",
                message,
            ));
            gw.set(Condition::new(
                "Programmed",
                false,
                "Invalid",
                "the Gateway is not accepted",
            ));
            return None;
        }
    };
    Some(site)
}

/// Refuses Gateway `key` when it names `infrastructure.parametersRef`: one Envoy fleet
/// serves every Gateway, no parameters kind configures it.
fn refuse_parameters(key: &ObjectKey, gateway: &Gateway, status: &mut StatusReport) -> bool {
    if let Some(p) = gateway
        .spec
        .infrastructure
        .as_ref()
        .and_then(|i| i.parameters_ref.as_ref())
    {
        // One Envoy fleet serves every Gateway: no parameters kind configures it.
        let gw = status.gateway(key);
        gw.set(Condition::new(
            "Accepted",
            false,
            "InvalidParameters",
            format!(
                "infrastructure.parametersRef {} {:?} of group {:?} is not supported",
                p.kind, p.name, p.group
            ),
        ));
        gw.set(Condition::new(
            "Programmed",
            false,
            "Invalid",
            "the Gateway is not accepted",
        ));
        return true;
    }
    false
}

/// A Gateway's ListenerSets (`sets`, oldest first) served after its own listeners;
/// how many are attached.
#[allow(clippy::too_many_arguments)]
fn serve_listener_sets<'s>(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    (key, gateway, frontend): (&ObjectKey, &Gateway, Option<&GatewayTlsFrontend>),
    sets: impl Iterator<Item = &'s (ObjectKey, Vec<GatewayListeners>)>,
    client_certificate: Option<&String>,
    envoy: &mut Envoy,
    ir: &mut isobar_sdk::Ir,
    out: &mut Gateways,
    status: &mut StatusReport,
) -> i32 {
    let mut attached_sets = 0;
    for (set_key, listeners) in sets {
        if !crate::listener_sets::allowed(ctx, gateway, key, &set_key.namespace) {
            crate::listener_sets::not_allowed(set_key, status);
            continue;
        }
        let (served, programmed) = serve_listeners(
            ctx,
            grants,
            (set_key, key, frontend),
            listeners,
            envoy,
            ir,
            status,
        );
        if crate::listener_sets::report(set_key, programmed, status) {
            attached_sets += 1;
        }
        out.listeners.insert(set_key.clone(), served);
        if let Some(sds) = client_certificate {
            out.client_certificates.insert(set_key.clone(), sds.clone());
        }
    }
    attached_sets
}

/// A Gateway's own conditions once its listeners are served: accepted while any of its
/// listeners is (`ListenersNotValid` naming those that are not, or not programmed for
/// their own reasons), and programmed while accepted: it has its address (the fleet's,
/// or its own when `placed`), and each listener says whether Envoy serves it.
fn report_gateway(
    key: &ObjectKey,
    listeners: &[GatewayListeners],
    served: &[Served],
    placed: bool,
    status: &mut StatusReport,
) {
    let not_valid: Vec<&str> = listeners
        .iter()
        .map(|l| l.name.as_str())
        .filter(|name| {
            !served
                .iter()
                .any(|s| s.name == *name && (s.programmed || !placed))
        })
        .collect();
    let gw = status.gateway(key);
    let accepted = listeners.is_empty() || !served.is_empty();
    gw.set(if not_valid.is_empty() {
        Condition::new("Accepted", true, "Accepted", "Gateway is accepted")
    } else {
        Condition::new(
            "Accepted",
            accepted,
            "ListenersNotValid",
            format!("listeners not valid: {}", not_valid.join(", ")),
        )
    });
    gw.set(if accepted {
        Condition::new("Programmed", true, "Programmed", "Valid Gateway")
    } else {
        Condition::new("Programmed", false, "Invalid", "no listener can be served")
    });
}
