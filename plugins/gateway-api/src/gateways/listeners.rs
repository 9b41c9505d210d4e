//! A Gateway's (or ListenerSet's) listeners: where on Envoy each goes, whether it
//! conflicts with one served before it, its certificate, and its status.

use super::*;

/// Where the listeners of the Gateway being served go.
pub(super) enum Site {
    /// The fleet's shared listeners.
    Shared,
    /// Listeners of its own at this address.
    Own(IpAddr),
    /// Nowhere: its address cannot be its own (why).
    Nowhere(String),
}

/// The Envoy ports Gateway listeners have claimed so far (by address for Gateways with
/// one of their own), and where new ones listen.
pub(super) struct Envoy {
    pub(super) ports: BTreeMap<PortKey, Port>,
    pub(super) http_address: String,
    pub(super) https_address: String,
    pub(super) site: Site,
}

/// Serves the listeners of `owner` (a Gateway or a ListenerSet): their Envoy listeners,
/// their status; returns those accepted and how many are programmed. A listener
/// conflicting with one served before it is `Conflicted` (and, in a ListenerSet, not
/// accepted); the earlier keeps serving. A listener whose certificate does not resolve
/// is accepted (routes attach to it) but not programmed.
pub(super) fn serve_listeners(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    (owner, gateway, frontend): (&ObjectKey, &ObjectKey, Option<&GatewayTlsFrontend>),
    listeners: &[GatewayListeners],
    envoy: &mut Envoy,
    ir: &mut isobar_sdk::Ir,
    status: &mut StatusReport,
) -> (Vec<Served>, usize) {
    let mut served = Vec::new();
    let mut programmed = 0;
    for listener in listeners {
        let checked = check_listener(owner, listener, status);
        let Some((family, resolved, kinds, from)) = checked else {
            continue;
        };
        let own = match &envoy.site {
            Site::Own(ip) => Some(*ip),
            Site::Shared | Site::Nowhere(_) => None,
        };
        // A Gateway with an address of its own listens at its listeners' own ports.
        let port = match own {
            Some(_) => u16::try_from(listener.port).unwrap_or(u16::MAX),
            None => container_port(listener.port),
        };
        let hostname = listener.hostname.clone();
        let gw = status.gateway(owner);
        let udp = family == Family::Udp;
        if let Some((reason, message)) =
            conflict(envoy, (own, port, udp), family, listener.port, &hostname)
        {
            gw.set_listener(&listener.name, resolved);
            report_conflict(gw, owner, &listener.name, reason, message);
            continue;
        }
        gw.set_listener(
            &listener.name,
            Condition::new("Conflicted", false, "NoConflicts", ""),
        );
        let secured = secure(
            ctx,
            grants,
            (owner, gateway, frontend),
            listener,
            family,
            ir,
            status,
        );
        let (secret, client_validation) = match secured {
            Ok(secured) => secured,
            Err(frontend_ca) => {
                if !frontend_ca {
                    served.push(Served {
                        gateway: owner.clone(),
                        name: listener.name.clone(),
                        port: listener.port,
                        hostname,
                        envoy: String::new(),
                        family,
                        secret: None,
                        from,
                        kinds,
                        programmed: false,
                        client_validation: None,
                    });
                }
                continue;
            }
        };
        let gw = status.gateway(owner);
        gw.set_listener(&listener.name, resolved);
        if let Site::Nowhere(message) = &envoy.site {
            gw.set_listener(
                &listener.name,
                Condition::new("Programmed", false, "AddressNotUsable", message.clone()),
            );
            served.push(Served {
                gateway: owner.clone(),
                name: listener.name.clone(),
                port: listener.port,
                hostname,
                envoy: String::new(),
                family,
                secret,
                from,
                kinds,
                programmed: false,
                client_validation,
            });
            continue;
        }
        let name = claim_port(
            envoy,
            ir,
            (own, port, udp),
            family,
            listener.port,
            &hostname,
        );
        gw.set_listener(
            &listener.name,
            Condition::new("Programmed", true, "Programmed", ""),
        );
        programmed += 1;
        served.push(Served {
            gateway: owner.clone(),
            name: listener.name.clone(),
            port: listener.port,
            hostname,
            envoy: name,
            family,
            secret,
            from,
            kinds,
            programmed: true,
            client_validation,
        });
    }
    (served, programmed)
}

/// A listener's certificate (put in the IR) and the client certificates it asks for.
/// When either cannot be had, its conditions say why and the error says whether it was
/// the clients' CA (then the listener is not accepted: never served open).
fn secure(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    (owner, gateway, frontend): (&ObjectKey, &ObjectKey, Option<&GatewayTlsFrontend>),
    listener: &GatewayListeners,
    family: Family,
    ir: &mut isobar_sdk::Ir,
    status: &mut StatusReport,
) -> Result<
    (
        Option<String>,
        Option<Box<isobar_sdk::ir::ClientValidation>>,
    ),
    bool,
> {
    let passthrough = listener.tls.as_ref().and_then(|t| t.mode.as_ref())
        == Some(&GatewayListenersTlsMode::Passthrough);
    let secret = match family {
        Family::Http | Family::Tcp | Family::Udp => Ok(None),
        Family::Tls if passthrough => Ok(None),
        Family::Https | Family::Tls => certificate(ctx, grants, owner, listener).map(Some),
    };
    // The client certificates it asks for: a CA reference that does not resolve
    // leaves no valid CA, and the listener is not accepted (never served open).
    let client_validation = match family {
        Family::Https => crate::frontend::validation(ctx, grants, gateway, frontend, listener.port)
            .map_err(|e| (e, true)),
        _ => Ok(None),
    };
    let secured = secret
        .map_err(|e| (e, false))
        .and_then(|s| client_validation.map(|v| (s, v)));
    match secured {
        Ok((secret, validation)) => {
            let sds = secret.map(|(sds, secret)| {
                ir.add_secret(&sds, secret);
                sds
            });
            Ok((sds, validation))
        }
        Err(((reason, message), frontend_ca)) => {
            let gw = status.gateway(owner);
            if frontend_ca {
                gw.set_listener(
                    &listener.name,
                    Condition::new(
                        "Accepted",
                        false,
                        "NoValidCACertificate",
                        "no valid CA certificate to validate clients with",
                    ),
                );
            }
            gw.set_listener(
                &listener.name,
                Condition::new("ResolvedRefs", false, reason, message),
            );
            gw.set_listener(
                &listener.name,
                Condition::new("Programmed", false, "Invalid", message_of(reason)),
            );
            Err(frontend_ca)
        }
    }
}

/// Why a listener of `family` for `hostname` on Envoy port `at` conflicts with one
/// served before it, if it does (a Gateway whose address is not usable conflicts with
/// nothing: it claims no port).
fn conflict(
    envoy: &Envoy,
    at: PortKey,
    family: Family,
    gateway_port: i32,
    hostname: &Option<String>,
) -> Option<(&'static str, String)> {
    match envoy.ports.get(&at) {
        _ if matches!(envoy.site, Site::Nowhere(_)) => None,
        Some((f, name, _)) if *f != family.protocol() => Some((
            "ProtocolConflict",
            format!("port {gateway_port} is taken by listener {name}"),
        )),
        Some((_, _, hostnames)) if hostnames.contains(hostname) => Some((
            "HostnameConflict",
            "another listener on this port has the same hostname".to_string(),
        )),
        _ => None,
    }
}

/// A conflicting listener's conditions (in a ListenerSet, it is not accepted either).
fn report_conflict(
    gw: &mut isobar_sdk::condition::GatewayStatus,
    owner: &ObjectKey,
    listener: &str,
    reason: &str,
    message: String,
) {
    if owner.kind == crate::kinds::LISTENER_SET {
        gw.set_listener(
            listener,
            Condition::new("Accepted", false, reason, message.clone()),
        );
    }
    gw.set_listener(
        listener,
        Condition::new("Conflicted", true, reason, message),
    );
    gw.set_listener(
        listener,
        Condition::new("Programmed", false, reason, "listener conflicts"),
    );
}

/// Envoy port `at` claimed for a listener of `family` and `hostname`: the name of the
/// Envoy listener there, made (and added to the IR) by the first listener on it.
fn claim_port(
    envoy: &mut Envoy,
    ir: &mut isobar_sdk::Ir,
    at: PortKey,
    family: Family,
    gateway_port: i32,
    hostname: &Option<String>,
) -> String {
    let (own, port, _) = at;
    let prefix = match family.protocol() {
        Protocol::Http => "http",
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        _ => "https",
    };
    let name = match envoy.ports.get_mut(&at) {
        Some((_, name, hostnames)) => {
            hostnames.push(hostname.clone());
            name.clone()
        }
        None => {
            let name = match own {
                Some(ip) => format!("{prefix}-{gateway_port}-{ip}"),
                None => format!("{prefix}-{gateway_port}"),
            };
            envoy.ports.insert(
                at,
                (family.protocol(), name.clone(), vec![hostname.clone()]),
            );
            name
        }
    };
    if !ir.listeners.contains_key(&name) {
        let (http_address, https_address) = match own {
            Some(ip) => (ip.to_string(), ip.to_string()),
            None => (envoy.http_address.clone(), envoy.https_address.clone()),
        };
        let l = match family {
            Family::Http => Listener::http(&name, &http_address, port),
            Family::Tcp => Listener::tcp(&name, &http_address, port),
            Family::Udp => Listener::udp(&name, &http_address, port),
            Family::Https | Family::Tls => Listener::https(
                &name,
                &https_address,
                port,
                RouteNames {
                    prefix: name.clone(),
                    fallback: format!("{name}/fallbackcert"),
                },
            ),
        };
        ir.listeners.insert(name.clone(), l);
    }
    name
}

/// Why a listener whose references do not resolve is not programmed.
pub(super) fn message_of(reason: &str) -> &'static str {
    if reason.contains("CACertificate") {
        "no usable client CA certificate"
    } else {
        "no usable certificate"
    }
}

/// Checks one listener, setting its Accepted condition and supported kinds: its family,
/// its ResolvedRefs as far as route kinds go, whether it takes HTTPRoutes and from
/// where. `None`: not served.
pub(super) fn check_listener(
    gateway: &ObjectKey,
    listener: &GatewayListeners,
    status: &mut StatusReport,
) -> Option<(Family, Condition, Vec<&'static str>, From)> {
    let gw = status.gateway(gateway);
    let name = listener.name.as_str();
    let family = match listener.protocol.as_str() {
        "HTTP" => Family::Http,
        "HTTPS" => Family::Https,
        "TLS" => Family::Tls,
        "TCP" => Family::Tcp,
        "UDP" => Family::Udp,
        other => {
            gw.set_listener(
                name,
                Condition::new(
                    "Accepted",
                    false,
                    "UnsupportedProtocol",
                    format!("protocol {other:?} is not supported"),
                ),
            );
            gw.set_listener(
                name,
                Condition::new("Programmed", false, "Invalid", "not accepted"),
            );
            return None;
        }
    };
    let entry = gw.listener(name);
    entry.supported_kinds = Vec::new();
    // allowedRoutes.kinds: of the kinds this listener can take, those it names (all
    // when it names none).
    let named = listener
        .allowed_routes
        .as_ref()
        .and_then(|a| a.kinds.clone())
        .unwrap_or_default();
    let mut invalid_kinds = false;
    let mut kinds: Vec<&'static str> = Vec::new();
    if named.is_empty() {
        kinds.extend(family.route_kinds());
    }
    for k in &named {
        let group = k.group.as_deref().unwrap_or(GROUP);
        match family.route_kinds().iter().find(|r| **r == k.kind) {
            Some(kind) if group == GROUP => kinds.push(kind),
            _ => invalid_kinds = true,
        }
    }
    kinds.dedup();
    for kind in &kinds {
        entry.supported_kinds.push(RouteGroupKind {
            group: GROUP.to_string(),
            kind: kind.to_string(),
        });
    }
    let from = match listener
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref())
    {
        None => From::Same,
        Some(n) => match n.from {
            Some(GatewayListenersAllowedRoutesNamespacesFrom::All) => From::All,
            Some(GatewayListenersAllowedRoutesNamespacesFrom::Selector) => {
                let selector = n.selector.as_ref().map(|s| label_selector!(s));
                From::Selector(selector.unwrap_or_default())
            }
            Some(GatewayListenersAllowedRoutesNamespacesFrom::Same) | None => From::Same,
        },
    };
    if let Some(h) = &listener.hostname
        && !hosts::valid(h)
    {
        gw.set_listener(
            name,
            Condition::new(
                "Accepted",
                false,
                "Invalid",
                format!("invalid hostname {h:?}"),
            ),
        );
        gw.set_listener(
            name,
            Condition::new("Programmed", false, "Invalid", "not accepted"),
        );
        return None;
    }
    gw.set_listener(name, Condition::new("Accepted", true, "Accepted", ""));
    let resolved = if invalid_kinds {
        Condition::new(
            "ResolvedRefs",
            false,
            "InvalidRouteKinds",
            "allowedRoutes.kinds names a kind this listener cannot take",
        )
    } else {
        Condition::new("ResolvedRefs", true, "ResolvedRefs", "")
    };
    Some((family, resolved, kinds, from))
}

/// The certificate of an HTTPS listener: its first `certificateRefs` entry, a Secret in
/// the Gateway's namespace or one a ReferenceGrant lets it use.
pub(super) fn certificate(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    gateway: &ObjectKey,
    listener: &GatewayListeners,
) -> Result<(String, isobar_sdk::ir::ServedSecret), (&'static str, String)> {
    let tls = listener.tls.as_ref();
    if listener.protocol == "HTTPS"
        && tls.and_then(|t| t.mode.as_ref()) == Some(&GatewayListenersTlsMode::Passthrough)
    {
        return Err((
            "InvalidTLSConfiguration",
            "an HTTPS listener terminates TLS (mode Passthrough is for TLS listeners)".into(),
        ));
    }
    let Some(cert) = tls
        .and_then(|t| t.certificate_refs.as_ref())
        .and_then(|c| c.first())
    else {
        return Err((
            "InvalidCertificateRef",
            "an HTTPS listener needs tls.certificateRefs".into(),
        ));
    };
    let group = cert.group.as_deref().unwrap_or("");
    let kind = cert.kind.as_deref().unwrap_or("Secret");
    if !group.is_empty() || kind != "Secret" {
        return Err((
            "InvalidCertificateRef",
            format!("certificateRefs: {kind} of group {group:?} is not a Secret"),
        ));
    }
    let namespace = cert.namespace.as_deref().unwrap_or(&gateway.namespace);
    if namespace != gateway.namespace
        && !grants.permits(
            &gateway.namespace,
            gateway.kind,
            namespace,
            "",
            "Secret",
            &cert.name,
        )
    {
        return Err((
            "RefNotPermitted",
            format!(
                "no ReferenceGrant in {namespace} lets {}s of {} use Secret {}",
                gateway.kind, gateway.namespace, cert.name
            ),
        ));
    }
    // The grant was checked above: the Secret is used as from its own namespace.
    ctx.certificate(namespace, &cert.name)
        .map_err(|(_, message)| ("InvalidCertificateRef", message))
}
