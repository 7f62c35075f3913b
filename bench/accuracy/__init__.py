"""Accuracy: published results replicated and reference implementations run beside ours on the same reports."""
