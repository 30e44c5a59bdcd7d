"""ctxlake's stdio MCP bridge: ten tools over the local cache and spool.

Importing this package is cheap on purpose (stdlib only): the SDK, numpy, onnxruntime
and the SQLite snapshot are loaded by the modules that need them, when they need them.
"""

__version__ = "0.1.0"
