-- Argo CD health of a DeploymentPolicy (skyhook.nvidia.com/v1alpha1). A policy is settings
-- that Skyhooks read; it has no rollout of its own (its Skyhooks report progress), so a stored
-- policy is healthy.
local hs = {}
hs.status = "Healthy"
hs.message = "DeploymentPolicy stored; the Skyhooks using it report rollout progress"
return hs
