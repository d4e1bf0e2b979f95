-- wrk script: the dedupe-hit registrations of register.lua, paced to a target rate
-- (RATE requests/s over CONNS connections), for tail latency below saturation.
dofile("scripts/bench/register.lua")
local per_connection_ms = 1000 * tonumber(os.getenv("CONNS") or "64") / tonumber(os.getenv("RATE") or "1000")

function delay()
  return per_connection_ms
end
