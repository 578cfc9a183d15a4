"""The ground truth: the PyTorch reference of MSDA (``reference``), lab 00's layers (``layers``),
lab 03's memory counts (``memory``) and the graded input cases (``cases``). Grader only: a
student's module that imports from here loses its points."""
