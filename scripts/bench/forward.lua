-- wrk script for the floor server's POST /forward: a Voyado-shaped body with a fresh token each
-- time (the floor has no dedupe; the mock still sees distinct registrations).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local counter = 0
request = function()
  counter = counter + 1
  return wrk.format(nil, nil, nil,
    string.format('{"platform":"ios","push_token":"%032x","contact_id":"c-%d"}', counter, counter))
end
