# No object may claim a wildcard host (`*.example.com`): a wildcard in one tenant's
# proxy would catch traffic for names other tenants have not claimed yet.
package isobar.no_wildcard_hosts

import rego.v1

deny contains msg if {
	some host in input.hosts
	startswith(host, "*")
	msg := sprintf("wildcard host %q is not allowed", [host])
}
