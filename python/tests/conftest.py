"""Where the tests find what they need: the library through $TPGRAPH_LIBRARY
(or the loader), the header through $TPGRAPH_INCLUDE or this checkout's lib/."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER_DIR = os.environ.get("TPGRAPH_INCLUDE") or os.path.normpath(os.path.join(HERE, "..", "..", "lib"))
