"""Export one standalone template repository per lab, driven by ``classroom.yml``.

An exported lab NN holds, at its root::

    README.md              the handout, with a "Getting started" section
    labNN.py               the starter (the one file the student edits)
    tests/                 the lab's grading tests
    shared/                the msda_labs package with the chips of labs < NN only
    classroom.yml          the course manifest reduced to this lab
    requirements.txt       the kit's pins
    noxfile.py             sessions labNN (and labNN-gpu for labs with a GPU stage)
    .github/workflows/classroom.yml   grading on push (GitHub Classroom's shape)
    .devcontainer/devcontainer.json   for macOS (no triton wheel) and Codespaces
    .gitignore .gitattributes .pre-commit-config.yaml
    .msda/integrity.sha256            hashes of every grading file

Never the chip of lab NN or of a later lab, and no git history (with ``git=True`` the first and
only commit holds the export). :func:`find_leaks` checks the first promise on every export.
Nor the student-facing spec's statement of lab NN: :func:`_leave_out_own_spec` takes from the
exported ``msda_labs/student/spec.py`` every function that lab NN's self-check runs (and what
needs them), and records instead what they give on the self-check's examples
(``msda_labs/student/selfcheck/recorded/labNN.pt``), which ``python labNN.py`` compares with.
For teachers, :func:`gradescope_zip` builds the Gradescope autograder and
:func:`classroom50_autograder` the Classroom 50 custom grader, both carrying the same files.
"""

from __future__ import annotations

import ast
import base64
import importlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import yaml

from msda_labs.authoring.fences import solution_blocks
from msda_labs.authoring.handout import by_hand_command
from msda_labs.classroom import workflows
from msda_labs.course.manifest import Lab, Manifest, load_manifest
from msda_labs.errors import KitError
from msda_labs.grading.judge import integrity

__all__ = ["ExportError", "export_lab", "export_labs", "find_leaks", "solution_blocks",
           "gradescope_zip", "classroom50_autograder", "classroom50_target",
           "pristine_bundle", "write_exports"]

# Never copied from a lab folder or the shared package.
_SKIP_NAMES = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".nox", ".venv",
               ".git", "my", "build", "dist"}
_SKIP_PATTERNS = ("*.pyc", "*.pyo", "*.egg-info", "grade.json", "grade-gpu.json", "*.grade.json",
                  "grade.md")
_CHIP = re.compile(r"^lab([0-9]{2})\.py$")
# Kit modules that hold a lab's answers outside the chips folder: {file name: (the first lab whose
# export may carry it, what it answers)}.
# msda_labs/student/shipped.py and shipped_kernels.py hold the tuned forward and backward
# kernels that lab 10 ships (the math of labs 05-08 in full); shipped_op.py is lab 10's operator
# finished (the composable op of the model bench, whose eager autograd.Function is Task 10.1's
# answer), so no lab's template carries it.
_LATER_MODULES = {"shipped.py": (10, "kernels of lab 05-08"),
                  "shipped_kernels.py": (10, "kernels of lab 05-08"),
                  "shipped_op.py": (11, "the operator of lab 10")}
_LATER_MODULE_FOLDERS = ("msda_labs", "student")  # where those modules live (and lived)


class ExportError(KitError, RuntimeError):
    """The export cannot be written (or would leak an answer)."""


def _ignore(lab_number: int | None = None):
    patterns = shutil.ignore_patterns(*_SKIP_PATTERNS)

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = set(patterns(folder, names)) | {n for n in names if n in _SKIP_NAMES}
        skipped |= {n for n in names if os.path.islink(os.path.join(folder, n))}
        if lab_number is not None and Path(folder).name == "chips":
            skipped |= {n for n in names
                        if (m := _CHIP.match(n)) and int(m.group(1)) >= lab_number}
        if lab_number is not None and Path(folder).name in _LATER_MODULE_FOLDERS:
            skipped |= {n for n in names if lab_number < _LATER_MODULES.get(n, (0, ""))[0]}
        return skipped

    return ignore


def _normalised(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def find_leaks(dest: Path, lab_number: int, chips_dir: Path) -> list[str]:
    """Answers of lab ``lab_number`` or later found in an export: chip files, or any of their
    solution blocks inside any text file."""
    leaks = []
    for path in sorted((dest / "shared").rglob("lab[0-9][0-9].py")):
        match = _CHIP.match(path.name)
        if path.parent.name == "chips" and match and int(match.group(1)) >= lab_number:
            leaks.append(f"{path.relative_to(dest)}: the chip of lab {match.group(1)}")
    for name, (first, what) in _LATER_MODULES.items():
        for path in sorted((dest / "shared").rglob(name)):
            if path.parent.name in _LATER_MODULE_FOLDERS and lab_number < first:
                leaks.append(f"{path.relative_to(dest)}: {what}")
    blocks = []
    for chip in sorted(Path(chips_dir).glob("lab[0-9][0-9].py")):
        if int(chip.stem[3:]) >= lab_number:
            blocks += [(chip.stem, b) for b in solution_blocks(chip.read_text())]
    if not blocks:
        return leaks
    for path in sorted(dest.rglob("*")):
        if not path.is_file() or ".git" in path.relative_to(dest).parts:
            continue
        try:
            text = _normalised(path.read_text())
        except (UnicodeDecodeError, OSError):
            continue
        for chip_id, block in blocks:
            if block in text:
                leaks.append(f"{path.relative_to(dest)}: a solution block of the {chip_id} chip")
                break
    return leaks


def without_definitions(source: str, names: set[str]) -> tuple[str, set[str]]:
    """``source`` without its top-level functions and classes named in ``names``, nor those that
    use one of them (to any depth); ``__all__`` lists what is left. Returns (text, removed)."""
    tree = ast.parse(source)
    defs = {n.name: n for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    removed = set(names) & set(defs)
    while True:
        more = {name for name, node in defs.items() if name not in removed
                and {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & removed}
        if not more:
            break
        removed |= more
    lines = source.splitlines(keepends=True)
    drop = set()
    for name in removed:
        node = defs[name]
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        drop.update(range(first - 1, node.end_lineno))
        # the blank lines after it, so that two definitions stay two blank lines apart
        after = node.end_lineno
        while after < len(lines) and not lines[after].strip():
            drop.add(after)
            after += 1
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                for t in node.targets):
            kept = [e.value for e in node.value.elts if e.value not in removed]
            drop.update(range(node.lineno - 1, node.end_lineno))
            lines[node.lineno - 1] = "__all__ = " + repr(kept).replace("'", '"') + "\n"
            drop.discard(node.lineno - 1)
    text = "".join(line for i, line in enumerate(lines) if i not in drop)
    return text.rstrip("\n") + "\n", removed


def _top_level_imports(source: str) -> set[str]:
    """The modules of the kit a file imports at its top level (what runs when it is imported)."""
    found = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _module_name(path: Path, package_root: Path) -> str:
    parts = path.relative_to(package_root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _own_truth_template(dest: Path, lab: Lab) -> tuple[Path, list[Path]] | None:
    """Lab ``lab``'s truth that would answer its own tasks, out of its template.

    A lab whose tests take their truth from ``tests/truth_labNN.py`` (labs 00, 03 and 08:
    :mod:`msda_labs.grading.judge.owntruth`) gets in its place a module that looks the values up
    in the recording beside it (``truth_labNN.pt``), and loses the kit modules that module names in
    ``ANSWERING_MODULES`` with every module that imports one of them at its top level. Returns
    the truth module and the package files left out (None for a lab without one)."""
    module = dest / "tests" / f"truth_{lab.id}.py"
    if not module.is_file():
        return None
    tree = ast.parse(module.read_text())
    declared = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    try:
        answering = ast.literal_eval(declared["ANSWERING_MODULES"])
        names = ast.literal_eval(declared["__all__"])
    except (KeyError, ValueError) as exc:
        raise ExportError(f"{module.name} must declare ANSWERING_MODULES and __all__ as "
                          f"literals ({exc})") from None
    if not module.with_suffix(".pt").is_file():
        raise ExportError(f"{lab.id}: no {module.with_suffix('.pt').name}; run python "
                          f"scripts/record_truth.py {lab.id}")
    shared = dest / "shared"
    files = {_module_name(p, shared): p for p in sorted(shared.rglob("*.py"))}
    dropped = set()
    for rel in answering:
        name = _module_name(shared / rel, shared)
        if name not in files:
            raise ExportError(f"{module.name}: ANSWERING_MODULES names {rel}, not in the kit")
        dropped.add(name)
    imports = {name: _top_level_imports(path.read_text()) for name, path in files.items()}
    while more := {name for name, used in imports.items() if name not in dropped
                   and used & dropped}:
        dropped |= more
    for path in sorted((dest / "tests").glob("*.py")):
        if path != module and _top_level_imports(path.read_text()) & dropped:
            raise ExportError(f"{lab.id}: tests/{path.name} imports a module that answers the "
                              f"lab's own tasks; take that truth from {module.name}")
    left_out = [files[name] for name in sorted(dropped)]
    for path in left_out:
        path.unlink()
    recording = module.with_suffix(".pt").name
    module.write_text(
        f'"""The ground truth of {lab.id}\'s tests in this template repository: recorded, never '
        f'computed.\n\nThe course kit computes these values on the judge\'s side. Here each '
        f'one is what the kit gave\non a call that the tests make on the public cases, read '
        f'from ``{recording}``\n(``msda_labs.grading.judge.owntruth``). A grade with a secret '
        f'seed runs on the judge\'s copy.\n"""\n\n'
        f'from msda_labs.grading.judge.owntruth import recorded_module\n\n'
        f'__all__ = {json.dumps(list(names))}\n'
        f'__getattr__ = recorded_module(__file__, __all__)\n')
    return module, left_out


def _restore_judge_truth(manifest: Manifest, lab: Lab, dest: Path,
                         own: tuple[Path, list[Path]]) -> None:
    """The judge's copy of the lab: the kit's own truth module and the modules the template
    leaves out, put back; the template's manifest is kept beside the copy's own
    (``integrity.TEMPLATE_DIGESTS_PATH``), so that a checkout is compared with the template,
    never with what only the judge holds."""
    module, left_out = own
    shutil.copy2(manifest.root / lab.folder / "tests" / module.name, module)
    for path in left_out:
        shutil.copy2(manifest.root / path.relative_to(dest), path)


_SPEC = Path("shared", "msda_labs", "student", "spec.py")


def _leave_out_own_spec(dest: Path, lab: Lab) -> list[str]:
    """Take lab ``lab``'s own statements out of the exported student-facing spec, and record what
    they give on the lab's self-check examples in their place; returns the functions left out.

    The self-check runs with the reference solution's module (lab 07's examples need its given
    ``gather_corners``; a layer's example builds the layer before the spec reads it). Nothing of
    the solution is written: only the spec's outputs, on the self-check's own inputs.
    """
    import torch

    from msda_labs.student import selfcheck

    chip = importlib.import_module(f"msda_labs.chips.{lab.id}")
    recorded = selfcheck.record(lab.number, vars(chip))
    used = set(recorded.pop("__spec_used__"))
    if not used:
        return []
    target = dest / "shared" / selfcheck.recording_path(lab.number).relative_to(
        Path(selfcheck.__file__).resolve().parents[3])
    target.parent.mkdir(parents=True, exist_ok=True)
    torch.save(recorded, target)
    spec = dest / _SPEC
    text, removed = without_definitions(spec.read_text(), used)
    note = (f"\nIn this template repository (lab {lab.number:02d}), the functions that state "
            f"lab {lab.number:02d}'s own\nanswers are left out ({', '.join(sorted(removed))}): "
            f"``python {lab.id}.py`` compares with\nwhat they give on its examples, recorded in "
            f"``msda_labs/student/selfcheck/recorded/{lab.id}.pt``.\n")
    head, sep, rest = text.partition('"""\n\nfrom __future__')
    spec.write_text(head + note + sep + rest if sep else text)
    return sorted(removed)


def _exported_manifest(manifest: Manifest, lab: Lab) -> str:
    entry = next(e for e in manifest.raw["labs"] if e["id"] == lab.id)
    data = {"course": dict(manifest.raw["course"]), "labs": [dict(entry)]}
    header = ("# The course manifest reduced to this repository's lab (generated by `python -m "
              "msda_labs export`).\n# A grading file: the grader reads titles, stages and time "
              "limits from it.\n")
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def platform_note(lab: Lab) -> str:
    """Where this lab's grader runs, from its stages: what requirements.txt and the grader allow.

    The grader forks a child process per test (POSIX only), so no lab grades on native Windows;
    triton is pinned for Linux only, so the Triton stages (interpret, aot, gpu) need Linux.
    """
    if all(stage.name == "cpu" for stage in lab.stages):
        return (
            "| where | this lab (plain PyTorch, no Triton) |\n|---|---|\n"
            "| Linux, macOS (Python 3.11+) | runs natively |\n"
            "| Windows | in WSL2 (Ubuntu), or in the devcontainer / a Codespace: the grader "
            "starts each test in a forked process, which native Windows lacks |")
    gpu = (" Its GPU stage (`nox -s " + lab.id + "-gpu`) needs a CUDA GPU or a Modal account."
           if lab.has_gpu else "")
    return (
        "| where | this lab (Triton) |\n|---|---|\n"
        "| Linux on x86-64 (Python 3.11+) | runs natively (triton is pinned for Linux only, "
        "see `requirements.txt`) |\n"
        "| macOS | in a Codespace (Linux x86-64); a local devcontainer on Apple silicon is "
        "Linux on arm64, where the pinned triton may not install |\n"
        "| Windows | in WSL2 (Ubuntu), or in the devcontainer / a Codespace |\n\n"
        "The CPU stage runs your kernels in Triton's interpreter: no GPU needed." + gpu)


def due_note(manifest: Manifest, lab: Lab) -> str:
    """The README's paragraph on the lab's due date, late window and late policy ("" without a
    due date)."""
    if lab.due is None:
        return ""
    when = lab.due.isoformat(sep=" ", timespec="minutes")
    text = f"**Due: {when}** (date, time and UTC offset)."
    if lab.late_days:
        text += (f" Late work is accepted until {lab.cutoff.isoformat(sep=' ', timespec='minutes')}"
                 f" ({lab.late_days} day(s) after).")
    text += (f" Late policy: {manifest.late_policy.describe()}. What counts is the last commit "
             f"GitHub *received* (your push) by then, on the default branch: the time of the "
             f"push, never the date inside a commit.")
    return text + "\n\n"


def _readme(handout: str, manifest: Manifest, lab: Lab) -> str:
    start = workflows.fill(workflows.template("readme-start.md"), LAB=lab.id,
                           BY_HAND=by_hand_command(lab.id),
                           COURSE_TITLE=manifest.title, PLATFORM=platform_note(lab),
                           WHEN_GRADED=workflows.when_graded(manifest, lab))
    due = due_note(manifest, lab)
    if due:
        heading, _, rest = start.partition("\n\n")
        start = f"{heading}\n\n{due}{rest}"
    # After the handout's first part (title, goal, what you will learn), before its second.
    match = re.search(r"^## ", handout, flags=re.M)
    if match is None:
        return handout.rstrip("\n") + "\n\n" + start
    return handout[: match.start()] + start + handout[match.start():]


def _first_task(tests_dir: Path, lab: Lab) -> str:
    for path in sorted(tests_dir.glob("test_*.py")):
        match = re.search(r"^TASKS\s*=\s*\{\s*[\"']([0-9.]+)[\"']", path.read_text(), flags=re.M)
        if match:
            return match.group(1)
    return f"{lab.number}.1"


def _git_init(dest: Path, lab: Lab) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "msda-labs", "GIT_AUTHOR_EMAIL": "msda-labs@invalid",
           "GIT_COMMITTER_NAME": "msda-labs", "GIT_COMMITTER_EMAIL": "msda-labs@invalid"}
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"],
                ["git", "commit", "-q", "-m", f"{lab.id}: {lab.title} (template)"]):
        subprocess.run(cmd, cwd=dest, env=env, check=True, capture_output=True)


def export_lab(manifest: Manifest, lab: Lab, out: Path, *, reporter_action: str | None = None,
               git: bool = False, force: bool = False, judge: bool = False) -> Path:
    """Write the template repository of ``lab`` to ``out/<lab folder>``; returns its path.

    ``judge``: the judge's copy (regrade, Gradescope, Classroom 50): the template, with the truth
    that the template carries only as a recording put back (:func:`_restore_judge_truth`)."""
    if not lab.built:
        raise ExportError(f"{lab.id} is not built yet (status: {lab.status} in classroom.yml)")
    source = manifest.root / lab.folder
    if not (source / lab.module).is_file() or not (source / "tests").is_dir():
        raise ExportError(f"{source} has no {lab.module} and tests/; is {lab.id} really ready?")
    dest = Path(out) / lab.folder
    if dest.exists():
        if not force and any(dest.iterdir()):
            raise ExportError(f"{dest} exists and is not empty (use --force to replace it)")
        shutil.rmtree(dest)
    dest.mkdir(parents=True)

    shutil.copytree(source, dest, ignore=_ignore(), dirs_exist_ok=True)
    handout = dest / "README.md"
    if handout.is_file():
        handout.write_text(_readme(handout.read_text(), manifest, lab))
    shutil.copytree(manifest.root / "shared", dest / "shared", ignore=_ignore(lab.number))
    _leave_out_own_spec(dest, lab)
    own_truth = _own_truth_template(dest, lab)
    shutil.copy2(manifest.root / "requirements.txt", dest / "requirements.txt")
    (dest / "classroom.yml").write_text(_exported_manifest(manifest, lab))
    first_task = _first_task(source / "tests", lab)
    (dest / "noxfile.py").write_text(workflows.render_noxfile(manifest, lab, first_task))
    workflow = dest / workflows.WORKFLOW_PATH
    workflow.parent.mkdir(parents=True)
    workflow.write_text(workflows.render_workflow(manifest, lab, reporter_action))
    (dest / ".devcontainer").mkdir()
    (dest / ".devcontainer" / "devcontainer.json").write_text(
        workflows.render_devcontainer(manifest, lab))
    (dest / ".gitignore").write_text(workflows.template("gitignore"))
    (dest / ".gitattributes").write_text(workflows.template("gitattributes"))
    (dest / ".pre-commit-config.yaml").write_text(workflows.template("pre-commit-config.yaml"))

    load_manifest(dest / "classroom.yml")  # the reduced manifest still passes its schema
    leaks = find_leaks(dest, lab.number, manifest.root / "shared" / "msda_labs" / "chips")
    if leaks:
        shutil.rmtree(dest)
        raise ExportError(f"refusing to export {lab.id}: it would contain answers:\n  "
                          + "\n  ".join(leaks))
    integrity.write_manifest(dest)
    if judge and own_truth is not None:
        shutil.copy2(dest / integrity.MANIFEST_PATH, dest / integrity.TEMPLATE_DIGESTS_PATH)
        _restore_judge_truth(manifest, lab, dest, own_truth)
        integrity.write_manifest(dest)  # the judge's copy checks clean against itself
    if git:
        _git_init(dest, lab)
    return dest


def export_labs(manifest: Manifest, keys: list[str], out: Path, **options) -> list[Path]:
    """Export labs by id (``all`` = every lab whose status is ready)."""
    if any(k == "all" for k in keys):
        labs = [lab for lab in manifest.labs if lab.built]
        if not labs:
            raise ExportError("no lab in classroom.yml has status: ready")
    else:
        labs = [manifest.lab(k) for k in keys]
    return [export_lab(manifest, lab, out, **options) for lab in labs]


def pristine_bundle(export_dir: Path) -> bytes:
    """A gzipped tar of an export (without git data): what teacher-side graders restore from."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=9) as tar:
        for path in sorted(Path(export_dir).rglob("*")):
            rel = path.relative_to(export_dir)
            if ".git" in rel.parts or not path.is_file():
                continue
            info = tar.gettarinfo(str(path), arcname=rel.as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
    return buffer.getvalue()


GRADESCOPE_SEED = "msda_grade_seed"  # the secret seed's file in the Gradescope zip


def gradescope_zip(manifest: Manifest, lab: Lab, zip_path: Path, work: Path,
                   seed_file: Path | None = None) -> Path:
    """Gradescope's autograder zip: setup.sh, run_autograder, the grading script, the lab, and
    with ``seed_file`` the secret seed as ``msda_grade_seed`` (mode 0600; setup.sh and the
    grading script keep it readable by root only).

    ``work`` is a scratch folder (the lab is exported into it first).
    """
    export_dir = export_lab(manifest, lab, work, force=True, judge=True)
    candidates = dict.fromkeys([f"python{manifest.python}", "python3.12", "python3.11"])
    values = dict(LAB=lab.id, TITLE=lab.title, PY_CANDIDATES=" ".join(candidates))
    zip_path = Path(zip_path)
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in (("setup.sh", workflows.fill(workflows.template("gradescope-setup.sh"),
                                                       **values)),
                           ("run_autograder", workflows.fill(
                               workflows.template("gradescope-run_autograder"), **values))):
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o100755 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, text)
        zf.writestr("gradescope_grade.py", workflows.template("gradescope_grade.py"))
        if seed_file is not None:
            secret = Path(seed_file).read_text().strip()
            if not secret:
                raise ExportError(f"the seed file {seed_file} is empty")
            info = zipfile.ZipInfo(GRADESCOPE_SEED, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o100600 << 16
            zf.writestr(info, secret + "\n")
        for path in sorted(export_dir.rglob("*")):
            if path.is_file():
                zf.write(path, "lab/" + path.relative_to(export_dir).as_posix())
    return zip_path


# Classroom 50's runner accepts classroom and assignment names of this shape (its autograde
# runner validates .classroom50.yaml with the same pattern).
_C50_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{1,38}$")


def classroom50_target(out: Path, classroom: str, assignment: str) -> Path:
    """Where Classroom 50 looks for an assignment's custom autograder in the ``classroom50``
    repository: ``<repo>/<classroom>/autograders/<assignment>/autograder.py``.

    Its publish workflow bundles each ``<classroom>/autograders/<assignment>/`` folder into
    ``<classroom>/autograders/<assignment>.tar.gz`` on the Pages site, and its runner downloads
    that bundle and runs ``<assignment>/autograder.py`` from it; a file anywhere else is never
    bundled, and the submission falls back to the classroom's default autograder.
    """
    for what, value in (("classroom", classroom), ("assignment", assignment)):
        if not _C50_SLUG.match(value or ""):
            raise ExportError(f"Classroom 50 {what} name {value!r}: use the short name Classroom "
                              f"50 gave it (lowercase letters, digits and '-', 2 to 39 "
                              f"characters, e.g. msda-2027 or lab-05)")
    return Path(out) / classroom / "autograders" / assignment / "autograder.py"


def classroom50_autograder(manifest: Manifest, lab: Lab, out: Path, work: Path,
                           assignment: str | None = None, classroom: str | None = None) -> Path:
    """Write the Classroom 50 custom autograder of ``lab`` into ``out``, the root of a checkout
    of the classroom's ``classroom50`` repository (see :func:`classroom50_target`)."""
    if not classroom:
        raise ExportError("--classroom50 needs --classroom NAME: the short name of the classroom "
                          "(its folder in the classroom50 repository)")
    target = classroom50_target(out, classroom, assignment or lab.folder)
    export_dir = export_lab(manifest, lab, work, force=True, judge=True)
    blob = base64.b64encode(pristine_bundle(export_dir)).decode()
    wrapped = "\n".join(blob[i:i + 96] for i in range(0, len(blob), 96))
    text = workflows.fill(workflows.template("classroom50-autograder.py"), LAB=lab.id,
                          TITLE=lab.title, PYTHON=manifest.python, PRISTINE=wrapped)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    target.chmod(0o755)
    return target


def write_exports(keys: list[str], *, out: str | None = None, gradescope: str | None = None,
                  classroom50: str | None = None, classroom: str | None = None,
                  assignment: str | None = None, reporter_action: str | None = None,
                  git: bool = False, force: bool = False, seed_file: str | None = None):
    """``export``: the labs named by ``keys`` (or ``all`` ready labs) as template repositories
    in ``out``, Gradescope autograder zips and/or Classroom 50 autograders; yields one line per
    thing written. Raises :class:`~msda_labs.errors.KitError` saying what to pass instead."""
    import tempfile

    from msda_labs.course.manifest import find_manifest

    manifest = load_manifest(find_manifest())
    labs = [lab for lab in manifest.labs if lab.built] if "all" in keys else \
        [manifest.lab(key) for key in keys]
    if classroom50 and not classroom:
        raise ExportError("--classroom50 REPO needs --classroom NAME, the classroom's short "
                          "name: the autograder goes to REPO/NAME/autograders/<assignment>/, "
                          "the only place Classroom 50 bundles it from")
    if assignment and len(labs) != 1:
        raise ExportError("--assignment names one lab's assignment; export one lab with it")
    if out:
        for path in export_labs(manifest, [lab.id for lab in labs], Path(out),
                                reporter_action=reporter_action, git=git, force=force):
            yield f"exported {path}"
    with tempfile.TemporaryDirectory(prefix="msda-export-") as tmp:
        for lab in labs:
            if gradescope:
                target = Path(gradescope)
                if len(labs) > 1 or target.suffix != ".zip":
                    target = target / f"{lab.folder}-gradescope.zip"
                gradescope_zip(manifest, lab, target, Path(tmp) / f"gs-{lab.id}",
                               seed_file=Path(seed_file) if seed_file else None)
                yield f"gradescope autograder {target}"
            if classroom50:
                target = classroom50_autograder(manifest, lab, Path(classroom50),
                                                Path(tmp) / f"c50-{lab.id}", assignment,
                                                classroom)
                yield f"classroom 50 autograder {target}"
