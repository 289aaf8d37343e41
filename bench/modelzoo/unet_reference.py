#!/usr/bin/env python3
"""The Model Zoo's 2D U-Net configurations built in PyTorch, module for
module as its UNet, Encoder, UNetBlock, Decoder and ConvNormActBlock build
them, to print what the appliance's U-Net template must match: each
tensor's name and shape in state-dict order, the tensor count and the
parameter count. Written for the appliance's tests (tests/model/
test_modelzoo.c holds its output); never a dependency of the build or CI.

    /usr/bin/python3 bench/modelzoo/unet_reference.py
"""
import torch
from torch import nn

CONFIGS = {
    # name: (image [H, W, C], classes, encoder, decoder, norm, groups, bias, loss)
    "cityscapes": ([256, 512, 3], 20, [32, 64, 128, 256, 512], [256, 128, 64, 32],
                   "group", 16, True, "ssce"),
    "severstal": ([256, 256, 1], 2, [32, 64, 128, 256], [128, 64, 32],
                  "batchnorm2d", 0, False, "bce"),
    "inria_5120_rgb": ([5120, 5120, 3], 2, [32, 64, 128, 256, 512, 1024],
                       [512, 256, 128, 64, 32], "group", 16, True, "bce"),
    "inria_7168": ([7168, 7168, 1], 2, [32, 64, 128, 256], [128, 64, 32],
                   "group", 16, False, "bce"),
}


class ConvNormAct(nn.Sequential):
    def __init__(self, cin, cout, k, stride, bias, norm, groups, act):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, ((stride - 1) + (k - 1)) // 2, bias=bias)
        if norm == "group":
            self.norm_layer = nn.GroupNorm(groups, cout)
        elif norm == "batchnorm2d":
            self.norm_layer = nn.BatchNorm2d(cout)
        if act:
            self.act = nn.ReLU()


class Block(nn.Module):
    def __init__(self, cin, cout, bias, norm, groups):
        super().__init__()
        self.layers = nn.Sequential(ConvNormAct(cin, cout, 3, 1, bias, norm, groups, True),
                                    ConvNormAct(cout, cout, 3, 1, bias, norm, groups, True))


class Encoder(nn.Module):
    def __init__(self, cin, enc, bias, norm, groups):
        super().__init__()
        self.unet_blocks = nn.ModuleList(
            Block(enc[i - 1] if i else cin, enc[i], bias, norm, groups)
            for i in range(len(enc) - 1))
        self.pooling_layers = nn.ModuleList(nn.MaxPool2d(2, 2) for _ in range(len(enc) - 1))


class Decoder(nn.Module):
    def __init__(self, enc, dec, bias, norm, groups):
        super().__init__()
        # (registered in the Model Zoo's order: the state dict lists the
        # blocks before the transposed convolutions)
        self.unet_blocks = nn.ModuleList(
            Block(dec[i] + enc[-i - 2], dec[i], bias, norm, groups) for i in range(len(dec)))
        self.transpose_layers = nn.ModuleList(
            nn.ConvTranspose2d(dec[i - 1] if i else enc[-1], dec[i], 2, 2, bias=bias)
            for i in range(len(dec)))


class UNet(nn.Module):
    def __init__(self, image, classes, enc, dec, norm, groups, bias, loss):
        super().__init__()
        out = 1 if loss == "bce" else classes
        self.encoder = Encoder(image[2], enc, bias, norm, groups)
        self.bottleneck = Block(enc[-2], enc[-1], bias, norm, groups)
        self.decoder = Decoder(enc, dec, bias, norm, groups)
        self.final_conv = ConvNormAct(dec[-1], out, 1, 1, True, None, 0, False)


for name, cfg in CONFIGS.items():
    net = UNet(*cfg)
    sd = net.state_dict()
    tensors = [(k, tuple(v.shape)) for k, v in sd.items() if not k.endswith("num_batches_tracked")]
    params = sum(p.numel() for p in net.parameters())
    print(f"{name}: {len(tensors)} tensors, {params} parameters")
    for k, s in tensors:
        print(f"  {k} {list(s)}")
