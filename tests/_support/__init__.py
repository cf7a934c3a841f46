"""Helpers shared by several test folders: the torchrun launcher and the plan
directories' paths and edits."""
