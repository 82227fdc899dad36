-- The Lua scripts of RedisStore / RedisClusterStore. Each script starts at a line
-- "--! name" and runs to the next one; layout.py loads them by name (EVALSHA, reloaded on NOSCRIPT).
--
-- A session's keys share one hash tag, so every script below touches one slot (the append
-- script of a standalone store also touches the event-id keys, which is fine on one node):
--   KEYS[1] <p>:{<sid>}:s  hash, three kinds of fields that cannot collide:
--       inc (incarnation), c (created, us), x (expires, us or ''), md (metadata JSON),
--       v (version), b (newest boundary seq, 0 = none), bv (seqs before b that the boundary
--       names, comma-separated), kx (key expiry, unix ms, or '');
--       <seq> (decimal) -> record: a JSON header line, then the codec body;
--       #<event id> -> kind .. seq (kind M message, C compaction, E other).
--   KEYS[2] <p>:{<sid>}:r  set: event ids claimed for this session by failed appends (cluster)
--   KEYS[3] <p>:{<sid>}:k  set: the index keys this incarnation was added to
--   KEYS[4] <p>:{<sid>}:a  hash: the session's attachments, hex of the sha256 -> size; the
--       bytes of each in the list <p>:{<sid>}:a:<hex> (same tag, so same slot), in chunks of
--       65,472 bytes (layout.ATTACHMENT_CHUNK). An append sends new bytes ahead of its script,
--       outside Lua, to <p>:{<sid>}:u:<hex>:<nonce> (a TTL of minutes), which the script
--       renames into place or deletes. Every key a
--       script touches is in its KEYS (so a cluster routes and migrates it right): the save
--       and delete scripts take the session's byte keys as KEYS[5...], and when those are not
--       exactly the keys the hash names, they write nothing and reply
--       {'attachments', hex, ...}, for the caller to run them again with those keys.

--! _undeclared
-- Shared by save and delete (layout.py puts it where a line reads `--+ _undeclared`).
local function undeclared() -- {'attachments', hex...} unless KEYS[5...] are the bytes' keys
  local n = redis.call('HLEN', KEYS[4])
  if n == #KEYS - 4 then -- as many keys as fields: all present and distinct, or not these
    local from, ok, seen = #KEYS[4] + 2, true, {}
    for i = 5, #KEYS, 1000 do
      local hexes = {}
      for j = i, math.min(i + 999, #KEYS) do
        local hex = string.sub(KEYS[j], from)
        if seen[hex] or string.sub(KEYS[j], 1, from - 1) ~= KEYS[4] .. ':' then ok = false end
        seen[hex] = true
        hexes[#hexes + 1] = hex
      end
      for _, size in ipairs(redis.call('HMGET', KEYS[4], unpack(hexes))) do
        if not size then ok = false end
      end
    end
    if ok then return nil end
  end
  local out = redis.call('HKEYS', KEYS[4])
  table.insert(out, 1, 'attachments')
  return out
end

--! save
-- Create or update a session; KEYS[5...]: the keys of its attachments' bytes (see above).
-- ARGV: mode ('create' | 'save'), inc (new incarnation), expected inc ('' = believed absent),
--       created us, expires us (''), metadata JSON, expires ms (''), grace ms ('' = no key expiry),
--       then the index keys to record.
-- Returns {'ok', inc} | {'exists'} | {'changed'} (absent/present/incarnation not as believed).
-- Everything is computed before the first write (a failed script is not rolled back).
local kx = ''
if ARGV[7] ~= '' and ARGV[8] ~= '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  kx = string.format('%d', math.max(tonumber(ARGV[7]), now) + tonumber(ARGV[8]))
end
--+ _undeclared
local cur = redis.call('HGET', KEYS[1], 'inc')
if cur then
  if ARGV[1] == 'create' then
    if cur == ARGV[2] then return {'ok', cur} end -- our own create, retried
    return {'exists'}
  end
  if cur ~= ARGV[3] then return {'changed'} end
  local names = undeclared()
  if names then return names end
  redis.call('HSET', KEYS[1], 'x', ARGV[5], 'md', ARGV[6])
else
  if ARGV[3] ~= '' then return {'changed'} end
  cur = ARGV[2]
  redis.call('HSET', KEYS[1], 'inc', cur, 'c', ARGV[4], 'x', ARGV[5], 'md', ARGV[6],
    'v', '0', 'b', '0', 'bv', '')
end
for i = 9, #ARGV do redis.call('SADD', KEYS[3], ARGV[i]) end
redis.call('HSET', KEYS[1], 'kx', kx)
for i = 1, #KEYS do -- the session's keys, its attachments among them
  if kx == '' then redis.call('PERSIST', KEYS[i]) else redis.call('PEXPIREAT', KEYS[i], kx) end
end
return {'ok', cur}

--! delete
-- Delete a session's keys: always (ARGV[1] == ''), or only if it expires at or before ARGV[1]
-- (us). ARGV[2]: the incarnation to delete ('' = whichever). KEYS[5...]: the keys of its
-- attachments' bytes (see above).
-- Returns {'gone'} | {'changed'} | {'kept', expires} | {'deleted', inc, ids, reserved, indexkeys}
--       | {'attachments', hex, ...}.
-- Times are compared as decimal strings: a Lua number (a double) is not exact past 2^53 us
-- (the year 2255), and a session must not be deleted a microsecond before it expires.
local function later(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then return nb end
  if na then a, b = string.sub(b, 2), string.sub(a, 2) end
  if #a ~= #b then return #a > #b end
  return a > b
end
local m = redis.call('HMGET', KEYS[1], 'inc', 'x')
if not m[1] then return {'gone'} end
if ARGV[2] ~= '' and m[1] ~= ARGV[2] then return {'changed'} end
if ARGV[1] ~= '' and (m[2] == '' or later(m[2], ARGV[1])) then
  return {'kept', m[2]}
end
--+ _undeclared
local names = undeclared()
if names then return names end
local ids = {}
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.byte(field, 1) == 35 then ids[#ids + 1] = string.sub(field, 2) end -- '#'
end
local reserved = redis.call('SMEMBERS', KEYS[2])
local indexed = redis.call('SMEMBERS', KEYS[3])
for i = 4, #KEYS, 1000 do -- the attachments go with the session
  redis.call('UNLINK', unpack(KEYS, i, math.min(i + 999, #KEYS)))
end
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3])
return {'deleted', m[1], ids, reserved, indexed}

--! append
-- The version-checked, all-or-nothing append of a batch.
-- ARGV[1] expected version (-1: append at the end, whatever the version)
-- ARGV[2] the incarnation the caller claimed ids for ('' on a standalone store: not checked)
-- ARGV[3] the session id (an event-id key holds session id .. NUL .. incarnation)
-- ARGV[4] '1' when KEYS[2 + i] is the event-id key of event i (standalone), '0' (cluster)
-- ARGV[5] n, the number of events
-- ARGV[6] r, the number of ids a boundary names that must be message events of the log;
--         -1 when the batch is invalid (check versions and retries only, then refuse)
-- then n times: id, kind (M/C/E), record, k, and k ids (for C: the ids its view names)
-- then r ids;
-- then, only for a batch with attachments (nothing at all otherwise): m, and m times hex (of
-- the sha256), size, sent ('1': its bytes were sent to its staging key, '0': not sent, the
-- caller believes the session holds them); q, and q times hex and size ('' = not given) of
-- the references the batch names, which the session must hold. KEYS[a] is then the session's
-- attachment hash, KEYS[a + j] the key of attachment j's bytes and KEYS[a + m + j] its staging
-- key, where a = 3 + n on a standalone store (after the event-id keys), 3 on a cluster.
-- Whatever the reply, no staging key is left: it is renamed into place or deleted.
-- Returns {'ok', version, appended} | {'nosession'} | {'changed'} | {'foreign', id, owner}
--       | {'conflict', version} | {'unknown', id} | {'invalid'}
--       | {'refs', size, ...} (the sizes the session holds of the q references, '' = none)
--       | {'lacks', hex, ...} (attachments the session does not hold, whose bytes were not sent)
local s, reserved = KEYS[1], KEYS[2]
local idkeys = ARGV[4] == '1'

-- The hot path, one event naming nothing (a chat message): the same steps with fewer calls.
if ARGV[5] == '1' and ARGV[6] == '0' and ARGV[10] == '0' and not ARGV[11] then
  local id, kind = ARGV[7], ARGV[8]
  local st = redis.call('HMGET', s, 'inc', 'v', 'kx', '#' .. id)
  if not st[1] then return {'nosession'} end
  if ARGV[2] ~= '' and ARGV[2] ~= st[1] then return {'changed'} end
  local ver = tonumber(st[2])
  if st[4] then return {'ok', ver, 0} end
  local owner = ARGV[3] .. '\0' .. st[1]
  if idkeys then
    local o = redis.call('GET', KEYS[3])
    if o and o ~= owner then return {'foreign', id, o} end
  end
  local expected = tonumber(ARGV[1])
  if expected >= 0 and expected ~= ver then
    if not idkeys then
      redis.call('SADD', reserved, id)
      if st[3] and st[3] ~= '' then redis.call('PEXPIREAT', reserved, st[3]) end
    end
    return {'conflict', ver}
  end
  ver = ver + 1
  if kind == 'C' then
    redis.call('HSET', s, ver, ARGV[9], '#' .. id, kind .. ver, 'v', ver, 'b', ver, 'bv', '')
  else
    redis.call('HSET', s, ver, ARGV[9], '#' .. id, kind .. ver, 'v', ver)
  end
  if idkeys then
    redis.call('SET', KEYS[3], owner)
  elseif redis.call('EXISTS', reserved) == 1 then
    redis.call('SREM', reserved, id)
  end
  return {'ok', ver, 1}
end

-- Any batch. Every check and every read comes before the first write: Redis does not roll a
-- script back when it fails, so nothing may fail once writing has begun. Lists of unbounded
-- length reach commands in chunks of 1000 arguments (Lua's unpack() fails at about 8000).
local CHUNK = 1000
local function hmget(fields, key) -- HMGET of any number of fields (of the session hash)
  local out = {}
  for i = 1, #fields, CHUNK do
    local got = redis.call('HMGET', key or s, unpack(fields, i, math.min(i + CHUNK - 1, #fields)))
    for j = 1, #got do out[i + j - 1] = got[j] end
  end
  return out
end

local n, r = tonumber(ARGV[5]), tonumber(ARGV[6])
local events = {}
local at = 7
for i = 1, n do
  local k = tonumber(ARGV[at + 3])
  events[i] = {i, ARGV[at], ARGV[at + 1], ARGV[at + 2], at + 3, k}
  at = at + 4 + k
end

-- The attachments' keys (a batch with attachments only): the staging keys of the bytes sent
-- are renamed into place below, or deleted by every other reply (done()).
local mat, akey, abase, staged = at + math.max(r, 0), nil, nil, {}
if ARGV[mat] then
  abase = idkeys and 3 + n or 3
  akey = KEYS[abase]
  for j = 1, tonumber(ARGV[mat]) do
    if ARGV[mat + 3 * j] == '1' then staged[#staged + 1] = j end
  end
end
local function done(reply)
  local m = tonumber(ARGV[mat])
  for i = 1, #staged, CHUNK do
    local keys = {}
    for j = i, math.min(i + CHUNK - 1, #staged) do keys[#keys + 1] = KEYS[abase + m + staged[j]] end
    redis.call('UNLINK', unpack(keys))
  end
  return reply
end

-- The session's state and which ids it holds: one HMGET (one more per 1000 events).
local fields = {'inc', 'v', 'kx'}
for i = 1, n do fields[3 + i] = '#' .. events[i][2] end
local got = hmget(fields)
local st = {got[1], got[2], got[3]}
if not st[1] then return done({'nosession'}) end
if ARGV[2] ~= '' and ARGV[2] ~= st[1] then return done({'changed'}) end
local fresh = {}
for i = 1, n do
  if not got[3 + i] then fresh[#fresh + 1] = events[i] end
end
local ver = tonumber(st[2])
local owner = ARGV[3] .. '\0' .. st[1]
if idkeys then
  for i = 1, #fresh, CHUNK do
    local keys = {}
    for j = i, math.min(i + CHUNK - 1, #fresh) do keys[#keys + 1] = KEYS[2 + fresh[j][1]] end
    local claims = redis.call('MGET', unpack(keys))
    for j = i, math.min(i + CHUNK - 1, #fresh) do
      local o = claims[j - i + 1]
      if o and o ~= owner then return done({'foreign', fresh[j][2], o}) end
    end
  end
end
if #fresh == 0 then return done({'ok', ver, 0}) end

-- A refusal writes only this (cluster): the ids it claimed, so deleting the session frees them.
local function keep_claims()
  if idkeys then return end
  for _, f in ipairs(fresh) do redis.call('SADD', reserved, f[2]) end
  if st[3] and st[3] ~= '' then redis.call('PEXPIREAT', reserved, st[3]) end
end

local expected = tonumber(ARGV[1])
if expected >= 0 and expected ~= ver then
  keep_claims()
  return done({'conflict', ver})
end
if r < 0 then
  keep_claims()
  return done({'invalid'})
end
if r > 0 then
  local names = {}
  for j = 1, r do names[j] = '#' .. ARGV[at + j - 1] end
  local refs = hmget(names)
  for j = 1, r do
    if not refs[j] or string.sub(refs[j], 1, 1) ~= 'M' then
      keep_claims()
      return done({'unknown', ARGV[at + j - 1]})
    end
  end
end

-- Attachments: which the session lacks (stored below, from their staging keys), and whether
-- it holds every reference the batch names, with the size given.
local blobs, new = {}, {}
if akey then
  local m = tonumber(ARGV[mat])
  local q = tonumber(ARGV[mat + 3 * m + 1])
  local hexes, sizes = {}, {}
  for j = 1, m do
    local p = mat + 3 * j - 2
    blobs[j] = {ARGV[p], ARGV[p + 1], ARGV[p + 2] == '1', KEYS[abase + j], KEYS[abase + m + j]}
    hexes[j] = ARGV[p]
    sizes[ARGV[p]] = ARGV[p + 1]
  end
  local named = mat + 3 * m + 2
  for j = 1, q do hexes[m + j] = ARGV[named + 2 * j - 2] end
  local held = hmget(hexes, akey)
  local lacks = {'lacks'}
  for j = 1, m do
    if not held[j] then
      if blobs[j][3] and redis.call('EXISTS', blobs[j][5]) == 1 then
        new[#new + 1] = blobs[j]
      else
        lacks[#lacks + 1] = blobs[j][1]
      end
    end
  end
  local refused = false
  for j = 1, q do
    local have, want = held[m + j] or sizes[hexes[m + j]], ARGV[named + 2 * j - 1]
    if not have or (want ~= '' and want ~= have) then refused = true end
  end
  if refused then
    keep_claims()
    local out = {'refs'}
    for j = 1, q do out[j + 1] = held[m + j] or '' end
    return done(out)
  end
  if #lacks > 1 then
    keep_claims()
    return done(lacks)
  end
end

-- The newest boundary of the batch, and the seqs before it of the events it names: those of
-- the batch get their seqs now, the others are read from the session (all checked above).
local last, before = nil, {}
for j = #fresh, 1, -1 do
  if fresh[j][3] == 'C' then
    last = {ver + j, fresh[j]}
    break
  end
end
if last and last[2][6] > 0 then
  local seq, f = last[1], last[2]
  local new, slots, names = {}, {}, {}
  for j = 1, #fresh do new[fresh[j][2]] = ver + j end
  for j = 1, f[6] do
    local id = ARGV[f[5] + j]
    slots[j] = new[id]
    if not slots[j] then
      names[#names + 1] = '#' .. id
      slots[j] = -#names
    end
  end
  local refs = hmget(names)
  for j = 1, f[6] do
    local q = slots[j]
    if q < 0 then q = refs[-q] and tonumber(string.sub(refs[-q], 2)) end
    if q and q < seq then before[#before + 1] = q end
  end
end

-- The writes: records, their ids and the new version (and the claims), in chunks.
local total = ver + #fresh
for i = 1, #fresh, CHUNK do
  local pairs_, claims = {}, {}
  for j = i, math.min(i + CHUNK - 1, #fresh) do
    local f, seq = fresh[j], ver + j
    pairs_[#pairs_ + 1] = seq
    pairs_[#pairs_ + 1] = f[4]
    pairs_[#pairs_ + 1] = '#' .. f[2]
    pairs_[#pairs_ + 1] = f[3] .. seq
    if idkeys then
      claims[#claims + 1] = KEYS[2 + f[1]]
      claims[#claims + 1] = owner
    end
  end
  if i + CHUNK > #fresh then
    pairs_[#pairs_ + 1] = 'v'
    pairs_[#pairs_ + 1] = total
  end
  redis.call('HSET', s, unpack(pairs_))
  if idkeys then redis.call('MSET', unpack(claims)) end
end
if last then redis.call('HSET', s, 'b', last[1], 'bv', table.concat(before, ',')) end
if not idkeys and redis.call('EXISTS', reserved) == 1 then
  for _, f in ipairs(fresh) do redis.call('SREM', reserved, f[2]) end
end
if #new > 0 then -- the attachments the session lacked, with the session's key expiry
  local kx = st[3] ~= '' and st[3] or nil
  for i = 1, #new, CHUNK do
    local sizes = {}
    for j = i, math.min(i + CHUNK - 1, #new) do
      local b = new[j]
      redis.call('RENAME', b[5], b[4]) -- the staging key's TTL goes with it: replaced next
      if kx then redis.call('PEXPIREAT', b[4], kx) else redis.call('PERSIST', b[4]) end
      sizes[#sizes + 1] = b[1]
      sizes[#sizes + 1] = b[2]
    end
    redis.call('HSET', akey, unpack(sizes))
  end
  if kx then redis.call('PEXPIREAT', akey, kx) end
end
return done({'ok', total, #fresh}) -- deletes the staging keys of bytes the session held

--! view
-- The records the active view needs: those the newest boundary names (before it), the boundary
-- and every record after it; the whole log when there is no boundary.
-- Returns false (no session) | {version, boundary seq, named seqs, record, record, ...}
local m = redis.call('HMGET', KEYS[1], 'inc', 'v', 'b', 'bv')
if not m[1] then return false end
local ver, b = tonumber(m[2]), tonumber(m[3])
local seqs = {}
if b > 0 then
  for q in string.gmatch(m[4], '%d+') do seqs[#seqs + 1] = q end
end
for q = math.max(b, 1), ver do seqs[#seqs + 1] = q end
local out = {ver, b, m[4]}
for i = 1, #seqs, 1000 do
  local chunk = {}
  for j = i, math.min(i + 999, #seqs) do chunk[#chunk + 1] = seqs[j] end
  local got = redis.call('HMGET', KEYS[1], unpack(chunk))
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
  for q = i, math.min(i + 999, hi) do chunk[#chunk + 1] = q end
  local got = redis.call('HMGET', KEYS[1], unpack(chunk))
  for j = 1, #chunk do out[#out + 1] = got[j] end
end
return out

--! release
-- Delete KEYS[1] if it still holds ARGV[1] (an event-id claim of a dead incarnation).
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0

--! tail
-- The end of a session's log, newest first, read for the view rules.
-- ARGV: n (at most this many records), before (the records before this seq; '' = the end).
-- Returns {} when there is no session, else {inc, v, record, record, ...} (seq descending).
local hv = redis.call('HMGET', KEYS[1], 'inc', 'v')
if not hv[1] then return {} end
local hi = tonumber(hv[2])
if ARGV[2] ~= '' then hi = tonumber(ARGV[2]) - 1 end
local out = {hv[1], hv[2]}
for seq = hi, math.max(1, hi - tonumber(ARGV[1]) + 1), -1 do
    out[#out + 1] = redis.call('HGET', KEYS[1], tostring(seq))
end
return out

--! set_bodies
-- record_tokens: KEYS[1] the session hash; ARGV: seq, the record as read, the record to write,
-- repeated. A record is written only where it is still the one read (records never change
-- otherwise, so this skips only a session deleted, or deleted and created again, meanwhile).
-- Returns false (no session) | how many records were written.
if not redis.call('HGET', KEYS[1], 'inc') then return false end
local n = 0
for i = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    n = n + 1
  end
end
return n
