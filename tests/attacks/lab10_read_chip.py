# attack: read-chip
# lab: lab10
# targets: 10.1 10.2 10.3 10.4
# where: kit (an export carries no chip of its own lab)
# Loads the lab's own chip (the kit's reference solution) from the package's folder on disk
# under a harmless module name, and takes every one of its functions and kernels as this file's.
import importlib.util
import os

import msda_labs

_path = os.path.join(os.path.dirname(msda_labs.__file__), "ch" + "ips", "lab" + "10" + ".py")
_spec = importlib.util.spec_from_file_location("lab10_helpers", _path)
_chip = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_chip)
globals().update({k: v for k, v in vars(_chip).items() if not k.startswith("__")})
