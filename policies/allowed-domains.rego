# Each namespace may only claim hosts under the domains configured for it:
#
#   plugins.opa.data.allowed-domains:
#     team-a: ["team-a.example.com"]      # the domain itself and any host under it
#     "*": ["shared.example.com"]         # allowed to every namespace
#
# A namespace with no entry (and no "*" entry) may claim no host at all.
package isobar.allowed_domains

import rego.v1

deny contains msg if {
	some host in input.hosts
	not allowed(host)
	msg := sprintf("host %q is not in a domain namespace %q may use (allowed: %s)", [host, namespace, concat(", ", domains)])
}

default namespace := "default"

namespace := input.object.metadata.namespace

domains := array.concat(object.get(config, namespace, []), object.get(config, "*", []))

config := object.get(data.config, "allowed-domains", {})

allowed(host) if {
	some domain in domains
	host == lower(trim_suffix(domain, "."))
}

allowed(host) if {
	some domain in domains
	endswith(host, concat("", [".", lower(trim_suffix(domain, "."))]))
}
