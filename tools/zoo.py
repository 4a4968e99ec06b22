"""Hugging Face model zoo harness: do transformers models run on "tpu" out of
the box, natively (no CPU fallback), and match the CPU?

    python tools/zoo.py                         # every architecture
    python tools/zoo.py --models gpt2,llama,bert
    python tools/zoo.py --report docs/zoo_report.md
    python tools/zoo.py --list                  # the architecture names

Every architecture is built from a tiny config written here (2 layers,
hidden 32-64, vocab 128, 32x32 images), with random weights: nothing is
downloaded (HF_HUB_OFFLINE=1). For each one the harness seeds, builds the
model on the CPU, deep-copies it to "tpu", and with the CPU fallback DISABLED
and matmul precision HIGHEST compares with the CPU:

  forward   eval mode, no grad: logits (or the model's main output)
  backward  train mode (dropout zeroed): loss and every parameter's gradient
  step      one AdamW step from the CPU gradients: the parameters after it
  generate  causal and text seq2seq LMs: greedy generate() with KV cache,
            16 new tokens, identical tokens required

Stages are independent (the step starts from the CPU gradients, generate
from the initial weights), so one missing op does not hide the others. A
stage that stops on a missing op natively records that op (the FIRST failing
op), then is re-run with the CPU fallback enabled to learn whether it would
pass apart from missing ops ("fb") and which other ops it is missing.

Errors are relative: max |tpu - cpu| / max |cpu| over the compared tensors
(over all gradients, over all parameters for the step).

Each architecture runs in a worker subprocess (a crash or a hang in one model
is recorded and the run continues with the next, in a fresh worker), bounded
in time per model (``--timeout``). ``--inprocess`` runs everything in this
process (debugging).
"""
import argparse
import collections
import copy
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings

# ``python tools/zoo.py``: the checkout's torch_tpu (tools/ sits next to it).
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__" and _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

STAGES = ("forward", "backward", "compiled", "step", "generate")

# Pass thresholds on the relative errors (HIGHEST is fp32-accurate; the
# differences left are summation order).
TOL = {"forward": 1e-4, "backward": 1e-3, "compiled": 1e-3, "step": 1e-4}

LR = 1e-3
B, S = 2, 8  # batch, sequence length
NEW_TOKENS = 16
DEFAULT_TIMEOUT = 240.0


# ---------------------------------------------------------------------------
# the architectures
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Spec:
    name: str
    kind: str  # causal | masked | seq2seq | vision | clip | speech | ctc | detr
    model_cls: str
    config_cls: str
    config: dict
    output: str = "logits"  # the output compared by the forward stage
    generate: bool = False
    vocab: int = 128
    notes: str = ""


V = 128
_TOK = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
_DEC = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=V, max_position_embeddings=64, **_TOK)
_ENC = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            vocab_size=V, max_position_embeddings=64, pad_token_id=0)
_BART = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=V,
             max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2,
             decoder_start_token_id=2, forced_bos_token_id=None, forced_eos_token_id=None)
_VIT = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=128, num_labels=10)


def _c(name, model_cls, config_cls, notes="", **cfg):
    return Spec(name, "causal", model_cls, config_cls, cfg, generate=True, notes=notes)


def _m(name, model_cls, config_cls, **cfg):
    return Spec(name, "masked", model_cls, config_cls, cfg)


def _s2s(name, model_cls, config_cls, **cfg):
    return Spec(name, "seq2seq", model_cls, config_cls, cfg, generate=True)


def _v(name, model_cls, config_cls, **cfg):
    return Spec(name, "vision", model_cls, config_cls, cfg)


def _moe(**kw):
    return {**_DEC, **kw}


SPECS = [
    # ---- causal LMs ----
    _c("gpt2", "GPT2LMHeadModel", "GPT2Config", n_embd=64, n_layer=2, n_head=4, vocab_size=V,
       n_positions=64, **_TOK),
    _c("llama", "LlamaForCausalLM", "LlamaConfig", **_DEC),
    _c("mistral", "MistralForCausalLM", "MistralConfig", **_DEC),
    _c("qwen2", "Qwen2ForCausalLM", "Qwen2Config", **_DEC),
    _c("qwen3", "Qwen3ForCausalLM", "Qwen3Config", head_dim=16, **_DEC),
    _c("qwen2_moe", "Qwen2MoeForCausalLM", "Qwen2MoeConfig",
       **_moe(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
              shared_expert_intermediate_size=64)),
    _c("qwen3_moe", "Qwen3MoeForCausalLM", "Qwen3MoeConfig",
       **_moe(head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
              decoder_sparse_step=1, mlp_only_layers=[])),
    _c("mixtral", "MixtralForCausalLM", "MixtralConfig",
       **_moe(num_local_experts=4, num_experts_per_tok=2)),
    _c("deepseek_v3", "DeepseekV3ForCausalLM", "DeepseekV3Config",
       **_moe(num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=4,
              n_shared_experts=1, num_experts_per_tok=2, n_group=1, topk_group=1,
              first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
              qk_nope_head_dim=8, v_head_dim=16)),
    _c("gemma", "GemmaForCausalLM", "GemmaConfig", head_dim=16, **_DEC),
    _c("gemma2", "Gemma2ForCausalLM", "Gemma2Config", head_dim=16, sliding_window=16, **_DEC),
    _c("gemma3", "Gemma3ForCausalLM", "Gemma3TextConfig", head_dim=16, sliding_window=16, **_DEC),
    _c("phi", "PhiForCausalLM", "PhiConfig", **_DEC),
    _c("phi3", "Phi3ForCausalLM", "Phi3Config", **_DEC),
    _c("opt", "OPTForCausalLM", "OPTConfig", hidden_size=64, ffn_dim=128, num_hidden_layers=2,
       num_attention_heads=4, vocab_size=V, max_position_embeddings=64, word_embed_proj_dim=64,
       **_TOK),
    _c("falcon", "FalconForCausalLM", "FalconConfig", hidden_size=64, num_hidden_layers=2,
       num_attention_heads=4, vocab_size=V, **_TOK),
    _c("gpt_neox", "GPTNeoXForCausalLM", "GPTNeoXConfig", hidden_size=64, intermediate_size=128,
       num_hidden_layers=2, num_attention_heads=4, vocab_size=V, max_position_embeddings=64,
       **_TOK),
    _c("bloom", "BloomForCausalLM", "BloomConfig", hidden_size=64, n_layer=2, n_head=4,
       vocab_size=V, **_TOK),
    _c("gptj", "GPTJForCausalLM", "GPTJConfig", n_embd=64, n_layer=2, n_head=4, vocab_size=V,
       n_positions=64, rotary_dim=8, **_TOK),
    _c("codegen", "CodeGenForCausalLM", "CodeGenConfig", n_embd=64, n_layer=2, n_head=4,
       vocab_size=V, n_positions=64, n_ctx=64, rotary_dim=8, **_TOK),
    _c("gpt_neo", "GPTNeoForCausalLM", "GPTNeoConfig", hidden_size=64, num_layers=2, num_heads=4,
       attention_types=[[["global", "local"], 1]], window_size=16, vocab_size=V,
       max_position_embeddings=64, **_TOK),
    _c("gpt_bigcode", "GPTBigCodeForCausalLM", "GPTBigCodeConfig", n_embd=64, n_layer=2, n_head=4,
       vocab_size=V, n_positions=64, **_TOK),
    _c("stablelm", "StableLmForCausalLM", "StableLmConfig", **_DEC),
    _c("starcoder2", "Starcoder2ForCausalLM", "Starcoder2Config", **_DEC),
    _c("olmo", "OlmoForCausalLM", "OlmoConfig", **_DEC),
    _c("olmo2", "Olmo2ForCausalLM", "Olmo2Config", **_DEC),
    _c("granite", "GraniteForCausalLM", "GraniteConfig", **_DEC),
    _c("cohere", "CohereForCausalLM", "CohereConfig", **_DEC),
    _c("glm4", "Glm4ForCausalLM", "Glm4Config", head_dim=16, **_DEC),
    _c("smollm3", "SmolLM3ForCausalLM", "SmolLM3Config", **_DEC),
    _c("mpt", "MptForCausalLM", "MptConfig", d_model=64, n_heads=4, n_layers=2, vocab_size=V,
       max_seq_len=64, **_TOK),
    _c("xglm", "XGLMForCausalLM", "XGLMConfig", d_model=64, ffn_dim=128, num_layers=2,
       attention_heads=4, vocab_size=V, max_position_embeddings=64, **_TOK),
    _c("mamba", "MambaForCausalLM", "MambaConfig", hidden_size=64, state_size=8,
       num_hidden_layers=2, vocab_size=V, expand=2, conv_kernel=4, **_TOK),
    # ---- encoders (masked LM) ----
    _m("bert", "BertForMaskedLM", "BertConfig", **_ENC),
    _m("roberta", "RobertaForMaskedLM", "RobertaConfig", **{**_ENC, "pad_token_id": 1}),
    _m("xlm_roberta", "XLMRobertaForMaskedLM", "XLMRobertaConfig", **{**_ENC, "pad_token_id": 1}),
    _m("deberta", "DebertaForMaskedLM", "DebertaConfig", relative_attention=True,
       pos_att_type=["c2p", "p2c"], **_ENC),
    _m("deberta_v2", "DebertaV2ForMaskedLM", "DebertaV2Config", relative_attention=True,
       pos_att_type=["c2p", "p2c"], position_buckets=16, **_ENC),
    _m("distilbert", "DistilBertForMaskedLM", "DistilBertConfig", dim=64, hidden_dim=128,
       n_layers=2, n_heads=4, vocab_size=V, max_position_embeddings=64, pad_token_id=0),
    _m("electra", "ElectraForMaskedLM", "ElectraConfig", embedding_size=32, **_ENC),
    _m("albert", "AlbertForMaskedLM", "AlbertConfig", embedding_size=32, **_ENC),
    _m("mpnet", "MPNetForMaskedLM", "MPNetConfig", **{**_ENC, "pad_token_id": 1}),
    _m("roformer", "RoFormerForMaskedLM", "RoFormerConfig", embedding_size=64, **_ENC),
    _m("convbert", "ConvBertForMaskedLM", "ConvBertConfig", embedding_size=64, **_ENC),
    _m("modernbert", "ModernBertForMaskedLM", "ModernBertConfig", global_attn_every_n_layers=2,
       local_attention=16, **_ENC),
    # ---- encoder-decoders ----
    _s2s("t5", "T5ForConditionalGeneration", "T5Config", d_model=64, d_ff=128, d_kv=16,
         num_layers=2, num_decoder_layers=2, num_heads=4, vocab_size=V, pad_token_id=0,
         eos_token_id=1, decoder_start_token_id=0),
    _s2s("bart", "BartForConditionalGeneration", "BartConfig", **_BART),
    _s2s("mbart", "MBartForConditionalGeneration", "MBartConfig", **_BART),
    _s2s("pegasus", "PegasusForConditionalGeneration", "PegasusConfig",
         **{**_BART, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0}),
    _s2s("marian", "MarianMTModel", "MarianConfig",
         **{**_BART, "pad_token_id": 3, "eos_token_id": 2, "decoder_start_token_id": 3}),
    _s2s("blenderbot", "BlenderbotForConditionalGeneration", "BlenderbotConfig", **_BART),
    Spec("whisper", "speech", "WhisperForConditionalGeneration", "WhisperConfig",
         dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=V,
              num_mel_bins=16, max_source_positions=16, max_target_positions=32,
              pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
              suppress_tokens=None, begin_suppress_tokens=None)),
    # ---- vision ----
    _v("vit", "ViTForImageClassification", "ViTConfig", **_VIT),
    _v("deit", "DeiTForImageClassification", "DeiTConfig", **_VIT),
    _v("beit", "BeitForImageClassification", "BeitConfig", use_relative_position_bias=True,
       **_VIT),
    _v("dinov2", "Dinov2ForImageClassification", "Dinov2Config", **_VIT),
    _v("swin", "SwinForImageClassification", "SwinConfig", image_size=32, patch_size=4,
       embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4, num_labels=10),
    _v("convnext", "ConvNextForImageClassification", "ConvNextConfig", num_stages=2,
       hidden_sizes=[16, 32], depths=[1, 1], num_labels=10),
    _v("resnet", "ResNetForImageClassification", "ResNetConfig", embedding_size=16,
       hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic", num_labels=10),
    _v("mobilenet_v2", "MobileNetV2ForImageClassification", "MobileNetV2Config", image_size=32,
       depth_multiplier=0.25, num_labels=10),
    _v("segformer", "SegformerForImageClassification", "SegformerConfig", num_encoder_blocks=2,
       depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
       strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2], num_labels=10),
    Spec("clip", "clip", "CLIPModel", "CLIPConfig",
         dict(text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, vocab_size=V, max_position_embeddings=16,
                               **_TOK),
              vision_config=dict(image_size=32, patch_size=8, hidden_size=64,
                                 intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4),
              projection_dim=32), output="logits_per_image"),
    Spec("siglip", "clip", "SiglipModel", "SiglipConfig",
         dict(text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, vocab_size=V, max_position_embeddings=16,
                               **_TOK),
              vision_config=dict(image_size=32, patch_size=8, hidden_size=64,
                                 intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4)), output="logits_per_image"),
    Spec("detr", "detr", "DetrModel", "DetrConfig",
         dict(use_timm_backbone=False, use_pretrained_backbone=False,
              backbone_config=dict(model_type="resnet", embedding_size=16, hidden_sizes=[16, 32],
                                   depths=[1, 1], layer_type="basic",
                                   out_features=["stage1", "stage2"]),
              d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
              num_queries=10, num_labels=5), output="last_hidden_state"),
    # ---- speech (CTC) ----
    Spec("wav2vec2", "ctc", "Wav2Vec2ForCTC", "Wav2Vec2Config",
         dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
              conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
              num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, vocab_size=32,
              mask_time_prob=0.0, pad_token_id=0, ctc_loss_reduction="mean"), vocab=32),
]
SPEC_BY_NAME = {s.name: s for s in SPECS}


# ---------------------------------------------------------------------------
# building models and inputs
# ---------------------------------------------------------------------------

_DROP_RE = re.compile(r"(dropout|pdrop|drop_rate|drop_path|layerdrop|drop_prob)", re.I)


def _zero_dropout(cfg):
    """Zero every dropout-like probability (recursively into sub-configs)."""
    for key, val in list(vars(cfg).items()):
        if hasattr(val, "to_dict") and hasattr(val, "model_type"):
            _zero_dropout(val)
        elif _DROP_RE.search(key) and isinstance(val, float) and not isinstance(val, bool):
            setattr(cfg, key, 0.0)


def build(spec):
    """The CPU model (seeded random weights, fp32) for `spec`."""
    import torch
    import transformers

    cfg_kw = dict(spec.config)
    config_cls = getattr(transformers, spec.config_cls)
    if spec.kind == "detr":
        bb = dict(cfg_kw.pop("backbone_config"))
        bb_cls = transformers.CONFIG_MAPPING[bb.pop("model_type")]
        cfg_kw["backbone_config"] = bb_cls(**bb)
    config = config_cls(**cfg_kw)
    _zero_dropout(config)
    torch.manual_seed(0)
    model = getattr(transformers, spec.model_cls)(config)
    for mod in model.modules():
        if isinstance(mod, torch.nn.modules.dropout._DropoutNd):
            mod.p = 0.0
    return model.float()


def make_inputs(spec, model):
    """(inputs, labels) CPU tensors for `spec`: inputs for the forward pass,
    labels the extra kwargs that make the model return a loss."""
    import torch

    g = torch.Generator().manual_seed(1234)
    ids = lambda *shape: torch.randint(4, spec.vocab, shape, generator=g)  # noqa: E731
    if spec.kind in ("causal", "masked"):
        x = ids(B, S)
        return {"input_ids": x, "attention_mask": torch.ones_like(x)}, {"labels": x.clone()}
    if spec.kind == "seq2seq":
        x = ids(B, S)
        return ({"input_ids": x, "attention_mask": torch.ones_like(x),
                 "decoder_input_ids": ids(B, 6)}, {"labels": ids(B, 6)})
    if spec.kind == "speech":
        cfg = model.config
        feats = torch.randn(B, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=g)
        return {"input_features": feats, "decoder_input_ids": ids(B, 6)}, {"labels": ids(B, 6)}
    if spec.kind == "vision":
        px = torch.randn(B, 3, 32, 32, generator=g)
        return {"pixel_values": px}, {"labels": torch.randint(0, 10, (B,), generator=g)}
    if spec.kind == "detr":
        return {"pixel_values": torch.randn(B, 3, 64, 64, generator=g)}, {}
    if spec.kind == "clip":
        x = ids(B, S)
        return ({"input_ids": x, "pixel_values": torch.randn(B, 3, 32, 32, generator=g)},
                {"return_loss": True})
    if spec.kind == "ctc":
        wav = torch.randn(B, 800, generator=g)
        return {"input_values": wav}, {"labels": torch.randint(1, spec.vocab, (B, 5), generator=g)}
    raise ValueError(spec.kind)


# ---------------------------------------------------------------------------
# comparisons
# ---------------------------------------------------------------------------


def _to(obj, dev):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(dev)
    if isinstance(obj, dict):
        return {k: _to(v, dev) for k, v in obj.items()}
    return obj


def _main_output(out, key):
    import torch

    if isinstance(out, torch.Tensor):
        return out
    val = getattr(out, key, None)
    if val is None:
        val = out[0]
    return val


def _maxdiff(t, c):
    """(max |t - c|, max |c|) in float64; inf when shapes or non-finite
    positions differ."""
    import torch

    t = t.detach().to("cpu", torch.float64)
    c = c.detach().to(torch.float64)
    if t.shape != c.shape:
        return float("inf"), 1.0
    if c.numel() == 0:
        return 0.0, 0.0
    fc, ft = torch.isfinite(c), torch.isfinite(t)
    if not torch.equal(fc, ft) or not torch.equal(t[~fc], c[~fc]):
        return float("inf"), 1.0
    if not bool(fc.any()):
        return 0.0, 0.0
    return float((t[fc] - c[fc]).abs().max()), float(c[fc].abs().max())


def _rel(diff, scale):
    return diff / max(scale, 1e-30) if diff else 0.0


def _loss_of(out, spec, weight_cache):
    """The model's own loss, else a fixed random projection of its main output."""
    import torch

    loss = getattr(out, "loss", None)
    if loss is not None:
        return loss
    y = _main_output(out, spec.output)
    if "w" not in weight_cache:
        g = torch.Generator().manual_seed(99)
        weight_cache["w"] = torch.randn(tuple(y.shape), generator=g)
    return (y * weight_cache["w"].to(y.device)).sum()


# ---------------------------------------------------------------------------
# the per-model check
# ---------------------------------------------------------------------------

_MISSING_RE = re.compile(r"torch_tpu: (aten::[\w.]+|[\w:.]+) has no native tpu implementation"
                         r"(?: \(([^)]*)\))?")


_UNREGISTERED_RE = re.compile(r"^(\w+) not implemented\. You are likely triggering this with tensor "
                              r"backend other than CPU")


class ZooTimeout(Exception):
    pass


def _first_line(e, n=240):
    msg = str(e).strip().splitlines()
    msg = msg[0] if msg else ""
    return f"{type(e).__name__}: {msg}"[:n]


def _missing_op(e):
    """'aten::op.overload' (plus ' (why)') when `e` is the disabled-fallback
    error, else None."""
    m = _MISSING_RE.search(str(e))
    if not m:
        # ops with a throwing default kernel (convolution_overrideable, ...)
        # never reach the fallback: a backend must register them itself
        m2 = _UNREGISTERED_RE.search(str(e))
        if m2 and isinstance(e, NotImplementedError):
            return f"aten::{m2.group(1)} (not registered for tpu; the CPU fallback cannot run it)"
        return None
    op = m.group(1)
    if not op.startswith("aten::") and "::" not in op:
        op = "aten::" + op
    return op + (f" ({m.group(2)})" if m.group(2) else "")


@dataclasses.dataclass
class StageResult:
    status: str = "-"  # ok | fb | mismatch | fb-mismatch | missing | error | timeout | crash | -
    err: float = None
    first_op: str = None  # missing op natively (or the error text)
    fallback_ops: list = dataclasses.field(default_factory=list)
    fallback_error: str = None
    time: float = 0.0
    graph_breaks: int = None  # compiled: Dynamo graphs - 1
    programs: int = None      # compiled: FX graphs run as one captured program


def _summarise(res):
    st = res["stages"]
    applicable = [s for s in STAGES if st[s]["status"] != "-"]
    res["native_only"] = bool(applicable) and all(st[s]["status"] == "ok" for s in applicable)
    first = None
    for s in STAGES:
        d = st[s]
        if d["status"] in ("ok", "-"):
            continue
        if d["first_op"]:
            first = d["first_op"]
        elif d["status"] == "mismatch":
            first = f"mismatch in {s} (err {d['err']:.2e})"
        elif d["status"] in ("timeout", "crash"):
            first = d.get("first_op") or d["status"]
        else:
            first = d["status"]
        break
    res["first_failing"] = first
    errs = [st[s]["err"] for s in STAGES if st[s]["err"] is not None and s != "generate"]
    res["max_err"] = max(errs) if errs else None
    return res


def check_model(name, stages=STAGES, fallback_rerun=True, timeout=None, log=None,
                precision="HIGHEST", on_stage=None):
    """Run the zoo check of one architecture in this process; returns a
    JSON-able dict. Never raises for model failures."""
    import torch

    import torch_tpu  # noqa: F401
    from torch_tpu.execution_mode import cpu_fallback_mode

    spec = SPEC_BY_NAME[name]
    res = {"name": name, "kind": spec.kind, "model": spec.model_cls, "attn": None,
           "params": None, "error": None, "notes": [],
           "stages": {s: dataclasses.asdict(StageResult()) for s in STAGES}}
    t_model = time.time()
    HIGHEST = getattr(torch.tpu.Precision, precision.upper())

    use_alarm = timeout and threading.current_thread() is threading.main_thread()
    if use_alarm:
        def _on_alarm(signum, frame):
            raise ZooTimeout(f"timed out after {timeout:.0f}s")
        old_handler = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        try:
            model_c = build(spec)
            res["attn"] = getattr(model_c.config, "_attn_implementation", None)
            res["params"] = sum(p.numel() for p in model_c.parameters())
            inputs, labels = make_inputs(spec, model_c)
            model_t = copy.deepcopy(model_c).to("tpu")
            n_c, n_t = len(list(model_c.parameters())), len(list(model_t.parameters()))
            if n_t != n_c:
                # Module.to("tpu") makes new Parameters (tpu tensors are not
                # shallow-copy compatible with CPU ones), which unties tied
                # weights: record it, re-tie as one would on XLA, go on.
                res["notes"].append(f".to('tpu') untied weights ({n_c} -> {n_t} parameters)")
                if hasattr(model_t, "tie_weights"):
                    model_t.tie_weights()
                if len(list(model_t.parameters())) != n_c:
                    prev = torch.__future__.get_swap_module_params_on_conversion()
                    torch.__future__.set_swap_module_params_on_conversion(True)
                    try:
                        model_t = copy.deepcopy(model_c).to("tpu")
                    finally:
                        torch.__future__.set_swap_module_params_on_conversion(prev)
            torch.tpu.synchronize()
            names = [n for n, _ in model_c.named_parameters()]
            pc = dict(model_c.named_parameters())
        except ZooTimeout:
            raise
        except Exception as e:  # a harness/config problem, or .to("tpu") failing
            res["error"] = _first_line(e)
            if log:
                traceback.print_exc(file=log)
            for s in stages:
                res["stages"][s].update(status="error", first_op="build: " + _first_line(e))
            return _summarise(res)
        wcache = {}

        # ---- stage bodies: each returns the relative error ----
        def fwd(dev_model, ref):
            dev_model.eval()
            with torch.no_grad():
                out = dev_model(**_to(inputs, "tpu"))
                y = _main_output(out, spec.output)
                d, sc = _maxdiff(y, ref["y"])
            return _rel(d, sc)

        def bwd(dev_model, ref, compiled=False):
            dev_model.train()
            dev_model.zero_grad(set_to_none=True)
            run = dev_model
            if compiled:
                torch._dynamo.reset()
                run = torch.compile(dev_model, backend="tpu")
            out = run(**_to({**inputs, **labels}, "tpu"))
            loss = _loss_of(out, spec, wcache)
            loss.backward()
            dl, sl = _maxdiff(loss, ref["loss"])
            worst, scale = 0.0, 0.0
            pt = dict(dev_model.named_parameters())
            for n in names:
                p_t, p_c = pt[n], pc[n]
                if (p_t.grad is None) != (p_c.grad is None):
                    return float("inf")
                if p_c.grad is None:
                    continue
                d, sc = _maxdiff(p_t.grad, p_c.grad)
                worst, scale = max(worst, d), max(scale, sc)
            return max(_rel(dl, sl), _rel(worst, scale))

        def step(dev_model, ref):
            pt = dict(dev_model.named_parameters())
            with torch.no_grad():
                for n in names:
                    pt[n].copy_(ref["p0"][n])  # same start (a failed try may have moved them)
            for n in names:
                pt[n].grad = None if pc[n].grad is None else pc[n].grad.to("tpu")
            opt = torch.optim.AdamW([pt[n] for n in names], lr=LR)
            opt.step()
            worst, scale = 0.0, 0.0
            for n in names:
                d, sc = _maxdiff(pt[n], pc[n])
                worst, scale = max(worst, d), max(scale, sc)
            return _rel(worst, scale)

        def gen(dev_model, ref):
            dev_model.eval()
            toks = _generate(dev_model, _to(inputs, "tpu"), spec).cpu()
            if toks.shape != ref["toks"].shape:
                return float("inf")
            return float((toks != ref["toks"]).float().mean())

        def comp(dev_model, ref):
            """forward + backward under torch.compile(backend="tpu")"""
            c0 = torch.tpu._get_cache_stats()["compile"]
            err = bwd(dev_model, ref, compiled=True)
            c1 = torch.tpu._get_cache_stats()["compile"]
            d = {k: c1.get(k, 0) - c0.get(k, 0) for k in ("dynamo_graphs", "captures")}
            res["stages"]["compiled"].update(graph_breaks=max(d["dynamo_graphs"] - 1, 0),
                                             programs=d["captures"])
            return err

        bodies = {"forward": fwd, "backward": bwd, "compiled": comp, "step": step,
                  "generate": gen}
        tol = dict(TOL, generate=0.0)
        ref = {}

        for stage in STAGES:
            if stage not in stages:
                continue
            if stage == "generate" and not spec.generate:
                continue
            sr = res["stages"][stage]
            t0 = time.time()
            if on_stage:
                on_stage(stage)
            # ---- CPU reference ----
            try:
                if stage == "forward":
                    model_c.eval()
                    with torch.no_grad():
                        ref["y"] = _main_output(model_c(**inputs), spec.output).detach()
                elif stage == "backward" or (stage == "compiled" and "loss" not in ref):
                    model_c.train()
                    model_c.zero_grad(set_to_none=True)
                    out = model_c(**inputs, **labels)
                    loss = _loss_of(out, spec, wcache)
                    loss.backward()
                    ref["loss"] = loss.detach()
                elif stage == "step":
                    if "loss" not in ref:  # step alone: make CPU gradients
                        model_c.train()
                        model_c.zero_grad(set_to_none=True)
                        _loss_of(model_c(**inputs, **labels), spec, wcache).backward()
                    ref["p0"] = {n: pc[n].detach().clone() for n in names}
                    opt_c = torch.optim.AdamW([pc[n] for n in names], lr=LR)
                    opt_c.step()
                elif stage == "generate":
                    model_c.eval()
                    # the step moved the CPU weights: generate from the initial ones
                    if "p0" in ref:
                        pt = dict(model_t.named_parameters())
                        with torch.no_grad():
                            for n in names:
                                pc[n].copy_(ref["p0"][n])
                                pt[n].copy_(ref["p0"][n])
                    ref["toks"] = _generate(model_c, inputs, spec)
            except ZooTimeout:
                raise
            except Exception as e:
                sr.update(status="error", first_op="cpu reference: " + _first_line(e),
                          time=time.time() - t0)
                if log:
                    traceback.print_exc(file=log)
                continue
            # ---- tpu, natively ----
            try:
                with cpu_fallback_mode(False), torch.tpu.precision(HIGHEST):
                    err = bodies[stage](model_t, ref)
                    torch.tpu.synchronize()
                sr.update(err=err, status="ok" if err <= tol[stage] else "mismatch")
            except ZooTimeout:
                raise
            except Exception as e:
                op = _missing_op(e)
                sr["first_op"] = op or _first_line(e)
                sr["status"] = "missing" if op else "error"
                if log and not op:
                    traceback.print_exc(file=log)
                if op and fallback_rerun:
                    before = torch.tpu.fallback_counts()
                    try:
                        with cpu_fallback_mode(True), torch.tpu.precision(HIGHEST), \
                                warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            err = bodies[stage](model_t, ref)
                            torch.tpu.synchronize()
                        sr.update(err=err, status="fb" if err <= tol[stage] else "fb-mismatch")
                    except ZooTimeout:
                        raise
                    except Exception as e2:
                        sr["fallback_error"] = _first_line(e2)
                        if log:
                            traceback.print_exc(file=log)
                    after = torch.tpu.fallback_counts()
                    sr["fallback_ops"] = sorted(
                        "aten::" + k if "::" not in k else k
                        for k, v in after.items() if v > before.get(k, 0))
            sr["time"] = round(time.time() - t0, 2)
    except ZooTimeout as e:
        for s in stages:
            sr = res["stages"][s]
            if sr["status"] == "-" and not (s == "generate" and not spec.generate):
                sr.update(status="timeout", first_op=f"timeout ({e})")
                break
        res["error"] = str(e)
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old_handler)
        try:
            torch.tpu.synchronize()
        except Exception:
            pass
    res["time"] = round(time.time() - t_model, 2)
    return _summarise(res)


def _generate(model, inputs, spec):
    """Greedy generate() with the KV cache, NEW_TOKENS new tokens (no EOS stop)."""
    import transformers

    gc = copy.deepcopy(model.generation_config)
    gc.update(do_sample=False, num_beams=1, use_cache=True, max_new_tokens=NEW_TOKENS,
              min_new_tokens=None, max_length=None, eos_token_id=None,
              forced_bos_token_id=None, forced_eos_token_id=None,
              pad_token_id=model.config.pad_token_id if model.config.pad_token_id is not None else 0)
    assert isinstance(gc, transformers.GenerationConfig)
    kw = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask")}
    out = model.generate(**kw, generation_config=gc)
    return out.detach()


# ---------------------------------------------------------------------------
# running many models: worker subprocesses
# ---------------------------------------------------------------------------


def _worker(names, out_path, timeout, stages, fallback_rerun, precision):
    import torch

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    warnings.filterwarnings("ignore")
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except Exception:
        pass
    with open(out_path, "a") as f:
        for name in names:
            f.write(json.dumps({"event": "start", "name": name}) + "\n")
            f.flush()

            def on_stage(stage, name=name):
                f.write(json.dumps({"event": "stage", "name": name, "stage": stage}) + "\n")
                f.flush()

            res = check_model(name, stages=stages, fallback_rerun=fallback_rerun,
                              timeout=timeout, log=sys.stderr, precision=precision,
                              on_stage=on_stage)
            f.write(json.dumps({"event": "done", "result": res}) + "\n")
            f.flush()


def _dead_result(name, status, text, stage=None):
    spec = SPEC_BY_NAME[name]
    res = {"name": name, "kind": spec.kind, "model": spec.model_cls, "attn": None, "params": None,
           "error": text, "time": None, "notes": [],
           "stages": {s: dataclasses.asdict(StageResult()) for s in STAGES}}
    for s in STAGES:
        if stage in (None, s) and (s != "generate" or spec.generate):
            res["stages"][s].update(status=status, first_op=text)
            break
    return _summarise(res)


def run_models(names, timeout=DEFAULT_TIMEOUT, stages=STAGES, fallback_rerun=True,
               inprocess=False, verbose=False, on_result=None, precision="HIGHEST"):
    """Check every architecture in `names`; returns the list of result dicts."""
    results = []
    if inprocess:
        for name in names:
            r = check_model(name, stages=stages, fallback_rerun=fallback_rerun, timeout=timeout,
                            log=sys.stderr if verbose else None, precision=precision)
            results.append(r)
            if on_result:
                on_result(r)
        return results

    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TORCH_TPU_LOCK_DIR", tempfile.mkdtemp(prefix="torch_tpu_zoo_locks_"))
    env.pop("TORCH_TPU_CPU_FALLBACK", None)  # the harness controls it per stage
    tmp = tempfile.mkdtemp(prefix="torch_tpu_zoo_")
    todo = list(names)
    nworker = 0
    while todo:
        nworker += 1
        out_path = os.path.join(tmp, f"w{nworker}.jsonl")
        log_path = os.path.join(tmp, f"w{nworker}.log")
        open(out_path, "w").close()
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--models", ",".join(todo),
               "--out", out_path, "--timeout", str(timeout), "--stages", ",".join(stages),
               "--precision", precision]
        if not fallback_rerun:
            cmd.append("--no-fallback-rerun")
        with open(log_path, "w") as logf:
            proc = subprocess.Popen(cmd, env=env, stdout=logf,
                                    stderr=None if verbose else subprocess.STDOUT)
            pos, current, started, cur_stage = 0, None, time.time(), None
            while True:
                rc = proc.poll()
                with open(out_path) as f:
                    f.seek(pos)
                    chunk = f.read()
                # only complete lines
                cut = chunk.rfind("\n") + 1
                pos += len(chunk[:cut].encode())
                for line in chunk[:cut].splitlines():
                    ev = json.loads(line)
                    if ev["event"] == "start":
                        current, started, cur_stage = ev["name"], time.time(), None
                    elif ev["event"] == "stage":
                        cur_stage = ev["stage"]
                    else:
                        r = ev["result"]
                        results.append(r)
                        todo.remove(r["name"])
                        current = None
                        if on_result:
                            on_result(r)
                if rc is not None:
                    break
                if current and time.time() - started > timeout + 60:
                    proc.kill()
                    proc.wait()
                    rc = "hang"
                    break
                time.sleep(0.2)
        if todo and current is None and rc not in (0, "hang"):
            current = todo[0]  # died before announcing (import error, ...)
        if current is not None and current in todo:
            if rc == "hang":
                text = f"timeout: worker hung > {timeout + 60:.0f}s (killed)"
                status = "timeout"
            else:
                sig = f"signal {-rc}" if isinstance(rc, int) and rc < 0 else f"exit code {rc}"
                with open(log_path, errors="replace") as f:
                    tail = [ln.strip() for ln in f.read().splitlines() if ln.strip()][-3:]
                text = f"crash ({sig})" + (": " + " | ".join(tail)[-300:] if tail else "")
                status = "crash"
            if cur_stage:
                text = f"{text} [in {cur_stage}]"
            r = _dead_result(current, status, text, cur_stage)
            results.append(r)
            todo.remove(current)
            if on_result:
                on_result(r)
        elif todo and rc == 0:
            break  # should not happen
    return results


# ---------------------------------------------------------------------------
# reporting
# ---------------------------------------------------------------------------

_CELL = {"ok": "ok", "fb": "FB", "mismatch": "MISMATCH", "fb-mismatch": "FB+MISMATCH",
         "missing": "MISSING", "error": "ERROR", "timeout": "TIMEOUT", "crash": "CRASH", "-": "-"}


def _fmt_err(e):
    if e is None:
        return "-"
    if e == float("inf"):
        return "inf"
    return f"{e:.1e}"


def totals(results):
    t = {"architectures": len(results)}
    for s in STAGES:
        app = [r for r in results if r["stages"][s]["status"] != "-"]
        t[s] = (sum(r["stages"][s]["status"] == "ok" for r in app), len(app))
        t[s + "_with_fallback"] = (sum(r["stages"][s]["status"] in ("ok", "fb") for r in app),
                                   len(app))
    t["native_only"] = sum(bool(r["native_only"]) for r in results)
    return t


def blockers(results):
    """Counter: first failing op -> number of architectures it blocks."""
    c = collections.Counter()
    for r in results:
        if r["first_failing"]:
            c[r["first_failing"]] += 1
    return c


def missing_ops(results):
    """Counter: every op an architecture needed the CPU fallback for (any
    stage) -> number of architectures."""
    c = collections.Counter()
    for r in results:
        ops = set()
        for s in STAGES:
            d = r["stages"][s]
            if d["status"] in ("missing", "fb", "fb-mismatch"):
                ops.update(d["fallback_ops"])
                if d["first_op"]:
                    ops.add(d["first_op"].split(" (")[0])
        for op in ops:
            c[op] += 1
    return c


def table_rows(results):
    rows = []
    for r in results:
        st = r["stages"]
        rows.append([r["name"]] + [_CELL[st[s]["status"]] for s in STAGES]
                    + ["yes" if r["native_only"] else "no", _fmt_err(r["max_err"]),
                       r["first_failing"] or ""])
    return rows


HEADER = ["architecture", "forward", "backward", "compiled", "step", "generate", "native-only",
          "max err",
          "first failing op"]


def print_table(results, file=sys.stdout):
    rows = table_rows(results)
    widths = [max(len(str(x)) for x in col) for col in zip(HEADER, *rows)]
    widths[-1] = min(widths[-1], 90)
    line = lambda cells: "  ".join(str(c)[:w].ljust(w) for c, w in zip(cells, widths))  # noqa
    print(line(HEADER), file=file)
    print(line(["-" * w for w in widths]), file=file)
    for row in rows:
        print(line(row), file=file)
    t = totals(results)
    print(file=file)
    print(f"totals over {t['architectures']} architectures (natively, CPU fallback disabled):",
          file=file)
    for s in STAGES:
        ok, n = t[s]
        okf, _ = t[s + "_with_fallback"]
        print(f"  {s:9s} {ok:3d}/{n:<3d} pass natively   ({okf}/{n} with the CPU fallback for "
              f"missing ops)", file=file)
    print(f"  native-only (every stage passes natively): {t['native_only']}/{t['architectures']}",
          file=file)
    b = blockers(results)
    if b:
        print("\nfirst failing op -> architectures it blocks:", file=file)
        for op, n in b.most_common():
            print(f"  {n:3d}  {op[:140]}", file=file)


def write_report(results, path, argv=None, elapsed=None):
    import torch

    try:
        import transformers

        tv = transformers.__version__
    except Exception:
        tv = "?"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=os.path.dirname(os.path.abspath(__file__))
                                ).stdout.strip()
    except Exception:
        commit = "?"
    try:
        nnative = len(torch.tpu.native_ops())
    except Exception:
        nnative = "?"
    t = totals(results)
    out = []
    w = out.append
    w("# Hugging Face model zoo on tpu\n")
    w("Generated by `python tools/zoo.py"
      + (" " + " ".join(argv) if argv else "") + "` (do not edit by hand).\n")
    w(f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}, commit `{commit}`, torch "
      f"{torch.__version__}, transformers {tv}, {nnative} native ATen overloads"
      + (f", run time {elapsed:.0f}s" if elapsed else ""))
    w(f"- {len(results)} architectures, tiny configs (2 layers, hidden 32-64, vocab 128, "
      f"batch {B}, sequence {S}, 32x32 images), random weights, fp32, "
      "attention implementation as transformers picks it (sdpa where supported)")
    w("- each stage runs on tpu with the CPU fallback disabled and precision HIGHEST and is "
      "compared with the CPU: forward (eval, main output), backward (train mode with dropout "
      "zeroed: loss and all gradients), step (one AdamW step from the CPU gradients: the "
      f"parameters), generate (greedy, KV cache, {NEW_TOKENS} new tokens, identical tokens), "
      "compiled (the backward stage's forward + backward under "
      "`torch.compile(model, backend=\"tpu\")`: loss and all gradients; graph breaks allowed "
      "and counted, each FX graph one captured program)")
    w(f"- thresholds on max|tpu-cpu| / max|cpu|: forward {TOL['forward']:g}, backward "
      f"{TOL['backward']:g}, step {TOL['step']:g}")
    w("- cells: `ok` passes natively; `FB` stops natively on a missing op but passes when "
      "re-run with the CPU fallback; `MISSING` stops on a missing op (and fails or was not "
      "re-run with the fallback); `MISMATCH` runs natively but differs from the CPU; "
      "`FB+MISMATCH` differs even with the fallback; `ERROR` another exception; `-` not "
      "applicable\n")
    w("## Totals\n")
    w("| stage | pass natively | pass with CPU fallback for missing ops |")
    w("|---|---|---|")
    for s in STAGES:
        ok, n = t[s]
        okf, _ = t[s + "_with_fallback"]
        w(f"| {s} | {ok}/{n} | {okf}/{n} |")
    w(f"| **native-only (all stages)** | **{t['native_only']}/{t['architectures']}** | |\n")
    comp = [r["stages"]["compiled"] for r in results if r["stages"]["compiled"]["status"] == "ok"]
    if comp:
        brk = sum(1 for d in comp if d.get("graph_breaks"))
        w(f"Compiled stage: {len(comp)} architectures pass; {brk} of them with graph breaks "
          f"({sum(d.get('graph_breaks') or 0 for d in comp)} breaks in all); "
          f"{sum(d.get('programs') or 0 for d in comp)} FX graphs ran as captured programs.\n")
    w("## Per architecture\n")
    w("| " + " | ".join(HEADER) + " |")
    w("|" + "---|" * len(HEADER))
    for row in table_rows(results):
        row = [str(c).replace("|", "\\|") for c in row]
        row[-1] = f"`{row[-1]}`" if row[-1] else ""
        w("| " + " | ".join(row) + " |")
    w("")
    w("## First failing op -> architectures it blocks\n")
    w("The first stage that fails natively, and the op it stopped on (or the error). Fixing "
      "the top rows unblocks the most architectures.\n")
    w("| architectures | first failing op | which |")
    w("|---|---|---|")
    for op, n in blockers(results).most_common():
        who = ", ".join(r["name"] for r in results if r["first_failing"] == op)
        w(f"| {n} | `{op.replace('|', '/')}` | {who} |")
    w("")
    w("## Every op the CPU fallback had to run -> architectures needing it\n")
    w("From the re-runs with the fallback enabled (all stages): the full list of missing ops, "
      "not only the first.\n")
    w("| architectures | op | which |")
    w("|---|---|---|")
    for op, n in missing_ops(results).most_common():
        who = []
        for r in results:
            for s in STAGES:
                d = r["stages"][s]
                if op in d["fallback_ops"] or (d["first_op"] or "").split(" (")[0] == op:
                    who.append(r["name"])
                    break
        w(f"| {n} | `{op}` | {', '.join(who)} |")
    w("")
    fb_errs = collections.Counter()
    fb_who = collections.defaultdict(list)
    for r in results:
        seen = set()
        for s in STAGES:
            e = r["stages"][s].get("fallback_error")
            if e and e not in seen:
                seen.add(e)
                fb_errs[e] += 1
                fb_who[e].append(r["name"])
    if fb_errs:
        w("## Blocked even with the CPU fallback\n")
        w("Stages that still fail when re-run with the fallback enabled (their list of missing "
          "ops above is cut short there): these need a native kernel or a glue registration, "
          "the fallback cannot stand in.\n")
        w("| architectures | error with the fallback enabled | which |")
        w("|---|---|---|")
        for e, n in fb_errs.most_common():
            w(f"| {n} | `{e.replace('|', '/')[:200]}` | {', '.join(fb_who[e])} |")
        w("")
    notes = collections.Counter(n for r in results for n in (r.get("notes") or []))
    untied = [r["name"] for r in results
              if any("untied" in n for n in (r.get("notes") or []))]
    if untied:
        w("## Other findings\n")
        w(f"- `Module.to('tpu')` unties tied weights in {len(untied)} architectures "
          f"({', '.join(untied)}): tpu tensors are not shallow-copy compatible with CPU ones "
          "(`torch._has_compatible_shallow_copy_type` is False for PrivateUse1), so "
          "`nn.Module._apply` replaces each Parameter instead of setting `.data`, and tied "
          "parameters (embeddings / LM head) become two. Training then silently diverges "
          "from the CPU (the LM-head gradient never reaches the embedding). The harness "
          "records it and re-ties with `model.tie_weights()` before comparing.")
        w("")
    del notes
    w("## Details\n")
    w("| architecture | model class | attn | params | stage errors (fwd / bwd / comp / step / gen) | "
      "time s | notes |")
    w("|---|---|---|---|---|---|---|")
    for r in results:
        st = r["stages"]
        errs = " / ".join(_fmt_err(st[s]["err"]) for s in STAGES)
        notes = list(r.get("notes") or [])
        for s in STAGES:
            d = st[s]
            if d["status"] in ("error", "timeout", "crash", "mismatch", "fb-mismatch"):
                notes.append(f"{s}: {d['status']}" + (f" {d['first_op']}" if d["first_op"] else ""))
            if d.get("fallback_error"):
                notes.append(f"{s} with fallback: {d['fallback_error']}")
        note = "; ".join(notes).replace("|", "/")[:400]
        w(f"| {r['name']} | {r['model']} | {r['attn'] or '-'} | {r['params'] or '-'} | {errs} | "
          f"{r['time'] if r['time'] is not None else '-'} | {note} |")
    w("")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(out))


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python tools/zoo.py", description=__doc__.split("\n")[0])
    ap.add_argument("--models", help="comma list of architectures (default: all; see --list)")
    ap.add_argument("--report", help="write the markdown report here (e.g. docs/zoo_report.md)")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--stages", default=",".join(STAGES), help="comma list of " + ",".join(STAGES))
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per model")
    ap.add_argument("--precision", default="HIGHEST", choices=["HIGHEST", "HIGH", "DEFAULT"],
                    type=str.upper, help="tpu matmul precision (default HIGHEST)")
    ap.add_argument("--no-fallback-rerun", action="store_true",
                    help="do not re-run failing stages with the CPU fallback")
    ap.add_argument("--inprocess", action="store_true", help="no worker subprocesses")
    ap.add_argument("--list", action="store_true", help="print the architecture names")
    ap.add_argument("-v", "--verbose", action="store_true", help="show the models' own output")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.list:
        for s in SPECS:
            print(f"{s.name:14s} {s.kind:8s} {s.model_cls}")
        return 0
    names = [n.strip() for n in args.models.split(",")] if args.models else [s.name for s in SPECS]
    unknown = [n for n in names if n not in SPEC_BY_NAME]
    if unknown:
        ap.error(f"unknown architectures: {', '.join(unknown)} (see --list)")
    stages = tuple(s.strip() for s in args.stages.split(",") if s.strip())
    bad = [s for s in stages if s not in STAGES]
    if bad:
        ap.error(f"unknown stages: {', '.join(bad)}")

    if args.worker:
        _worker(names, args.out, args.timeout, stages, not args.no_fallback_rerun, args.precision)
        return 0

    if args.inprocess:
        os.environ.setdefault("TORCH_TPU_LOCK_DIR", tempfile.mkdtemp(prefix="torch_tpu_zoo_locks_"))

    t0 = time.time()

    def progress(r):
        st = " ".join(f"{s[:3]}={_CELL[r['stages'][s]['status']]}" for s in STAGES)
        print(f"[{time.time() - t0:6.0f}s] {r['name']:14s} {st}  {r['first_failing'] or ''}"[:200],
              file=sys.stderr, flush=True)

    results = run_models(names, timeout=args.timeout, stages=stages,
                         fallback_rerun=not args.no_fallback_rerun, inprocess=args.inprocess,
                         verbose=args.verbose, on_result=progress, precision=args.precision)
    order = {n: i for i, n in enumerate(names)}
    results.sort(key=lambda r: order[r["name"]])
    elapsed = time.time() - t0
    print()
    print_table(results)
    print(f"\n{elapsed:.0f}s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.report:
        shown, skip = [], False
        for a in argv:  # the command line minus the local-only options
            if skip:
                skip = False
            elif a in ("--json", "--out"):
                skip = True
            elif a not in ("-v", "--verbose") and not a.startswith("--json="):
                shown.append(a)
        write_report(results, args.report, argv=shown, elapsed=elapsed)
        print(f"wrote {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
