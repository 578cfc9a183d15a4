# The toy lab is graded by the tests here (through the grade command, in a copy of the kit);
# pytest must not collect its grading tests as the kit's own.
collect_ignore = ["toylab"]
