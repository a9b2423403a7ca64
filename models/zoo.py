#!/usr/bin/python3
"""Kiln's model zoo: small, deterministic PyTorch models with example inputs.

    build(name) -> (nn.Module, example_inputs: tuple of tensors)

Every model is built under a fixed seed, so two calls to build() give
bit-identical weights and inputs (on the same PyTorch build). The module is
returned in the mode it is meant to be run in: eval() for everything except
the `*_train` models, which are returned in train() mode (see is_train()).

Three families:
  * Kiln's own models, defined below as plain nn.Modules written so that
    torch.jit.script accepts them (type annotations, no dynamic Python).
  * torchvision classification models with random init (no downloads),
    named tv_<name>, num_classes=10, batch 2 (BatchNorm in train mode needs
    more than one value per channel), inputs as small as each allows. The
    4096-wide AlexNet/VGG classifiers are shrunk to 256 (same keys).
  * thin wrappers around nn.Transformer / nn.MultiheadAttention.

formats(name) lists the export formats known to work on torch 1.13
(trace / script / fx); models/README.md has the table.
"""

import math
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

# Seeds: one for weights, one for inputs, so that changing a model's input
# shape never changes its weights.
WEIGHT_SEED = 0
INPUT_SEED = 1234


# --------------------------------------------------------------------------
# Kiln's own models
# --------------------------------------------------------------------------

class MLP(nn.Module):
    """Linear -> ReLU -> Linear -> ReLU -> Linear."""

    def __init__(self, d_in: int = 32, d_hidden: int = 64, d_out: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.act2 = nn.ReLU()
        self.fc3 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.fc1(x))
        x = self.act2(self.fc2(x))
        return self.fc3(x)


class CNNBN(nn.Module):
    """Two Conv2d+BatchNorm2d+ReLU+MaxPool stages, then a Linear head."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16 * 4 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        x = torch.flatten(x, 1)
        return self.fc(x)


class DigitsCNN(nn.Module):
    """A small VGG-style image classifier for the time-to-quality benchmark
    (benchmarks/time_to_quality.py: scikit-learn's digits at 32x32,
    Fashion-MNIST at 28x28): three Conv-BN-ReLU stages with max pooling,
    global average pooling (so it runs at any image size: progressive
    resizing) and a Linear head."""

    def __init__(self, in_ch: int = 1, width: int = 32, num_classes: int = 10):
        super().__init__()

        def stage(c_in, c_out):
            return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
                                 nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())

        self.stage1 = stage(in_ch, width)
        self.stage2 = stage(width, 2 * width)
        self.stage3 = stage(2 * width, 4 * width)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.stage1(x))
        x = self.pool(self.stage2(x))
        x = self.stage3(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convs, identity or 1x1-conv shortcut."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        # An empty Sequential is the identity; TorchScript is happy with it.
        self.downsample = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.downsample(x))


class ResNetMini(nn.Module):
    """Stem + three BasicBlocks (two with stride-2 downsample) + avg pool + fc."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = BasicBlock(16, 16)
        self.layer2 = BasicBlock(16, 32, stride=2)
        self.layer3 = BasicBlock(32, 64, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


class TransformerEncoderLM(nn.Module):
    """Token embedding -> 2-layer nn.TransformerEncoder (batch_first) -> Linear."""

    def __init__(self, vocab: int = 100, d_model: int = 32, nhead: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=64, dropout=0.1,
                                           batch_first=True)
        # No nested tensors: we never pass a padding mask.
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


class CausalSelfAttention(nn.Module):
    """GPT-2 multi-head causal self-attention, written out by hand."""

    def __init__(self, d_model: int, n_head: int, dropout: float):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # mask: bool [T, T], True where attention is NOT allowed.
        B, T, C = x.size()
        hd = C // self.n_head
        qkv = self.c_attn(x)
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)  # [B, H, T, hd]
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(mask, float("-inf"))
        att = torch.softmax(att, dim=-1)
        att = self.attn_drop(att)
        y = torch.matmul(att, v)  # [B, H, T, hd]
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.c_proj(y))


class GPT2Block(nn.Module):
    """Pre-LayerNorm block: x + attn(ln1(x)); x + mlp(ln2(x))."""

    def __init__(self, d_model: int, n_head: int, dropout: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, dropout)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp_fc = nn.Linear(d_model, 4 * d_model)
        self.mlp_act = nn.GELU(approximate="tanh")
        self.mlp_proj = nn.Linear(4 * d_model, d_model)
        self.mlp_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), mask)
        x = x + self.mlp_drop(self.mlp_proj(self.mlp_act(self.mlp_fc(self.ln_2(x)))))
        return x


class GPT2Mini(nn.Module):
    """GPT-2-style decoder with a learned position embedding and tied lm_head."""

    def __init__(self, vocab: int = 128, n_ctx: int = 32, d_model: int = 32, n_head: int = 4,
                 n_layer: int = 2, dropout: float = 0.1):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(n_ctx, d_model)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([GPT2Block(d_model, n_head, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        # Weight tying: ONE Parameter reachable under two state_dict keys
        # ("wte.weight" and "lm_head.weight"); named_parameters() yields it once.
        self.lm_head.weight = self.wte.weight

    def trunk(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device).unsqueeze(0)
        # Causal mask built in forward: True above the diagonal = masked.
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=idx.device), diagonal=1)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x, mask)
        return self.ln_f(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.trunk(idx))


def gpt2_init(model: nn.Module) -> nn.Module:
    """GPT-2's initialisation (nanoGPT's _init_weights): linear and embedding
    weights N(0, 0.02), biases zero, the residual projections scaled by
    1/sqrt(2 * layers); the zoo's toy models keep PyTorch's defaults."""
    layers = sum(1 for m in model.modules() if isinstance(m, GPT2Block))
    for name, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj", "mlp_proj")) else 0.02
            nn.init.normal_(m.weight, 0.0, std)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
    return model


class GPT2Classifier(GPT2Mini):
    """GPT-2-style decoder with a classification head on the last token (as
    transformers' GPT2ForSequenceClassification): the token embedding is not
    tied to an output layer, so its gradient is non-zero only in the rows of
    the batch's tokens -- the sparse gradient data-parallel training can
    exploit (benchmarks/dp_bench.py)."""

    def __init__(self, vocab: int = 50257, n_ctx: int = 64, d_model: int = 128, n_head: int = 4,
                 n_layer: int = 2, n_classes: int = 4):
        super().__init__(vocab, n_ctx, d_model, n_head, n_layer, dropout=0.0)
        del self.lm_head
        self.score = nn.Linear(d_model, n_classes, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.score(self.trunk(idx)[:, -1])


class RMSNorm(nn.Module):
    """LLaMA's root-mean-square norm, written out (torch 1.13 has no nn.RMSNorm)."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaAttention(nn.Module):
    """Grouped-query causal attention with rotary positions: n_kv_head K/V
    heads, each shared by n_head // n_kv_head query heads (repeat_interleave)."""

    def __init__(self, d_model: int, n_head: int, n_kv_head: int):
        super().__init__()
        self.n_head = n_head
        self.n_kv_head = n_kv_head
        self.hd = d_model // n_head
        self.q_proj = nn.Linear(d_model, n_head * self.hd, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_head * self.hd, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_head * self.hd, bias=False)
        self.o_proj = nn.Linear(n_head * self.hd, d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q = self.q_proj(x).view(B, T, self.n_head, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.hd).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        rep = self.n_head // self.n_kv_head
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, C)
        return self.o_proj(y)


class LlamaBlock(nn.Module):
    """Pre-RMSNorm block with a SwiGLU MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, d_model: int, n_head: int, n_kv_head: int, d_ff: int):
        super().__init__()
        self.input_norm = RMSNorm(d_model)
        self.attn = LlamaAttention(d_model, n_head, n_kv_head)
        self.post_norm = RMSNorm(d_model)
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), cos, sin, mask)
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class LlamaDecoder(nn.Module):
    """LLaMA-style decoder: RMSNorm, rotary position tables built in forward
    (torch.outer of positions and inverse frequencies), grouped-query
    attention, SwiGLU, no biases, an untied output head."""

    def __init__(self, vocab: int = 128, d_model: int = 32, n_head: int = 4, n_kv_head: int = 2,
                 d_ff: int = 64, n_layer: int = 2):
        super().__init__()
        self.hd = d_model // n_head
        self.embed = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList([LlamaBlock(d_model, n_head, n_kv_head, d_ff) for _ in range(n_layer)])
        self.norm = RMSNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.size(1)
        x = self.embed(idx)
        # The tables in the weights' dtype (float64 parity runs compute them in float64).
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, self.hd, 2, dtype=x.dtype, device=idx.device) / self.hd))
        freqs = torch.outer(torch.arange(T, dtype=x.dtype, device=idx.device), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=idx.device), diagonal=1)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


class VideoNet(nn.Module):
    """A small 3-D convolutional video classifier (C3D / R(2+1)D style):
    a strided Conv3d stem, BatchNorm3d, max pooling over space, a grouped
    3x3x3 block with a residual, a (2+1)D pair (spatial 1x3x3, then
    temporal 3x1x1), average pooling, global pooling and a linear head."""

    def __init__(self, classes: int = 5, width: int = 8):
        super().__init__()
        w, w2 = width, width * 3 // 2
        self.stem = nn.Conv3d(3, w, (3, 5, 5), stride=(1, 2, 2), padding=(1, 2, 2), bias=False)
        self.bn = nn.BatchNorm3d(w)
        self.pool = nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))
        self.block = nn.Sequential(nn.Conv3d(w, w, 3, padding=1, groups=2), nn.BatchNorm3d(w), nn.ReLU())
        self.spatial = nn.Conv3d(w, w2, (1, 3, 3), padding=(0, 1, 1))
        self.temporal = nn.Conv3d(w2, w2, (3, 1, 1), stride=(2, 1, 1), padding=(1, 0, 0))
        self.avg = nn.AvgPool3d(2, ceil_mode=True, count_include_pad=False)
        self.head = nn.Linear(w2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn(self.stem(x))))
        x = x + self.block(x)
        x = self.avg(torch.relu(self.temporal(torch.relu(self.spatial(x)))))
        return self.head(nn.functional.adaptive_avg_pool3d(x, 1).flatten(1))


class AudioNet(nn.Module):
    """A raw-waveform audio classifier (M5 / wav2letter style): a wide
    strided Conv1d front end, dilated Conv1d blocks with BatchNorm1d and
    GELU, max and average 1-D pooling, global average pooling, a head."""

    def __init__(self, classes: int = 6):
        super().__init__()
        self.front = nn.Conv1d(1, 16, 40, stride=8, padding=16)
        self.bn = nn.BatchNorm1d(16)
        self.pool = nn.MaxPool1d(4)
        self.blocks = nn.Sequential(
            nn.Conv1d(16, 24, 3, padding=2, dilation=2), nn.BatchNorm1d(24), nn.GELU(),
            nn.Conv1d(24, 24, 3, padding=1, groups=4), nn.BatchNorm1d(24), nn.GELU(), nn.AvgPool1d(2))
        self.head = nn.Linear(24, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.pool(torch.relu(self.bn(self.front(x)))))
        return self.head(nn.functional.adaptive_avg_pool1d(x, 1).squeeze(-1))


class GraphConvNet(nn.Module):
    """Message passing over a fixed graph (the GNN family, written with plain
    indexing as torch_geometric's layers are): node features gathered at the
    edges' sources, messages summed into their targets (index_put_ with
    accumulate), averaged and max-pooled (scatter_reduce mean, amax), a learned edge weight per
    node pair read with two index tensors, edge scores scattered back
    (scatter_add), a class per node."""

    def __init__(self, nodes: int = 12, feat: int = 8, hidden: int = 16, classes: int = 4, edges: int = 30):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.register_buffer("src", torch.randint(0, nodes, (edges,), generator=g))
        self.register_buffer("dst", torch.randint(0, nodes, (edges,), generator=g))
        self.edge_weight = nn.Parameter(torch.rand(nodes, nodes, generator=g))
        self.lin1 = nn.Linear(feat, hidden)
        self.msg = nn.Linear(hidden, hidden)
        self.lin2 = nn.Linear(3 * hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.lin1(x))
        w = self.edge_weight[self.src, self.dst].unsqueeze(-1)
        m = self.msg(h[self.src]) * w
        total = torch.zeros_like(h).index_put_((self.dst,), m, accumulate=True)
        targets = self.dst.unsqueeze(-1).expand_as(m)
        mean = torch.zeros_like(h).scatter_reduce(0, targets, m, "mean", include_self=False)
        peak = torch.zeros_like(h).scatter_reduce(0, targets, m, "amax", include_self=False)
        h2 = torch.relu(self.lin2(torch.cat([total, mean, peak], -1))) + h
        score = (h2[self.src] * h2[self.dst]).sum(-1, keepdim=True)
        return self.head(h2.scatter_add(0, targets, score * h2[self.src]))


class MoEMini(nn.Module):
    """Token-choice mixture of experts: a softmax router picks the top-k of
    n_expert MLP experts per token (torch.topk), their gates renormalized;
    written densely (every expert runs on every token, weighted by the
    one-hot combine matrix), so shapes stay static."""

    def __init__(self, vocab: int = 128, d_model: int = 32, n_expert: int = 4, k: int = 2, d_ff: int = 64):
        super().__init__()
        self.k = k
        self.n_expert = n_expert
        self.embed = nn.Embedding(vocab, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.router = nn.Linear(d_model, n_expert, bias=False)
        self.experts = nn.ModuleList(
            [nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model)) for _ in range(n_expert)])
        self.head = nn.Linear(d_model, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        h = self.norm(x)
        gates = torch.softmax(self.router(h), dim=-1)
        top_v, top_i = gates.topk(self.k, dim=-1)
        top_v = top_v / top_v.sum(dim=-1, keepdim=True)
        # One-hot by comparison (F.one_hot checks its indices' range on the data, which make_fx cannot trace).
        one_hot = (top_i.unsqueeze(-1) == torch.arange(self.n_expert, device=idx.device)).to(h.dtype)
        combine = (one_hot * top_v.unsqueeze(-1)).sum(dim=-2)
        out = x
        for e, expert in enumerate(self.experts):
            out = out + combine[..., e:e + 1] * expert(h)
        return self.head(out)


class RnnClassifier(nn.Module):
    """Recurrent text classifier: embedding, a 2-layer bidirectional LSTM
    (batch_first, dropout between layers), a GRU, a tanh RNN and a projected
    LSTM (proj_size) over its output, and a linear head on the mean over
    time plus the final states."""

    def __init__(self, vocab: int = 128, d: int = 16, hidden: int = 12, classes: int = 5, dropout: float = 0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, num_layers=2, bidirectional=True, batch_first=True, dropout=dropout)
        self.gru = nn.GRU(2 * hidden, hidden, batch_first=True)
        self.rnn = nn.RNN(hidden, hidden, nonlinearity="tanh", batch_first=True)
        self.projected = nn.LSTM(hidden, hidden, proj_size=hidden // 2, batch_first=True)
        self.head = nn.Linear(hidden // 2 + 4 * hidden, classes)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        y, (h, c) = self.lstm(self.embed(idx))
        z, _ = self.gru(y)
        r, _ = self.rnn(z)
        p, _ = self.projected(r)
        states = torch.cat([h[-1], h[-2], c[-1], c[-2]], dim=-1)
        return self.head(torch.cat([p.mean(dim=1), states], dim=-1))


class CellLoopClassifier(nn.Module):
    """A recurrent model written as a loop, as decoders and custom RNNs are:
    nn.LSTMCell and nn.GRUCell stepped over x[:, t] from learned initial
    states, a linear head on the mean of the outputs and the last states."""

    def __init__(self, vocab: int = 128, d: int = 16, hidden: int = 12, classes: int = 5):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.lstm = nn.LSTMCell(d, hidden)
        self.gru = nn.GRUCell(hidden, hidden)
        self.h0 = nn.Parameter(0.1 * torch.randn(1, hidden))
        self.c0 = nn.Parameter(0.1 * torch.randn(1, hidden))
        self.g0 = nn.Parameter(0.1 * torch.randn(1, hidden))
        self.head = nn.Linear(3 * hidden, classes)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        e = self.embed(idx)
        b = idx.shape[0]
        h, c, g = self.h0.expand(b, -1), self.c0.expand(b, -1), self.g0.expand(b, -1)
        outs = []
        for t in range(idx.shape[1]):
            h, c = self.lstm(e[:, t], (h, c))
            g = self.gru(h, g)
            outs.append(g)
        return self.head(torch.cat([torch.stack(outs, 1).mean(1), h, g], -1))


class LstmClassifier(nn.Module):
    """A plain LSTM text classifier (embedding, 2-layer LSTM, linear head on the
    mean over time): the recurrent benchmark's model."""

    def __init__(self, vocab: int = 10000, d: int = 256, hidden: int = 512, layers: int = 2, classes: int = 20):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(self.embed(idx))
        return self.head(y.mean(dim=1))


class BertLayer(nn.Module):
    """BERT's post-LayerNorm encoder layer: LN(x + attn(x)); LN(x + ffn(x)),
    with multi-head self-attention (keys where the padding mask is 0 get a
    score of -10000, as BERT's) and erf GELU."""

    def __init__(self, d_model: int, n_head: int, d_ff: int, dropout: float):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.attn_out = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)
        self.ln_attn = nn.LayerNorm(d_model, eps=1e-12)
        self.ffn_in = nn.Linear(d_model, d_ff)
        self.ffn_out = nn.Linear(d_ff, d_model)
        self.ffn_drop = nn.Dropout(dropout)
        self.ln_ffn = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, x: torch.Tensor, pad: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, T, C = x.size()
        hd = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        if pad is not None:  # [B, 1, 1, T]: True at padding keys
            scores = scores.masked_fill(pad, -10000.0)
        att = torch.softmax(scores, dim=-1)
        y = torch.matmul(self.attn_drop(att), v).transpose(1, 2).contiguous().view(B, T, C)
        x = self.ln_attn(x + self.attn_drop(self.attn_out(y)))
        return self.ln_ffn(x + self.ffn_drop(self.ffn_out(F.gelu(self.ffn_in(x)))))


class BertClassifier(nn.Module):
    """BERT-style encoder for sequence classification (as transformers'
    BertForSequenceClassification): token + position (+ token type, with
    type_vocab) embeddings, LayerNorm, post-LN layers that ignore the keys
    where attention_mask is 0, a tanh pooler on the first token and a linear
    head. forward(input_ids, token_type_ids=None, attention_mask=None)."""

    def __init__(self, vocab: int = 30522, n_ctx: int = 512, d_model: int = 768, n_head: int = 12,
                 d_ff: int = 3072, n_layer: int = 6, n_classes: int = 2, dropout: float = 0.1,
                 type_vocab: int = 0):
        super().__init__()
        self.word = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(n_ctx, d_model)
        self.token_type = nn.Embedding(type_vocab, d_model) if type_vocab > 0 else None
        self.ln_embed = nn.LayerNorm(d_model, eps=1e-12)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList([BertLayer(d_model, n_head, d_ff, dropout) for _ in range(n_layer)])
        self.pooler = nn.Linear(d_model, d_model)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, idx: torch.Tensor, token_type: Optional[torch.Tensor] = None,
                attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        T = idx.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device).unsqueeze(0)
        x = self.word(idx) + self.pos(pos)
        tt = self.token_type
        if tt is not None and token_type is not None:
            x = x + tt(token_type)
        x = self.drop(self.ln_embed(x))
        pad: Optional[torch.Tensor] = None
        if attention_mask is not None:
            pad = (attention_mask == 0).unsqueeze(1).unsqueeze(2)
        for layer in self.layers:
            x = layer(x, pad)
        return self.head(torch.tanh(self.pooler(x[:, 0])))


class BagClassifier(nn.Module):
    """Bag-of-embeddings classifier (fastText / DLRM style) over token rows
    [B, L]: a mean nn.EmbeddingBag over each row (padding id 0 ignored), a
    max-pooled one, and a sum bag with learned per-token weights over two
    bags of different lengths per row (a quarter and the rest: offsets made
    from the shape); concatenated into a two-layer MLP."""

    def __init__(self, vocab: int = 64, d: int = 16, classes: int = 4):
        super().__init__()
        self.words = nn.EmbeddingBag(vocab, d, mode="mean", padding_idx=0)
        self.peaks = nn.EmbeddingBag(vocab, d, mode="max")
        self.tags = nn.EmbeddingBag(vocab, d, mode="sum")
        self.token_weight = nn.Embedding(vocab, 1)
        self.mlp = nn.Sequential(nn.Linear(4 * d, 32), nn.ReLU(), nn.Linear(32, classes))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        B, L = tokens.size()
        flat = tokens.reshape(-1)
        rows = torch.arange(B, device=tokens.device) * L
        offsets = torch.stack([rows, rows + L // 4], dim=1).reshape(-1)
        weights = F.softplus(self.token_weight(flat).squeeze(-1))
        tags = self.tags(flat, offsets, per_sample_weights=weights).reshape(B, -1)
        return self.mlp(torch.cat([self.words(tokens), self.peaks(tokens), tags], dim=1))


class SegNet(nn.Module):
    """Semantic segmentation (FCN / DeepLab style): a stride-4 convolutional
    encoder, a context block of a dilated 3x3 and a 1x1 branch concatenated
    (ASPP-like), a per-pixel 1x1 classifier and bilinear upsampling back to
    the input size. Trained with per-pixel cross-entropy over [N, C, H, W]
    logits and [N, H, W] labels, usually with an ignored label (255)."""

    def __init__(self, classes: int = 5, width: int = 16):
        super().__init__()
        w = width

        def cbr(cin: int, cout: int, k: int, stride: int = 1, dilation: int = 1) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, k, stride=stride, padding=dilation * (k // 2),
                                           dilation=dilation, bias=False),
                                 nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

        self.encoder = nn.Sequential(cbr(3, w, 3, stride=2), cbr(w, 2 * w, 3, stride=2), cbr(2 * w, 2 * w, 3))
        self.dilated = cbr(2 * w, 2 * w, 3, dilation=2)
        self.pointwise = cbr(2 * w, 2 * w, 1)
        self.project = cbr(4 * w, 2 * w, 1)
        self.classifier = nn.Conv2d(2 * w, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(x)
        h = self.project(torch.cat([self.dilated(h), self.pointwise(h)], dim=1))
        return F.interpolate(self.classifier(h), size=(x.shape[2], x.shape[3]), mode="bilinear",
                             align_corners=False)


class UNetResBlock(nn.Module):
    """Diffusion-UNet residual block: GroupNorm-SiLU-conv3x3 twice, with a
    1x1 shortcut when the channel count changes."""

    def __init__(self, c_in: int, c_out: int, groups: int = 32):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class UNetAttention(nn.Module):
    """Single-head self-attention over the pixels of a feature map (the
    low-resolution attention of DDPM's UNet), with a residual."""

    def __init__(self, c: int, groups: int = 32):
        super().__init__()
        self.norm = nn.GroupNorm(groups, c)
        self.qkv = nn.Conv2d(c, 3 * c, 1)
        self.proj = nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.size()
        q, k, v = self.qkv(self.norm(x)).reshape(B, 3, C, H * W).unbind(1)
        att = torch.softmax(torch.matmul(q.transpose(1, 2), k) * (1.0 / math.sqrt(C)), dim=-1)  # [B, HW, HW]
        y = torch.matmul(v, att.transpose(1, 2)).reshape(B, C, H, W)
        return x + self.proj(y)


class UNet(nn.Module):
    """Diffusion-style UNet denoiser (DDPM's layout without the timestep
    embedding): three resolutions with channel multipliers (1, 2, 4), two
    residual blocks per level on the way down and on the way up with skip
    concatenations, attention at the lowest resolution, nearest-neighbour
    upsampling (or, with up="convt", stride-2 transposed convolutions),
    stride-2 downsampling convolutions. Predicts an image the shape of its
    input (mse loss)."""

    def __init__(self, c_img: int = 3, base: int = 64, mults=(1, 2, 4), up: str = "nearest"):
        super().__init__()
        self.convt = up == "convt"
        chans = [base * m for m in mults]
        self.stem = nn.Conv2d(c_img, base, 3, padding=1)
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        c = base
        skips = [c]
        for i, ch in enumerate(chans):
            blocks = nn.ModuleList([UNetResBlock(c, ch), UNetResBlock(ch, ch)])
            c = ch
            skips += [c, c]
            self.down.append(blocks)
            last = i == len(chans) - 1
            self.downsample.append(nn.Identity() if last else nn.Conv2d(c, c, 3, stride=2, padding=1))
            if not last:
                skips.append(c)
        self.mid1 = UNetResBlock(c, c)
        self.mid_attn = UNetAttention(c)
        self.mid2 = UNetResBlock(c, c)
        self.up = nn.ModuleList()
        self.upsample = nn.ModuleList()
        for i, ch in reversed(list(enumerate(chans))):
            blocks = nn.ModuleList()
            for _ in range(3):
                blocks.append(UNetResBlock(c + skips.pop(), ch))
                c = ch
            self.up.append(blocks)
            if i == 0:
                self.upsample.append(nn.Identity())
            elif self.convt:
                self.upsample.append(nn.ConvTranspose2d(c, c, 4, stride=2, padding=1))
            else:
                self.upsample.append(nn.Conv2d(c, c, 3, padding=1))
        self.out_norm = nn.GroupNorm(32, c)
        self.out = nn.Conv2d(c, c_img, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        hs = [h]
        for blocks, down in zip(self.down, self.downsample):
            for b in blocks:
                h = b(h)
                hs.append(h)
            if not isinstance(down, nn.Identity):
                h = down(h)
                hs.append(h)
        h = self.mid2(self.mid_attn(self.mid1(h)))
        for blocks, up in zip(self.up, self.upsample):
            for b in blocks:
                h = b(torch.cat([h, hs.pop()], dim=1))
            if not isinstance(up, nn.Identity):
                h = up(h) if self.convt else up(F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.out(F.silu(self.out_norm(h)))


class NNTransformer(nn.Module):
    """Full nn.Transformer (2+2 layers); causal tgt_mask generated in forward."""

    def __init__(self, d_model: int = 32):
        super().__init__()
        self.transformer = nn.Transformer(d_model=d_model, nhead=2, num_encoder_layers=2,
                                          num_decoder_layers=2, dim_feedforward=64,
                                          dropout=0.1, batch_first=True)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        T = tgt.size(1)
        tgt_mask = torch.triu(torch.full((T, T), float("-inf"), device=tgt.device), diagonal=1)
        return self.transformer(src, tgt, tgt_mask=tgt_mask)


class NNMHA(nn.Module):
    """Bare nn.MultiheadAttention; returns (output, head-averaged weights)."""

    def __init__(self, d_model: int = 32, nhead: int = 4):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, nhead, batch_first=True)

    def forward(self, query: torch.Tensor, key: torch.Tensor,
                value: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        out, weights = self.mha(query, key, value, need_weights=True)
        assert weights is not None
        return out, weights


# --------------------------------------------------------------------------
# torchvision models
# --------------------------------------------------------------------------

def _make_testable(model: nn.Module) -> nn.Module:
    """Re-initialize what torchvision's training-oriented init leaves trivial,
    so that comparing outputs with PyTorch actually tests something:

    * classifier heads: ViT zero-initializes its head, and EfficientNet /
      MobileNet / MNASNet use tiny N(0, 0.01) or uniform(1/sqrt(out)) heads,
      which give outputs of 1e-13 to 1e-7 -- any error relative to those is
      meaningless. Every Linear gets PyTorch's default init instead (outputs
      of order 1).
    * BatchNorm: fresh running stats (mean 0, var 1) and affine (1, 0) make
      eval-mode BatchNorm nearly the identity; random ones exercise the whole
      formula. Values stay near identity so deep nets do not blow up.
    * LayerNorm affine (1, 0) likewise."""
    g = torch.Generator().manual_seed(WEIGHT_SEED + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.reset_parameters()
            elif isinstance(m, nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                if m.running_mean is not None:
                    m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                    m.running_var.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                if m.affine:
                    m.weight.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                    m.bias.copy_(torch.randn(c, generator=g) * 0.1)
            elif isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return model


def _tv(fn_name: str, **kwargs) -> nn.Module:
    """torchvision.models.<fn_name> with random init, whatever the version
    calls it, made testable (see _make_testable)."""
    import torchvision
    fn = getattr(torchvision.models, fn_name)
    try:
        model = fn(weights=None, num_classes=10, **kwargs)  # torchvision >= 0.13
    except TypeError:
        model = fn(pretrained=False, num_classes=10, **kwargs)  # older
    return _make_testable(model)


def _shrink_classifier(model: nn.Module, linear_idx: List[int], width: int) -> nn.Module:
    """Replace the Linear layers of model.classifier (same indices, so the
    state_dict keys stay those of torchvision) with `width`-wide ones.

    Stock AlexNet / VGG classifiers are 4096 wide: 57M / 123M parameters,
    hundreds of MB per weight file, which the test suite cannot afford."""
    cls = model.classifier
    for n, i in enumerate(linear_idx):
        old = cls[i]
        d_in = old.in_features if n == 0 else width
        d_out = old.out_features if n == len(linear_idx) - 1 else width
        cls[i] = nn.Linear(d_in, d_out)  # PyTorch's default init: outputs of order 1
    return model


def _tv_vit() -> nn.Module:
    from torchvision.models.vision_transformer import VisionTransformer
    return _make_testable(VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                                            hidden_dim=64, mlp_dim=128, num_classes=10))


# --------------------------------------------------------------------------
# Construction on the meta device (shapes-only models)
# --------------------------------------------------------------------------

# Factory functions that take a `device` argument (the list torch 2.x's
# torch.device("meta") context manager redirects, as far as 1.13 has them).
_FACTORY_NAMES = ("empty", "empty_strided", "empty_quantized", "ones", "zeros", "full", "arange", "range",
                  "eye", "linspace", "logspace", "rand", "randn", "randint", "randperm",
                  "tensor", "as_tensor", "asarray", "scalar_tensor", "tril_indices", "triu_indices",
                  "bartlett_window", "blackman_window", "hamming_window", "hann_window", "kaiser_window",
                  "sparse_coo_tensor", "vander")


class _MetaFactories(torch.overrides.TorchFunctionMode):
    """torch 1.13 stand-in for `with torch.device("meta"):` (2.x): factory
    calls without an explicit device create meta tensors."""

    _FACTORIES = {getattr(torch, n) for n in _FACTORY_NAMES if hasattr(torch, n)}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in self._FACTORIES and kwargs.get("device") is None:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


def on_meta(ctor: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """A constructor that builds the module on the meta device: parameters
    and buffers have dtypes and shapes but no storage, so a 7e9-parameter
    model costs no memory. (torch.device as a context manager on 2.x.)"""
    def build_on_meta() -> nn.Module:
        ctx = torch.device("meta") if hasattr(torch.device, "__enter__") else _MetaFactories()
        with ctx:
            model = ctor()
        bad = [k for k, t in list(model.named_parameters()) + list(model.named_buffers()) if not t.is_meta]
        if bad:
            raise RuntimeError(f"on_meta: {len(bad)} tensors were not created on the meta device "
                               f"(first: {bad[0]})")
        return model
    return build_on_meta


# --------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------

def _ints(shape, high):
    return ("int64", shape, high)


# name -> (constructor, input specs, formats that work on torch 1.13).
# An input spec is a float shape (randn) or ("int64", shape, high) (randint).
_OWN = ("trace", "script", "fx")
_TV = ("trace", "script", "fx")
# GoogLeNet / Inception v3 script fine, but the scripted forward always returns
# the GoogLeNetOutputs / InceptionOutputs namedtuple (logits, None, None).
_TV_NO_SCRIPT = ("trace", "fx")
_REGISTRY: Dict[str, Tuple[Callable[[], nn.Module], tuple, Tuple[str, ...]]] = {
    "mlp": (MLP, ((8, 32),), _OWN),
    "cnn_bn": (CNNBN, ((4, 3, 16, 16),), _OWN),
    "cnn_bn_train": (CNNBN, ((4, 3, 16, 16),), _OWN),
    "resnet_mini": (ResNetMini, ((2, 3, 32, 32),), _OWN),
    # The battery's diffusion UNet at toy size (group norms, SiLU, skip
    # concatenations, nearest upsampling, pixel attention).
    "unet_mini": (lambda: UNet(base=32, mults=(1, 2)), ((2, 3, 16, 16),), ("trace", "fx")),
    # The same with stride-2 transposed convolutions for upsampling.
    "unet_convt_mini": (lambda: UNet(base=32, mults=(1, 2), up="convt"), ((2, 3, 16, 16),), ("trace", "fx")),
    "transformer_encoder": (TransformerEncoderLM, (_ints((2, 12), 100),), _OWN),
    "gpt2_mini": (GPT2Mini, (_ints((2, 16), 128),), _OWN),
    "llama_mini": (LlamaDecoder, (_ints((2, 16), 128),), _OWN),
    "moe_mini": (MoEMini, (_ints((2, 16), 128),), _OWN),
    "gnn_mini": (GraphConvNet, ((12, 8),), _OWN),
    "video_mini": (VideoNet, ((2, 3, 6, 16, 16),), _OWN),
    "audio_mini": (AudioNet, ((2, 1, 800),), _OWN),
    "rnn_mini": (RnnClassifier, (_ints((2, 7), 128),), _OWN),
    "cell_loop_mini": (CellLoopClassifier, (_ints((2, 7), 128),), _OWN),
    "nn_transformer": (NNTransformer, ((2, 10, 32), (2, 8, 32)), _OWN),
    "nn_mha": (NNMHA, ((2, 8, 32), (2, 10, 32), (2, 10, 32)), _OWN),
    "tv_resnet18": (lambda: _tv("resnet18"), ((2, 3, 64, 64),), _TV),
    "tv_vgg11_bn": (lambda: _shrink_classifier(_tv("vgg11_bn"), [0, 3, 6], 256),
                    ((2, 3, 32, 32),), _TV),
    "tv_alexnet": (lambda: _shrink_classifier(_tv("alexnet"), [1, 4, 6], 256),
                   ((2, 3, 64, 64),), _TV),
    "tv_densenet121": (lambda: _tv("densenet121"), ((2, 3, 32, 32),), _TV),
    "tv_googlenet": (lambda: _tv("googlenet", aux_logits=False, init_weights=True),
                     ((2, 3, 64, 64),), _TV_NO_SCRIPT),
    "tv_inception_v3": (lambda: _tv("inception_v3", aux_logits=False, init_weights=True),
                        ((2, 3, 80, 80),), _TV_NO_SCRIPT),
    "tv_mobilenet_v2": (lambda: _tv("mobilenet_v2"), ((2, 3, 64, 64),), _TV),
    "tv_mobilenet_v3_small": (lambda: _tv("mobilenet_v3_small"), ((2, 3, 64, 64),), _TV),
    "tv_shufflenet_v2_x0_5": (lambda: _tv("shufflenet_v2_x0_5"), ((2, 3, 64, 64),), _TV),
    "tv_squeezenet1_1": (lambda: _tv("squeezenet1_1"), ((2, 3, 64, 64),), _TV),
    "tv_mnasnet0_5": (lambda: _tv("mnasnet0_5"), ((2, 3, 64, 64),), _TV),
    "tv_efficientnet_b0": (lambda: _tv("efficientnet_b0"), ((2, 3, 64, 64),), _TV),
    "tv_regnet_y_400mf": (lambda: _tv("regnet_y_400mf"), ((2, 3, 64, 64),), _TV),
    "tv_convnext_tiny": (lambda: _tv("convnext_tiny"), ((2, 3, 32, 32),), _TV),
    "tv_vit": (_tv_vit, ((2, 3, 32, 32),), _TV),
    "tv_swin_t": (lambda: _tv("swin_t"), ((2, 3, 64, 64),), _TV),
    # Swin-V2: cosine attention (F.normalize of q and k, no k bias); at 64x64
    # stages 3 and 4 (4x4 and 2x2 maps) are padded into 8x8 windows, so the
    # padded keys are zero vectors under F.normalize (issue 55's case).
    "tv_swin_v2_t": (lambda: _tv("swin_v2_t"), ((2, 3, 64, 64),), _TV),
    # tv_vit exported as inference users export: in eval mode under
    # torch.no_grad(), where nn.MultiheadAttention records its fused fast-path
    # op (_native_multi_head_attention); see INFERENCE_EXPORT.
    "tv_vit_nograd": (_tv_vit, ((2, 3, 32, 32),), ("trace", "fx")),
    # BERT-style encoder with token types and a padding mask (0/1 per token).
    "bert_mini": (lambda: BertClassifier(vocab=128, n_ctx=32, d_model=32, n_head=4, d_ff=64, n_layer=2,
                                         n_classes=3, type_vocab=2),
                  (_ints((2, 16), 128), _ints((2, 16), 2), _ints((2, 16), 2)), _OWN),
    # nn.EmbeddingBag (mean, max, weighted sum with offsets).
    "bag_mini": (BagClassifier, (_ints((2, 8), 64),), _OWN),
    # Segmentation: per-pixel logits [2, 5, 32, 32] for per-pixel cross-entropy.
    "seg_mini": (SegNet, ((2, 3, 32, 32),), _OWN),
    # GPT-2 small's size (124M parameters, 12 layers, width 768, vocabulary
    # 50257, context 1024) for compile-time benchmarks; not in NAMES, so the
    # test suites never export its 500 MB of weights.
    "gpt2_small": (lambda: GPT2Mini(vocab=50257, n_ctx=1024, d_model=768, n_head=12, n_layer=12),
                   (_ints((1, 1024), 50257),), _OWN),
    # GPT-2-style classifier with GPT-2's 50257-token vocabulary (25 MB of
    # embedding, the rest 0.4M parameters), for the data-parallel benchmark.
    "gpt2_cls50k": (GPT2Classifier, (_ints((16, 64), 50257),), _OWN),
    # ResNet-50 at ImageNet size, for the GPU benchmark (benchmarks/gpu_zoo.py).
    "tv_resnet50": (lambda: _tv("resnet50"), ((32, 3, 224, 224),), _TV),
    # The realistic-size battery (benchmarks/battery.py), at the sizes people
    # train; its batch sizes are the battery's defaults.
    "bat_resnet50": (lambda: _tv("resnet50"), ((8, 3, 224, 224),), ("trace",)),
    "bat_vit_b16": (lambda: _tv("vit_b_16"), ((4, 3, 224, 224),), ("trace",)),
    "bat_gpt2_40m": (lambda: GPT2Mini(vocab=32000, n_ctx=256, d_model=512, n_head=8, n_layer=8),
                     (_ints((4, 256), 32000),), ("trace",)),
    "bat_llama": (lambda: LlamaDecoder(vocab=32000, d_model=512, n_head=8, n_kv_head=4, d_ff=1376, n_layer=8),
                  (_ints((4, 256), 32000),), ("trace",)),
    "bat_lstm": (LstmClassifier, (_ints((32, 64), 10000),), ("trace",)),
    # Recurrent models written as loops over nn.LSTMCell / nn.GRUCell: 64
    # steps of hidden 512, and 256 steps of 512 features (hidden 128).
    "bat_cells": (lambda: CellLoopClassifier(vocab=10000, d=256, hidden=512, classes=20),
                  (_ints((32, 64), 10000),), ("trace",)),
    "bat_cells_long": (lambda: CellLoopClassifier(vocab=10000, d=512, hidden=128, classes=20),
                       (_ints((32, 256), 10000),), ("trace",)),
    "bat_bert_base6": (BertClassifier, (_ints((8, 128), 30522),), ("trace",)),
    # A 3-D convolutional video classifier: 16 frames of 112x112, width 64.
    "bat_video": (lambda: VideoNet(classes=400, width=64), ((4, 3, 16, 112, 112),), ("trace",)),
    "bat_unet": (UNet, ((8, 3, 64, 64),), ("trace",)),
    # Bag-of-embeddings classifier at recommender size: three 100000 x 64
    # EmbeddingBags, 512 rows of 32 tokens.
    "bat_bag": (lambda: BagClassifier(vocab=100000, d=64, classes=2),
                (_ints((512, 32), 100000),), ("trace",)),
    # LLaMA-7B's shape (vocabulary 32000, width 4096, 32 heads, 32 K/V
    # heads, SwiGLU 11008, 32 layers: 6.7e9 parameters), one sequence of 2048
    # tokens, built on the meta device: no weights exist, so it exports only
    # as a shapes-only FX dump (export.py --shapes-only; see SHAPES_ONLY),
    # which Kiln can compile (memory plans, schedules) but not run.
    "llama_7b_shape": (on_meta(lambda: LlamaDecoder(vocab=32000, d_model=4096, n_head=32, n_kv_head=32,
                                                    d_ff=11008, n_layer=32)),
                       (_ints((1, 2048), 32000),), ("fx",)),
    # The time-to-quality benchmark's tasks (benchmarks/time_to_quality.py):
    # scikit-learn's handwritten digits upsampled to 32x32, Fashion-MNIST, and a
    # character-level GPT over the bytes of Python's documentation.
    "ttq_digits_cnn": (DigitsCNN, ((32, 1, 32, 32),), ("trace",)),
    "ttq_fashion_cnn": (DigitsCNN, ((64, 1, 28, 28),), ("trace",)),
    "ttq_char_gpt": (lambda: gpt2_init(GPT2Mini(vocab=256, n_ctx=128, d_model=128, n_head=4, n_layer=4,
                                                 dropout=0.0)),
                     (_ints((16, 128), 256),), ("trace",)),
}

# Built on request only (export.py NAME), never by the test suites.
BENCH_ONLY = {"ttq_digits_cnn", "ttq_fashion_cnn", "ttq_char_gpt", "gpt2_small", "gpt2_cls50k", "tv_resnet50", "bat_resnet50", "bat_vit_b16", "bat_gpt2_40m",
              "bat_llama", "bat_lstm", "bat_cells", "bat_cells_long", "bat_bert_base6", "bat_unet",
              "bat_video", "bat_bag", "llama_7b_shape"}
NAMES: List[str] = [n for n in _REGISTRY if n not in BENCH_ONLY]

# Models built on the meta device (on_meta): their parameters have no values,
# so they export only shapes-only (export.py --shapes-only), their example
# inputs are meta tensors too, and they are dumped in train mode (the
# compiler builds the training step from the forward).
SHAPES_ONLY = {"llama_7b_shape"}

# Models exported as a user exports for inference: eval mode, under
# torch.no_grad() (models/export.py, models/fx_dump.py), so that their
# attention records PyTorch's fused inference fast-path ops. Without dropout
# or BatchNorm, their eval and train forwards are the same function, so they
# train like the others.
INFERENCE_EXPORT = {"tv_vit_nograd"}

# Models whose forward is meant to run in train mode.
TRAIN_NAMES = {n for n in NAMES if n.endswith("_train")} | SHAPES_ONLY


def is_train(name: str) -> bool:
    """True if the model's reference forward runs in train mode."""
    return name in TRAIN_NAMES


def is_shapes_only(name: str) -> bool:
    """True if `name` is built on the meta device (no weight values)."""
    return name in SHAPES_ONLY


def formats(name: str) -> Tuple[str, ...]:
    """Export formats that work for `name` on torch 1.13."""
    return _REGISTRY[name][2]


def _make_inputs(specs) -> tuple:
    g = torch.Generator().manual_seed(INPUT_SEED)
    out = []
    for spec in specs:
        if spec and spec[0] == "int64":
            _, shape, high = spec
            out.append(torch.randint(0, high, shape, generator=g, dtype=torch.int64))
        else:
            out.append(torch.randn(*spec, generator=g))
    return tuple(out)


def zero_dropout(model: nn.Module) -> int:
    """Set every dropout and stochastic-depth probability in `model` to 0, so
    that a train-mode forward is deterministic (the training-parity tests
    compare train-mode steps with PyTorch's). Returns how many were changed.

    Probabilities live in three kinds of places: nn.Dropout* modules (`p`),
    torchvision's StochasticDepth (`p`), and plain float attributes read by a
    functional call in forward -- nn.MultiheadAttention.dropout, Swin's
    attention_dropout / dropout, DenseNet's drop_rate. The last kind is found
    by name: any float attribute whose name contains "drop"."""
    changed = 0
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) or type(m).__name__ == "StochasticDepth":
            if m.p != 0.0:
                m.p = 0.0
                changed += 1
        for k, v in list(vars(m).items()):
            if isinstance(v, float) and not isinstance(v, bool) and "drop" in k.lower() and v != 0.0:
                setattr(m, k, 0.0)
                changed += 1
    return changed


def build(name: str, train=None, no_dropout: bool = False, batch: Optional[int] = None) -> Tuple[nn.Module, tuple]:
    """Build model `name` with deterministic weights and example inputs.

    The module comes back in train mode for the *_train models (or if
    train=True), eval mode otherwise. no_dropout=True zeroes every dropout
    probability (see zero_dropout); weights and inputs are the same.
    batch: the example inputs' first dimension instead of the zoo's.
    SHAPES_ONLY models come back on the meta device, inputs included."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(NAMES)}")
    ctor, specs, _ = _REGISTRY[name]
    torch.manual_seed(WEIGHT_SEED)
    model = ctor()
    if no_dropout:
        zero_dropout(model)
    if train is None:
        train = is_train(name)
    model.train(bool(train))
    if batch is not None:
        specs = [(s[0], (batch,) + tuple(s[1][1:]), s[2]) if s and s[0] == "int64" else (batch,) + tuple(s[1:])
                 for s in specs]
    inputs = _make_inputs(specs)
    if name in SHAPES_ONLY:
        inputs = tuple(x.to("meta") for x in inputs)
    return model, inputs


if __name__ == "__main__":
    import time
    import sys
    names = sys.argv[1:] or NAMES
    for n in names:
        t0 = time.time()
        m, ins = build(n)
        t1 = time.time()
        if n in SHAPES_ONLY:  # meta weights: no forward to run (export.py --shapes-only traces it)
            print(f"{n:24s} build {t1 - t0:6.2f}s params {sum(p.numel() for p in m.parameters()) / 1e6:6.2f}M "
                  f"on the meta device, in {[tuple(i.shape) for i in ins]}")
            continue
        out = m(*ins)
        t2 = time.time()
        outs = out if isinstance(out, tuple) else (out,)
        nparams = sum(p.numel() for p in m.parameters())
        print(f"{n:24s} build {t1 - t0:6.2f}s fwd {t2 - t1:6.3f}s params {nparams / 1e6:6.2f}M "
              f"in {[tuple(i.shape) for i in ins]} out {[tuple(o.shape) for o in outs]}")
