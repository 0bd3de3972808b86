"""Operator commands: release or reject held calls, resolve quarantines, export and verify audit bundles,
`interlock status` and the Prometheus exporter.

The CLI (`interlock holds|quarantine|audit|status|metrics`) and the web console (`console/`) both call the
functions here, so an action taken in either place goes through one code path and one set of checks.
"""
