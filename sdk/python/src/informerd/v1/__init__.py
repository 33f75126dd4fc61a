"""informerd.v1 generated from proto/informerd/v1 (sdk/python/tools/gen_stubs.py)."""
