"""`python -m skyhook_schemas.crds`: write the nodewright.nvidia.com CRDs from ours."""

from skyhook_schemas.crds import write_generated

for path in write_generated():
    print(f"wrote {path}")
