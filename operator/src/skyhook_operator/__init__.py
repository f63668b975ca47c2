"""Skyhook operator: rolls Skyhook packages across Kubernetes nodes."""
