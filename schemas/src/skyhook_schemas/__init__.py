"""Rules every Skyhook component shares.

- :mod:`skyhook_schemas.package_config`: the package ``config.json`` schema v1 and its loader.
- :mod:`skyhook_schemas.versions`: strict semver, SCR version spellings and the upgrade/downgrade decision.
- :mod:`skyhook_schemas.images`: image references split into repository, tag and digest.
- :mod:`skyhook_schemas.tags`: the ``<package>/<version>`` release tag convention.
- :mod:`skyhook_schemas.keys`: every annotation, label, taint and object name Skyhook writes.
- :mod:`skyhook_schemas.crds`: the Skyhook and DeploymentPolicy CRD manifests the operator
  installs and the chart ships.
- :mod:`skyhook_schemas.errors`: field errors, so every component reports bad input the same way.
"""

from skyhook_schemas.errors import ConfigError, FieldError

__all__ = ["ConfigError", "FieldError"]
