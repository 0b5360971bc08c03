"""`zbopt profile`: measure a PyTorch model layer by layer (F, B, W times as torch's pipelining
runtime splits them, activation memory from saved tensors, static memory from parameters) and
write a layered model file (zbopt.layers)."""

from .models import LayerSpec, ModelSpec, function_model, hf_model, preset_model, read_config
from .profiler import BYTES_PER_PARAM, Profile, profile, to_layers

__all__ = ["BYTES_PER_PARAM", "LayerSpec", "ModelSpec", "Profile", "function_model", "hf_model",
           "preset_model", "profile", "read_config", "to_layers"]
