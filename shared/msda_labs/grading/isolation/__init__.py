"""Running a submission away from the judge: the warm workers that fork one child per request
(executor, zygote), the separation of each child as a user of its own with limits (sandbox), its
private world of namespaces (world, reach), the import of the submission from the bytes the judge
read (loader), the per-submission salt that replaces the instructor's secret (secret), the files
closed to children (judgeonly), the zygote's refusal to hold judge-only modules (childguard), the
one decoding of a module's bytes as the compiler does it (source) and the bounded reading of a
student's files (studentfiles).

It imports nothing of the judge, of the speed room or of the course (an import contract in
pyproject.toml holds it to that). What it still knows of this course is named there: the child
guard's list of judge-only packages and the ``MSDA_`` environment names.
"""
