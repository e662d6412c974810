"""The names a user picks from (methods, engines, compressions, mixings), with no heavy imports.

The command line builds its choices from these at import time, so listing them must not
load Flower or PyTorch; the modules that implement each choice import the names from here.
"""

METHOD_NAMES = ("diloco", "gossip")  # apps.METHODS implements exactly these
ENGINES = ("inproc", "ray", "deployment")
COMPRESSIONS = ("none", "mxint8", "mxfp4")
MIXINGS = ("metropolis", "exact")
