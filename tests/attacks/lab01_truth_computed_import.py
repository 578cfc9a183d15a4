# attack: truth-computed-import
# lab: lab01
# targets: 1.1 1.2
# Imports the ground truth under a name computed at run time (importlib with a joined string), so
# that no import statement names it; answers with its functions.
import importlib

_ref = importlib.import_module(".".join(["msda_labs", "tr" + "uth", "ref" + "erence"]))


def bilinear_sample(img, x, y):
    return getattr(_ref, "bilinear" + "_pixel")(img, x, y)


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    return getattr(_ref, "msda" + "_naive")(value, spatial_shapes, sampling_locations,
                                            attention_weights)
