"""Statistics: numbers with intervals whose coverage is measured (`repro.statistics.intervals`).

A floor of its own under every package that reports a number (`repro.experiment`'s anchoring, `repro.paper`,
`repro.validation`): it imports nothing of the project's, so any of them may use it.
"""
