-- A wildcard virtual host's filter chain: the Host must be the server name the client
-- asked for (RFC 6066); another name the wildcard covers is answered 421.
function envoy_on_request(request_handle)
  local host = string.lower(request_handle:headers():get(":authority") or "")
  local colon = string.find(host, ":", 1, true)
  if colon ~= nil then
    host = string.sub(host, 1, colon - 1)
  end
  local sni = string.lower(request_handle:streamInfo():requestedServerName() or "")
  if host ~= sni then
    request_handle:respond({[":status"] = "421"}, "misdirected request")
  end
end
