"""families.validation.quick_indices: the few layouts each pass of a stage is checked at."""

import numpy as np

from families import validation


def layouts(*names):
    return [{"case": n} for n in names]


def feeds(*sizes):
    return [{"pixel_values": np.zeros(s, np.float32)} for s in sizes]


def test_quick_layouts_keep_the_hidden_ones_the_export_example_and_the_largest():
    names = ("image 224x224", "image 1024x1024", "pack", "export example", "same patch count #1",
             "same patch count #2", "padded patch rows")
    picked = validation.quick_indices(layouts(*names), feeds(10, 400, 50, 20, 20, 20, 30))
    assert [names[i] for i in picked] == ["image 224x224", "image 1024x1024", "export example",
                                         "same patch count #1", "padded patch rows"]


def test_quick_layouts_of_a_short_suite():
    assert validation.quick_indices(layouts("only"), feeds(4)) == [0]
