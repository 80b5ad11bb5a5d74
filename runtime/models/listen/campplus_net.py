"""The CAM++ speaker-embedding network, written in torch to load its published weights.

CAM++ (Wang et al., "CAM++: A Fast and Efficient Network for Speaker
Verification Using Context-Aware Masking", Interspeech 2023) turns 80-dim
log-mel fbank frames into one 192-dim vector per utterance; two utterances of
one person point the same way.  The weights ship as a plain state dict, so the
network that reads them is written here from the paper's description and the
dict's own key names and shapes:

- a front 2-D convolution module (FCM): a 3x3 conv, two stages of two residual
  blocks and a last 3x3 conv, each stage halving the frequency axis
  (80 -> 10 bins x 32 channels = 320 per frame);
- a TDNN layer (kernel 5, time stride 2) to 128 channels;
- three densely connected TDNN blocks (12, 24 and 16 layers, growth 32,
  dilation 1, 2, 2), each layer gated by context-aware masking: a frame's
  output is scaled by a sigmoid of the utterance mean plus the mean of its
  100-frame segment; a transit layer after each block halves the channels;
- statistics pooling (mean and standard deviation over time) and a dense
  layer to 192.

This module is only used by ``make setup`` (``fetch_campplus``), which exports
the network to ONNX; the listen stage runs the ONNX graph without torch.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn
from torch.nn import functional as F

EMBEDDING_DIM = 192
MEL_BINS = 80
SEGMENT_FRAMES = 100          # the context-aware mask's local segment (after the time stride)


def _bn_relu(channels: int) -> nn.Sequential:
    """Batch norm then ReLU, named as in the state dict (``*.batchnorm.*``)."""
    return nn.Sequential(OrderedDict(batchnorm=nn.BatchNorm1d(channels), relu=nn.ReLU()))


class ResBlock2d(nn.Module):
    """Two 3x3 convs with a shortcut; ``stride`` halves frequency only, never time."""

    def __init__(self, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = nn.Sequential()
        if stride != 1:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels, channels, 1, stride=(stride, 1), bias=False),
                nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class FrontConvModule(nn.Module):
    """The FCM head: (B, 80, T) fbank -> (B, 320, T) frame features."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.layer1 = nn.Sequential(ResBlock2d(channels, 2), ResBlock2d(channels, 1))
        self.layer2 = nn.Sequential(ResBlock2d(channels, 2), ResBlock2d(channels, 1))
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))
        out = self.layer2(self.layer1(out))
        out = F.relu(self.bn2(self.conv2(out)))
        b, c, f, t = out.shape
        return out.reshape(b, c * f, t)


class TdnnLayer(nn.Module):
    """A 1-D conv over time (no bias) then batch norm and ReLU."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)
        self.nonlinear = _bn_relu(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x))


class ContextMask(nn.Module):
    """Context-aware masking: a local conv scaled by a gate computed from context.

    The context of a frame is the whole utterance's mean plus the mean of the
    ``SEGMENT_FRAMES`` segment it falls in, so the gate can follow where in the
    utterance the frame is while seeing the speaker's overall voice."""

    def __init__(self, cin: int, cout: int, dilation: int, reduction: int = 2) -> None:
        super().__init__()
        self.linear_local = nn.Conv1d(cin, cout, 3, padding=dilation, dilation=dilation, bias=False)
        self.linear1 = nn.Conv1d(cin, cin // reduction, 1)
        self.linear2 = nn.Conv1d(cin // reduction, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        local = self.linear_local(x)
        context = x.mean(-1, keepdim=True) + segment_means(x, SEGMENT_FRAMES)
        gate = torch.sigmoid(self.linear2(F.relu(self.linear1(context))))
        return local * gate


def segment_means(x: torch.Tensor, seg: int) -> torch.Tensor:
    """Each frame replaced by the mean of its ``seg``-frame segment (the last may be short)."""
    t = x.shape[-1]
    pooled = F.avg_pool1d(x, kernel_size=seg, stride=seg, ceil_mode=True)
    expanded = pooled.unsqueeze(-1).expand(*pooled.shape, seg)
    return expanded.reshape(*pooled.shape[:-1], -1)[..., :t]


class DenseTdnnLayer(nn.Module):
    """One layer of a dense block: BN-ReLU, 1x1 bottleneck, BN-ReLU, context mask."""

    def __init__(self, cin: int, growth: int, bottleneck: int, dilation: int) -> None:
        super().__init__()
        self.nonlinear1 = _bn_relu(cin)
        self.linear1 = nn.Conv1d(cin, bottleneck, 1, bias=False)
        self.nonlinear2 = _bn_relu(bottleneck)
        self.cam_layer = ContextMask(bottleneck, growth, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class DenseTdnnBlock(nn.Module):
    """``layers`` dense layers; each sees every earlier output, concatenated on channels."""

    def __init__(self, layers: int, cin: int, growth: int, bottleneck: int, dilation: int) -> None:
        super().__init__()
        for i in range(layers):
            self.add_module(f"tdnnd{i + 1}",
                            DenseTdnnLayer(cin + i * growth, growth, bottleneck, dilation))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.children():
            x = torch.cat([x, layer(x)], dim=1)
        return x


class TransitLayer(nn.Module):
    """BN-ReLU then a 1x1 conv that shrinks the channels between blocks."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.nonlinear = _bn_relu(cin)
        self.linear = nn.Conv1d(cin, cout, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


class EmbeddingHead(nn.Module):
    """Statistics pooling (mean, unbiased std) then a 1x1 conv and a non-affine batch norm."""

    def __init__(self, cin: int, dim: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(cin * 2, dim, 1, bias=False)
        self.nonlinear = nn.Sequential(OrderedDict(batchnorm=nn.BatchNorm1d(dim, affine=False)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stats = torch.cat([x.mean(-1), x.std(-1, unbiased=True)], dim=-1)
        return self.nonlinear(self.linear(stats.unsqueeze(-1))).squeeze(-1)


class XVector(nn.Module):
    """TDNN, three dense blocks with transits, BN-ReLU, pooling and the dense layer."""

    def __init__(self, cin: int = 320, channels: int = 128, growth: int = 32) -> None:
        super().__init__()
        self.tdnn = TdnnLayer(cin, channels, 5, stride=2)
        c = channels
        for i, (layers, dilation) in enumerate(((12, 1), (24, 2), (16, 2)), start=1):
            self.add_module(f"block{i}", DenseTdnnBlock(layers, c, growth, 4 * growth, dilation))
            c += layers * growth
            self.add_module(f"transit{i}", TransitLayer(c, c // 2))
            c //= 2
        self.out_nonlinear = _bn_relu(c)
        self.dense = EmbeddingHead(c, EMBEDDING_DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.tdnn(x)
        for i in (1, 2, 3):
            x = getattr(self, f"transit{i}")(getattr(self, f"block{i}")(x))
        return self.dense(self.out_nonlinear(x))


class CamPlusPlus(nn.Module):
    """(B, T, 80) mean-normalised log-mel fbank -> (B, 192) speaker embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.head = FrontConvModule()
        self.xvector = XVector()

    def forward(self, fbank: torch.Tensor) -> torch.Tensor:
        return self.xvector(self.head(fbank.transpose(1, 2)))


def load_campplus(state: "dict[str, torch.Tensor]") -> CamPlusPlus:
    """A CAM++ in eval mode holding ``state``; every key must match (strict), or it raises."""
    net = CamPlusPlus()
    net.load_state_dict(state, strict=True)
    return net.eval()
