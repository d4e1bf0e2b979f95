-- wrk script: POST registrations, each with its own session token from a pool.
-- MODE=hit: token i always pairs with session i, so after the warm-up every request is a dedupe hit.
-- MODE=miss: every request carries a push token never sent before, so every request is forwarded.
-- Also loaded by paced.lua, which adds a delay() for a target rate.
local sessions = {}
local mode = os.getenv("MODE") or "hit"
local app = os.getenv("APP") or "bench"
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

local prepared = {}

local function build(i, token)
  -- contact_id equals the session's contact, so PushWarden accepts it and nginx's proxy
  -- baseline sends the mock a body it accepts too.
  local body = '{"platform":"android","push_token":"' .. token .. '","contact_id":"contact-' .. i .. '"}'
  local headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. sessions[i + 1] }
  return wrk.format("POST", "/v1/apps/" .. app .. "/installations", headers, body)
end

function init(args)
  for line in io.lines(os.getenv("SESSIONS")) do sessions[#sessions + 1] = line end
  thread_id = tid or 0
  -- Each thread starts its own share of the pool, so together they cover it once as fast as
  -- they can (a warm-up, the Redis-bytes row), whatever the pool's size.
  counter = thread_id * math.floor(#sessions / (tonumber(os.getenv("WRK_THREADS")) or 2))
  if mode == "hit" then
    -- Built once: the load generator shares the cores with the server, so each request should
    -- cost it as little as nginx's plain GET does.
    for i = 0, #sessions - 1 do
      prepared[i] = build(i, string.format("bench-hit-token-%08d-aaaaaaaaaaaaaaaaaaaa", i))
    end
  end
end

request = function()
  counter = counter + 1
  local i = counter % #sessions
  if mode == "hit" then
    return prepared[i]
  end
  return build(i, string.format("bench-miss-token-%s-%d-%d-aaaaaaaaaaaa", os.getenv("RUN_ID") or "x", thread_id, counter))
end

-- STATUSES=1: count the answers by status and print them at the end (which failures a row had).
-- Off by default: a response callback costs the load generator a Lua call per request.
if os.getenv("STATUSES") then
  statuses = {}
  response = function(status)
    statuses[status] = (statuses[status] or 0) + 1
  end
  done = function()
    local total = {}
    for _, thread in ipairs(threads) do
      for status, count in pairs(thread:get("statuses")) do total[status] = (total[status] or 0) + count end
    end
    for status, count in pairs(total) do io.write(string.format("status %d: %d\n", status, count)) end
  end
end
