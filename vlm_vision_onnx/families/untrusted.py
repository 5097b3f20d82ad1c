"""Config files from packages and checkpoints are untrusted: nothing in them may make a loader run code.

transformers runs a repository's own Python (after a `trust_remote_code` prompt, or a traceback without a
terminal) when a config's `auto_map` names a class of it. This tool never builds anything through the `Auto*`
classes from such a file, and refuses any config that carries an `auto_map` (`refuse_code`), with one line.
"""

from __future__ import annotations

from pathlib import Path

from vlm_vision_onnx.core.errors import UsageError

#: The config key through which transformers loads a repository's own code.
CODE_KEY = "auto_map"


def refuse_code(config: dict, path: str | Path) -> None:
    """UsageError when the config read from `path` asks for code of its own (an `auto_map`)."""
    if isinstance(config, dict) and CODE_KEY in config:
        raise UsageError(f"{path} has an {CODE_KEY!r} (it asks to run Python code shipped with it); this tool never "
                         "runs code from a package or checkpoint: remove the key, or use a package made by "
                         "`make package`")
