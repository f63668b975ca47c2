"""The one place where the control-plane releases are pinned."""

KUBERNETES_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.16"
