"""The ground truth: the PyTorch reference of MSDA and the graded input cases. Grader only:
a student's module that imports from here loses its points."""
