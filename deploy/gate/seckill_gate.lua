-- The sold-out gate: nginx answers 409 sold_out itself for a product the
-- service said was sold out, so that those refusals never reach a replica.
--
-- It learns "sold out" from the service's own refusals (the header
-- X-Seckill-Sold-Out on a 409, set only when the replica's sold-out flag
-- answered) and keeps it in the shared dict for `ttl` seconds. A replica
-- POSTs /gate/stock-back?products=… when its flag clears (a unit came back,
-- a reset, a rebuild); the gate then forgets those products and, until
-- `guard` seconds later, ignores any sold-out answer to a request that
-- started before that notice: such an answer may have been computed before
-- the stock came back. A lost notice costs at most `ttl` seconds of refusals.
-- docs/GATE.md has the reasoning.
local M = {}

local dict = ngx.shared.seckill_gate
local cfg = { ttl = 5, guard = 120, secret = "" }

-- configure runs in init_by_lua: opts.ttl and opts.guard in seconds; the
-- control secret comes from the environment (nginx's `env` directive).
function M.configure(opts)
    opts = opts or {}
    cfg.ttl = opts.ttl or cfg.ttl
    cfg.guard = opts.guard or cfg.guard
    cfg.secret = os.getenv("SECKILL_GATE_SECRET") or ""
end

-- A product id as the service accepts it: a JSON integer without leading
-- zeros that fits an int64 (19 digits or fewer, checked loosely).
local function valid_id(s)
    return type(s) == "string" and #s <= 18 and s:match("^[1-9]%d*$") ~= nil
end

-- product_of finds the product of an order body without a JSON library
-- (Debian's module ships none): the one "product_id" member, an integer.
-- A body it cannot read goes to the service, which answers it properly.
local function product_of(body)
    local lower = body:lower() -- the service matches member names case-insensitively
    local n = 0
    for _ in lower:gmatch('"product_id"') do
        n = n + 1
    end
    if n ~= 1 then
        return nil
    end
    local id = lower:match('"product_id"%s*:%s*(%d+)%s*[,}]')
    if valid_id(id) then
        return id
    end
    return nil
end

local refusal = '{"code":"sold_out","error":"stock: sold out (answered by the gate)"}'

-- access runs before POST /api/orders is proxied.
function M.access()
    if ngx.req.get_method() ~= "POST" then
        return
    end
    ngx.req.read_body()
    local body = ngx.req.get_body_data() -- nil when buffered to a file: too big to be an order
    if not body then
        return
    end
    local id = product_of(body)
    if not id or not dict:get("so:" .. id) then
        return
    end
    dict:incr("answered", 1, 0)
    ngx.status = 409
    ngx.header["Content-Type"] = "application/json; charset=utf-8"
    ngx.header["X-Seckill-Gate"] = "sold-out"
    ngx.print(refusal)
    return ngx.exit(ngx.HTTP_OK) -- keeps the 409 set above
end

-- learn runs on the upstream's response headers.
function M.learn()
    local id = ngx.header["X-Seckill-Sold-Out"]
    if not id then
        return
    end
    ngx.header["X-Seckill-Sold-Out"] = nil -- between the service and the gate
    if ngx.status ~= 409 or not valid_id(id) then
        return
    end
    local started = ngx.req.start_time()
    if started <= (dict:get("av:" .. id) or 0) then
        return -- answered before stock came back
    end
    dict:set("so:" .. id, true, cfg.ttl)
    -- A notice that arrived meanwhile (another worker) deleted nothing yet
    -- or before this set: look again, so that it always wins.
    if started <= (dict:get("av:" .. id) or 0) then
        dict:delete("so:" .. id)
    end
end

local function answer(status, body)
    ngx.status = status
    ngx.header["Content-Type"] = "application/json; charset=utf-8"
    ngx.print(body)
    return ngx.exit(ngx.HTTP_OK)
end

-- authorized: the shared secret when one is configured, else loopback only.
-- The secrets are compared through their digests, not byte by byte.
local function authorized()
    if cfg.secret == "" then
        return ngx.var.remote_addr == "127.0.0.1"
    end
    local got = ngx.req.get_headers()["X-Gate-Secret"]
    return type(got) == "string" and ngx.sha1_bin(got) == ngx.sha1_bin(cfg.secret)
end

-- control serves the control endpoint: POST /gate/stock-back?products=1,2
-- and GET /gate/state.
function M.control()
    if not authorized() then
        return answer(401, '{"code":"unauthorized","error":"the gate\'s control endpoint needs X-Gate-Secret (or loopback when none is set)"}')
    end
    local uri, method = ngx.var.uri, ngx.req.get_method()
    if uri == "/gate/stock-back" and method == "POST" then
        local arg = ngx.req.get_uri_args().products
        if type(arg) ~= "string" then
            return answer(400, '{"code":"bad_request","error":"products=1,2,… is required"}')
        end
        local ids = {}
        for id in arg:gmatch("[^,]+") do
            if not valid_id(id) or #ids >= 1000 then
                return answer(400, '{"code":"bad_request","error":"products must be up to 1000 positive integers"}')
            end
            ids[#ids + 1] = id
        end
        ngx.update_time()
        local now = ngx.now()
        for _, id in ipairs(ids) do
            dict:set("av:" .. id, now, cfg.guard) -- before the delete: see learn
            dict:delete("so:" .. id)
        end
        return answer(200, '{"forgotten":' .. #ids .. '}')
    end
    if uri == "/gate/state" and method == "GET" then
        local ids = {}
        for _, k in ipairs(dict:get_keys(10000)) do
            local id = k:match("^so:(%d+)$")
            if id and dict:get(k) then
                ids[#ids + 1] = id
            end
        end
        return answer(200, '{"sold_out":[' .. table.concat(ids, ",") .. '],"answered":'
            .. string.format("%d", dict:get("answered") or 0) .. '}')
    end
    return answer(404, '{"code":"not_found","error":"no such route"}')
end

return M
