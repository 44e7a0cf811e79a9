#!/usr/bin/python3
"""Writes a model's profile, what bench/ddp_sim reads: its parameters in registration order (DDP's
order) with their sizes, and each layer's forward and backward FLOPs per sample, counted from the
shapes of one forward pass of the real module definition. Format: bench/profiles/README.md.

Usage: python3 bench/profile_model.py --model resnet50 [--input 3x224x224] [--out FILE]
  --model: the course's mlp, cnn, cnn_bn (tests/trainer_reference.py, the Python twins of
           05_ddp/models.h; input 1x28x28) or a torchvision classification model (resnet18 ...
           resnet152, resnext50_32x4d, resnext101_32x8d, wide_resnet50_2, ...; input 3x224x224);
           --list prints them all. Built without pretrained weights: only shapes matter.
  --input: one sample's shape, CxHxW. Without --out the profile goes to stdout.
Exit codes: 0 written; 2 an unknown model, a malformed --input or torchvision missing; 1 a model
this script cannot profile (a parameter no counted layer used).

Note [How a profile counts FLOPs]
One forward of a zero input of 2 samples, in training mode (what DDP runs: BatchNorm on batch
statistics, which wants more than one value per channel, hence 2 samples; auxiliary heads run),
under torch.no_grad. A forward hook on every leaf module records it, in execution order (a module
called twice is recorded twice); a function called outside any leaf module (the course's
torch.relu and max_pool2d, ResNet's `out += identity`) is caught by a TorchFunctionMode and
recorded as a layer named after the module that called it ("layer1.0.add"). Counts are of the
whole batch, divided by 2. One multiply-add is 2 FLOPs. Per output element unless said:
  Conv       2 * Cin/groups * k_h * k_w * Cout * H_out * W_out in all, + 1 per output for a bias
  Linear     2 * in_features per output, + 1 for a bias; matmul: 2 * K per output
  multi-head attention (F.multi_head_attention_forward): its four projections and two matmuls
  BatchNorm, LayerNorm, GroupNorm, InstanceNorm: 4 (subtract mean, divide by std, scale, shift;
             the statistics themselves are not counted)
  activations (ReLU, GELU, SiLU, Sigmoid, Hardswish, softmax, ...), Dropout, add/sub/mul/div: 1
  MaxPool/AvgPool: k_h * k_w; adaptive pools and mean: 1 per INPUT element
  views, flatten, cat, Identity: 0. A leaf module of another type counts what it calls by the
  rules above. A function outside leaf modules is listed only when it counts or takes a parameter.
Backward: 2x forward for a layer with parameters (the input gradient and the weight gradient,
each as costly as the forward), 1x for one without (the input gradient only), except the first
layer in execution order, which computes no input gradient (1x with parameters, 0 without).
These are estimates for a simulator's compute shares, not a substitute for timing a layer.
"""
import argparse
import json
import math
import os
import re
import sys

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

HERE = os.path.dirname(os.path.abspath(__file__))
COURSE_MODELS = {"mlp": "Mlp", "cnn": "Cnn", "cnn_bn": "CnnBn"}  # name -> class in tests/trainer_reference.py
BATCH = 2  # See Note [How a profile counts FLOPs]

ACTIVATIONS = {"relu", "relu6", "leaky_relu", "prelu", "elu", "selu", "celu", "gelu", "silu", "mish", "sigmoid",
               "tanh", "hardtanh", "hardswish", "hardsigmoid", "softmax", "log_softmax", "dropout", "dropout2d",
               "add", "sub", "mul", "div", "rsub", "neg", "clamp", "hardshrink", "softplus"}
NORMS = {"batch_norm", "layer_norm", "group_norm", "instance_norm"}


def first_tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)):  # namedtuples too (inception's outputs)
        for y in x:
            t = first_tensor(y)
            if t is not None:
                return t
    if isinstance(x, dict):
        return first_tensor(list(x.values()))
    return None


def op_name(func):
    """'relu' for torch.relu, F.relu and Tensor.relu_; 'add' for Tensor.__iadd__ and add_."""
    name = getattr(func, "__name__", str(func))
    name = name.strip("_")
    if name.startswith(("i", "r")) and name[1:] in ACTIVATIONS and name not in ACTIVATIONS:
        name = name[1:]  # iadd, radd, imul, ...
    return name.rstrip("_")


def kernel_elements(k, dims):
    return math.prod(k) if isinstance(k, (tuple, list)) else k ** dims


def function_flops(name, args, kwargs, out):
    """FLOPs of one call of a torch function, by the rules of Note [How a profile counts FLOPs]."""
    y = first_tensor(out)
    if y is None:
        return 0
    arg = lambda i, key: args[i] if len(args) > i else kwargs.get(key)  # noqa: E731
    if name in ("conv1d", "conv2d", "conv3d"):
        w, b = arg(1, "weight"), arg(2, "bias")
        return 2 * w[0].numel() * y.numel() + (y.numel() if b is not None else 0)
    if name in ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
        x, w, b = args[0], arg(1, "weight"), arg(2, "bias")
        return 2 * w[0].numel() * x.numel() + (y.numel() if b is not None else 0)
    if name == "linear":
        w, b = arg(1, "weight"), arg(2, "bias")
        return 2 * w.shape[-1] * y.numel() + (y.numel() if b is not None else 0)
    if name in ("matmul", "mm", "bmm"):
        return 2 * args[0].shape[-1] * y.numel()
    if name == "multi_head_attention_forward":
        q, k = args[0], args[1]  # (L, N, E) and (S, N, E)
        (L, N, E), S = q.shape, k.shape[0]
        heads = arg(4, "num_heads")
        return 2 * E * E * N * (2 * L + 2 * S) + 2 * 2 * N * L * S * E + N * heads * L * S
    if name in NORMS:
        return 4 * y.numel()
    if name in ACTIVATIONS:
        return y.numel()
    m = re.fullmatch(r"(max|avg)_pool([123])d", name)
    if m:
        return kernel_elements(arg(1, "kernel_size"), int(m.group(2))) * y.numel()
    if re.fullmatch(r"adaptive_(max|avg)_pool[123]d", name) or name == "mean":
        return args[0].numel()
    return 0


def module_flops(module, x, y, inside):
    """FLOPs of one call of a leaf module; `inside`: what the functions it called count."""
    if isinstance(module, nn.modules.conv._ConvNd) or isinstance(module, nn.Linear):
        return inside  # one conv/linear call, counted by function_flops with the rule above
    if isinstance(module, (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)):
        return 4 * y.numel()
    if isinstance(module, (nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AvgPoolNd)):
        return kernel_elements(module.kernel_size, y.dim() - 2) * y.numel()
    if isinstance(module, (nn.modules.pooling._AdaptiveAvgPoolNd, nn.modules.pooling._AdaptiveMaxPoolNd)):
        return x.numel()
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return y.numel()  # the mask's multiply in training, whether or not this run drew one
    if type(module).__module__ == "torch.nn.modules.activation" and not isinstance(module, nn.MultiheadAttention):
        return y.numel()
    return inside


class Recorder(TorchFunctionMode):
    """Records leaf-module calls (via hooks) and torch functions called outside them, in order."""

    def __init__(self, model):
        super().__init__()
        self.layers = []      # dicts: name, type, flops (whole batch), weighted
        self.used_by = {}     # id(parameter) -> the first layer that used it
        self.stack = []       # names of the modules being called, outermost first
        self.inside = None    # FLOPs counted inside the leaf module being called, or None
        self.busy = False     # True while a hook below runs: what it calls is not the model's
        self.hooks = []
        for name, m in model.named_modules():
            leaf = not any(True for _ in m.children())
            self.hooks.append(m.register_forward_pre_hook(self.pre(name, leaf)))
            self.hooks.append(m.register_forward_hook(self.post(name, leaf)))

    def pre(self, name, leaf):
        def hook(module, inputs):
            self.stack.append(name)
            if leaf:
                self.inside = 0
        return hook

    def post(self, name, leaf):
        def hook(module, inputs, output):
            self.stack.pop()
            if not leaf:
                return
            self.busy = True
            flops = module_flops(module, first_tensor(inputs), first_tensor(output), self.inside)
            self.inside = None
            params = [p for p in module.parameters() if p.requires_grad]
            self.add(name, type(module).__name__, flops, params)
            self.busy = False
        return hook

    def add(self, name, type_, flops, params):
        self.layers.append({"name": name, "type": type_, "flops": flops, "weighted": bool(params)})
        for p in params:
            self.used_by.setdefault(id(p), name)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = op_name(func)
        if self.busy or name == "get":  # our own hooks; attribute reads (p.shape, p.requires_grad)
            return out
        flops = function_flops(name, args, kwargs, out)
        if self.inside is not None:  # within a leaf module: its own rule decides
            self.inside += flops
            return out
        params = [a for a in list(args) + list(kwargs.values()) if isinstance(a, nn.Parameter) and a.requires_grad]
        if flops or params:
            caller = self.stack[-1] if self.stack else ""
            self.add(f"{caller}.{name}" if caller else name, name, flops, params)
        return out


def build(name):
    """(model, source, default input) for a model name; exits 2 on an unknown name."""
    if name in COURSE_MODELS:
        sys.path.insert(0, os.path.join(HERE, "..", "tests"))
        import trainer_reference  # the Python twin of 05_ddp/models.h, proven bit-identical by the parity tests
        cls = COURSE_MODELS[name]
        return getattr(trainer_reference, cls)(), f"tests/trainer_reference.py {cls}()", [1, 28, 28]
    try:
        import torchvision
        import torchvision.models as tvm
    except ImportError:
        print(f"profile_model.py: unknown model '{name}': torchvision is not installed (Debian's python3-torchvision; "
              f"scripts/setup.sh installs it), so only the course's {', '.join(COURSE_MODELS)}", file=sys.stderr)
        sys.exit(2)
    known = tvm.list_models(module=tvm)
    if name not in known:
        print(f"profile_model.py: unknown model '{name}': the course's {', '.join(COURSE_MODELS)}, or one of the "
              f"{len(known)} torchvision classification models, e.g. resnet18, resnet50, resnext50_32x4d, "
              f"wide_resnet50_2, vgg16, mobilenet_v2 (--list prints them all)", file=sys.stderr)
        sys.exit(2)
    version = re.match(r"[0-9.]*[0-9]", torchvision.__version__).group(0)  # Debian's says 0.14.1a0
    return tvm.get_model(name, weights=None), f"torchvision {version} torchvision.models.{name}()", [3, 224, 224]


def profile(name, shape):
    model, source, default = build(name)
    shape = shape or default
    model.train()
    torch.manual_seed(0)  # nothing depends on it (zero input, FLOPs from shapes): for dropout's sake
    rec = Recorder(model)
    with torch.no_grad(), rec:
        model(torch.zeros([BATCH] + shape))
    for h in rec.hooks:
        h.remove()
    layers = []
    for i, l in enumerate(rec.layers):
        assert l["flops"] % BATCH == 0, l
        fwd = l["flops"] // BATCH
        bwd = (2 * fwd if l["weighted"] else fwd) - (fwd if i == 0 else 0)  # Note [How a profile counts FLOPs]
        layers.append({"name": l["name"], "type": l["type"], "forward_flops": fwd, "backward_flops": bwd})
    parameters = []
    for pname, p in model.named_parameters():
        if id(p) not in rec.used_by:
            print(f"profile_model.py: {name}: parameter {pname} was used by no layer this script counts in one "
                  f"forward (unused, or used by a function it does not know): write its profile by hand "
                  f"(bench/profiles/README.md)", file=sys.stderr)
            sys.exit(1)
        parameters.append({"name": pname, "numel": p.numel(), "bytes": p.numel() * p.element_size(),
                           "layer": rec.used_by[id(p)]})
    return {"model": name, "source": source, "input": shape, "flops_per": "sample",
            "parameters": parameters, "layers": layers}


def dump(prof):
    """JSON with one parameter and one layer per line, so that a diff shows what changed."""
    head = ",\n".join(f"  {json.dumps(k)}: {json.dumps(prof[k])}" for k in ("model", "source", "input", "flops_per"))
    lists = [f'  "{k}": [\n' + ",\n".join("    " + json.dumps(e) for e in prof[k]) + "\n  ]"
             for k in ("parameters", "layers")]
    return "{\n" + head + ",\n" + ",\n".join(lists) + "\n}\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="mlp, cnn, cnn_bn or a torchvision model name")
    ap.add_argument("--input", help="one sample's shape, e.g. 3x224x224 [default: 1x28x28 for the course's "
                                    "models, 3x224x224 for torchvision's]")
    ap.add_argument("--out", help="file to write [default: stdout]")
    ap.add_argument("--list", action="store_true", help="print the model names and exit")
    a = ap.parse_args()
    if a.list:
        import torchvision.models as tvm
        print("\n".join(list(COURSE_MODELS) + tvm.list_models(module=tvm)))
        return 0
    if not a.model:
        ap.error("--model is required")  # exit 2
    shape = None
    if a.input is not None:
        if not re.fullmatch(r"[1-9][0-9]*(x[1-9][0-9]*)*", a.input):
            print(f"profile_model.py: malformed --input '{a.input}': one sample's shape as positive integers "
                  f"joined by x, e.g. 3x224x224", file=sys.stderr)
            return 2
        shape = [int(d) for d in a.input.split("x")]
    text = dump(profile(a.model, shape))
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
