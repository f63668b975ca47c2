"""Custom resource definitions, as YAML the operator installs and the helm chart ships."""

from pathlib import Path

CRD_DIR = Path(__file__).parent
SKYHOOK_CRD_PATH = CRD_DIR / "skyhooks.skyhook.nvidia.com.yaml"
POLICY_CRD_PATH = CRD_DIR / "deploymentpolicies.skyhook.nvidia.com.yaml"
CRD_PATHS = (SKYHOOK_CRD_PATH, POLICY_CRD_PATH)
