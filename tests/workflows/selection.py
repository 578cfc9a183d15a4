"""Which labs the act harness runs: ``MSDA_ACT_LABS``.

* unset or ``subset`` (the self-test): one lab of each stage kind (cpu, interpret, aot): lab01,
  lab04 and lab09 (the quickest of their kind), else the first ready lab of the kind;
* ``all`` (``nox -s workflows``): every ready lab, plus the kit's ci.yml and regrade.yml;
* ``lab01,lab05``: those labs;
* ``none``: no act run at all (the act tests skip and say so).

The whole-class workflow (regrade-class.yml, test_act_class_dispatch.py) runs in every mode but
``none``: it grades lab01 only, in about a minute.
"""

from __future__ import annotations

import os

from kit import built_labs

KINDS = ("cpu", "interpret", "aot")
# The subset's lab of each kind: the quickest to grade (lab 01 grades in a few seconds, lab 00
# needs about twenty); any other ready lab of the kind stands in if one of these is not ready.
PREFERRED = {"cpu": "lab01", "interpret": "lab04", "aot": "lab09"}


def mode() -> str:
    return (os.environ.get("MSDA_ACT_LABS") or "subset").strip()


def selected_labs() -> list[str]:
    choice = mode()
    ready = [lab for lab in built_labs()]
    if choice == "none":
        return []
    if choice == "all":
        return [lab.id for lab in ready]
    if choice == "subset":
        picked = []
        for kind in KINDS:
            of_kind = [lab for lab in ready if kind in [s.name for s in lab.cpu_stages]]
            lab = next((lab for lab in of_kind if lab.id == PREFERRED[kind]),
                       of_kind[0] if of_kind else None)
            if lab is not None and lab.id not in picked:
                picked.append(lab.id)
        return picked
    wanted = [key.strip() for key in choice.split(",") if key.strip()]
    unknown = sorted(set(wanted) - {lab.id for lab in ready})
    if unknown:
        raise ValueError(f"MSDA_ACT_LABS names labs that are not ready: {', '.join(unknown)} "
                         f"(give lab ids such as lab01,lab05, or subset, all, none)")
    return wanted


def runs_kit_workflows() -> bool:
    """ci.yml and regrade.yml (and the Gradescope and Classroom 50 layouts) run with ``all``."""
    return mode() == "all"


def describe() -> str:
    return (f"act workflow harness (MSDA_ACT_LABS={mode()}): labs "
            f"{', '.join(selected_labs()) or 'none'}"
            + ("; plus ci.yml, regrade.yml, Gradescope and Classroom 50" if runs_kit_workflows()
               else ""))
