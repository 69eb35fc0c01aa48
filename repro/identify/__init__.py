"""Identification of a testbed: the constants nobody stated, fitted to measured baseline numbers.

`repro identify` (`repro.cli.identify`) reads a table of measured numbers (`targets`), searches the
declared parameter space (`space`) on the simulator (`fit`), keeps every parameter vector whose
chi-square is within a threshold of the best (the ensemble; whether the best is within the numbers'
noise, `fit.Identification.fit_quality` says from its figures), refuses values outside the hardware's physical bounds
(`bounds`), writes the identified testbed as a hardware profile with its workload parameters and a fit
report (`testbed`), and evaluates the numbers it was not fitted on across the ensemble (`predictions`).
"""
