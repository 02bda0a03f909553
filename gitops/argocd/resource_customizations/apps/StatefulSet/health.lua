-- Argo CD health check for apps/StatefulSet with stateful-admission storage rollouts.
--
-- A custom check replaces Argo CD's built-in one, so this gives the built-in verdicts and
-- messages unchanged (gitops-engine pkg/health/health_statefulset.go: observedGeneration,
-- readyReplicas, partition, OnDelete, revisions) and adds what the set's own status cannot
-- say: a storage rollout (KEP-4650 volumeClaimTemplates edits) that is not done, or that
-- cannot finish. It reads the StatefulSet alone, as stateful-admission's controller and
-- webhook leave it:
--
--   stateful-admission.io/desired-volume-claim-templates  a change is recorded and not yet on
--       the live object (the webhook writes it with the apply; the controller re-creates the
--       set with it and it goes): Progressing.
--   stateful-admission.io/volume-claim-status  per template, the claims the rollout still
--       awaits ("awaiting"), of them those whose resize failed ("failed") or that cannot
--       follow the template in place ("incompatible"), and a class the cluster does not apply
--       ("volumeAttributesClass", "applied": false, "changed": true once a change set it):
--       Progressing while claims are awaited, Degraded on failed or incompatible ones, and on
--       a recorded class change the cluster drops once everything else is done.
--   stateful-admission.io/progress  the controller's progress record: Degraded once the
--       rollout it records (the generation and the recorded templates) made no progress for
--       its progress deadline.
--
-- These are the verdicts of `stateful-admission status --wait` (exit 0 done, 1 failed),
-- checked against it on one table of cases in the project's tests. Degraded wins over the
-- built-in Progressing; a storage rollout under way wins over the built-in Healthy.
--
-- Needs Lua's string library (the annotations are JSON): in argocd-cm set
-- resource.customizations.useOpenLibs.apps_StatefulSet: "true" beside this script
-- (`stateful-admission gitops argocd-cm` prints both).

local DESIRED = "stateful-admission.io/desired-volume-claim-templates"
local CLAIM_STATUS = "stateful-admission.io/volume-claim-status"
local PROGRESS = "stateful-admission.io/progress"

-- Without the string library the annotations cannot be read: say so (Argo CD shows the health
-- as Unknown with this message) rather than pass a rollout under way for Healthy.
if string == nil then
  error("stateful-admission's StatefulSet health check needs Lua's standard libraries: set "
    .. "resource.customizations.useOpenLibs.apps_StatefulSet: \"true\" in argocd-cm", 0)
end

-- JSON as the controller writes it (RFC 8259); nil for anything that does not parse.
local function decode(text)
  if type(text) ~= "string" then
    return nil
  end
  local pos = 1
  local escapes = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
  local function fail()
    error("not JSON", 0)
  end
  local function skip()
    pos = string.find(text, "[^ \t\r\n]", pos) or (#text + 1)
  end
  local function utf8(code)
    if code < 0x80 then
      return string.char(code)
    elseif code < 0x800 then
      return string.char(0xC0 + (code - code % 64) / 64, 0x80 + code % 64)
    end
    local high = (code - code % 4096) / 4096
    local mid = ((code - code % 64) / 64) % 64
    return string.char(0xE0 + high, 0x80 + mid, 0x80 + code % 64)
  end
  local function str()
    local parts = {}
    pos = pos + 1
    while true do
      local stop = string.find(text, '["\\]', pos)
      if stop == nil then
        fail()
      end
      table.insert(parts, string.sub(text, pos, stop - 1))
      pos = stop
      if string.sub(text, pos, pos) == '"' then
        pos = pos + 1
        return table.concat(parts)
      end
      local e = string.sub(text, pos + 1, pos + 1)
      if e == "u" then
        local code = tonumber(string.sub(text, pos + 2, pos + 5), 16)
        if code == nil then
          fail()
        end
        table.insert(parts, utf8(code))
        pos = pos + 6
      else
        table.insert(parts, escapes[e] or e)
        pos = pos + 2
      end
    end
  end
  local value
  local function list(close, item)
    pos = pos + 1
    skip()
    if string.sub(text, pos, pos) == close then
      pos = pos + 1
      return
    end
    while true do
      item()
      skip()
      local c = string.sub(text, pos, pos)
      pos = pos + 1
      if c == close then
        return
      elseif c ~= "," then
        fail()
      end
    end
  end
  function value()
    skip()
    local c = string.sub(text, pos, pos)
    if c == "{" then
      local object = {}
      list("}", function()
        skip()
        if string.sub(text, pos, pos) ~= '"' then
          fail()
        end
        local key = str()
        skip()
        if string.sub(text, pos, pos) ~= ":" then
          fail()
        end
        pos = pos + 1
        object[key] = value()
      end)
      return object
    elseif c == "[" then
      local array = {}
      list("]", function()
        table.insert(array, value())
      end)
      return array
    elseif c == '"' then
      return str()
    end
    for word, v in pairs({ ["true"] = true, ["false"] = false, ["null"] = false }) do
      if string.sub(text, pos, pos + #word - 1) == word then
        pos = pos + #word
        if word == "null" then
          return nil
        end
        return v
      end
    end
    local number = string.match(string.sub(text, pos), "^-?%d+%.?%d*[eE]?[-+]?%d*")
    if number == nil or number == "" then
      fail()
    end
    pos = pos + #number
    return tonumber(number) or fail()
  end
  local ok, result = pcall(function()
    local v = value()
    skip()
    if pos <= #text then
      fail()
    end
    return v
  end)
  if ok then
    return result
  end
  return nil
end

-- FNV-1a, 64 bits, as lowercase hex: how the controller names a rollout by its recorded
-- templates. Four 16-bit limbs (Lua 5.1 numbers are doubles), least significant first.
local function fnv1a64(text)
  local h = { 0x2325, 0x8422, 0x9ce4, 0xcbf2 }
  for i = 1, #text do
    local byte = string.byte(text, i)
    local low = h[1] % 256
    local a, b, bit, xor = low, byte, 1, 0
    for _ = 1, 8 do
      if a % 2 ~= b % 2 then
        xor = xor + bit
      end
      a, b, bit = (a - a % 2) / 2, (b - b % 2) / 2, bit * 2
    end
    h[1] = h[1] - low + xor
    -- times 0x100000001b3 = 2^40 + 0x1b3, modulo 2^64
    local r = {
      h[1] * 0x1b3,
      h[2] * 0x1b3,
      h[3] * 0x1b3 + h[1] * 0x100,
      h[4] * 0x1b3 + h[2] * 0x100,
    }
    local carry = 0
    for k = 1, 4 do
      local sum = r[k] + carry
      h[k] = sum % 65536
      carry = (sum - h[k]) / 65536
    end
  end
  local digits = "0123456789abcdef"
  local out = {}
  for k = 4, 1, -1 do
    local limb = h[k]
    local chunk = {}
    for _ = 1, 4 do
      local d = limb % 16
      table.insert(chunk, 1, string.sub(digits, d + 1, d + 1))
      limb = (limb - d) / 16
    end
    table.insert(out, table.concat(chunk))
  end
  return table.concat(out)
end

local function count(n, one, many)
  if n == 1 then
    return "1 " .. one
  end
  return n .. " " .. many
end

local function number(v)
  if type(v) == "number" then
    return v
  end
  return 0
end

-- Argo CD's own verdict on a StatefulSet.
local function builtin(sts)
  local spec = sts.spec or {}
  local status = sts.status or {}
  local generation = number((sts.metadata or {}).generation)
  local observed = number(status.observedGeneration)
  if observed == 0 or generation > observed then
    return "Progressing", "Waiting for statefulset spec update to be observed..."
  end
  local replicas = spec.replicas
  local ready = number(status.readyReplicas)
  if replicas ~= nil and ready < replicas then
    return "Progressing", "Waiting for " .. (replicas - ready) .. " pods to be ready..."
  end
  local strategy = spec.updateStrategy or {}
  local updated = number(status.updatedReplicas)
  if strategy.type == "RollingUpdate" and strategy.rollingUpdate ~= nil then
    local partition = strategy.rollingUpdate.partition
    if replicas ~= nil and partition ~= nil and updated < replicas - partition then
      return "Progressing", "Waiting for partitioned roll out to finish: " .. updated .. " out of "
        .. (replicas - partition) .. " new pods have been updated..."
    end
    return "Healthy", "partitioned roll out complete: " .. updated .. " new pods have been updated..."
  end
  if strategy.type == "OnDelete" then
    return "Healthy", "statefulset has " .. ready .. " ready pods"
  end
  local update = status.updateRevision or ""
  local current = status.currentRevision or ""
  if update ~= current then
    return "Progressing", "waiting for statefulset rolling update to complete " .. updated
      .. " pods at revision " .. update .. "..."
  end
  return "Healthy", "statefulset rolling update complete " .. number(status.currentReplicas)
    .. " pods at revision " .. current .. "..."
end

-- The progress deadline of the rollout the set is in, when it passed: its message.
local function deadline_exceeded(sts, annotations)
  local record = decode(annotations[PROGRESS])
  if type(record) ~= "table" then
    return nil
  end
  local rollout = tostring(number((sts.metadata or {}).generation))
  if annotations[DESIRED] ~= nil then
    rollout = rollout .. "/" .. fnv1a64(annotations[DESIRED])
  end
  -- A stall of an earlier rollout says nothing of this one.
  if record.rollout ~= rollout then
    return nil
  end
  local progressing = nil
  local exceeded = type(record.progressing) == "table" and record.progressing.status == "False"
  for _, c in ipairs((sts.status or {}).conditions or {}) do
    if c.type == "Progressing" then
      progressing = progressing or c
      if c.status == "False" and c.reason == "ProgressDeadlineExceeded" then
        exceeded = true
      end
    end
  end
  if not exceeded then
    return nil
  end
  if progressing ~= nil and type(progressing.message) == "string" and progressing.message ~= "" then
    return progressing.message
  end
  return "no progress within the progress deadline"
end

-- The storage rollout's verdict, or nil when there is none or it is done.
local function storage(sts)
  local meta = sts.metadata or {}
  local annotations = meta.annotations or {}
  local recorded = annotations[DESIRED] ~= nil
  local templates = decode(annotations[CLAIM_STATUS])
  if type(templates) ~= "table" then
    templates = {}
  end
  local awaiting, failed, incompatible, restart, restarting = 0, 0, 0, 0, 0
  local failing, unfit = {}, {}
  local class = nil
  for _, t in ipairs(templates) do
    if type(t) == "table" then
      awaiting = awaiting + number(t.awaiting)
      failed = failed + number(t.failed)
      incompatible = incompatible + number(t.incompatible)
      restart = restart + number(t.waitingForRestart)
      restarting = restarting + number(t.restarting)
      if number(t.failed) > 0 then
        table.insert(failing, tostring(t.name))
      end
      if number(t.incompatible) > 0 then
        table.insert(unfit, tostring(t.name))
      end
      local vac = t.volumeAttributesClass
      if class == nil and type(vac) == "table" and vac.applied == false and vac.changed == true then
        class = "VolumeAttributesClassNotApplied: template " .. tostring(t.name)
          .. ": volumeAttributesClassName \"" .. tostring(vac.name) .. "\" cannot be applied: "
          .. tostring(vac.reason) .. "; everything else of the rollout is done"
      end
    end
  end
  local where = " (stateful-admission status -n " .. tostring(meta.namespace) .. " "
    .. tostring(meta.name) .. " names them)"
  if not recorded and awaiting == 0 then
    if class ~= nil then
      return "Degraded", class
    end
    return nil
  end
  if failed > 0 then
    return "Degraded", "ClaimResizeFailed: the resize or modification of "
      .. count(failed, "claim", "claims") .. " of template " .. table.concat(failing, ", ")
      .. " failed" .. where
  end
  if incompatible > 0 then
    return "Degraded", "ClaimIncompatible: " .. count(incompatible, "claim", "claims")
      .. " of template " .. table.concat(unfit, ", ") .. " cannot follow it in place" .. where
  end
  local stalled = deadline_exceeded(sts, annotations)
  if stalled ~= nil then
    return "Degraded", "ProgressDeadlineExceeded: progress deadline exceeded: " .. stalled
  end
  if recorded then
    return "Progressing", "ChangeRecorded: a volumeClaimTemplates change is recorded; waiting for"
      .. " the controller to journal it and re-create the StatefulSet with it"
  end
  local message = "UpdatingClaims: " .. count(awaiting, "claim", "claims")
    .. " not compatible with the volume claim templates yet"
  local detail = {}
  if restart > 0 then
    table.insert(detail, restart .. " waiting for its pod to be re-created")
  end
  if restarting > 0 then
    table.insert(detail, restarting .. " with its pod restarting")
  end
  if #detail > 0 then
    message = message .. " (" .. table.concat(detail, ", ") .. ")"
  end
  return "Progressing", message
end

local hs = {}
-- Argo CD says so before it runs any check; said here too for a copy run elsewhere.
if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Pending deletion"
  return hs
end
local ours, why = storage(obj)
if ours == "Degraded" then
  hs.status = ours
  hs.message = why
  return hs
end
local status, message = builtin(obj)
if status == "Healthy" and ours ~= nil then
  status, message = ours, why
end
hs.status = status
hs.message = message
return hs
