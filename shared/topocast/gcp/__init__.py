"""GCP glue: Cloud Functions (gen2) handlers, CloudEvent parsing, Cloud Storage state, Cloud Tasks timers.

No Google SDK is imported at module load; see docs/gcp.md for the design.
"""
