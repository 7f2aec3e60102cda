"""Kubernetes API plumbing shared by the Kubernetes store and leader election."""
