"""The parts of a notebook's context, `repro.paper.section.Section`, one module per job.

``setup`` (checks, the scale plan, the time-scale rule), ``runs`` (running specs, their rows and the
per-request outcomes they leave), ``rates`` (operating rates and the saturation search),
``estimates`` (goodput and differences with their intervals), ``outputs`` (tables, figures, the
headline and the Findings). Each part is a mixin: it names the fields of `Section` it reads and
the members of the other parts it calls, and imports none of them; `Section` composes them.
"""
