-- Argo CD health of a Skyhook (skyhook.nvidia.com/v1alpha1), from the status the operator writes.
--   Healthy      every selected node is complete, for the current spec
--   Progressing  the operator has not seen this spec yet, or nodes are still rolling out
--   Degraded     nodes are erroring, or the Skyhook cannot run (invalid spec, missing policy)
--   Suspended    paused or disabled on purpose
local hs = {}
local status = obj.status
if status == nil or status.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Skyhook operator to report a status"
  return hs
end

local function condition(type)
  if status.conditions ~= nil then
    for _, c in ipairs(status.conditions) do
      if c.type == type then
        return c
      end
    end
  end
  return nil
end

local generation = obj.metadata.generation
local ready = condition("Ready")
local current = ready == nil or ready.observedGeneration == nil or ready.observedGeneration == generation
local nodes = status.completeNodes or "0/0"
local state = status.status

if state == "paused" or state == "disabled" then
  hs.status = "Suspended"
  hs.message = "Skyhook is " .. state .. " (" .. nodes .. " nodes complete)"
elseif state == "erroring" or state == "blocked" then
  local stalled = condition("Stalled")
  local erroring = 0
  for _, s in pairs(status.nodeStatus or {}) do
    if s == "erroring" then
      erroring = erroring + 1
    end
  end
  hs.status = "Degraded"
  if stalled ~= nil and stalled.status == "True" and stalled.message ~= nil then
    hs.message = stalled.message
  elseif state == "erroring" then
    hs.message = erroring .. " node(s) erroring"
  else
    hs.message = "Skyhook is blocked"
  end
elseif state == "complete" and current and
    (status.observedGeneration == nil or status.observedGeneration == generation) then
  hs.status = "Healthy"
  hs.message = "Complete on " .. nodes .. " nodes"
else
  hs.status = "Progressing"
  hs.message = "Skyhook is " .. state .. " (" .. nodes .. " nodes complete)"
end
return hs
