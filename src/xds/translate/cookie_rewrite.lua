-- Isobar's cookie rewriting: a fixed script. What to rewrite arrives as data in the
-- route's filter context ({cookies = {{name=..., path=..., domain=..., secure=...,
-- same_site=...}, ...}}), validated by Isobar; nothing a user writes becomes code.

local replaced = { path = true, domain = true, secure = true, samesite = true }

local function rewrite(cookie, rule)
  local parts = {}
  local first = true
  for part in string.gmatch(cookie, "[^;]+") do
    local trimmed = string.gsub(part, "^%s*(.-)%s*$", "%1")
    if first then
      parts[#parts + 1] = trimmed
      first = false
    else
      local attribute = string.lower(string.match(trimmed, "^([^=]*)") or "")
      attribute = string.gsub(attribute, "%s", "")
      local keep = not replaced[attribute]
      if attribute == "path" and rule["path"] == nil then keep = true end
      if attribute == "domain" and rule["domain"] == nil then keep = true end
      if attribute == "secure" and rule["secure"] == nil then keep = true end
      if attribute == "samesite" and rule["same_site"] == nil then keep = true end
      if keep then parts[#parts + 1] = trimmed end
    end
  end
  if rule["path"] ~= nil then parts[#parts + 1] = "Path=" .. rule["path"] end
  if rule["domain"] ~= nil then parts[#parts + 1] = "Domain=" .. rule["domain"] end
  if rule["secure"] == true then parts[#parts + 1] = "Secure" end
  if rule["same_site"] ~= nil then parts[#parts + 1] = "SameSite=" .. rule["same_site"] end
  return table.concat(parts, "; ")
end

function envoy_on_response(response_handle)
  local context = response_handle:filterContext()
  if context == nil then return end
  local rules = context:get("cookies")
  if rules == nil then return end
  local headers = response_handle:headers()
  local count = headers:getNumValues("set-cookie")
  if count == 0 then return end
  local cookies = {}
  for i = 0, count - 1 do
    local cookie = headers:getAtIndex("set-cookie", i)
    -- A cookie that is not `name=value` is left as it is.
    local name = string.match(cookie, "^%s*([^=;%s]+)=")
    for _, rule in ipairs(rules) do
      if rule["name"] == name then
        cookie = rewrite(cookie, rule)
      end
    end
    cookies[#cookies + 1] = cookie
  end
  headers:remove("set-cookie")
  for _, cookie in ipairs(cookies) do
    headers:add("set-cookie", cookie)
  end
end
