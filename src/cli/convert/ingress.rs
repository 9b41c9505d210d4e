//! An Ingress as HTTPRoutes.

use super::*;

impl Converter<'_> {
    pub(super) fn ingress(&mut self, ns: &str, name: &str, ingress: &Ingress) {
        let what = format!("Ingress {ns}/{name}");
        let Some(spec) = &ingress.spec else { return };
        for key in ingress
            .metadata
            .annotations
            .iter()
            .flatten()
            .map(|(k, _)| k)
        {
            if key.starts_with("projectcontour.io/") || key.starts_with("ingress.kubernetes.io/") {
                self.left_out(&what, &format!("annotation {key}"), "not converted");
            }
        }
        let mut tls_hosts: BTreeMap<String, String> = BTreeMap::new();
        for tls in spec.tls.iter().flatten() {
            for host in tls.hosts.iter().flatten() {
                if let Some(secret) = &tls.secret_name {
                    tls_hosts.insert(host.to_ascii_lowercase(), secret.clone());
                }
            }
        }
        let mut by_host: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        if let Some(backend) = &spec.default_backend
            && let Some(b) = self.ingress_backend(ns, &what, backend)
        {
            by_host
                .entry(String::new())
                .or_default()
                .push(json!({"backendRefs": [b]}));
        }
        for rule in spec.rules.iter().flatten() {
            let host = rule.host.clone().unwrap_or_default().to_ascii_lowercase();
            for p in rule.http.iter().flat_map(|h| &h.paths) {
                let Some(b) = self.ingress_backend(ns, &what, &p.backend) else {
                    continue;
                };
                let value = p.path.clone().unwrap_or_else(|| "/".to_string());
                let kind = match p.path_type.as_str() {
                    "Exact" => "Exact",
                    "Prefix" => "PathPrefix",
                    _ => {
                        self.left_out(
                            &what,
                            &format!("path {value}"),
                            "ImplementationSpecific becomes PathPrefix (whole segments)",
                        );
                        "PathPrefix"
                    }
                };
                by_host.entry(host.clone()).or_default().push(json!({
                    "matches": [{"path": {"type": kind, "value": value}}],
                    "backendRefs": [b],
                }));
            }
        }
        for (n, (host, rules)) in by_host.into_iter().enumerate() {
            let route_name = if n == 0 {
                name.to_string()
            } else {
                format!("{name}-{n}")
            };
            let mut parents = vec![self.parent("http")];
            if let Some(secret) = tls_hosts.get(&host) {
                let listener = self.secure_listener(ns, &host, Some(secret), false);
                parents.push(self.parent(&listener));
            }
            self.route(ns, &route_name, &host, parents, rules);
        }
    }

    fn ingress_backend(
        &mut self,
        ns: &str,
        what: &str,
        backend: &k8s_openapi::api::networking::v1::IngressBackend,
    ) -> Option<Value> {
        let Some(service) = &backend.service else {
            self.left_out(what, "backend.resource", "only Service backends convert");
            return None;
        };
        let port = service.port.as_ref()?;
        let number = match (port.number, &port.name) {
            (Some(n), _) => n,
            (None, Some(port_name)) => {
                let found = self.objects.service(ns, &service.name).and_then(|s| {
                    s.ports
                        .iter()
                        .find(|p| p.name.as_deref() == Some(port_name.as_str()))
                        .map(|p| p.port)
                });
                match found {
                    Some(n) => n,
                    None => {
                        self.left_out(
                            what,
                            &format!("backend {} port {port_name}", service.name),
                            "a named port needs its Service among the objects",
                        );
                        return None;
                    }
                }
            }
            (None, None) => return None,
        };
        Some(json!({"name": service.name, "port": number}))
    }
}
