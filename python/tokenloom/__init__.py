"""tokenloom: a Python binding (ctypes, no compiled extension) for the tokenloom C engine.

    import tokenloom
    model = tokenloom.Model("stories260K.gguf")
    engine = tokenloom.Engine(model, max_batch_size=16)
    texts = engine.generate(["Once upon a time", "Lily"], max_tokens=30, temperature=0)

Model: load a GGUF model; tokenize / detokenize. Engine: add_request, step (events), cancel,
run (until idle), generate (a list of prompts, texts in order), stats. Errors are raised as
TokenloomError subclasses carrying the library's tl_last_error() message.
"""

from .engine import Completion, Engine, Event
from .errors import (
    InvalidArgumentError,
    ModelFileError,
    NotFoundError,
    QueueFullError,
    TokenloomError,
    TooLongError,
)
from .model import Model

__version__ = "0.1.0"
__all__ = [
    "Model", "Engine", "Event", "Completion", "TokenloomError", "InvalidArgumentError",
    "ModelFileError", "TooLongError", "QueueFullError", "NotFoundError",
]
