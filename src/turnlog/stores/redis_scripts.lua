-- The Lua scripts of RedisStore / RedisClusterStore. Each script starts at a line
-- "--! name" and runs to the next one; redis.py loads them by name (EVALSHA, reloaded on NOSCRIPT).
--
-- A session's own keys share one hash tag, so every script below touches one slot (the append
-- script of a standalone store also touches the event-id keys, which is fine on one node):
--   KEYS[1] <p>:{<sid>}:s  hash: inc (incarnation), c (created, us), x (expires, us or ''),
--                          md (metadata JSON), v (version), b (newest boundary seq, 0 = none),
--                          bv (seqs before b the boundary names, comma-separated),
--                          kx (key expiry, unix ms, or '')
--   KEYS[2] <p>:{<sid>}:e  hash: seq -> record (a JSON header line, then the codec body)
--   KEYS[3] <p>:{<sid>}:i  hash: event id -> kind .. seq (kind M message, C compaction, E other)
--   KEYS[4] <p>:{<sid>}:r  set: event ids reserved for this session whose append failed (cluster)
--   KEYS[5] <p>:{<sid>}:k  set: index keys this incarnation was added to

--! save
-- Create or update a session.
-- ARGV: mode ('create' | 'save'), inc (new incarnation), expected inc ('' = believed absent),
--       created us, expires us (''), metadata JSON, expires ms (''), grace ms ('' = no key expiry),
--       then the index keys to record.
-- Returns {'ok', inc} | {'exists'} | {'changed'} (absent/present/incarnation not as believed).
local cur = redis.call('HGET', KEYS[1], 'inc')
if cur then
  if ARGV[1] == 'create' then
    if cur == ARGV[2] then return {'ok', cur} end -- our own create, retried
    return {'exists'}
  end
  if cur ~= ARGV[3] then return {'changed'} end
  redis.call('HSET', KEYS[1], 'x', ARGV[5], 'md', ARGV[6])
else
  if ARGV[3] ~= '' then return {'changed'} end
  cur = ARGV[2]
  redis.call('HSET', KEYS[1], 'inc', cur, 'c', ARGV[4], 'x', ARGV[5], 'md', ARGV[6],
    'v', '0', 'b', '0', 'bv', '')
end
for i = 9, #ARGV do redis.call('SADD', KEYS[5], ARGV[i]) end
local kx = ''
if ARGV[7] ~= '' and ARGV[8] ~= '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  kx = string.format('%d', math.max(tonumber(ARGV[7]), now) + tonumber(ARGV[8]))
end
redis.call('HSET', KEYS[1], 'kx', kx)
for i = 1, 5 do
  if kx == '' then redis.call('PERSIST', KEYS[i]) else redis.call('PEXPIREAT', KEYS[i], kx) end
end
return {'ok', cur}

--! delete
-- Delete a session's keys: always (ARGV[1] == ''), or only if it expires at or before ARGV[1]
-- (us). ARGV[2]: the incarnation to delete ('' = whichever).
-- Returns {'gone'} | {'changed'} | {'kept', expires} | {'deleted', inc, ids, reserved, indexkeys}.
local m = redis.call('HMGET', KEYS[1], 'inc', 'x')
if not m[1] then return {'gone'} end
if ARGV[2] ~= '' and m[1] ~= ARGV[2] then return {'changed'} end
if ARGV[1] ~= '' and (m[2] == '' or tonumber(m[2]) > tonumber(ARGV[1])) then
  return {'kept', m[2]}
end
local ids = redis.call('HKEYS', KEYS[3])
local reserved = redis.call('SMEMBERS', KEYS[4])
local indexed = redis.call('SMEMBERS', KEYS[5])
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return {'deleted', m[1], ids, reserved, indexed}

--! append
-- The version-checked, all-or-nothing append of a batch.
-- ARGV[1] expected version (-1: append at the end, whatever the version)
-- ARGV[2] the incarnation the caller reserved ids for ('' on a standalone store: not checked)
-- ARGV[3] the session id (an event-id key holds session id .. NUL .. incarnation)
-- ARGV[4] '1' when KEYS[5 + i] is the event-id key of event i (standalone), '0' (cluster)
-- ARGV[5] n, the number of events
-- ARGV[6] r, the number of ids a boundary names that must be message events of the log;
--         -1 when the batch is invalid (check versions and retries only, then refuse)
-- then n times: id, kind (M/C/E), record, k, and k ids (for C: the ids its view names)
-- then r ids.
-- Returns {'ok', version, appended} | {'nosession'} | {'changed'} | {'foreign', id, owner}
--       | {'conflict', version} | {'unknown', id} | {'invalid'}
local meta, ev, ids, reserved = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local st = redis.call('HMGET', meta, 'inc', 'v', 'kx')
local inc = st[1]
if not inc then return {'nosession'} end
if ARGV[2] ~= '' and ARGV[2] ~= inc then return {'changed'} end
local ver = tonumber(st[2])
local owner = ARGV[3] .. '\0' .. inc
local idkeys = ARGV[4] == '1'
local n, r = tonumber(ARGV[5]), tonumber(ARGV[6])
local at = 7
local fresh = {}
for i = 1, n do
  local id, kind, rec, k = ARGV[at], ARGV[at + 1], ARGV[at + 2], tonumber(ARGV[at + 3])
  local named = {}
  for j = 1, k do named[j] = ARGV[at + 3 + j] end
  at = at + 4 + k
  if redis.call('HEXISTS', ids, id) == 0 then
    if idkeys then
      local o = redis.call('GET', KEYS[4 + i])
      if o and o ~= owner then return {'foreign', id, o} end
    end
    fresh[#fresh + 1] = {i, id, kind, rec, named}
  end
end
if #fresh == 0 then return {'ok', ver, 0} end

local function keep_reservations()
  if idkeys then return end
  for _, f in ipairs(fresh) do redis.call('SADD', reserved, f[2]) end
  if st[3] and st[3] ~= '' then redis.call('PEXPIREAT', reserved, st[3]) end
end

local expected = tonumber(ARGV[1])
if expected >= 0 and expected ~= ver then
  keep_reservations()
  return {'conflict', ver}
end
if r < 0 then
  keep_reservations()
  return {'invalid'}
end
for j = 0, r - 1 do
  local s = redis.call('HGET', ids, ARGV[at + j])
  if not s or string.sub(s, 1, 1) ~= 'M' then
    keep_reservations()
    return {'unknown', ARGV[at + j]}
  end
end

local bseq, bnamed = nil, nil
for j, f in ipairs(fresh) do
  local seq = ver + j
  redis.call('HSET', ev, seq, f[4])
  redis.call('HSET', ids, f[2], f[3] .. seq)
  if idkeys then redis.call('SET', KEYS[4 + f[1]], owner) end
  if f[3] == 'C' then bseq, bnamed = seq, f[5] end
end
if bseq then
  local before = {}
  for _, id in ipairs(bnamed) do
    local s = redis.call('HGET', ids, id)
    if s then
      local q = tonumber(string.sub(s, 2))
      if q < bseq then before[#before + 1] = q end
    end
  end
  redis.call('HSET', meta, 'b', bseq, 'bv', table.concat(before, ','))
end
ver = ver + #fresh
redis.call('HSET', meta, 'v', ver)
if not idkeys then
  for _, f in ipairs(fresh) do redis.call('SREM', reserved, f[2]) end
end
if st[3] and st[3] ~= '' then
  redis.call('PEXPIREAT', ev, st[3])
  redis.call('PEXPIREAT', ids, st[3])
end
return {'ok', ver, #fresh}

--! view
-- The records the active view needs: those the newest boundary names (before it), the boundary
-- and every record after it; the whole log when there is no boundary.
-- Returns false (no session) | {version, boundary seq, named seqs, record, record, ...}
local m = redis.call('HMGET', KEYS[1], 'inc', 'v', 'b', 'bv')
if not m[1] then return false end
local ver, b = tonumber(m[2]), tonumber(m[3])
local seqs = {}
if b > 0 then
  for s in string.gmatch(m[4], '%d+') do seqs[#seqs + 1] = s end
end
for s = math.max(b, 1), ver do seqs[#seqs + 1] = s end
local out = {ver, b, m[4]}
for i = 1, #seqs, 1000 do
  local chunk = {}
  for j = i, math.min(i + 999, #seqs) do chunk[#chunk + 1] = seqs[j] end
  local got = redis.call('HMGET', KEYS[2], unpack(chunk))
  for j = 1, #chunk do out[#out + 1] = got[j] end
end
return out

--! range
-- Records ARGV[1]..ARGV[2] of the log (clipped at its version).
-- Returns false (no session) | {incarnation, version, record, record, ...}
local m = redis.call('HMGET', KEYS[1], 'inc', 'v')
if not m[1] then return false end
local ver = tonumber(m[2])
local out = {m[1], ver}
local hi = math.min(tonumber(ARGV[2]), ver)
for i = tonumber(ARGV[1]), hi, 1000 do
  local chunk = {}
  for s = i, math.min(i + 999, hi) do chunk[#chunk + 1] = s end
  local got = redis.call('HMGET', KEYS[2], unpack(chunk))
  for j = 1, #chunk do out[#out + 1] = got[j] end
end
return out

--! release
-- Delete KEYS[1] if it still holds ARGV[1] (an event-id claim of a dead incarnation).
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
