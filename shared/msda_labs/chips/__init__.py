"""Reference solutions ("chips"), one module per lab, with ``# BEGIN SOLUTION`` fences.

Each lab's starter module is this file with its solution blocks stripped
(:func:`msda_labs.authoring.fences.strip`). An exported lab carries only the chips of earlier labs.
"""
