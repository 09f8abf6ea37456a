"""The shared library's name, in one place for every Bazel target that needs it.

One SONAME rule for Bazel and CMake: libtpgraph.so.MAJOR.MINOR (0.x minors
promise no ABI, so the minor is part of the name; CMake's SOVERSION). Keep
these equal to lib/tpgraph.h's TPG_VERSION_MAJOR / _MINOR: a BUILD file
cannot read the header, so //tests/cpu:soname_test compares them.
"""

TPG_VERSION_MAJOR = 0
TPG_VERSION_MINOR = 3

TPG_SONAME = "libtpgraph.so.%d.%d" % (TPG_VERSION_MAJOR, TPG_VERSION_MINOR)
