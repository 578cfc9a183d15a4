# attack: exit-early
# lab: lab01
# targets: 1.1 1.2
# Ends the process with status 0 as soon as it is imported, before any test can fail.
import os

os._exit(0)
