//! `isobar convert`: HTTPProxies and Ingresses as Gateway API objects — a GatewayClass
//! (unless `--gateway-class` names an existing one), a Gateway with an HTTP listener and
//! one HTTPS (or TLS) listener per secure host, HTTPRoutes (an HTTPProxy's includes
//! flattened into its root's route), TLSRoutes for TCP proxies, and ReferenceGrants for
//! certificates of other namespaces — plus a report of every field with no Gateway API
//! equivalent, which is left out, and of every match written with another meaning.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::PathBuf;

use serde_json::{Value, json};

use isobar_contour::api::{self, HTTPProxy};
use isobar_sdk::api::Ingress;
use isobar_sdk::{Kind, Objects};

use crate::provider::files::load_dir;
use crate::provider::manifest::parse_file;

const GROUP: &str = "gateway.networking.k8s.io";

/// Isobar's default Gateway controller name (Contour's).
const CONTROLLER: &str = isobar_plugin_gateway_api::CONTOUR_CONTROLLER;

#[derive(Debug, Clone, clap::Args)]
pub struct ConvertArgs {
    /// A directory of manifests, a manifest file, or `-` for standard input.
    #[arg(default_value = "-")]
    pub input: PathBuf,
    /// The Gateway to write and attach the routes to (`namespace/name`).
    #[arg(long, default_value = "projectcontour/contour")]
    pub gateway: String,
    /// An existing GatewayClass for the Gateway to name. Without it, the output holds a
    /// GatewayClass of its own, `isobar`, of Isobar's default controller name.
    #[arg(long)]
    pub gateway_class: Option<String>,
    /// Port of the Gateway's HTTP listener (Contour's Envoy listens on it + 8000).
    #[arg(long, default_value_t = 80)]
    pub http_port: u16,
    /// Port of the Gateway's HTTPS and TLS listeners.
    #[arg(long, default_value_t = 443)]
    pub https_port: u16,
}

/// The GatewayClass a conversion writes when no `--gateway-class` is given.
const OWN_CLASS: &str = "isobar";

/// What a conversion came to: the objects, what was left out and what now means
/// something else.
#[derive(Debug, Default)]
pub struct Conversion {
    pub objects: Vec<Value>,
    /// `kind namespace/name: field: why`, one per thing left out.
    pub report: Vec<String>,
    /// `kind namespace/name: field: how`, one per thing written whose meaning changed.
    pub changed: Vec<String>,
}

pub fn run(args: &ConvertArgs) -> anyhow::Result<()> {
    let objects = read(&args.input)?;
    let conversion = convert(&objects, args)?;
    let mut out = String::new();
    if conversion.report.is_empty() {
        out.push_str("# Converted by isobar convert: nothing was left out.\n");
    } else {
        out.push_str("# Converted by isobar convert. Left out (no Gateway API equivalent):\n");
        for line in &conversion.report {
            out.push_str(&format!("#   {line}\n"));
            eprintln!("isobar convert: left out: {line}");
        }
    }
    if !conversion.changed.is_empty() {
        out.push_str("# Changed (written, but matching otherwise than the original):\n");
        for line in &conversion.changed {
            out.push_str(&format!("#   {line}\n"));
            eprintln!("isobar convert: changed: {line}");
        }
    }
    match &args.gateway_class {
        Some(class) => eprintln!(
            "isobar convert: the Gateway names GatewayClass {class:?}, which must exist and be Isobar's (its controllerName Isobar's gateway.controllerName)"
        ),
        None => eprintln!(
            "isobar convert: wrote GatewayClass {OWN_CLASS:?} (controllerName {CONTROLLER}); Isobar serves it with gateway.controllerName: {CONTROLLER} in contour.yaml"
        ),
    }
    for object in &conversion.objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(object)?);
    }
    print!("{out}");
    Ok(())
}

fn read(input: &PathBuf) -> anyhow::Result<Objects> {
    if input.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        return parse(input, &text);
    }
    if input.is_dir() {
        let (objects, errors) = load_dir(input);
        if let Some(e) = errors.first() {
            anyhow::bail!("{e}");
        }
        return Ok(objects);
    }
    let text =
        std::fs::read_to_string(input).map_err(|e| anyhow::anyhow!("{}: {e}", input.display()))?;
    parse(input, &text)
}

fn parse(path: &std::path::Path, text: &str) -> anyhow::Result<Objects> {
    let mut objects = Objects::default();
    for object in parse_file(path, text).map_err(|e| anyhow::anyhow!("{e}"))? {
        objects.apply(object);
    }
    Ok(objects)
}

/// The conversion of every HTTPProxy and Ingress of `objects`.
pub fn convert(objects: &Objects, args: &ConvertArgs) -> anyhow::Result<Conversion> {
    let (gw_ns, gw_name) = args
        .gateway
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
        .ok_or_else(|| anyhow::anyhow!("--gateway {:?} is not namespace/name", args.gateway))?;
    let mut c = Converter {
        objects,
        gateway: (gw_ns.to_string(), gw_name.to_string()),
        listeners: BTreeMap::new(),
        grants: BTreeSet::new(),
        service_grants: BTreeSet::new(),
        out: Conversion::default(),
    };
    for ((ns, name), object) in objects.of_kind(isobar_contour::HTTP_PROXY) {
        if let Some(proxy) = object.get::<HTTPProxy>()
            && proxy.spec.virtualhost.is_some()
        {
            c.proxy(ns, name, proxy);
        }
    }
    for ((ns, name), object) in objects.of_kind(Kind::Ingress) {
        if let Some(ingress) = object.get::<Ingress>() {
            c.ingress(ns, name, ingress);
        }
    }
    let mut listeners = vec![json!({
        "name": "http", "protocol": "HTTP", "port": args.http_port,
        "allowedRoutes": {"namespaces": {"from": "All"}},
    })];
    for listener in c.listeners.values() {
        let mut l = listener.clone();
        l["port"] = json!(args.https_port);
        listeners.push(l);
    }
    let mut out = Vec::new();
    let class = match &args.gateway_class {
        Some(class) => class.as_str(),
        None => {
            out.push(json!({
                "apiVersion": format!("{GROUP}/v1"),
                "kind": "GatewayClass",
                "metadata": {"name": OWN_CLASS},
                "spec": {"controllerName": CONTROLLER},
            }));
            OWN_CLASS
        }
    };
    out.push(json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": "Gateway",
        "metadata": {"name": gw_name, "namespace": gw_ns},
        "spec": {"gatewayClassName": class, "listeners": listeners},
    }));
    for secret_ns in &c.grants {
        out.push(json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "ReferenceGrant",
            "metadata": {"name": format!("isobar-convert-{gw_name}"), "namespace": secret_ns},
            "spec": {
                "from": [{"group": GROUP, "kind": "Gateway", "namespace": gw_ns}],
                "to": [{"group": "", "kind": "Secret"}],
            },
        }));
    }
    for (service_ns, route_ns) in &c.service_grants {
        out.push(json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "ReferenceGrant",
            "metadata": {"name": format!("isobar-convert-from-{route_ns}"), "namespace": service_ns},
            "spec": {
                "from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": route_ns}],
                "to": [{"group": "", "kind": "Service"}],
            },
        }));
    }
    out.append(&mut c.out.objects);
    Ok(Conversion {
        objects: out,
        report: c.out.report,
        changed: c.out.changed,
    })
}

struct Converter<'a> {
    objects: &'a Objects,
    gateway: (String, String),
    /// Secure listeners by host name.
    listeners: BTreeMap<String, Value>,
    /// Namespaces whose Secrets the Gateway needs a ReferenceGrant for.
    grants: BTreeSet<String>,
    /// (Service namespace, route namespace): an included proxy's Services, used by its
    /// root's route, need a ReferenceGrant.
    service_grants: BTreeSet<(String, String)>,
    out: Conversion,
}

/// One HTTPProxy route with the conditions of the includes that led to it.
struct Flat<'p> {
    route: &'p api::Route,
    conditions: Vec<api::MatchCondition>,
    /// Where it was written (`namespace/name`), for the report.
    from: String,
    /// Its namespace: its Services are there.
    namespace: String,
}

impl<'a> Converter<'a> {
    fn left_out(&mut self, what: &str, field: &str, why: &str) {
        self.out.report.push(format!("{what}: {field}: {why}"));
    }

    fn parent(&self, section: &str) -> Value {
        json!({
            "group": GROUP, "kind": "Gateway",
            "namespace": self.gateway.0, "name": self.gateway.1,
            "sectionName": section,
        })
    }

    /// A secure listener for `host` (HTTPS terminating with `secret`, or TLS passing
    /// through); its name.
    fn secure_listener(
        &mut self,
        namespace: &str,
        host: &str,
        secret: Option<&str>,
        tls: bool,
    ) -> String {
        let name = listener_name(if tls { "tls" } else { "https" }, host);
        let mut listener = json!({
            "name": name, "protocol": if tls { "TLS" } else { "HTTPS" }, "hostname": host,
            "allowedRoutes": {"namespaces": {"from": "All"}},
        });
        match secret {
            Some(secret) => {
                let (ns, secret) = secret.split_once('/').unwrap_or((namespace, secret));
                if ns != self.gateway.0 {
                    self.grants.insert(ns.to_string());
                }
                listener["tls"] = json!({
                    "mode": "Terminate",
                    "certificateRefs": [{"group": "", "kind": "Secret", "name": secret, "namespace": ns}],
                });
            }
            None => listener["tls"] = json!({"mode": "Passthrough"}),
        }
        self.listeners.insert(name.clone(), listener);
        name
    }

    fn proxy(&mut self, ns: &str, name: &str, proxy: &'a HTTPProxy) {
        let what = format!("HTTPProxy {ns}/{name}");
        let Some(vhost) = &proxy.spec.virtualhost else {
            return;
        };
        let host = vhost.fqdn.to_ascii_lowercase();
        if vhost.cors_policy.is_some() {
            self.left_out(
                &what,
                "virtualhost.corsPolicy",
                "not converted; an HTTPRoute CORS filter on each rule can express it",
            );
        }
        for (field, set) in [
            (
                "virtualhost.rateLimitPolicy",
                vhost.rate_limit_policy.is_some(),
            ),
            (
                "virtualhost.ipAllowPolicy",
                !vhost.ip_allow_policy.is_empty(),
            ),
            ("virtualhost.ipDenyPolicy", !vhost.ip_deny_policy.is_empty()),
        ] {
            if set {
                self.left_out(&what, field, "Gateway API has no equivalent");
            }
        }
        for key in vhost.unsupported.keys() {
            self.left_out(
                &what,
                &format!("virtualhost.{key}"),
                "Gateway API has no equivalent",
            );
        }
        let tls = vhost.tls.as_ref();
        if let Some(t) = tls {
            for (field, set) in [
                (
                    "minimumProtocolVersion",
                    t.minimum_protocol_version.is_some(),
                ),
                (
                    "maximumProtocolVersion",
                    t.maximum_protocol_version.is_some(),
                ),
                ("clientValidation", t.client_validation.is_some()),
                ("enableFallbackCertificate", t.enable_fallback_certificate),
            ] {
                if set {
                    self.left_out(
                        &what,
                        &format!("virtualhost.tls.{field}"),
                        "Gateway API has no per-host equivalent",
                    );
                }
            }
        }
        if let Some(tcp) = &proxy.spec.tcpproxy {
            self.tcp_proxy(ns, name, &what, &host, tls, tcp);
            return;
        }
        let mut flat = Vec::new();
        let mut seen = BTreeSet::new();
        self.flatten(ns, name, proxy, Vec::new(), &mut seen, &mut flat);
        let mut secure_rules = Vec::new();
        let mut plain_rules = Vec::new();
        for f in &flat {
            let Some(rule) = self.rule(ns, f) else {
                continue;
            };
            if tls.is_some() && f.route.permit_insecure {
                plain_rules.push(rule.clone());
            }
            if tls.is_some() {
                secure_rules.push(rule);
            } else {
                plain_rules.push(rule);
            }
        }
        match tls {
            Some(t) if !t.secret_name.is_empty() => {
                let listener = self.secure_listener(ns, &host, Some(&t.secret_name), false);
                self.route(ns, name, &host, vec![self.parent(&listener)], secure_rules);
                // Contour answers plain HTTP for a secure host with a redirect to HTTPS
                // (but for `permitInsecure` routes).
                plain_rules.push(json!({
                    "filters": [{"type": "RequestRedirect",
                                 "requestRedirect": {"scheme": "https", "statusCode": 301}}],
                }));
                self.route(
                    ns,
                    &format!("{name}-http"),
                    &host,
                    vec![self.parent("http")],
                    plain_rules,
                );
            }
            Some(_) => self.left_out(
                &what,
                "virtualhost.tls",
                "passthrough without tcpproxy serves nothing",
            ),
            None => self.route(ns, name, &host, vec![self.parent("http")], plain_rules),
        }
    }

    fn tcp_proxy(
        &mut self,
        ns: &str,
        name: &str,
        what: &str,
        host: &str,
        tls: Option<&api::Tls>,
        tcp: &api::TcpProxy,
    ) {
        let Some(t) = tls else {
            self.left_out(what, "spec.tcpproxy", "needs virtualhost.tls");
            return;
        };
        if tcp.include.is_some() || tcp.includes.is_some() {
            self.left_out(
                what,
                "spec.tcpproxy.include",
                "not converted; name the services in the root",
            );
        }
        if tcp.load_balancer_policy.is_some() || tcp.health_check_policy.is_some() {
            self.left_out(
                what,
                "spec.tcpproxy",
                "loadBalancerPolicy and healthCheckPolicy have no equivalent",
            );
        }
        let secret = (!t.passthrough).then_some(t.secret_name.as_str());
        let listener = self.secure_listener(ns, host, secret, true);
        let backends: Vec<Value> = tcp
            .services
            .iter()
            .map(|s| json!({"name": s.name, "port": s.port, "weight": s.weight.unwrap_or(1)}))
            .collect();
        self.out.objects.push(json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "TLSRoute",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "parentRefs": [self.parent(&listener)],
                "hostnames": [host],
                "rules": [{"backendRefs": backends}],
            },
        }));
    }

    /// The routes of `proxy` and of the proxies it includes, each with the conditions
    /// that lead to it.
    fn flatten(
        &mut self,
        ns: &str,
        name: &str,
        proxy: &'a HTTPProxy,
        conditions: Vec<api::MatchCondition>,
        seen: &mut BTreeSet<(String, String)>,
        out: &mut Vec<Flat<'a>>,
    ) {
        if !seen.insert((ns.to_string(), name.to_string())) {
            return;
        }
        for route in &proxy.spec.routes {
            let mut all = conditions.clone();
            all.extend(route.conditions.iter().cloned());
            out.push(Flat {
                route,
                conditions: all,
                from: format!("{ns}/{name}"),
                namespace: ns.to_string(),
            });
        }
        for include in &proxy.spec.includes {
            let child_ns = include.namespace.as_deref().unwrap_or(ns);
            let objects: &'a Objects = self.objects;
            let child = objects.get::<HTTPProxy>(child_ns, &include.name);
            match child {
                Some(child) => {
                    let mut all = conditions.clone();
                    all.extend(include.conditions.iter().cloned());
                    self.flatten(child_ns, &include.name, child, all, seen, out);
                }
                None => self.left_out(
                    &format!("HTTPProxy {ns}/{name}"),
                    "includes",
                    &format!("{child_ns}/{} is not among the objects", include.name),
                ),
            }
        }
    }

    fn route(&mut self, ns: &str, name: &str, host: &str, parents: Vec<Value>, rules: Vec<Value>) {
        if rules.is_empty() {
            return;
        }
        let mut spec = json!({"parentRefs": parents, "rules": rules});
        if !host.is_empty() {
            spec["hostnames"] = json!([host]);
        }
        self.out.objects.push(json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }));
    }
}

fn listener_name(prefix: &str, host: &str) -> String {
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{prefix}-{}", host.trim_matches('-'))
}

mod ingress;
mod rule;
