"""The only package that talks to the Kubernetes API: client, writer, drains, events."""
