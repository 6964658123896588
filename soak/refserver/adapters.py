"""LoRA adapters loaded and unloaded at run time, as vLLM serves them with `VLLM_ALLOW_RUNTIME_LORA_UPDATING`.

`POST /v1/load_lora_adapter {"lora_name", "lora_path"}` registers a name, `POST /v1/unload_lora_adapter
{"lora_name"}` forgets it; /v1/models lists each loaded one (id = its name, parent = the base model) and requests
naming it are served by the base model (this server's adapters change no weights). Answers follow vLLM's: a plain
text success, 400 for a name loaded already, 404 for a path that is not a directory (vLLM 0.32 answers so) and for
unloading a name not loaded. Each load charges the `lora-leak` fault through `on_load`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class AdapterAnswer:
    """What a load or unload answers: the HTTP status and its message."""

    status: int
    message: str

    @property
    def ok(self) -> bool:
        return self.status == 200


class AdapterRegistry:
    """The adapters loaded now, by name → path."""

    def __init__(self, base_model: str, on_load: Callable[[str], None] = lambda _name: None) -> None:
        self.base_model = base_model
        self._loaded: dict[str, str] = {}
        self._on_load = on_load
        self.loads = self.unloads = 0

    def __contains__(self, name: object) -> bool:
        return name in self._loaded

    def load(self, body: object) -> AdapterAnswer:
        """Load the adapter the request body names."""
        name, path = _field(body, "lora_name"), _field(body, "lora_path")
        if not name or not path:
            return AdapterAnswer(400, "Both 'lora_name' and 'lora_path' must be provided.")
        if name in self._loaded or name == self.base_model:
            return AdapterAnswer(400, f"The lora adapter '{name}' has already been loaded.")
        if not os.path.isdir(path):
            return AdapterAnswer(404, f"Loading lora {name} failed: No adapter found for {path}")
        self._loaded[name] = path
        self.loads += 1
        self._on_load(name)
        return AdapterAnswer(200, f"Success: LoRA adapter '{name}' added successfully.")

    def unload(self, body: object) -> AdapterAnswer:
        """Unload the adapter the request body names."""
        name = _field(body, "lora_name")
        if not name:
            return AdapterAnswer(400, "'lora_name' must be provided.")
        if self._loaded.pop(name, None) is None:
            return AdapterAnswer(404, f"The lora adapter '{name}' cannot be found.")
        self.unloads += 1
        return AdapterAnswer(200, f"Success: LoRA adapter '{name}' removed successfully.")

    def cards(self, created: int) -> list[dict]:
        """The /v1/models entries of the loaded adapters, as vLLM lists them."""
        return [{"id": name, "object": "model", "created": created, "owned_by": "soak", "root": path,
                 "parent": self.base_model, "permission": []} for name, path in self._loaded.items()]

    def describe(self) -> dict:
        """For /debug/faults: what is loaded, and the loads and unloads so far."""
        return {"adapters": sorted(self._loaded), "adapter_loads": self.loads, "adapter_unloads": self.unloads}


def _field(body: object, name: str) -> str | None:
    value = body.get(name) if isinstance(body, dict) else None
    return value if isinstance(value, str) and value.strip() else None
