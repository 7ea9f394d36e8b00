"""The same ResNet in PyTorch, for the training-speed benchmark only.

PyTorch is never a dependency of the package: install it with the benchmark
extra (``pip install -e .[bench]``). Layer for layer as
``estimator.cifar10_model`` (v1 units, option-A shortcuts, He init, batch norm
with the same momentum and epsilon, L2 weight decay through SGD's
``weight_decay``, momentum 0.9), channels_last memory format, which is
PyTorch's fast layout on CPUs.
"""

import torch
from torch import nn


class _Unit(nn.Module):
    def __init__(self, in_filters, out_filters, stride, momentum, eps):
        super().__init__()
        self.conv1 = nn.Conv2d(in_filters, out_filters, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_filters, eps=eps, momentum=momentum)
        self.conv2 = nn.Conv2d(out_filters, out_filters, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_filters, eps=eps, momentum=momentum)
        self.pad = (out_filters - in_filters) // 2
        self.stride = stride

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        shortcut = x
        if self.stride > 1 or self.pad:
            shortcut = nn.functional.avg_pool2d(x, self.stride)
            shortcut = nn.functional.pad(shortcut, (0, 0, 0, 0, self.pad, self.pad))
        return torch.relu(y + shortcut)


class ResNetCifar10(nn.Module):
    def __init__(self, num_layers=20, batch_norm_decay=0.997, eps=1e-5):
        super().__init__()
        n = (num_layers - 2) // 6
        momentum = 1.0 - batch_norm_decay  # PyTorch's momentum is the weight of the new value
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16, eps=eps, momentum=momentum), nn.ReLU()
        )
        units, filters = [], [16, 16, 32, 64]
        for stage in range(3):
            for unit in range(n):
                in_f = filters[stage] if unit == 0 else filters[stage + 1]
                stride = 2 if stage > 0 and unit == 0 else 1
                units.append(_Unit(in_f, filters[stage + 1], stride, momentum, eps))
        self.units = nn.Sequential(*units)
        self.fc = nn.Linear(64, 10)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
        nn.init.normal_(self.fc.weight, std=0.01)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x):
        x = self.units(self.stem(x / 128.0 - 1.0))
        return self.fc(x.mean(dim=(2, 3)))


def rate(dataset, num_layers, batch_size, steps, warmup, bf16=False, batch_norm_decay=0.997):
    """Steady-state training images/s on batches from a ``tf.data`` pipeline of NHWC float images."""
    import time

    torch.manual_seed(0)
    torch.set_num_threads(torch.get_num_threads())
    model = ResNetCifar10(num_layers, batch_norm_decay).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=2e-4)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    start = None
    for i, (images, labels) in enumerate(dataset.take(warmup + steps)):
        if i == warmup:
            start = time.perf_counter()
        # NHWC memory viewed as NCHW: exactly PyTorch's channels_last layout, no copy.
        x = torch.from_numpy(images.numpy()).permute(0, 3, 1, 2)
        y = torch.from_numpy(labels.numpy()).long()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return steps * batch_size / (time.perf_counter() - start)
