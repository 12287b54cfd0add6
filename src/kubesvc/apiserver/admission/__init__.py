"""Admission plugins: checks and changes a write goes through after authorization, before it is stored."""
