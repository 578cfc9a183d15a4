# The fixture lab is graded by the tests here (through the grade command); pytest must not
# collect its grading tests as the kit's own.
collect_ignore = ["fixture"]
