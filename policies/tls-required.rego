# Every host must be served over TLS: a root HTTPProxy needs `virtualhost.tls`
# (a certificate or passthrough), an Ingress needs each rule host listed in `spec.tls`.
# Namespaces in plugins.opa.data.tls-required.exempt-namespaces are not checked.
package isobar.tls_required

import rego.v1

deny contains msg if {
	input.kind == "HTTPProxy"
	not exempt
	fqdn := input.object.spec.virtualhost.fqdn
	not proxy_has_tls
	msg := sprintf("HTTPProxy host %q must be served over TLS (set virtualhost.tls)", [fqdn])
}

deny contains msg if {
	input.kind == "Ingress"
	not exempt
	some rule in input.object.spec.rules
	host := rule.host
	not ingress_tls_host(host)
	msg := sprintf("Ingress host %q must be listed under spec.tls with a secret", [host])
}

proxy_has_tls if input.object.spec.virtualhost.tls.secretName != ""

proxy_has_tls if input.object.spec.virtualhost.tls.passthrough == true

ingress_tls_host(host) if {
	some tls in input.object.spec.tls
	some h in tls.hosts
	lower(h) == lower(host)
	tls.secretName != ""
}

exempt if {
	some ns in object.get(object.get(data.config, "tls-required", {}), "exempt-namespaces", [])
	ns == object.get(input.object.metadata, "namespace", "default")
}
