"""One module per section notebook, named after it (``notebooks/04_mixed_goodput.py`` ->
`repro.paper.sections.mixed_goodput`): the specs it runs, its tables and its headline rows.

Each spec builder takes the notebook's `repro.paper.section.Section` first (backend, traces,
requests per run, cluster, time scale); tables take the rows of `Section.run`. Every
``*_headline`` function returns rows for `Section.write_headline` (``key`` a
``data/paper_reference.csv`` key where the paper states the number).
"""
