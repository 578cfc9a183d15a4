"""Known mistakes in the code around the kernels (labs 09 and 10): rules, tables and hand-offs
that return plain values, not tensors.

Each catalogue entry computes what a submission with that mistake returns on the same question
the grader asks, so a grader names a mistake only when a wrong answer equals that entry's answer
on every question of the test, differs from the right answer there, and no other entry gives the
same answers (:func:`msda_labs.grading.judge.compare.expect_answers`). The right answers are
the judge's own (its truth tables and the chip's kernel signature); nothing here is graded.

- :data:`SWITCH`: ``use_fp32_grad_accum``, ``(dtype name, (major, minor), the right answer) ->
  bool`` (or ``("tensor", bool)`` for a 0-d tensor);
- :data:`CLASSIFY`: ``classify_atomics``, ``(tokens, the right class) -> "emulated" | "native" |
  "none"``;
- :data:`SIGNATURE`: ``backward_signature``, ``(params, value dtype, grad_value dtype) ->
  {argument: type}``, ``params`` being ``(name, is_constexpr)`` of the lab 08 kernel;
- :data:`FLAG`: the accumulator flag that reaches ``msda_backward``, ``(dtype name, flag given,
  the flag use_fp32_grad_accum gives) -> bool`` (``"auto"``: no flag given; None: asked for).
"""

from __future__ import annotations

from msda_labs.mistakes.registry import Catalogue

__all__ = ["SWITCH", "CLASSIFY", "SIGNATURE", "FLAG", "GRADIENT_ORDER", "answers_of"]

SWITCH = Catalogue("accumulator switch")
CLASSIFY = Catalogue("atomic classification")
SIGNATURE = Catalogue("kernel signature")
FLAG = Catalogue("accumulator flag")

HOPPER = 9  # the first compute capability major with a native bf16 atomic add


def answers_of(catalogue: Catalogue, questions, *args) -> dict[str, tuple[list, str]]:
    """``{name: (answers, why)}``: each entry of ``catalogue`` asked every question of
    ``questions`` (a tuple of arguments each, ``args`` appended): what a submission with that
    mistake answers, in order."""
    return {m.name: ([m.plant(*q, *args) for q in questions], m.why) for m in catalogue.entries()}


# -- use_fp32_grad_accum (Task 9.3) ---------------------------------------------------------------
@SWITCH.register("fp16_too", "fp16 sent to the fp32 buffer too: fp16 atomic add is native since "
                             "SM 6.0, so only bf16 before SM 9.0 needs the fp32 buffer")
def fp16_too(dtype: str, capability, right: bool) -> bool:
    return dtype in ("bf16", "fp16") and capability[0] < HOPPER


@SWITCH.register("capability_ignored", "the capability never read: bf16 needs the fp32 buffer "
                                       "only before SM 9.0; Hopper (9.0) and later add bf16 "
                                       "natively")
def capability_ignored(dtype: str, capability, right: bool) -> bool:
    return dtype == "bf16"


@SWITCH.register("hopper_counted_before", "SM 9.0 counted as pre-Hopper (major <= 9): SM 9.0 "
                                          "(Hopper) adds a native bf16 atomic add, so the test "
                                          "is major < 9")
def hopper_counted_before(dtype: str, capability, right: bool) -> bool:
    return dtype == "bf16" and capability[0] <= HOPPER


@SWITCH.register("inverted", "the test inverted: bf16 needs the fp32 buffer before SM 9.0 "
                             "(major < 9), not from it on")
def inverted(dtype: str, capability, right: bool) -> bool:
    return dtype == "bf16" and capability[0] >= HOPPER


@SWITCH.register("a100_only", "only the A100's (8, 0) sent to the fp32 buffer: every GPU before "
                              "SM 9.0 lacks the bf16 atomic add, so compare the major version")
def a100_only(dtype: str, capability, right: bool) -> bool:
    return dtype == "bf16" and tuple(capability) == (8, 0)


@SWITCH.register("tensor", "a tensor where a bool belongs: the rule is right, but the answer is "
                           "a 0-d torch.bool tensor (a comparison of tensors); compare plain "
                           "ints and return True or False")
def tensor(dtype: str, capability, right: bool):
    return ("tensor", right)


# -- classify_atomics (Task 9.2) ------------------------------------------------------------------
# Each entry is the right class (the judge's, given as ``right``) changed where its misreading
# changes it: the catalogue describes how a classification goes wrong and holds no classifier.
def _cas_missed(tokens, right, seen) -> str:
    """``right``, except that a kernel whose compare-and-swap the misreading does not see
    (``seen(token)`` false for every token) reads as native."""
    return "native" if right == "emulated" and not any(seen(t) for t in tokens) else right


@CLASSIFY.register("substring", "a substring match: 'cas' found inside another qualifier "
                                "(multicast), where only a whole dot-separated qualifier cas "
                                "means a compare-and-swap")
def substring(tokens, right: str) -> str:
    return "emulated" if any("cas" in t for t in tokens) else right


@CLASSIFY.register("one_spelling", "one spelling of cas: only tokens ending in .cas.b32 counted, "
                                   "where any token with a cas qualifier is a compare-and-swap, "
                                   "whatever its width, and whatever the order of the other "
                                   "qualifiers")
def one_spelling(tokens, right: str) -> str:
    return _cas_missed(tokens, right, lambda t: t.endswith(".cas.b32"))


@CLASSIFY.register("fixed_position", "cas looked for at one position of the token: a cas part "
                                     "anywhere in it means a compare-and-swap, whatever the "
                                     "order of the other qualifiers (it changes between "
                                     "compiler versions)")
def fixed_position(tokens, right: str) -> str:
    return _cas_missed(tokens, right, lambda t: t.split(".")[2:3] == ["cas"])


@CLASSIFY.register("atom_is_emulated", "every atom. read as a compare-and-swap: an atom.add "
                                       "returns the old value and a red.add does not, but both "
                                       "are one hardware instruction; only a cas qualifier "
                                       "means a retry loop")
def atom_is_emulated(tokens, right: str) -> str:
    if any(t.startswith("atom.") for t in tokens):
        return "emulated"
    return _cas_missed(tokens, right, lambda t: False)


@CLASSIFY.register("first_token_only", "only the first token read: the kernel is emulated when "
                                       "any of its tokens is a compare-and-swap")
def first_token_only(tokens, right: str) -> str:
    return _cas_missed(tokens[:1], right, lambda t: "cas" in t.split("."))


# -- backward_signature (Task 9.4) ----------------------------------------------------------------
TABLES = ("shapes_ptr", "starts_ptr")
BUFFER = "grad_value_ptr"


def _signature(params, value_dtype, grad_value_dtype, *, tables="*i64", sizes="i64",
               buffer=None, data=None, ptr_first=False) -> dict[str, str]:
    """The kernel's signature built with the spec's rules, each one replaceable by a mistake."""
    buffer = "*" + grad_value_dtype if buffer is None else buffer
    data = "*" + value_dtype if data is None else data
    sig = {}
    for name, is_constexpr in params:
        if is_constexpr:
            sig[name] = "constexpr"
        elif ptr_first and name.endswith("_ptr"):
            sig[name] = data
        elif name in TABLES:
            sig[name] = tables
        elif name == BUFFER:
            sig[name] = buffer
        elif name.endswith("_ptr"):
            sig[name] = data
        else:
            sig[name] = sizes
    return sig


@SIGNATURE.register("ptr_rule_first", "the '_ptr' rule tested first: shapes_ptr and starts_ptr "
                                      "(int64 tables) and grad_value_ptr (the accumulator) end "
                                      "in _ptr too, so test those names before the general rule")
def ptr_rule_first(params, value_dtype, grad_value_dtype):
    return _signature(params, value_dtype, grad_value_dtype, ptr_first=True)


@SIGNATURE.register("tables_as_data", "the level tables typed as data: shapes_ptr and "
                                      "starts_ptr point to int64 tables, so they are '*i64' "
                                      "whatever value_dtype is")
def tables_as_data(params, value_dtype, grad_value_dtype):
    return _signature(params, value_dtype, grad_value_dtype, tables="*" + value_dtype)


@SIGNATURE.register("sizes_i32", "runtime sizes typed 'i32': Q and S are typed 'i64', so that "
                                 "the offsets computed from them cannot overflow")
def sizes_i32(params, value_dtype, grad_value_dtype):
    return _signature(params, value_dtype, grad_value_dtype, sizes="i32")


@SIGNATURE.register("tables_i32", "the level tables typed '*i32': shapes_ptr and starts_ptr "
                                  "point to int64 tensors, so they are '*i64'")
def tables_i32(params, value_dtype, grad_value_dtype):
    return _signature(params, value_dtype, grad_value_dtype, tables="*i32")


@SIGNATURE.register("buffer_as_value", "grad_value_ptr typed with value_dtype: grad_value_ptr "
                                       "is the accumulator, so it takes grad_value_dtype")
def buffer_as_value(params, value_dtype, grad_value_dtype):
    return _signature(params, value_dtype, grad_value_dtype, buffer="*" + value_dtype)


@SIGNATURE.register("dtypes_swapped", "value_dtype and grad_value_dtype swapped: grad_value_ptr "
                                      "takes grad_value_dtype, every other data pointer "
                                      "value_dtype")
def dtypes_swapped(params, value_dtype, grad_value_dtype):
    return _signature(params, grad_value_dtype, value_dtype)


# -- the accumulator flag on its way to msda_backward (Tasks 10.1 and 10.3) ----------------------
@FLAG.register("never_reaches", "a flag that never reaches msda_backward: it ran with False "
                                "whatever flag was given; keep the flag on ctx in "
                                "MSDAFunction.forward and pass it on in backward")
def never_reaches(dtype: str, given, resolved: bool) -> bool:
    return False


@FLAG.register("inverted", "the flag inverted on its way: msda_backward got False for True and "
                           "True for False")
def flag_inverted(dtype: str, given, resolved: bool) -> bool:
    chosen = resolved if given in ("auto", None) else bool(given)
    return not chosen


@FLAG.register("none_as_true", "fp32_grad_accum=None resolved to True: resolve None with "
                               "use_fp32_grad_accum(value.dtype, capability), which is False "
                               "for float32 and float16")
def none_as_true(dtype: str, given, resolved: bool) -> bool:
    return True if given in ("auto", None) else bool(given)


@FLAG.register("none_as_false", "fp32_grad_accum=None read as False: resolve None with "
                                "use_fp32_grad_accum(value.dtype, capability), which is True "
                                "for bfloat16 before SM 9.0")
def none_as_false(dtype: str, given, resolved: bool) -> bool:
    return False if given in ("auto", None) else bool(given)


@FLAG.register("explicit_ignored", "an explicit fp32_grad_accum overridden: only None is "
                                   "resolved with use_fp32_grad_accum; True or False is kept as "
                                   "given")
def explicit_ignored(dtype: str, given, resolved: bool) -> bool:
    return resolved


# -- the gradients MSDAFunction.backward returns (Task 10.1) --------------------------------------
# forward's inputs, in order, and the one msda_backward's three gradients belong to.
FORWARD_INPUTS = ("value", "spatial_shapes", "level_start_index", "sampling_locations",
                  "attention_weights", "fp32_grad_accum")
GRADIENT_ORDER = ("gradients out of forward's argument order: autograd pairs the i-th gradient "
                  "backward returns with forward's i-th input, so return (grad_value, None, "
                  "None, grad_loc, grad_attn, None)")
