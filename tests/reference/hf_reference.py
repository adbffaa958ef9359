#!/usr/bin/python3
"""An independent reference for hilnas's reading of published checkpoints.

Writes small synthetic checkpoints in the layout Hugging Face publishes
(config.json with its field names; safetensors, sharded with
model.safetensors.index.json), computes their logits with a plain PyTorch
forward in float64 written from the published modelling code of the Llama,
Qwen3, Qwen2 (q/k/v biases) and SmolLM3 (NoPE layers) decoders (not
hilnas's code, not transformers), and checks that `hilnas generate
--logits-out` agrees to 1e-4 on prompts longer than the RoPE scaling's
original context. For the families of issue 40 it also checks `hilnas eval`'s
loss (1e-4 nats), greedy ids, and that a checkpoint hilnas prunes from each
is a valid one of its family: read back here from its config.json and
safetensors, it computes what hilnas computes. Configs hilnas must refuse
are refused naming the field.

    /usr/bin/python3 tests/reference/hf_reference.py BUILD/tools/hilnas [WORKDIR] [--part NAME]

Its parts (PARTS) run as processes of their own, side by side; --part runs
one alone.

Needs Debian's python3-torch and python3-numpy (scripts/setup installs them).
"""
import concurrent.futures
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

TOLERANCE = 1e-4


# ---- safetensors, written by hand (the format: 8-byte little-endian header
# length, a JSON header of dtype/shape/data_offsets, the data) ----

def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            raw = t.view(torch.int16).numpy().tobytes()
            dtype = "BF16"
        elif t.dtype == torch.float16:
            raw, dtype = t.numpy().tobytes(), "F16"
        else:
            raw, dtype = t.to(torch.float32).numpy().tobytes(), "F32"
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


# ---- the forward, from the published equations ----

def rms_norm(x, w, eps):
    # Zhang & Sennrich 2019: x / sqrt(mean(x^2) + eps) * w
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def head_dim(cfg):
    # Hugging Face's default when a config leaves it out (SmolLM2).
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def inverse_frequencies(cfg):
    hd = head_dim(cfg)
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    s = cfg.get("rope_scaling")
    if not s:
        return inv
    if s["rope_type"] == "linear":
        return inv / s["factor"]
    # Llama 3.1's RoPE scaling: wavelengths beyond original/low_freq_factor
    # are divided by factor, those under original/high_freq_factor kept,
    # and in between interpolated linearly in original/wavelength.
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    original = s["original_max_position_embeddings"]
    out = []
    for f in inv.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < original / high:
            out.append(f)
        elif wavelen > original / low:
            out.append(f / factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


def rotate(x, cos, sin):
    # RoPE (Su et al. 2021) in the half-split layout Hugging Face checkpoints
    # use: pairs are (i, i + hd/2).
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def grouped_attention(q, k, v, mask, scale):
    """Grouped-query attention (each KV head serves nh / nkv query heads) of
    q [t, nh, hd] over k, v [t, nkv, hd]: softmax(q k^T * scale + mask) v,
    heads concatenated, [t, nh * hd]."""
    t, nh, hd = q.shape
    group = nh // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale + mask
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(t, nh * hd)


def attention_out_and_swiglu(x, a, w, p, eps, mlp):
    """The rest of a Llama-layout layer (Llama, Qwen, SmolLM3, Llama 4): the
    heads `a` through o_proj onto the residual, then the SwiGLU MLP (named
    `mlp`: "mlp", Llama 4's "feed_forward") on post_attention_layernorm."""
    x = x + a @ w[p + "self_attn.o_proj.weight"].T
    h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
    gate = h @ w[p + mlp + ".gate_proj.weight"].T
    up = h @ w[p + mlp + ".up_proj.weight"].T
    return x + (torch.nn.functional.silu(gate) * up) @ w[p + mlp + ".down_proj.weight"].T


def rope_layers(cfg):
    """SmolLM3Config: no_rope_layers[i] is 1 where layer i uses RoPE, 0 where
    it is NoPE; absent, every no_rope_layer_interval-th layer (default 4)
    is NoPE. Every other family rotates in every layer."""
    n = cfg["num_hidden_layers"]
    if cfg["architectures"][0] != "SmolLM3ForCausalLM":
        return [1] * n
    if cfg.get("no_rope_layers") is not None:
        return list(cfg["no_rope_layers"])
    interval = cfg.get("no_rope_layer_interval", 4)
    return [int((i + 1) % interval != 0) for i in range(n)]


def gemma_layer_types(cfg):
    if cfg.get("layer_types"):
        return cfg["layer_types"]
    pattern = cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern", 6))
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
            for i in range(cfg["num_hidden_layers"])]


_DOUBLED = [None, None]  # the weights dict last given to a forward, its float64 copy


def in_float64(w):
    """w's tensors in float64, converted once per weights dict and kept
    until a forward over other weights: greedy() runs a forward per new
    token over the same weights, and converting every matrix (a 128256-row
    embedding among them) at every call made this test take 366 s where it
    now takes 260 (ctest, 2-core Zen 5). Nothing here changes a weights dict once built;
    each check builds its own."""
    if _DOUBLED[0] is not w:
        _DOUBLED[:] = [None, None]  # the old copy goes before the new one is made
        _DOUBLED[:] = [w, {k: v.to(torch.float64) for k, v in w.items()}]
    return _DOUBLED[1]


def gemma3_forward(cfg, w, ids):
    """Gemma3ForCausalLM (transformers' modeling_gemma3), in float64: the
    embedding times sqrt(hidden_size); RMSNorm scaling by (1 + w); per layer
    x += post_attention_layernorm(attn(input_layernorm(x))) and x +=
    post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x))), the MLP
    down(gelu_tanh(gate(h)) * up(h)); q_norm/k_norm before RoPE, whose base is
    rope_local_base_freq in sliding layers and rope_theta in full ones;
    scores scaled by query_pre_attn_scalar^-1/2; a sliding layer's query sees
    the keys with q - k < sliding_window; the head tied to the embedding."""
    w = in_float64(w)
    t = len(ids)
    hd = cfg["head_dim"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps = cfg["rms_norm_eps"]
    norm = lambda x, name: rms_norm(x, 1 + w[name], eps)
    pos = torch.arange(t, dtype=torch.float64)
    tables = {}
    for kind, theta in [("full_attention", cfg["rope_theta"]),
                        ("sliding_attention", cfg.get("rope_local_base_freq", 10000.0))]:
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        freqs = torch.outer(pos, inv)
        tables[kind] = (freqs.cos(), freqs.sin())
    q_pos, k_pos = pos[:, None], pos[None, :]
    causal = torch.where(k_pos <= q_pos, 0.0, float("-inf")).double()
    window = torch.where((k_pos <= q_pos) & (q_pos - k_pos < cfg["sliding_window"]), 0.0,
                         float("-inf")).double()
    x = w["model.embed_tokens.weight"][torch.tensor(ids)] * math.sqrt(cfg["hidden_size"])
    for i, kind in enumerate(gemma_layer_types(cfg)):
        p = f"model.layers.{i}."
        h = norm(x, p + "input_layernorm.weight")
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(t, nh, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(t, nkv, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(t, nkv, hd)
        q = norm(q, p + "self_attn.q_norm.weight")
        k = norm(k, p + "self_attn.k_norm.weight")
        cos, sin = tables[kind]
        q = rotate(q, cos[:, None, :], sin[:, None, :])
        k = rotate(k, cos[:, None, :], sin[:, None, :])
        mask = window if kind == "sliding_attention" else causal
        a = grouped_attention(q, k, v, mask, cfg["query_pre_attn_scalar"] ** -0.5)
        x = x + norm(a @ w[p + "self_attn.o_proj.weight"].T, p + "post_attention_layernorm.weight")
        h = norm(x, p + "pre_feedforward_layernorm.weight")
        gate = torch.nn.functional.gelu(h @ w[p + "mlp.gate_proj.weight"].T, approximate="tanh")
        m = (gate * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        x = x + norm(m, p + "post_feedforward_layernorm.weight")
    x = norm(x, "model.norm.weight")
    return x @ w["model.embed_tokens.weight"].T


def llama4_rope_layers(cfg):
    # Llama4TextConfig: no_rope_layers (1 = RoPE) when non-empty, else every
    # no_rope_layer_interval-th layer (default 4) is NoPE.
    n = cfg["num_hidden_layers"]
    if cfg.get("no_rope_layers"):
        return list(cfg["no_rope_layers"])[:n]
    interval = cfg.get("no_rope_layer_interval", 4)
    return [int((i + 1) % interval != 0) for i in range(n)]


def llama4_forward(cfg, w, ids):
    """Llama4ForCausalLM's text model (transformers' modeling_llama4), dense
    layers, in float64: RoPE by complex multiplication of adjacent pairs
    (2i, 2i+1) (apply_rotary_emb), then Llama4TextL2Norm (RMS, no weight) of
    queries and keys in RoPE layers when use_qk_norm; NoPE layers' queries
    scaled by the attention temperature when attn_temperature_tuning;
    chunked_attention layers see keys of their own chunk only; the MLP is
    `feed_forward`, intermediate_size_mlp wide."""
    w = in_float64(w)
    t = len(ids)
    hd, nh, nkv = cfg.get("head_dim", 128), cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps = cfg.get("rms_norm_eps", 1e-5)
    use_rope = llama4_rope_layers(cfg)
    kinds = cfg.get("layer_types") or ["chunked_attention" if r else "full_attention"
                                       for r in use_rope]
    chunk = cfg.get("attention_chunk_size", 8192)
    pos = torch.arange(t)
    causal = pos[None, :] <= pos[:, None]
    same_chunk = (pos[None, :] // chunk) == (pos[:, None] // chunk) if chunk else causal
    masks = {
        "full_attention": torch.where(causal, 0.0, float("-inf")).double(),
        "chunked_attention": torch.where(causal & same_chunk, 0.0, float("-inf")).double(),
    }
    c = dict(cfg, head_dim=hd, rope_theta=cfg.get("rope_theta", 500000.0))
    freqs = torch.outer(pos.double(), inverse_frequencies(c))
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # [t, hd/2]

    def rope(x):  # x [t, heads, hd]: pairs (2i, 2i+1) as complex numbers
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(xc * freqs_cis[:, None, :]).flatten(-2)

    tuning = cfg.get("attn_temperature_tuning", True)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        q, k, v = q.view(t, nh, hd), k.view(t, nkv, hd), v.view(t, nkv, hd)
        if use_rope[i]:
            q, k = rope(q), rope(k)
            if cfg.get("use_qk_norm", True):
                q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + eps)
                k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + eps)
        elif tuning:
            scale = torch.log(torch.floor((pos.double() + 1) / cfg.get("floor_scale", 8192)) + 1)
            q = q * (scale * cfg.get("attn_scale", 0.1) + 1)[:, None, None]
        a = grouped_attention(q, k, v, masks[kinds[i]], 1 / math.sqrt(hd))
        x = attention_out_and_swiglu(x, a, w, p, eps, "feed_forward")
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = (w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False)
            else w["lm_head.weight"])
    return x @ head.T


def forward(cfg, w, ids):
    if cfg["architectures"][0] == "Gemma3ForCausalLM":
        return gemma3_forward(cfg, w, ids)
    if cfg["architectures"][0] == "Llama4ForCausalLM":
        return llama4_forward(cfg, w, ids)
    w = in_float64(w)  # float64 throughout
    t = len(ids)
    hd = head_dim(cfg)
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps = cfg["rms_norm_eps"]
    family = cfg["architectures"][0]
    qk_norm = family == "Qwen3ForCausalLM"
    qkv_bias = family == "Qwen2ForCausalLM"  # Qwen2Attention: bias=True on q, k, v; not on o
    use_rope = rope_layers(cfg)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    freqs = torch.outer(torch.arange(t, dtype=torch.float64), inverse_frequencies(cfg))
    cos, sin = freqs.cos(), freqs.sin()
    mask = torch.full((t, t), float("-inf"), dtype=torch.float64).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        if qkv_bias:
            q, k, v = (y + w[p + f"self_attn.{n}_proj.bias"] for y, n in zip((q, k, v), "qkv"))
        q, k, v = q.view(t, nh, hd), k.view(t, nkv, hd), v.view(t, nkv, hd)
        if qk_norm:  # Qwen3: RMSNorm over each head's query and key
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        if use_rope[i]:  # SmolLM3's NoPE layers leave queries and keys unrotated
            q = rotate(q, cos[:, None, :], sin[:, None, :])
            k = rotate(k, cos[:, None, :], sin[:, None, :])
        a = grouped_attention(q, k, v, mask, 1 / math.sqrt(hd))
        x = attention_out_and_swiglu(x, a, w, p, eps, "mlp")
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


# ---- synthetic checkpoints in the published layout ----

def make_gemma3_weights(cfg, gen, fan_in_scale):
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    r = lambda *shape: torch.randn(*shape, generator=gen) * (
        shape[-1] ** -0.5 if fan_in_scale else 0.2)
    norm = lambda n: 0.1 * torch.randn(n, generator=gen)  # stored w; the model scales by 1 + w
    w = {"model.embed_tokens.weight": r(v, d) / math.sqrt(d), "model.norm.weight": norm(d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            w[p + n + ".weight"] = norm(d)
        w[p + "self_attn.q_proj.weight"] = r(nh * hd, d)
        w[p + "self_attn.k_proj.weight"] = r(nkv * hd, d)
        w[p + "self_attn.v_proj.weight"] = r(nkv * hd, d)
        w[p + "self_attn.o_proj.weight"] = r(d, nh * hd)
        w[p + "self_attn.q_norm.weight"] = norm(hd)
        w[p + "self_attn.k_norm.weight"] = norm(hd)
        w[p + "mlp.gate_proj.weight"] = r(f, d)
        w[p + "mlp.up_proj.weight"] = r(f, d)
        w[p + "mlp.down_proj.weight"] = r(d, f)
    return w


def make_weights(cfg, gen, fan_in_scale=False):
    if cfg["architectures"][0] == "Gemma3ForCausalLM":
        return make_gemma3_weights(cfg, gen, fan_in_scale)
    llama4 = cfg["architectures"][0] == "Llama4ForCausalLM"
    d, v = cfg["hidden_size"], cfg["vocab_size"]
    f = cfg["intermediate_size_mlp"] if llama4 else cfg["intermediate_size"]
    hd, nh, nkv = head_dim(cfg), cfg["num_attention_heads"], cfg["num_key_value_heads"]
    mlp = "feed_forward" if llama4 else "mlp"
    # 0.2 for the small configs; 1/sqrt(fan in) keeps published widths'
    # activations at unit scale.
    r = lambda *shape: torch.randn(*shape, generator=gen) * (
        shape[-1] ** -0.5 if fan_in_scale else 0.2)
    norm = lambda n: 1 + 0.1 * torch.randn(n, generator=gen)
    w = {"model.embed_tokens.weight": r(v, d), "model.norm.weight": norm(d)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = r(v, d)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(d)
        w[p + "post_attention_layernorm.weight"] = norm(d)
        w[p + "self_attn.q_proj.weight"] = r(nh * hd, d)
        w[p + "self_attn.k_proj.weight"] = r(nkv * hd, d)
        w[p + "self_attn.v_proj.weight"] = r(nkv * hd, d)
        w[p + "self_attn.o_proj.weight"] = r(d, nh * hd)
        w[p + mlp + ".gate_proj.weight"] = r(f, d)
        w[p + mlp + ".up_proj.weight"] = r(f, d)
        w[p + mlp + ".down_proj.weight"] = r(d, f)
        if cfg["architectures"][0] == "Qwen3ForCausalLM":
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
        if cfg["architectures"][0] == "Qwen2ForCausalLM":  # biases of a trained model's size
            w[p + "self_attn.q_proj.bias"] = 0.5 * torch.randn(nh * hd, generator=gen)
            w[p + "self_attn.k_proj.bias"] = 0.5 * torch.randn(nkv * hd, generator=gen)
            w[p + "self_attn.v_proj.bias"] = 0.5 * torch.randn(nkv * hd, generator=gen)
    return w


def llama3_config():
    # Llama 3.2's config.json fields, small: GQA 4/2, head_dim given and
    # not d_model/heads, untied head, rope_scaling llama3 with a 16-token
    # original context (the prompt is longer).
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
        "vocab_size": 300, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "hidden_act": "silu", "max_position_embeddings": 131072, "torch_dtype": "float32",
        "bos_token_id": 1, "eos_token_id": 2,
    }


def qwen3_config():
    # Qwen3's config.json fields: QK-norm implied by the class, GQA 8/2,
    # tied embeddings, an unused sliding_window, null rope_scaling.
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "rope_scaling": None, "sliding_window": None, "use_sliding_window": False,
        "max_window_layers": 28, "tie_word_embeddings": True, "attention_bias": False,
        "hidden_act": "silu", "torch_dtype": "bfloat16",
    }


def write_checkpoint(folder, cfg, weights, shards, dtype):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    stored = {k: t.to(dtype) for k, t in weights.items()}
    if shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), stored)
    else:
        names = sorted(stored)
        weight_map = {}
        for s in range(shards):
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: stored[n] for n in names[s::shards]}
            write_safetensors(os.path.join(folder, file), part)
            weight_map.update({n: file for n in part})
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)
    # What the reference computes with: the weights as stored, in float32.
    return {k: t.to(torch.float32) for k, t in stored.items()}


def write_config_beside(folder, cfg, first):
    """Another form of a checkpoint already written in `first`: config.json
    from cfg, every other file a hard link to first's (the weights are
    the same bytes; writing SmolLM3-3B's widths again took 10 s)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for name in os.listdir(first):
        if name == "config.json":
            continue
        target = os.path.join(folder, name)
        if os.path.exists(target):
            os.remove(target)
        try:
            os.link(os.path.join(first, name), target)
        except OSError:  # a file system without hard links
            shutil.copyfile(os.path.join(first, name), target)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = bytearray(data[a:b])
        if e["dtype"] == "BF16":
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
        elif e["dtype"] == "F16":
            t = torch.frombuffer(raw, dtype=torch.float16)
        else:
            assert e["dtype"] == "F32", e["dtype"]
            t = torch.frombuffer(raw, dtype=torch.float32)
        out[name] = t.reshape(e["shape"]).to(torch.float64)
    return out


def read_checkpoint(folder):
    """config.json and every safetensors file of a folder, as a Hugging Face
    reader takes them."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    w = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            w.update(read_safetensors(os.path.join(folder, name)))
    return cfg, w


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def hilnas_logits(hilnas, folder, ids, work):
    out = os.path.join(work, os.path.basename(folder) + "-logits.npy")
    r = subprocess.run([hilnas, "generate", "--ckpt", folder,
                        "--prompt_ids", ",".join(map(str, ids)), "--max_new_tokens", "1",
                        "--logits_out", out, "--threads", "1"],
                       capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        raise SystemExit(f"hilnas generate failed on {folder}:\n{r.stdout}{r.stderr}")
    return torch.from_numpy(np.load(out))


def max_logit_diff(got, ref):
    return (got.double() - ref).abs().max().item() if got.shape == ref.shape else float("inf")


def expect_refused(hilnas, work, name, cfg, weights, field):
    folder = os.path.join(work, name)
    write_checkpoint(folder, cfg, weights, 1, torch.float32)
    r = subprocess.run([hilnas, "checkpoint", "check", folder], capture_output=True, text=True)
    said = r.stdout + r.stderr
    ok = r.returncode != 0 and field in said
    print(f"{'ok  ' if ok else 'FAIL'} {name}: refused naming {field}: {said.strip()[:160]}")
    return ok


# ---- published configs (issue 41), as their config.json files ship them,
# scaled down only in layer count and vocabulary ----

def published_llama32_1b():
    return {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
        "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
        "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": 32, "num_hidden_layers": 1, "num_key_value_heads": 8,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 512,
    }


def published_qwen3_06b():
    return {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
        "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
        "num_attention_heads": 16, "num_hidden_layers": 2, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
        "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
        "vocab_size": 512,
    }


def published_smollm2_135m():
    return {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576,
        "initializer_range": 0.041666666666666664, "intermediate_size": 1536,
        "is_llama_config": True, "max_position_embeddings": 8192, "model_type": "llama",
        "num_attention_heads": 9, "num_hidden_layers": 2, "num_key_value_heads": 3,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": False,
        "rope_scaling": None, "rope_theta": 100000, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.42.3", "use_cache": True,
        "vocab_size": 512,
    }


def transformers5(cfg):
    """The config as transformers 5 saves it: rope_theta and rope_scaling
    folded into rope_parameters (the scaling's own keys, its type and the
    theta), torch_dtype renamed dtype, and layer_types spelled out for
    families whose config class defines them."""
    c = dict(cfg)
    rope = dict(c.pop("rope_scaling", None) or {"rope_type": "default"})
    rope["rope_theta"] = c.pop("rope_theta", 10000.0)
    c["rope_parameters"] = rope
    c["dtype"] = c.pop("torch_dtype")
    c["transformers_version"] = "5.17.0"
    if c["model_type"] == "qwen3":
        c["layer_types"] = ["full_attention"] * c["num_hidden_layers"]
    return c


def moved(what, logits, other):
    """Prints and returns whether `other` differs from `logits` by more than
    1e-2 anywhere: a feature the reference checks must matter."""
    by = (other - logits).abs().max().item()
    print(f"{'ok  ' if by > 1e-2 else 'FAIL'} {what} {by:.3f}")
    return by > 1e-2


def loss(logits, ids):
    # Mean next-token negative log-likelihood over the prompt, in nats.
    lp = torch.log_softmax(logits.double(), dim=-1)
    return -lp[:-1].gather(1, torch.tensor(ids[1:])[:, None]).mean().item()


def check_published(hilnas, work, gen, prompt):
    ok = True
    for name, cfg in [("llama3.2-1b", published_llama32_1b()), ("qwen3-0.6b", published_qwen3_06b()),
                      ("smollm2-135m", published_smollm2_135m())]:
        w = make_weights(cfg, gen, fan_in_scale=True)
        with torch.no_grad():
            first = os.path.join(work, f"{name}-transformers4")
            stored = write_checkpoint(first, cfg, w, 1, torch.bfloat16)
            ref = forward(cfg, stored, prompt)  # always the published (4) semantics
            for form, c in [("transformers4", cfg), ("transformers5", transformers5(cfg))]:
                folder = os.path.join(work, f"{name}-{form}")
                if folder != first:
                    write_config_beside(folder, c, first)
                got = hilnas_logits(hilnas, folder, prompt, work)
                diff = max_logit_diff(got, ref)
                gap = abs(loss(got, prompt) - loss(ref, prompt))
                passed = diff <= TOLERANCE and gap <= TOLERANCE
                ok = ok and passed
                print(f"{'ok  ' if passed else 'FAIL'} {name} ({form}): loss hilnas "
                      f"{loss(got, prompt):.6f} reference {loss(ref, prompt):.6f} "
                      f"(|diff| {gap:.1e}), max logit diff {diff:.2e}")
            # The RoPE fields matter here: read with transformers' default
            # theta instead, the logits move by far more than the tolerance.
            wrong = forward(dict(cfg, rope_theta=10000.0, rope_scaling=None), stored, prompt)
        ok = moved(f"{name}: theta 10000 would move the logits by", ref, wrong) and ok
    return ok


# ---- issue 40's families: published configs, scaled down only in layer
# count and vocabulary ----

def published_qwen25_05b():
    return {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
        "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
        "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
        "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
        "use_sliding_window": False, "vocab_size": 512,
    }


def published_smollm3_3b():
    # No no_rope_layers list: the NoPE layers follow from the interval.
    return {
        "architectures": ["SmolLM3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": None, "eos_token_id": 128001,
        "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
        "intermediate_size": 11008, "max_position_embeddings": 65536, "mlp_bias": False,
        "model_type": "smollm3", "no_rope_layer_interval": 4, "num_attention_heads": 16,
        "num_hidden_layers": 4, "num_key_value_heads": 4, "pad_token_id": 128004,
        "pretraining_tp": 2, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 5000000.0, "sliding_window": None, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
        "vocab_size": 512,
    }


def published_gemma3_270m():
    # 18 layers in the published file; 6 here (5 sliding, 1 full) with its
    # layer_types list cut to match. The window (512) matters from prompts
    # longer than it: check_gemma3 uses one of 520 tokens.
    return {
        "_sliding_window_pattern": 6, "architectures": ["Gemma3ForCausalLM"],
        "attention_bias": False, "attention_dropout": 0.0, "attn_logit_softcapping": None,
        "bos_token_id": 2, "eos_token_id": 1, "final_logit_softcapping": None, "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 640, "initializer_range": 0.02,
        "intermediate_size": 2048,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
        "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4,
        "num_hidden_layers": 6, "num_key_value_heads": 1, "pad_token_id": 0,
        "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
        "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 512,
        "torch_dtype": "bfloat16", "transformers_version": "4.55.0.dev0",
        "use_bidirectional_attention": False, "use_cache": True, "vocab_size": 512,
    }


def published_gemma3_1b():
    # The 1B's config names no layer_types or tie_word_embeddings: the
    # pattern (every 6th layer full) and the tied head are defaults.
    return {
        "architectures": ["Gemma3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "attn_logit_softcapping": None, "bos_token_id": 2,
        "cache_implementation": "hybrid", "eos_token_id": 1, "final_logit_softcapping": None,
        "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
        "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768,
        "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 6,
        "num_key_value_heads": 1, "pad_token_id": 0, "query_pre_attn_scalar": 256,
        "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": None,
        "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
        "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": True,
        "vocab_size": 512,
    }


def published_mobilellm_r1_950m():
    """MobileLLM-R1-950M's config.json (Llama4ForCausalLM, llama4_text) with
    22 layers cut to 4 and the 128,256-token vocabulary to 512. The file is
    behind Hugging Face's gate, unreachable here: these fields are its
    published dimensions (model card: 22 layers, d 1536, 24/6 heads x 64,
    SwiGLU 6144, tied embedding) and what its public readers report of it
    (llama.cpp's converter: every layer_types entry full_attention, so no
    chunking; the MLX port: every no_rope_layers entry 1, use_qk_norm true,
    attn_scale 0.1, both intermediate sizes 6144). Keys whose values could
    not be confirmed are the class's defaults."""
    n = 4
    return {
        "architectures": ["Llama4ForCausalLM"], "attention_bias": False,
        "attention_chunk_size": 32768, "attention_dropout": 0.0, "attn_scale": 0.1,
        "attn_temperature_tuning": False, "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009], "floor_scale": 8192,
        "for_llm_compressor": False, "head_dim": 64, "hidden_act": "silu",
        "hidden_size": 1536, "initializer_range": 0.02, "interleave_moe_layer_step": 0,
        "intermediate_size": 6144, "intermediate_size_mlp": 6144,
        "layer_types": ["full_attention"] * n, "max_position_embeddings": 32768,
        "model_type": "llama4_text", "moe_layers": [], "no_rope_layers": [1] * n,
        "num_attention_heads": 24, "num_experts_per_tok": 0, "num_hidden_layers": n,
        "num_key_value_heads": 6, "num_local_experts": 0, "output_router_logits": False,
        "pad_token_id": None, "rms_norm_eps": 1e-05, "rope_scaling": None,
        "rope_theta": 8000000.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
        "use_qk_norm": True, "vocab_size": 512,
    }


# Llama 4's attention temperature tuning at a floor_scale short prompts
# reach (the class's default 8192 leaves every scale 1 below 8191 tokens).
TEMPERATURE = {"attn_temperature_tuning": True, "floor_scale": 8, "attn_scale": 0.5}


def llama4_nope_chunked():
    """Llama4TextConfig's defaults where a dense model keeps them: every 4th
    layer NoPE (no no_rope_layers list), no layer_types (so the RoPE layers
    are chunked_attention), temperature tuning off, a 64-token chunk (the
    prompts here stay inside it), untied head, llama3 RoPE scaling."""
    return {
        "architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text",
        "hidden_size": 64, "intermediate_size": 96, "intermediate_size_mlp": 160,
        "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 300, "moe_layers": [], "num_local_experts": 0,
        "attention_chunk_size": 64, "attn_temperature_tuning": False,
        "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        "tie_word_embeddings": False,
    }


def transformers5_gemma(cfg):
    """Gemma 3 as transformers 5 saves it: one RoPE entry per layer kind."""
    c = dict(cfg)
    c.pop("rope_scaling", None)
    c["rope_parameters"] = {
        "full_attention": {"rope_type": "default", "rope_theta": c.pop("rope_theta")},
        "sliding_attention": {"rope_type": "default",
                              "rope_theta": c.pop("rope_local_base_freq")},
    }
    c["dtype"] = c.pop("torch_dtype")
    c["transformers_version"] = "5.17.0"
    return c


def small(cfg, **changes):
    """A family's config at test widths, for pruning."""
    c = dict(cfg, hidden_size=64, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, vocab_size=256)
    c.update(changes)
    return c


def greedy(cfg, w, ids, n, first_logits=None):
    """n greedy ids after ids; first_logits, when given, are forward(cfg, w,
    ids)'s, already computed (each step is a float64 forward over all)."""
    out = list(ids)
    for step in range(n):
        logits = first_logits if step == 0 and first_logits is not None else forward(cfg, w, out)
        out.append(int(logits[-1].argmax()))
    return out[len(ids):]


def check_family(hilnas, work, name, cfg, w, prompt, new_tokens=6, other_form=None):
    """generate's logits, eval's loss and greedy ids of one checkpoint
    against the float64 reference of cfg; other_form, another form of the
    same config (its config.json), beside the same weights as
    NAME-transformers5, is held to the same reference logits. True when all
    agree."""
    folder = os.path.join(work, name)
    stored = write_checkpoint(folder, cfg, w, 2, torch.bfloat16)
    with torch.no_grad():
        ref = forward(cfg, stored, prompt)
    got = hilnas_logits(hilnas, folder, prompt, work)
    diff = max_logit_diff(got, ref)
    tokens = os.path.join(work, name + "-tokens.npy")
    np.save(tokens, np.array(prompt, dtype=np.uint16))
    said = run([hilnas, "eval", "--ckpt", folder, "--tokens", tokens,
                "--seq-len", str(len(prompt) - 1), "--threads", "1"])
    eval_loss = float(said.split("held-out loss ")[1].split()[0])
    gap = abs(eval_loss - loss(ref, prompt))
    ids = [int(v) for v in run([hilnas, "generate", "--ckpt", folder, "--prompt-ids",
                                ",".join(map(str, prompt)), "--max-new-tokens", str(new_tokens), "--ids",
                                "--ignore-eos", "--threads", "1"]).strip().split(",")]
    with torch.no_grad():
        want = greedy(cfg, stored, prompt, new_tokens, first_logits=ref)
    passed = diff <= TOLERANCE and gap <= TOLERANCE and ids == want
    print(f"{'ok  ' if passed else 'FAIL'} {name}: max logit diff {diff:.2e}, eval loss "
          f"{eval_loss:.6f} vs reference {loss(ref, prompt):.6f} (|diff| {gap:.1e}), greedy "
          f"{ids} {'==' if ids == want else '!='} {want}")
    if other_form is not None:
        other = os.path.join(work, name + "-transformers5")
        write_config_beside(other, other_form, folder)
        other_diff = max_logit_diff(hilnas_logits(hilnas, other, prompt, work), ref)
        other_passed = other_diff <= TOLERANCE
        print(f"{'ok  ' if other_passed else 'FAIL'} {name}-transformers5: max logit diff "
              f"{other_diff:.2e}")
        passed = passed and other_passed
    return passed


def check_pruned(hilnas, work, gen, name, cfg, prune_args, prompt):
    """hilnas calibrates and prunes a checkpoint of the family; the result,
    read here as Hugging Face would read it, computes what hilnas computes."""
    folder = os.path.join(work, name)
    write_checkpoint(folder, cfg, make_weights(cfg, gen), 1, torch.float32)
    calib = os.path.join(work, name + "-calib.u16")
    np.array([(11 * i + 5) % cfg["vocab_size"] for i in range(4096)], dtype=np.uint16).tofile(calib)
    run([hilnas, "calibrate", "--ckpt", folder, "--tokens", calib, "--seq-len", "32",
         "--threads", "1"])
    out = os.path.join(work, name + "-pruned")
    run([hilnas, "prune", "--base", folder, "--out", out, "--overwrite", "--block-size", "16"]
        + prune_args)
    pcfg, pw = read_checkpoint(out)
    with torch.no_grad():
        ref = forward(pcfg, pw, prompt)
    got = hilnas_logits(hilnas, out, prompt, work)
    diff = max_logit_diff(got, ref)
    family_kept = pcfg["architectures"] == cfg["architectures"]
    passed = diff <= TOLERANCE and family_kept
    detail = ""
    if cfg["architectures"][0] == "SmolLM3ForCausalLM":
        detail = f", RoPE layers {rope_layers(cfg)} -> {rope_layers(pcfg)}"
    if cfg["architectures"][0] == "Llama4ForCausalLM":
        detail = (f", RoPE layers {llama4_rope_layers(cfg)} -> {llama4_rope_layers(pcfg)}, "
                  f"{pcfg['layer_types']}")
    if cfg["architectures"][0] == "Qwen2ForCausalLM":
        biases = sorted(k for k in pw if k.endswith("_proj.bias"))
        passed = passed and len(biases) == 3 * pcfg["num_hidden_layers"]
        detail = f", {len(biases)} bias tensors"
    print(f"{'ok  ' if passed else 'FAIL'} {name} pruned ({' '.join(prune_args)}): "
          f"{pcfg['architectures'][0]}, {pcfg['num_hidden_layers']} layers, d_model "
          f"{pcfg['hidden_size']}, d_ffn {pcfg.get('intermediate_size_mlp', pcfg['intermediate_size'])}"
          f"{detail}; max logit diff "
          f"{diff:.2e}")
    return passed


def check_qwen2_smollm3(hilnas, work, gen, prompt):
    ok = True
    # The published dimensions (scaled in layers and vocabulary only).
    for name, cfg in [("qwen2.5-0.5b", published_qwen25_05b()),
                      ("smollm3-3b", published_smollm3_3b())]:
        w = make_weights(cfg, gen, fan_in_scale=True)
        ok &= check_family(hilnas, work, name, cfg, w, prompt, other_form=transformers5(cfg))
    return ok


def check_gemma3(hilnas, work, gen, prompt):
    ok = True
    long_prompt = [(7 * i + 3) % 509 for i in range(520)]  # past Gemma's 512-token window
    for name, cfg in [("gemma3-270m", published_gemma3_270m()), ("gemma3-1b", published_gemma3_1b())]:
        w = make_weights(cfg, gen, fan_in_scale=True)
        # Three greedy steps: each is a float64 forward over 520+ tokens.
        ok &= check_family(hilnas, work, name, cfg, w, long_prompt, new_tokens=3,
                           other_form=transformers5_gemma(cfg))
    cfg = published_gemma3_270m()
    w = make_weights(cfg, gen, fan_in_scale=True)
    with torch.no_grad():
        ref = forward(cfg, w, long_prompt)
        for what, other in [("a window of 1024", dict(cfg, sliding_window=1024)),
                            ("local base 1e6", dict(cfg, rope_local_base_freq=1e6))]:
            ok &= moved(f"gemma3: {what} would move the logits by", ref,
                        forward(other, w, long_prompt))
    return ok


def check_pruned_families(hilnas, work, gen, prompt):
    ok = True
    # What sets the family apart matters: without it the logits move.
    cfg = small(published_smollm3_3b())
    w = make_weights(cfg, gen)
    with torch.no_grad():
        ok &= moved("smollm3: rotating the NoPE layer would move the logits by",
                    forward(cfg, w, prompt), forward(dict(cfg, no_rope_layers=[1] * 4), w, prompt))
    cfg = small(published_qwen25_05b())
    w = make_weights(cfg, gen)
    with torch.no_grad():
        unbiased = {k: (0 * v if k.endswith(".bias") else v) for k, v in w.items()}
        ok &= moved("qwen2: dropping the biases would move the logits by",
                    forward(cfg, w, prompt), forward(cfg, unbiased, prompt))
    # Pruned: depth and both widths; SmolLM3's kept layers keep their NoPE.
    ok &= check_pruned(hilnas, work, gen, "qwen2-small", small(published_qwen25_05b()),
                       ["--layers", "1", "--d-ffn", "96"], prompt)
    ok &= check_pruned(hilnas, work, gen, "qwen2-small-width",
                       small(published_qwen25_05b(), num_hidden_layers=3),
                       ["--layers", "2", "--d-model", "48", "--d-ffn", "64"], prompt)
    ok &= check_pruned(hilnas, work, gen, "gemma3-small",
                       small(published_gemma3_270m(), num_hidden_layers=12,
                             query_pre_attn_scalar=16, sliding_window=8,
                             layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 2),
                       ["--layers", "6", "--d-model", "48", "--d-ffn", "96", "--pattern",
                        "WWWWWF", "--window", "8"], prompt)
    ok &= check_pruned(hilnas, work, gen, "smollm3-small",
                       small(published_smollm3_3b(), num_hidden_layers=8),
                       ["--layers", "5", "--d-model", "48", "--d-ffn", "80"], prompt)
    return ok


def check_llama4(hilnas, work, gen, prompt):
    ok = True
    cfg = published_mobilellm_r1_950m()
    w = make_weights(cfg, gen, fan_in_scale=True)
    ok &= check_family(hilnas, work, "mobilellm-r1-950m", cfg, w, prompt)
    cfg = llama4_nope_chunked()
    w = make_weights(cfg, gen)
    ok &= check_family(hilnas, work, "llama4-nope-chunked", cfg, w, prompt)
    with torch.no_grad():
        ref = forward(cfg, w, prompt)
        half_split = dict(w)  # the same rows read as Llama's (i, i + d/2) pairs
        for name in list(w):
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                rows, cols = w[name].shape
                half_split[name] = (w[name].view(rows // 16, 8, 2, cols).transpose(1, 2)
                                    .reshape(rows, cols))
        ok &= moved("llama4: pairing (i, i + d/2) instead of (2i, 2i+1) would move the logits by",
                    ref, forward(cfg, half_split, prompt))
        ok &= moved("llama4: without the QK L2-norm the logits would move by", ref,
                    forward(dict(cfg, use_qk_norm=False), w, prompt))
        ok &= moved("llama4: rotating the NoPE layer would move the logits by", ref,
                    forward(dict(cfg, no_rope_layers=[1] * 5), w, prompt))
        ok &= moved("llama4: 16-token chunks would move the logits by", ref,
                    forward(dict(cfg, attention_chunk_size=16), w, prompt))
        ok &= moved("llama4: temperature tuning with floor_scale 8 would move the logits by",
                    ref, forward(dict(cfg, **TEMPERATURE), w, prompt))
    # Past the first chunk: a 48-token prompt in three 16-token chunks, and
    # greedy decoding into a fourth (prefill, eval's windows and the decode
    # step each attend within the query's chunk).
    ok &= check_family(hilnas, work, "llama4-chunk16", dict(cfg, attention_chunk_size=16), w,
                       prompt)
    ok &= expect_refused(hilnas, work, "llama4-moe", dict(cfg, moe_layers=[1]), w, "moe_layers")
    # Temperature tuning (the class's default, here with floor_scale 8 so
    # that the NoPE layer's queries are scaled 1.0 .. 1.97 over the prompt
    # and the greedy tokens), with 16-token chunks.
    ok &= check_family(hilnas, work, "llama4-temperature",
                       dict(cfg, attention_chunk_size=16, **TEMPERATURE), w, prompt)
    ok &= check_pruned(hilnas, work, gen, "llama4-small",
                       dict(llama4_nope_chunked(), num_hidden_layers=8, **TEMPERATURE),
                       ["--layers", "5", "--d-model", "48", "--d-ffn", "96"], prompt)
    r1 = dict(published_mobilellm_r1_950m(), num_hidden_layers=6, hidden_size=64,
              intermediate_size_mlp=128, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, vocab_size=256, layer_types=["full_attention"] * 6,
              no_rope_layers=[1] * 6)
    ok &= check_pruned(hilnas, work, gen, "mobilellm-r1-small", r1,
                       ["--layers", "4", "--d-model", "48", "--d-ffn", "96"], prompt)
    return ok


def check_basic(hilnas, work, gen, prompt):
    ok = True
    for name, cfg, shards, dtype in [
        ("llama3-sharded-f32", llama3_config(), 3, torch.float32),
        ("qwen3-bf16", qwen3_config(), 1, torch.bfloat16),
    ]:
        folder = os.path.join(work, name)
        w = write_checkpoint(folder, cfg, make_weights(cfg, gen), shards, dtype)
        with torch.no_grad():
            ref = forward(cfg, w, prompt)
        got = hilnas_logits(hilnas, folder, prompt, work)
        check = subprocess.run([hilnas, "checkpoint", "check", folder], capture_output=True, text=True)
        summarised = check.returncode == 0 and "parameters" in check.stdout
        print(f"{'ok  ' if summarised else 'FAIL'} {name}: checkpoint check: "
              f"{(check.stdout + check.stderr).strip().splitlines()[0][:150]}")
        ok = ok and summarised
        diff = max_logit_diff(got, ref)
        passed = diff <= TOLERANCE
        ok = ok and passed
        print(f"{'ok  ' if passed else 'FAIL'} {name}: {tuple(ref.shape)} logits, max |hilnas - "
              f"reference| = {diff:.2e} (tolerance {TOLERANCE:g})")
    # The scaling matters at these lengths: without it the logits differ.
    cfg = llama3_config()
    plain = dict(cfg, rope_scaling=None)
    w = make_weights(cfg, gen)
    with torch.no_grad():
        ok = moved("llama3 scaling changes the logits by", forward(cfg, w, prompt),
                   forward(plain, w, prompt)) and ok

    base = llama3_config()
    small = make_weights(base, gen)
    ok &= expect_refused(hilnas, work, "bias", dict(base, attention_bias=True), small,
                         "attention_bias")
    ok &= expect_refused(hilnas, work, "yarn",
                         dict(base, rope_scaling={"rope_type": "yarn", "factor": 4.0}), small,
                         "rope_scaling")
    ok &= expect_refused(hilnas, work, "gemma", dict(base, architectures=["GemmaForCausalLM"]),
                         small, "architectures")
    ok &= expect_refused(hilnas, work, "gelu", dict(base, hidden_act="gelu"), small, "hidden_act")
    ok &= expect_refused(hilnas, work, "softcap", dict(base, attn_logit_softcapping=50.0), small,
                         "attn_logit_softcapping")
    ok &= expect_refused(hilnas, work, "two-thetas",
                         dict(transformers5(base), rope_theta=10000.0), small,
                         "rope_parameters.rope_theta")
    nameless = {k: v for k, v in base.items() if k not in ("architectures", "model_type")}
    ok &= expect_refused(hilnas, work, "nameless", nameless, small, "model_type")
    return ok


# The parts, independent of each other (their own weights, their own folders
# under WORKDIR), longest first. main() runs them as processes of their own,
# as many at once as there are CPUs (at most 4), each on one thread: ctest
# runs this test alone (RUN_SERIAL), and as one process it kept 1.1 of two
# cores busy for 210 s. Two at a time on an AMD EPYC (Zen 5), 152 s in all:
# qwen2-smollm3 86 s, gemma3 78, llama4 62, published 27, pruned 24, basic 13.
PARTS = {
    "qwen2-smollm3": check_qwen2_smollm3,
    "gemma3": check_gemma3,
    "llama4": check_llama4,
    "published": check_published,
    "pruned": check_pruned_families,
    "basic": check_basic,
}


def run_part(hilnas, work, part):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    prompt = [(7 * i + 3) % 256 for i in range(48)]  # 48 tokens > the 16-token original context
    return PARTS[part](hilnas, work, gen, prompt)


def main():
    args = sys.argv[1:]
    part = None
    if "--part" in args:
        at = args.index("--part")
        part = args[at + 1] if at + 1 < len(args) else None
        if part not in PARTS:
            raise SystemExit(f"--part: one of {', '.join(PARTS)}, not {part}")
        del args[at:at + 2]
    hilnas = args[0]
    work = args[1] if len(args) > 1 else tempfile.mkdtemp(prefix="hilnas-hf-ref-")
    os.makedirs(work, exist_ok=True)
    if part is not None:
        ok = run_part(hilnas, work, part)
        print("all agree" if ok else "MISMATCH")
        return 0 if ok else 1
    jobs = max(1, min(os.cpu_count() or 1, 4))

    def run_alone(name):
        start = time.time()
        r = subprocess.run([sys.executable, os.path.abspath(__file__), hilnas, work, "--part", name],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace")
        return r.returncode, r.stdout.rstrip(), time.time() - start

    ok = True
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for name, (code, out, seconds) in zip(PARTS, pool.map(run_alone, PARTS)):
            passed = code == 0 and out.endswith("all agree")
            ok = ok and passed
            print(f"== {name}: {'passed' if passed else f'FAILED (exit {code})'} in {seconds:.0f} s")
            print(out[:-len("all agree")].rstrip() if passed else out, flush=True)
    print("all agree" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
