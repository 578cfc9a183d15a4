# attack: read-chip
# lab: lab04
# targets: 4.1 4.2 4.3
# where: kit (an export carries no chip of its own lab)
# Loads the lab's own chip (the kit's reference solution) from the package's folder on disk
# under a harmless module name, and takes every one of its functions and kernels as this file's.
import importlib.util
import os

import msda_labs

_path = os.path.join(os.path.dirname(msda_labs.__file__), "ch" + "ips", "lab" + "04" + ".py")
_spec = importlib.util.spec_from_file_location("lab04_helpers", _path)
_chip = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_chip)
globals().update({k: v for k, v in vars(_chip).items() if not k.startswith("__")})
