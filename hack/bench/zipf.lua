-- wrk script for hack/bench-proxy.sh's many-hosts round: every request asks for one of
-- HOSTS hostnames (t0 to tN-1.bench.example.com), host k (from 1) with probability
-- proportional to 1/k, as a SaaS's tenants share its traffic: a few hot, a long tail.
local n = tonumber(os.getenv("HOSTS") or "10000")
local cdf, sum = {}, 0
for k = 1, n do
  sum = sum + 1 / k
  cdf[k] = sum
end
for k = 1, n do
  cdf[k] = cdf[k] / sum
end

local names = {}
for k = 1, n do
  names[k] = "t" .. (k - 1) .. ".bench.example.com"
end

request = function()
  local u, lo, hi = math.random(), 1, n
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  wrk.headers["Host"] = names[lo]
  return wrk.format(nil)
end
