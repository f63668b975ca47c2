"""Local sandbox cluster: a real kube-apiserver, etcd and kube-controller-manager on loopback,
plus simulated nodes that run pods' containers as local processes against per-node host roots.
"""
