"""Reading what an earlier version wrote, kept apart from the current format: format 1's
manifests (``format1.py``), read only to resume a namespace an earlier version began."""
