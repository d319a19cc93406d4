"""Host doctor: read `nvidia-smi` output and host settings, then say which profiles can run here.

Modules, one job each: `textfmt` (shared text helpers), `topo`/`p2p`/`gpus`/`power` (parse the
`nvidia-smi` outputs), `probe` (read the host: commands, procfs/sysfs, limits), `nccl` (version
and known-bad releases), `checks` (pass/warn/fail verdicts), `facts` (HostFacts from the parsed
outputs), `eligibility` (profiles through the launcher's own rules), `diagnose` (one run, and
its JSON), `causes` (findings grouped by cause, shared with `launcher check`), `report`
(tables, or one item per line when narrow), `cli`.
"""
