"""The judge: what decides a grade and says why.

The grading job (job) and one stage run (stage_run) through the pytest plugin (plugin); what a test
sees of the submission and the helpers it checks outputs with (submission, probes, guards,
compare, bigcase, spies: the child-side ones among them are held to the child contract in
pyproject.toml); the source rules (rules); results as data and their rendering (results, render,
annotations, diagnosis, rejections); speed verdicts on the judge's clock (speedjudge, baseline,
bandwidth);
the integrity of a lab's grading files (integrity).
"""
