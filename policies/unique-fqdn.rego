# Each host belongs to one object: a second HTTPProxy, or an HTTPProxy and an Ingress or
# a Gateway API route, claiming the same host (compared in lower case, trailing dot
# ignored) is denied. Ingresses may share a host with other Ingresses, as Kubernetes
# merges their rules; Gateway API routes with other routes, as Gateway API does.
package isobar.unique_fqdn

import rego.v1

deny contains msg if {
	some host in input.hosts
	some other in data.isobar.hosts[host]
	not is_self(other)
	not both_ingresses(other)
	not both_routes(other)
	msg := sprintf("host %q is already claimed by %s %s/%s", [host, other.kind, other.namespace, other.name])
}

is_self(other) if {
	other.kind == input.kind
	other.namespace == object_namespace
	other.name == input.object.metadata.name
}

both_ingresses(other) if {
	input.kind == "Ingress"
	other.kind == "Ingress"
}

routes := {"HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute"}

both_routes(other) if {
	input.kind in routes
	other.kind in routes
}

default object_namespace := "default"

object_namespace := input.object.metadata.namespace
