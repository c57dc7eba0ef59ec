"""The job spec: flags, spec files and their validation; read on the driver and on
every executor."""
